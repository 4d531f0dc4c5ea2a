"""Importers by kind, for ``ets import KIND PATH``: each turns files of another tool into
execution-trace tables (:mod:`predictor.common.op_trace`).

Why a registry: the CLI, scripts and tests name an importer by kind and hand it a file or a
directory; one place maps kinds to readers and expands directories.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pandas as pd

from predictor.common.inputs import short
from predictor.common.op_trace import OpTraceFormatError


def _ets_csv(path: Path, device: str | None) -> pd.DataFrame:
    from predictor.emulator.capture import ets_csv

    return ets_csv.load_many(path, device=device)


def _per_file(loader_name: str, patterns: tuple[str, ...]) -> Callable[[Path, str | None], pd.DataFrame]:
    def load(path: Path, device: str | None) -> pd.DataFrame:
        import importlib

        loader = importlib.import_module(f"predictor.emulator.capture.{loader_name}").load
        files = sorted({f for p in patterns for f in path.glob(p)}) if path.is_dir() else [path]
        if not files:
            raise OpTraceFormatError(path, f"no files matching {', '.join(patterns)} in this directory")
        tables, seen = [], {}
        for f in files:
            table = loader(f, device=device)
            key = (str(table["device"].iloc[0]), str(table["config_id"].iloc[0]))
            if key in seen:  # e.g. a.json and a.json.gz: the one iteration would count twice
                raise OpTraceFormatError(f, f"same device and config_id {short(key, 200)} as {seen[key]}")
            seen[key] = f
            tables.append(table)
        return pd.concat(tables, ignore_index=True)

    return load


IMPORTERS: dict[str, tuple[Callable[[Path, str | None], pd.DataFrame], str]] = {
    "ets-csv": (_ets_csv, "the ETS authors' per-iteration CSV files (a file or a directory; op_codes.txt beside)"),
    "kineto": (_per_file("kineto", ("*.json", "*.json.gz")),
               "PyTorch profiler / Kineto Chrome-trace JSON (.json, .json.gz)"),
    "nsys": (_per_file("nsys", ("*.sqlite",)), "Nsight Systems SQLite export of an emit_nvtx-profiled iteration"),
}


def import_traces(kind: str, path: str | Path, device: str | None = None) -> pd.DataFrame:
    if kind not in IMPORTERS:
        raise OpTraceFormatError(path, f"unknown importer {short(kind)}; known: {', '.join(IMPORTERS)}")
    p = Path(path)
    if not p.exists():
        raise OpTraceFormatError(path, "file or directory not found")
    return IMPORTERS[kind][0](p, device)


def import_onto_zoo(path: str | Path, device: str | None = None, *, progress: bool = False):
    """ETS CSV iterations carried onto our meta capture of the same zoo config (features of
    ``ets collect``, timings of the files; :mod:`predictor.emulator.capture.align`). Returns the aligned
    traces, the per-iteration alignment report and the iterations the zoo cannot build."""
    from predictor.emulator.capture import align, ets_csv

    return align.align_onto_zoo(import_traces("ets-csv", path, device), ets_csv.zoo_config, progress=progress)

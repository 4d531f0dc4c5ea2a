"""Trace kinds by name, so commands can take ``--trace KIND:PATH`` and ``--cluster KIND:PATH``.

Why: one place maps a user-facing kind to its loader; spec errors (no colon, unknown kind) get
their own error type, listing the known kinds, separate from errors in a file's content.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

import pandas as pd

from predictor.common.inputs import LocatedError, SpecError, short
from traces import alibaba2023, gavel, generic, hydra_cases, itp, pai, philly
from traces.schema import JobTrace


class TraceKind(NamedTuple):
    load: Callable[..., JobTrace]
    help: str  # what the file is, for --help


# The one list of trace kinds: loaders, error messages and --help are derived from it.
KINDS: dict[str, TraceKind] = {
    "philly": TraceKind(philly.load, "rfold per-job CSV"),
    "philly-json": TraceKind(philly.load_json, "raw cluster_job_log JSON"),
    "pai": TraceKind(pai.load, "official pai_job_table + pai_task_table, a directory or the job table"),
    "pai-sample": TraceKind(pai.load_sample, "cedtrain task sample"),
    "itp": TraceKind(itp.load, "Microsoft ITP clusterNN.csv"),
    "hydra": TraceKind(hydra_cases.load, "Hydra deadline cases"),
    "csv": TraceKind(generic.load, "generic job table, .csv or .parquet: job_id, submit_s, num_gpus, optional "
                                   "duration_s, gpu_type, runtime_s:<GPU> ('never': cannot run there), ..."),
    "gavel": TraceKind(gavel.load, "Gavel's tab-separated trace, its msr/ one too; run time = steps / Gavel's "
                                   f"throughput, from ${gavel.THROUGHPUTS_VARIABLE} or the calibration directory"),
    "alibaba2023": TraceKind(alibaba2023.load, "Alibaba GPU 2023 pod list (openb_pod_list_*.csv); gpu_spec as a "
                                               "type constraint, gpu_milli as whole GPUs"),
}
MACHINE_KINDS: dict[str, Callable[[str | Path], pd.DataFrame]] = {
    "philly": philly.load_machine_list,
    "pai": pai.load_machine_spec,
}


def parse_spec(spec: str) -> tuple[str, str]:
    """Split ``KIND:PATH`` (the kind is everything before the first colon)."""
    kind, sep, path = str(spec).partition(":")
    kind, path = kind.strip(), path.strip()
    if not sep or not kind or not path:
        raise SpecError(f"trace spec {short(spec)} is not KIND:PATH; kinds: {', '.join(KINDS)}")
    return kind, path


def _check(kind: str, path: str, table: dict[str, Any], what: str) -> None:
    if kind not in table:
        raise SpecError(f"unknown {what} kind {short(kind)}; known: {', '.join(table)}")
    try:
        found = Path(path).exists()
    except OSError as exc:  # e.g. a name too long for the file system
        raise SpecError(f"{short(path)}: not a usable path for {what} kind {short(kind)} "
                        f"({exc.strerror or exc})") from None
    if not found:
        raise LocatedError(path, f"file not found (for {what} kind {short(kind)})")


def load_trace(spec: str, **options: Any) -> JobTrace:
    """Load ``KIND:PATH`` with that kind's loader (``options`` go to the loader)."""
    kind, path = parse_spec(spec)
    _check(kind, path, KINDS, "trace")
    return KINDS[kind].load(path, **options)


def kinds_help() -> str:
    """The trace kinds as --help lists them: ``name (what it is), ...``."""
    return ", ".join(f"{name} ({kind.help})" for name, kind in KINDS.items())


def load_machine_table(kind: str, path: str | Path) -> pd.DataFrame:
    """A cluster's node table ``node, gpu_type, num_gpus`` from a "philly" or "pai" machine list."""
    _check(kind, str(path), MACHINE_KINDS, "machine-list")
    return MACHINE_KINDS[kind](path)

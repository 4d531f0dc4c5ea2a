"""Iteration-time tables: seconds per training iteration of every catalog config on every GPU type,
true and as each predictor sees them, cached on disk — the one concept every model-based
predictor reduces to (:class:`IterationTimeTable`), and its one home.

Why: the simulator never runs a model; a job bound to a config runs ``iterations × seconds`` on a
GPU type. The truth is the config's execution trace on the (emulated) device; a predictor's table
is what its pretrained checkpoint predicts for the same op sequence — ETS, the operator-based MLP
and DNNPerf-style from the sequence alone, Habitat-style from the trace measured on its source
device (the checkpoint names it). Tables are cached as Parquet under ``$ETS_SIM_CACHE`` (default
``~/.cache/ets-sim/tables``), keyed by the method, the checkpoint files' hashes, the configs, the
devices and the emulator parameters, so a change of any of them recomputes.
"""

from __future__ import annotations

import hashlib
import os
import sys
from pathlib import Path

import numpy as np
import pandas as pd
from tqdm import tqdm

from predictor.methods import METHODS


class IterationTimeTable:
    """Seconds per training iteration for (config_id, device): what every model-based predictor emits."""

    COLUMNS = ("config_id", "device", "seconds")

    def __init__(self, table: pd.DataFrame, source: str = "<table>"):
        missing = [c for c in self.COLUMNS if c not in table.columns]
        if missing:
            raise ValueError(f"{source}: iteration-time table lacks column(s) {missing}")
        bad = ~(table["seconds"].astype(float) > 0)
        if bad.any():
            row = table[bad].iloc[0]
            raise ValueError(f"{source}: non-positive seconds for config {row.config_id!r} on {row.device!r}")
        self.source = source
        self._index = {(str(c), str(d)): float(s) for c, d, s in
                       table[list(self.COLUMNS)].itertuples(index=False)}

    def __len__(self) -> int:
        return len(self._index)

    def seconds(self, config_id: str, device: str) -> float:
        try:
            return self._index[(str(config_id), str(device))]
        except KeyError:
            raise KeyError(f"{self.source}: no iteration time for config {config_id!r} on device {device!r}") from None

    def matrix(self, config_ids, devices: list[str]) -> np.ndarray:
        return np.array([[self.seconds(c, d) for d in devices] for c in config_ids], dtype="float64")

    def to_frame(self) -> pd.DataFrame:
        return pd.DataFrame([(c, d, s) for (c, d), s in self._index.items()], columns=list(self.COLUMNS))

    def save(self, path: str | Path) -> None:
        self.to_frame().to_parquet(path, index=False)

    @classmethod
    def load(cls, path: str | Path) -> "IterationTimeTable":
        return cls(pd.read_parquet(path), str(path))


class TableError(ValueError):
    """A table that cannot be built (unknown GPU type, no checkpoint); the message says why."""


def cache_dir() -> Path:
    return Path(os.environ.get("ETS_SIM_CACHE", Path.home() / ".cache" / "ets-sim")) / "tables"


def _digest(*parts: object) -> str:
    h = hashlib.sha1()
    for part in parts:
        h.update(part if isinstance(part, bytes) else repr(part).encode())
    return h.hexdigest()[:16]


def emulated_traces(sequences: pd.DataFrame, gpu: str, params, bar: tqdm | None = None) -> pd.DataFrame:
    """Each config's trace on the emulated ``gpu``; ``bar`` advances by one per config."""
    from predictor.devices.timing import emulate

    parts = []
    for _, seq in sequences.groupby("config_id", sort=True):
        parts.append(emulate(seq, gpu, params, seed=0))
        if bar is not None:
            bar.update(1)
    return pd.concat(parts, ignore_index=True)


def _bar(total: int, desc: str, unit: str, progress: bool) -> tqdm:
    """A progress bar on stderr with an ETA for a table that is being built (minutes, once)."""
    return tqdm(total=total, desc=desc, unit=unit, file=sys.stderr, disable=not progress, leave=False)


def _seconds(summary: pd.DataFrame, gpu: str, column: str) -> pd.DataFrame:
    return pd.DataFrame({"config_id": summary["config_id"], "device": gpu, "seconds": summary[column] / 1e6})


def _cached(key: str, build, source: str) -> IterationTimeTable:
    path = cache_dir() / f"{key}.parquet"
    if path.exists():
        return IterationTimeTable(pd.read_parquet(path), f"{source} (cache {path})")
    table = build()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".tmp{os.getpid()}")
    table.to_parquet(tmp, index=False)
    os.replace(tmp, path)
    return IterationTimeTable(table, source)


def _gpu_key(gpu: str) -> str:
    from predictor.devices.specs import DeviceParamsError, device_key

    try:
        return device_key(gpu)
    except DeviceParamsError as exc:
        raise TableError(str(exc)) from None


def truth_table(sequences: pd.DataFrame, gpu_types: list[str], *, progress: bool = False) -> IterationTimeTable:
    """True seconds per iteration: each config's trace on each (emulated) GPU type.
    ``progress``: a bar on stderr while it is built (the cached table loads at once)."""
    from predictor.devices.specs import load_params
    from predictor.evaluate import iteration_truth

    params = load_params()
    types = sorted(set(gpu_types))
    keys = {g: _gpu_key(g) for g in types}
    configs = sorted(sequences["config_id"].unique())

    def build() -> pd.DataFrame:
        parts = []
        with _bar(len(types) * len(configs), f"true iteration times on {', '.join(types)} (cached after)",
                  "config", progress) as bar:
            for gpu in types:
                truth = iteration_truth(emulated_traces(sequences, keys[gpu], params, bar))
                parts.append(_seconds(truth, gpu, "true_us"))
        return pd.concat(parts, ignore_index=True)

    from predictor.devices.timing import emulator_fingerprint

    return _cached(f"truth-{_digest(configs, keys, emulator_fingerprint(params), len(sequences))}", build,
                   f"truth: emulated {', '.join(types)} (params {params.version})")


def method_table(method: str, sequences: pd.DataFrame, gpu_types: list[str],
                 checkpoint_dir: str | Path | None = None, *, progress: bool = False) -> IterationTimeTable:
    """Seconds per iteration as the pretrained ``method`` checkpoints predict them.
    ``progress``: a bar on stderr while it is built, one step per GPU type (each predicts every
    config in one batch, so splitting it finer could change the numbers)."""
    from predictor.checkpoints import CHECKPOINT_DIR, checkpoint_path, pretrained
    from predictor.devices.specs import load_params
    from predictor.ets import CheckpointError

    if method not in METHODS:
        raise TableError(f"unknown predictor method {method!r}; known: {', '.join(METHODS)}")
    directory = Path(checkpoint_dir or CHECKPOINT_DIR)
    types = sorted(set(gpu_types))
    keys = {g: _gpu_key(g) for g in types}
    files = []
    for gpu in types:
        path = checkpoint_path(keys[gpu], directory, method)
        if not path.exists():
            try:
                pretrained(gpu, directory, method)  # raises with the list of GPUs that have one
            except CheckpointError as exc:
                raise TableError(str(exc)) from None
        files.append(path.read_bytes())
    configs = sorted(sequences["config_id"].unique())
    params = load_params()

    def build() -> pd.DataFrame:
        parts = []
        with _bar(len(types), f"{method} predictions of {len(configs)} configs (cached after)", "GPU type",
                  progress) as bar:
            for gpu in types:
                bar.set_postfix_str(gpu)
                try:
                    model = pretrained(keys[gpu], directory, method)
                except CheckpointError as exc:
                    raise TableError(str(exc)) from None
                traces = sequences
                if method == "habitat":  # scales the trace measured on its source device
                    traces = emulated_traces(sequences, model.config.source_device, params)
                parts.append(_seconds(model.iteration_times(traces), gpu, "pred_us"))
                bar.update(1)
        return pd.concat(parts, ignore_index=True)

    from predictor.devices.timing import emulator_fingerprint

    return _cached(f"{method}-{_digest(*files, configs, keys, emulator_fingerprint(params), len(sequences))}", build,
                   f"{method}: pretrained checkpoints in {directory}")

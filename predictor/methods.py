"""Every iteration-time predictor by name: train one, load any checkpoint, one shape for all.

Why: ETS and its baselines share the data, the splits, the metrics, the CLI and the simulator's
iteration-time tables, so callers name a method instead of importing its module. Each method
module offers ``train(train, val, config, *, device, split, progress, log)``, a config dataclass
and ``load(path)``; what they return is an :class:`IterationTimePredictor` — one shape, as
scikit-learn's estimators share theirs (per-op methods also offer ``predict_ops``).
"""

from __future__ import annotations

import importlib
from dataclasses import fields
from pathlib import Path
from types import ModuleType
from typing import Any, Protocol, runtime_checkable

import pandas as pd

# method -> (module, config class): the one list of model methods (this module imports no torch,
# so the simulator can name them without loading any)
METHODS: dict[str, tuple[str, str]] = {
    "ets": ("predictor.ets", "TrainConfig"),
    "opbased": ("predictor.baselines.opbased", "OpBasedConfig"),
    "habitat": ("predictor.baselines.habitat", "HabitatConfig"),
    "dnnperf": ("predictor.baselines.dnnperf", "DnnPerfConfig"),
}


@runtime_checkable
class IterationTimePredictor(Protocol):
    """A trained model of any method: which method and target device, its config, training history
    and split, per-trace iteration times, and a checkpoint that :func:`load` reads back."""

    method: str
    device: str
    config: Any
    history: list[dict]
    split: dict
    intervals: Any  # predictor.intervals.IntervalCalibration, or None: no calibrated intervals

    def iteration_times(self, traces: pd.DataFrame) -> pd.DataFrame:
        """One row per trace (config_id): predicted and, where the traces have them, true µs."""

    def save(self, path: str | Path) -> Path:
        """Write the checkpoint; returns its path."""


def module(method: str) -> ModuleType:
    if method not in METHODS:
        raise ValueError(f"unknown method {method!r}; known: {', '.join(METHODS)}")
    return importlib.import_module(METHODS[method][0])


def config_class(method: str) -> type:
    return getattr(module(method), METHODS[method][1])


def make_config(method: str, **options):
    """The method's config from the options it takes; ``None`` values keep its defaults, and an
    option the method does not have is refused by name."""
    cls = config_class(method)
    known = {f.name for f in fields(cls)}
    given = {k: v for k, v in options.items() if v is not None}
    foreign = sorted(set(given) - known)
    if foreign:
        raise ValueError(f"method {method!r} has no option {', '.join(foreign)} "
                         f"(its options: {', '.join(sorted(known))})")
    return cls(**given)


def train(method: str, train_traces: pd.DataFrame, val_traces: pd.DataFrame, config, *, device: str,
          data_dir: str | Path | None = None, **options) -> IterationTimePredictor:
    """Train ``method`` for ``device``; a config with anchored targets gets the device's peaks
    (recorded in ``data_dir``'s ``peaks.json``, else the GPU catalogue's; a CPU without a record
    is refused with the command that records it)."""
    if getattr(config, "target_transform", None) == "anchored":
        from predictor.peaks import for_device

        options["peaks"] = for_device(device, data_dir)
    return module(method).train(train_traces, val_traces, config, device=device, **options)


def checkpoint_method(path: str | Path) -> str:
    """Which method wrote a checkpoint (CheckpointError for a missing or foreign file)."""
    from predictor.checkpoint_file import CheckpointError, read  # torch: only once the file is checked

    body = read(path)
    method = body.get("method") if isinstance(body, dict) else None
    if method not in METHODS:
        raise CheckpointError(f"{path}: not a predictor checkpoint of a known method "
                              f"(method {method!r}; known: {', '.join(METHODS)})")
    return method


def load(path: str | Path) -> IterationTimePredictor:
    """Any method's checkpoint."""
    return module(checkpoint_method(path)).load(path)

"""Every iteration-time predictor by name: train one, load any checkpoint, one shape for all.

Why: ETS and its baselines share the data, the splits, the metrics, the CLI and the simulator's
iteration-time tables, so callers name a method instead of importing its module. The methods live
side by side in this package (``ets``, ``opbased``, ``habitat``, ``dnnperf``); each module offers
``train(train, val, config, *, device, split, progress, log)``, a config dataclass with the shared
fit options and ``load(path)``, and what it returns subclasses
:class:`predictor.methods.base.TrainedPredictor` — one shape, as scikit-learn's estimators share
``BaseEstimator`` (per-op methods also offer ``predict_ops``); the base imports no torch, so the
simulator names the shape without loading it. What differs between methods
is declared once, as capabilities (:class:`Method`), and callers ask the capability, never the name.

To add a method: a module here with ``train``, ``load`` and a config dataclass, and its entry in
:data:`METHODS` with its capabilities (docs/extending.md); the CLI's ``--method``, the
simulator's ``--predictor`` and the conformance test (tests/predictor/methods/test_methods.py)
follow from the entry.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, fields
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

import pandas as pd

if TYPE_CHECKING:
    from predictor.methods.base import TrainedPredictor


@dataclass(frozen=True)
class Method:
    """Where a method lives and what it can do (this module imports no torch, so the simulator can
    name methods without loading any)."""

    module: str
    config: str  # its config dataclass, in ``module``
    label: str  # how messages and tables name it
    baseline: bool = True  # one of the baselines ETS is compared against
    reads_source_device: bool = False  # predicts a device by scaling traces measured on another (Habitat)
    fine_tunable: bool = False  # continues from a checkpoint on a few traces (predictor.finetune)


# The one list of model methods.
METHODS: dict[str, Method] = {
    "ets": Method("predictor.methods.ets", "EtsConfig", "ETS", baseline=False, fine_tunable=True),
    "opbased": Method("predictor.methods.opbased", "OpBasedConfig", "operator-based"),
    "habitat": Method("predictor.methods.habitat", "HabitatConfig", "Habitat-style", reads_source_device=True),
    "dnnperf": Method("predictor.methods.dnnperf", "DnnPerfConfig", "DNNPerf-style"),
}


def info(method: str) -> Method:
    """The capabilities of ``method`` (ValueError naming the known ones for another name)."""
    if method not in METHODS:
        raise ValueError(f"unknown method {method!r}; known: {', '.join(METHODS)}")
    return METHODS[method]


def single_device_methods() -> tuple[str, ...]:
    """The methods that learn a device from its own traces alone (all but source-device readers)."""
    return tuple(m for m, spec in METHODS.items() if not spec.reads_source_device)


def module(method: str) -> ModuleType:
    return importlib.import_module(info(method).module)


def config_class(method: str) -> type:
    return getattr(module(method), info(method).config)


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
    from predictor.common.inputs import Checker
    from predictor.methods.checks import checked_config

    return checked_config(cls, given, Checker(lambda field: f"{method} option {field!r}" if field
                                              else f"{method} options", ValueError))


def train(method: str, train_traces: pd.DataFrame, val_traces: pd.DataFrame, config, *, device: str,
          data_dir: str | Path | None = None, **options) -> TrainedPredictor:
    """Train ``method`` for ``device``; a config with anchored targets gets the device's peaks
    (recorded in ``data_dir``'s ``peaks.json``, else the GPU catalogue's; a CPU without a record
    is refused with the command that records it)."""
    if getattr(config, "target_transform", None) == "anchored":
        from predictor.emulator.peaks import for_device

        options["peaks"] = for_device(device, data_dir)
    return module(method).train(train_traces, val_traces, config, device=device, **options)


def checkpoint_method(path: str | Path) -> str:
    """Which method wrote a checkpoint (CheckpointError for a missing or foreign file)."""
    from predictor.checkpoint_file import read  # torch: only once the file is checked

    return body_method(read(path), path)


def body_method(body: dict, path: str | Path) -> str:
    """The method named by a checkpoint's body (CheckpointError for an unknown one)."""
    from predictor.checkpoint_file import CheckpointError
    from predictor.common.inputs import short

    method = body.get("method") if isinstance(body, dict) else None
    if not isinstance(method, str) or method not in METHODS:
        raise CheckpointError(f"{path}: not a predictor checkpoint of a known method "
                              f"(method {short(method)}; known: {', '.join(METHODS)})")
    return method


def load(path: str | Path) -> TrainedPredictor:
    """Any method's checkpoint (its file read once)."""
    from predictor.checkpoint_file import read

    return from_body(read(path), path)


def from_body(body: dict, path: str | Path) -> TrainedPredictor:
    """The model of any method a checkpoint's body (:func:`predictor.checkpoint_file.read`)
    describes, every field checked first; CheckpointError naming the file and field otherwise."""
    from predictor.methods.base import checked_body

    method = body_method(body, path)
    predictor_class = module(method).load.__self__  # each module's ``load`` is its predictor class's
    return predictor_class.from_body(checked_body(body, path, method), path)

"""Host cost of one op in an eager forward under ``torch.no_grad()``: what an inference call
spends per kernel it launches, fitted on KernelBench level 1's cheapest single-op calls.

Why: the host table of :mod:`predictor.emulator.devices.timing` (``host_us`` × ``host_scale``) is fitted to
training iterations, whose per-op host time also carries autograd's graph recording, the training
loop and the input pipeline: three to six times what an inference call pays. Priced that way,
small whole models under ``no_grad`` (KernelBench level 3) came out twice too slow. A forward call
timed alone (CUDA events around the call, synchronised, as KernelBench does) costs the host one
dispatch and one launch per kernel; the cheapest single-op calls of a host measure exactly that
(plus a kernel of a few µs, :data:`predictor.emulator.devices.timing.MIN_KERNEL_US`, subtracted).

Per GPU: the 1st percentile of its level-1 call times (``FLOOR_QUANTILE``) minus the shortest
kernel — a property of the machine that timed them (its CPU, driver, Python), named by its GPU.
A GPU whose floor is above ``PLAUSIBLE_US`` is left out and named (no single eager op costs a host
that long; such a set timed something else, e.g. the A800 fork's 1.9 ms floor). Any other GPU,
and every GPU checked leave-one-GPU-out, gets the median of the others (``default``).

Written by ``ets devices calibrate`` to ``inference_host.json`` beside this module.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

import numpy as np
import pandas as pd

from predictor.common.documents import read_document
from predictor.common.inputs import InputError
from predictor.emulator.devices.timing import MIN_KERNEL_US

FILE = Path(__file__).with_name("inference_host.json")
FORMAT = 1
FLOOR_QUANTILE = 0.01
PLAUSIBLE_US = 100.0
MIN_HOST_US = 1.0


@dataclass(frozen=True)
class InferenceHost:
    """Per-op host µs of an eager no_grad forward, per GPU (``per_gpu``), else ``default``."""

    per_gpu: dict[str, float]
    default: float
    excluded: dict[str, str] = field(default_factory=dict)
    source: str = ""

    def per_op_us(self, gpu: str, *, without: bool = False) -> float:
        """The GPU's own measured cost, or (unmeasured, or ``without`` it: leave-one-GPU-out)
        the median of the other measured GPUs."""
        if gpu in self.per_gpu and not without:
            return self.per_gpu[gpu]
        others = [v for g, v in self.per_gpu.items() if g != gpu]
        return float(np.median(others)) if others else self.default

    def origin(self, gpu: str) -> str:
        return "measured" if gpu in self.per_gpu else "median of the measured GPUs"


def fit(level1: pd.DataFrame, source: str = "") -> InferenceHost:
    """From KernelBench level-1 timings (``device``, ``measured_us``; module docstring)."""
    per_gpu: dict[str, float] = {}
    excluded: dict[str, str] = {}
    for gpu, times in level1.groupby("device", sort=True)["measured_us"]:
        floor = float(np.quantile(times.to_numpy(float), FLOOR_QUANTILE))
        if floor > PLAUSIBLE_US:
            excluded[str(gpu)] = (f"cheapest single-op call {floor:,.0f} µs (> {PLAUSIBLE_US:.0f} µs: not a host's "
                                  "dispatch cost)")
            continue
        per_gpu[str(gpu)] = round(max(floor - MIN_KERNEL_US, MIN_HOST_US), 3)
    if not per_gpu:
        raise InputError("no KernelBench level-1 timings with a plausible call floor to fit the inference host")
    return InferenceHost(per_gpu, float(np.median(list(per_gpu.values()))), excluded, source)


def save(host: InferenceHost, path: str | Path = FILE) -> Path:
    path = Path(path)
    body = {"format": FORMAT, "source": host.source, "quantile": FLOOR_QUANTILE, "per_gpu_us": host.per_gpu,
            "default_us": host.default, "excluded": host.excluded}
    path.write_text(json.dumps(body, indent=1, sort_keys=True) + "\n")
    return path


def load(path: str | Path = FILE) -> InferenceHost:
    """The saved costs; a broken file is one :class:`InputError` naming it and the field."""
    path = Path(path)
    body = read_document(path, "inference-host file (refit with `ets devices calibrate`)", InputError,
                         kind="json")
    if not isinstance(body, dict) or body.get("format") != FORMAT:
        raise InputError(f"{path}: not an inference-host file of format {FORMAT}; refit with "
                         "`ets devices calibrate`")
    per_gpu = body.get("per_gpu_us")
    default = body.get("default_us")
    if not isinstance(per_gpu, dict) or not all(_positive(v) for v in per_gpu.values()):
        raise InputError(f"{path}: field 'per_gpu_us' must map GPU names to positive numbers")
    if not _positive(default):
        raise InputError(f"{path}: field 'default_us' must be a positive number")
    excluded = body.get("excluded") or {}
    return InferenceHost({str(k): float(v) for k, v in per_gpu.items()}, float(default),
                         {str(k): str(v) for k, v in excluded.items()} if isinstance(excluded, dict) else {},
                         str(body.get("source", "")))


def _positive(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and np.isfinite(value) and value > 0


@lru_cache(maxsize=1)
def shipped() -> InferenceHost:
    return load(FILE)


INFERENCE_SUFFIX = ":inference"  # the config id of an inference capture (capture.model_file.config_id_of)


def for_trace(trace: pd.DataFrame, gpu: str) -> float | None:
    """The shipped per-kernel host cost on ``gpu`` when ``trace`` is an inference capture, else None
    (a training step: the emulator's host table)."""
    if not len(trace) or not str(trace["config_id"].iloc[0]).endswith(INFERENCE_SUFFIX):
        return None
    return shipped().per_op_us(gpu)

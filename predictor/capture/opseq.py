"""Capture a model configuration's training iteration: the op sequence (meta device) or a real
CPU execution trace, as execution-trace tables.

Why: the op sequence is hardware independent (order, phases, shapes, FLOPs, bytes, host-side
dispatch cost) and cheap — the meta device allocates nothing and computes nothing — while the
CPU trace measures real op durations and the framework overhead between ops on this machine.
Both come from the same profiler extraction (:mod:`predictor.capture.profile`), so for one
config they list the same ops in the same order and phases. One exception is handled here: the
meta device has no fused RNN kernels and decomposes an LSTM into per-time-step ops that no real
device runs (1,029 ops instead of 68 for a small LSTM LM), so models with RNN modules have their
op sequence captured by one CPU iteration (marked in ``source``).
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import torch

from predictor.capture.profile import extract_ops, median_timings, params_of, run_profiled
from predictor.trace_table import validate
from predictor.zoo.config import ModelBuildError, ModelConfig
from predictor.zoo.registry import build, make_optimizer


def capture(config: ModelConfig, device: str = "meta", *, warmup: int | None = None,
            iterations: int | None = None) -> pd.DataFrame:
    """One execution trace of ``config`` on ``device`` ("meta" or "cpu").

    meta: 1 warm-up + 1 profiled iteration (the op sequence; durations are dispatch times only).
    cpu: 2 warm-ups + 5 profiled iterations by default; per op the median duration and gap.
    """
    if device not in ("meta", "cpu"):
        raise ValueError(f"capture device must be 'meta' or 'cpu', got {device!r}")
    warmup = (1 if device == "meta" else 2) if warmup is None else warmup
    iterations = (1 if device == "meta" else 5) if iterations is None else iterations
    run_on = device
    if device == "meta" and _has_rnn(config):
        run_on = "cpu"  # the meta device has no fused RNN kernel: it decomposes LSTMs per time step
    try:
        workload = build(config, run_on)
        optimizer = make_optimizer(config, workload.model.parameters())
        inputs, targets = workload.inputs(torch.device(run_on))
    except ModelBuildError:
        raise
    except Exception as exc:  # torchvision raises many kinds for impossible configs
        raise ModelBuildError(f"{config.config_id}: cannot build: {type(exc).__name__}: {exc}") from None
    workload.model.train()

    def step() -> None:
        optimizer.zero_grad(set_to_none=True)
        workload.loss(workload.model(*inputs), targets).backward()
        optimizer.step()

    for _ in range(warmup):
        step()
    measured = [extract_ops(top, config.dtype) for top in run_profiled(step, iterations)]
    rows = median_timings(measured, config.config_id)
    return validate(pd.DataFrame({
        "config_id": config.config_id, "device": device, "family": config.family, "model": config.model,
        "idx": np.arange(len(rows)),
        "op": [r.op for r, _, _ in rows],
        "phase": [r.phase for r, _, _ in rows],
        "input_shapes": [json.dumps(r.shapes, separators=(",", ":")) for r, _, _ in rows],
        "params": [params_of(r) for r, _, _ in rows],
        "flops": [r.flops for r, _, _ in rows], "bytes": [r.bytes for r, _, _ in rows],
        "dtype": config.dtype, "batch": config.batch, "input_size": config.input_size,
        "cpu_us": [d for _, d, _ in rows], "duration_us": [d for _, d, _ in rows],
        "gap_us": [g for _, _, g in rows], "kernels": 0,
        "source": f"capture:{device}" + (" (run on cpu: RNN)" if run_on != device else ""),
    }), config.config_id)


def _has_rnn(config: ModelConfig) -> bool:
    """Whether the model holds an RNN module (built on meta: no memory, no compute)."""
    model = build(config, "meta").model
    return any(isinstance(m, torch.nn.RNNBase) for m in model.modules())

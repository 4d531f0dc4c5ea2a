"""Capture a model configuration's training iteration: the op sequence (meta device) or a real
execution trace (CPU, or CUDA when a GPU is present), as execution-trace tables.

Why: the op sequence is hardware independent (order, phases, shapes, FLOPs, bytes, host-side
dispatch cost) and cheap — the meta device allocates nothing and computes nothing — while a real
trace measures op durations and the framework overhead between ops. All come from the same
profiler extraction (:mod:`predictor.emulator.capture.profile`), so for one config they list the same ops
in the same order and phases.

* Warm-up: first one optimizer step on zero gradients, which creates the optimizer state
  (momentum buffers, Adam moments) without a forward or backward pass, so every profiled
  iteration is a steady-state one; then ``warmup`` full iterations (0 on meta, where there is
  nothing to warm: no allocator, no kernel caches).
* CUDA: the profiled iterations are exported as a Chrome trace and read back with the Kineto
  importer (:mod:`predictor.emulator.capture.kineto`): an op's kernels are those its runtime launch calls
  started; duration = their summed time; gap = next op's first kernel start − (this op's first
  kernel start + its duration), as ETS defines it. The importer's op list must equal the
  extraction's, op for op, or the capture fails (never a silent misalignment).
* RNNs: the meta device has no fused RNN kernels and decomposes an LSTM into per-time-step ops
  that no real device runs (1,029 ops instead of 68 for a small LSTM LM), so models with RNN
  modules have their op sequence captured by one CPU iteration (marked in ``source``).
"""

from __future__ import annotations

import json
import statistics
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from predictor.common.op_trace import validate
from predictor.emulator.capture import amp, costs, kineto
from predictor.emulator.capture.profile import extract_ops, median_timings, params_of, run_profiled
from predictor.emulator.zoo.config import AMP, ModelBuildError, ModelConfig
from predictor.emulator.zoo.registry import build, make_optimizer


def capture(config: ModelConfig, device: str = "meta", *, warmup: int | None = None,
            iterations: int | None = None) -> pd.DataFrame:
    """One execution trace of ``config`` on ``device`` ("meta", "cpu" or "cuda").

    meta: 1 profiled iteration (the op sequence; durations are dispatch times only).
    cpu, cuda: 2 warm-ups + 5 profiled iterations by default; per op the median duration and gap.
    """
    if device not in ("meta", "cpu", "cuda"):
        raise ValueError(f"capture device must be 'meta', 'cpu' or 'cuda', got {device!r}")
    if config.dtype == AMP and device != "meta":
        raise ModelBuildError(f"{config.config_id}: AMP is emulated on the meta device only (its op sequence is "
                              "rewritten as autocast runs it); capture float32 or float16 on a real device")
    if device == "cuda" and not torch.cuda.is_available():
        raise ModelBuildError(f"{config.config_id}: device 'cuda' requested but torch sees no CUDA GPU")
    warmup = (0 if device == "meta" else 2) if warmup is None else warmup
    iterations = (1 if device == "meta" else 5) if iterations is None else iterations
    run_on = device
    try:
        workload = build(config, device)  # built once (on meta: no memory, no compute)
        if device == "meta" and _has_rnn(workload.model):
            run_on = "cpu"  # the meta device has no fused RNN kernel: it decomposes LSTMs per time step
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

    element_dtype = "float32" if config.dtype == AMP else config.dtype
    _create_optimizer_state(optimizer)
    for _ in range(warmup):
        step()
    timings = None
    if device == "cuda":
        with tempfile.TemporaryDirectory() as tmp:
            chrome = str(Path(tmp) / f"{config.model}.json")
            tops = run_profiled(step, iterations, cuda=True, chrome_trace=chrome)
            measured = [extract_ops(top, element_dtype) for top in tops]
            tables = kineto.load_steps(chrome, list(range(len(measured))))
            timings = [_kernel_timings(table, k, ops, config.config_id)
                       for k, (table, ops) in enumerate(zip(tables, measured))]
    else:
        measured = [extract_ops(top, element_dtype) for top in run_profiled(step, iterations)]
    rows = median_timings(measured, config.config_id, timings)
    _rnn_flops(rows, workload.model)
    host = [statistics.median(r.end_us - r.start_us for r in (it[i] for it in measured))
            for i in range(len(rows))]
    kernels = timings[-1][2] if timings else 0
    table = ops_table(rows, config_id=config.config_id, device=recorded_device(device), family=config.family,
                      model=config.model, dtype=element_dtype, batch=config.batch, input_size=config.input_size,
                      cpu_us=host, kernels=kernels,
                      source=f"capture:{device}" + (" (run on cpu: RNN)" if run_on != device else ""))
    if config.dtype == AMP:
        table = amp.autocast_trace(table)
    return validate(table, config.config_id)


def ops_table(rows: list, *, config_id: str, device: str, family: str, model: str, dtype: str, batch: int,
              input_size: int, cpu_us: list[float], kernels, source: str) -> pd.DataFrame:
    """The execution-trace table of profiled ops (:func:`predictor.emulator.capture.profile.median_timings`
    rows: record, duration, gap), not yet validated."""
    return pd.DataFrame({
        "config_id": config_id, "device": device, "family": family, "model": model,
        "idx": np.arange(len(rows)),
        "op": [r.op for r, _, _ in rows],
        "phase": [r.phase for r, _, _ in rows],
        "input_shapes": [json.dumps(r.shapes, separators=(",", ":")) for r, _, _ in rows],
        "params": [params_of(r) for r, _, _ in rows],
        "flops": [r.flops for r, _, _ in rows], "bytes": [r.bytes for r, _, _ in rows],
        "dtype": dtype, "batch": batch, "input_size": input_size,
        "cpu_us": cpu_us, "duration_us": [d for _, d, _ in rows],
        "gap_us": [g for _, _, g in rows], "kernels": kernels, "source": source,
    })


def _rnn_flops(rows: list, model: torch.nn.Module) -> None:
    """FLOPs of the fused forward recurrent ops (``lstm``, ``gru``, ``rnn_tanh``, ``rnn_relu``),
    from the RNN modules in call order (the profiler records the op's input but not its weight
    list)."""
    modules = [m for m in model.modules() if isinstance(m, torch.nn.RNNBase)]
    forward = [r for r, _, _ in rows if costs.op_class(r.op) == "lstm" and r.phase == "forward"]
    for record, module in zip(forward, modules):
        if record.shapes and len(record.shapes[0]) == 3:
            record.flops = costs.flops(record.op, [record.shapes[0]], [], hidden_size=module.hidden_size,
                                       num_layers=module.num_layers, bidirectional=module.bidirectional,
                                       batch_first=module.batch_first)


def recorded_device(device: str) -> str:
    """The device name a capture records: "cuda" becomes "cuda:<GPU name>" (datasets from
    different GPUs must not mix); "meta" and "cpu" stay."""
    if device == "cuda" and torch.cuda.is_available():
        return f"cuda:{torch.cuda.get_device_name()}"
    return device


def _create_optimizer_state(optimizer: torch.optim.Optimizer) -> None:
    """One optimizer step on zero gradients: creates its state, so later steps are steady state."""
    params = [p for group in optimizer.param_groups for p in group["params"] if p.requires_grad]
    for p in params:
        p.grad = torch.zeros_like(p)
    with torch.no_grad():
        optimizer.step()
    optimizer.zero_grad(set_to_none=True)


def _kernel_timings(table: pd.DataFrame, k: int, ops: list, source: str) -> tuple[list, list, list]:
    """Iteration ``k``'s per-op kernel time, ETS gap and kernel count from its table of the exported
    trace (:func:`kineto.load_steps`), checked to list the ops the profiler extraction lists."""
    names = [r.op for r in ops]
    if table["op"].tolist() != names:
        diff = next((i for i, (a, b) in enumerate(zip(table["op"], names)) if a != b), min(len(table), len(names)))
        raise RuntimeError(f"{source}: iteration {k}: the kernel trace lists {len(table)} ops and the profiler "
                           f"extraction {len(names)}; first difference at op {diff}")
    return table["duration_us"].tolist(), table["gap_us"].tolist(), table["kernels"].tolist()


def _has_rnn(model: torch.nn.Module) -> bool:
    """Whether the model holds an RNN module."""
    return any(isinstance(m, torch.nn.RNNBase) for m in model.modules())

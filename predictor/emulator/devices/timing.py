"""Emulated GPU execution: kernel times from FLOPs and bytes, laid on an asynchronous host/GPU
timeline, so that framework overhead emerges where the host is slower than the GPU.

Why: the predictor needs per-device execution traces and the simulator true iteration times on
GPU types we do not have. A mechanism fitted to measurements (not a random overhead draw) keeps
the emulated traces honest: small kernels leave the GPU waiting on Python and the dispatcher,
large ones hide the host entirely.

Design decisions: ops of the classes the learned kernel model covers
(:mod:`predictor.emulator.devices.kernels`, mapping in :mod:`predictor.emulator.devices.problems`)
take its prediction, each kernel at least ``MIN_KERNEL_US``; a saturating roofline prices the rest
(LSTM, embedding) and every op when no model ships. Host time per op comes from fitted per-phase,
per-class tables (an eager ``no_grad`` forward: :mod:`predictor.emulator.devices.inference_host`).
The timeline's recursion has a closed form per segment (s = D + cummax(H − D)), which keeps
calibration (:mod:`predictor.emulator.devices.calibrate`) fast. Noise (``noise=True``) is seeded by
(config_id, device, seed); calibration uses ``noise=False``.

Formulas, kernel counts, timeline and noise: docs/gpus.md, 'The emulated timing model'.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from predictor.common.op_trace import validate
from predictor.emulator.capture.costs import GEMM_CLASSES, kernel_free, op_class
from predictor.emulator.devices import kernels as kernel_model
from predictor.emulator.devices.problems import trace_problems
from predictor.emulator.devices.specs import DeviceParams, DeviceSpec, regime_host_factor
from predictor.emulator.zoo.config import stable_int

MIN_KERNEL_US = 2.0
KERNEL_NOISE = 0.02
HOST_NOISE = 0.05
HALF = ("float16", "bfloat16")


@dataclass(frozen=True)
class OpArrays:
    """One op sequence as arrays, precomputed once (calibration evaluates it many times)."""

    flops: np.ndarray
    bytes: np.ndarray
    kernels: np.ndarray  # estimated kernels per op (0: no kernel)
    phase: np.ndarray  # object array of phase names
    op_class: np.ndarray  # object array of op classes
    gemm: np.ndarray  # bool: compute class with a tensor-core path
    conv: np.ndarray  # bool
    half: np.ndarray  # bool per op: float16 / bfloat16 (AMP mixes them with float32 ops)
    sync_after: int  # index of the last forward op (-1: none)
    problems: pd.DataFrame  # the kernels the learned model prices (predictor.emulator.devices.problems)

    @classmethod
    def from_trace(cls, trace: pd.DataFrame) -> OpArrays:
        ops = trace["op"].to_numpy()
        classes = np.array([op_class(o) for o in ops], dtype=object)
        flops = trace["flops"].to_numpy(dtype=float)
        nbytes = trace["bytes"].to_numpy(dtype=float)
        phase = trace["phase"].to_numpy().astype(object)
        free = np.array([kernel_free(o) for o in ops], dtype=bool)
        kernels = np.where(((flops > 0) | (nbytes > 0)) & ~free, 1, 0)
        backward_conv = (classes == "conv") & (phase == "backward")
        kernels = np.where(backward_conv & (kernels > 0), 2, kernels)
        seq = trace["input_size"].to_numpy(dtype=int)
        kernels = np.where((classes == "lstm") & (kernels > 0), 2 * np.maximum(seq, 1), kernels)
        forward = np.flatnonzero(phase == "forward")
        problems = trace_problems(trace, kernels == 0)
        if len(problems):
            counts = np.bincount(problems["row"].to_numpy(int), minlength=len(ops))
            kernels = np.where(counts > 0, np.maximum(kernels, counts), kernels)
        return cls(flops, nbytes, kernels.astype(int), phase, classes, np.isin(classes, GEMM_CLASSES),
                   classes == "conv", np.isin(trace["dtype"].astype(str).to_numpy(), HALF),
                   int(forward[-1]) if len(forward) else -1, problems)


def learned_us(ops: OpArrays, spec: DeviceSpec, model: kernel_model.KernelModel | None,
               allow_tf32: bool = False) -> np.ndarray:
    """Kernel time per op from the learned model (NaN for ops it does not price); float32
    matmuls in TF32 when ``allow_tf32`` (convolutions always where the GPU has TF32)."""
    out = np.full(len(ops.phase), np.nan)
    if model is None or not len(ops.problems):
        return out
    per_kernel = np.maximum(model.predict_us(ops.problems, spec, allow_tf32), MIN_KERNEL_US)
    rows = ops.problems["row"].to_numpy(int)
    known = np.isfinite(per_kernel)
    sums = np.bincount(rows[known], weights=per_kernel[known], minlength=len(out))
    covered = np.bincount(rows[known], minlength=len(out)) > 0
    out[covered] = sums[covered]
    return out


def kernel_us(ops: OpArrays, spec: DeviceSpec, learned: np.ndarray | None = None) -> np.ndarray:
    """Kernel time per op (µs) without noise; 0 for ops that launch no kernel. ``learned``:
    :func:`learned_us` (computed once: it does not depend on the fitted fields), which replaces
    the roofline where finite."""
    fp32 = spec.fp32_tflops
    conv_rate = spec.tf32_tflops * spec.tensor_eff if spec.tf32_tflops > 0 else fp32
    rate = np.where(ops.half & ops.gemm, spec.fp16_tflops * spec.tensor_eff, np.where(ops.conv, conv_rate, fp32))
    compute = (ops.flops + spec.compute_half_mflop * 1e6) / (rate * 1e12 * spec.compute_eff) * 1e6
    memory = (ops.bytes + spec.memory_half_kb * 1e3) / (spec.memory_gbs * 1e9 * spec.memory_eff) * 1e6
    work = np.maximum(compute, memory)
    time = spec.kernel_latency_us * ops.kernels + work
    if learned is not None:
        time = np.where(np.isfinite(learned), learned, time)
    return np.where(ops.kernels > 0, time, 0.0)


def host_us(ops: OpArrays, host: dict[str, dict[str, float]], spec: DeviceSpec) -> np.ndarray:
    """Host-side cost per op (µs): the measured cost of its phase and op class, scaled."""
    out = np.empty(len(ops.phase))
    for i, (p, c) in enumerate(zip(ops.phase, ops.op_class)):
        table = host.get(p, {})
        out[i] = table.get(c, table.get("default", 0.0))
    return out * spec.host_scale


def timeline(duration: np.ndarray, host: np.ndarray, sync_after: int = -1) -> tuple[np.ndarray, np.ndarray]:
    """GPU start of every op and the ETS gap after each; see the module docstring."""
    n = len(duration)
    start = np.zeros(n)
    h0 = g0 = 0.0
    bounds = [0, sync_after + 1, n] if 0 <= sync_after < n - 1 else [0, n]
    for a, b in zip(bounds, bounds[1:]):
        d = duration[a:b]
        issued = h0 + np.cumsum(host[a:b])
        before = np.concatenate(([0.0], np.cumsum(d)[:-1]))
        s = before + np.maximum(g0, np.maximum.accumulate(issued - before))
        start[a:b] = s
        g0 = s[-1] + d[-1]
        h0 = max(issued[-1], g0)  # the host waits for the GPU (loss read-out / end of step)
    gap = np.zeros(n)
    busy = np.flatnonzero(duration > 0)
    if len(busy) > 1:
        # the GPU runs one op at a time, so a gap is >= 0; clipping removes float rounding only
        gap[busy[:-1]] = np.maximum(start[busy[1:]] - (start[busy[:-1]] + duration[busy[:-1]]), 0.0)
    return start, gap


def emulate(trace: pd.DataFrame, device: str, params: DeviceParams, *, seed: int = 0,
            noise: bool = True, regime: str = "plain",
            model: kernel_model.KernelModel | None | str = "shipped", allow_tf32: bool = False,
            inference_host_us: float | None = None) -> pd.DataFrame:
    """The execution trace of one op sequence (one config_id) on an emulated device; kernel times
    from the shipped learned kernel model where it covers the op (:func:`kernel_us`); host times
    of the measurement ``regime`` (``plain``: no profiler, the simulator's truth; ``nsys``: under
    Nsight Systems with NVTX ranges, like the real ETS traces). ``model``: the kernel model
    (default the shipped one; None: the roofline alone, e.g. for synthetic test data).
    ``inference_host_us``: an eager forward under ``no_grad`` — this host cost for every op that
    launches a kernel, none for the others (:mod:`predictor.emulator.devices.inference_host`), instead of
    the training host table."""
    if trace["config_id"].nunique() != 1:
        raise ValueError("emulate takes the op sequence of one config; got "
                         f"{trace['config_id'].nunique()} configs")
    trace = trace.sort_values("idx").reset_index(drop=True)
    return emulate_arrays(trace, OpArrays.from_trace(trace), device, params, seed=seed, noise=noise, regime=regime,
                          model=model, allow_tf32=allow_tf32, inference_host_us=inference_host_us)


def emulate_arrays(trace: pd.DataFrame, ops: OpArrays, device: str, params: DeviceParams, *, seed: int = 0,
                   noise: bool = True, regime: str = "plain",
                   model: kernel_model.KernelModel | None | str = "shipped", allow_tf32: bool = False,
                   inference_host_us: float | None = None) -> pd.DataFrame:
    """:func:`emulate` of one config's trace, sorted by ``idx``, whose :class:`OpArrays` are built
    already: one op sequence emulated on several devices builds them once (they do not depend on
    the device)."""
    spec = params.device(device)
    model = kernel_model.shipped() if isinstance(model, str) else model
    d = kernel_us(ops, spec, learned_us(ops, spec, model, allow_tf32))
    if inference_host_us is None:
        h = host_us(ops, params.host_us, spec)
    else:
        h = np.where(ops.kernels > 0, float(inference_host_us), 0.0)
    h = h * regime_host_factor(params, regime)
    if noise:
        rng = np.random.default_rng(stable_int(str(trace["config_id"].iloc[0]), spec.name, seed))
        d = d * np.exp(KERNEL_NOISE * rng.standard_normal(len(d)))
        h = h * np.exp(HOST_NOISE * rng.standard_normal(len(h)))
    _, gap = timeline(d, h, ops.sync_after)
    out = trace.copy()
    out["device"] = spec.emulated_name
    out["duration_us"] = d
    out["gap_us"] = gap
    out["cpu_us"] = h
    out["kernels"] = ops.kernels
    tf32 = ", TF32 matmuls" if allow_tf32 else ""
    out["source"] = f"{spec.emulated_name} ({regime} regime{tf32}, params {params.version}, seed {seed})"
    # no ceiling on op times: a config too big for any GPU still gets its (absurd) emulated time
    return validate(out, f"{trace['config_id'].iloc[0]} on {spec.emulated_name}", ceiling_us=np.inf)


def emulator_fingerprint(params: DeviceParams) -> str:
    """A digest of everything emulation depends on — the parameters and the shipped kernel model
    file — for caches keyed by the emulator (a refit the same day must not reuse old tables)."""
    import hashlib

    h = hashlib.sha1(repr(params).encode())
    if kernel_model.MODEL_FILE.exists():
        h.update(kernel_model.MODEL_FILE.read_bytes())
    return h.hexdigest()[:16]

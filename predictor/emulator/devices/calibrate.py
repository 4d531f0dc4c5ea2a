"""Fit every emulated device's host side to measured iteration times and report the fit error
honestly.

Why: an emulated GPU is only as good as its agreement with real ones. Kernel times come from the
learned kernel model (:mod:`predictor.emulator.devices.kernels`, fitted on real kernels and validated
leave-one-GPU-out on its own); what is left to fit is the host side of the timeline — how fast the
framework issues ops, which decides the gaps — and, for wall-clock sources, the step time outside
the execution trace. Targets:

* **plain** regime (no profiler): Gavel K80/P100/V100 and Sia/Pollux T4/V100/A100/RTX6000/
  RTX2080Ti step times, SPREAD T4/RTX2080Ti per-iteration times, NeuSight A100-80GB/V100
  transformer iterations (forward + backward only: NeuSight's times exclude the optimizer step);
* **nsys** regime: the real ETS T4 and 2080Ti traces (Nsight Systems with per-op NVTX ranges,
  which slows the host), whose iteration time is Σ(kernel + gap) and whose per-op host durations
  give the host cost table.

Procedure:

1. Host costs: median measured host duration (``cpu_us``) of the real ETS T4 ops per phase and
   op class (classes with fewer than 20 ops fall back to the phase median, "default").
2. Op sequences of every target's config on the meta device (cached in a Parquet file); learned
   kernel times per target, once (they depend on the spec sheet only).
3. Per device, least squares on log(predicted / measured) over its targets. Free parameters: the
   fitted fields of :class:`~predictor.emulator.devices.specs.DeviceSpec` (in log space, with a weak
   prior pulling them towards the priors so that a device with few targets stays sane; the
   roofline fields only price the op classes the kernel model does not cover, LSTM and
   embedding), one step overhead per wall-clock source (Gavel, Sia, SPREAD: input pipeline,
   copies, loss read-out), for SPREAD (DistributedDataParallel over gloo even on one GPU) a
   gradient all-reduce cost per GB of gradients, and one host multiplier per source other than the device's primary
   one (the plain source with most targets), weak prior at 1. For ETS that multiplier is the nsys
   regime's host slow-down; its geometric mean over the GPUs measured both ways is
   ``nsys_host_factor``.
4. Leave-one-model-out: refit without every target of one model (all sources, all batches) and
   predict them; per device and per source the median and mean absolute relative error.
5. Op level (ETS traces): per file, the kernel time summed per (phase, op class), emulated
   versus real, for the classes where both list the same number of kernel-running ops (a check of
   the kernel model inside whole iterations, reported, not fitted).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
from scipy.optimize import least_squares
from tqdm import tqdm

from predictor.common.gpus import spec_only_entry
from predictor.common.op_trace import PHASES
from predictor.emulator.capture import cache as capture_cache
from predictor.emulator.capture.costs import op_class
from predictor.emulator.capture.ets_csv import ETS_DEVICES
from predictor.emulator.devices import kernels as kernel_model
from predictor.emulator.devices.measurements import SOURCES, load_measurements, workload_config
from predictor.emulator.devices.neusight_ops import LOSS_OPS
from predictor.emulator.devices.specs import FITTED_FIELDS, DeviceParams, DeviceSpec, prior_params, spec_sheets
from predictor.emulator.devices.timing import OpArrays, host_us, kernel_us, learned_us, timeline
from predictor.emulator.zoo.config import ModelConfig

# residual weight of log(param / prior): a factor e (2.7x) off the prior costs as much as 100 % error
PRIOR_WEIGHT = 1.0
MIN_CLASS_OPS = 20
BOUNDS = {"compute_eff": (0.02, 2.0), "compute_half_mflop": (0.001, 1e4), "tensor_eff": (0.02, 1.0),
          "memory_eff": (0.02, 1.0), "memory_half_kb": (0.1, 1e5), "kernel_latency_us": (0.3, 60.0),
          "host_scale": (0.05, 20.0)}
WALL_CLOCK = ("gavel", "sia", "spread")  # step times of a training loop: pay time outside the trace
DDP_SOURCES = ("spread",)  # DistributedDataParallel (gloo) even on one GPU: a gradient all-reduce per step
NSYS_SOURCES = ("ets",)
# Sources whose float32 matmuls ran in TF32 on Ampere: Sia/Pollux's A100 profiles (PyTorch 1.7-1.11,
# whose default allow_tf32 was True). NeuSight timed FP32 SIMT kernels (its README); the others ran
# no Ampere GPU.
TF32_MATMUL_SOURCES = ("sia",)


@dataclass
class Target:
    """One measured iteration time and the op sequence that should reproduce it."""

    source: str
    device: str
    workload: str  # the measurement's workload name (source specific)
    config: ModelConfig
    seconds: float
    origin: str
    real_classes: dict[tuple[str, str], tuple[int, float]] | None = None  # ETS: (phase, class) -> (ops, µs)
    phases: tuple[str, ...] = PHASES  # the phases the measurement covers (NeuSight: no update)
    ops: OpArrays | None = None
    host_base: np.ndarray | None = field(default=None, repr=False)
    learned: np.ndarray | None = field(default=None, repr=False)
    phase_mask: np.ndarray | None = field(default=None, repr=False)
    grad_gb: float = 0.0  # gradient bytes per step (GB): what DDP synchronises
    phase_seconds: dict[str, float] = field(default_factory=dict)  # measured per phase (NeuSight)
    class_masks: list[np.ndarray] = field(default_factory=list, repr=False)
    class_real_us: np.ndarray | None = field(default=None, repr=False)
    loss_mask: np.ndarray | None = field(default=None, repr=False)  # ops of the loss (per-phase targets)

    @property
    def regime(self) -> str:
        return "nsys" if self.source in NSYS_SOURCES else "plain"

    @property
    def model(self) -> str:
        """The leave-one-model-out group: the zoo model, whatever source measured it."""
        return str(getattr(self.config, "model", self.workload))


def host_table(ets_traces: pd.DataFrame) -> dict[str, dict[str, float]]:
    """Median host duration per phase and op class of real ETS ops (see module docstring)."""
    df = ets_traces.assign(cls=[op_class(o) for o in ets_traces["op"]])
    table: dict[str, dict[str, float]] = {}
    for phase, group in df.groupby("phase"):
        entry = {"default": round(float(group["cpu_us"].median()), 3)}
        for cls, g in group.groupby("cls"):
            if len(g) >= MIN_CLASS_OPS:
                entry[cls] = round(float(g["cpu_us"].median()), 3)
        table[str(phase)] = entry
    return table


def ets_targets(ets_traces: pd.DataFrame, device: str) -> tuple[list[Target], list[str]]:
    """One target per real ETS file (float64 files are skipped and listed: the zoo has no fp64)."""
    targets, skipped = [], []
    for config_id, t in ets_traces.groupby("config_id", sort=True):
        first = t.iloc[0]
        if first["dtype"] not in ("float32", "float16"):
            skipped.append(f"{config_id} ({first['dtype']})")
            continue
        config = ModelConfig(kind="vision", family=str(first["family"]), model=str(first["model"]),
                             batch=int(first["batch"]), input_size=int(first["input_size"]),
                             dtype=str(first["dtype"]), num_classes=1000)
        seconds = float((t["duration_us"] + t["gap_us"]).sum()) / 1e6
        classes = t.assign(cls=[op_class(o) for o in t["op"]]).groupby(["phase", "cls"])["duration_us"]
        real = {k: (int(n), float(us)) for (k, n), us in zip(classes.size().items(), classes.sum())}
        targets.append(Target("ets", device, f"ets:{first['model']}", config, seconds, str(config_id), real))
    return targets, skipped


def op_sequences(configs: list[ModelConfig], cache: Path | None, progress: bool = True) -> dict[str, pd.DataFrame]:
    """Meta-device op sequences by config_id; captured once, cached in ``cache`` (Parquet)."""
    from predictor.emulator.capture.opseq import capture

    have = capture_cache.read(cache)  # None: absent, or captured by other code (then redone)
    have = pd.DataFrame() if have is None else have
    out = {cid: t.reset_index(drop=True) for cid, t in have.groupby("config_id")} if len(have) else {}
    todo = list({c.config_id: c for c in configs if c.config_id not in out}.values())
    new = []
    for config in tqdm(todo, desc="op sequences", unit="config", disable=not progress or not todo):
        trace = capture(config, "meta")
        out[config.config_id] = trace
        new.append(trace)
    if new and cache is not None:
        capture_cache.write(pd.concat([have, *new], ignore_index=True), cache)
    return out


def attach(targets: list[Target], sequences: dict[str, pd.DataFrame], host: dict,
           model: kernel_model.KernelModel | None = None) -> None:
    """Precompute what the fit evaluates many times: op arrays, unscaled host costs, the learned
    kernel times on the target's device (``model`` None: roofline only), comparable ETS classes."""
    unit = DeviceSpec(spec_only_entry("unit", "host costs unscaled", Path("unit"), sms=0, boost_clock_mhz=0.0,
                                      fp32_tflops=1, fp16_tflops=1, memory_gb=0.0, memory_gbs=1, l2_mb=0.0),
                      host_scale=1.0)  # the unscaled host cost (host_us reads host_scale only)
    for t in targets:
        t.ops = OpArrays.from_trace(sequences[t.config.config_id])
        t.host_base = host_us(t.ops, host, unit)
        t.learned = (learned_us(t.ops, spec_sheets()[t.device], model, t.source in TF32_MATMUL_SOURCES)
                     if model is not None else None)
        t.phase_mask = np.isin(t.ops.phase, t.phases)
        seq = sequences[t.config.config_id]
        if t.phase_seconds:
            t.loss_mask = np.array([bool(LOSS_OPS.match(o)) for o in seq["op"]], dtype=bool)
        t.grad_gb = float(seq.loc[seq["op"] == "AccumulateGrad", "bytes"].sum()) / 2 / 1e9  # read + write counted
        t.class_masks, real = [], []
        for (phase, cls), (n, us) in (t.real_classes or {}).items():
            mask = (t.ops.phase == phase) & (t.ops.op_class == cls) & (t.ops.kernels > 0)
            if mask.sum() == n and us > 0:  # compare a class only where both list the same ops
                t.class_masks.append(mask)
                real.append(us)
        t.class_real_us = np.array(real)


def measured_targets(calibration_dir: str | Path, sources: tuple[str, ...] = SOURCES) -> list[Target]:
    """One target per iteration-level measurement (Gavel, Sia, SPREAD, NeuSight), its workload
    rebuilt by the zoo."""
    table = load_measurements(calibration_dir, sources)
    out = []
    for r in table.itertuples():
        seq = getattr(r, "seq", None)
        size = int(seq) if seq is not None and not pd.isna(seq) else None
        neusight = r.source == "neusight"
        phases = ("forward", "backward") if neusight else PHASES
        by_phase = {"forward": float(r.forward_s), "backward": float(r.backward_s)} if neusight else {}
        out.append(Target(r.source, r.device, r.workload, workload_config(r.workload, int(r.batch), size),
                          float(r.seconds), r.origin, phases=phases, phase_seconds=by_phase))
    return out


def predict_seconds(spec: DeviceSpec, targets: list[Target], overhead_ms: dict[str, float],
                    class_ratios: list | None = None,
                    host_mult: dict[str, float] | None = None, sync_ms_per_gb: dict[str, float] | None = None,
                    ) -> np.ndarray:
    """Predicted seconds per target; appends log(emulated / real) of ETS class sums to
    ``class_ratios`` when given. ``host_mult``: the host speed of a measurement source relative
    to the device's own (``spec.host_scale``), for sources other than the device's primary one;
    ``sync_ms_per_gb``: a DDP source's gradient all-reduce cost per GB of gradients."""
    out = np.empty(len(targets))
    for i, t in enumerate(targets):
        d, gap = _kernels_and_gaps(spec, t, host_mult)
        m = t.phase_mask if t.phase_mask is not None else slice(None)
        out[i] = ((d[m].sum() + gap[m].sum()) / 1e6 + overhead_ms.get(t.source, 0.0) / 1e3
                  + (sync_ms_per_gb or {}).get(t.source, 0.0) * t.grad_gb / 1e3)
        if class_ratios is not None and t.class_masks:
            emulated = np.array([d[mask].sum() for mask in t.class_masks])
            class_ratios.append(np.log(emulated / t.class_real_us))
    return out


def _kernels_and_gaps(spec: DeviceSpec, t: Target, host_mult: dict[str, float] | None) -> tuple[np.ndarray, np.ndarray]:
    """Kernel time and ETS gap per op of the target's sequence (µs), as :func:`emulate` prices it."""
    d = kernel_us(t.ops, spec, t.learned)
    _, gap = timeline(d, t.host_base * spec.host_scale * (host_mult or {}).get(t.source, 1.0), t.ops.sync_after)
    return d, gap


def predict_phase_seconds(spec: DeviceSpec, t: Target, host_mult: dict[str, float] | None = None) -> dict[str, float]:
    """Predicted seconds of each phase the target measured per phase (kernel time + gaps of its
    ops; the step overhead and DDP sync belong to no phase)."""
    d, gap = _kernels_and_gaps(spec, t, host_mult)
    return {p: float((d[t.ops.phase == p].sum() + gap[t.ops.phase == p].sum()) / 1e6) for p in t.phase_seconds}


def predict_class_seconds(spec: DeviceSpec, t: Target) -> dict[tuple[str, str], float]:
    """Predicted kernel seconds per (phase, op class) of a target measured per phase, without the
    loss (NeuSight's per-op labels stop at the logits): what its per-op labels are compared with."""
    d = kernel_us(t.ops, spec, t.learned)
    keep = ~t.loss_mask if t.loss_mask is not None else np.ones(len(d), dtype=bool)
    out: dict[tuple[str, str], float] = {}
    for phase in t.phase_seconds:
        mine = keep & (t.ops.phase == phase) & (d > 0)
        for cls in np.unique(t.ops.op_class[mine]):
            out[(phase, str(cls))] = float(d[mine & (t.ops.op_class == cls)].sum() / 1e6)
    return out


@dataclass
class DeviceFit:
    spec: DeviceSpec
    overhead_ms: dict[str, float]
    cost: float
    primary: str = ""
    host_mult: dict[str, float] = field(default_factory=dict)
    sync_ms_per_gb: dict[str, float] = field(default_factory=dict)

    def predict(self, targets: list[Target], class_ratios: list | None = None) -> np.ndarray:
        return predict_seconds(self.spec, targets, self.overhead_ms, class_ratios, self.host_mult,
                               self.sync_ms_per_gb)


def primary_source(targets: list[Target]) -> str:
    """The source whose host the device's ``host_scale`` describes: the plain-regime source with
    most targets (an nsys source only when the device has no other)."""
    counts: dict[str, int] = {}
    for t in targets:
        counts[t.source] = counts.get(t.source, 0) + 1
    plain = [s for s in counts if s not in NSYS_SOURCES] or list(counts)
    return max(sorted(plain), key=lambda s: counts[s])


def fit_device(prior: DeviceSpec, targets: list[Target]) -> DeviceFit:
    """Least-squares fit of one device's parameters (see the module docstring, step 3)."""
    primary = primary_source(targets)
    sources = sorted({t.source for t in targets if t.source in WALL_CLOCK})
    ddp = sorted({t.source for t in targets if t.source in DDP_SOURCES})
    others = sorted({t.source for t in targets} - {primary})
    n_dev = len(FITTED_FIELDS)
    n_host = len(others)
    n_lin = len(sources)
    x0 = np.concatenate([np.log([getattr(prior, f) for f in FITTED_FIELDS]), np.zeros(n_host)])
    lo = np.array([math.log(BOUNDS[f][0]) for f in FITTED_FIELDS] + [math.log(0.05)] * n_host
                  + [0.0] * (n_lin + len(ddp)))
    hi = np.array([math.log(BOUNDS[f][1]) for f in FITTED_FIELDS] + [math.log(50.0)] * n_host
                  + [2000.0] * n_lin + [5000.0] * len(ddp))
    x_start = np.concatenate([np.clip(x0, lo[:len(x0)] + 1e-9, hi[:len(x0)] - 1e-9), np.full(n_lin + len(ddp), 1.0)])
    measured = np.array([t.seconds for t in targets])

    def unpack(x: np.ndarray) -> DeviceFit:
        spec = prior.with_fitted(dict(zip(FITTED_FIELDS, np.exp(x[:n_dev]))), "fit")
        host = dict(zip(others, np.exp(x[n_dev:len(x0)])))
        lin = x[len(x0):]
        return DeviceFit(spec, dict(zip(sources, lin[:n_lin])), 0.0, primary, host, dict(zip(ddp, lin[n_lin:])))

    def residuals(x: np.ndarray) -> np.ndarray:
        pred = unpack(x).predict(targets)
        return np.concatenate([np.log(pred / measured), PRIOR_WEIGHT * (x[:len(x0)] - x0)])

    result = least_squares(residuals, x_start, bounds=(lo, hi), x_scale=1.0, max_nfev=400)
    fit = unpack(result.x)
    fit.cost = float(result.cost)
    fit.overhead_ms = {k: round(float(v), 3) for k, v in fit.overhead_ms.items()}
    fit.host_mult = {k: round(float(v), 4) for k, v in fit.host_mult.items()}
    fit.sync_ms_per_gb = {k: round(float(v), 3) for k, v in fit.sync_ms_per_gb.items()}
    return fit


def leave_one_model_out(prior: DeviceSpec, targets: list[Target],
                        phases: dict[str, dict[str, float]] | None = None,
                        classes: dict[str, dict[tuple[str, str], float]] | None = None) -> dict[str, float]:
    """Held-out signed relative errors (pred / measured − 1) per target, keyed by origin: each
    model refit without all its targets. A held-out source's step overhead and host multiplier
    are kept only when other models of that source remain; else it gets none (0 ms, 1).
    ``phases`` and ``classes``, when given, receive (keyed by origin) the held-out predicted
    seconds per phase, and kernel seconds per (phase, op class), of the targets measured per phase."""
    out: dict[str, float] = {}
    for model in sorted({t.model for t in targets}):
        train = [t for t in targets if t.model != model]
        test = [t for t in targets if t.model == model]
        if not train:
            continue
        fit = fit_device(prior, train)
        pred = fit.predict(test)
        for t, p in zip(test, pred):
            out[t.origin] = float(p / t.seconds - 1)
            if phases is not None and t.phase_seconds:
                phases[t.origin] = predict_phase_seconds(fit.spec, t, fit.host_mult)
            if classes is not None and t.phase_seconds:
                classes[t.origin] = predict_class_seconds(fit.spec, t)
    return out


def class_errors(fit: DeviceFit, targets: list[Target]) -> np.ndarray:
    """|emulated − real| / real of the kernel time per ETS file and comparable (phase, op class)."""
    ratios: list[np.ndarray] = []
    fit.predict(targets, ratios)
    return np.abs(np.exp(np.concatenate(ratios)) - 1) if ratios else np.array([])


def _summary(errors: np.ndarray) -> dict[str, float]:
    errors = np.abs(np.asarray(errors, dtype=float))
    return {"median": round(float(np.median(errors)), 4), "mean": round(float(np.mean(errors)), 4),
            "n": int(len(errors))}


def calibrate(targets: list[Target], sequences: dict[str, pd.DataFrame], host: dict, *, lomo: bool = True,
              progress: bool = True, version: str = "fit",
              model: kernel_model.KernelModel | None = None) -> tuple[DeviceParams, dict]:
    """Fit every device that has targets; returns the parameters and the report (JSON-able).
    ``report["lomo_errors"]`` holds every target's held-out signed error (for the validation
    report); ``report["devices"][d]["lomo_by_source"]`` its summary per source."""
    attach(targets, sequences, host, model)
    by_device: dict[str, list[Target]] = {}
    for t in targets:
        by_device.setdefault(t.device, []).append(t)
    devices = dict(prior_params().devices)
    report: dict = {"host_us": host, "devices": {}, "lomo_errors": [], "lomo_classes": []}
    fits: dict[str, DeviceFit] = {}
    nsys = []
    for name in tqdm(sorted(by_device), desc="calibrate", unit="device", disable=not progress):
        group = by_device[name]
        fit = fits[name] = fit_device(spec_sheets()[name], group)
        sources = sorted({t.source for t in group})
        devices[name] = fit.spec.with_fitted({}, f"{len(group)} targets: " + ", ".join(sources)
                                             + f"; host of {fit.primary}")
        if "ets" in fit.host_mult:
            nsys.append(fit.host_mult["ets"])
        in_sample = fit.predict(group) / np.array([t.seconds for t in group]) - 1
        entry = {"targets": len(group), "models": len({t.model for t in group}), "sources": sources,
                 "step_overhead_ms": fit.overhead_ms, "host_source": fit.primary, "host_mult": fit.host_mult,
                 "ddp_sync_ms_per_gb": fit.sync_ms_per_gb,
                 "in_sample": _summary(in_sample), "params": {f: round(getattr(fit.spec, f), 5) for f in FITTED_FIELDS}}
        if lomo:
            held_phases: dict[str, dict[str, float]] = {}
            held_classes: dict[str, dict[tuple[str, str], float]] = {}
            held = leave_one_model_out(spec_sheets()[name], group, held_phases, held_classes)
            entry["lomo"] = _summary(list(held.values())) if held else None
            entry["lomo_by_source"] = {s: _summary([held[t.origin] for t in group
                                                    if t.source == s and t.origin in held])
                                       for s in sources if any(t.source == s and t.origin in held for t in group)}
            for t, p in zip(group, fit.predict(group)):
                if t.origin in held:
                    report["lomo_errors"].append({
                        "device": name, "source": t.source, "model": t.model, "workload": t.workload,
                        "config_id": t.config.config_id, "origin": t.origin, "measured_s": t.seconds,
                        "predicted_s": t.seconds * (1 + held[t.origin]), "in_sample_s": float(p),
                        **{f"measured_{k}_s": v for k, v in t.phase_seconds.items()},
                        **{f"predicted_{k}_s": v for k, v in held_phases.get(t.origin, {}).items()}})
                    report["lomo_classes"] += [
                        {"device": name, "workload": t.workload, "seq": t.config.input_size, "batch": t.config.batch,
                         "origin": t.origin, "phase": phase, "cls": cls, "predicted_s": v}
                        for (phase, cls), v in held_classes.get(t.origin, {}).items()]
        errs = class_errors(fit, group)
        entry["ets_op_class"] = _summary(errs) if len(errs) else None
        report["devices"][name] = entry
    report["ratios"] = ratio_table(targets, fits)
    if fits:  # GPUs without measured iterations get the calibrated GPUs' median host and scales
        typical = {f: float(np.median([getattr(fit.spec, f) for fit in fits.values()])) for f in FITTED_FIELDS}
        for name in devices:
            if name not in fits:
                devices[name] = devices[name].with_fitted(
                    typical, f"no measured iterations: median of {len(fits)} calibrated devices")
    nsys_factor = float(np.exp(np.mean(np.log(nsys)))) if nsys else 1.0
    report["nsys_host_factor"] = round(nsys_factor, 4)
    params = DeviceParams(devices, host, version, "fitted by predictor.emulator.devices.calibrate",
                          round(nsys_factor, 4))
    return params, report


def ratio_table(targets: list[Target], fits: dict[str, DeviceFit]) -> list[dict]:
    """Measured versus emulated speed ratio for every pair of devices measured by the same source
    on the same (workload, batch); ``inverted`` marks pairs whose order the emulation gets wrong."""
    keyed: dict[tuple, dict[str, Target]] = {}
    for t in targets:
        if t.source != "ets":
            keyed.setdefault((t.source, t.workload, t.config.batch), {})[t.device] = t
    rows = []
    for (source, workload, batch), by_device in sorted(keyed.items()):
        names = sorted(by_device)
        for i, a in enumerate(names):
            for b in names[i + 1:]:
                ta, tb = by_device[a], by_device[b]
                pa, pb = fits[a].predict([ta])[0], fits[b].predict([tb])[0]
                measured, emulated = ta.seconds / tb.seconds, pa / pb
                rows.append({"source": source, "workload": workload, "batch": batch, "a": a, "b": b,
                             "measured": round(measured, 4), "emulated": round(float(emulated), 4),
                             "inverted": bool((measured > 1) != (emulated > 1))})
    return rows


def report_markdown(report: dict) -> str:
    """The calibration tables (the closing note's and README's)."""
    lines = ["| device | targets | models | in-sample median / mean | leave-one-model-out median / mean "
             "| ETS per-op-class median | step overhead ms |",
             "|---|---:|---:|---:|---:|---:|---|"]
    for name, e in report["devices"].items():
        lomo = e.get("lomo")
        ets = e.get("ets_op_class")
        lines.append(
            f"| emulated:{name} | {e['targets']} | {e['models']} | "
            f"{e['in_sample']['median']:.1%} / {e['in_sample']['mean']:.1%} | "
            + (f"{lomo['median']:.1%} / {lomo['mean']:.1%}" if lomo else "–") + " | "
            + (f"{ets['median']:.1%} (n={ets['n']})" if ets else "–") + " | "
            + ", ".join(f"{k} {v:.1f}" for k, v in e["step_overhead_ms"].items()) + " |")
    ratios = report.get("ratios", [])
    if ratios:
        wrong = [r for r in ratios if r["inverted"]]
        lines += ["", f"Cross-device ratios: {len(ratios)} pairs (same source, workload and batch); "
                  f"the emulation orders {len(ratios) - len(wrong)} of them as measured. Pairs it orders "
                  "differently (time ratio a/b):", "",
                  "| source | workload | batch | a / b | measured | emulated |", "|---|---|---:|---|---:|---:|"]
        lines += [f"| {r['source']} | {r['workload']} | {r['batch']} | {r['a']} / {r['b']} | {r['measured']:.3f} | "
                  f"{r['emulated']:.3f} |" for r in wrong]
    return "\n".join(lines)


def load_targets(calibration_dir: Path, ets_dir: Path) -> tuple[list[Target], list[str], dict]:
    """Every real target (measurements and ETS traces), the skipped ETS files, the host table."""
    from predictor.emulator.capture import ets_csv

    targets = measured_targets(calibration_dir)
    skipped: list[str] = []
    real = {}
    for sub, dev in ETS_DEVICES.items():
        real[dev] = ets_csv.load_many(ets_dir / sub)
        more, skip = ets_targets(real[dev], dev)
        targets += more
        skipped += skip
    return targets, skipped, host_table(real["T4"])

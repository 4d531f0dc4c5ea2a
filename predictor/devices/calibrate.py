"""Fit every emulated device to measured iteration times and report the fit error honestly.

Why: an emulated GPU is only as good as its agreement with real ones. The targets are
(a) iteration-level measurements (:mod:`predictor.devices.measurements`: Gavel K80/P100/V100,
Sia/Pollux T4/V100/A100/RTX6000/RTX2080Ti), whose workloads the zoo rebuilds, and (b) the real
ETS execution traces (T4, 2080Ti), each one iteration of a torchvision model, whose iteration
time is Σ(kernel + gap) and whose per-op host durations give the host cost table.

Procedure:

1. Host costs: median measured host duration (``cpu_us``) of the real ETS T4 ops per phase and
   op class (classes with fewer than 20 ops fall back to the phase median, "default").
2. Op sequences of every target's config on the meta device (cached in a Parquet file).
3. Per device, least squares on log(predicted / measured) over its targets. Free parameters: the
   fitted fields of :class:`~predictor.devices.specs.DeviceSpec` (in log space, with a weak
   prior pulling them towards the priors so that a device with few targets stays sane), and one
   step overhead per (device, measurement source): the time Gavel's and Sia's step times spend
   outside the execution trace (input pipeline, copies, loss read-out). ETS targets have none:
   their iteration time is the trace itself. The host belongs to the measurement, not to the
   GPU: the device's ``host_scale`` is that of its primary source (the one with most targets:
   the ETS machine for T4 and 2080Ti), and each other source gets its own host multiplier
   (weak prior at 1), reported with the overheads.
4. Leave-one-model-out: refit without each workload in turn and predict it; per device the
   median and mean absolute relative error, in-sample and held-out.
5. Op level (ETS traces): per file, the kernel time summed per (phase, op class), emulated
   versus real, for the classes where both list the same number of kernel-running ops; these
   log-ratios are also residuals of the fit (step 3), so the kernel model is pinned by per-op
   data, not only by iteration totals. Rows do not map one to one — the ETS files miss most
   backward linear rows and some others (their README) — so classes are compared, not rows.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
from scipy.optimize import least_squares
from tqdm import tqdm

from predictor.capture.costs import OP_CLASSES, op_class
from predictor.devices.measurements import load_measurements, workload_config
from predictor.devices.specs import FITTED_FIELDS, DeviceParams, DeviceSpec, SPEC_SHEETS, prior_params
from predictor.devices.timing import OpArrays, class_factors, host_us, kernel_us, timeline
from predictor.zoo.config import ModelConfig

PRIOR_WEIGHT = 1.0  # residual weight of log(param / prior): a factor e (2.7x) off the prior costs as much as 100 % error
MIN_CLASS_OPS = 20
BOUNDS = {"compute_eff": (0.02, 2.0), "compute_half_mflop": (0.001, 1e4), "tensor_eff": (0.02, 1.0), "memory_eff": (0.02, 1.0),
          "memory_half_kb": (0.1, 1e5), "kernel_latency_us": (0.3, 60.0), "host_scale": (0.05, 20.0)}
ETS_DEVICES = {"T4": "T4", "2080Ti": "RTX2080Ti"}
# the reference classes: their efficiency is the device's own (compute_eff, memory_eff), so the
# per-class factors of the others are identifiable
REFERENCE_CLASSES = ("conv", "elementwise")
FREE_CLASSES = tuple(c for c in OP_CLASSES if c not in REFERENCE_CLASSES)


@dataclass
class Target:
    """One measured iteration time and the op sequence that should reproduce it."""

    source: str
    device: str
    workload: str  # the leave-one-model-out group
    config: ModelConfig
    seconds: float
    origin: str
    real_classes: dict[tuple[str, str], tuple[int, float]] | None = None  # ETS: (phase, class) -> (ops, µs)
    ops: OpArrays | None = None
    host_base: np.ndarray | None = field(default=None, repr=False)
    class_masks: list[np.ndarray] = field(default_factory=list, repr=False)
    class_real_us: np.ndarray | None = field(default=None, repr=False)


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
    from predictor.capture.opseq import capture

    have = pd.read_parquet(cache) if cache is not None and cache.exists() else pd.DataFrame()
    out = {cid: t.reset_index(drop=True) for cid, t in have.groupby("config_id")} if len(have) else {}
    todo = list({c.config_id: c for c in configs if c.config_id not in out}.values())
    new = []
    for config in tqdm(todo, desc="op sequences", unit="config", disable=not progress or not todo):
        trace = capture(config, "meta")
        out[config.config_id] = trace
        new.append(trace)
    if new and cache is not None:
        cache.parent.mkdir(parents=True, exist_ok=True)
        pd.concat([have, *new], ignore_index=True).to_parquet(cache, index=False)
    return out


def attach(targets: list[Target], sequences: dict[str, pd.DataFrame], host: dict) -> None:
    unit = DeviceSpec("unit", 1, 0, 1, 1, "")  # host_scale 1: the unscaled host cost
    for t in targets:
        t.ops = OpArrays.from_trace(sequences[t.config.config_id])
        t.host_base = host_us(t.ops, host, unit)
        t.class_masks, real = [], []
        for (phase, cls), (n, us) in (t.real_classes or {}).items():
            mask = (t.ops.phase == phase) & (t.ops.op_class == cls) & (t.ops.kernels > 0)
            if mask.sum() == n and us > 0:  # compare a class only where both list the same ops
                t.class_masks.append(mask)
                real.append(us)
        t.class_real_us = np.array(real)


def measured_targets(calibration_dir: str | Path) -> list[Target]:
    """One target per iteration-level measurement (Gavel, Sia), its workload rebuilt by the zoo."""
    table = load_measurements(calibration_dir)
    return [Target(r.source, r.device, r.workload, workload_config(r.workload, int(r.batch)), float(r.seconds),
                   r.origin) for r in table.itertuples()]


def predict_seconds(spec: DeviceSpec, targets: list[Target], overhead_ms: dict[str, float],
                    factors: np.ndarray, class_ratios: list | None = None,
                    host_mult: dict[str, float] | None = None) -> np.ndarray:
    """Predicted seconds per target; appends log(emulated / real) of ETS class sums to
    ``class_ratios`` when given. ``host_mult``: the host speed of a measurement source relative
    to the device's own (``spec.host_scale``), for sources other than the device's primary one."""
    out = np.empty(len(targets))
    for i, t in enumerate(targets):
        d = kernel_us(t.ops, spec, factors)
        scale = spec.host_scale * (host_mult or {}).get(t.source, 1.0)
        _, gap = timeline(d, t.host_base * scale, t.ops.sync_after)
        out[i] = (d.sum() + gap.sum()) / 1e6 + overhead_ms.get(t.source, 0.0) / 1e3
        if class_ratios is not None and t.class_masks:
            emulated = np.array([d[m].sum() for m in t.class_masks])
            class_ratios.append(np.log(emulated / t.class_real_us))
    return out


@dataclass
class DeviceFit:
    spec: DeviceSpec
    overhead_ms: dict[str, float]
    class_eff: dict[str, float]
    cost: float
    primary: str = ""
    host_mult: dict[str, float] = field(default_factory=dict)

    @property
    def factors(self) -> np.ndarray:
        return class_factors(self.class_eff)

    def predict(self, targets: list[Target], class_ratios: list | None = None) -> np.ndarray:
        return predict_seconds(self.spec, targets, self.overhead_ms, self.factors, class_ratios, self.host_mult)


def primary_source(targets: list[Target]) -> str:
    """The source whose host the device's ``host_scale`` describes: the one with most targets."""
    counts: dict[str, int] = {}
    for t in targets:
        counts[t.source] = counts.get(t.source, 0) + 1
    return max(sorted(counts), key=lambda s: counts[s])


def fit_device(prior: DeviceSpec, targets: list[Target], class_eff: dict[str, float] | None = None) -> DeviceFit:
    """Least-squares fit of one device's parameters (see the module docstring, step 3). With
    ``class_eff`` None the per-class efficiencies are fitted too (on ETS op-level targets)."""
    primary = primary_source(targets)
    sources = sorted({t.source for t in targets if t.source != "ets"})
    others = sorted({t.source for t in targets} - {primary})
    free_classes = class_eff is None
    n_dev = len(FITTED_FIELDS)
    n_cls = len(FREE_CLASSES) if free_classes else 0
    n_host = len(others)
    x0 = np.concatenate([np.log([getattr(prior, f) for f in FITTED_FIELDS]), np.zeros(n_cls + n_host)])
    lo = np.array([math.log(BOUNDS[f][0]) for f in FITTED_FIELDS] + [math.log(0.05)] * (n_cls + n_host)
                  + [0.0] * len(sources))
    hi = np.array([math.log(BOUNDS[f][1]) for f in FITTED_FIELDS] + [math.log(20.0)] * (n_cls + n_host)
                  + [2000.0] * len(sources))
    x_start = np.concatenate([np.clip(x0, lo[:len(x0)] + 1e-9, hi[:len(x0)] - 1e-9), np.full(len(sources), 1.0)])
    measured = np.array([t.seconds for t in targets])

    def unpack(x: np.ndarray) -> DeviceFit:
        spec = prior.with_fitted(dict(zip(FITTED_FIELDS, np.exp(x[:n_dev]))), "fit")
        classes = ({c: 1.0 for c in REFERENCE_CLASSES} | dict(zip(FREE_CLASSES, np.exp(x[n_dev:n_dev + n_cls])))
                   if free_classes else class_eff)
        host = dict(zip(others, np.exp(x[n_dev + n_cls:len(x0)])))
        return DeviceFit(spec, dict(zip(sources, x[len(x0):])), classes, 0.0, primary, host)

    def residuals(x: np.ndarray) -> np.ndarray:
        ratios: list[np.ndarray] = []
        pred = unpack(x).predict(targets, ratios)
        return np.concatenate([np.log(pred / measured), *ratios, PRIOR_WEIGHT * (x[:len(x0)] - x0)])

    result = least_squares(residuals, x_start, bounds=(lo, hi), x_scale=1.0, max_nfev=400)
    fit = unpack(result.x)
    fit.cost = float(result.cost)
    fit.overhead_ms = {k: round(float(v), 3) for k, v in fit.overhead_ms.items()}
    fit.class_eff = {k: round(float(v), 4) for k, v in fit.class_eff.items()}
    fit.host_mult = {k: round(float(v), 4) for k, v in fit.host_mult.items()}
    return fit


def relative_errors(fit: DeviceFit, targets: list[Target]) -> np.ndarray:
    pred = fit.predict(targets)
    return np.abs(pred - np.array([t.seconds for t in targets])) / np.array([t.seconds for t in targets])


def leave_one_model_out(prior: DeviceSpec, targets: list[Target],
                        class_eff: dict[str, float]) -> dict[str, np.ndarray]:
    """Held-out relative errors per workload (refit without it; its source overhead is kept only
    when other workloads of that source remain, else the held-out points get none)."""
    out = {}
    for workload in sorted({t.workload for t in targets}):
        train = [t for t in targets if t.workload != workload]
        test = [t for t in targets if t.workload == workload]
        if not train:
            continue
        out[workload] = relative_errors(fit_device(prior, train, class_eff), test)
    return out


def class_errors(fit: DeviceFit, targets: list[Target]) -> np.ndarray:
    """|emulated − real| / real of the kernel time per ETS file and comparable (phase, op class)."""
    ratios: list[np.ndarray] = []
    fit.predict(targets, ratios)
    return np.abs(np.exp(np.concatenate(ratios)) - 1) if ratios else np.array([])


def _summary(errors: np.ndarray) -> dict[str, float]:
    return {"median": round(float(np.median(errors)), 4), "mean": round(float(np.mean(errors)), 4),
            "n": int(len(errors))}


def calibrate(targets: list[Target], sequences: dict[str, pd.DataFrame], host: dict, *, lomo: bool = True,
              progress: bool = True, version: str = "fit", class_device: str = "T4") -> tuple[DeviceParams, dict]:
    """Fit every device that has targets; returns the parameters and the report (JSON-able).

    The per-class efficiencies are fitted first, together with ``class_device`` (the device with
    real per-op traces), then held fixed for every device, that one included.
    """
    attach(targets, sequences, host)
    by_device: dict[str, list[Target]] = {}
    for t in targets:
        by_device.setdefault(t.device, []).append(t)
    class_eff = {c: 1.0 for c in OP_CLASSES}
    if any(t.class_masks for t in by_device.get(class_device, [])):
        class_eff = fit_device(SPEC_SHEETS[class_device], by_device[class_device]).class_eff
    devices = dict(prior_params().devices)
    report: dict = {"host_us": host, "class_eff": class_eff, "class_eff_from": class_device, "devices": {}}
    fits: dict[str, DeviceFit] = {}
    for name in tqdm(sorted(by_device), desc="calibrate", unit="device", disable=not progress):
        group = by_device[name]
        fit = fits[name] = fit_device(SPEC_SHEETS[name], group, class_eff)
        sources = sorted({t.source for t in group})
        devices[name] = fit.spec.with_fitted({}, f"{len(group)} targets: " + ", ".join(sources)
                                             + f"; host of {fit.primary}")
        entry = {"targets": len(group), "workloads": len({t.workload for t in group}), "sources": sources,
                 "step_overhead_ms": fit.overhead_ms, "host_source": fit.primary, "host_mult": fit.host_mult,
                 "in_sample": _summary(relative_errors(fit, group)),
                 "params": {f: round(getattr(fit.spec, f), 5) for f in FITTED_FIELDS}}
        if lomo:
            held = leave_one_model_out(SPEC_SHEETS[name], group, class_eff)
            entry["lomo"] = _summary(np.concatenate(list(held.values()))) if held else None
            entry["lomo_by_workload"] = {k: round(float(np.median(v)), 4) for k, v in held.items()}
        errs = class_errors(fit, group)
        entry["ets_op_class"] = _summary(errs) if len(errs) else None
        report["devices"][name] = entry
    report["ratios"] = ratio_table(targets, fits)
    params = DeviceParams(devices, host, class_eff, version, "fitted by predictor.devices.calibrate")
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
    lines = ["| device | targets | workloads | in-sample median / mean | leave-one-model-out median / mean "
             "| ETS per-op-class median | step overhead ms |",
             "|---|---:|---:|---:|---:|---:|---|"]
    for name, e in report["devices"].items():
        lomo = e.get("lomo")
        ets = e.get("ets_op_class")
        lines.append(
            f"| emulated:{name} | {e['targets']} | {e['workloads']} | "
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

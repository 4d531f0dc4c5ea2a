"""The emulated GPUs against every real measurement we hold, out of sample, as one report.

Why: the emulated GPUs are the simulator's ground truth and the checkpoints' training data, so
their distance from real hardware bounds every number downstream. Nothing here is in-sample:
kernel times are predicted by a kernel model fitted without the GPU
(:func:`predictor.emulator.devices.kernels.leave_one_gpu_out`), iteration times by a calibration refitted
without the model (:func:`predictor.emulator.devices.calibrate.leave_one_model_out`).

Sets (one panel and one row each): ETS T4 and RTX 2080 Ti iterations (nsys regime), NeuSight
A100-80GB and V100 transformer iterations (forward + backward), SPREAD T4 and RTX 2080 Ti
iterations, Gavel (K80, P100, V100), Sia (T4, V100, A100, RTX 6000, RTX 2080 Ti); kernels per op
class and held-out GPU. Targets: iteration median |error| ≤ 12 % per set and no set above 20 %;
kernels ≤ 10 % (conv, matmul) and ≤ 15 % (the others). The multi-GPU sets (data-parallel steps
on Sia placements, Lambda, Gavel and NeuSight dp, spec-derived communication) are
:mod:`predictor.emulator.devices.placement_validation`'s; the command appends their section to the report.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

ITERATION_TARGET, ITERATION_LIMIT = 0.12, 0.20
KERNEL_TARGETS = {"conv": 0.10, "matmul": 0.10}
OTHER_KERNEL_TARGET = 0.15
SET_ORDER = ("ETS T4", "ETS RTX2080Ti", "NeuSight A100-80GB", "NeuSight V100", "SPREAD T4", "SPREAD RTX2080Ti",
             "Gavel", "Sia")
_SOURCE_NAMES = {"ets": "ETS", "neusight": "NeuSight", "spread": "SPREAD", "gavel": "Gavel", "sia": "Sia"}


def set_name(source: str, device: str) -> str:
    """The validation set of a measurement: per device for ETS, NeuSight and SPREAD; one set each
    for Gavel and Sia (several GPUs, one measurement campaign)."""
    name = _SOURCE_NAMES.get(source, source)
    return name if source in ("gavel", "sia") else f"{name} {device}"


def iteration_rows(lomo_errors: list[dict]) -> pd.DataFrame:
    """Held-out iteration predictions (``calibrate`` report's ``lomo_errors``) with their set and
    signed / absolute relative error."""
    rows = pd.DataFrame(lomo_errors)
    if rows.empty:
        return pd.DataFrame(columns=["set", "device", "measured_s", "predicted_s", "error", "abs_error"])
    rows["set"] = [set_name(s, d) for s, d in zip(rows["source"], rows["device"])]
    rows["error"] = rows["predicted_s"] / rows["measured_s"] - 1
    rows["abs_error"] = rows["error"].abs()
    return rows


def set_summary(rows: pd.DataFrame) -> pd.DataFrame:
    """Per set: n, median and mean |error|, median signed error, share within ±20 %, and whether
    it meets the target (median ≤ 12 %) and the limit (≤ 20 %)."""
    out = []
    for name, g in rows.groupby("set", sort=False):
        med = float(g["abs_error"].median())
        out.append({"set": name, "n": len(g), "median": med, "mean": float(g["abs_error"].mean()),
                    "signed_median": float(g["error"].median()),
                    "within_20": float((g["abs_error"] <= 0.2).mean()),
                    "target": med <= ITERATION_TARGET, "limit": med <= ITERATION_LIMIT})
    table = pd.DataFrame(out)
    if table.empty:
        return table
    order = {s: i for i, s in enumerate(SET_ORDER)}
    return table.sort_values("set", key=lambda c: c.map(lambda s: order.get(s, len(order)))).reset_index(drop=True)


def kernel_summary(rows: pd.DataFrame) -> pd.DataFrame:
    """Median |error| per op class and held-out GPU (forward rows), with the class's target."""
    fwd = rows[rows["phase"] == "forward"]
    table = fwd.groupby(["cls", "device"])["rel_error"].median().unstack()
    table["all"] = fwd.groupby("cls")["rel_error"].median()
    table["target"] = [KERNEL_TARGETS.get(c, OTHER_KERNEL_TARGET) for c in table.index]
    return table


KERNEL_SET_NAMES = {"neusight": "NeuSight kernels", "ets": "ETS kernels", "deepbench": "DeepBench kernels",
                    "vidur": "Vidur kernels", "kernelbench": "KernelBench L1"}


def kernel_detail(rows: pd.DataFrame) -> pd.DataFrame:
    """Held-out kernel error per op class, kernel (forward, grad-input, grad-weight; ETS backward
    rows: both summed) and precision: rows, GPUs, median and p90 |error|, median signed."""
    rows = rows.dropna(subset=["predicted_us"])
    out = []
    for (cls, kernel, math_), g in rows.groupby(["cls", "kernel", "math"], sort=True):
        signed = g["predicted_us"] / g["measured_us"] - 1
        out.append({"cls": cls, "kernel": kernel, "math": math_, "n": len(g), "gpus": g["device"].nunique(),
                    "median": float(g["rel_error"].median()), "p90": float(g["rel_error"].quantile(0.9)),
                    "signed_median": float(signed.median())})
    return pd.DataFrame(out)


def unified_rows(iteration: pd.DataFrame, kernel_rows: pd.DataFrame | None,
                 endtoend: pd.DataFrame | None) -> pd.DataFrame:
    """Every held-out prediction as (set, device, kernels, error, abs_error): kernels by source,
    iterations by set, the end-to-end sets (:mod:`predictor.emulator.devices.endtoend`)."""
    parts = []
    if len(iteration):
        parts.append(iteration.assign(kernels="leave-one-model-out")[["set", "device", "kernels", "error",
                                                                      "abs_error"]])
    if kernel_rows is not None and len(kernel_rows):
        k = kernel_rows.dropna(subset=["predicted_us"])
        parts.append(pd.DataFrame({"set": k["dataset"].map(KERNEL_SET_NAMES).fillna(k["dataset"]),
                                   "device": k["device"], "kernels": "leave-one-GPU-out",
                                   "error": k["predicted_us"] / k["measured_us"] - 1, "abs_error": k["rel_error"]}))
    if endtoend is not None and len(endtoend):
        parts.append(endtoend[["set", "device", "kernels", "error", "abs_error"]])
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=["set", "device", "kernels", "error",
                                                                                    "abs_error"])


def _pct(v: float) -> str:
    return "–" if v is None or (isinstance(v, float) and np.isnan(v)) else f"{v:.1%}"


def _signed(v: float) -> str:
    return "–" if v is None or np.isnan(v) else f"{v:+.1%}"


PHASES = ("forward", "backward")


def phase_summary(rows: pd.DataFrame) -> pd.DataFrame:
    """Per set and phase, for the targets measured per phase (NeuSight): n, median |error| and
    median signed error of the held-out prediction of that phase."""
    out = []
    for phase in PHASES:
        measured, predicted = f"measured_{phase}_s", f"predicted_{phase}_s"
        if measured not in rows or predicted not in rows:
            continue
        have = rows.dropna(subset=[measured, predicted])
        have = have[have[measured] > 0]
        for name, g in have.groupby("set", sort=True):
            error = g[predicted] / g[measured] - 1
            out.append({"set": name, "phase": phase, "n": len(g), "median": float(error.abs().median()),
                        "signed_median": float(error.median())})
    return pd.DataFrame(out, columns=["set", "phase", "n", "median", "signed_median"])


CLASS_KEYS = ["device", "workload", "seq", "batch", "phase", "cls"]


def class_rows(measured: pd.DataFrame, predicted: list[dict]) -> pd.DataFrame:
    """NeuSight's labelled kernel time per config, phase and op class
    (:func:`predictor.emulator.devices.neusight_ops.class_times`) next to the held-out prediction
    (``calibrate`` report's ``lomo_classes``); a class on one side only keeps NaN on the other."""
    pred = pd.DataFrame(predicted, columns=[*CLASS_KEYS, "predicted_s"])
    rows = measured.drop(columns=["origin"], errors="ignore").merge(pred, on=CLASS_KEYS, how="outer")
    rows = rows[rows["device"].isin(set(pred["device"]))] if len(pred) else rows.iloc[:0]
    rows.insert(0, "set", [set_name("neusight", d) for d in rows["device"]])
    rows["error"] = rows["predicted_s"] / rows["measured_s"] - 1
    return rows.reset_index(drop=True)


def class_summary(rows: pd.DataFrame) -> pd.DataFrame:
    """Per set, phase and op class (and ``all``: the configs' summed labelled kernel time): n
    configs with both sides, the class's share of the labelled time, median |error| and median
    signed error; ``missing``: configs where only one side has the class."""
    out = []
    for (name, phase), g in rows.groupby(["set", "phase"], sort=True):
        total = g.dropna(subset=["measured_s", "predicted_s"])["measured_s"].sum()
        for cls, c in g.groupby("cls", sort=True):
            matched = c.dropna(subset=["measured_s", "predicted_s"])
            out.append({"set": name, "phase": phase, "cls": cls, "n": len(matched),
                        "share": float(matched["measured_s"].sum() / total) if total > 0 else np.nan,
                        "median": float(matched["error"].abs().median()) if len(matched) else np.nan,
                        "signed_median": float(matched["error"].median()) if len(matched) else np.nan,
                        "missing": len(c) - len(matched)})
        configs = g.groupby(["workload", "seq", "batch"])[["measured_s", "predicted_s"]].sum(min_count=1).dropna()
        error = configs["predicted_s"] / configs["measured_s"] - 1
        out.append({"set": name, "phase": phase, "cls": "all", "n": len(configs), "share": 1.0,
                    "median": float(error.abs().median()) if len(configs) else np.nan,
                    "signed_median": float(error.median()) if len(configs) else np.nan, "missing": 0})
    return pd.DataFrame(out, columns=["set", "phase", "cls", "n", "share", "median", "signed_median", "missing"])


def markdown(sets: pd.DataFrame, kernels: pd.DataFrame | None, notes: list[str],
             phases: pd.DataFrame | None = None, classes: pd.DataFrame | None = None,
             unified: pd.DataFrame | None = None, detail: pd.DataFrame | None = None) -> str:
    from predictor.emulator.devices.endtoend import by_set_and_gpu

    lines = ["# Emulated GPUs against real measurements (out of sample)", ""]
    if unified is not None and len(unified):
        table = by_set_and_gpu(unified)
        lines += ["## Every set × GPU", "",
                  "Kernels: each GPU predicted by the kernel model fitted without it; iterations: the calibration "
                  "refitted without the model; end-to-end sets (KernelBench level 3, Lambda, pytorch-gpu-benchmark): "
                  "the leave-one-GPU-out kernel model where the GPU has measured kernels, else the shipped one "
                  "(spec-derived), and the shipped host calibration, which saw none of these sets.", "",
                  "| set | GPU | kernels | n | median abs. error | median signed | within ±20 % |",
                  "|---|---|---|---:|---:|---:|---:|"]
        lines += [f"| {r.set} | {r.device} | {r.kernels} | {r.n} | {r.median:.1%} | {r.signed_median:+.1%} | "
                  f"{r.within_20:.0%} |" for r in table.itertuples()]
        lines.append("")
    if detail is not None and len(detail):
        lines += ["## Kernel time per op class, kernel and precision, leave-one-GPU-out", "",
                  "| op class | kernel | precision | rows | GPUs | median abs. error | p90 | median signed |",
                  "|---|---|---|---:|---:|---:|---:|---:|"]
        lines += [f"| {r.cls} | {r.kernel} | {r.math} | {r.n:,} | {r.gpus} | {r.median:.1%} | {r.p90:.1%} | "
                  f"{r.signed_median:+.1%} |" for r in detail.itertuples()]
        lines.append("")
    lines += ["## Iteration time, leave-one-model-out", "",
             "| set | n | median abs. error | mean | median signed | within ±20 % | ≤ 12 % | ≤ 20 % |",
             "|---|---:|---:|---:|---:|---:|:---:|:---:|"]
    for r in sets.itertuples():
        lines.append(f"| {r.set} | {r.n} | {r.median:.1%} | {r.mean:.1%} | {r.signed_median:+.1%} | "
                     f"{r.within_20:.0%} | {'yes' if r.target else 'no'} | {'yes' if r.limit else 'no'} |")
    if phases is not None and len(phases):
        lines += ["", "## Per phase, leave-one-model-out (sets measured per phase)", "",
                  "| set | phase | n | median abs. error | median signed |", "|---|---|---:|---:|---:|"]
        lines += [f"| {r.set} | {r.phase} | {r.n} | {r.median:.1%} | {r.signed_median:+.1%} |"
                  for r in phases.itertuples()]
    if classes is not None and len(classes):
        lines += ["", "## Per op class against NeuSight's per-op labels, leave-one-model-out", "",
                  "Kernel time of each op class over the iteration (NeuSight's nodes outside the first layer "
                  "once, the layer's nodes times the depth; our trace without the loss).", "",
                  "| set | phase | op class | n | share of labelled time | median abs. error | median signed "
                  "| one side only |", "|---|---|---|---:|---:|---:|---:|---:|"]
        lines += [f"| {r.set} | {r.phase} | {r.cls} | {r.n} | {_pct(r.share)} | {_pct(r.median)} | "
                  f"{_signed(r.signed_median)} | {r.missing} |" for r in classes.itertuples()]
    if kernels is not None and len(kernels):
        devices = [c for c in kernels.columns if c not in ("all", "target")]
        lines += ["", "## Kernel time, leave-one-GPU-out (forward kernels; median abs. error)", "",
                  "| op class | " + " | ".join(devices) + " | all | target |", "|---|" + "---:|" * (len(devices) + 2)]
        for cls, r in kernels.iterrows():
            lines.append(f"| {cls} | " + " | ".join(_pct(r[d]) for d in devices)
                         + f" | {_pct(r['all'])} | ≤ {r['target']:.0%} |")
    lines += ["", *[f"- {n}" for n in notes]]
    return "\n".join(lines) + "\n"


def plot(rows: pd.DataFrame, path: Path, by: str = "device") -> None:
    """Predicted vs measured time, log–log, one panel per set, identity and ±20 % band; points
    coloured by ``by`` (iterations: device; op classes: class)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = rows.dropna(subset=["measured_s", "predicted_s"])
    sets = [s for s in SET_ORDER if s in set(rows["set"])] + sorted(set(rows["set"]) - set(SET_ORDER))
    cols = min(4, max(len(sets), 1))
    nrows = max(1, -(-len(sets) // cols))
    fig, axes = plt.subplots(nrows, cols, figsize=(3.4 * cols, 3.3 * nrows), squeeze=False)
    for ax in axes.flat[len(sets):]:
        ax.axis("off")
    for ax, name in zip(axes.flat, sets):
        g = rows[rows["set"] == name]
        for key, d in g.groupby(by):
            ax.scatter(d["measured_s"] * 1e3, d["predicted_s"] * 1e3, s=10, alpha=0.7, label=key)
        lo = min(g["measured_s"].min(), g["predicted_s"].min()) * 1e3 * 0.8
        hi = max(g["measured_s"].max(), g["predicted_s"].max()) * 1e3 * 1.25
        xs = np.array([lo, hi])
        ax.plot(xs, xs, "k-", lw=0.8)
        ax.fill_between(xs, xs * 0.8, xs * 1.2, color="grey", alpha=0.2, lw=0)
        ax.set(xscale="log", yscale="log", xlim=(lo, hi), ylim=(lo, hi), title=f"{name} (n={len(g)})",
               xlabel="measured ms", ylabel="emulated ms (held out)")
        if g[by].nunique() > 1:
            ax.legend(fontsize=7)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    for ext in ("png", "pdf"):
        fig.savefig(path.with_suffix(f".{ext}"), dpi=120)
    plt.close(fig)


def write_report(report_dir: Path, iteration: pd.DataFrame, kernel_rows: pd.DataFrame | None,
                 notes: list[str], op_classes: pd.DataFrame | None = None,
                 endtoend: pd.DataFrame | None = None) -> pd.DataFrame:
    """Markdown, CSVs of every held-out prediction, and the plots; returns the set summary.
    ``op_classes``: :func:`class_rows` (NeuSight's per-op labels), when available; ``endtoend``:
    :func:`predictor.emulator.devices.endtoend.all_rows`."""
    from predictor.emulator.devices import endtoend as e2e

    report_dir.mkdir(parents=True, exist_ok=True)
    sets = set_summary(iteration)
    kernels = kernel_summary(kernel_rows) if kernel_rows is not None and len(kernel_rows) else None
    classes = class_summary(op_classes) if op_classes is not None and len(op_classes) else None
    detail = kernel_detail(kernel_rows) if kernel_rows is not None and len(kernel_rows) else None
    unified = unified_rows(iteration, kernel_rows, endtoend)
    (report_dir / "report.md").write_text(markdown(sets, kernels, notes, phase_summary(iteration), classes,
                                                   unified, detail))
    if endtoend is not None and len(endtoend):
        endtoend.to_csv(report_dir / "endtoend.csv", index=False)
        e2e.plot(endtoend, report_dir / "endtoend")
    iteration.to_csv(report_dir / "iterations.csv", index=False)
    if kernels is not None:
        kernels.to_csv(report_dir / "kernels.csv")
    if len(iteration):
        plot(iteration, report_dir / "iterations")
    if classes is not None:
        op_classes.to_csv(report_dir / "op_classes.csv", index=False)
        plot(op_classes, report_dir / "op_classes", by="cls")
    return sets

"""Figures of a sweep or a single run: normalised JCT/tardiness bars, error curves, JCT CDFs,
cluster utilisation over time (PNG and PDF, matplotlib Agg).

Why: the paper's claims are comparisons with the truth predictor; every figure here is computed
from the sweep's results.parquet and per-job records through small functions that tests check
against hand computations (:func:`bar_data`, :func:`error_curve_data`, :func:`utilisation_series`).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Callable

import numpy as np
import pandas as pd

from simulator.sweep import load_results, normalise_to_truth, source_label


class PlotInputError(ValueError):
    """A directory that is neither a sweep (points/) nor a run (jobs.parquet)."""


def _pyplot():
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


def _save(fig, out: Path, name: str) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for ext in ("png", "pdf"):
        path = out / f"{name}.{ext}"
        fig.savefig(path, dpi=120 if ext == "png" else None, bbox_inches="tight")
        paths.append(path)
    _pyplot().close(fig)
    return paths


def _grid(n: int, *, width: float = 4.2, height: float = 3.2):
    plt = _pyplot()
    cols = min(n, 3)
    rows = -(-n // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(width * cols, height * rows), squeeze=False,
                             layout="constrained")
    for ax in axes.flat[n:]:
        ax.set_visible(False)
    return fig, list(axes.flat[:n])


def _panel_label(source: str, load: float, loads: int) -> str:
    return source + (f" (load x{load:g})" if loads > 1 else "")


def _noisy_mre(spec: str) -> float | None:
    m = re.fullmatch(r"noisy:([0-9.eE+-]+)", str(spec))
    try:
        return float(m.group(1)) if m else None
    except ValueError:
        return None


# ---------------------------------------------------------------------------------------------
# The numbers behind the figures


def bar_data(results: pd.DataFrame, metric: str = "jct_mean") -> pd.DataFrame:
    """Per (source, load_scale, policy, predictor): mean, min and max over seeds of metric / truth.

    Truth rows are left out (their ratio is 1 by definition); rows without a truth run or with an
    undefined ratio are dropped.
    """
    norm = normalise_to_truth(results, (metric,))
    col = f"{metric}_ratio"
    norm = norm[(norm["predictor"] != "truth") & norm[col].notna()]
    if norm.empty:
        return pd.DataFrame(columns=["source", "load_scale", "policy", "predictor", "mean", "min", "max", "n"])
    return (norm.groupby(["source", "load_scale", "policy", "predictor"])[col]
            .agg(mean="mean", min="min", max="max", n="count").reset_index())


def error_curve_data(results: pd.DataFrame, metric: str = "jct_mean") -> pd.DataFrame:
    """Per (source, load_scale, policy, mre): mean ratio to truth over seeds, for noisy:<MRE> points."""
    norm = normalise_to_truth(results, (metric,))
    norm = norm.assign(mre=[_noisy_mre(p) for p in norm["predictor"]])
    norm = norm[norm["mre"].notna() & norm[f"{metric}_ratio"].notna()]
    if norm.empty:
        return pd.DataFrame(columns=["source", "load_scale", "policy", "mre", "ratio"])
    return (norm.groupby(["source", "load_scale", "policy", "mre"])[f"{metric}_ratio"].mean()
            .rename("ratio").reset_index().sort_values(["source", "load_scale", "policy", "mre"]))


def utilisation_series(jobs: pd.DataFrame, total_gpus: int) -> tuple[np.ndarray, np.ndarray]:
    """Step function of busy GPUs / total: times t[i] and the fraction busy from t[i] to t[i+1]."""
    done = jobs[jobs["start"].notna() & jobs["end"].notna()]
    if done.empty or total_gpus <= 0:
        return np.zeros(1), np.zeros(1)
    t = np.concatenate([done["start"].to_numpy(float), done["end"].to_numpy(float)])
    d = np.concatenate([done["num_gpus"].to_numpy(float), -done["num_gpus"].to_numpy(float)])
    order = np.lexsort((d, t))  # at one instant: releases before starts
    t, d = t[order], d[order]
    uniq, idx = np.unique(t, return_index=True)
    busy = np.cumsum(d)
    last = np.r_[idx[1:] - 1, len(t) - 1]  # level after all changes at each instant
    return uniq, busy[last] / total_gpus


def _completed(jobs: pd.DataFrame) -> pd.DataFrame:
    return jobs[jobs["status"] == "completed"] if "status" in jobs else jobs


# ---------------------------------------------------------------------------------------------
# Figures


def plot_bars(results: pd.DataFrame, out: Path, metric: str, label: str) -> list[Path]:
    data = bar_data(results, metric)
    if data.empty:
        return []
    panels = list(data.groupby(["source", "load_scale"], sort=True))
    nloads = data["load_scale"].nunique()
    fig, axes = _grid(len(panels))
    predictors = sorted(data["predictor"].unique())
    for ax, ((source, load), d) in zip(axes, panels):
        policies = sorted(d["policy"].unique())
        width = 0.8 / max(1, len(predictors))
        for j, pred in enumerate(predictors):
            sel = d[d["predictor"] == pred].set_index("policy").reindex(policies)
            x = np.arange(len(policies)) + (j - (len(predictors) - 1) / 2) * width
            mean = sel["mean"].to_numpy(float)
            err = np.vstack([mean - sel["min"].to_numpy(float), sel["max"].to_numpy(float) - mean])
            ax.bar(x, mean, width, yerr=np.nan_to_num(err), capsize=2, label=pred)
        ax.axhline(1.0, color="black", lw=0.8, ls="--")
        ax.set_xticks(np.arange(len(policies)), policies)
        ax.set_title(_panel_label(source, load, nloads), fontsize=9)
        ax.set_ylabel(f"{label} / truth")
    axes[0].legend(fontsize=7, title="predictor", title_fontsize=7)
    fig.suptitle(f"{label} normalised to the truth predictor (mean over seeds, min-max bars)", fontsize=10)
    return _save(fig, out, f"{metric}_vs_truth")


def plot_error_curves(results: pd.DataFrame, out: Path) -> list[Path]:
    data = error_curve_data(results)
    if data.empty:
        return []
    panels = list(data.groupby(["source", "load_scale"], sort=True))
    nloads = data["load_scale"].nunique()
    fig, axes = _grid(len(panels))
    for ax, ((source, load), d) in zip(axes, panels):
        for policy, p in d.groupby("policy", sort=True):
            ax.plot(p["mre"], p["ratio"], marker="o", label=policy)
        ax.axhline(1.0, color="black", lw=0.8, ls="--")
        ax.set_xlabel("prediction MRE (noisy:X)")
        ax.set_ylabel("mean JCT / truth")
        ax.set_title(_panel_label(source, load, nloads), fontsize=9)
    axes[0].legend(fontsize=7, title="policy", title_fontsize=7)
    return _save(fig, out, "jct_vs_error")


def _cdf(ax, jct: np.ndarray, label: str) -> None:
    x = np.sort(jct)
    ax.step(x, np.arange(1, len(x) + 1) / max(1, len(x)), where="post", label=label)


def _record_selection(results: pd.DataFrame) -> pd.DataFrame:
    """ok rows of seed 0 (else the smallest seed) and load 1 (else the smallest), per source."""
    ok = results[results["status"] == "ok"].copy()
    if ok.empty:
        return ok
    ok["source"] = [source_label(r) for _, r in ok.iterrows()]
    keep = []
    for _, g in ok.groupby("source", sort=True):
        seed = 0 if (g["seed"] == 0).any() else g["seed"].min()
        load = 1.0 if (g["load_scale"] == 1.0).any() else g["load_scale"].min()
        keep.append(g[(g["seed"] == seed) & (g["load_scale"] == load)])
    return pd.concat(keep)


def plot_sweep_cdfs(results: pd.DataFrame, sweep: Path, out: Path) -> list[Path]:
    sel = _record_selection(results)
    if sel.empty:
        return []
    panels = list(sel.groupby(["policy", "source"], sort=True))
    fig, axes = _grid(len(panels))
    for ax, ((policy, source), g) in zip(axes, panels):
        for _, row in g.sort_values("predictor").iterrows():
            path = sweep / "runs" / row["key"] / "jobs.parquet"
            if path.exists():
                _cdf(ax, _completed(pd.read_parquet(path, columns=["status", "jct"]))["jct"].to_numpy(), row["predictor"])
        ax.set_xscale("log")
        ax.set_xlabel("JCT (s)")
        ax.set_ylabel("fraction of jobs")
        ax.set_title(f"{policy} | {source} | seed {int(g['seed'].iloc[0])}", fontsize=9)
        ax.legend(fontsize=7)
    return _save(fig, out, "jct_cdf")


def plot_sweep_utilisation(results: pd.DataFrame, sweep: Path, out: Path) -> list[Path]:
    sel = _record_selection(results)
    if sel.empty:
        return []
    policy = sorted(sel["policy"].unique())[0]
    source = sorted(sel["source"].unique())[0]
    g = sel[(sel["policy"] == policy) & (sel["source"] == source)]
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 3.4))
    for _, row in g.sort_values("predictor").iterrows():
        run = sweep / "runs" / row["key"]
        if (run / "jobs.parquet").exists():
            t, u = utilisation_series(pd.read_parquet(run / "jobs.parquet"), _total_gpus(run))
            ax.step(t / 3600, u, where="post", label=row["predictor"], lw=0.9)
    ax.set_xlabel("time (h)")
    ax.set_ylabel("busy GPUs / total")
    ax.set_ylim(0, 1.05)
    ax.set_title(f"cluster utilisation: {policy} | {source} | seed {int(g['seed'].iloc[0])}", fontsize=9)
    ax.legend(fontsize=7)
    return _save(fig, out, "utilisation")


def _total_gpus(run: Path) -> int:
    manifest = run / "manifest.json"
    if manifest.exists():
        info = json.loads(manifest.read_text())
        if "cluster" in info and "gpus" in info["cluster"]:
            return int(info["cluster"]["gpus"])
        cluster = info.get("config", {}).get("cluster")
        if cluster:
            from simulator.cluster import resolve

            return resolve(cluster).total_gpus
    raise PlotInputError(f"{run}: manifest.json with the cluster size is missing")


def plot_run(run: Path, out: Path) -> list[Path]:
    """JCT CDF and utilisation of one run directory."""
    plt = _pyplot()
    jobs = pd.read_parquet(run / "jobs.parquet")
    label = run.name
    manifest = run / "manifest.json"
    if manifest.exists():
        cfg = json.loads(manifest.read_text()).get("config", {})
        label = f"{cfg.get('policy')} | {cfg.get('predictor')}"
    fig, ax = plt.subplots(figsize=(5, 3.4))
    _cdf(ax, _completed(jobs)["jct"].to_numpy(), label)
    ax.set_xscale("log")
    ax.set_xlabel("JCT (s)")
    ax.set_ylabel("fraction of jobs")
    ax.set_title(f"JCT CDF: {label}", fontsize=9)
    paths = _save(fig, out, "jct_cdf")
    fig, ax = plt.subplots(figsize=(7, 3.4))
    t, u = utilisation_series(jobs, _total_gpus(run))
    ax.step(t / 3600, u, where="post", lw=0.9)
    ax.set_xlabel("time (h)")
    ax.set_ylabel("busy GPUs / total")
    ax.set_ylim(0, 1.05)
    ax.set_title(f"cluster utilisation: {label}", fontsize=9)
    return paths + _save(fig, out, "utilisation")


def plot(path: str | Path, out: str | Path | None = None, *,
         log: Callable[[str], None] = print) -> list[Path]:
    """All figures of a sweep directory (or a single run directory); returns the written files.

    Panels whose inputs are missing (e.g. no truth point, no noisy:X point) are skipped with a
    message through ``log``.
    """
    path = Path(path)
    out = Path(out) if out is not None else path / "plots"
    if (path / "points").is_dir():
        results = load_results(path)
        if not (results["status"] == "ok").any():
            raise PlotInputError(f"{path}: the sweep has no finished point to plot")
        written: list[Path] = []
        has_truth = (results.loc[results["status"] == "ok", "predictor"] == "truth").any()
        for metric, label in (("jct_mean", "mean JCT"), ("tardiness_total", "total tardiness")):
            files = plot_bars(results, out, metric, label)
            if not files:
                log(f"skipped {metric} bars: " + ("no non-truth point with a matching truth run"
                                                 if has_truth else "the sweep has no truth point"))
            written += files
        files = plot_error_curves(results, out)
        if not files:
            log("skipped JCT-vs-error curves: " + ("no noisy:X point with a matching truth run"
                                                  if has_truth else "the sweep has no truth point"))
        written += files
        written += plot_sweep_cdfs(results, path, out)
        written += plot_sweep_utilisation(results, path, out)
        return written
    if (path / "jobs.parquet").is_file():
        log(f"{path} is a single run: JCT CDF and utilisation only")
        return plot_run(path, out)
    raise PlotInputError(f"{path}: neither a sweep directory (points/) nor a run directory (jobs.parquet)")


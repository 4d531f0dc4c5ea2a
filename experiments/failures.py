"""What failures cost each scheduler, and where checkpoints should go as the failure rate grows.

Why: a real cluster loses attempts (Philly: 30.5 % of GPU jobs end failed) and whole nodes; a
scheduler's ranking of policies measured on a cluster where nothing fails may not survive that.
Two sweeps on bound PAI-like and Philly-like workloads (every predictor sees the same jobs) on
the default 36-GPU cluster:

* **Degradation**: policies × failure models × predictors (truth, ETS — the shipped checkpoints:
  **emulated** GPUs —, and the truth with an injected error of mean relative error 0.2), with
  Young/Daly's checkpoint interval. Each run's avg JCT and total tardiness as a ratio to the same
  policy, predictor, workload and seed without failures, pooled over seeds (sum / sum); goodput
  and failed attempts beside them; which policy degrades least.
* **Checkpoints**: two policies (``hydra``, non-preemptive; ``tiresias``, preemptive) with the
  truth × node-failure rates × checkpoint intervals (Young/Daly's, fixed ones, none): per rate,
  the interval with the best mean JCT and the best goodput, beside Young/Daly's median interval.

Failure models: ``jobs:philly`` (AcmeTrace's published Philly shares; retried attempts from the
Philly subset, which must be under ``../shared``: the model is left out, and said so, without
it), ``nodes:llama3`` (Llama 3's published rate) and node rates of 0.01, 0.05 and 0.2 failures
per GPU-day (:data:`RATE_REASON`). Figures (PNG and PDF): the JCT growth per policy and failure
model, and JCT against the checkpoint interval per failure rate; intervals are min–max over seeds.

    python -m experiments.failures [--quick] [--jobs 400] [--seeds 3] [--out reports/failures] [--workers 2]

Resumable: finished sweep points are skipped on a rerun. A point that fails does not stop the
others: its cells are left empty, never pooled over fewer seeds. A run the simulator stops
because a job cannot finish between failures (no checkpoints at a high rate) is a result ("no
end"); any other failure is listed as an error with its traceback. A rerun runs failed points again.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import click
import numpy as np
import pandas as pd

from experiments.sweeps import sweep_options

POLICIES = ("fifo", "sjf", "hydra", "allox", "srtf", "tiresias", "gavel")
QUICK_POLICIES = ("fifo", "hydra", "tiresias")  # the fast ones: one of each kind (blind, deadline-aware, preemptive)
PREDICTORS = ("truth", "ets", "noisy:0.2")
QUICK_PREDICTORS = ("truth", "noisy:0.2")  # ETS's table of a new workload takes minutes to build
WORKLOADS = ("pai-like", "philly-like")
NO_FAILURES = "none"
JOB_FAILURES = "jobs:philly"
NODE_RATES = (0.01, 0.05, 0.2)
FAILURES = (NO_FAILURES, JOB_FAILURES, "nodes:llama3", *(f"nodes:{r:g}" for r in NODE_RATES))
QUICK_FAILURES = (NO_FAILURES, "nodes:0.05", "nodes:0.2")  # no shared data needed
RATE_REASON = (
    "The published node rates are of large clusters: Llama 3's 4.7e-4 failures per GPU-day gives the "
    "36-GPU default cluster one failure per 59 days, so a workload of one to four weeks sees none or one. "
    "0.01, 0.05 and 0.2 per GPU-day (21x, 105x and 420x Llama 3's) give a gradient from a few to a few "
    "hundred node failures per run; 0.05 is about what the Philly subset's retried attempts amount to "
    "(a failure every 48-55 h per job of 4-16 GPUs: 0.03-0.11 per GPU-day), 0.2 twice its busiest class.")
OPTIMAL = "optimal"  # Young/Daly (the runs' default: checkpoint_every None)
NEVER = "none"
FIXED_INTERVALS = (600, 1800, 3600, 7200, 14400)
QUICK_INTERVALS = (600, 3600, 14400)
CHECKPOINT_POLICIES = ("hydra", "tiresias")
QUICK_CHECKPOINT_POLICIES = ("hydra",)
# The simulator's reason for stopping a run in which a job fails for ever (no checkpoints, a
# failure rate above what its run time allows): a result of the model, not an error of the code.
NO_END = "cannot finish between failures"
JOBS = 400
GROUP = ["workload", "policy", "predictor", "failures", "interval"]
OVERALL = "overall (geometric mean)"


def rate_of(spec: str) -> float | None:
    """The failures per GPU-day of a ``nodes:RATE`` spec (None for any other)."""
    kind, _, arg = spec.partition(":")
    try:
        return float(arg.split(",")[0]) if kind == "nodes" else None
    except ValueError:
        return None


def job_failures_available() -> bool:
    """Whether ``jobs:philly`` can run: its retried attempts come from the Philly subset in ../shared."""
    from simulator.failure_models import default_attempts_file

    return default_attempts_file().is_file()


def grid(jobs: int, seeds: int, *, workloads=WORKLOADS, policies=POLICIES, predictors=PREDICTORS,
         failures=FAILURES, rates=NODE_RATES, intervals=FIXED_INTERVALS, checkpoint_policies=CHECKPOINT_POLICIES):
    """The degradation grid (Young/Daly's interval) and the checkpoint grid (truth, node rates ×
    intervals), every point bound (the same jobs for every predictor, failures or not)."""
    from simulator.sweep.grid import plan

    kinds = [f"{w}:{jobs}" for w in workloads]
    points = plan(list(policies), list(predictors), workloads=kinds, seeds=seeds, failures=list(failures))
    for rate in rates:
        every = [*(str(s) for s in intervals), NEVER]
        models = [NO_FAILURES, f"nodes:{rate:g}"]
        points += plan(list(checkpoint_policies), ["truth"], workloads=kinds, seeds=seeds, failures=models)
        points += plan(list(checkpoint_policies), ["truth"], workloads=kinds, seeds=seeds, failures=models[1:],
                       checkpoints=every)
    return list(dict.fromkeys(replace(c, bind=True) for c in points))


def sweep(configs, directory: Path, workers: int) -> pd.DataFrame:
    """The grid's rows of the (resumable) sweep, failed points included; with each run's median
    checkpoint interval (``interval_s``) read from its manifest."""
    from simulator.sweep.driver import run_sweep
    from simulator.sweep.points import config_key

    results = run_sweep(configs, directory, workers=workers, progress=True)
    results = results[results["key"].isin({config_key(c) for c in configs})].copy()
    results["interval_s"] = [median_interval(directory, key) if ok else np.nan
                             for key, ok in zip(results["key"], results["status"] == "ok")]
    return results


def manifest(directory: Path, key: str) -> dict:
    path = directory / "runs" / key / "manifest.json"
    return json.loads(path.read_text()) if path.is_file() else {}


def median_interval(directory: Path, key: str) -> float:
    """The run's median checkpoint interval over its jobs (Young/Daly's where it was ``optimal``)."""
    value = (manifest(directory, key).get("failures") or {}).get("checkpoint_interval_s_median")
    return np.nan if value is None else float(value)


def labelled(results: pd.DataFrame) -> pd.DataFrame:
    """The rows with ``workload`` as its kind (``pai-like``) and ``interval``: ``optimal`` (the
    runs' default), ``none`` or seconds as text; "-" for a run without failures."""
    out = results.copy()
    out["workload"] = out["workload"].astype(str).str.split(":").str[0]
    every = out["checkpoint_every"].astype(object).where(out["checkpoint_every"].notna(), OPTIMAL)
    out["interval"] = np.where(out["failures"] == NO_FAILURES, "-", every.astype(str))
    return out


def with_baseline(results: pd.DataFrame) -> pd.DataFrame:
    """Every row with ``<metric>_base``: the same policy, predictor, workload and seed without
    failures (NaN where that run is missing or failed)."""
    rows = labelled(results)
    keys = ["workload", "policy", "predictor", "seed"]
    base = rows[(rows["failures"] == NO_FAILURES) & (rows["status"] == "ok")]
    base = base[keys + ["jct_mean", "tardiness_total"]].drop_duplicates(keys)
    return rows.merge(base, on=keys, how="left", suffixes=("", "_base"))


def _ratio(num: float, den: float) -> float:
    """num / den; 1 when both are 0, NaN when only den is (tardiness of a run with none)."""
    if den > 0:
        return num / den
    return 1.0 if num == 0 else np.nan


def _failed(group: pd.DataFrame) -> str | None:
    """Why a cell is left empty: its failed points (or a baseline missing), else None."""
    bad = group[group["status"] != "ok"]
    if len(bad):
        return f"{len(bad)} of {len(group)} points failed: {bad['error'].iloc[0]}"
    if group["jct_mean_base"].isna().any():
        return "a run without failures is missing or failed"
    return None


def cells(results: pd.DataFrame) -> pd.DataFrame:
    """Per workload × policy × predictor × failure model × checkpoint interval (runs with
    failures only): JCT and tardiness pooled over seeds as ratios to the runs without failures
    (sum / sum), the per-seed JCT ratios' min and max, mean JCT and its added hours, goodput,
    failed attempts and jobs that ended failed or cancelled (means over seeds). A cell with a
    failed point is empty, its ``error`` saying why: never pooled over fewer seeds."""
    rows = with_baseline(results)
    rows = rows[rows["failures"] != NO_FAILURES]
    out = []
    for (workload, policy, predictor, failures, interval), g in rows.groupby(GROUP, sort=False):
        cell = {"workload": workload, "policy": policy, "predictor": predictor, "failures": failures,
                "interval": interval, "seeds": len(g), "error": _failed(g)}
        if cell["error"] is None:
            per_seed = g["jct_mean"].to_numpy(float) / g["jct_mean_base"].to_numpy(float)
            ended = (g["jobs_failed"] + g["jobs_cancelled"]) / g["jobs"]
            cell.update(
                jct_mean_h=g["jct_mean"].mean() / 3600,
                jct_added_h=(g["jct_mean"].mean() - g["jct_mean_base"].mean()) / 3600,
                jct_ratio=_ratio(g["jct_mean"].sum(), g["jct_mean_base"].sum()),
                jct_ratio_min=per_seed.min(), jct_ratio_max=per_seed.max(),
                tardiness_h=g["tardiness_total"].mean() / 3600,
                tardiness_base_h=g["tardiness_total_base"].mean() / 3600,
                tardiness_ratio=_ratio(g["tardiness_total"].sum(), g["tardiness_total_base"].sum()),
                goodput=g["goodput"].mean(), goodput_min=g["goodput"].min(), goodput_max=g["goodput"].max(),
                failed_attempts=g["failed_attempts"].mean(), ended_failed_share=ended.mean(),
                interval_s=g["interval_s"].mean())
        out.append(cell)
    return pd.DataFrame(out)


def degradation(table: pd.DataFrame) -> pd.DataFrame:
    """The cells of the degradation sweep (Young/Daly's interval)."""
    return table[table["interval"] == OPTIMAL].drop(columns="interval").reset_index(drop=True)


def least_degraded(growth: pd.DataFrame) -> pd.DataFrame:
    """Per workload × predictor × failure model: the policy whose pooled JCT grows least and the
    one that grows most (by ratio), among the policies with a result there; and ``overall``: the
    least geometric mean of the ratios over the failure models, among policies with all of them."""
    ok = growth[growth["error"].isna() & growth["jct_ratio"].notna()]
    out = []
    for (workload, predictor, failures), g in ok.groupby(["workload", "predictor", "failures"], sort=False):
        best, worst = g.loc[g["jct_ratio"].idxmin()], g.loc[g["jct_ratio"].idxmax()]
        out.append({"workload": workload, "predictor": predictor, "failures": failures,
                    "least": best["policy"], "least_ratio": best["jct_ratio"],
                    "most": worst["policy"], "most_ratio": worst["jct_ratio"], "policies": len(g)})
    models = growth["failures"].nunique()
    for (workload, predictor), g in ok.groupby(["workload", "predictor"], sort=False):
        complete = g.groupby("policy").filter(lambda p: p["failures"].nunique() == models)
        if complete.empty:
            continue
        mean = complete.groupby("policy")["jct_ratio"].apply(lambda r: float(np.exp(np.log(r).mean())))
        out.append({"workload": workload, "predictor": predictor, "failures": OVERALL,
                    "least": mean.idxmin(), "least_ratio": mean.min(), "most": mean.idxmax(),
                    "most_ratio": mean.max(), "policies": len(mean)})
    table = pd.DataFrame(out, columns=["workload", "predictor", "failures", "least", "least_ratio", "most",
                                       "most_ratio", "policies"])
    order = {"predictor": list(PREDICTORS), "failures": [*FAILURES, OVERALL]}
    return table.sort_values(["workload", "predictor", "failures"], kind="stable", key=lambda c: c.map(
        {v: i for i, v in enumerate(order[c.name])}) if c.name in order else c).reset_index(drop=True)


def checkpoint_cells(table: pd.DataFrame, policies=CHECKPOINT_POLICIES) -> pd.DataFrame:
    """The checkpoint sweep's cells: truth, node-failure rates, with the rate as a number."""
    rates = table["failures"].map(rate_of)
    part = table[(table["predictor"] == "truth") & table["policy"].isin(policies) & rates.notna()].copy()
    part["rate"] = rates[part.index]
    return part.reset_index(drop=True)


def best_intervals(points: pd.DataFrame) -> pd.DataFrame:
    """Per workload × policy × failure rate: the interval of the best mean JCT and of the best
    mean goodput (over the intervals with a result), Young/Daly's median interval, and how much
    of Young/Daly's JCT the best interval saves."""
    out = []
    for (workload, policy, rate), g in points.groupby(["workload", "policy", "rate"], sort=True):
        ok = g[g["error"].isna()]
        if ok.empty:
            continue
        fast, good = ok.loc[ok["jct_mean_h"].idxmin()], ok.loc[ok["goodput"].idxmax()]
        optimal = ok[ok["interval"] == OPTIMAL]
        yd = optimal.iloc[0] if len(optimal) else None
        out.append({"workload": workload, "policy": policy, "rate": rate,
                    "young_daly_s": np.nan if yd is None else yd["interval_s"],
                    "best_jct": fast["interval"], "best_jct_ratio": fast["jct_ratio"],
                    "young_daly_jct_ratio": np.nan if yd is None else yd["jct_ratio"],
                    "best_vs_young_daly": np.nan if yd is None else fast["jct_mean_h"] / yd["jct_mean_h"],
                    "best_goodput": good["interval"], "best_goodput_value": good["goodput"],
                    "young_daly_goodput": np.nan if yd is None else yd["goodput"],
                    "intervals": len(ok)})
    return pd.DataFrame(out)


def failed_points(results: pd.DataFrame, directory: Path) -> pd.DataFrame:
    """The failed points grouped by policy, failure model and error: how many, and the first
    one's traceback (its run folder's error.txt)."""
    bad = labelled(results[results["status"] != "ok"])
    bad["kind"] = np.where(bad["error"].astype(str).str.contains(NO_END, regex=False), "no end", "error")
    out = []
    for (kind, policy, failures, interval), g in bad.groupby(["kind", "policy", "failures", "interval"], sort=True):
        path = directory / "runs" / g["key"].iloc[0] / "error.txt"
        out.append({"kind": kind, "policy": policy, "failures": failures, "interval": interval,
                    "error": g["error"].iloc[0], "points": len(g),
                    "example": f"{g['workload'].iloc[0]} seed {g['seed'].iloc[0]} {g['predictor'].iloc[0]}",
                    "traceback": path.read_text() if path.is_file() else ""})
    return pd.DataFrame(out, columns=["kind", "policy", "failures", "interval", "error", "points", "example",
                                      "traceback"])


def sources(results: pd.DataFrame, directory: Path) -> dict[str, list[dict]]:
    """Each failure model's parameters and sources, as a run's manifest records them."""
    out = {}
    for spec, g in results[(results["status"] == "ok") & (results["failures"] != NO_FAILURES)].groupby("failures"):
        out[spec] = (manifest(directory, g["key"].iloc[0]).get("failures") or {}).get("models", [])
    return out


# -- figures ----------------------------------------------------------------------------------

def growth_figure(growth: pd.DataFrame, out: Path) -> list[Path]:
    """Pooled avg-JCT ratio to no failures per policy (bars: failure models), per workload
    (rows) and predictor (columns); whiskers: the per-seed ratios' min and max."""
    from simulator.plots import _pyplot, _save

    plt = _pyplot()
    workloads = list(dict.fromkeys(growth["workload"]))
    predictors = [p for p in PREDICTORS if p in set(growth["predictor"])]
    models = [m for m in FAILURES if m in set(growth["failures"])]
    fig, axes = plt.subplots(len(workloads), len(predictors), figsize=(5.5 * len(predictors), 3.6 * len(workloads)),
                             squeeze=False)
    width = 0.8 / max(1, len(models))
    for row, workload in zip(axes, workloads):
        for ax, predictor in zip(row, predictors):
            part = growth[(growth["workload"] == workload) & (growth["predictor"] == predictor)]
            policies = [p for p in POLICIES if p in set(part["policy"])]
            x = np.arange(len(policies))
            for i, model in enumerate(models):
                cell = part[part["failures"] == model].set_index("policy").reindex(policies)
                ratio = cell["jct_ratio"].to_numpy(float)
                spread = np.vstack([ratio - cell["jct_ratio_min"].to_numpy(float),
                                    cell["jct_ratio_max"].to_numpy(float) - ratio])
                ax.bar(x + (i - (len(models) - 1) / 2) * width, ratio, width, yerr=np.nan_to_num(spread),
                       label=model, capsize=2)
                for xi in x[np.isnan(ratio)]:  # a failed cell: marked, not drawn as 0
                    ax.text(xi + (i - (len(models) - 1) / 2) * width, 1.0, "×", ha="center", color="red")
            ax.axhline(1.0, color="grey", linewidth=0.8)
            ax.set_xticks(x, policies, fontsize=8)
            ax.set(title=f"{workload}, {predictor}", ylabel="avg JCT / without failures")
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="upper center", ncol=len(models), fontsize=8,
               title="failures (× = a run failed)", title_fontsize=8)
    fig.tight_layout(rect=(0, 0, 1, 1 - 0.35 / (3.6 * len(workloads))))
    return _save(fig, out, "failures_growth")


def checkpoint_figure(points: pd.DataFrame, out: Path) -> list[Path]:
    """Avg JCT (ratio to no failures; top) and goodput (bottom) against the fixed checkpoint
    interval, one line per failure rate; a star at Young/Daly's median interval, "none" at the
    right ("no end" where a run without checkpoints could not end); whiskers: min–max over seeds.
    One column per workload × policy."""
    from simulator.plots import _pyplot, _save

    plt = _pyplot()
    panels = sorted(dict.fromkeys(zip(points["workload"], points["policy"])), key=lambda p: (p[1], p[0]))
    fig, axes = plt.subplots(2, len(panels), figsize=(4.6 * len(panels), 7), squeeze=False)
    fixed = sorted({float(i) for i in points["interval"] if i.replace(".", "").isdigit()})
    never_x = 4 * max(fixed) if fixed else 1.0
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for col, (workload, policy) in enumerate(panels):
        part = points[(points["workload"] == workload) & (points["policy"] == policy)]
        for j, (rate, every) in enumerate(part.groupby("rate", sort=True)):
            color = colors[j % len(colors)]
            g = every[every["error"].isna()]
            numeric = g[g["interval"].str.replace(".", "", regex=False).str.isdigit()].copy()
            numeric["x"] = numeric["interval"].astype(float)
            numeric = numeric.sort_values("x")
            for ax, (metric, lo, hi) in zip(axes[:, col], (("jct_ratio", "jct_ratio_min", "jct_ratio_max"),
                                                           ("goodput", "goodput_min", "goodput_max"))):
                y = numeric[metric].to_numpy(float)
                ax.errorbar(numeric["x"], y, yerr=[y - numeric[lo], numeric[hi] - y], color=color, marker="o",
                            capsize=2, label=f"{rate:g} / GPU-day")
                for interval, marker, size in ((OPTIMAL, "*", 14), (NEVER, "X", 9)):
                    row = g[g["interval"] == interval]
                    if len(row):
                        r = row.iloc[0]
                        x = r["interval_s"] if interval == OPTIMAL else never_x
                        ax.errorbar([x], [r[metric]], yerr=[[r[metric] - r[lo]], [r[hi] - r[metric]]], color=color,
                                    marker=marker, markersize=size, capsize=2, linestyle="none")
                stuck = every[(every["interval"] == NEVER) & every["error"].fillna("").str.contains(NO_END)]
                if len(stuck):  # a run without checkpoints that could not end: said, not drawn
                    ax.text(never_x, 0.97 - 0.06 * j, "no end", transform=ax.get_xaxis_transform(), color=color,
                            ha="center", va="top", fontsize=7)
        for ax in axes[:, col]:
            ax.set_xscale("log")
            ticks = [*fixed, never_x]
            ax.set_xticks(ticks, [f"{t:g}" for t in fixed] + ["none"], fontsize=7)
            ax.minorticks_off()
        axes[0, col].axhline(1.0, color="grey", linewidth=0.8)
        axes[0, col].set(title=f"{workload}, {policy} (truth)", ylabel="avg JCT / without failures")
        axes[1, col].set(xlabel="checkpoint interval (s of work); ★ Young/Daly (median)", ylabel="goodput")
    axes[0, 0].legend(fontsize=7, title="node failures", title_fontsize=7)
    fig.tight_layout()
    return _save(fig, out, "failures_checkpoints")


# -- the experiment -----------------------------------------------------------------------------

def run(out: Path, jobs: int, seeds: int, workers: int, quick: bool = False):
    """The sweep (resumable), its tables and figures. ``quick``: Philly-like only, FIFO, Hydra and
    Tiresias, truth and noisy:0.2, node failures only, Hydra's checkpoints at three intervals.
    Returns (growth, least degraded, checkpoint cells, best intervals, failed points, sources,
    figures)."""
    with_jobs = not quick and job_failures_available()
    models = QUICK_FAILURES if quick else tuple(m for m in FAILURES if with_jobs or m != JOB_FAILURES)
    configs = (grid(jobs, seeds, workloads=("philly-like",), policies=QUICK_POLICIES, predictors=QUICK_PREDICTORS,
                    failures=models, rates=(0.05, 0.2), intervals=QUICK_INTERVALS,
                    checkpoint_policies=QUICK_CHECKPOINT_POLICIES) if quick
               else grid(jobs, seeds, failures=models))
    directory = out / "sweep"
    results = sweep(configs, directory, workers)
    table = cells(results)
    growth = degradation(table)
    points = checkpoint_cells(table, QUICK_CHECKPOINT_POLICIES if quick else CHECKPOINT_POLICIES)
    figures = growth_figure(growth, out) + checkpoint_figure(points, out)
    return (growth, least_degraded(growth), points, best_intervals(points), failed_points(results, directory),
            sources(results, directory), figures)


def _empty(error: str) -> str:
    """A cell left empty: "no end" where the simulator stopped a run that could not end, else "error"."""
    return f"no end ({error.split(' points')[0]})" if NO_END in error else "error"


def _num(x, fmt: str) -> str:
    return "–" if x is None or (isinstance(x, float) and not np.isfinite(x)) else format(x, fmt)


def growth_markdown(growth: pd.DataFrame, predictor: str = "truth") -> str:
    """Per workload, policy × failure model: pooled JCT ratio [seed min–max] and tardiness ratio."""
    part = growth[growth["predictor"] == predictor]
    models = [m for m in FAILURES if m in set(part["failures"])]
    lines = ["| workload | policy | " + " | ".join(models) + " |", "|---|---|" + "---|" * len(models)]
    for workload in dict.fromkeys(part["workload"]):
        here = part[part["workload"] == workload].set_index(["policy", "failures"])
        for policy in [p for p in POLICIES if p in set(part.loc[part["workload"] == workload, "policy"])]:
            cells_ = []
            for model in models:
                if (policy, model) not in here.index:
                    cells_.append("")
                    continue
                r = here.loc[(policy, model)]
                cells_.append(_empty(r["error"]) if isinstance(r["error"], str) else
                              f"{r['jct_ratio']:.3f} [{r['jct_ratio_min']:.2f}–{r['jct_ratio_max']:.2f}]; "
                              f"tard. {_num(r['tardiness_ratio'], '.2f')}")
            lines.append(f"| {workload} | {policy} | " + " | ".join(cells_) + " |")
    return "\n".join(lines)


def detail_markdown(growth: pd.DataFrame) -> str:
    """Every degradation cell: the ratios, absolute JCT and tardiness, goodput, failures."""
    lines = ["| workload | policy | predictor | failures | avg JCT (h) | added (h) | JCT ratio [min–max] | "
             "tardiness (h) | without (h) | tard. ratio | goodput | failed attempts | ended failed/cancelled |",
             "|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in growth.itertuples(index=False):
        head = f"| {r.workload} | {r.policy} | {r.predictor} | {r.failures} |"
        if isinstance(r.error, str):
            lines.append(head + f" error: {r.error.splitlines()[0][:120]} |" + " |" * 8)
            continue
        lines.append(head + f" {r.jct_mean_h:,.2f} | {r.jct_added_h:+,.2f} | {r.jct_ratio:.3f} "
                     f"[{r.jct_ratio_min:.2f}–{r.jct_ratio_max:.2f}] | {r.tardiness_h:,.1f} | "
                     f"{r.tardiness_base_h:,.1f} | "
                     f"{_num(r.tardiness_ratio, '.2f')} | {r.goodput:.3f} | {r.failed_attempts:,.1f} | "
                     f"{r.ended_failed_share:.1%} |")
    return "\n".join(lines)


def least_markdown(least: pd.DataFrame) -> str:
    lines = ["| workload | predictor | failures | least growth | most growth | policies |",
             "|---|---|---|---|---|---:|"]
    for r in least.itertuples(index=False):
        lines.append(f"| {r.workload} | {r.predictor} | {r.failures} | {r.least} ({r.least_ratio:.3f}) | "
                     f"{r.most} ({r.most_ratio:.3f}) | {r.policies} |")
    return "\n".join(lines)


def checkpoint_markdown(points: pd.DataFrame, best: pd.DataFrame) -> str:
    """Per workload × policy × rate: the JCT ratio at every interval, then the best ones."""
    order = [OPTIMAL, *(str(s) for s in sorted({int(float(i)) for i in points["interval"]
                                                if i.replace(".", "").isdigit()})), NEVER]
    order = [i for i in order if i in set(points["interval"])]
    lines = ["Avg JCT / without failures (pooled over seeds), goodput in brackets:", "",
             "| workload | policy | failures / GPU-day | " + " | ".join(order) + " |",
             "|---|---|---:|" + "---:|" * len(order)]
    for (workload, policy, rate), g in points.groupby(["workload", "policy", "rate"], sort=True):
        g = g.set_index("interval")
        row = []
        for i in order:
            if i not in g.index:
                row.append("–")
            elif isinstance(g.loc[i, "error"], str):
                row.append(_empty(g.loc[i, "error"]))
            else:
                row.append(f"{g.loc[i, 'jct_ratio']:.3f} ({g.loc[i, 'goodput']:.3f})")
        lines.append(f"| {workload} | {policy} | {rate:g} | " + " | ".join(row) + " |")
    lines += ["", "| workload | policy | failures / GPU-day | Young/Daly median (s) | best by JCT | its JCT ratio | "
              "Young/Daly's | best / Young/Daly JCT | best by goodput | its goodput | Young/Daly's |",
              "|---|---|---:|---:|---|---:|---:|---:|---|---:|---:|"]
    for r in best.itertuples(index=False):
        lines.append(f"| {r.workload} | {r.policy} | {r.rate:g} | {_num(r.young_daly_s, ',.0f')} | {r.best_jct} | "
                     f"{r.best_jct_ratio:.3f} | {_num(r.young_daly_jct_ratio, '.3f')} | "
                     f"{_num(r.best_vs_young_daly, '.3f')} | {r.best_goodput} | {r.best_goodput_value:.3f} | "
                     f"{_num(r.young_daly_goodput, '.3f')} |")
    return "\n".join(lines)


def sources_markdown(models: dict[str, list[dict]]) -> str:
    lines = []
    for spec, described in models.items():
        for m in described:
            what = {k: m[k] for k in ("rate_per_gpu_day", "fail_share", "fail_gpu_time_share", "cancel_share",
                                      "cancel_gpu_time_share") if m.get(k) is not None}
            repair = f"; repair: {m['repair']['distribution']} mean {m['repair']['mean_s']:,.0f} s — " \
                     f"{m['repair']['source']}" if "repair" in m else ""
            params = ", ".join(f"{k} {v:.3g}" for k, v in what.items())
            lines.append(f"- `{spec}` ({m.get('model')}{', ' + params if params else ''}): {m.get('source')}{repair}")
    return "\n".join(lines)


def failed_markdown(failed: pd.DataFrame) -> str:
    """The runs the simulator stopped because they could not end (a result: one line each), then
    the errors with the tail of their tracebacks (a bug to report)."""
    ended = failed[failed["kind"] == "no end"]
    errors = failed[failed["kind"] != "no end"]
    from traces.schema import MAX_ATTEMPTS

    parts = [f"Runs that cannot end (the simulator stops a job after {MAX_ATTEMPTS:,} failed attempts):" if len(ended)
             else "Every run ended."]
    parts += [f"- `{r.policy}`, `{r.failures}`, checkpoints `{r.interval}`: {r.points} point(s), e.g. {r.example}: "
              f"{r.error}" for r in ended.itertuples(index=False)]
    parts.append("" if errors.empty else "Errors:")
    for r in errors.itertuples(index=False):
        tail = "\n".join(r.traceback.strip().splitlines()[-14:])
        parts.append(f"- `{r.policy}`, `{r.failures}`, checkpoints `{r.interval}`: {r.points} point(s) failed, "
                     f"e.g. {r.example}: `{r.error}`\n\n```\n{tail}\n```")
    if errors.empty:
        parts.append("No point failed with an error.")
    return "\n".join(parts)


def report(jobs: int, seeds: int, quick: bool, growth, least, points, best, failed, models) -> str:
    predictors = [p for p in PREDICTORS if p in set(growth["predictor"])]
    text = [
        "# Failures: how much JCT and tardiness grow, and where checkpoints should go",
        f"{'Quick run: ' if quick else ''}{jobs} jobs per workload (bound: every predictor sees the same jobs), "
        f"{seeds} seed(s), the default cluster (36 GPUs: T4, P100, V100). The predictions are **emulated**: ETS is "
        "the shipped checkpoints' prediction of the emulated GPUs' times, `noisy:0.2` the emulated truth with a "
        "seeded error of mean relative error 0.2. Ratios are to the same policy, predictor, workload and seed "
        "without failures, pooled over seeds (sum / sum); [min–max] the per-seed ratios. JCT and tardiness are "
        "over the jobs that completed: with `jobs:philly` about a third of the jobs end failed or cancelled, "
        "so its ratios compare different sets of jobs. A failed job comes back to its policy as a new arrival "
        "(FIFO puts it at the back of its queue).",
        "## Failure models and their sources (from the runs' manifests)", sources_markdown(models),
        "Why these node rates: " + RATE_REASON,
        *(s for p in predictors for s in (f"## JCT growth with failures ({p}; Young/Daly's interval)",
                                          growth_markdown(growth, p))),
        "## Which policy degrades least (pooled avg-JCT ratio)", least_markdown(least) if len(least) else "–",
        "## Checkpoint interval against failure rate (truth)", checkpoint_markdown(points, best) if len(best) else "–",
        "Young/Daly's interval is per job, from its MTBF (86,400 / (rate × its GPUs)); the median is of the "
        "jobs' intervals (1-GPU jobs' mostly). \"no end\": without checkpoints, a job of days on a node that fails "
        "more often starts from nothing again and again; the simulator stops such a run.",
        "## Every cell", detail_markdown(growth),
        "## Failed points", failed_markdown(failed),
    ]
    return "\n\n".join(text) + "\n"


def write(out: Path, jobs: int, seeds: int, quick: bool, parts) -> str:
    """OUT/report.md, the tables as CSV (growth, checkpoints, best intervals) and results.json,
    from :func:`run`'s ``parts``; returns the report's text."""
    growth, least, points, best, failed, models, _ = parts
    text = report(jobs, seeds, quick, growth, least, points, best, failed, models)
    (out / "report.md").write_text(text)
    growth.to_csv(out / "growth.csv", index=False)
    points.to_csv(out / "checkpoints.csv", index=False)
    best.to_csv(out / "best_intervals.csv", index=False)
    (out / "results.json").write_text(json.dumps(
        {"growth": growth.to_dict("records"), "least_degraded": least.to_dict("records"),
         "checkpoints": points.to_dict("records"), "best_intervals": best.to_dict("records"),
         "failed": failed.drop(columns="traceback").to_dict("records"), "sources": models},
        indent=1, default=float) + "\n")
    return text


@click.command()
@sweep_options(JOBS, "reports/failures", "One 120-job Philly-like workload, one seed, FIFO, Hydra and Tiresias, "
               "truth and noisy:0.2, node failures only (the test suite's mode).")
def main(quick: bool, jobs: int, seeds: int, out: Path, workers: int) -> None:
    """How failures slow schedulers down, and where checkpoints should go."""
    out.mkdir(parents=True, exist_ok=True)
    jobs, seeds = (120, 1) if quick else (jobs, seeds)
    parts = run(out, jobs, seeds, workers, quick)
    write(out, jobs, seeds, quick, parts)
    growth, least, points, best, failed, _, figures = parts
    click.echo(growth_markdown(growth))
    click.echo(least_markdown(least))
    if len(best):
        click.echo(checkpoint_markdown(points, best))
    errors = failed[failed["kind"] != "no end"]
    if len(errors):
        click.echo(f"{int(errors['points'].sum())} point(s) failed with an error: see the report")
    click.echo(f"wrote {out / 'report.md'} and {', '.join(map(str, figures))}")


if __name__ == "__main__":
    main()

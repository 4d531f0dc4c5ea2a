"""Risk-aware deadline scheduling: Hydra and EDF planning deadlines with a quantile of the run time.

Why: a predictor that states its uncertainty (:mod:`predictor.intervals`; ``noisy:<MRE>`` has an
exact one) lets a deadline scheduler plan each deadline with the Q-quantile of the run time instead
of the point estimate (``deadline_quantile=Q``; JCT is still planned with the point). This measures
what that buys and costs: Hydra and EDF, the point estimate against Q = 0.5, 0.8, 0.9, 0.95, with
ETS, Habitat-style, DNNPerf-style and ``noisy:0.1``/``noisy:0.2`` run times, on PAI-like and
Philly-like workloads (bound to workload configs, so every predictor sees the same jobs), over seeds.

Every figure is a pooled ratio to the same policy planned with the true run times (sum over seeds
/ sum of truth's): late jobs, total tardiness, average JCT. The trade-off plot puts tardiness
against JCT, one line per predictor from the point estimate through rising Q. Truth, ETS and the
baselines' run times come from the emulated GPUs and the shipped checkpoints (emulated; see
docs/gpus.md), ``noisy`` from truth × a seeded log-normal error.

    python -m experiments.risk [--quick] [--jobs 400] [--seeds 3] [--out reports/risk] [--workers 2]

Resumable: finished sweep points are skipped on a rerun.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import click
import numpy as np
import pandas as pd

from experiments.sweeps import sweep_options

POLICIES = ("hydra", "edf")
QUANTILES = (0.5, 0.8, 0.9, 0.95)
PREDICTORS = ("ets", "habitat", "dnnperf", "noisy:0.1", "noisy:0.2")
METRICS = ("late_jobs", "tardiness_total", "jct_mean")
POINT = "point"
JOBS = 400  # per workload: Hydra online spends its 20 ms budget on most decisions of a loaded cluster


def policy_spec(policy: str, quantile: float | None) -> str:
    return policy if quantile is None else f"{policy}:deadline_quantile={quantile:g}"


def grid(jobs: int, seeds: int, predictors=PREDICTORS, quantiles=QUANTILES, policies=POLICIES):
    """The sweep points: every policy setting with every predictor, plus each policy with truth."""
    from simulator.sweep.grid import plan

    workloads = [f"pai-like:{jobs}", f"philly-like:{jobs}"]
    specs = [policy_spec(p, q) for p in policies for q in (None, *quantiles)]
    points = plan(specs, list(predictors), workloads=workloads, seeds=seeds)
    truth = plan(list(policies), ["truth"], workloads=workloads, seeds=seeds)
    return [replace(c, bind=True) for c in points + truth]  # the same bound jobs for every predictor


def setting_of(policy: str) -> tuple[str, str]:
    """("hydra", "point") or ("hydra", "0.9") from a policy spec of :func:`policy_spec`."""
    name, _, options = policy.partition(":")
    return name, options.split("=", 1)[1] if options else POINT


def ratios(results: pd.DataFrame) -> pd.DataFrame:
    """Per policy, setting, workload and predictor: the metrics' seed means and their pooled ratio
    to the same policy with true run times (matched per workload and seed)."""
    from simulator.sweep.tables import source_label

    ok = results[results["status"] == "ok"].copy()
    ok["source"] = [source_label(r) for _, r in ok.iterrows()]
    ok[["base", "setting"]] = [setting_of(p) for p in ok["policy"]]
    truth = ok[(ok["predictor"] == "truth") & (ok["setting"] == POINT)]
    merged = ok[ok["predictor"] != "truth"].merge(truth[["base", "source", "seed", *METRICS]],
                                                  on=["base", "source", "seed"], suffixes=("", "_truth"))
    rows = []
    for (base, setting, source, predictor), g in merged.groupby(["base", "setting", "source", "predictor"]):
        row = {"policy": base, "setting": setting, "workload": source, "predictor": predictor, "seeds": len(g)}
        for m in METRICS:
            row[m] = float(g[m].mean())
            den = float(g[f"{m}_truth"].sum())
            row[f"{m}_ratio"] = float(g[m].sum()) / den if den > 0 else (1.0 if g[m].sum() == 0 else np.nan)
        rows.append(row)
    order = {s: i for i, s in enumerate([POINT, *(f"{q:g}" for q in QUANTILES)])}
    out = pd.DataFrame(rows)
    return out.sort_values(["policy", "workload", "predictor", "setting"], key=lambda c: c.map(order)
                           if c.name == "setting" else c).reset_index(drop=True)


def against_point(table: pd.DataFrame) -> pd.DataFrame:
    """Each quantile setting's change against the point estimate of the same policy, workload and
    predictor: tardiness and late jobs (negative = fewer), avg JCT (positive = longer)."""
    point = table[table["setting"] == POINT].set_index(["policy", "workload", "predictor"])
    rows = []
    for _, r in table[table["setting"] != POINT].iterrows():
        p = point.loc[(r["policy"], r["workload"], r["predictor"])]
        rows.append({"policy": r["policy"], "workload": r["workload"], "predictor": r["predictor"],
                     "setting": r["setting"],
                     **{f"{m}_change": (r[m] - p[m]) / p[m] if p[m] > 0 else np.nan for m in METRICS}})
    return pd.DataFrame(rows)


def plot(table: pd.DataFrame, out: Path) -> list[Path]:
    """Tardiness ratio against JCT ratio, one panel per policy and workload, one line per predictor
    from the point estimate (open marker) through Q = 0.5 ... 0.95."""
    from simulator.plots import _pyplot, _save

    plt = _pyplot()
    panels = sorted(table.groupby(["policy", "workload"]).groups)
    fig, axes = plt.subplots(1, len(panels), figsize=(4.4 * len(panels), 3.8), squeeze=False)
    for ax, (policy, workload) in zip(axes[0], panels):
        part = table[(table["policy"] == policy) & (table["workload"] == workload)]
        for predictor, g in part.groupby("predictor", sort=True):
            line = ax.plot(g["jct_mean_ratio"], g["tardiness_total_ratio"], marker="o", label=predictor)[0]
            first = g.iloc[0]
            ax.plot(first["jct_mean_ratio"], first["tardiness_total_ratio"], marker="o", markersize=9,
                    markerfacecolor="white", color=line.get_color())
            for _, r in g.iloc[1:].iterrows():
                ax.annotate(r["setting"], (r["jct_mean_ratio"], r["tardiness_total_ratio"]), fontsize=6,
                            xytext=(2, 2), textcoords="offset points")
        ax.axhline(1.0, color="grey", lw=0.6, ls=":")
        ax.axvline(1.0, color="grey", lw=0.6, ls=":")
        ax.set(title=f"{policy}, {workload}", xlabel="avg JCT / truth's", ylabel="total tardiness / truth's")
        spread = part["tardiness_total_ratio"].replace(0, np.nan).dropna()
        if len(spread) and spread.max() / spread.min() > 20:
            ax.set_yscale("log")  # a truth with little tardiness makes ratios of hundreds
        ax.legend(fontsize=7)
    fig.suptitle("deadline_quantile: point estimate (open marker) → Q = 0.5 … 0.95 (emulated GPUs)", fontsize=9)
    fig.tight_layout()
    return _save(fig, out, "risk_tradeoff")


def run(out: Path, jobs: int, seeds: int, workers: int, quick: bool = False) -> tuple[pd.DataFrame, pd.DataFrame,
                                                                                      list[Path]]:
    """Run (or resume) the sweep; the ratio table, the change against the point estimate, the figures."""
    from experiments.sweeps import completed_sweep

    points = grid(jobs, seeds, predictors=("ets", "noisy:0.2") if quick else PREDICTORS,
                  quantiles=(0.9,) if quick else QUANTILES)
    table = ratios(completed_sweep(points, out / "sweep", workers))
    return table, against_point(table), plot(table, out)


@click.command()
@sweep_options(JOBS, "reports/risk", "120-job workloads, one seed, ETS and noisy:0.2, Q = 0.9 only.")
def main(quick: bool, jobs: int, seeds: int, out: Path, workers: int) -> None:
    from predictor.evaluate import markdown

    if quick:
        jobs, seeds = 120, 1
    out.mkdir(parents=True, exist_ok=True)
    table, change, figures = run(out, jobs, seeds, workers, quick)
    text = [f"# Risk-aware deadline planning ({jobs}-job workloads, {seeds} seed(s), emulated GPUs)",
            "Ratios to the same policy planned with true run times (pooled over seeds).", markdown(table),
            "## Change against the point estimate", markdown(change),
            "## Figures", "\n".join(f"- `{f}`" for f in figures if str(f).endswith(".png"))]
    (out / "README.md").write_text("\n\n".join(text) + "\n")
    (out / "results.json").write_text(json.dumps({"ratios": table.to_dict("records"),
                                                  "against_point": change.to_dict("records")},
                                                 indent=1, default=float) + "\n")
    click.echo(f"wrote {out / 'README.md'}")


if __name__ == "__main__":
    main()

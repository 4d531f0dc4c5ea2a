"""What a predictor's error costs a preemptive scheduler, against a non-preemptive one.

Why: a preemptive scheduler can correct a bad plan at the next round, a non-preemptive one lives
with it until the job ends; this measures how much of a prediction's error each kind pays. The
policies in pairs that rank alike — ``sjf`` (non-preemptive) and ``srtf`` (preemptive, the same
ranking by remaining time), ``hydra`` (non-preemptive, deadline-aware) and ``gavel`` (preemptive
max-min fairness; ``gavel:objective=ftf``, Themis's finish-time fairness, beside it) — and
``tiresias`` (preemptive, reads no prediction: its ratio is 1 by construction, the control).
Predictors: truth, ETS, Habitat-style and DNNPerf-style (the shipped checkpoints: **emulated**
GPUs), and truth × a seeded log-normal error of mean relative error 0.1, 0.2 and 0.4; workloads
bound to workload configs so every predictor sees the same jobs.

Each figure is a pooled ratio to the same policy planned with the true run times (sum over
seeds / sum of truth's) of the average JCT. The plot: JCT ratio against injected error, one line
per policy (solid non-preemptive, dashed preemptive), and the model predictors' ratios per policy.

    python -m experiments.preemption [--quick] [--jobs 1000] [--seeds 3] [--out reports/preemption] [--workers 2]

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

FTF = "gavel:objective=ftf"
POLICIES = ("sjf", "srtf", "hydra", "gavel", FTF, "tiresias")
PREEMPTIVE = ("srtf", "gavel", FTF, "tiresias")
QUICK_POLICIES = tuple(p for p in POLICIES if p != FTF)  # ftf's several LPs per round: the slowest by far
SHORT = {"gavel": "gavel max-min", FTF: "gavel ftf"}  # the figure's labels
MODELS = ("ets", "habitat", "dnnperf")
ERRORS = (0.1, 0.2, 0.4)
JOBS = 1000


def grid(jobs: int, seeds: int, workloads: tuple[str, ...] = ("pai-like", "philly-like"),
         policies: tuple[str, ...] = POLICIES):
    from simulator.sweep.grid import plan

    points = plan(list(policies), ["truth", *MODELS], errors=list(ERRORS),
                  workloads=[f"{w}:{jobs}" for w in workloads], seeds=seeds)
    return [replace(c, bind=True) for c in points]  # the same bound jobs for every predictor


def ratios(results: pd.DataFrame) -> pd.DataFrame:
    """Per policy x predictor: mean JCT over workloads and seeds and its pooled ratio to truth."""
    from simulator.sweep.tables import normalise_to_truth, pooled_ratio

    norm = normalise_to_truth(results, metrics=("jct_mean",))
    rows = [{"policy": policy, "preemptive": policy in PREEMPTIVE, "predictor": predictor,
             "jct_mean": g["jct_mean"].mean(), "jct_mean_ratio": pooled_ratio(g, "jct_mean"),
             "preemptions_per_job": g["preemptions_per_job_mean"].mean() if "preemptions_per_job_mean" in g else 0.0}
            for (policy, predictor), g in norm.groupby(["policy", "predictor"], sort=True)]
    return pd.DataFrame(rows)


def figure(table: pd.DataFrame, out: Path) -> list[Path]:
    from simulator.plots import _pyplot, _save

    plt = _pyplot()
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    for policy in POLICIES:
        rows = table[table["policy"] == policy]
        if rows.empty:
            continue
        noisy = rows[rows["predictor"].str.startswith("noisy:") | (rows["predictor"] == "truth")].copy()
        noisy["error"] = [0.0 if p == "truth" else float(p.split(":")[1]) for p in noisy["predictor"]]
        noisy = noisy.sort_values("error")
        left.plot(noisy["error"], noisy["jct_mean_ratio"], marker="o", label=SHORT.get(policy, policy),
                  linestyle="--" if policy in PREEMPTIVE else "-")
    left.axhline(1.0, color="grey", linewidth=0.8)
    left.set(xlabel="injected error (mean relative error of the run times)", ylabel="avg JCT / with truth",
             title="injected error (dashed: preemptive)")
    left.legend(fontsize=8)
    present = [p for p in POLICIES if p in set(table["policy"])]
    models = table[table["predictor"].isin(MODELS)].pivot(index="policy", columns="predictor",
                                                          values="jct_mean_ratio").reindex(present)
    models.index = [SHORT.get(p, p).replace(" ", "\n") for p in models.index]
    models.plot.bar(ax=right, rot=0)
    right.axhline(1.0, color="grey", linewidth=0.8)
    values = models.to_numpy(dtype=float)
    if np.isfinite(values).any():  # around the data and 1, not from 0: the differences are a few %
        right.set_ylim(min(0.9, np.nanmin(values) - 0.05), max(1.1, np.nanmax(values) + 0.05))
    right.set(ylabel="avg JCT / with truth", title="shipped predictors (emulated GPUs)", xlabel="")
    fig.tight_layout()
    return _save(fig, out, "preemption")


def run(out: Path, jobs: int, seeds: int, workers: int, quick: bool = False) -> tuple[pd.DataFrame, list[Path]]:
    """The sweep (resumable), its table and figure; ``quick``: one Philly-like workload, no ftf."""
    from experiments.sweeps import completed_sweep

    configs = (grid(jobs, seeds, ("philly-like",), QUICK_POLICIES) if quick
               else grid(jobs, seeds, ("pai-like", "philly-like")))
    table = ratios(completed_sweep(configs, out / "sweep", workers))
    return table, figure(table, out)


@click.command()
@sweep_options(JOBS, "reports/preemption",
               "One 120-job Philly-like workload, one seed, no ftf (the test suite's mode).")
def main(quick: bool, jobs: int, seeds: int, out: Path, workers: int) -> None:
    """What a predictor's error costs preemptive and non-preemptive schedulers."""
    from predictor.evaluate import markdown

    out.mkdir(parents=True, exist_ok=True)
    jobs, seeds = (120, 1) if quick else (jobs, seeds)
    table, figures = run(out, jobs, seeds, workers, quick)
    (out / "README.md").write_text("# What prediction error costs preemptive and non-preemptive schedulers\n\n"
                                   f"{jobs} jobs per workload, {seeds} seed(s); avg JCT pooled ratio to truth.\n\n"
                                   + markdown(table) + "\n")
    (out / "results.json").write_text(json.dumps(table.to_dict("records"), indent=1, default=float) + "\n")
    click.echo(markdown(table))
    click.echo(f"wrote {out / 'README.md'} and {', '.join(map(str, figures))}")


if __name__ == "__main__":
    main()

"""What charging multi-GPU jobs for where they run changes: placement rules × policies ×
predictors, against today's blind timing (every job timed as one GPU).

Why: multi-GPU jobs hold most of a cluster's GPU-time (82 % of Philly's); whether a scheduler
packs them on one NVLink board or spreads them over PCIe servers and the network changes their
run time, and so JCT and tardiness. This sweep runs bound workloads (every predictor sees the same
jobs) with the communication model (:mod:`simulator.communication`, spec-derived) under three
placement rules — ``consolidate`` (fewest nodes), ``spread`` (as many nodes as possible),
``tiresias`` (consolidate skewed models only) — and once blind (``--no-communication``,
consolidated), on a cluster with NVLink and PCIe nodes (``modern``: H100 8-GPU boards with
NVSwitch, A100 PCIe servers with NVLink-bridged pairs, L4 PCIe servers), on the PCIe ``default``
cluster and on Philly's. Predictors:
truth, ETS (the shipped checkpoints: emulated GPUs), and the truth with an injected error of mean
relative error 0.2 on the per-GPU compute only and on the exposed communication only (and the
Habitat-style and DNNPerf-style baselines on the PCIe cluster, whose GPUs they have checkpoints
for); and the real Philly trace, its jobs' recorded shapes (``8+8``) setting their work.

Per cell: the mean over seeds of avg JCT, mean tardiness, utilisation and the share of
GPU-seconds spent on exposed communication, with a 95 % t-interval over seeds; and each run's
avg JCT as a ratio to the blind run of the same policy, workload and seed (pooled per cell). The
figure: JCT ratio to blind per policy and placement (truth), with the intervals.

    python -m experiments.placement [--quick] [--jobs 400] [--seeds 3] [--out reports/placement] [--workers 2]

Resumable: finished sweep points are skipped on a rerun.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path

import click
import numpy as np
import pandas as pd
from scipy import stats

from experiments.sweeps import sweep_options

POLICIES = ("fifo", "tiresias", "gavel", "allox", "hydra")
PLACEMENTS = ("consolidate", "spread", "tiresias")
ERRORS = ("noisy-compute:0.2", "noisy-comm:0.2")
JOBS = 400
BLIND = "blind"  # the placement column of a --no-communication run
PHILLY_TRACE = "traces/philly/rfold_philly_trace.csv"  # under ../shared: Philly with its recorded shapes


@dataclass(frozen=True)
class Setting:
    """A workload on a cluster, with the predictors and policies run on it."""

    workload: str | None  # synthetic KIND:N, or None for ``trace``
    cluster: str
    predictors: tuple[str, ...]
    policies: tuple[str, ...] = POLICIES
    trace: str | None = None
    seeds: int | None = None  # None: the run's --seeds


def settings(jobs: int, quick: bool = False) -> list[Setting]:
    """NVLink boards beside PCIe servers (``modern``; ETS checkpoints for all three types), the
    PCIe default cluster (every method has checkpoints), and — full runs, when ../shared has it —
    the real Philly trace with its recorded shapes on Philly's cluster (no P40 checkpoint: truth
    and the injected errors; FIFO and Tiresias, one seed: a full Philly replay takes minutes)."""
    from experiments.shared_data import shared_dir

    if quick:  # the default cluster: the reproduction's other sections have cached its tables
        return [Setting(f"philly-like:{jobs}", "default", ("truth", "noisy-comm:0.2"), ("fifo", "hydra"))]
    out = [Setting(f"philly-like:{jobs}", "modern", ("truth", "ets", *ERRORS)),
           Setting(f"philly-like:{jobs}", "default", ("truth", "ets", "habitat", "dnnperf", *ERRORS))]
    philly = shared_dir() / PHILLY_TRACE
    if philly.exists():
        out.append(Setting(None, "philly", ("truth", *ERRORS), ("fifo", "tiresias"), f"philly:{philly}", 1))
    return out


def grid(seeds: int, chosen: list[Setting]):
    """Every (setting, policy, predictor, placement) with communication, and the blind run of
    each (setting, policy, seed) with the truth; bound, so every predictor sees the same jobs."""
    from simulator.run import RunConfig

    configs = []
    for setting in chosen:
        for seed in range(setting.seeds or seeds):
            for policy in setting.policies:
                base = RunConfig(policy=policy, predictor="truth", workload=setting.workload, trace=setting.trace,
                                 cluster=setting.cluster, seed=seed, bind=True, deadline_fraction=0.2)
                configs.append(replace(base, communication=False))
                configs += [replace(base, predictor=predictor, placement=placement)
                            for predictor in setting.predictors for placement in PLACEMENTS]
    return configs


def _interval(values: np.ndarray) -> float:
    """Half-width of the 95 % t-interval of the mean (0 for one value)."""
    values = values[np.isfinite(values)]
    if len(values) < 2:
        return 0.0
    return float(stats.t.ppf(0.975, len(values) - 1) * values.std(ddof=1) / np.sqrt(len(values)))


def table(results: pd.DataFrame) -> pd.DataFrame:
    """Per setting × policy × predictor × placement: means, intervals, and the JCT ratio to blind."""
    done = results[results["status"] == "ok"].copy()
    done["placement"] = np.where(done["communication"].astype(bool), done["placement"], BLIND)
    source = np.where(done["trace"].fillna("").astype(str) != "", "philly trace",
                      done["workload"].fillna("").astype(str).str.split(":").str[0])
    done["setting"] = source + " on " + done["cluster"]
    blind = done[done["placement"] == BLIND].set_index(["setting", "policy", "seed"])["jct_mean"]
    done["blind_jct"] = blind.reindex(pd.MultiIndex.from_frame(done[["setting", "policy", "seed"]])).to_numpy()
    done["jct_ratio"] = done["jct_mean"] / done["blind_jct"]
    share = done["communication_share"] if "communication_share" in done else pd.Series(0.0, index=done.index)
    done["communication_share"] = share.fillna(0.0)
    rows = []
    for (setting, policy, predictor, placement), g in done.groupby(["setting", "policy", "predictor", "placement"],
                                                                   sort=True):
        row = {"setting": setting, "policy": policy, "predictor": predictor, "placement": placement,
               "seeds": len(g)}
        for metric in ("jct_mean", "tardiness_mean", "utilization", "communication_share"):
            values = g[metric].to_numpy(dtype=float)
            row[metric], row[f"{metric}_ci"] = float(values.mean()), _interval(values)
        row["jct_vs_blind"] = float(g["jct_mean"].sum() / g["blind_jct"].sum())
        row["jct_vs_blind_ci"] = _interval(g["jct_ratio"].to_numpy(dtype=float))
        rows.append(row)
    return pd.DataFrame(rows)


def figure(summary: pd.DataFrame, out: Path) -> list[Path]:
    from simulator.plots import _pyplot, _save

    plt = _pyplot()
    settings = list(dict.fromkeys(summary["setting"]))
    fig, axes = plt.subplots(1, len(settings), figsize=(6 * len(settings), 4), squeeze=False)
    for ax, setting in zip(axes[0], settings):
        rows = summary[(summary["setting"] == setting) & (summary["predictor"] == "truth")
                       & (summary["placement"] != BLIND)]
        policies = [p for p in POLICIES if p in set(rows["policy"])]
        width = 0.8 / len(PLACEMENTS)
        for i, placement in enumerate(PLACEMENTS):
            part = rows[rows["placement"] == placement].set_index("policy").reindex(policies)
            ax.bar(np.arange(len(policies)) + (i - 1) * width, part["jct_vs_blind"], width,
                   yerr=part["jct_vs_blind_ci"], label=placement, capsize=2)
        ax.axhline(1.0, color="grey", linewidth=0.8)
        ax.set_xticks(np.arange(len(policies)), policies)
        ax.set(title=setting, ylabel="avg JCT / blind timing (truth)")
        ax.legend(fontsize=8)
    fig.tight_layout()
    return _save(fig, out, "placement")


def run(out: Path, jobs: int, seeds: int, workers: int, quick: bool = False) -> tuple[pd.DataFrame, list[Path]]:
    """The sweep (resumable), its table and figure; ``quick``: FIFO and Hydra, truth and the
    error on communication, on the default cluster only."""
    from experiments.sweeps import completed_sweep

    summary = table(completed_sweep(grid(seeds, settings(jobs, quick)), out / "sweep", workers))
    return summary, figure(summary, out)


def headline(summary: pd.DataFrame) -> str:
    """Two short tables: with the truth, avg JCT against blind timing per placement rule (and the
    share of GPU time spent communicating); consolidated, each predictor's avg JCT against the
    truth's (pooled over seeds: the ratio of the means)."""
    truth = summary[summary["predictor"] == "truth"].set_index(["setting", "policy", "placement"])
    lines = ["| setting | policy | consolidate | spread | tiresias | comm. share (consolidate / spread) |",
             "|---|---|---:|---:|---:|---:|"]
    for setting, policy in dict.fromkeys(zip(summary["setting"], summary["policy"])):
        cells = []
        for placement in PLACEMENTS:
            row = truth.loc[(setting, policy, placement)] if (setting, policy, placement) in truth.index else None
            cells.append("–" if row is None else f"{row['jct_vs_blind']:.3f} ± {row['jct_vs_blind_ci']:.3f}")
        share = [truth.loc[(setting, policy, p), "communication_share"] if (setting, policy, p) in truth.index
                 else np.nan for p in ("consolidate", "spread")]
        shares = " / ".join("–" if np.isnan(x) else f"{x:.1%}" for x in share)
        lines.append(f"| {setting} | {policy} | {' | '.join(cells)} | {shares} |")
    packed = summary[summary["placement"] == "consolidate"].set_index(["setting", "policy", "predictor"])["jct_mean"]
    predictors = [p for p in dict.fromkeys(summary["predictor"]) if p != "truth"]
    lines += ["", "| setting | policy | " + " | ".join(predictors) + " |",
              "|---|---|" + "---:|" * len(predictors)]
    for setting, policy in dict.fromkeys(zip(summary["setting"], summary["policy"])):
        base = packed.get((setting, policy, "truth"), np.nan)
        cells = [f"{packed[(setting, policy, p)] / base:.3f}" if (setting, policy, p) in packed.index else "–"
                 for p in predictors]
        lines.append(f"| {setting} | {policy} | {' | '.join(cells)} |")
    return "\n".join(lines)


def markdown(summary: pd.DataFrame) -> str:
    """The table with its intervals as ± columns."""
    def pm(value: float, ci: float, digits: int = 3, scale: float = 1.0) -> str:
        return f"{value * scale:,.{digits}f} ± {ci * scale:,.{digits}f}"

    lines = ["| setting | policy | predictor | placement | avg JCT (h) | vs blind | mean tardiness (h) | "
             "utilisation | comm. share |", "|---|---|---|---|---:|---:|---:|---:|---:|"]
    for r in summary.itertuples(index=False):
        lines.append(f"| {r.setting} | {r.policy} | {r.predictor} | {r.placement} | "
                     f"{pm(r.jct_mean, r.jct_mean_ci, 2, 1 / 3600)} | {pm(r.jct_vs_blind, r.jct_vs_blind_ci)} | "
                     f"{pm(r.tardiness_mean, r.tardiness_mean_ci, 2, 1 / 3600)} | "
                     f"{pm(r.utilization, r.utilization_ci)} | {pm(r.communication_share, r.communication_share_ci)} |")
    return "\n".join(lines)


@click.command()
@sweep_options(JOBS, "reports/placement", "FIFO and Hydra on the default cluster, 120 jobs, one seed "
               "(the test suite's mode).")
def main(quick: bool, jobs: int, seeds: int, out: Path, workers: int) -> None:
    """What charging multi-GPU jobs for their placement changes, against blind timing."""
    out.mkdir(parents=True, exist_ok=True)
    jobs, seeds = (120, 1) if quick else (jobs, seeds)
    summary, figures = run(out, jobs, seeds, workers, quick)
    text = headline(summary) + "\n\n" + markdown(summary)
    (out / "README.md").write_text("# Placement and communication against blind timing\n\n"
                                   f"{jobs} jobs per workload, {seeds} seed(s); mean ± 95 % t-interval over seeds; "
                                   "communication spec-derived, GPUs emulated. First: avg JCT against blind "
                                   "timing with the truth, per placement rule; then, consolidated, each "
                                   "predictor's avg JCT against the truth's; then every cell.\n\n" + text + "\n")
    (out / "results.json").write_text(json.dumps(summary.to_dict("records"), indent=1, default=float) + "\n")
    click.echo(text)
    click.echo(f"wrote {out / 'README.md'} and {', '.join(map(str, figures))}")


if __name__ == "__main__":
    main()

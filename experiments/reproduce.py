"""Regenerate the paper's tables and figures into ``reports/reproduce`` (Markdown plus PNG/PDF).

Why: every number we publish must come from one command a reader can rerun. Everything here is
computed from what ships with the package — the pretrained checkpoints, the workload set
(held-out configs) and the calibrated emulated GPUs — plus, when present, the ablation results of
``python -m experiments.ablations``:

1. predictor accuracy on the held-out configs, per method and device (MRE, RMSE, WAPE);
2. error by op-count bucket, all held-out configs and RandWire alone;
3. convergence: validation MRE against training wall time, from each checkpoint's history;
4. the window / stride sweep (the ablation's table and heat map, if it was run);
5. scheduling: AlloX and Hydra on PAI-like and Philly-like workloads planned with truth, ETS,
   Habitat-style and DNNPerf-style times — avg JCT, total tardiness and their pooled ratio to
   truth (sum over seeds / sum of truth's, as the sweep table and its plots);
6. the error sweep: the same ratios with truth × injected error of MRE 0–30 %;
7. risk-aware deadline planning (:mod:`experiments.risk`, 400-job workloads): Hydra and EDF
   with ``deadline_quantile``;
8. what a prediction's error costs preemptive and non-preemptive schedulers
   (:mod:`experiments.preemption`);
9. our Gavel and Tiresias beside the peers' own simulators (:mod:`experiments.peers`);
10. multi-GPU jobs charged for their placement against blind timing (:mod:`experiments.placement`);
11. what failures cost each policy and where checkpoints should go (:mod:`experiments.failures`);
and the reliability diagram of every checkpoint's prediction intervals (with section 1).

    python -m experiments.reproduce [--quick] [--out reports/reproduce] [--workers 2]

``--quick`` (a few minutes; run in CI) uses 3 held-out configs per family (21), 120-job workloads, one seed
and, for sections 5 and 6, the PAI-like workload alone (the Philly-like one doubles their cost:
a second set of bound configs to predict and emulate); the full run uses every held-out config,
1,000-job PAI-like and Philly-like workloads and three seeds. Sweeps are
resumable: a rerun skips finished points.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import click
import numpy as np
import pandas as pd

from predictor import methods
from predictor.checkpoints import available, pretrained
from predictor.emulator.devices.specs import load_params
from predictor.evaluate import Evaluation, evaluate, markdown
from predictor.methods import METHODS
from predictor.tables import emulated_traces
from traces.workloads import read_workloads

SCHEDULING_PREDICTORS = ("truth", "ets", "habitat", "dnnperf")
ERRORS = (0.0, 0.05, 0.1, 0.15, 0.2, 0.3)
QUICK_PER_FAMILY = 3


def held_out(quick: bool, seed: int = 0) -> pd.DataFrame:
    """The workload set's op sequences (all, or QUICK_PER_FAMILY configs of each family for --quick)."""
    sequences = read_workloads()
    if not quick:
        return sequences
    configs = sequences.groupby("config_id")["family"].first().reset_index()
    rng = np.random.default_rng(seed)
    families = sorted(configs["family"].unique())
    chosen = [c for f in families
              for c in rng.permutation(sorted(configs.loc[configs["family"] == f, "config_id"]))[:QUICK_PER_FAMILY]]
    return sequences[sequences["config_id"].isin(set(chosen))]


def accuracy(sequences: pd.DataFrame, gpus: list[str]) -> tuple[list[dict], dict]:
    """Every shipped checkpoint evaluated on the held-out configs' emulated traces."""
    params = load_params()
    traces = emulated_traces(sequences, gpus, params)
    rows, models = [], {}
    for method in METHODS:
        for gpu in sorted(set(gpus) & set(available(method=method))):
            model = pretrained(gpu, method=method)
            data = traces[gpu]
            if methods.info(method).reads_source_device:
                source = model.config.source_device
                data = pd.concat([data, emulated_traces(sequences, [source], params)[source]], ignore_index=True)
            result = evaluate(model, data)
            models[(method, gpu)] = model
            randwire = result.per_trace[result.per_trace["family"] == "randwire"]
            rows.append({"method": method, "device": model.device, **result.headline(),
                         **{k: v for k, v in result.intervals().items() if k != "intervals"},
                         "by_op_count": result.by_bucket().to_dict("records"),
                         "randwire_by_op_count": Evaluation(randwire).by_bucket().to_dict("records")
                         if len(randwire) else []})
    return rows, models


def reliability_diagram(rows: list[dict], out: Path) -> tuple[pd.DataFrame, list[Path]]:
    """Nominal against observed coverage of every checkpoint's prediction intervals on the
    held-out configs (leave-family-out), one panel per device, one line per method."""
    from simulator.plots import _pyplot, _save

    points = pd.DataFrame([{"method": r["method"], "device": r["device"], **p} for r in rows for p in r["reliability"]])
    if points.empty:
        return points, []
    plt = _pyplot()
    devices = sorted(points["device"].unique())
    fig, axes = plt.subplots(1, len(devices), figsize=(3.6 * len(devices), 3.4), squeeze=False)
    for ax, device in zip(axes[0], devices):
        for method, g in points[points["device"] == device].groupby("method", sort=True):
            ax.plot(g["level"] * 100, g["coverage"] * 100, marker="o", label=method)
        ax.plot([45, 100], [45, 100], color="grey", lw=0.8, ls="--", label="ideal")
        ax.set(title=device, xlabel="nominal coverage (%)", ylabel="observed coverage (%)", xlim=(45, 100),
               ylim=(0, 100))
        ax.legend(fontsize=7)
    fig.suptitle("prediction intervals on held-out families (leave-family-out)", fontsize=9)
    fig.tight_layout()
    return points, _save(fig, out, "reliability")


def convergence(models: dict, out: Path) -> tuple[pd.DataFrame, list[Path]]:
    from simulator.plots import _pyplot, _save

    plt = _pyplot()
    gpus = sorted({g for _, g in models})
    fig, axes = plt.subplots(1, len(gpus), figsize=(4.2 * len(gpus), 3.2), squeeze=False)
    rows = []
    for ax, gpu in zip(axes[0], gpus):
        for (method, g), model in sorted(models.items()):
            if g != gpu or not model.history:
                continue
            h = pd.DataFrame(model.history)
            best = h.loc[h["val_mre"].idxmin()]
            rows.append({"method": method, "device": model.device, "epochs": len(h),
                         "train_minutes": round(h["wall_s"].iloc[-1] / 60, 2), "best_val_mre": best["val_mre"],
                         "minutes_to_best": round(best["wall_s"] / 60, 2)})
            ax.plot(h["wall_s"] / 60, h["val_mre"] * 100, marker=".", label=method)
        ax.set(title=f"emulated {gpu}", xlabel="training wall time (min, 2 CPU cores)", ylabel="validation MRE (%)",
               yscale="log")
        ax.legend(fontsize=8)
    fig.tight_layout()
    return pd.DataFrame(rows), _save(fig, out, "convergence")


def scheduling(out: Path, quick: bool, workers: int) -> tuple[pd.DataFrame, pd.DataFrame, list[Path]]:
    """The predictor comparison and the error sweep as two resumable sweeps."""
    from experiments.sweeps import completed_sweep
    from simulator.plots import plot
    from simulator.sweep.grid import plan
    from simulator.sweep.tables import normalise_to_truth

    jobs, seeds = (120, 1) if quick else (1000, 3)
    workloads = [f"pai-like:{jobs}"] + ([] if quick else [f"philly-like:{jobs}"])
    compare = plan(["allox", "hydra"], list(SCHEDULING_PREDICTORS), workloads=workloads, seeds=seeds)
    errors = plan(["allox", "hydra"], ["truth"], errors=list(ERRORS), workloads=workloads, seeds=seeds)
    errors = [replace(c, bind=True) for c in errors]  # the same bound jobs as the comparison
    tables, files = [], []
    for name, configs in (("predictors", compare), ("errors", errors)):
        sweep = out / "sweeps" / name
        tables.append(pooled_table(normalise_to_truth(completed_sweep(configs, sweep, workers))))
        files += plot(sweep, out / name, log=lambda m: None)
    return tables[0], tables[1], files


def pooled_table(norm: pd.DataFrame) -> pd.DataFrame:
    """Per policy x workload x predictor: mean avg JCT and total tardiness over seeds, and their
    pooled ratio to truth (sum over seeds / sum of the truth runs'), the number the sweep table
    prints and the plots draw as the bar (a mean of per-seed ratios would disagree with both)."""
    from simulator.sweep.tables import pooled_ratio

    rows = [{"policy": policy, "source": source, "predictor": predictor,
             "jct_mean": g["jct_mean"].mean(), "tardiness_total": g["tardiness_total"].mean(),
             "jct_mean_ratio": pooled_ratio(g, "jct_mean"), "tardiness_total_ratio": pooled_ratio(g, "tardiness_total")}
            for (policy, source, predictor), g in norm.groupby(["policy", "source", "predictor"], sort=True)]
    return pd.DataFrame(rows)


def ablation_section(path: Path) -> str:
    results = path / "results.csv"
    if not results.exists():
        return f"(not run: `python -m experiments.ablations`; looked for {results})"
    table = pd.read_csv(results)
    from experiments.ablations import DEFAULT  # the varied settings, named once

    keep = [c for c in ("study", *DEFAULT, "mre", "rmse_ms", "epochs") if c in table]
    return markdown(table[keep]) + f"\n\nHeat map: `{path / 'window_stride.png'}`"


def peer_section(quick: bool) -> tuple[list[dict], str]:
    """Ours beside Gavel's and Tiresias' own simulators (their stored runs on their own traces);
    ``quick`` leaves out Gavel's 951-job trace. Skipped, with the reason, without Gavel's
    throughputs file."""
    from experiments import peers

    gavel_cases = tuple(case[0] for case in peers.REFERENCE_CASES if not (quick and case[0] == "msr_seed0_ed69ec"))
    try:
        gavel = peers.gavel_table(gavel_cases)
    except peers.PeerUnavailable as err:
        gavel, gavel_text = [], f"(Gavel skipped: {err})"
    else:
        gavel_text = peers.table_markdown(gavel)
    tiresias = [row for timer in ("simulator", "paper")
                for row in peers.tiresias_table(policy=f"tiresias:restart=0,timer={timer}", timer=timer)]
    rows = [{k: v for k, v in row.items() if k != "by_gpus"} for row in gavel + tiresias]
    return rows, gavel_text + "\n\n" + peers.tiresias_table_markdown(tiresias)


@click.command()
@click.option("--quick", is_flag=True,
              help="A few minutes: 3 held-out configs per family, 120-job workloads, one seed.")
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), default=Path("reports/reproduce"),
              show_default=True)
@click.option("--devices", default="T4,P100,V100", show_default=True)
@click.option("--ablations", type=click.Path(file_okay=False, path_type=Path), default=Path("reports/ablations"),
              show_default=True)
@click.option("--workers", type=click.IntRange(1), default=2, show_default=True)
def main(quick: bool, out: Path, devices: str, ablations: Path, workers: int) -> None:
    out.mkdir(parents=True, exist_ok=True)
    gpus = devices.split(",")
    sequences = held_out(quick)
    rows, models = accuracy(sequences, gpus)
    headline = pd.DataFrame([{k: r[k] for k in ("method", "device", "traces", "mre", "rmse_ms", "wape",
                                                "interval_coverage", "interval_width")} for r in rows])
    buckets = pd.DataFrame([{"method": r["method"], "device": r["device"], **b} for r in rows
                            for b in r["by_op_count"]])
    randwire = pd.DataFrame([{"method": r["method"], "device": r["device"], **b} for r in rows
                             for b in r["randwire_by_op_count"]])
    curves, figures = convergence(models, out)
    points, reliability_figures = reliability_diagram(rows, out)
    figures += reliability_figures
    predictors, error_sweep, sweep_figures = scheduling(out, quick, workers)
    figures += sweep_figures
    from experiments import risk

    jobs, seeds = (120, 1) if quick else (risk.JOBS, 3)
    risk_table, risk_change, risk_figures = risk.run(out / "risk", jobs, seeds, workers, quick)
    figures += risk_figures
    from experiments import preemption

    jobs, seeds = (120, 1) if quick else (preemption.JOBS, 3)
    preemption_table, preemption_figures = preemption.run(out / "preemption", jobs, seeds, workers, quick)
    figures += preemption_figures
    peers, peers_text = peer_section(quick)
    from experiments import placement

    jobs, seeds = (120, 1) if quick else (placement.JOBS, 3)
    placement_table, placement_figures = placement.run(out / "placement", jobs, seeds, workers, quick)
    figures += placement_figures
    from experiments import failures

    jobs, seeds = (120, 1) if quick else (failures.JOBS, 3)
    failure_parts = failures.run(out / "failures", jobs, seeds, workers, quick)
    failures.write(out / "failures", jobs, seeds, quick, failure_parts)
    growth, least, checkpoints, best, failed, _, failure_figures = failure_parts
    figures += failure_figures
    text = [f"# Reproduction ({'quick' if quick else 'full'})",
            f"Held-out configs: {sequences['config_id'].nunique()} (the workload set); devices: emulated "
            f"{', '.join(gpus)}.",
            "## 1. Predictor accuracy on held-out families",
            "With the coverage and median relative width of each checkpoint's 90 % prediction intervals "
            "(leave-family-out: each family's intervals calibrated on the other held-out families).",
            markdown(headline),
            "### Reliability of the prediction intervals (nominal against observed coverage)",
            markdown(points.assign(level=[f"{lv:.0%}" for lv in points["level"]] if len(points) else [])
                     .pivot_table(index=["method", "device"], columns="level", values="coverage").reset_index())
            if len(points) else "(no checkpoint has calibrated intervals)",
            "## 2. Error by op count", markdown(buckets), "### RandWire", markdown(randwire) if len(randwire) else "-",
            "## 3. Convergence (validation MRE against training wall time)", markdown(curves),
            "## 4. Window / stride sweep", ablation_section(ablations),
            "## 5. Scheduling with predicted run times", markdown(predictors),
            "## 6. Error sweep (truth × injected error)", markdown(error_sweep),
            "## 7. Risk-aware deadline planning (`deadline_quantile`; `python -m experiments.risk`)",
            markdown(risk_table), "### Change against the point estimate", markdown(risk_change),
            "## 8. What prediction error costs preemptive and non-preemptive schedulers "
            "(`python -m experiments.preemption`)", markdown(preemption_table),
            "## 9. Our Gavel and Tiresias beside the peers' own simulators (`python -m experiments.peers`)",
            peers_text,
            "## 10. Multi-GPU jobs charged for their placement, against blind timing "
            "(`python -m experiments.placement`)",
            "Communication spec-derived (fitted to real collectives), compute emulated; mean ± 95 % t-interval over "
            "seeds.", placement.markdown(placement_table),
            "## 11. Failures: JCT growth per policy and the checkpoint interval (`python -m experiments.failures`)",
            "Predictions emulated; avg JCT pooled over seeds as a ratio to the same runs without failures "
            "(Young/Daly's checkpoint interval); the failure models' sources and every cell in `failures/report.md`.",
            failures.growth_markdown(growth), failures.least_markdown(least),
            failures.checkpoint_markdown(checkpoints, best) if len(best) else "-",
            failures.failed_markdown(failed),
            "## Figures", "\n".join(f"- `{f}`" for f in figures if str(f).endswith(".png"))]
    (out / "README.md").write_text("\n\n".join(text) + "\n")
    (out / "results.json").write_text(json.dumps({"accuracy": rows, "convergence": curves.to_dict("records"),
                                                  "scheduling": predictors.to_dict("records"),
                                                  "error_sweep": error_sweep.to_dict("records"),
                                                  "risk": risk_table.to_dict("records"),
                                                  "preemption": preemption_table.to_dict("records"),
                                                  "peers": peers,
                                                  "placement": placement_table.to_dict("records"),
                                                  "failures": growth.to_dict("records"),
                                                  "failure_checkpoints": best.to_dict("records")},
                                                 indent=1, default=float) + "\n")
    click.echo(f"wrote {out / 'README.md'} and {len(figures)} figure files")


if __name__ == "__main__":
    main()

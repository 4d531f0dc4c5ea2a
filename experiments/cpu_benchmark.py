"""A large fully real benchmark: ETS and its baselines on traces profiled on this machine's CPU.

Why: every other large comparison we print is on emulated GPUs. Here every iteration is a real
measurement (torch.profiler on the CPU, ``ets collect --device cpu``), of every zoo family
(vision, RandWire, transformer, LSTM), batch and input size capped so that a config profiles in
seconds; the split holds whole families out (``predictor.dataset``), so the scores are on
architectures the models never saw.

    python -m experiments.cpu_benchmark [--limit 1100] [--max-batch 8] [--max-size 128] [--threads 1]
                                        [--minutes 10] [--dnnperf-minutes 6] [--baseline-minutes 2]
                                        [--repeats 12] [--out reports/cpu_benchmark]

Stages, each resumable (a rerun skips what exists):
1. this CPU's peaks, measured with the profiling thread count (``OUT/data/peaks.json``, the
   anchor of anchored targets);
2. the profiles (``OUT/data``, one Parquet). A profile taken while other processes kept the
   machine busy is taken again, and left for the next run when it stays disturbed
   (:mod:`predictor.capture.disturbance`; ``OUT/data/failures.jsonl``);
3. the noise floor: ``--repeats`` configs profiled again after the collection
   (``OUT/data/repeatability.json``) — no method can be more accurate than the data agrees with
   itself;
4. each method trained and scored (``OUT/results.jsonl``, one line per method);
5. the report (``OUT/report.md``: held-out MRE per method and per family, ETS against the best
   baseline, the noise floor, the overhead share of the set).

Habitat-style is not run: it scales op times between GPUs by their spec sheets (SMs, clock,
bandwidth), which a CPU does not have. The profiling uses ``--threads`` intra-op threads (1 by
default: timings of one core); pin the process to a core (``taskset -c 0``) and keep the machine
otherwise idle — a job on the other core slows the profiled one (:mod:`predictor.capture.disturbance`).
"""

from __future__ import annotations

import json
import os
from datetime import date
from pathlib import Path

import click
import numpy as np
import pandas as pd
import torch
from tqdm import tqdm

from experiments.pretrain import SHIPPED_SETTINGS
from predictor import methods
from predictor.capture.disturbance import DisturbedError, undisturbed
from predictor.capture.opseq import capture
from predictor.collect import collect
from predictor.dataset import split_by_family
from predictor.evaluate import evaluate, iteration_truth, markdown
from predictor.peaks import measure_cpu, record, recorded
from predictor.trace_table import dataset_info, read_dataset
from predictor.zoo.registry import zoo_configs

DEVICE = "cpu"
REFERENCE_DATA = Path(__file__).parent / "data" / "cpu_benchmark"  # the committed profiles (README there)
METHODS = methods.single_device_methods()  # a CPU has no second device whose traces Habitat-style could scale


def benchmark_configs(limit: int, max_batch: int, max_size: int) -> list:
    """The first ``limit`` zoo configs (all kinds, round-robin over families) within the caps."""
    configs = [c for c in zoo_configs("all", seed=0) if c.batch <= max_batch and c.input_size <= max_size]
    return configs[:limit]


def train_and_score(method: str, traces: pd.DataFrame, split, minutes: float, out: Path) -> dict:
    """Train, save ``OUT/<method>.pt``, score the held-out families (overall and per family)."""
    options = {"max_minutes": minutes, **SHIPPED_SETTINGS.get(method, {})}
    config = methods.make_config(method, **options)
    model = methods.train(method, split.part(traces, "train"), split.part(traces, "val"), config,
                          device=DEVICE, split=split.to_dict(), data_dir=out / "data")
    model.save(out / f"{method}.pt")
    result = evaluate(model, split.part(traces, "test"))
    best = min(model.history, key=lambda h: h["val_mre"])
    per_family = result.per_trace.assign(abs_err=result.per_trace["rel_err"].abs()).groupby("family")
    return {"method": method, **result.headline(), "epochs": len(model.history),
            "train_minutes": round(model.history[-1]["wall_s"] / 60, 2), "best_val_mre": best["val_mre"],
            "test_units": list(split.test_units),
            "by_family": {f: {"traces": int(len(g)), "mre": float(g["abs_err"].mean()),
                              "signed": float(g["rel_err"].mean())} for f, g in per_family}}


def record_peaks(data: Path) -> None:
    """Measure this CPU's peaks with the profiling thread count, once per dataset (the anchor of
    the anchored targets, :mod:`predictor.peaks`); kept when already recorded."""
    if recorded(data, DEVICE) is None:
        record(data, measure_cpu())


def noise_floor(first: pd.Series, second: pd.Series) -> dict:
    """How far two profiles of the same configs (iteration times, indexed by config) differ: the
    median, 90th percentile and largest |second / first - 1| and each config's ratio."""
    ratio = (second / first.reindex(second.index)).dropna()
    dev = (ratio - 1).abs()
    return {"configs": int(len(ratio)), "median": float(dev.median()), "p90": float(dev.quantile(0.9)),
            "max": float(dev.max()), "ratios": {k: round(float(v), 4) for k, v in ratio.items()}}


def repeatability(configs: list, data: Path, sample: int, seed: int = 0) -> dict:
    """Profile a seeded sample of the dataset's configs again, after the collection, and compare
    (``DATA/repeatability.json``, kept when there): the noise floor below which no method's error
    means anything, and the drift of the machine over the run."""
    path = data / "repeatability.json"
    if path.exists():
        return json.loads(path.read_text())
    truth = iteration_truth(read_dataset(data)).set_index("config_id")["true_us"]
    profiled = [c for c in configs if c.config_id in truth.index]
    chosen = [profiled[i] for i in sorted(np.random.default_rng(seed).choice(len(profiled), min(sample, len(profiled)),
                                                                           replace=False))]
    again = {}
    for config in tqdm(chosen, desc="profile again", unit="config"):
        trace = undisturbed(lambda config=config: capture(config, DEVICE))
        again[config.config_id] = float(iteration_truth(trace)["true_us"].iloc[0])
    result = {**noise_floor(truth, pd.Series(again)), "measured": date.today().isoformat()}
    path.write_text(json.dumps(result, indent=1) + "\n")
    return result


def report(rows: list[dict], info: dict, configs: int, threads: int, noise: dict | None = None) -> str:
    table = pd.DataFrame([{k: r[k] for k in ("method", "traces", "mre", "rmse_ms", "wape", "epochs", "train_minutes")}
                          for r in rows])
    ets = next((r["mre"] for r in rows if not methods.info(r["method"]).baseline), None)
    baselines = [r for r in rows if methods.info(r["method"]).baseline]
    best = min(baselines, key=lambda r: r["mre"]) if baselines else None
    share = info["overhead_share"]
    lines = ["# Real CPU benchmark: held-out families, every iteration measured", "",
             f"{info['iterations']:,} iterations of {configs} requested configs, {info['rows']:,} ops, profiled with "
             f"torch.profiler on this machine's CPU ({threads} intra-op thread(s)); median iteration "
             f"{info['iteration_ms_median']:.1f} ms. Families: "
             + ", ".join(f"{k} {v}" for k, v in info["per_family"].items()) + ".",
             f"Held-out units: {', '.join(rows[0]['test_units']) if rows else '-'}.", "",
             markdown(table), ""]
    if noise:
        lines += [f"Noise floor: {noise['configs']} configs profiled again after the collection differ from their "
                  f"first profile by {noise['median']:.1%} (median), {noise['p90']:.1%} (90th percentile), "
                  f"{noise['max']:.1%} (largest) in iteration time.", ""]
    if ets is not None and best is not None:
        lines.append(f"ETS / best baseline ({best['method']}): {ets / best['mre']:.2f}.")
    families = sorted({f for r in rows for f in r.get("by_family", {})})
    if families:
        lines += ["", "Held-out MRE per family:", "",
                  "| family | traces | " + " | ".join(r["method"] for r in rows) + " |",
                  "|---|---:|" + "---:|" * len(rows)]
        for f in families:
            n = next(r["by_family"][f]["traces"] for r in rows if f in r.get("by_family", {}))
            cells = [f"{r['by_family'][f]['mre']:.1%}" if f in r.get("by_family", {}) else "–" for r in rows]
            lines.append(f"| {f} | {n} | " + " | ".join(cells) + " |")
    lines += ["", "Framework-overhead share (gap / iteration) over the set: "
              + ", ".join(f"{k} {v:.1%}" for k, v in share.items()) + ".",
              "", "Habitat-style is not run: it scales between GPUs by their spec sheets; a CPU has none."]
    return "\n".join(lines) + "\n"


@click.command()
@click.option("--limit", type=click.IntRange(10), default=1100, show_default=True)
@click.option("--max-batch", type=click.IntRange(1), default=8, show_default=True)
@click.option("--max-size", type=click.IntRange(1), default=128, show_default=True)
@click.option("--threads", type=click.IntRange(1), default=1, show_default=True,
              help="Intra-op threads while profiling.")
@click.option("--minutes", type=float, default=10.0, show_default=True, help="ETS training time limit.")
@click.option("--dnnperf-minutes", type=float, default=6.0, show_default=True)
@click.option("--baseline-minutes", type=float, default=2.0, show_default=True, help="Operator-based MLP.")
@click.option("--seed", type=int, default=0, show_default=True, help="Split seed.")
@click.option("--repeats", type=click.IntRange(2), default=12, show_default=True,
              help="Configs profiled again after the collection: the noise floor.")
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), default=Path("reports/cpu_benchmark"),
              show_default=True)
def main(limit: int, max_batch: int, max_size: int, threads: int, minutes: float, dnnperf_minutes: float,
         baseline_minutes: float, seed: int, repeats: int, out: Path) -> None:
    configs = benchmark_configs(limit, max_batch, max_size)
    torch.set_num_threads(threads)
    record_peaks(out / "data")
    counts = collect(configs, DEVICE, out / "data", workers=1)
    try:
        noise = repeatability(configs, out / "data", repeats)
    except DisturbedError as exc:  # the profiles are kept: a rerun on a quiet machine goes on from here
        raise click.ClickException(f"noise floor of {out / 'data'}: {exc}") from None
    torch.set_num_threads(os.cpu_count() or 1)  # training: every core
    if counts["failed"]:
        click.echo(f"{counts['failed']} configs failed to profile: see {out / 'data' / 'failures.jsonl'}")
    traces = read_dataset(out / "data")
    traces = traces[traces["config_id"].isin({c.config_id for c in configs})]
    split = split_by_family(traces, seed=seed)
    results_path = out / "results.jsonl"
    rows = [json.loads(line) for line in results_path.read_text().splitlines()] if results_path.exists() else []
    budgets = {"ets": minutes, "opbased": baseline_minutes, "dnnperf": dnnperf_minutes}
    for method in METHODS:
        if any(r["method"] == method for r in rows):
            continue
        row = train_and_score(method, traces, split, budgets[method], out)
        rows.append(row)
        with results_path.open("a") as f:
            f.write(json.dumps(row, default=float) + "\n")
    text = report(rows, dataset_info(traces), len(configs), threads, noise)
    (out / "report.md").write_text(text)
    click.echo(text)


if __name__ == "__main__":
    main()

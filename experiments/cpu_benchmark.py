"""A large fully real benchmark: ETS and its baselines on traces profiled on this machine's CPU.

Why: every other large comparison we print is on emulated GPUs. Here every iteration is a real
measurement (torch.profiler on the CPU, ``ets collect --device cpu``), of every zoo family
(vision, RandWire, transformer, LSTM), batch and input size capped so that one run profiles
over 1,000 configs in about an hour on 2 cores; the split holds whole families out
(``predictor.dataset``), so the scores are on architectures the models never saw.

    python -m experiments.cpu_benchmark [--limit 1100] [--max-batch 8] [--max-size 128] [--threads 1]
                                        [--minutes 10] [--dnnperf-minutes 6] [--baseline-minutes 2]
                                        [--out reports/cpu_benchmark]

Stages, each resumable (a rerun skips what exists): this CPU's peaks measured with the profiling
thread count and recorded (``OUT/data/peaks.json``, the anchor of anchored targets); profile
(``OUT/data``, one Parquet); train
and evaluate each method (``OUT/results.jsonl``, one line per method); the report
(``OUT/report.md``: held-out MRE per method, ETS against the best baseline, the overhead-share
distribution of the set). Habitat-style is not run: it scales op times between GPUs by their
spec sheets (SMs, clock, bandwidth), which a CPU does not have.

The profiling uses ``--threads`` intra-op threads (1 by default: timings of one core, which a
second process on the other core disturbs least); pin the process to a core (``taskset -c 0``)
to keep the other core's work off it.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import click
import pandas as pd
import torch

from experiments.pretrain import ETS_SETTINGS  # the shipped checkpoints' settings
from predictor import methods
from predictor.collect import collect
from predictor.dataset import split_by_family
from predictor.evaluate import evaluate, markdown
from predictor.peaks import measure_cpu, record, recorded
from predictor.trace_table import dataset_info, read_dataset
from predictor.zoo.registry import zoo_configs

DEVICE = "cpu"
METHODS = tuple(m for m in methods.METHODS if m != "habitat")  # Habitat-style needs a second device's traces


def benchmark_configs(limit: int, max_batch: int, max_size: int) -> list:
    """The first ``limit`` zoo configs (all kinds, round-robin over families) within the caps."""
    configs = [c for c in zoo_configs("all", seed=0) if c.batch <= max_batch and c.input_size <= max_size]
    return configs[:limit]


def train_and_score(method: str, traces: pd.DataFrame, split, minutes: float, out: Path) -> dict:
    """Train, save ``OUT/<method>.pt``, score the held-out families (overall and per family)."""
    options = {"max_minutes": minutes, **(ETS_SETTINGS if method == "ets" else {})}
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


def report(rows: list[dict], info: dict, configs: int, threads: int) -> str:
    table = pd.DataFrame([{k: r[k] for k in ("method", "traces", "mre", "rmse_ms", "wape", "epochs", "train_minutes")}
                          for r in rows])
    ets = next((r["mre"] for r in rows if r["method"] == "ets"), None)
    baselines = [r for r in rows if r["method"] != "ets"]
    best = min(baselines, key=lambda r: r["mre"]) if baselines else None
    share = info["overhead_share"]
    lines = ["# Real CPU benchmark: held-out families, every iteration measured", "",
             f"{info['iterations']:,} iterations of {configs} requested configs, {info['rows']:,} ops, profiled with "
             f"torch.profiler on this machine's CPU ({threads} intra-op thread(s)); median iteration "
             f"{info['iteration_ms_median']:.1f} ms. Families: "
             + ", ".join(f"{k} {v}" for k, v in info["per_family"].items()) + ".",
             f"Held-out units: {', '.join(rows[0]['test_units']) if rows else '-'}.", "",
             markdown(table), ""]
    if ets is not None and best is not None:
        lines.append(f"ETS / best baseline ({best['method']}): {ets / best['mre']:.2f}.")
    families = sorted({f for r in rows for f in r.get("by_family", {})})
    if families:
        lines += ["", "Held-out MRE per family:", "", "| family | traces | " + " | ".join(r["method"] for r in rows) + " |",
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
@click.option("--threads", type=click.IntRange(1), default=1, show_default=True, help="Intra-op threads while profiling.")
@click.option("--minutes", type=float, default=10.0, show_default=True, help="ETS training time limit.")
@click.option("--dnnperf-minutes", type=float, default=6.0, show_default=True)
@click.option("--baseline-minutes", type=float, default=2.0, show_default=True, help="Operator-based MLP.")
@click.option("--seed", type=int, default=0, show_default=True, help="Split seed.")
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), default=Path("reports/cpu_benchmark"),
              show_default=True)
def main(limit: int, max_batch: int, max_size: int, threads: int, minutes: float, dnnperf_minutes: float,
         baseline_minutes: float, seed: int, out: Path) -> None:
    configs = benchmark_configs(limit, max_batch, max_size)
    torch.set_num_threads(threads)
    record_peaks(out / "data")
    counts = collect(configs, DEVICE, out / "data", workers=1)
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
    text = report(rows, dataset_info(traces), len(configs), threads)
    (out / "report.md").write_text(text)
    click.echo(text)


if __name__ == "__main__":
    main()

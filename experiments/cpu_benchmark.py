"""A large fully real benchmark: ETS and its baselines on traces profiled on this machine's CPU.

Why: every other large comparison we print is on emulated GPUs. Here every iteration is a real
measurement (torch.profiler on the CPU, ``ets collect --device cpu``), of every family of the
``wide`` zoo (torchvision, RandWire, the plain-torch sequence models, timm and Hugging Face
architectures; reserved families never), batch and input size capped so that a config profiles
in seconds; the split holds whole families out (``predictor.dataset``), so the scores are on
architectures the models never saw.

    python -m experiments.cpu_benchmark [--zoo wide] [--limit 2400] [--max-batch 8] [--max-size 128]
                                        [--max-step-ms 400] [--threads 1] [--minutes 10]
                                        [--dnnperf-minutes 6] [--baseline-minutes 2] [--repeats 64]
                                        [--out reports/cpu_benchmark]

Configs: the zoo's seeded round-robin over families (any prefix is balanced), batch <= --max-batch,
image side or token count <= --max-size (not for Hugging Face's audio and log-mel inputs), and,
for timm and Hugging Face models, an estimated step time <= --max-step-ms: the probe's time of one
step (``experiments/zoo_probe.py``) scaled by pixels, batch and the preset's work.

Stages, each resumable (a rerun skips what exists):
1. this CPU's peaks, measured with the profiling thread count (``OUT/data/peaks.json``, the
   anchor of anchored targets);
2. the profiles (``OUT/data``, one Parquet). A profile taken while other processes kept the
   machine busy is taken again, and left for the next run when it stays disturbed
   (:mod:`predictor.emulator.capture.disturbance`; ``OUT/data/failures.jsonl``). ``OUT/data/machine.json``
   names the CPU and library versions; a run on another CPU refuses to add to the set (one set,
   one machine);
3. the noise floor: ``--repeats`` configs, drawn round-robin over family groups, profiled again
   after the collection (``OUT/data/repeatability.json``, overall and per group) — no method can
   be more accurate than the data agrees with itself;
4. each method trained and scored (``OUT/results.jsonl``, one line per method);
5. the report (``OUT/report.md``: held-out MRE per method and per family, ETS against the best
   baseline, the noise floor, the overhead share of the set).

Habitat-style is not run: it scales op times between GPUs by their spec sheets (SMs, clock,
bandwidth), which a CPU does not have. The profiling uses ``--threads`` intra-op threads (1 by
default: timings of one core); pin the process to a core (``taskset -c 0``) and keep the machine
otherwise idle — a job on the other core slows the profiled one (:mod:`predictor.emulator.capture.disturbance`).
"""

from __future__ import annotations

import json
import os
import platform
import random
from datetime import date
from pathlib import Path

import click
import numpy as np
import pandas as pd
import torch
from tqdm import tqdm

from experiments.pretrain import SHIPPED_SETTINGS
from predictor import methods
from predictor.common.families import group_of
from predictor.common.op_trace import dataset_info, read_dataset
from predictor.dataset import split_by_family
from predictor.emulator.capture.disturbance import DisturbedError, undisturbed
from predictor.emulator.capture.opseq import capture
from predictor.emulator.collect import collect
from predictor.emulator.peaks import measure_cpu, record, recorded
from predictor.emulator.zoo import hf_models, timm_models
from predictor.emulator.zoo.common import stratified_order
from predictor.emulator.zoo.registry import zoo_configs
from predictor.evaluate import evaluate, iteration_truth, markdown

DEVICE = "cpu"
REFERENCE_DATA = Path(__file__).parent / "data" / "cpu_benchmark_v2"  # the committed profiles (README there)
FIRST_REFERENCE_DATA = Path(__file__).parent / "data" / "cpu_benchmark"  # the first set: 21 families, another CPU
METHODS = methods.single_device_methods()  # a CPU has no second device whose traces Habitat-style could scale


AUDIO_TASKS = ("speech-seq2seq", "ctc")  # input_size counts log-mel frames or samples, not tokens
PROBE_PRESET, PROBE_BATCH, PROBE_TOKENS = "L2-H128", 2, 64  # the probe's Hugging Face step


def _work(layers: int, hidden: int, vocab: int, tokens: int) -> float:
    """FLOPs-like work of a transformer step: its layers' GEMMs and its output layer, per token."""
    return tokens * (layers * 12 * hidden * hidden + vocab * hidden)


def estimated_step_ms(config) -> float | None:
    """A timm or Hugging Face config's step time on one core, from the probe's step (batch 2, its
    smallest image; L2-H128 at 64 tokens) scaled by pixels x batch or by the preset's work; None
    for the other kinds (their caps are batch and size)."""
    if config.kind == "timm":
        probe = timm_models.MODELS[timm_models.timm_name_of(config)]
        return probe["cpu_ms"] * (config.input_size / probe["sizes"][0]) ** 2 * config.batch / PROBE_BATCH
    if config.kind == "hf":
        probe = hf_models.MODELS.get(hf_models.model_type_of(config))
        preset = config.get("preset")
        if probe is None or preset is None:
            return None
        layers, hidden, _, _, vocab = hf_models.PRESETS[str(preset)]
        base_layers, base_hidden, _, _, base_vocab = hf_models.PRESETS[PROBE_PRESET]
        task = hf_models.TASKS_OF[hf_models.model_type_of(config)]
        scale = config.batch / PROBE_BATCH * (1.0 if task in AUDIO_TASKS else config.input_size / PROBE_TOKENS)
        base = _work(base_layers, base_hidden, base_vocab, 1)
        return probe["cpu_ms"] * scale * _work(layers, hidden, vocab, 1) / base
    return None


def benchmark_configs(limit: int, max_batch: int, max_size: int, zoo: str = "wide",
                      max_step_ms: float = 400.0) -> list:
    """The first ``limit`` configs of ``zoo`` within the caps (reserved families never): for
    ``wide``, a seeded round-robin over families of the configs within the caps, so that any prefix
    is balanced; for ``all``, the zoo's own order filtered (as the first reference set was drawn)."""
    def fits(config) -> bool:
        if config.batch > max_batch:
            return False
        audio = config.kind == "hf" and hf_models.TASKS_OF[hf_models.model_type_of(config)] in AUDIO_TASKS
        if config.input_size > max_size and not audio:
            return False
        estimate = estimated_step_ms(config)
        return estimate is None or estimate <= max_step_ms

    within = [c for c in zoo_configs(zoo, seed=0) if fits(c)]
    if zoo == "all":
        return within[:limit]
    return stratified_order(within, random.Random(f"cpu-benchmark:{zoo}"), keep_order=("randwire",))[:limit]


def machine() -> dict:
    """What a CPU set was measured on: the processor as the kernel names it, the libraries."""
    cpu = ""
    try:
        cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                    if line.startswith("model name")), "")
    except OSError:
        pass
    return {"cpu": cpu or platform.processor() or platform.machine(), "machine": platform.machine(),
            "cores": os.cpu_count(), "torch": torch.__version__, "timm": timm_models.version(),
            "transformers": hf_models.version()}


def check_machine(data: Path) -> None:
    """Record this machine in ``DATA/machine.json``, or refuse to add to a set measured on another CPU
    or with another torch (a family split across two CPUs would measure the CPUs, not the method)."""
    here = machine()
    path = data / "machine.json"
    if path.exists():
        there = json.loads(path.read_text())
        differs = [k for k in ("cpu", "torch") if there.get(k) != here[k]]
        if differs:
            raise click.ClickException(f"{path}: the set was measured on {there.get('cpu')!r} with torch "
                                       f"{there.get('torch')}; this machine is {here['cpu']!r} with torch "
                                       f"{here['torch']}: profile into another --out")
        return
    data.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({**here, "first_profile": date.today().isoformat()}, indent=1) + "\n")


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
    the anchored targets, :mod:`predictor.emulator.peaks`); kept when already recorded."""
    if recorded(data, DEVICE) is None:
        record(data, measure_cpu())


def noise_floor(first: pd.Series, second: pd.Series, groups: dict[str, str] | None = None) -> dict:
    """How far two profiles of the same configs (iteration times, indexed by config) differ: the
    median, 90th percentile and largest |second / first - 1| and each config's ratio; per group
    too when ``groups`` (config -> group) is given."""
    ratio = (second / first.reindex(second.index)).dropna()
    dev = (ratio - 1).abs()
    out = {"configs": int(len(ratio)), "median": float(dev.median()), "p90": float(dev.quantile(0.9)),
           "max": float(dev.max()), "ratios": {k: round(float(v), 4) for k, v in ratio.items()}}
    if groups:
        by_group = dev.groupby(dev.index.map(groups))
        out["by_group"] = {g: {"configs": int(len(d)), "median": float(d.median())} for g, d in by_group}
    return out


def repeat_sample(configs: list, sample: int, seed: int = 0) -> list:
    """``sample`` configs, round-robin over family groups (seeded within each), so that every
    group has its own noise floor."""
    rng = np.random.default_rng(seed)
    by_group: dict[str, list] = {}
    for config in configs:
        by_group.setdefault(group_of(config.family), []).append(config)
    queues = [[members[i] for i in rng.permutation(len(members))] for _, members in sorted(by_group.items())]
    chosen: list = []
    while len(chosen) < sample and any(queues):
        for queue in queues:
            if queue and len(chosen) < sample:
                chosen.append(queue.pop())
    return chosen


def repeatability(configs: list, data: Path, sample: int, seed: int = 0) -> dict:
    """Profile a seeded sample of the dataset's configs again, after the collection, and compare
    (``DATA/repeatability.json``, kept when there): the noise floor below which no method's error
    means anything, overall and per family group, and the drift of the machine over the run."""
    path = data / "repeatability.json"
    if path.exists():
        return json.loads(path.read_text())
    truth = iteration_truth(read_dataset(data)).set_index("config_id")["true_us"]
    chosen = repeat_sample([c for c in configs if c.config_id in truth.index], sample, seed)
    again = {}
    for config in tqdm(chosen, desc="profile again", unit="config"):
        trace = undisturbed(lambda config=config: capture(config, DEVICE))
        again[config.config_id] = float(iteration_truth(trace)["true_us"].iloc[0])
    groups = {c.config_id: group_of(c.family) for c in chosen}
    result = {**noise_floor(truth, pd.Series(again), groups), "measured": date.today().isoformat()}
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
@click.option("--zoo", type=click.Choice(["all", "wide"]), default="wide", show_default=True,
              help="all: the first reference set's zoo (21 families); wide: with timm and Hugging Face families.")
@click.option("--limit", type=click.IntRange(10), default=2400, show_default=True)
@click.option("--max-batch", type=click.IntRange(1), default=8, show_default=True)
@click.option("--max-size", type=click.IntRange(1), default=128, show_default=True)
@click.option("--max-step-ms", type=click.FloatRange(0, min_open=True), default=400.0, show_default=True,
              help="timm and Hugging Face configs: estimated step time cap (the probe's time, scaled).")
@click.option("--threads", type=click.IntRange(1), default=1, show_default=True,
              help="Intra-op threads while profiling.")
@click.option("--minutes", type=float, default=10.0, show_default=True, help="ETS training time limit.")
@click.option("--dnnperf-minutes", type=float, default=6.0, show_default=True)
@click.option("--baseline-minutes", type=float, default=2.0, show_default=True, help="Operator-based MLP.")
@click.option("--seed", type=int, default=0, show_default=True, help="Split seed.")
@click.option("--repeats", type=click.IntRange(2), default=64, show_default=True,
              help="Configs profiled again after the collection, round-robin over family groups: the noise floor.")
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), default=Path("reports/cpu_benchmark"),
              show_default=True)
def main(zoo: str, limit: int, max_batch: int, max_size: int, max_step_ms: float, threads: int, minutes: float,
         dnnperf_minutes: float, baseline_minutes: float, seed: int, repeats: int, out: Path) -> None:
    configs = benchmark_configs(limit, max_batch, max_size, zoo, max_step_ms)
    torch.set_num_threads(threads)
    check_machine(out / "data")
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

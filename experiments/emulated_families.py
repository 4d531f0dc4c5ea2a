"""The zoo's new families on the emulated GPUs: how far the shipped GPU checkpoints carry to timm and
Hugging Face architectures they never saw.

Why: the shipped GPU checkpoints learned from the first 25 families (torchvision, RandWire, the
plain-torch sequence models, GPT-2 and BERT-large). The cluster's jobs are not limited to those,
so before a new family enters their training we measure how far they are off on families no
model saw.

    python -m experiments.emulated_families [--per-family 3] [--gpus T4,P100,V100,A100,H100,L4]
                                            [--out reports/emulated_families]

Stages, each resumable (a rerun skips what exists):
1. configs: per family of the timm and Hugging Face zoos (reserved families never), ``--per-family``
   seeded configs — timm models at their probed image sizes, Hugging Face architectures at the
   config class's real size (Llama's 7B, ...; 128-512 tokens, batch 1-8, float16 or float32) —
   kept when the training memory estimate (:mod:`predictor.memory`) fits the largest shipped GPU
   (80 GB); the rest are listed in ``OUT/left_out.json``;
2. op sequences on the meta device, emulated on every ``--gpus`` (seed 0): ``OUT/data``;
3. every shipped checkpoint of every method scored on all of them (``OUT/shipped.jsonl``,
   per family group): no shipped model trained on any of these families;
4. ``OUT/report.md``.

Every trace here is **emulated** (the GPU catalogue's kernel model); A100 is fitted to real
kernels, H100 and L4 are spec-derived (:mod:`predictor.emulator.devices`).
"""

from __future__ import annotations

import json
import os
import random
from pathlib import Path

import click
import pandas as pd
from tqdm import tqdm

from experiments.pretrain import emulated_datasets
from predictor import methods
from predictor.checkpoints import CHECKPOINT_DIR, available, checkpoint_path
from predictor.common.families import GROUPS, group_of, is_reserved
from predictor.common.op_trace import device_file, read_dataset
from predictor.emulator.collect import collect
from predictor.emulator.devices.specs import EMULATED_PREFIX
from predictor.emulator.zoo import hf_models, timm_models
from predictor.evaluate import evaluate, headline_metrics, markdown

MEMORY_LIMIT_GB = 80.0  # the largest shipped GPU (A100-80GB, H100)
# Host address space per capture worker: a few real-size models allocate host memory even
# on the meta device (RWKV: over 20 GB); under the limit they fail with MemoryError, recorded as a
# failed capture, instead of taking the machine's memory from the other worker.
CAPTURE_ADDRESS_SPACE_GB = 9.0
# Families whose real size cannot be captured here, with the reason (measured on a 2-core machine)
TOO_COSTLY = {"rwkv": "its real-size capture on the meta device runs for minutes per config (a Python loop per "
                      "token and layer) and allocates over 20 GB of host memory"}
HF_SEQS = {"speech-seq2seq": hf_models.SPEECH_FRAMES, "ctc": hf_models.AUDIO_SAMPLES}
LM_SEQS = (128, 256, 512)
HF_BATCHES = (1, 2, 4, 8)
HF_DTYPES = ("float16", "float32")


def candidate_configs(per_family: int, seed: int = 0) -> dict[str, list]:
    """Per new family, its candidate configs in seeded order (more than ``per_family``: the ones
    that do not fit in memory are skipped)."""
    rng = random.Random(f"emulated-families:{seed}")
    out: dict[str, list] = {}
    for family in sorted(timm_models.FAMILIES):
        if is_reserved(family):
            continue
        grid = timm_models.grid([family])
        out[family] = rng.sample(grid, len(grid))
    for model_type, task in sorted(hf_models.TASKS_OF.items()):
        if model_type in hf_models.EXCLUDED or model_type in TOO_COSTLY or is_reserved(model_type):
            continue
        points = [(b, s, d) for b in HF_BATCHES for s in HF_SEQS.get(task, LM_SEQS) for d in HF_DTYPES]
        rng.shuffle(points)
        out[model_type] = [hf_models.config_for(model_type, batch=b, seq=s, preset=None, dtype=d) for b, s, d in points]
    return out


def choose_configs(candidates: dict[str, list], per_family: int, sequences: Path,
                   rounds: tuple[int, ...] = (2, 4)) -> tuple[list, dict]:
    """Up to ``per_family`` configs per family that capture on the meta device and fit
    :data:`MEMORY_LIMIT_GB`: the first ``rounds[0] x per_family`` candidates of every family are
    captured, then the next ``rounds[1] x per_family`` of the families still short; the left-out
    candidates with the reason."""
    from predictor.memory import estimate

    chosen: dict[str, list] = {f: [] for f in candidates}
    left_out: dict[str, str] = {}
    offset = 0
    for size in rounds:
        short = {f: configs[offset:offset + size * per_family] for f, configs in candidates.items()
                 if len(chosen[f]) < per_family and len(configs) > offset}
        offset += size * per_family
        batch = [c for configs in short.values() for c in configs]
        if not batch:
            break
        collect(batch, "meta", sequences, workers=2, worker_memory_gb=CAPTURE_ADDRESS_SPACE_GB)
        captured = read_dataset(sequences)
        captured = captured[captured["config_id"].isin({c.config_id for c in batch})]
        by_id = dict(tuple(captured.groupby("config_id", sort=False)))
        for family, configs in tqdm(short.items(), desc="memory estimates", unit="family"):
            for config in configs:
                if len(chosen[family]) >= per_family:
                    break
                trace = by_id.get(config.config_id)
                if trace is None:
                    left_out[config.config_id] = "did not capture on the meta device (sequences/failures.jsonl)"
                    continue
                need = estimate(config, trace).total_gb
                if need > MEMORY_LIMIT_GB:
                    left_out[config.config_id] = f"needs about {need:,.0f} GB (> {MEMORY_LIMIT_GB:g} GB)"
                    continue
                chosen[family].append(config)
    return [c for configs in chosen.values() for c in configs], left_out


def scores(per_trace: pd.DataFrame) -> dict:
    """MRE overall and per family group of one evaluation's per-trace table."""
    groups = per_trace["family"].map(group_of)
    return {**headline_metrics(per_trace["pred_us"].to_numpy(), per_trace["true_us"].to_numpy()),
            "by_group": {g: {"traces": int(len(p)), "families": int(p["family"].nunique()),
                             "mre": float(p["rel_err"].abs().mean()), "median_signed": float(p["rel_err"].median())}
                         for g, p in per_trace.groupby(groups, sort=True)}}


def score_shipped(traces: dict[str, pd.DataFrame], path: Path) -> list[dict]:
    """Every shipped checkpoint of every method on the new families (resumable per checkpoint)."""
    rows = _read(path)
    done = {(r["method"], r["device"]) for r in rows}
    every = pd.concat(traces.values(), ignore_index=True)
    for method in methods.METHODS:
        for gpu in available(CHECKPOINT_DIR, method):
            device = EMULATED_PREFIX + gpu
            if device not in traces or (method, device) in done:
                continue
            model = methods.load(checkpoint_path(gpu, CHECKPOINT_DIR, method))
            source = getattr(getattr(model, "config", None), "source_device", "")
            if source and source not in traces:
                continue  # Habitat-style needs its source GPU's traces
            result = evaluate(model, every if source else traces[device])
            row = {"method": method, "device": device, **scores(result.per_trace)}
            rows.append(row)
            _append(path, row)
    return rows


def report(shipped: list[dict], configs: int, families: int, left_out: int) -> str:
    lines = ["# The zoo's new families on the emulated GPUs", "",
             f"{configs} configs of {families} timm and Hugging Face families (real sizes; {left_out} candidates "
             f"left out: `left_out.json`), every trace **emulated**. No shipped checkpoint trained on any of them.",
             "", "## Shipped checkpoints on families they never saw (MRE)", ""]
    groups = [g for g in GROUPS if any(g in r["by_group"] for r in shipped)]
    table = pd.DataFrame([{"method": methods.info(r["method"]).label, "device": r["device"], "traces": r["traces"],
                           "MRE": r["mre"], **{g: r["by_group"][g]["mre"] if g in r["by_group"] else None
                                               for g in groups}} for r in shipped])
    lines += [markdown(table, 3) if len(table) else "(none)", ""]
    return "\n".join(lines) + "\n"


def _read(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []


def _append(path: Path, row: dict) -> None:
    with path.open("a") as f:
        f.write(json.dumps(row, default=float) + "\n")
    click.echo(json.dumps({k: v for k, v in row.items() if not isinstance(v, (list, dict))}, default=float))


@click.command()
@click.option("--per-family", type=click.IntRange(1), default=3, show_default=True)
@click.option("--gpus", default="T4,P100,V100,A100,H100,L4", show_default=True)
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), default=Path("reports/emulated_families"),
              show_default=True)
def main(per_family: int, gpus: str, seed: int, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    # Its own datasets: real-size LLM sequences (up to 20,000 ops each) decode to more than the
    # 1 GiB an untrusted Parquet input may (predictor.common.inputs); an explicit setting wins.
    os.environ.setdefault("ETS_SIM_MAX_DECODED_BYTES", "8e9")
    gpu_list = [g for g in gpus.split(",") if g]
    chosen_file = out / "configs.json"
    if chosen_file.exists():
        chosen_ids = set(json.loads(chosen_file.read_text()))
        left_out = json.loads((out / "left_out.json").read_text())
    else:
        chosen, left_out = choose_configs(candidate_configs(per_family, seed), per_family, out / "sequences")
        left_out |= TOO_COSTLY
        chosen_ids = {c.config_id for c in chosen}
        (out / "left_out.json").write_text(json.dumps(left_out, indent=1) + "\n")
        chosen_file.write_text(json.dumps(sorted(chosen_ids), indent=1) + "\n")
    sequences = read_dataset(out / "sequences")
    sequences = sequences[sequences["config_id"].isin(chosen_ids)]
    emulated_datasets(sequences, gpu_list, out / "data")
    traces = {EMULATED_PREFIX + g: pd.read_parquet(device_file(out / "data", EMULATED_PREFIX + g)) for g in gpu_list}
    traces = {d: t[t["config_id"].isin(chosen_ids)] for d, t in traces.items()}
    shipped = score_shipped(traces, out / "shipped.jsonl")
    text = report(shipped, len(chosen_ids), sequences["family"].nunique(), len(left_out))
    (out / "report.md").write_text(text)
    click.echo(text)


if __name__ == "__main__":
    main()

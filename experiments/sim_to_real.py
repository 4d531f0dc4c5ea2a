"""Sim-to-real: ETS trained only on emulated T4 traces, scored on the real ETS T4 traces.

Why: the emulated GPUs are only worth what a model trained on them scores on real hardware. The
real traces were taken under Nsight Systems with per-op NVTX ranges, so the emulated training
traces use the ``nsys`` regime (host times of that profiler); the real iterations are imported
onto our own capture of the same zoo configs (``ets import --features zoo``), so the model meets
the features it was trained on. Nothing real is trained on: every real number is out of sample.

Also scored, for the record: the shipped plain-regime ``ets-T4.pt`` (what the simulator's
predictions use), on the same aligned traces and on the traces with their recorded features.

    python -m experiments.sim_to_real [--minutes 15] [--half-configs 160] [--sequences reports/pretrain/sequences]
                                      [--ets-traces ../shared/ets_traces] [--out reports/sim_to_real]

The op sequences are those of ``experiments.pretrain`` (collected here when missing; resumable);
the LLM families are left out (the real traces are all vision models and their 5,000-10,000-op
sequences would take most of the budget), and ``--half-configs`` fp16 vision configs are added
(four of the real iterations are fp16; the pretraining set has 8 fp16 configs of 788).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import click
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from tqdm import tqdm  # noqa: E402

from predictor import methods  # noqa: E402
from predictor.checkpoints import pretrained  # noqa: E402
from predictor.common.op_trace import read_dataset  # noqa: E402
from predictor.dataset import split_by_family  # noqa: E402
from predictor.emulator.capture import ets_csv  # noqa: E402
from predictor.emulator.capture.align import align_onto_zoo  # noqa: E402
from predictor.emulator.capture.importers import import_traces  # noqa: E402
from predictor.emulator.collect import collect  # noqa: E402
from predictor.emulator.devices.specs import load_params  # noqa: E402
from predictor.emulator.devices.timing import emulate, emulator_fingerprint  # noqa: E402
from predictor.evaluate import evaluate, markdown  # noqa: E402

DEFAULT_TRACES = Path(os.environ.get("ETS_TRACES_DIR", "../shared/ets_traces"))
GPU = "T4"
EMULATED = f"emulated:{GPU}"
LEFT_OUT_FAMILIES = ("gpt2", "gpt3", "opt", "bert")


def half_configs(count: int) -> list:
    """``count`` fp16 configs of the vision grid, stratified over the families (seeded)."""
    import random

    from predictor.emulator.zoo import vision
    from predictor.emulator.zoo.common import stratified_order

    return stratified_order(vision.grid("float16"), random.Random("sim_to_real:float16"))[:count]


def training_sequences(sequences_dir: Path, half_dir: Path, half: int) -> pd.DataFrame:
    """The pretraining op sequences without the LLM families, plus ``half`` fp16 vision configs
    (the pretraining set has 8: with them alone the model was 39-114 % off the four real fp16
    iterations). Collected on the meta device when missing (resumable)."""
    if not (sequences_dir / "meta.parquet").exists():
        from experiments.pretrain import dataset_configs

        base, extra = dataset_configs(700)
        collect(base + extra, "meta", sequences_dir, workers=2)
    parts = [read_dataset(sequences_dir)]
    if half:
        collect(half_configs(half), "meta", half_dir, workers=2)
        parts.append(read_dataset(half_dir))
    sequences = pd.concat(parts, ignore_index=True).drop_duplicates(["config_id", "idx"])
    return sequences[~sequences["family"].isin(LEFT_OUT_FAMILIES)]


def emulated_nsys(sequences: pd.DataFrame, cache: Path) -> pd.DataFrame:
    """Every sequence timed by the emulated T4 under the nsys regime (cached in ``cache``)."""
    if cache.exists():
        traces = pd.read_parquet(cache)
        if set(traces["config_id"]) >= set(sequences["config_id"]):
            return traces
    params = load_params()
    parts = [emulate(seq, EMULATED, params, seed=0, regime="nsys")
             for _, seq in tqdm(sequences.groupby("config_id", sort=True), desc="emulate T4 (nsys)", unit="config")]
    traces = pd.concat(parts, ignore_index=True)
    cache.parent.mkdir(parents=True, exist_ok=True)
    traces.to_parquet(cache, index=False)
    return traces


def emulated_model(minutes: float, sequences_dir: Path, out: Path, half_configs: int, seed: int):
    """ETS trained on the emulated T4's nsys-regime traces only, and its path (cached in ``out``,
    keyed by the emulator: a refit must not reuse traces or a model of the old one)."""
    key = f"{emulator_fingerprint(load_params())}-h{half_configs}"
    model_path = out / f"ets-T4-nsys-{key}.pt"
    if model_path.exists():
        return methods.load(model_path), model_path
    sequences = training_sequences(sequences_dir, out / "half_sequences", half_configs)
    train = emulated_nsys(sequences, out / f"emulated_T4_nsys-{key}.parquet")
    split = split_by_family(train, test_fraction=0.0, val_fraction=0.15, seed=seed)
    from experiments.pretrain import ETS_SETTINGS

    config = methods.make_config("ets", max_minutes=minutes, seed=seed, **ETS_SETTINGS)
    model = methods.module("ets").train(split.part(train, "train"), split.part(train, "val"), config,
                                        device=EMULATED, split=split.to_dict())
    model.save(model_path)
    return model, model_path


def real_traces(ets_traces: Path, gpu: str, progress: bool = True, files: int | None = None):
    """The real ETS iterations of ``gpu`` (a folder of ``ets_traces``) imported onto our zoo
    captures: (recorded, aligned, alignment report, skipped). ``files``: only the first N files
    of the sorted listing (quick runs)."""
    directory = ets_traces / gpu
    if not directory.is_dir():
        raise click.ClickException(f"{directory}: no real {gpu} traces (set --ets-traces or ETS_TRACES_DIR)")
    recorded = import_traces("ets-csv", directory)
    if files is not None:
        recorded = recorded[recorded["config_id"].isin(sorted(recorded["config_id"].unique())[:files])]
    aligned, alignment, skipped = align_onto_zoo(recorded, ets_csv.zoo_config, progress=progress)
    return recorded, aligned, alignment, skipped


def scored(model, real: pd.DataFrame, label: str) -> pd.DataFrame:
    """Per-trace errors of ``model`` on ``real`` (relabelled to the model's device)."""
    result = evaluate(model, real.assign(device=model.device))
    return result.per_trace.assign(model_label=label)


def emulator_alone(aligned: pd.DataFrame, label: str) -> pd.DataFrame:
    """The emulated T4 (nsys regime) itself on each aligned config: what ETS learns to imitate."""
    params = load_params()
    rows = []
    for config_id, t in aligned.groupby("config_id", sort=True):
        e = emulate(t, EMULATED, params, seed=0, regime="nsys", noise=False)
        true_us = float((t["duration_us"] + t["gap_us"]).sum())
        pred_us = float((e["duration_us"] + e["gap_us"]).sum())
        rows.append({"config_id": config_id, "family": t["family"].iloc[0], "model": t["model"].iloc[0],
                     "ops": len(t), "true_us": true_us, "pred_us": pred_us, "rel_err": pred_us / true_us - 1})
    return pd.DataFrame(rows).assign(model_label=label)


def summary(per_trace: pd.DataFrame) -> pd.DataFrame:
    rows = []
    for label, t in per_trace.groupby("model_label", sort=False):
        err = t["rel_err"].abs()
        rows.append({"model": label, "traces": len(t), "MRE": err.mean(), "median |err|": err.median(),
                     "signed mean": t["rel_err"].mean(), "within 20 %": (err <= 0.2).mean()})
    return pd.DataFrame(rows)


def plot(per_trace: pd.DataFrame, out: Path) -> None:
    import textwrap

    labels = list(dict.fromkeys(per_trace["model_label"]))
    cols = 2
    rows = -(-len(labels) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(5.5 * cols, 5.0 * rows), squeeze=False)
    colours = dict(zip(sorted(per_trace["family"].unique()), plt.get_cmap("tab20").colors))
    for ax, label in zip(axes.flat, labels):
        t = per_trace[per_trace["model_label"] == label]
        true, pred = t["true_us"] / 1e3, t["pred_us"] / 1e3
        lo, hi = min(true.min(), pred.min()) * 0.8, max(true.max(), pred.max()) * 1.25
        grid = np.geomspace(lo, hi, 50)
        ax.fill_between(grid, grid / 1.2, grid * 1.2, color="0.9", label="±20 %")
        ax.plot(grid, grid, "k-", lw=0.8)
        for family, f in t.groupby("family"):
            ax.scatter(f["true_us"] / 1e3, f["pred_us"] / 1e3, s=18, label=family, color=colours[family])
        ax.set(xscale="log", yscale="log", xlabel="real T4 iteration (ms)", ylabel="predicted (ms)")
        ax.set_title(f"{textwrap.fill(label, 48)}\nMRE {t['rel_err'].abs().mean():.1%}", fontsize=9)
    for ax in axes.flat[len(labels):]:
        ax.axis("off")
    axes.flat[0].legend(fontsize=7, ncol=2)
    fig.tight_layout()
    for ext in ("png", "pdf"):
        fig.savefig(out / f"sim_to_real.{ext}", dpi=150)
    plt.close(fig)


@click.command()
@click.option("--minutes", type=float, default=15.0, show_default=True, help="ETS training time limit.")
@click.option("--sequences", "sequences_dir", type=click.Path(file_okay=False, path_type=Path),
              default=Path("reports/pretrain/sequences"), show_default=True)
@click.option("--ets-traces", type=click.Path(file_okay=False, path_type=Path), default=DEFAULT_TRACES,
              show_default=True, help="Holds T4/ (also ETS_TRACES_DIR).")
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), default=Path("reports/sim_to_real"),
              show_default=True)
@click.option("--half-configs", type=click.IntRange(0), default=160, show_default=True,
              help="fp16 vision configs added to the training sequences.")
@click.option("--seed", type=int, default=0, show_default=True)
def main(minutes: float, sequences_dir: Path, ets_traces: Path, out: Path, half_configs: int, seed: int) -> None:
    real_dir = ets_traces / GPU
    recorded, aligned, alignment, skipped = real_traces(ets_traces, GPU)
    out.mkdir(parents=True, exist_ok=True)
    alignment.to_csv(out / "alignment.csv", index=False)
    model, _ = emulated_model(minutes, sequences_dir, out, half_configs, seed)
    shipped = pretrained(GPU)
    per_trace = pd.concat([
        scored(model, aligned, "ETS, emulated T4 nsys regime (zoo features)"),
        scored(shipped, aligned, "shipped ets-T4.pt, plain regime (zoo features)"),
        scored(shipped, recorded[recorded["config_id"].isin(set(aligned["config_id"]))],
               "shipped ets-T4.pt, plain regime (recorded features)"),
        emulator_alone(aligned, "the emulated T4 itself, nsys regime "
                                "(in-sample: these traces are calibration targets)"),
    ], ignore_index=True)
    per_trace.to_csv(out / "per_trace.csv", index=False)
    table = summary(per_trace)
    by_family = (per_trace.assign(abs_err=per_trace["rel_err"].abs())
                 .pivot_table(index="family", columns="model_label", values="abs_err", aggfunc="mean"))
    plot(per_trace, out)
    history = model.history or []
    lines = [
        "# Sim-to-real: emulated-T4-trained ETS on the real ETS T4 traces",
        "",
        f"Real: {aligned['config_id'].nunique()} T4 iterations of {real_dir} imported onto our zoo captures "
        f"({alignment['matched'].sum():,} of {alignment['real_rows'].sum():,} rows matched); "
        + (f"not scored: {'; '.join(s.reason for s in skipped)}." if skipped else "every file scored."),
        f"Training: {model.config.max_minutes:g} min budget, "
        f"{len(history)} epochs, emulated T4 (nsys regime) traces of the pretraining configs without LLMs "
        f"and {half_configs} fp16 vision configs. "
        "Out of sample: no real trace was trained on.",
        "",
        markdown(table),
        "",
        "Mean |error| per family:",
        "",
        markdown(by_family.reset_index()),
        "",
        "![sim to real](sim_to_real.png)",
    ]
    (out / "report.md").write_text("\n".join(lines) + "\n")
    (out / "summary.json").write_text(json.dumps(table.to_dict("records"), indent=1, default=float) + "\n")
    click.echo("\n".join(lines[:8]))
    click.echo(f"report: {out / 'report.md'}")


if __name__ == "__main__":
    main()

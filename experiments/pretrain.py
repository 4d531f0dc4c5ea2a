"""Build the emulated training data and the pretrained ETS checkpoints that ship with the package.

Why: `simrun --predictor ets` must work right after install, so the package carries one small
checkpoint per GPU type of the default simulator cluster (T4, P100, V100), trained here on
emulated execution traces of zoo configs with a family-disjoint split, and evaluated on the
held-out families.

    python -m experiments.pretrain [--configs 700] [--devices T4,P100,V100] [--minutes 15]

Stages (each resumable: a rerun skips what exists):
1. op sequences of the first ``--configs`` zoo configs (all kinds, stratified by family) on the
   meta device, in ``OUT/sequences``;
2. each sequence emulated on every device (seeded noise), in ``OUT/data`` (one Parquet per device);
3. per device: split by family (seed 0, the same split for every device), train, save
   ``predictor/checkpoints/ets-<GPU>.pt``, evaluate on the test families; the table goes to
   ``OUT/report.md`` and ``OUT/report.json``.
"""

from __future__ import annotations

import json
from pathlib import Path

import click
import pandas as pd
from tqdm import tqdm

from predictor import ets
from predictor.checkpoints import CHECKPOINT_DIR, checkpoint_path
from predictor.collect import collect
from predictor.dataset import split_by_family
from predictor.devices.specs import EMULATED_PREFIX, load_params
from predictor.devices.timing import emulate
from predictor.evaluate import evaluate, markdown
from predictor.trace_table import device_file, read_dataset, write_traces
from predictor.zoo.registry import zoo_configs


def emulated_datasets(sequences: pd.DataFrame, devices: list[str], out: Path) -> None:
    params = load_params()
    for gpu in devices:
        name = EMULATED_PREFIX + gpu
        path = device_file(out, name)
        if path.exists() and set(pd.read_parquet(path, columns=["config_id"])["config_id"]) >= set(sequences["config_id"]):
            continue
        parts = [emulate(seq, name, params, seed=0) for _, seq in
                 tqdm(sequences.groupby("config_id", sort=True), desc=f"emulate {gpu}", unit="config")]
        write_traces(out, pd.concat(parts, ignore_index=True))


@click.command()
@click.option("--configs", type=click.IntRange(10), default=700, show_default=True)
@click.option("--devices", default="T4,P100,V100", show_default=True)
@click.option("--minutes", type=float, default=15.0, show_default=True, help="Training time limit per device.")
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), default=Path("reports/pretrain"),
              show_default=True)
@click.option("--checkpoints", type=click.Path(file_okay=False, path_type=Path), default=CHECKPOINT_DIR,
              show_default=True)
@click.option("--workers", type=click.IntRange(1), default=2, show_default=True)
def main(configs: int, devices: str, minutes: float, out: Path, checkpoints: Path, workers: int) -> None:
    chosen = zoo_configs("all")[:configs]
    collect(chosen, "meta", out / "sequences", workers=workers)
    sequences = read_dataset(out / "sequences")
    sequences = sequences[sequences["config_id"].isin({c.config_id for c in chosen})]
    gpus = devices.split(",")
    emulated_datasets(sequences, gpus, out / "data")
    split = split_by_family(sequences, seed=0)
    rows = []
    for gpu in gpus:
        data = pd.read_parquet(device_file(out / "data", EMULATED_PREFIX + gpu))
        config = ets.TrainConfig(max_minutes=minutes)
        model = ets.train(split.part(data, "train"), split.part(data, "val"), config, split=split.to_dict())
        path = model.save(checkpoint_path(gpu, checkpoints))
        result = evaluate(model, split.part(data, "test"))
        rows.append({"device": model.device, "checkpoint": str(path), "epochs": len(model.history),
                     "train_minutes": round(model.history[-1]["wall_s"] / 60, 2), **result.headline()})
        click.echo(json.dumps(rows[-1]))
    table = pd.DataFrame(rows)
    (out / "report.json").write_text(json.dumps({"split": split.to_dict(), "results": rows}, indent=1) + "\n")
    (out / "report.md").write_text(markdown(table) + "\n")
    click.echo(markdown(table))


if __name__ == "__main__":
    main()

"""ETS ablations: window width × stride, overlap averaging, the sequence model, and our three
additions to it.

Why: the paper fixes W = 12, S = 4 and a Bi-LSTM; these runs show what each choice buys on the
same data, split and budget: W ∈ {4, 8, 12, 16, 24} × S ∈ {1, 2, 3, 4, 6, 8} (S > W skipped: ops
would fall outside every window), overlap averaging against taking each op from its first window
only, Bi-LSTM against GRU, a transformer encoder and an MLP on the flattened window, and the
time-share loss weights, weight averaging and iteration-context features (``predictor.methods.ets``,
``predictor.features``) each switched off. Every point uses the shipped model's settings
(``experiments.pretrain.ETS_SETTINGS``) otherwise.

    python -m experiments.ablations --data reports/pretrain/data --device emulated:V100
                                    [--configs 150] [--minutes 2] [--out reports/ablations]

Every point trains on the same family split (seed 0) of the first ``--configs`` configs (in zoo
order, which interleaves the families) and is
scored on the test families. Results are appended to ``results.csv`` point by point, so an
interrupted run resumes; ``table.md`` and ``window_stride.png``/``.pdf`` are rewritten after each.
"""

from __future__ import annotations

import time
from pathlib import Path

import click
import numpy as np
import pandas as pd

from experiments.pretrain import ETS_SETTINGS
from predictor.common.op_trace import device_file
from predictor.dataset import split_by_family
from predictor.emulator.zoo.registry import zoo_configs
from predictor.evaluate import evaluate, markdown
from predictor.methods import ets
from predictor.methods.checks import ARCHS

WIDTHS = (4, 8, 12, 16, 24)
STRIDES = (1, 2, 3, 4, 6, 8)


DEFAULT = {"width": 12, "stride": 4, "arch": "lstm", "overlap": True, "loss_weight": "time", "ema": 0.998,
           "context": True}


def points() -> list[dict]:
    grid = [{**DEFAULT, "study": "window", "width": w, "stride": s} for w in WIDTHS for s in STRIDES if s <= w]
    grid.append({**DEFAULT, "study": "overlap", "overlap": False})
    grid += [{**DEFAULT, "study": "arch", "arch": a} for a in ARCHS if a != "lstm"]
    grid.append({**DEFAULT, "study": "loss", "loss_weight": "uniform"})
    grid.append({**DEFAULT, "study": "ema", "ema": 0.0})
    grid.append({**DEFAULT, "study": "context", "context": False})
    return grid


def key(p: dict) -> str:
    return ":".join(str(p[k]) for k in ("study", *DEFAULT))


def plot(results: pd.DataFrame, out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    window = results[results["study"] == "window"].pivot(index="width", columns="stride", values="mre")
    fig, ax = plt.subplots(figsize=(6, 4))
    image = ax.imshow(window.to_numpy() * 100, cmap="viridis_r", aspect="auto")
    ax.set_xticks(range(len(window.columns)), window.columns)
    ax.set_yticks(range(len(window.index)), window.index)
    ax.set_xlabel("stride S")
    ax.set_ylabel("window width W")
    for (i, j), v in np.ndenumerate(window.to_numpy() * 100):
        if np.isfinite(v):
            ax.text(j, i, f"{v:.1f}", ha="center", va="center", color="w", fontsize=8)
    fig.colorbar(image, label="test MRE (%)")
    ax.set_title("ETS window width x stride (held-out families)")
    fig.tight_layout()
    for ext in ("png", "pdf"):
        fig.savefig(out / f"window_stride.{ext}")
    plt.close(fig)


@click.command()
@click.option("--data", "data_dir", type=click.Path(file_okay=False, path_type=Path), required=True)
@click.option("--device", default="emulated:V100", show_default=True)
@click.option("--configs", type=click.IntRange(10), default=150, show_default=True)
@click.option("--minutes", type=float, default=2.0, show_default=True, help="Training budget per point.")
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), default=Path("reports/ablations"),
              show_default=True)
def main(data_dir: Path, device: str, configs: int, minutes: float, out: Path) -> None:
    results_file = out / "results.csv"
    done = set()
    if results_file.exists():  # checked first: a foreign file must not cost a data load or get appended to
        previous = pd.read_csv(results_file)
        missing = [c for c in ("key", *DEFAULT) if c not in previous.columns]
        if missing:
            raise click.ClickException(f"{results_file}: written by an older version (no {', '.join(missing)} "
                                       f"column); move it away to start a new sweep")
        done = set(previous["key"])
    data = pd.read_parquet(device_file(data_dir, device))
    present = set(data["config_id"])
    keep = [c.config_id for c in zoo_configs("all") if c.config_id in present][:configs]  # stratified by family
    data = data[data["config_id"].isin(keep)]
    split = split_by_family(data, seed=0)
    out.mkdir(parents=True, exist_ok=True)
    todo = [p for p in points() if key(p) not in done]
    click.echo(f"{len(todo)} of {len(points())} points to run; test families: {', '.join(split.test_units)}")
    for p in todo:
        config = ets.EtsConfig(**{**ETS_SETTINGS, **{k: p[k] for k in DEFAULT}, "max_minutes": minutes})
        started = time.perf_counter()
        model = ets.train(split.part(data, "train"), split.part(data, "val"), config, progress=False)
        row = {"key": key(p), **p, **evaluate(model, split.part(data, "test")).headline(),
               "epochs": len(model.history), "train_s": round(time.perf_counter() - started, 1)}
        pd.DataFrame([row]).to_csv(results_file, mode="a", header=not results_file.exists(), index=False)
        click.echo(f"{key(p)}: test MRE {row['mre']:.2%} ({row['epochs']} epochs, {row['train_s']:.0f} s)")
        write_report(out)  # after every point: an interrupted sweep still leaves its table and plot
    click.echo(write_report(out))


def write_report(out: Path) -> str:
    results = pd.read_csv(out / "results.csv")
    table = markdown(results[["study", *DEFAULT, "mre", "rmse_ms", "wape", "epochs", "train_s"]])
    (out / "table.md").write_text(table + "\n")
    plot(results, out)
    return table


if __name__ == "__main__":
    main()

"""Framework-overhead share across the zoo on emulated GPUs: does it emerge from the mechanism?

Why: the emulated timeline has no overhead term; the GPU idles only when the host (dispatch,
Python) is slower than the kernels. If the mechanism is right, large convolutional nets at large
batch are GPU bound (share near 0) and small models at small batch host bound (share above
one half), as the ETS paper measured on real GPUs (4 %–68 %).

    python -m experiments.emulated_overhead [--limit 200] [--devices V100,T4] [--out reports/overhead]

Captures the op sequences of ``--limit`` zoo configs on the meta device (resumable, in
``OUT/sequences``), emulates each on every device without noise, and writes ``shares.csv``, a
table of quantiles with the most and least host-bound configs, and ``overhead.png``/``.pdf``.
"""

from __future__ import annotations

from pathlib import Path

import click
import numpy as np
import pandas as pd

from predictor.common.op_trace import read_dataset
from predictor.emulator.collect import collect
from predictor.emulator.devices.specs import load_params
from predictor.emulator.devices.timing import emulate
from predictor.emulator.zoo.registry import zoo_configs

QUANTILES = (0.0, 0.1, 0.5, 0.9, 1.0)


def shares(sequences: pd.DataFrame, devices: list[str]) -> pd.DataFrame:
    params = load_params()
    rows = []
    for config_id, seq in sequences.groupby("config_id", sort=True):
        for device in devices:
            out = emulate(seq, device, params, noise=False)
            busy, gap = out["duration_us"].sum(), out["gap_us"].sum()
            rows.append({"device": out["device"].iloc[0], "config_id": config_id, "family": seq["family"].iloc[0],
                         "batch": int(seq["batch"].iloc[0]), "ops": len(seq), "iteration_ms": (busy + gap) / 1e3,
                         "overhead_share": gap / (busy + gap)})
    return pd.DataFrame(rows)


def plot(table: pd.DataFrame, out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.5))
    for device, group in table.groupby("device"):
        values = np.sort(group["overhead_share"].to_numpy())
        ax.plot(values * 100, np.arange(1, len(values) + 1) / len(values), label=device)
    ax.set_xlabel("framework-overhead share of the iteration (%)")
    ax.set_ylabel("fraction of zoo configs")
    ax.set_title("Overhead on emulated GPUs (no overhead term: it emerges)")
    ax.legend()
    fig.tight_layout()
    for ext in ("png", "pdf"):
        fig.savefig(out / f"overhead.{ext}")
    plt.close(fig)


@click.command()
@click.option("--limit", type=click.IntRange(1), default=200, show_default=True)
@click.option("--devices", default="V100,T4,P100", show_default=True)
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), default=Path("reports/overhead"),
              show_default=True)
@click.option("--workers", type=click.IntRange(1), default=2, show_default=True)
def main(limit: int, devices: str, out: Path, workers: int) -> None:
    configs = zoo_configs("all")[:limit]
    collect(configs, "meta", out / "sequences", workers=workers)
    sequences = read_dataset(out / "sequences")
    sequences = sequences[sequences["config_id"].isin({c.config_id for c in configs})]
    table = shares(sequences, devices.split(","))
    out.mkdir(parents=True, exist_ok=True)
    table.to_csv(out / "shares.csv", index=False)
    lines = ["| device | configs | " + " | ".join(f"p{int(q * 100)}" for q in QUANTILES) + " |",
             "|---|---:|" + "---:|" * len(QUANTILES)]
    for device, group in table.groupby("device"):
        qs = group["overhead_share"].quantile(list(QUANTILES)).to_numpy()
        lines.append(f"| {device} | {len(group)} | " + " | ".join(f"{q:.1%}" for q in qs) + " |")
    for device, group in table.groupby("device"):
        ordered = group.sort_values("overhead_share")
        for label, rows in (("least", ordered.head(3)), ("most", ordered.tail(3))):
            lines.append(f"{device} {label} host-bound: " + "; ".join(
                f"{r.config_id} ({r.ops} ops, {r.iteration_ms:.1f} ms, {r.overhead_share:.1%})"
                for r in rows.itertuples()))
    text = "\n".join(lines)
    (out / "table.md").write_text(text + "\n")
    plot(table, out)
    click.echo(text)


if __name__ == "__main__":
    main()

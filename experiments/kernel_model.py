"""Fit the learned kernel-time model on every real kernel we hold, report its leave-one-GPU-out
error, and write the shipped model.

Why: the kernel model is the ground truth of every emulated trace, so its error on GPUs it never
saw is the number that bounds everything downstream; this script measures it (never in-sample)
and then fits the shipped model on all GPUs.

    python -m experiments.kernel_model [--calibration DIR] [--ets DIR] [--report reports/kernels]
                                      [--out predictor/emulator/devices/kernel_model.json] [--rounds 600]
                                      [--compare-mlp]

Writes ``report.md`` (median |error| per op class × held-out GPU, per dataset and phase),
``logo.parquet`` (every row with its held-out prediction) and ``logo.png``/``.pdf``
(predicted vs measured, log–log, one panel per GPU, identity line and ±20 % band).
``--compare-mlp`` also runs the same leave-one-GPU-out with a small torch MLP (2 × 128, ReLU, L1
loss, 15 epochs) on the same features and targets: the measured basis of the choice of trees.
"""

from __future__ import annotations

import time
from pathlib import Path

import click
import matplotlib

from predictor.common.inputs import InputError

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from experiments.shared_data import shared_dir  # noqa: E402
from predictor.emulator.devices import kernel_corpus, kernels  # noqa: E402
from predictor.emulator.devices.specs import spec_sheets  # noqa: E402

SHARED = shared_dir()
KERNELBENCH_CACHE = Path("reports/calibration/kernelbench_sequences.parquet")


def table(rows: pd.DataFrame) -> str:
    by = rows.groupby(["cls", "device"])["rel_error"].median().unstack()
    devices = list(by.columns)
    lines = ["| op class | " + " | ".join(devices) + " | all |", "|---|" + "---:|" * (len(devices) + 1)]
    for cls, r in by.iterrows():
        overall = rows.loc[rows["cls"] == cls, "rel_error"].median()
        lines.append(f"| {cls} | " + " | ".join("–" if np.isnan(v) else f"{v:.1%}" for v in r) + f" | {overall:.1%} |")
    lines += ["", "| dataset | op class | kernel | precision | rows | median | p90 |",
              "|---|---|---|---|---:|---:|---:|"]
    for (ds, cls, kernel, math_), g in rows.groupby(["dataset", "cls", "kernel", "math"]):
        lines.append(f"| {ds} | {cls} | {kernel} | {math_} | {len(g):,} | {g['rel_error'].median():.1%} | "
                     f"{g['rel_error'].quantile(0.9):.1%} |")
    return "\n".join(lines)


def plot(rows: pd.DataFrame, out: Path) -> None:
    devices = sorted(rows["device"].unique())
    cols = min(6, len(devices))
    nrows = -(-len(devices) // cols)
    fig, axes = plt.subplots(nrows, cols, figsize=(3.2 * cols, 3.2 * nrows), squeeze=False)
    for ax in axes.flat[len(devices):]:
        ax.axis("off")
    for ax, device in zip(axes.flat, devices):
        g = rows[rows["device"] == device]
        for cls, c in g.groupby("cls"):
            ax.scatter(c["measured_us"], c["predicted_us"], s=2, alpha=0.3, label=cls)
        lo, hi = g["measured_us"].min(), g["measured_us"].max()
        xs = np.array([lo, hi])
        ax.plot(xs, xs, "k-", lw=0.8)
        ax.fill_between(xs, xs * 0.8, xs * 1.2, color="grey", alpha=0.2)
        ax.set(xscale="log", yscale="log", title=f"{device} (held out)", xlabel="measured µs")
    for row in axes:
        row[0].set_ylabel("predicted µs")
    axes.flat[len(devices) - 1].legend(markerscale=4, fontsize=7)
    fig.tight_layout()
    for ext in ("png", "pdf"):
        fig.savefig(out.with_suffix(f".{ext}"), dpi=120)
    plt.close(fig)


def mlp_leave_one_gpu_out(data: pd.DataFrame, epochs: int = 15) -> pd.DataFrame:
    """Median |error| per op class and held-out GPU of a small MLP in place of the trees."""
    import torch

    torch.manual_seed(0)
    usable = data[~data["censored"] & (data["phase"] == "forward")]
    out = []
    for _group, classes in kernels.GROUPS.items():
        part = usable[usable["cls"].isin(classes)]
        mats = {d: (kernels.features(r, spec_sheets()[d]), np.log10(r["measured_us"].to_numpy()), r["cls"].to_numpy())
                for d, r in part.groupby("device")}
        for held in mats:
            x = np.vstack([m[0] for d, m in mats.items() if d != held])
            y = np.concatenate([m[1] - m[0][:, 0] for d, m in mats.items() if d != held])
            mu, sd = x.mean(0), x.std(0) + 1e-6
            xs, ys = torch.tensor((x - mu) / sd, dtype=torch.float32), torch.tensor(y, dtype=torch.float32)
            net = torch.nn.Sequential(torch.nn.Linear(x.shape[1], 128), torch.nn.ReLU(), torch.nn.Linear(128, 128),
                                      torch.nn.ReLU(), torch.nn.Linear(128, 1))
            opt = torch.optim.Adam(net.parameters(), 1e-3)
            for _ in range(epochs):
                for b in torch.randperm(len(xs)).split(512):
                    opt.zero_grad()
                    torch.nn.functional.l1_loss(net(xs[b]).squeeze(1), ys[b]).backward()
                    opt.step()
            xt, yt, cls = mats[held]
            with torch.no_grad():
                pred = net(torch.tensor((xt - mu) / sd, dtype=torch.float32)).squeeze(1).numpy()
            err = np.abs(10 ** (xt[:, 0] + np.maximum(pred, 0) - yt) - 1)
            out += [{"cls": c, "device": held, "rel_error": float(np.median(err[cls == c]))} for c in np.unique(cls)]
    return pd.DataFrame(out)


@click.command(help=__doc__.split("\n\n")[0])
@click.option("--calibration", type=click.Path(path_type=Path), default=SHARED / "calibration", show_default=True)
@click.option("--ets", "ets_dir", type=click.Path(path_type=Path), default=SHARED / "ets_traces", show_default=True)
@click.option("--report", type=click.Path(path_type=Path), default=Path("reports/kernels"), show_default=True)
@click.option("--out", type=click.Path(path_type=Path), default=kernels.MODEL_FILE, show_default=True)
@click.option("--rounds", type=int, default=kernels.ROUNDS, show_default=True)
@click.option("--compare-mlp", is_flag=True, help="Also measure a small MLP leave-one-GPU-out.")
def main(calibration: Path, ets_dir: Path, report: Path, out: Path, rounds: int, compare_mlp: bool) -> None:
    try:
        data = kernel_corpus.load_all(calibration, ets_dir, kernelbench_cache=KERNELBENCH_CACHE, progress=True)
    except InputError as exc:
        raise click.ClickException(str(exc)) from None
    report.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    rows = kernels.leave_one_gpu_out(data, spec_sheets(), rounds, progress=True)
    logo_s = time.perf_counter() - start
    rows.to_parquet(report / "logo.parquet", index=False)
    plot(rows, report / "logo")
    text = table(rows)
    censored = int(data["censored"].sum())
    head = (f"Learned kernel model, leave-one-GPU-out (each GPU predicted by a model fitted without it; "
            f"{len(rows):,} uncensored rows of {len(data):,}; {censored:,} NeuSight rows at the call floor "
            f"and {data.attrs['implausible']} implausible ETS rows excluded). Median |predicted − measured| "
            f"/ measured; {rounds} rounds; {logo_s:.0f} s.\n")
    model = kernels.fit(data, spec_sheets(), rounds)
    summary = {"logo_median": {c: round(float(g["rel_error"].median()), 4) for c, g in rows.groupby("cls")},
               "rows": model.rows, "devices": list(model.devices)}
    path = model.save(out, summary)
    if compare_mlp:
        mlp = mlp_leave_one_gpu_out(data).pivot(index="cls", columns="device", values="rel_error")
        text += ("\n\nThe same with a small MLP instead of the trees (median |error| per class and held-out GPU):\n\n"
                 + "| op class | " + " | ".join(mlp.columns) + " |\n|---|" + "---:|" * len(mlp.columns) + "\n"
                 + "\n".join(f"| {c} | " + " | ".join("–" if np.isnan(v) else f"{v:.1%}" for v in r) + " |"
                              for c, r in mlp.iterrows()))
    (report / "report.md").write_text(head + "\n" + text + "\n")
    print(head + "\n" + text)
    print(f"model ({', '.join(model.devices)}) -> {path}; report in {report}")


if __name__ == "__main__":
    main()

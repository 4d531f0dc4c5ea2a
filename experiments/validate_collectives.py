"""The all-reduce model against real collectives, out of sample; and the shipped fit.

Why: the communication model (predictor/emulator/devices/collectives.py) is only worth its place if links
fitted on some machines price another's all-reduces. This fits it on Vidur's DGX A100 (NVSwitch
within a node, the network between nodes) and DeepBench's PCIe machines (one node, and 2–4
nodes over InfiniBand), and predicts Vidur's A100 pairwise-NVLink setup, which the fit never saw
(target: median |error| ≤ 15 % for messages ≥ 1 MB). Two variants show what the model's parts
buy, on the same split: one protocol (the plain α–β ring) and one PCIe class (DeepBench's
host-staged machines pooled with the peer-to-peer ones).

    python -m experiments.validate_collectives [--calibration DIR] [--report reports/collectives]
                                               [--write-params]

Writes ``report.md`` (per set and placement: rows, median |error| over ≥ 1 MB and over all sizes,
median signed, share within ±15 %; the fitted parameters), ``rows.csv`` (every row with its
prediction) and ``allreduce.png`` (measured and predicted time by size, one panel per set, one
colour per placement). ``--write-params`` then fits on every set and writes the shipped
``predictor/emulator/devices/collectives.json`` (its ``provenance`` says on what, how and when).
"""

from __future__ import annotations

from datetime import date
from pathlib import Path

import click
import numpy as np
import pandas as pd

from experiments.shared_data import shared_dir
from predictor.emulator.devices import collective_data, collective_fit
from predictor.emulator.devices.collectives import LINKS, PARAMS_FILE, CommParams, save_params

HELD_OUT = ("Vidur A100 pairwise NVLink",)
DATA = ("vidur/network/{a100_dgx,a100_pairwise_nvlink}/all_reduce.csv (microsoft/vidur@7d475133), "
        "deepbench/deepbench_allreduce.csv (baidu-research/DeepBench@da81ba78)")
TARGET = 0.15
MID_MAX = 2 ** 26  # 64 MiB, the DGX set's largest message; DDP's 25 MB buckets lie within 1 MB..64 MiB


def held_out_split(rows: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    held = rows["setup"].isin(HELD_OUT)
    return rows[~held], rows[held]


def placement_table(scored: pd.DataFrame) -> pd.DataFrame:
    """Median errors per set and placement (N GPUs, K per node)."""
    out = []
    for (setup, n, k), g in scored.groupby(["setup", "gpus", "per_node"], sort=False):
        big = g[g["nbytes"] >= 1e6]
        mid = big[big["nbytes"] <= MID_MAX]
        out.append({"set": setup, "placement": f"{n} = {n // k} × {k}", "link": g["intra"].iloc[0] or "-",
                    "n": len(g), "median_large": big["abs_error"].median(), "median_mid": mid["abs_error"].median(),
                    "median_all": g["abs_error"].median(), "signed_large": big["error"].median(),
                    "sample": g["sample"].iloc[0]})
    return pd.DataFrame(out)


def _pct(v: float) -> str:
    return "–" if not np.isfinite(v) else f"{v:.1%}"


def params_lines(params: CommParams) -> list[str]:
    p, n = params.protocols, params.network
    lines = ["| parameter | value |", "|---|---:|",
             f"| LL protocol: fixed cost per call | {p['ll'].call_s * 1e6:.1f} µs |",
             f"| LL protocol: share of the link bandwidth | {p['ll'].share:.3f} |",
             f"| Simple protocol: fixed cost per call | {p['simple'].call_s * 1e6:.1f} µs |"]
    for k in LINKS:
        if k in params.provenance.get("fitted_links", LINKS):
            lines.append(f"| {k}: α per ring step, efficiency (× spec bandwidth) | "
                         f"{params.links[k].alpha_s * 1e6:.3f} µs, {params.links[k].efficiency:.3f} |")
    lines.append(f"| network: α per ring step, bandwidth per stream, streams per node | {n.alpha_s * 1e6:.2f} µs, "
                 f"{n.stream_bps / 1e9:.2f} GB/s, {n.streams} |")
    return lines


def markdown(main: pd.DataFrame, variants: dict[str, pd.DataFrame], params: CommParams) -> str:
    lines = [f"# All-reduce model against real collectives ({date.today().isoformat()})", "",
             f"Fitted on: {params.provenance['fitted_on']} ({params.provenance['rows']:,} rows). "
             f"Held out: {', '.join(HELD_OUT)}. Target: median |error| ≤ {TARGET:.0%} for messages ≥ 1 MB.", "",
             "| set | placement (N = nodes × K) | link within a node | rows | median abs. error ≥ 1 MB | "
             "1 MB–64 MiB | all sizes | median signed ≥ 1 MB | sample |", "|---|---|---|---:|---:|---:|---:|---:|---|"]
    for r in placement_table(main).itertuples():
        lines.append(f"| {r.set} | {r.placement} | {r.link} | {r.n:,} | {_pct(r.median_large)} | "
                     f"{_pct(r.median_mid)} | {_pct(r.median_all)} | {r.signed_large:+.1%} | {r.sample} |")
    lines += ["", "Per set:", "", "| set | rows | median abs. error ≥ 1 MB | all sizes | median signed ≥ 1 MB | "
              "within ±15 % (≥ 1 MB) | sample |", "|---|---:|---:|---:|---:|---:|---|"]
    for name, scored in {"model": main, **variants}.items():
        table = collective_fit.summary(scored)
        for r in table.itertuples():
            sample = scored.loc[scored["setup"] == r.set, "sample"].iloc[0]
            if name != "model" and sample != "out of sample":
                continue
            label = r.set if name == "model" else f"{r.set} — {name}"
            lines.append(f"| {label} | {r.n:,} | {_pct(r.median_large)} | {_pct(r.median_all)} | "
                         f"{r.signed_large:+.1%} | {r.within_15:.0%} | {sample} |")
    lines += ["", "Fitted parameters (held-out fit):", "", *params_lines(params), ""]
    return "\n".join(lines)


def plot(scored: pd.DataFrame, path: Path) -> None:
    """Measured (points) and predicted (lines) time against message size, log–log, per set."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sets = list(dict.fromkeys(scored["setup"]))
    cols = min(4, len(sets))
    nrows = -(-len(sets) // cols)
    fig, axes = plt.subplots(nrows, cols, figsize=(3.6 * cols, 3.3 * nrows), squeeze=False)
    for ax in axes.flat[len(sets):]:
        ax.axis("off")
    for ax, name in zip(axes.flat, sets):
        g = scored[scored["setup"] == name].sort_values("nbytes")
        for i, ((n, k), d) in enumerate(g.groupby(["gpus", "per_node"])):
            colour = f"C{i}"
            ax.scatter(d["nbytes"], d["seconds"] * 1e3, s=4, alpha=0.35, color=colour)
            ax.plot(d["nbytes"], d["predicted_s"] * 1e3, color=colour, lw=1.2, label=f"{n // k}×{k}")
        ax.set(xscale="log", yscale="log", xlabel="bytes", ylabel="ms",
               title=f"{name} ({g['sample'].iloc[0]})")
        ax.title.set_fontsize(8)
        ax.legend(fontsize=6, title="nodes×GPUs", title_fontsize=6)
    fig.suptitle("all-reduce: measured (points) and the model (lines)", fontsize=9)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)


def score(rows: pd.DataFrame, fitted_on: pd.DataFrame, **options) -> tuple[pd.DataFrame, CommParams]:
    params = collective_fit.fit(fitted_on, **options)
    scored = collective_fit.errors(rows, params)
    scored["sample"] = np.where(scored["setup"].isin(fitted_on["setup"].unique()), "in sample", "out of sample")
    return scored, params


@click.command(help=__doc__.split("\n\n")[0])
@click.option("--calibration", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="The shared calibration data [default: $ETS_SHARED/calibration, else ../shared/calibration].")
@click.option("--report", type=click.Path(file_okay=False, path_type=Path), default=Path("reports/collectives"),
              show_default=True, help="Where report.md, rows.csv and allreduce.png go.")
@click.option("--write-params", is_flag=True,
              help="Then fit on every set and write predictor/emulator/devices/collectives.json.")
def main(calibration: Path | None, report: Path, write_params: bool) -> None:
    calibration = calibration or shared_dir() / "calibration"
    try:
        rows = collective_data.load_all(calibration)
    except collective_data.CollectiveError as exc:
        raise click.ClickException(str(exc)) from None
    fit_rows, _ = held_out_split(rows)
    main_scored, params = score(rows, fit_rows)
    variants = {"one protocol": score(rows, fit_rows, one_protocol=True)[0],
                "one PCIe class": score(rows, fit_rows.assign(intra=fit_rows["intra"].replace("pcie_host", "pcie")))[0]}
    report.mkdir(parents=True, exist_ok=True)
    text = markdown(main_scored, variants, params)
    (report / "report.md").write_text(text)
    main_scored.to_csv(report / "rows.csv", index=False)
    plot(main_scored, report / "allreduce.png")
    click.echo(text)
    click.echo(f"report in {report}")
    if write_params:
        shipped = collective_fit.fit(rows)
        shipped.provenance.update({"data": DATA, "made_by": "python -m experiments.validate_collectives --write-params",
                                   "label": "spec-derived"})
        click.echo("shipped fit (every set):\n" + "\n".join(params_lines(shipped)))
        click.echo(f"-> {save_params(shipped, PARAMS_FILE)}")


if __name__ == "__main__":
    main()

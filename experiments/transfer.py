"""Transfer: how many real traces does ETS need on a new GPU, with and without emulated pretraining?

Why: a user brings a handful of traces of their own GPU. This measures the error on real traces
the model never saw against N, the number of real traces it learned from, for an ETS pretrained
on emulated traces and fine-tuned on the N (``predictor.finetune``), and for an ETS trained on
the N alone, by the same small-data rule.

* **T4** (real ETS traces): per seed, ~30 % of the configs' families are held out
  (``split_by_family``); N traces are drawn (seeded, nested: the first N of one permutation) from
  the others; the score is the MRE over the held-out families. N = 0 is the pretrained model alone.
* **T4 → RTX 2080 Ti** (5 real traces): parents are the real-T4 model (the emulated-pretrained
  model fine-tuned on every real T4 trace: the shipped ``ets-T4-real.pt``) and the emulated-T4
  model; N of the five 2080 Ti traces are trained on, the other 5 − N scored (so the test set
  shrinks as N grows).

Each parent is adapted both ways ``predictor.finetune`` offers: calibrated (two factors fitted
to the iteration times; its default below 20 traces) and every weight fine-tuned (from 20).

    python -m experiments.transfer [--seeds 3] [--pretrained CKPT] [--ets-traces ../shared/ets_traces]
                                   [--out reports/transfer] [--quick]

The pretrained model defaults to ``experiments.sim_to_real``'s (ETS on emulated T4 nsys-regime
traces only; trained and cached there when missing). ``--quick``: one seed, N in {0, 1, 2}, two
epochs, 8 T4 files, the shipped ``ets-T4.pt`` as parent (the test suite's mode). Results are
appended to ``results.jsonl`` as they come, and a rerun skips what is there.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import click
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from experiments.results_log import ResultsLog  # noqa: E402
from predictor import methods  # noqa: E402
from predictor.dataset import split_by_family  # noqa: E402
from predictor.evaluate import evaluate  # noqa: E402
from predictor.finetune import fit_small  # noqa: E402

DEFAULT_TRACES = Path(os.environ.get("ETS_TRACES_DIR", "../shared/ets_traces"))
COUNTS = (0, 1, 2, 5, 10, 20, "all")
QUICK_COUNTS = (0, 1, 2)
TEST_FRACTION = 0.3
TUNES = {"scale": "calibrated (2 factors)", "all": "fine-tuned (all weights)"}
SCRATCH = "from scratch"


def mre(model, traces: pd.DataFrame) -> float:
    """Iteration MRE of ``model`` on ``traces`` (relabelled to the model's device)."""
    return float(evaluate(model, traces.assign(device=model.device)).headline()["mre"])


RESULT_KEY = ("experiment", "seed", "n", "method")


def _run(results: ResultsLog, key: dict, fit, test: pd.DataFrame) -> None:
    if results.key(key) in results.done:
        return
    started = time.perf_counter()
    model = fit()
    fit_s = time.perf_counter() - started
    results.add({**key, "mre": mre(model, test), "test_traces": int(test["config_id"].nunique()),
                 "fit_s": round(fit_s, 2), "epochs": len(model.history) if key["n"] else 0})


def counts_for(pool: int, counts) -> list[int]:
    """The N of ``counts`` that the pool allows ("all" = the pool), without repeats."""
    out = []
    for n in counts:
        n = pool if n == "all" else int(n)
        if n <= pool and n not in out:
            out.append(n)
    return out


def _curves(results: ResultsLog, base: dict, parents: dict, subset: pd.DataFrame, test: pd.DataFrame, seed: int,
            fit_options: dict) -> None:
    """Every parent fine-tuned both ways (N = 0: the parent alone), and from scratch, on ``subset``."""
    for parent_name, parent in parents.items():
        for tune, label in TUNES.items():
            key = {**base, "method": f"{parent_name}, {label}"}
            if base["n"] == 0:
                _run(results, key, lambda p=parent: p, test)
            else:
                _run(results, key, lambda p=parent, t=tune: fit_small(subset, p, seed=seed, progress=False, tune=t,
                                                                      **fit_options), test)
    if base["n"]:
        _run(results, {**base, "method": SCRATCH},
             lambda: fit_small(subset, None, seed=seed, progress=False, **fit_options), test)


def t4_curve(results: ResultsLog, real: pd.DataFrame, parent, seeds: int, counts, fit_options: dict) -> None:
    for seed in range(seeds):
        split = split_by_family(real, test_fraction=TEST_FRACTION, val_fraction=0.0, seed=seed)
        test = split.part(real, "test")
        pool = list(np.random.default_rng(seed).permutation(sorted(split.train)))
        for n in counts_for(len(pool), counts):
            base = {"experiment": "T4", "seed": seed, "n": n, "test_families": ",".join(split.test_units)}
            _curves(results, base, {"emulated T4": parent}, real[real["config_id"].isin(set(pool[:n]))], test,
                    seed, fit_options)


def rtx_curve(results: ResultsLog, real: pd.DataFrame, parents: dict, seeds: int, counts,
              fit_options: dict) -> None:
    ids = sorted(real["config_id"].unique())
    for seed in range(seeds):
        order = list(np.random.default_rng(seed).permutation(ids))
        for n in counts_for(len(ids) - 1, counts):  # at least one trace left to score
            base = {"experiment": "T4 -> 2080Ti", "seed": seed, "n": n, "test_families": ""}
            _curves(results, base, parents, real[real["config_id"].isin(set(order[:n]))],
                    real[real["config_id"].isin(set(order[n:]))], seed, fit_options)


def _pct(v: float) -> str:
    return "> 1000%" if v > 10 else f"{v:.1%}"


def table(rows: pd.DataFrame) -> pd.DataFrame:
    """Mean ± sd of the MRE over seeds, per experiment, N and method; the pool's every trace is
    one row, ``all`` (its size differs by seed), with the mean N."""
    rows = rows.copy()
    biggest = rows.groupby(["experiment", "seed"])["n"].transform("max")
    named = {n for n in COUNTS if n != "all"}
    rows["count"] = [("all" if n == m and n not in named else str(n)) for n, m in zip(rows["n"], biggest)]
    g = rows.groupby(["experiment", "count", "method"])
    out = pd.DataFrame({"n": g["n"].mean(), "mean": g["mre"].mean(), "sd": g["mre"].std(ddof=1).fillna(0.0),
                        "seeds": g.size()}).reset_index().sort_values(["experiment", "n"], kind="stable")
    out["cell"] = [f"{_pct(m)} ± {_pct(s)}" for m, s in zip(out["mean"], out["sd"])]
    return out


PLOT_CAP = 1.5  # MRE above 150 % is drawn at the cap (from-scratch fits on 1-2 traces reach 1e11 %)


def plot(summary: pd.DataFrame, out: Path) -> None:
    experiments = list(dict.fromkeys(summary["experiment"]))
    fig, axes = plt.subplots(1, len(experiments), figsize=(5.2 * len(experiments), 3.8), squeeze=False)
    for ax, name in zip(axes[0], experiments):
        part = summary[summary["experiment"] == name]
        clipped = False
        for method, g in part.groupby("method", sort=False):
            g = g.sort_values("n")
            mean = g["mean"].to_numpy()
            over = mean > PLOT_CAP
            clipped |= bool(over.any())
            sd = np.where(over, 0.0, np.minimum(g["sd"].to_numpy(), PLOT_CAP - mean))
            ax.errorbar(g["n"].to_numpy(float), np.minimum(mean, PLOT_CAP) * 100, yerr=sd * 100, marker="o",
                        capsize=3, label=method)
        title = "real T4, held-out families" if name == "T4" else "real RTX 2080 Ti, the other traces"
        ax.set(xscale="symlog", xlabel="real training traces N", ylabel="MRE on unseen real traces (%)",
               title=title + (f" (clipped at {PLOT_CAP:.0%})" if clipped else ""), ylim=(0, PLOT_CAP * 105))
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    for ext in ("png", "pdf"):
        fig.savefig(out / f"transfer.{ext}", dpi=130)
    plt.close(fig)


def report(rows: pd.DataFrame, out: Path, note: str) -> pd.DataFrame:
    summary = table(rows)
    lines = ["# Transfer: real-trace MRE against the number of real training traces", "", note, ""]
    for name, part in summary.groupby("experiment", sort=False):
        wide = part.pivot(index="count", columns="method", values="cell").fillna("–")
        order = part.groupby("count")["n"].mean().sort_values()
        wide = wide.loc[order.index]
        lines += [f"## {name}", "", "| N | " + " | ".join(wide.columns) + " |",
                  "|---:|" + "---:|" * len(wide.columns)]
        lines += [f"| {c if c != 'all' else f'all ({order[c]:.0f})'} | " + " | ".join(r) + " |"
                  for c, r in zip(wide.index, wide.to_numpy())]
        lines.append("")
    lines.append("![transfer](transfer.png)")
    (out / "report.md").write_text("\n".join(lines) + "\n")
    summary.to_csv(out / "summary.csv", index=False)
    plot(summary, out)
    return summary


@click.command()
@click.option("--seeds", type=click.IntRange(1), default=3, show_default=True)
@click.option("--pretrained", type=click.Path(dir_okay=False, path_type=Path),
              help="ETS checkpoint trained on emulated T4 traces [default: experiments.sim_to_real's, "
                   "trained and cached when missing].")
@click.option("--ets-traces", type=click.Path(file_okay=False, path_type=Path), default=DEFAULT_TRACES,
              show_default=True, help="Holds T4/ and 2080Ti/ (also ETS_TRACES_DIR).")
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), default=Path("reports/transfer"),
              show_default=True)
@click.option("--minutes", type=float, default=2.0, show_default=True, help="Time limit of each fit.")
@click.option("--quick", is_flag=True, help="One seed, N in {0, 1, 2}, 2 epochs, 8 T4 files, the shipped ets-T4.pt.")
def main(seeds: int, pretrained: Path | None, ets_traces: Path, out: Path, minutes: float, quick: bool) -> None:
    from experiments.sim_to_real import emulated_model, real_traces
    from predictor.checkpoints import pretrained as shipped

    out.mkdir(parents=True, exist_ok=True)
    _, t4, _, _ = real_traces(ets_traces, "T4", progress=not quick, files=8 if quick else None)
    _, rtx, _, _ = real_traces(ets_traces, "2080Ti", progress=not quick)
    if pretrained is not None:
        parent, parent_path = methods.load(pretrained), pretrained
    elif quick:
        parent, parent_path = shipped("T4"), Path("predictor/checkpoints/ets-T4.pt")
    else:
        parent, parent_path = emulated_model(15.0, Path("reports/pretrain/sequences"), Path("reports/sim_to_real"),
                                             160, 0)
    seeds, counts = (1, QUICK_COUNTS) if quick else (seeds, COUNTS)
    fit_options = {"minutes": minutes, "epochs": 2 if quick else None, "parent_path": str(parent_path)}
    results = ResultsLog(out / "results.jsonl", RESULT_KEY)
    t4_curve(results, t4, parent, seeds, counts, fit_options)
    real_t4 = fit_small(t4, parent, seed=0, progress=False, **fit_options)  # every real T4 trace, default rule
    real_t4.save(out / "ets-T4-real.pt")
    rtx_curve(results, rtx, {"real T4": real_t4, "emulated T4": parent}, seeds, counts, fit_options)
    rows = pd.DataFrame(results.rows)
    note = (f"Parent: {parent_path} ({parent.device}; no real trace). Real: {t4['config_id'].nunique()} T4 and "
            f"{rtx['config_id'].nunique()} RTX 2080 Ti iterations imported onto the zoo's captures. {seeds} seed(s); "
            "mean ± sd over seeds. Every score is on real traces the model did not train on; the real-T4 parent "
            "of the 2080 Ti curve was fine-tuned on every T4 trace (written to ets-T4-real.pt here).")
    summary = report(rows, out, note)
    click.echo((out / "report.md").read_text())
    click.echo(f"{len(summary)} cells; report: {out / 'report.md'}")


if __name__ == "__main__":
    main()

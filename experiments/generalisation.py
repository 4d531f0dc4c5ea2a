"""Generalisation: every method on families it never saw, over several family splits, one budget.

Why one protocol: an accuracy claim is only worth its split. Every set here is scored the same
way — ``--splits`` family splits (``predictor.dataset.split_by_family``, seeds 0, 1, ...), every
variant trained with the same wall-time budget on the same training and validation configs,
scored on the held-out families — and reported as mean ± sd over the splits, per family of the
held-out ones, and against the best baseline. Every method runs with and without
physics-anchored targets (``predictor.features``: "anchored"; the ``-log`` variants keep log
targets): the ablation of the anchor on the same data and budget.

    python -m experiments.generalisation [--set cpu] [--set t4-real] [--set emulated:T4=DIR] ...
                                         [--splits 3 | --folds 5] [--by-group] [--minutes 3]
                                         [--variants ets,ets-log,...] [--out reports/generalisation] [--quick]

Split schemes: ``--splits N`` random family splits (seeds 0..N-1, a quarter of the configs held
out each); ``--folds K``: K folds whose held-out families partition the set, so every family is
scored exactly once, out of sample (``predictor.dataset.family_folds``); ``--by-group``: also
every family group held out at once (``predictor.dataset.group_split``: no CNN seen when
scoring CNNs), the hard split. With folds, the out-of-fold predictions also give every method's
90 % prediction intervals, calibrated per family group (Mondrian) and pooled, each trace's from
the other families only: coverage and median width per group in the report.

Sets (each a dataset of one device):
* ``cpu[=DIR]``: the real CPU benchmark — by default the committed reference profiles of the
  wide zoo (``experiments/data/cpu_benchmark_v2``, README there), or ``DIR``, e.g. ``OUT/data`` of
  ``python -m experiments.cpu_benchmark`` on your own CPU, with the peaks recorded at profiling
  time — **real**; ``cpu-v1``: the first reference set (21 families, another CPU) — **real**;
* ``t4-real``: the ETS authors' real T4 iterations (``$ETS_TRACES_DIR`` or ``../shared/ets_traces``)
  aligned onto the zoo's captures (our FLOP and byte counts) — **real**;
* ``emulated:<GPU>=DIR``: an emulated dataset (e.g. ``reports/pretrain/data`` of
  ``python -m experiments.pretrain``) — **emulated**.

Habitat-style is not a variant: it predicts one device from another's traces, and every set
here holds one device. ``--quick`` (the test suite's mode): a few tiny zoo configs emulated on
a T4, three splits, seconds of training. Results go to ``OUT/results.jsonl`` as they come (a rerun
skips what is there; a set whose data changed since is run again: its fingerprint is part of the
key), then ``OUT/report.md`` and ``OUT/generalisation.png``.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path

import click
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from tqdm import tqdm  # noqa: E402

from experiments.cpu_benchmark import FIRST_REFERENCE_DATA, REFERENCE_DATA  # noqa: E402
from experiments.pretrain import ETS_SETTINGS  # noqa: E402  (the shipped checkpoints' settings)
from experiments.results_log import ResultsLog  # noqa: E402
from experiments.shared_data import shared_dir  # noqa: E402
from predictor import methods  # noqa: E402
from predictor.common.families import GROUPS, group_of, is_reserved  # noqa: E402
from predictor.common.op_trace import read_dataset  # noqa: E402
from predictor.dataset import family_folds, group_split, split_by_family  # noqa: E402
from predictor.evaluate import evaluate  # noqa: E402
from predictor.intervals import calibrate, interval_metrics  # noqa: E402
from predictor.methods.training import fingerprint  # noqa: E402


@dataclass(frozen=True)
class Variant:
    """A method with the options that make it this variant (besides the shared budget)."""

    name: str
    method: str
    options: dict

    @property
    def baseline(self) -> bool:
        return methods.info(self.method).baseline


VARIANTS = {v.name: v for v in (
    Variant("ets", "ets", {**ETS_SETTINGS, "target_transform": "anchored"}),
    Variant("ets-log", "ets", {**ETS_SETTINGS, "target_transform": "log"}),
    Variant("opbased", "opbased", {"target_transform": "anchored"}),
    Variant("opbased-log", "opbased", {"target_transform": "log"}),
    Variant("dnnperf", "dnnperf", {"target_transform": "anchored"}),
    Variant("dnnperf-log", "dnnperf", {"target_transform": "log"}),
)}
QUICK_OPTIONS = {"ets": {"hidden": 16, "layers": 2, "max_epochs": 2}, "opbased": {"hidden": 32, "max_epochs": 2},
                 "dnnperf": {"hidden": 16, "layers": 1, "max_epochs": 2}}
KINDS = {"cpu": "real", "cpu-v1": "real", "t4-real": "real"}  # anything else: emulated


@dataclass
class Dataset:
    name: str
    kind: str  # real | emulated
    traces: pd.DataFrame
    data_dir: Path | None  # where its recorded peaks are (CPU sets)


def load_set(spec: str) -> Dataset:
    """``NAME[=DIR]`` as a dataset; a missing one is named with the command that builds it."""
    name, _, where = spec.partition("=")
    if name == "t4-real":
        from experiments.sim_to_real import real_traces

        traces = Path(os.environ.get("ETS_TRACES_DIR") or shared_dir() / "ets_traces")
        return Dataset(name, "real", real_traces(traces, "T4", progress=False)[1], None)
    if name in ("cpu", "cpu-v1"):
        directory = Path(where) if where else REFERENCE_DATA if name == "cpu" else FIRST_REFERENCE_DATA
        hint = "python -m experiments.cpu_benchmark"
    elif name.startswith("emulated:") and where:
        directory, hint = Path(where), "python -m experiments.pretrain"
    else:
        raise click.BadParameter(f"{spec!r}: expected cpu[=DIR], cpu-v1, t4-real or emulated:<GPU>=DIR",
                                 param_hint="--set")
    if not directory.is_dir():
        raise click.BadParameter(f"{spec!r}: {directory} is not a dataset (build it with `{hint}`)",
                                 param_hint="--set")
    traces = read_dataset(directory)
    device = "cpu" if name in ("cpu", "cpu-v1") else name
    rows = traces[traces["device"] == device]
    reserved = sorted({f for f in rows["family"].unique() if is_reserved(f)})
    if reserved:  # kept for an outside check: never evaluated on here
        click.echo(f"{spec}: left out the reserved famil{'ies' if len(reserved) > 1 else 'y'} {', '.join(reserved)}",
                   err=True)
        rows = rows[~rows["family"].isin(reserved)]
    if rows.empty:
        raise click.BadParameter(f"{spec!r}: {directory} holds no {device!r} traces "
                                 f"(devices: {', '.join(sorted(traces['device'].unique()))})", param_hint="--set")
    return Dataset(name, KINDS.get(name, "emulated"), rows, directory)


def noise_of(data: Dataset) -> dict:
    """The set's repeat-profile noise floor (``repeatability.json`` beside a CPU set), or {}."""
    path = data.data_dir / "repeatability.json" if data.data_dir is not None else None
    return json.loads(path.read_text()) if path is not None and path.exists() else {}


def quick_set() -> Dataset:
    """Tiny zoo configs of six families emulated on a T4 (seconds to capture)."""
    from predictor.emulator.capture.opseq import capture
    from predictor.emulator.devices.specs import load_params
    from predictor.emulator.devices.timing import emulate
    from predictor.emulator.zoo.config import ModelConfig

    params = load_params()
    tiny = [("alexnet", "alexnet", 64), ("resnet", "resnet18", 32), ("squeezenet", "squeezenet1_1", 32),
            ("vgg", "vgg11", 32), ("mobilenet_v2", "mobilenet_v2", 32), ("shufflenet", "shufflenet_v2_x0_5", 32)]
    parts = [emulate(capture(ModelConfig(kind="vision", family=f, model=m, batch=b, input_size=s, num_classes=10),
                             "meta"), "emulated:T4", params, seed=1)
             for f, m, s in tiny for b in (2, 4)]
    return Dataset("quick:emulated:T4", "emulated", pd.concat(parts, ignore_index=True), None)


RESULT_KEY = ("set", "data", "split", "variant", "minutes")


def run_one(data: Dataset, split, variant: Variant, minutes: float, quick: bool) -> dict:
    """Train ``variant`` on the split's training families, score the held-out ones."""
    options = {**variant.options, "max_minutes": minutes, "seed": 0,
               **(QUICK_OPTIONS[variant.method] if quick else {})}
    config = methods.make_config(variant.method, **options)
    device = str(data.traces["device"].iloc[0])
    started = time.perf_counter()
    model = methods.train(variant.method, split.part(data.traces, "train"), split.part(data.traces, "val"), config,
                          device=device, data_dir=data.data_dir, split=split.to_dict(), progress=False)
    fit_s = time.perf_counter() - started
    per_trace = evaluate(model, split.part(data.traces, "test")).per_trace
    err = per_trace["rel_err"]
    by_family = {f: {"traces": int(len(g)), "mre": float(g.abs().mean()), "signed": float(g.mean())}
                 for f, g in err.groupby(per_trace["family"])}
    predictions = per_trace[["config_id", "family", "pred_us", "true_us"]].values.tolist()
    return {"mre": float(err.abs().mean()), "signed": float(err.mean()), "traces": int(len(per_trace)),
            "by_family": by_family, "fit_s": round(fit_s, 1), "epochs": len(model.history),
            "predictions": predictions}


def splits_of(data: Dataset, splits: int, folds: int, by_group: bool) -> list[tuple[object, object]]:
    """(name, split) of every split of the chosen schemes: seeds, ``fold:i/K``, ``group:<name>``."""
    if folds:
        chosen = [(f"fold:{i}/{folds}", s) for i, s in enumerate(family_folds(data.traces, folds))]
    else:
        chosen = [(seed, split_by_family(data.traces, seed=seed)) for seed in range(splits)]
    if by_group:
        groups = {f: group_of(f) for f in data.traces["family"].unique()}
        chosen += [(f"group:{g}", group_split(data.traces, g, groups)) for g in GROUPS if g in groups.values()]
    return chosen


def run(sets: list[Dataset], variants: list[Variant], splits: int, minutes: float, results: ResultsLog,
        quick: bool = False, folds: int = 0, by_group: bool = False) -> list[dict]:
    """Every (set, split, variant) not yet in ``results``; returns this run's rows (old and new)."""
    jobs = [(d, name, split, v) for d in sets for name, split in splits_of(d, splits, folds, by_group)
            for v in variants]
    fingerprints = {d.name: fingerprint(d.traces) for d in sets}
    keys = []
    bar = tqdm(jobs, desc="generalisation", unit="run", disable=quick)
    for data, seed, split, variant in bar:
        key = {"set": data.name, "kind": data.kind, "data": fingerprints[data.name], "split": seed,
               "variant": variant.name, "method": variant.method, "minutes": minutes}
        keys.append(results.key(key))
        if keys[-1] in results.done:
            continue
        bar.set_postfix_str(f"{data.name} split {seed} {variant.name}")
        results.add({**key, "test_units": list(split.test_units), **run_one(data, split, variant, minutes, quick)})
    wanted = set(keys)
    return [r for r in results.rows if results.key(r) in wanted]


def scheme_of(split) -> str:
    """The split scheme of a result row's split name: random, folds or groups."""
    text = str(split)
    return "groups" if text.startswith("group:") else "folds" if text.startswith("fold:") else "random"


def summary(rows: pd.DataFrame) -> pd.DataFrame:
    """Per set and variant: MRE mean and sd over splits, and the ratio to the best baseline
    (the split schemes apart: random or fold splits; the leave-one-group-out rows are reported
    per group by :func:`per_group`)."""
    rows = rows[rows["split"].map(scheme_of) != "groups"]
    table = rows.groupby(["set", "kind", "variant"], sort=False).agg(
        splits=("mre", "size"), mre=("mre", "mean"), sd=("mre", "std"), signed=("signed", "mean"),
        fit_s=("fit_s", "mean")).reset_index()
    table["sd"] = table["sd"].fillna(0.0)
    order = {name: i for i, name in enumerate(VARIANTS)}
    table = table.sort_values("variant", key=lambda v: v.map(order).fillna(len(order)), kind="stable")
    table = table.sort_values("set", key=lambda s: s.map({n: i for i, n in enumerate(dict.fromkeys(rows["set"]))}),
                              kind="stable").reset_index(drop=True)
    baseline = rows["method"].map(lambda m: methods.info(m).baseline).astype(bool)
    base = rows[baseline].groupby(["set", "variant"]).mre.mean().groupby(level=0).min()
    table["vs_best_baseline"] = table["mre"] / table["set"].map(base)
    return table


def per_family(rows: pd.DataFrame) -> pd.DataFrame:
    """Per set, held-out family and variant: MRE over the splits that held the family out."""
    records = [{"set": r["set"], "variant": r["variant"], "family": f, "mre": v["mre"]}
               for r in rows.to_dict("records") for f, v in r["by_family"].items()]
    table = pd.DataFrame(records).groupby(["set", "family", "variant"]).mre.mean().unstack("variant")
    return table


def _predictions(rows: pd.DataFrame) -> pd.DataFrame:
    """The out-of-split predictions of ``rows`` as one table (config_id, family, pred_us, true_us, group)."""
    frames = [pd.DataFrame(r, columns=["config_id", "family", "pred_us", "true_us"])
              for r in rows.get("predictions", pd.Series(dtype=object)) if isinstance(r, list) and r]
    table = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(
        columns=["config_id", "family", "pred_us", "true_us"])
    return table.assign(group=table["family"].map(group_of))


def per_group(rows: pd.DataFrame, scheme: str) -> pd.DataFrame:
    """MRE per family group and variant: over the fold splits' held-out traces of the group
    (``folds``), or on the split that held the whole group out (``groups``)."""
    chosen = rows[rows["split"].map(scheme_of) == scheme]
    records = []
    for (name, variant), part in chosen.groupby(["set", "variant"], sort=False):
        if scheme == "groups":
            part = part.assign(group=part["split"].str.removeprefix("group:"))
            records += [{"set": name, "variant": variant, "group": g, "mre": float(r["mre"]),
                         "traces": int(r["traces"]), "families": len(r["by_family"])}
                        for g, r in part.set_index("group").iterrows()]
            continue
        predictions = _predictions(part)
        if predictions.empty:
            continue
        err = (predictions["pred_us"] / predictions["true_us"] - 1).abs()
        for g, e in err.groupby(predictions["group"]):
            records.append({"set": name, "variant": variant, "group": g, "mre": float(e.mean()), "traces": len(e),
                            "families": predictions.loc[e.index, "family"].nunique()})
    return pd.DataFrame(records)


def interval_table(rows: pd.DataFrame, level: float = 0.9) -> pd.DataFrame:
    """Coverage and median relative width of ``level`` intervals per group and variant, from the
    fold splits' out-of-fold predictions: Mondrian (calibrated within the trace's group) and pooled,
    each trace's quantiles from the other families only."""
    chosen = rows[rows["split"].map(scheme_of) == "folds"]
    records = []
    for (name, variant), part in chosen.groupby(["set", "variant"], sort=False):
        predictions = _predictions(part)
        if predictions["family"].nunique() < 2:
            continue
        for mode, by_group in (("mondrian", True), ("pooled", False)):
            calibration = calibrate(predictions, f"{name} {variant} folds", by_group=by_group)
            for g, sub in [("all", predictions), *predictions.groupby("group")]:
                m = interval_metrics(sub, calibration, level)
                records.append({"set": name, "variant": variant, "mode": mode, "group": g, "traces": len(sub),
                                "coverage": m["interval_coverage"], "width": m["interval_width"]})
    return pd.DataFrame(records)


def _percent(value) -> str:
    return "-" if value is None or (isinstance(value, float) and np.isnan(value)) else f"{value:.1%}"


def group_sections(rows: pd.DataFrame, noise: dict[str, dict]) -> list[str]:
    """The report's per-group sections: fold MRE and leave-one-group-out MRE beside each group's
    noise floor, and the 90 % intervals per group."""
    lines: list[str] = []
    for scheme, title in (("folds", "Per family group, K-fold by family (every family held out once)"),
                          ("groups", "Leave one group out (every family of the group held out at once)")):
        table = per_group(rows, scheme)
        if table.empty:
            continue
        wide = table.pivot_table(index=["set", "group"], columns="variant", values="mre", sort=False)
        counts = table.groupby(["set", "group"], sort=False)[["families", "traces"]].first()
        lines += ["", f"{title}: held-out MRE, with the group's noise floor (median difference of two "
                  "profiles of one config; - where the set has no repeat profiles):", "",
                  "| set | group | families | traces | noise floor | " + " | ".join(wide.columns) + " |",
                  "|---|---|---:|---:|---:|" + "---:|" * len(wide.columns)]
        for (name, group), values in wide.iterrows():
            floor = noise.get(name, {}).get("by_group", {}).get(group, {}).get("median")
            n = counts.loc[(name, group)]
            lines.append(f"| {name} | {group} | {n['families']} | {n['traces']} | {_percent(floor)} | "
                         + " | ".join(_percent(v) for v in values) + " |")
    intervals = interval_table(rows)
    if not intervals.empty:
        lines += ["", "90 % prediction intervals from the fold splits' out-of-fold predictions (each trace's "
                  "from the other families only): coverage / median relative width, Mondrian (calibrated "
                  "within the group) and pooled:", "",
                  "| set | variant | group | traces | Mondrian | pooled |", "|---|---|---|---:|---:|---:|"]
        for (name, variant, group), part in intervals.groupby(["set", "variant", "group"], sort=False):
            cells = {r["mode"]: f"{_percent(r['coverage'])} / {_percent(r['width'])}" for _, r in part.iterrows()}
            lines.append(f"| {name} | {variant} | {group} | {part['traces'].iloc[0]} | {cells.get('mondrian', '-')} "
                         f"| {cells.get('pooled', '-')} |")
    return lines


def report(rows: pd.DataFrame, out: Path, noise: dict[str, dict] | None = None) -> str:
    table = summary(rows)
    lines = ["# Generalisation: held-out families, mean ± sd over family splits", "",
             "Every variant had the same training budget on the same split; every score is on families the "
             "model never saw. Kind: **real** (measured on hardware) or **emulated** (GPU model fitted to real "
             "kernels). Variants without a suffix use physics-anchored targets; `-log` is the same method with "
             "log targets (the anchor's ablation).", "",
             "| set | kind | variant | splits | MRE (mean ± sd) | signed | vs best baseline | fit s |",
             "|---|---|---|---:|---:|---:|---:|---:|"]
    for r in table.itertuples():
        lines.append(f"| {r.set} | {r.kind} | {r.variant} | {r.splits} | {r.mre:.1%} ± {r.sd:.1%} | "
                     f"{r.signed:+.1%} | {r.vs_best_baseline:.2f} | {r.fit_s:.0f} |")
    families = per_family(rows)
    lines += ["", "Per held-out family (MRE, mean over the splits that held it out):", "",
              "| set | family | " + " | ".join(families.columns) + " |",
              "|---|---|" + "---:|" * len(families.columns)]
    for (name, family), values in families.iterrows():
        lines.append(f"| {name} | {family} | " + " | ".join("-" if np.isnan(v) else f"{v:.1%}" for v in values) + " |")
    lines += group_sections(rows, noise or {})
    plot(table, out / "generalisation.png")
    return "\n".join(lines) + "\n"


def plot(table: pd.DataFrame, path: Path) -> None:
    sets = list(dict.fromkeys(table["set"]))
    variants = list(dict.fromkeys(table["variant"]))
    fig, ax = plt.subplots(figsize=(1.5 + 1.2 * len(sets) * len(variants) / 3, 3.5))
    width = 0.8 / len(variants)
    for i, variant in enumerate(variants):
        rows = table[table["variant"] == variant].set_index("set").reindex(sets)
        ax.bar(np.arange(len(sets)) + i * width, 100 * rows["mre"], width, yerr=100 * rows["sd"], label=variant,
               capsize=2)
    kinds = table.groupby("set", sort=False)["kind"].first()
    ax.set_xticks(np.arange(len(sets)) + 0.4 - width / 2, [f"{s}\n({kinds[s]})" for s in sets])
    ax.set(ylabel="held-out-family MRE (%)", title="Generalisation to unseen families (mean ± sd over splits)")
    ax.legend(fontsize="small")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    fig.savefig(path.with_suffix(".pdf"))
    plt.close(fig)


@click.command()
@click.option("--set", "set_specs", multiple=True, default=("cpu", "t4-real"), show_default=True,
              help="A dataset: cpu[=DIR], cpu-v1, t4-real, emulated:<GPU>=DIR (repeatable).")
@click.option("--splits", type=click.IntRange(1), default=3, show_default=True, help="Family splits (seeds 0..N-1).")
@click.option("--folds", type=click.IntRange(0), default=0, show_default=True,
              help="Instead of --splits: K folds whose held-out families partition the set (0: off).")
@click.option("--by-group", is_flag=True, help="Also hold out each family group at once (leave one group out).")
@click.option("--minutes", type=click.FloatRange(0, min_open=True), default=3.0, show_default=True,
              help="Training budget of every variant.")
@click.option("--variants", default=",".join(VARIANTS), show_default=True, help="Comma-separated variants.")
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), default=Path("reports/generalisation"),
              show_default=True)
@click.option("--quick", is_flag=True, help="Tiny emulated set, seconds of training (the test suite's mode).")
def main(set_specs: tuple[str, ...], splits: int, folds: int, by_group: bool, minutes: float, variants: str, out: Path,
         quick: bool) -> None:
    chosen = [v.strip() for v in variants.split(",") if v.strip()]
    unknown = [v for v in chosen if v not in VARIANTS]
    if unknown or not chosen:
        raise click.BadParameter(f"unknown variant(s) {', '.join(unknown) or '(none)'}; known: {', '.join(VARIANTS)}",
                                 param_hint="--variants")
    sets = [quick_set()] if quick else [load_set(s) for s in set_specs]
    out.mkdir(parents=True, exist_ok=True)
    results = ResultsLog(out / "results.jsonl", RESULT_KEY)
    if folds == 1:
        raise click.BadParameter("folds need at least 2 (0: random --splits)", param_hint="--folds")
    rows = pd.DataFrame(run(sets, [VARIANTS[v] for v in chosen], splits, 0.05 if quick else minutes, results, quick,
                            folds, by_group))
    text = report(rows, out, {d.name: noise_of(d) for d in sets})
    (out / "report.md").write_text(text)
    click.echo(text)


if __name__ == "__main__":
    main()

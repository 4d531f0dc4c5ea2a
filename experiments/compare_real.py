"""ETS against its baselines on the real ETS T4 traces (the authors' CSVs), same split and metrics.

Why: the emulated comparison says how the methods rank on data we generate; this one says it on
measured GPU traces. ETS, the operator-based MLP and DNNPerf-style are trained on the T4 traces of
the training families and tested on the held-out families (family split, seed 0). Habitat-style
predicts a GPU from a trace measured on another one, so it is tested where the authors measured
the same config on both a 2080Ti and a T4: configs are paired by (model, batch, input size, dtype)
— the file names' run numbers differ between the two GPUs — and the T4 time is predicted from the
2080Ti trace. Its kernel-varying MLPs learn from emulated per-op measurements of the workload
workload set's configs on RTX2080Ti and T4 (Habitat's own per-op datasets are not public), validated
on a family-disjoint part of them.

    python -m experiments.compare_real [--ets-traces ../shared/ets_traces] [--minutes 3]
                                       [--out reports/real_t4]

The traces directory can also be set with ``ETS_TRACES_DIR``; it must hold ``T4/`` and ``2080Ti/``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import click
import pandas as pd

from predictor import methods
from predictor.dataset import split_by_family
from predictor.emulator.capture.importers import import_traces
from predictor.emulator.devices.specs import load_params
from predictor.evaluate import evaluate, markdown
from predictor.tables import emulated_traces
from traces.workloads import read_workloads

DEFAULT_TRACES = Path(os.environ.get("ETS_TRACES_DIR", "../shared/ets_traces"))
PAIR_KEY = ["model", "batch", "input_size", "dtype"]


def paired(source: pd.DataFrame, target: pd.DataFrame) -> pd.DataFrame:
    """The source traces of configs the target also measured, renamed to the target's config ids."""
    def keys(t: pd.DataFrame) -> pd.DataFrame:
        return t.groupby("config_id")[PAIR_KEY].first().reset_index()

    pairs = keys(source).merge(keys(target), on=PAIR_KEY, suffixes=("_src", "_dst"))
    rename = dict(zip(pairs["config_id_src"], pairs["config_id_dst"]))
    out = source[source["config_id"].isin(set(rename))].copy()
    out["config_id"] = out["config_id"].map(rename)
    return out


def habitat_training(minutes: float, source_gpu: str, target_gpu: str):
    """Habitat-style's MLP trained on emulated catalog traces of both GPUs (validation drawn by config)."""
    params = load_params()
    sequences = read_workloads()
    data = pd.concat(emulated_traces(sequences, [source_gpu, target_gpu], params).values(), ignore_index=True)
    split = split_by_family(data, test_fraction=0.0, val_fraction=0.2, seed=0)
    config = methods.make_config("habitat", source_device=source_gpu, max_minutes=minutes)
    model = methods.module("habitat").train(split.part(data, "train"), split.part(data, "val"), config,
                                            device=target_gpu, progress=False)
    return model


@click.command()
@click.option("--ets-traces", type=click.Path(file_okay=False, path_type=Path), default=DEFAULT_TRACES,
              show_default=True)
@click.option("--minutes", type=float, default=3.0, show_default=True, help="Training budget per method.")
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), default=Path("reports/real_t4"),
              show_default=True)
def main(ets_traces: Path, minutes: float, out: Path) -> None:
    for sub in ("T4", "2080Ti"):
        if not (ets_traces / sub).is_dir():
            raise click.ClickException(f"{ets_traces / sub}: not found (set --ets-traces or ETS_TRACES_DIR)")
    t4 = import_traces("ets-csv", ets_traces / "T4")
    rtx = import_traces("ets-csv", ets_traces / "2080Ti")
    split = split_by_family(t4, seed=0)
    rows = []
    from experiments.pretrain import SHIPPED_SETTINGS

    for method in methods.single_device_methods():  # Habitat-style is scored on the paired configs below
        options = {"max_minutes": minutes, "patience": 20}
        if method in SHIPPED_SETTINGS:
            options.update({**SHIPPED_SETTINGS[method], "batch_size": 64})  # 18 training traces: smaller batches
        model = methods.module(method).train(split.part(t4, "train"), split.part(t4, "val"),
                                             methods.make_config(method, **options), split=split.to_dict(),
                                             progress=False)
        result = evaluate(model, split.part(t4, "test"))
        rows.append({"method": method, "test set": "held-out families: " + ", ".join(split.test_units),
                     **result.headline(), "by_family": result.by_family().to_dict("records")})
        click.echo(json.dumps({k: v for k, v in rows[-1].items() if k != "by_family"}, default=float))
    source = paired(rtx, t4)
    model = habitat_training(minutes, "emulated:RTX2080Ti", "emulated:T4")
    model.config.source_device, model.device = str(rtx["device"].iloc[0]), str(t4["device"].iloc[0])
    pairs = pd.concat([source, t4[t4["config_id"].isin(set(source["config_id"]))]], ignore_index=True)
    result = evaluate(model, pairs)
    rows.append({"method": "habitat", "test set": f"2080Ti→T4 pairs: {', '.join(sorted(source['config_id'].unique()))}",
                 **result.headline(), "by_family": result.by_family().to_dict("records")})
    click.echo(json.dumps({k: v for k, v in rows[-1].items() if k != "by_family"}, default=float))
    out.mkdir(parents=True, exist_ok=True)
    table = pd.DataFrame([{k: v for k, v in r.items() if k != "by_family"} for r in rows])
    (out / "results.json").write_text(json.dumps({"split": split.to_dict(), "results": rows}, indent=1, default=float))
    (out / "report.md").write_text("## Real ETS T4 traces\n\n" + markdown(table) + "\n")
    click.echo(markdown(table))


if __name__ == "__main__":
    main()

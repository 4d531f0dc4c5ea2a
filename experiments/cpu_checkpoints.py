"""The shipped CPU checkpoints: ETS and the operator-based baseline trained on the whole real CPU set.

Why: anyone should be able to predict a CPU training iteration (``ets predict --ckpt
predictor/checkpoints/ets-cpu.pt``) with a model that saw every family we profiled, and read how
far to trust it. The model trains on every configuration of the set but a validation sample
(``--val-fraction`` of the configs, for early stopping); its prediction intervals cannot come from
its own training families, so they come from the protocol's out-of-fold predictions of the same
method (``python -m experiments.generalisation --set cpu=DIR --folds 5``: each family predicted by
a model that never saw it), calibrated per family group (Mondrian, :mod:`predictor.intervals`).
Reserved families (:mod:`predictor.common.families`) are never in the set; a set holding one is refused.

    python -m experiments.cpu_checkpoints --data experiments/data/cpu_benchmark_v2
                                          --protocol reports/generalisation_cpu/results.jsonl
                                          [--minutes 5] [--methods ets,opbased] [--out predictor/checkpoints]
"""

from __future__ import annotations

import json
from pathlib import Path

import click
import pandas as pd

from experiments.generalisation import VARIANTS, scheme_of
from predictor import methods
from predictor.checkpoints import CHECKPOINT_DIR
from predictor.common.families import is_reserved
from predictor.common.op_trace import read_dataset
from predictor.dataset import split_by_family
from predictor.intervals import calibrate


def out_of_fold(protocol: Path, method: str, fingerprint: str) -> pd.DataFrame:
    """The fold splits' held-out predictions of ``method``'s anchored variant on the set whose
    fingerprint is ``fingerprint`` (config_id, family, pred_us, true_us)."""
    rows = [json.loads(line) for line in protocol.read_text().splitlines() if line.strip()]
    chosen = [r for r in rows if r.get("variant") == method and r.get("data") == fingerprint
              and scheme_of(r.get("split")) == "folds" and r.get("predictions")]
    if not chosen:
        raise click.ClickException(f"{protocol}: no fold results of {method} on this set; run "
                                   "`python -m experiments.generalisation --set cpu=DIR --folds 5` first")
    return pd.concat([pd.DataFrame(r["predictions"], columns=["config_id", "family", "pred_us", "true_us"])
                      for r in chosen], ignore_index=True)


@click.command()
@click.option("--data", "data_dir", type=click.Path(file_okay=False, exists=True, path_type=Path), required=True)
@click.option("--protocol", type=click.Path(dir_okay=False, exists=True, path_type=Path), required=True,
              help="The generalisation results (JSON lines) whose fold splits calibrate the intervals.")
@click.option("--minutes", type=click.FloatRange(0, min_open=True), default=5.0, show_default=True)
@click.option("--methods", "chosen", default="ets,opbased", show_default=True)
@click.option("--val-fraction", type=click.FloatRange(0.05, 0.5), default=0.15, show_default=True)
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), default=CHECKPOINT_DIR, show_default=True)
def main(data_dir: Path, protocol: Path, minutes: float, chosen: str, val_fraction: float, out: Path) -> None:
    from predictor.methods.training import fingerprint

    traces = read_dataset(data_dir)
    traces = traces[traces["device"] == "cpu"]
    reserved = sorted({f for f in traces["family"].unique() if is_reserved(f)})
    if reserved:
        raise click.ClickException(f"{data_dir}: holds the reserved famil{'ies' if len(reserved) > 1 else 'y'} "
                                   f"{', '.join(reserved)}: never trained on (predictor/common/families.py)")
    split = split_by_family(traces, val_fraction=val_fraction, test_families=[])
    for method in [m.strip() for m in chosen.split(",") if m.strip()]:
        if method not in VARIANTS:
            raise click.BadParameter(f"unknown method {method!r}", param_hint="--methods")
        variant = VARIANTS[method]
        config = methods.make_config(variant.method, **variant.options, max_minutes=minutes, seed=0)
        model = methods.train(variant.method, split.part(traces, "train"), split.part(traces, "val"), config,
                              device="cpu", data_dir=data_dir, split=split.to_dict())
        model.intervals = calibrate(out_of_fold(protocol, method, fingerprint(traces)),
                                    f"out-of-fold predictions of {method} on {data_dir.name} (5 folds by family)")
        path = out / f"{variant.method}-cpu.pt"
        model.save(path)
        click.echo(f"{path}: {method} on {traces['config_id'].nunique():,} real CPU iterations of "
                   f"{traces['family'].nunique()} families; intervals: {model.intervals.describe()['groups']}")


if __name__ == "__main__":
    main()

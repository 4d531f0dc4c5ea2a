"""Training ETS on a handful of traces: fine-tuning a checkpoint, or from scratch, by one rule.

Why: a user who brings traces of their own GPU has a few, not hundreds. A checkpoint trained on
another device (an emulated GPU, another real one) already knows which ops cost what; fine-tuning
moves its weights to the new device's times without refitting the feature spec (the weights are
tied to it). Both ways of learning from few traces follow the same rule so that the transfer
experiment compares models, not protocols:

* validation by held-out traces when there are at least ``MIN_VAL_TRACES`` (``VAL_FRACTION`` of
  them, seeded, by trace: with one device's few traces a family split would leave nothing),
  early stopping as ``ets train``;
* below that, a fixed epoch count and the last weights (nothing to choose a best epoch by);
* small mini-batches (a trace gives ~100 windows: the default 256 would be one step an epoch).

What moves: below ``ALL_WEIGHTS_FROM`` traces no weight. The parent is *calibrated* instead
(``tune="scale"``): two factors, one on every op's predicted kernel time and one on its
overhead, fitted by least squares to the traces' relative iteration errors (ridge towards 1, so
one trace is enough), kept in the checkpoint. From ``ALL_WEIGHTS_FROM`` traces on, every weight
is fine-tuned by gradient descent at a quarter of the pretraining learning rate (``tune="all"``).
Why: on the real T4 traces (``experiments.transfer``, held-out families) gradient fine-tuning
on a few traces often made the parent worse — one trace can teach its family's own bias (a
RegNet at 768² runs far slower than emulated, and every convolution slowed down with it) — and
even a learned output bias moved the iteration the wrong way: the per-op loss is not the
iteration error. Two factors fitted to the iterations themselves can only move the device's
average. From scratch gets the default learning rate and more epochs.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import pandas as pd

from predictor.common.inputs import CheckpointError, InputError, SpecError
from predictor.methods import METHODS, ets, training

MIN_VAL_TRACES = 10
VAL_FRACTION = 0.2
SMALL_BATCH = 32


@dataclass(frozen=True)
class Schedule:
    lr: float
    fixed_epochs: int  # without validation traces
    max_epochs: int  # with them (early stopping)
    patience: int


FINETUNE = Schedule(lr=5e-4, fixed_epochs=25, max_epochs=60, patience=6)
SCRATCH = Schedule(lr=2e-3, fixed_epochs=60, max_epochs=200, patience=8)
TUNES = ("scale", "all")
ALL_WEIGHTS_FROM = 20
RIDGE = 0.1  # pull of the calibration factors towards 1 (the data's weight is ~1 per trace)
SCALE_RANGE = (0.1, 10.0)
MIN_COVERAGE = 0.5  # share of the data's time on ops the checkpoint knows by name


def default_tune(n_traces: int) -> str:
    return "all" if n_traces >= ALL_WEIGHTS_FROM else "scale"


def calibration(parent: ets.EtsPredictor, traces: pd.DataFrame) -> tuple[float, float]:
    """(kernel, overhead) factors a, b minimising Σ ((a·D + b·G) / T − 1)² + RIDGE·((a − 1)² + (b − 1)²)
    over the traces (D, G: the parent's predicted kernel time and overhead; T: the measured
    iteration), times the parent's own factors; clipped to ``SCALE_RANGE``."""
    summary = parent.iteration_times(traces.assign(device=parent.device))
    t = summary["true_us"].to_numpy(float)
    x = np.column_stack([summary["pred_duration_us"], summary["pred_gap_us"]]) / t[:, None]
    a, b = np.linalg.solve(x.T @ x + RIDGE * np.eye(2), x.T @ np.ones(len(t)) + RIDGE)
    lo, hi = SCALE_RANGE
    return (float(np.clip(a, lo, hi) * parent.scale[0]), float(np.clip(b, lo, hi) * parent.scale[1]))


def split_traces(config_ids: list[str], seed: int = 0) -> tuple[list[str], list[str]]:
    """(train, validation) config ids: ``VAL_FRACTION`` held out, at least one, when there are
    ``MIN_VAL_TRACES`` or more; else all train and none validates."""
    ids = sorted(set(config_ids))
    if len(ids) < MIN_VAL_TRACES:
        return ids, []
    rng = np.random.default_rng(seed)
    n_val = max(1, int(round(VAL_FRACTION * len(ids))))
    val = sorted(ids[i] for i in rng.choice(len(ids), n_val, replace=False))
    return sorted(set(ids) - set(val)), val


def vocabulary_coverage(parent: ets.EtsPredictor, traces: pd.DataFrame) -> float:
    """Share of the traces' time (kernel + gap) on ops the parent's feature spec knows by name
    (the rest share one "other" slot): a low share means features of another kind."""
    known = traces["op"].isin(set(parent.spec.ops))
    time = (traces["duration_us"] + traces["gap_us"]).to_numpy(float)
    return float(time[known.to_numpy()].sum() / max(time.sum(), 1e-12))



def check_compatible(parent, traces: pd.DataFrame, path: str = "") -> None:
    """CheckpointError unless ``parent`` is an ETS predictor whose feature spec describes ``traces``."""
    method = getattr(parent, "method", type(parent).__name__)
    if method not in METHODS or not METHODS[method].fine_tunable:
        tunable = ", ".join(spec.label for spec in METHODS.values() if spec.fine_tunable)
        raise CheckpointError(f"{path or 'checkpoint'}: a {method!r} checkpoint; fine-tuning continues {tunable} "
                              "checkpoints")
    coverage = vocabulary_coverage(parent, traces)
    if coverage < MIN_COVERAGE:
        raise CheckpointError(
            f"{path or 'checkpoint'}: its op vocabulary covers {coverage:.0%} of the data's time (at least "
            f"{MIN_COVERAGE:.0%} needed): the traces carry features of another kind (imported with "
            "--features recorded? re-import with --features zoo), or the checkpoint was trained on other workloads")


def fit_small(traces: pd.DataFrame, parent: ets.EtsPredictor | None = None, *, parent_path: str = "",
              seed: int = 0, minutes: float = 2.0, lr: float | None = None, epochs: int | None = None,
              tune: str | None = None, base: ets.EtsConfig | None = None, progress: bool = True,
              split: dict | None = None) -> ets.EtsPredictor:
    """ETS for ``traces`` (one device) by the small-data rule: ``parent`` calibrated or fine-tuned
    (``tune`` "scale" or "all"; default by the trace count, :func:`default_tune`), or trained
    from scratch with ``base`` (default :class:`ets.EtsConfig`) when None. ``epochs``
    overrides the fixed or maximum epoch count, ``lr`` the learning rate (gradient training)."""
    if traces.empty:
        raise InputError("no traces to train on")
    ids = sorted(traces["config_id"].unique())
    tune = tune or default_tune(len(ids))
    if tune not in TUNES:
        raise SpecError(f"tune must be one of {', '.join(TUNES)}, got {tune!r}")
    device = str(traces["device"].iloc[0])
    if parent is not None and tune == "scale":
        record = {**(split or {}), "train": len(ids), "val": 0, "traces": ids, "validation": "none (calibration)",
                  "tune": tune}
        return ets.EtsPredictor(parent.spec, parent.config, parent.model, device, training.fingerprint(traces), [],
                                record, parent.lineage_of_child(parent_path), calibration(parent, traces))
    schedule = FINETUNE if parent is not None else SCRATCH
    train_ids, val_ids = split_traces(ids, seed)
    fixed = not val_ids
    config = replace(parent.config if parent is not None else (base or ets.EtsConfig()),
                     lr=lr or schedule.lr, batch_size=SMALL_BATCH, seed=seed, max_minutes=minutes,
                     max_epochs=epochs or (schedule.fixed_epochs if fixed else schedule.max_epochs),
                     patience=schedule.patience)
    train = traces[traces["config_id"].isin(set(train_ids))]
    val = traces[traces["config_id"].isin(set(val_ids))]
    record = {**(split or {}), "train": len(train_ids), "val": len(val_ids),
              "traces": train_ids + val_ids, "validation": "held-out traces" if val_ids else "fixed epochs",
              **({"tune": tune} if parent is not None else {})}
    return ets.train(train, val, config, device=device, split=record, progress=progress,
                     parent=parent, parent_path=parent_path)

"""The operator-based baseline ("opbased"): regress each op's kernel duration from its own
features, predict no framework overhead, and sum the ops to the iteration time.

Why: this is the comparison the ETS authors make (HPDC'24, predictors.md §1) to show what
ignoring framework overhead costs. Per-op predictors in the literature (and Habitat on a single
device) model kernel time only; on small models, where the GPU idles between kernels, they
miss most of the iteration. Everything but its two defining choices (no context window, no gap) is shared with ETS
so that the comparison isolates them:

* the same per-op feature vectors and scalers (:mod:`predictor.features`, fitted on the
  training split only) and the same normalised target (ETS's: anchored on the op's roofline by
  default, or log(1 + µs); z-scored) with an MAE loss;
* no context window: an MLP sees one op at a time (``layers`` hidden layers of ``hidden``
  units, ReLU; the authors do not publish theirs, 3 × 256 is our default);
* the gap (framework overhead after an op) is predicted as 0 — the point of the comparison;
* training as ETS: Adam with the learning rate halved after 2 epochs without improvement,
  early stopping on the validation iteration MRE against the true iteration time
  (duration + gap), the best epoch's weights kept, ``patience`` and ``max_minutes`` budgets.
  The criterion is the one every method of this package stops on; for a method that cannot
  predict the gaps it favours epochs that over-predict durations (which fills part of the
  missing overhead), which can flatter its iteration error.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import numpy as np
import pandas as pd
import torch
from torch import nn

from predictor.emulator.peaks import Peaks
from predictor.features import (
    NORMS,
    TARGET_TRANSFORMS,
    FeatureSpec,
    decode_targets,
    encode,
    encode_targets,
    fit_features,
)
from predictor.methods.base import (
    MAX_MINUTES,
    TrainedPredictor,
    build_weights,
    checked_config,
    checked_model_size,
    checked_spec,
    stored_fields,
    summarize,
)
from predictor.methods.training import (
    EarlyStopping,
    anchor_peaks,
    clock,
    device_rows,
    fingerprint,
    mlp,
    mre,
    run_mlp,
    shuffled_rows,
    sorted_traces,
)

METHOD = "opbased"


@dataclass
class OpBasedConfig:
    hidden: int = 256
    layers: int = 3  # hidden layers
    lr: float = 1e-3
    batch_size: int = 512
    max_epochs: int = 200
    patience: int = 8
    max_minutes: float = MAX_MINUTES
    seed: int = 0
    top_k: int = 25
    norm: str = "global"
    target_transform: str = "anchored"

    RANGES: ClassVar[dict[str, tuple]] = {"norm": NORMS, "target_transform": TARGET_TRANSFORMS}


class OpBasedPredictor(TrainedPredictor):
    """A per-op duration MLP with its feature spec; gaps are always predicted as 0."""

    method = METHOD

    def __init__(self, spec: FeatureSpec, config: OpBasedConfig, model: nn.Module, device: str,
                 fingerprint: str = "", history: list[dict] | None = None, split: dict | None = None) -> None:
        super().__init__(config, model, device, fingerprint, history, split)
        self.spec = spec

    def _durations(self, ordered: pd.DataFrame, features: np.ndarray) -> np.ndarray:
        normalised = run_mlp(self.model, features)
        both = np.column_stack([normalised, np.zeros_like(normalised)])
        return decode_targets(self.spec, ordered, both)[:, 0]

    def predict_ops(self, traces: pd.DataFrame) -> pd.DataFrame:
        """The trace rows (sorted by config and idx) with pred_duration_us and pred_gap_us (= 0)."""
        if traces.empty:
            raise ValueError("no traces to predict")
        ordered = pd.concat(sorted_traces(traces), ignore_index=True)
        duration = self._durations(ordered, encode(self.spec, ordered))
        return ordered.assign(pred_duration_us=duration, pred_gap_us=0.0)

    def iteration_times(self, traces: pd.DataFrame) -> pd.DataFrame:
        return summarize(self.predict_ops(traces))

    def checkpoint_fields(self) -> dict:
        return {"spec": self.spec.to_dict(), "dim": self.spec.dim}

    @classmethod
    def from_checkpoint(cls, body: dict, path: str | Path) -> OpBasedPredictor:
        spec = checked_spec(body, path)
        config = checked_config(OpBasedConfig, body.get("config"), path,
                                target_transform=spec.target_transform)  # older: log
        common = stored_fields(body, path)
        model = build_weights(path, lambda: mlp(spec.dim, config.hidden, config.layers), body.get("state_dict"))
        return cls(spec, config, model, **common)


load = OpBasedPredictor.load  # what predictor.methods.load dispatches to


def train(train_traces: pd.DataFrame, val_traces: pd.DataFrame, config: OpBasedConfig | None = None, *,
          device: str | None = None, split: dict | None = None, progress: bool = True,
          log: Callable[[dict], None] | None = None, peaks: Peaks | None = None) -> OpBasedPredictor:
    """Fit the per-op duration MLP on ``train_traces``; early stopping on ``val_traces``' iteration MRE.
    ``peaks``: the device's peaks for anchored targets (None: the GPU catalogue's)."""
    started = clock()  # the time budget covers features and model construction too
    config = config or OpBasedConfig()
    device, train_traces, val_traces = device_rows(train_traces, val_traces, device)
    torch.manual_seed(config.seed)
    rng = np.random.default_rng(config.seed)
    spec = fit_features(train_traces, top_k=config.top_k, norm=config.norm, target_transform=config.target_transform,
                        peaks=anchor_peaks(config.target_transform, device, peaks))
    checked_model_size(lambda: mlp(spec.dim, config.hidden, config.layers), "the opbased options (--layers, --hidden)")
    model = mlp(spec.dim, config.hidden, config.layers)
    predictor = OpBasedPredictor(spec, config, model, device, fingerprint(pd.concat([train_traces, val_traces])),
                                 [], split)
    x = torch.from_numpy(encode(spec, train_traces))
    y = torch.from_numpy(encode_targets(spec, train_traces)[:, 0])
    val = pd.concat(sorted_traces(val_traces), ignore_index=True)
    val_x = encode(spec, val)
    codes = pd.factorize(val["config_id"])[0]
    val_truth = np.bincount(codes, (val["duration_us"] + val["gap_us"]).to_numpy(np.float64))
    optimizer = torch.optim.Adam(model.parameters(), lr=config.lr)
    stop = EarlyStopping(model, predictor.history, config, "train opbased", optimizer=optimizer, progress=progress,
                         log=log, started=started)
    stop.fit(model, optimizer, lambda: shuffled_rows(rng, len(x), config.batch_size),
             lambda rows: (model(x[rows]).squeeze(1) - y[rows]).abs().mean(),
             lambda: mre(np.bincount(codes, predictor._durations(val, val_x)), val_truth))
    stop.restore()
    return predictor

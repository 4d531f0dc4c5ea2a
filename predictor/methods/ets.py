"""The ETS predictor: sliding windows over an execution trace into a bidirectional LSTM that
predicts every op's (duration, gap); overlapping windows averaged; summed to the iteration time.

Why: this is the method of the paper (predictors.md §1.4): a window of neighbouring ops gives the
context that decides how much framework overhead follows an op (a small kernel between small
kernels leaves the GPU idle; the same kernel between big ones does not).

* Model: ``arch`` "lstm" (default; 4 layers, bidirectional, hidden = feature dimension unless
  set), or the ablation alternatives "gru", "transformer" (encoder over the window with learned
  positions and a padding mask) and "mlp" (on the flattened window); a linear head gives
  (duration, gap) per step.
* Training: MAE on the normalised targets (anchored by default: the log of each op's time over its
  roofline on the device, :mod:`predictor.features`) over real (non-padding) slots, each op weighted
  half uniformly and half by its share of the iteration time (:func:`op_weights`; ``loss_weight
  = "uniform"`` for the plain MAE); Adam; mini-batches of windows drawn with a seeded generator;
  an exponential moving average of the weights (``ema``) is what gets validated and kept; after
  each epoch the validation MRE of iteration times, which also halves the learning rate after 2
  epochs without improvement; the best epoch's weights are kept; stop after ``patience`` epochs
  without improvement or when ``max_minutes`` have passed. ``history`` records wall time and
  validation MRE per epoch (the convergence curve). The weighting and the averaging are ours,
  not the paper's: on the T4 held-out families they took the test MRE from 8.2 % to 5.3 % (one
  run each; the ablation script measures each alone).
* Inference: every window of every trace in one batched pass (chunked), normalisation undone,
  each op's predictions averaged over its windows (padding masked), then summed: iteration time
  with its per-phase and duration/gap breakdown.
* Checkpoint (:mod:`predictor.checkpoint_file`: safetensors and JSON, sealed with its SHA-256):
  weights, feature spec with scalers, training config, device, package version, dataset
  fingerprint, split and history. :func:`load` checks the hash, the format and that the weights
  match the spec, and names what does not.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
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
    raw_targets,
)
from predictor.methods.base import (
    MAX_MINUTES,
    TrainedPredictor,
    build_weights,
    checked_config,
    checked_model_size,
    checked_spec,
    field_checker,
    stored_fields,
    summarize,
)
from predictor.methods.checks import ARCHS, MAX_WIDTH
from predictor.methods.training import (
    EarlyStopping,
    anchor_peaks,
    clock,
    device_rows,
    fingerprint,
    iteration_mre,
    shuffled_rows,
    sorted_traces,
)
from predictor.methods.windows import average_windows, first_window_only, window_index

LOSS_WEIGHTS = ("time", "uniform")


@dataclass
class EtsConfig:
    width: int = 12
    stride: int = 4
    arch: str = "lstm"
    layers: int = 4
    hidden: int | None = None  # None: the feature dimension (the authors' choice)
    top_k: int = 25
    norm: str = "global"
    target_transform: str = "anchored"
    lr: float = 2e-3
    batch_size: int = 256
    max_epochs: int = 200
    patience: int = 8
    max_minutes: float = MAX_MINUTES
    seed: int = 0
    overlap: bool = True  # average overlapping windows (False: the no-overlap ablation)
    skip: bool = True  # add a linear map of each op's own features to the output (see WindowModel)
    loss_weight: str = "time"  # "time": weigh each op by its share of the iteration (see op_weights); "uniform"
    ema: float = 0.998  # exponential moving average of the weights, validated and kept (0: off)
    context: bool = True  # the iteration-context feature columns (predictor.features; False: the ablation)

    # each option's range, checked for options and stored configs alike (predictor.methods.checks)
    RANGES: ClassVar[dict[str, tuple]] = {
        "width": (1, MAX_WIDTH), "stride": (1, MAX_WIDTH), "arch": ARCHS, "norm": NORMS,
        "target_transform": TARGET_TRANSFORMS, "loss_weight": LOSS_WEIGHTS, "ema": ("fraction",)}

    def __post_init__(self) -> None:
        if isinstance(self.stride, int) and isinstance(self.width, int) and self.stride > self.width:
            raise ValueError(f"stride {self.stride} > width {self.width} would leave ops outside every window")


class WindowModel(nn.Module):
    def __init__(self, dim: int, config: EtsConfig) -> None:
        super().__init__()
        if config.arch not in ARCHS:
            raise ValueError(f"arch must be one of {ARCHS}, got {config.arch!r}")
        self.arch, self.width = config.arch, config.width
        hidden = config.hidden or dim
        if config.arch in ("lstm", "gru"):
            rnn = nn.LSTM if config.arch == "lstm" else nn.GRU
            self.body = rnn(dim, hidden, num_layers=config.layers, batch_first=True, bidirectional=True)
            self.head = nn.Linear(2 * hidden, 2)
        elif config.arch == "transformer":
            d = max(8, (hidden // 4) * 4)
            self.embed = nn.Linear(dim, d)
            self.position = nn.Parameter(torch.zeros(1, config.width, d))
            layer = nn.TransformerEncoderLayer(d, nhead=4, dim_feedforward=2 * d, dropout=0.0, batch_first=True)
            self.body = nn.TransformerEncoder(layer, num_layers=config.layers, enable_nested_tensor=False)
            self.head = nn.Linear(d, 2)
        else:
            self.body = nn.Sequential(nn.Linear(config.width * dim, 4 * hidden), nn.ReLU(),
                                      nn.Linear(4 * hidden, 4 * hidden), nn.ReLU())
            self.head = nn.Linear(4 * hidden, config.width * 2)
        self.skip = nn.Linear(dim, 2, bias=False) if config.skip else None
        if self.skip is not None:
            nn.init.zeros_(self.skip.weight)  # start as the plain window model

    def forward(self, x: torch.Tensor, pad: torch.Tensor) -> torch.Tensor:
        """x [B, W, F], pad [B, W] (True = padding) -> [B, W, 2].

        The optional skip adds a linear function of each op's own features: the recurrent path
        ends in tanh-bounded states, so alone it cannot predict an op larger than any seen in
        training (a 128-GFLOP RegNet at 768² was under-predicted by 59 %); log time is close to
        linear in log FLOPs and log bytes, so the linear path extrapolates and the window
        learns the correction (context, overhead)."""
        if self.arch in ("lstm", "gru"):
            out = self.head(self.body(x)[0])
        elif self.arch == "transformer":
            h = self.embed(x) + self.position[:, : x.shape[1]]
            out = self.head(self.body(h, src_key_padding_mask=pad))
        else:
            out = self.head(self.body(x.flatten(1))).view(x.shape[0], x.shape[1], 2)
        return out + self.skip(x) if self.skip is not None else out


@dataclass
class Windows:
    """Every window of a set of traces, as indices into one op-feature matrix."""

    features: np.ndarray  # [ops, F]
    targets: np.ndarray | None  # [ops, 2] normalised
    weights: np.ndarray | None  # [ops, 2] loss weights
    index: np.ndarray  # [windows, W] global op index, -1 padding
    trace_of_window: np.ndarray  # [windows]
    offsets: np.ndarray  # [traces + 1] op offsets of each trace
    traces: list[pd.DataFrame] = field(repr=False)


def make_windows(spec: FeatureSpec, traces: pd.DataFrame, width: int, stride: int,
                 with_targets: bool = True) -> Windows:
    parts = sorted_traces(traces)
    ordered = pd.concat(parts, ignore_index=True)
    features = encode(spec, ordered)
    targets = encode_targets(spec, ordered) if with_targets else None
    offsets = np.concatenate([[0], np.cumsum([len(t) for t in parts])])
    weights = op_weights(ordered, offsets) if with_targets else None
    index, owner = [], []
    for i, t in enumerate(parts):
        local = window_index(len(t), width, stride)
        index.append(np.where(local >= 0, local + offsets[i], -1))
        owner.append(np.full(len(local), i))
    return Windows(features, targets, weights, np.concatenate(index), np.concatenate(owner), offsets, parts)


def op_weights(ordered: pd.DataFrame, offsets: np.ndarray) -> np.ndarray:
    """[ops, 2] loss weights: half uniform, half the target's share of its trace's iteration time
    × the trace's op count (so both halves give every op of a trace the same total).

    Why: the loss is on log times, so it weighs an op's relative error; the iteration error is
    the time-share-weighted sum of those relative errors. Uniform weights spend the model on the
    hundreds of µs-scale ops and let a 5 % bias on the few kernels that make up the iteration
    through; the share half bounds exactly that error."""
    t = raw_targets(ordered)
    n = np.diff(offsets)
    trace = np.repeat(np.arange(len(n)), n)
    total = np.bincount(trace, t.sum(axis=1), minlength=len(n))
    share = t / np.where(total > 0, total, 1.0)[trace, None]
    return (0.5 + share * n[trace, None]).astype(np.float32)


def _batch(w: Windows, rows: np.ndarray, uniform: bool = False):
    """Features [B, W, F], padding mask [B, W], and (with targets) targets and loss weights."""
    index = w.index[rows]
    pad = index < 0
    safe = np.maximum(index, 0)
    x = torch.from_numpy(w.features[safe])
    x[torch.from_numpy(pad)] = 0
    if w.targets is None:
        return x, torch.from_numpy(pad), None, None
    weight = torch.ones(index.shape + (2,)) if uniform else torch.from_numpy(w.weights[safe])
    return x, torch.from_numpy(pad), torch.from_numpy(w.targets[safe]), weight


class EtsPredictor(TrainedPredictor):
    """A trained window model with everything needed to use it on new traces."""

    method = "ets"

    def __init__(self, spec: FeatureSpec, config: EtsConfig, model: WindowModel, device: str,
                 fingerprint: str = "", history: list[dict] | None = None, split: dict | None = None,
                 lineage: list[dict] | None = None, scale: tuple[float, float] = (1.0, 1.0)) -> None:
        super().__init__(config, model, device, fingerprint, history, split)
        self.spec = spec
        self.lineage = lineage or []  # the checkpoints this one was fine-tuned from, oldest first
        # (kernel time, overhead) factors on every op's prediction: a calibration to a device
        # from a few traces (predictor.finetune); (1, 1) for a trained model
        self.scale = (float(scale[0]), float(scale[1]))

    # --- inference ---------------------------------------------------------------------------

    @torch.no_grad()
    def _predict_windows(self, w: Windows, chunk: int = 4096) -> np.ndarray:
        self.model.eval()
        out = np.empty((len(w.index), w.index.shape[1], 2), dtype=np.float32)
        for start in range(0, len(w.index), chunk):
            rows = np.arange(start, min(start + chunk, len(w.index)))
            x, pad, _, _ = _batch(w, rows)
            out[rows] = self.model(x, pad).numpy()
        return out

    def predict_ops(self, traces: pd.DataFrame) -> pd.DataFrame:
        """Per op: predicted duration_us and gap_us (plus the trace's own columns)."""
        w = make_windows(self.spec, traces, self.config.width, self.config.stride, with_targets=False)
        return self._ops_from_windows(w, self._predict_windows(w))

    def _ops_from_windows(self, w: Windows, predictions: np.ndarray) -> pd.DataFrame:
        total = int(w.offsets[-1])
        combine = average_windows if self.config.overlap else first_window_only
        normalised = combine(predictions, w.index, total)
        ordered = pd.concat(w.traces, ignore_index=True)
        micro = decode_targets(self.spec, ordered, normalised)
        return ordered.assign(pred_duration_us=micro[:, 0] * self.scale[0], pred_gap_us=micro[:, 1] * self.scale[1])

    def lineage_of_child(self, path: str) -> list[dict]:
        """The lineage of a model adapted from this one (saved at ``path``)."""
        return [*self.lineage, {"checkpoint": path, "device": self.device, "fingerprint": self.fingerprint,
                                "epochs": len(self.history)}]

    def iteration_times(self, traces: pd.DataFrame) -> pd.DataFrame:
        """Per trace: predicted iteration time with its breakdown, and the truth when present."""
        return summarize(self.predict_ops(traces))

    # --- persistence -------------------------------------------------------------------------

    def checkpoint_fields(self) -> dict:
        return {"spec": self.spec.to_dict(), "dim": self.spec.dim, "lineage": self.lineage, "scale": list(self.scale)}

    @classmethod
    def from_checkpoint(cls, body: dict, path: str | Path) -> EtsPredictor:
        spec = checked_spec(body, path)
        # older checkpoints: no context columns; targets as their spec says (the default was log)
        config = checked_config(EtsConfig, body.get("config"), path, context=spec.context,
                                target_transform=spec.target_transform)
        common = stored_fields(body, path)
        check = field_checker(path)
        lineage = check.sequence(body.get("lineage") or [], "lineage")
        for i, entry in enumerate(lineage):
            check.mapping(entry, f"lineage[{i}]")
        scale = check.numbers(body.get("scale", [1.0, 1.0]), "scale", 2, positive=True)
        model = build_weights(path, lambda: WindowModel(spec.dim, config), body.get("state_dict"))
        return cls(spec, config, model, **common, lineage=lineage, scale=(scale[0], scale[1]))


load = EtsPredictor.load  # what predictor.methods.load dispatches to


def train(train_traces: pd.DataFrame, val_traces: pd.DataFrame, config: EtsConfig | None = None, *,
          device: str | None = None, split: dict | None = None, progress: bool = True,
          log=None, parent: EtsPredictor | None = None, parent_path: str = "",
          peaks: Peaks | None = None) -> EtsPredictor:
    """Fit a window model on ``train_traces``; early stopping on ``val_traces``' iteration MRE.

    ``parent``: continue training that predictor (its feature spec, scalers and weights; the
    result records it in ``lineage`` and models the data's device) instead of starting afresh;
    a calibration ``scale`` of the parent is not carried: the weights learn the device instead;
    an anchored parent is re-anchored on the data's device.
    ``peaks``: the device's peaks for anchored targets (a CPU dataset's recorded ones,
    :func:`predictor.emulator.peaks.for_device`); None: the GPU catalogue's.
    Empty ``val_traces`` (too few traces to hold any out): exactly ``max_epochs`` epochs, the
    last weights kept; the history's MRE is then the training traces'."""
    started = clock()  # the time budget covers features and model construction too
    config = config or EtsConfig()
    if val_traces.empty:
        device, train_traces, _ = device_rows(train_traces, train_traces, device)
    else:
        device, train_traces, val_traces = device_rows(train_traces, val_traces, device)
    torch.manual_seed(config.seed)
    rng = np.random.default_rng(config.seed)
    if parent is None:
        spec = fit_features(train_traces, top_k=config.top_k, norm=config.norm,
                            target_transform=config.target_transform, context=config.context,
                            peaks=anchor_peaks(config.target_transform, device, peaks))
        checked_model_size(lambda: WindowModel(spec.dim, config), "the ets options (--layers, --hidden, --window)")
        model, lineage = WindowModel(spec.dim, config), []
    else:
        spec, model = parent.spec, copy.deepcopy(parent.model)
        if spec.anchored and device != parent.device:
            spec = spec.with_peaks(anchor_peaks(spec.target_transform, device, peaks))
        lineage = parent.lineage_of_child(parent_path)
    fixed = val_traces.empty
    checked = train_traces if fixed else val_traces
    predictor = EtsPredictor(spec, config, model, device, fingerprint(pd.concat([train_traces, val_traces])),
                             [], split, lineage)
    tw = make_windows(spec, train_traces, config.width, config.stride)
    vw = make_windows(spec, checked, config.width, config.stride, with_targets=False)
    val_truth = summarize(pd.concat(vw.traces, ignore_index=True).assign(pred_duration_us=0.0, pred_gap_us=0.0))
    optimizer = torch.optim.Adam(model.parameters(), lr=config.lr)
    if config.loss_weight not in LOSS_WEIGHTS:
        raise ValueError(f"loss_weight must be one of {LOSS_WEIGHTS}, got {config.loss_weight!r}")
    average = copy.deepcopy(model) if config.ema else model  # what is validated and kept
    predictor.model = average
    stop = EarlyStopping(average, predictor.history, config, "fine-tune ets" if parent else "train ets",
                         optimizer=None if fixed else optimizer, progress=progress, log=log,
                         started=started)
    uniform = config.loss_weight == "uniform"

    def loss_of(rows: np.ndarray) -> torch.Tensor:
        x, pad, y, weight = _batch(tw, rows, uniform)
        return ((model(x, pad) - y).abs() * weight)[~pad].mean()

    steps = 0

    def average_weights() -> None:
        nonlocal steps
        steps += 1
        decay = min(config.ema, (1 + steps) / (10 + steps))  # warm-up: early weights are not kept long
        with torch.no_grad():
            for kept, current in zip(average.parameters(), model.parameters()):
                kept.lerp_(current, 1.0 - decay)

    def validate() -> float:
        summary = summarize(predictor._ops_from_windows(vw, predictor._predict_windows(vw)))
        summary["true_us"] = val_truth["true_us"].to_numpy()
        return iteration_mre(summary)

    stop.fit(model, optimizer, lambda: shuffled_rows(rng, len(tw.index), config.batch_size, tensor=False), loss_of,
             validate, after_step=average_weights if config.ema else None, early_stop=not fixed)
    stop.restore(keep="last" if fixed else "best")
    return predictor

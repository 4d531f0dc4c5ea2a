"""Per-op feature vectors and targets for the ETS predictor, with their normalisation.

Why: the model sees each op as one vector; the encoding and its scalers are part of the model
(stored in the checkpoint), fitted on the training split only, so an evaluation never leaks.

Feature vector of an op (ETS §3, predictors.md §1.3), in this order:

* op type: one-hot over the ``top_k`` most frequent op names of the training split, plus every
  op that takes at least :data:`HEAVY_SHARE` of some training trace's iteration time, plus one
  "others" slot. Frequent ops get their own slot, and so do rare heavy ones: an LSTM model has
  one ``lstm`` forward op and a few ``MkldnnRnnLayerBackward0`` ops that make up most of its
  iteration, and in the "others" slot (shared with trivia like ``ones_like``) they were
  predicted 10-30x too fast;
* phase one-hot (forward, backward, update); dtype one-hot (float32, float16, bfloat16, float64);
  optimizer one-hot (sgd, adam: read from the zoo's ``config_id``; imported traces count as sgd,
  which is what the ETS authors and the profiled examples ran);
* batch, input size, log(1 + FLOPs), log(1 + bytes);
* the op's ``params`` (up to 30 integers) as log(1 + x), zero-padded;
* with ``context`` (ETS's default; off for the per-op baselines and for checkpoints written
  before it existed): where the op stands in its iteration, as log(1 + x) of the FLOPs, bytes
  and op count of the ops before it in its host/GPU segment (the forward pass; backward and
  update), and of the whole trace's FLOPs, bytes and op count.

  Why: an op's gap depends on whether the GPU still has queued work when the op is issued.
  Models that start with large kernels build a queue that hides the host over hundreds of later
  small ops; a 12-op window cannot see that queue, so without these columns the model guessed
  it from batch and image size and predicted no gap for RandWire at batch 96-192 (small kernels
  throughout, no queue): -37 to -48 % on four V100 test graphs. With them the shipped V100
  model's test MRE went from 5.8 to 2.8 % (one run each, same data and 15-minute budget).

Normalisation: z-score of the continuous columns (everything after the one-hots) and of the
targets (duration_us, gap_us), either ``global`` (one mean/std per column over all training
ops, the authors' code) or ``per-op`` (per op type, for types with at least
:data:`MIN_PER_OP_ROWS` training rows; rarer and unseen types use the global statistics).
Negative gaps (overlapping kernels in real traces) are clamped to 0 in the targets, as the
authors' trainer does.

Targets are z-scored after ``target_transform``: "log" (default) takes log(1 + µs) first, so that
the loss weighs a 10 µs op's error relative to its size rather than to the largest kernel of
the data set — our zoo spans batch 2–512 and images 16–768, six orders of magnitude of op time,
where the authors' raw z-scoring ("none", also available) lets big kernels drown the small ones
whose gaps make up the overhead.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from predictor.trace_table import DTYPES, MAX_PARAMS, PHASES

OPTIMIZERS = ("sgd", "adam")
MIN_PER_OP_ROWS = 50
HEAVY_SHARE = 0.05
NORMS = ("global", "per-op")
CONTEXT_COLUMNS = 6
TARGET_TRANSFORMS = ("log", "none")


def optimizer_of(config_id: str) -> str:
    parts = str(config_id).split(":")
    return "adam" if "adam" in parts else "sgd"


@dataclass
class FeatureSpec:
    """The encoding and its fitted scalers (JSON-serialisable through ``to_dict``)."""

    ops: list[str]
    norm: str = "global"
    target_transform: str = "log"
    mean: list[float] = field(default_factory=list)  # continuous columns, global
    std: list[float] = field(default_factory=list)
    target_mean: list[float] = field(default_factory=list)  # (duration, gap), global
    target_std: list[float] = field(default_factory=list)
    per_op: dict[str, dict[str, list[float]]] = field(default_factory=dict)  # op -> mean/std/target_mean/target_std
    context: bool = False  # the iteration-context columns (see the module docstring)

    @property
    def n_onehot(self) -> int:
        return len(self.ops) + 1 + len(PHASES) + len(DTYPES) + len(OPTIMIZERS)

    @property
    def n_continuous(self) -> int:
        return 4 + MAX_PARAMS + (CONTEXT_COLUMNS if self.context else 0)

    @property
    def dim(self) -> int:
        return self.n_onehot + self.n_continuous

    def to_dict(self) -> dict:
        return {"ops": self.ops, "norm": self.norm, "target_transform": self.target_transform,
                "mean": self.mean, "std": self.std,
                "target_mean": self.target_mean, "target_std": self.target_std, "per_op": self.per_op,
                "context": self.context}

    @classmethod
    def from_dict(cls, d: dict) -> "FeatureSpec":
        return cls(**d)

    def op_slot(self, ops: pd.Series) -> np.ndarray:
        return _lookup(ops, self.ops, default=len(self.ops))

    def _stats(self, ops: pd.Series, key: str, fallback: list[float]) -> np.ndarray:
        """Per-row statistics: per-op where fitted, else the global ones."""
        base = np.asarray(fallback, dtype=np.float64)
        out = np.broadcast_to(base, (len(ops), len(base))).copy()
        if self.norm == "per-op" and self.per_op:
            values = ops.to_numpy()
            for op, stats in self.per_op.items():
                rows = values == op
                if rows.any():
                    out[rows] = stats[key]
        return out


def _lookup(values: pd.Series, names, default: int = -1) -> np.ndarray:
    """Index of each value in ``names`` (``default`` when absent), via the distinct values only."""
    codes, uniques = pd.factorize(values)
    position = {name: i for i, name in enumerate(names)}
    table = np.array([position.get(u, default) for u in uniques] + [default], dtype=np.int64)
    return table[codes]  # code -1 (missing value) picks the trailing default


def _continuous(traces: pd.DataFrame, context: bool = False) -> np.ndarray:
    params = np.zeros((len(traces), MAX_PARAMS))
    for i, p in enumerate(traces["params"]):
        values = np.asarray(p, dtype=np.float64)[:MAX_PARAMS]
        params[i, :len(values)] = np.log1p(np.maximum(values, 0))
    scalars = np.column_stack([traces["batch"].to_numpy(np.float64), traces["input_size"].to_numpy(np.float64),
                               np.log1p(np.maximum(traces["flops"].to_numpy(np.float64), 0)),
                               np.log1p(np.maximum(traces["bytes"].to_numpy(np.float64), 0))])
    return np.hstack([scalars, params, iteration_context(traces)] if context else [scalars, params])


def iteration_context(traces: pd.DataFrame) -> np.ndarray:
    """[rows, 6] in row order: log(1 + x) of the FLOPs, bytes and op count before each op in its
    segment (forward; backward and update) of its trace, ordered by ``idx``; then of its trace's
    total FLOPs, bytes and op count."""
    trace = pd.factorize(traces["config_id"])[0]
    segment = trace * 2 + (traces["phase"].to_numpy() != "forward")
    order = np.lexsort((traces["idx"].to_numpy(), segment))
    values = np.column_stack([np.maximum(traces["flops"].to_numpy(np.float64), 0),
                              np.maximum(traces["bytes"].to_numpy(np.float64), 0), np.ones(len(traces))])
    ordered = values[order]
    before = np.empty_like(values)
    before[order] = pd.DataFrame(ordered).groupby(segment[order]).cumsum().to_numpy() - ordered
    totals = np.column_stack([np.bincount(trace, column) for column in values.T])[trace]
    return np.log1p(np.hstack([before, totals]))


def raw_targets(traces: pd.DataFrame, transform: str = "none") -> np.ndarray:
    t = np.column_stack([np.maximum(traces["duration_us"].to_numpy(np.float64), 0.0),
                         np.maximum(traces["gap_us"].to_numpy(np.float64), 0.0)])
    return np.log1p(t) if transform == "log" else t


def _safe_std(x: np.ndarray) -> np.ndarray:
    std = x.std(axis=0)
    return np.where(std > 1e-9, std, 1.0)


def fit_features(train: pd.DataFrame, top_k: int = 25, norm: str = "global",
                 target_transform: str = "log", context: bool = False) -> FeatureSpec:
    """Vocabulary and scalers from the training split's ops."""
    if norm not in NORMS:
        raise ValueError(f"norm must be one of {NORMS}, got {norm!r}")
    if target_transform not in TARGET_TRANSFORMS:
        raise ValueError(f"target_transform must be one of {TARGET_TRANSFORMS}, got {target_transform!r}")
    if train.empty:
        raise ValueError("cannot fit features on an empty training split")
    counts = train["op"].value_counts()
    ops = sorted(set(counts.index[:top_k]) | heavy_ops(train), key=lambda o: (-counts[o], o))
    cont, targets = _continuous(train, context), raw_targets(train, target_transform)
    spec = FeatureSpec(ops, norm, target_transform, cont.mean(axis=0).tolist(), _safe_std(cont).tolist(),
                       targets.mean(axis=0).tolist(), _safe_std(targets).tolist(), context=context)
    if norm == "per-op":
        values = train["op"].to_numpy()
        for op, n in counts.items():
            if n >= MIN_PER_OP_ROWS:
                rows = values == op
                spec.per_op[str(op)] = {"mean": cont[rows].mean(axis=0).tolist(), "std": _safe_std(cont[rows]).tolist(),
                                        "target_mean": targets[rows].mean(axis=0).tolist(),
                                        "target_std": _safe_std(targets[rows]).tolist()}
    return spec


def heavy_ops(train: pd.DataFrame, share: float = HEAVY_SHARE) -> set[str]:
    """Ops taking at least ``share`` of some trace's iteration time (duration plus gap)."""
    time = pd.Series(np.maximum(train["duration_us"].to_numpy(np.float64), 0)
                     + np.maximum(train["gap_us"].to_numpy(np.float64), 0), index=train.index)
    per_op = time.groupby([train["config_id"], train["op"]], sort=False).sum()
    total = per_op.groupby(level=0, sort=False).transform("sum")
    shares = per_op / total.where(total > 0)
    return set(shares.index.get_level_values(1)[(shares >= share).to_numpy()])


def encode(spec: FeatureSpec, traces: pd.DataFrame) -> np.ndarray:
    """[rows, spec.dim] float32 features of ``traces``' ops, in row order."""
    n = len(traces)
    onehot = np.zeros((n, spec.n_onehot), dtype=np.float32)
    rows = np.arange(n)
    onehot[rows, spec.op_slot(traces["op"])] = 1
    offset = len(spec.ops) + 1
    codes, ids = pd.factorize(traces["config_id"])
    optimizers = pd.Series([optimizer_of(c) for c in ids], dtype=object)[codes].reset_index(drop=True)
    for values, names in ((traces["phase"], PHASES), (traces["dtype"], DTYPES), (optimizers, OPTIMIZERS)):
        index = _lookup(values, names)
        if (index < 0).any():
            bad = values.iloc[int(np.flatnonzero(index < 0)[0])]
            raise ValueError(f"value {bad!r} not encodable; known: {', '.join(names)}")
        onehot[rows, offset + index] = 1
        offset += len(names)
    cont = _continuous(traces, spec.context)
    cont = (cont - spec._stats(traces["op"], "mean", spec.mean)) / spec._stats(traces["op"], "std", spec.std)
    return np.hstack([onehot, cont.astype(np.float32)])


def encode_targets(spec: FeatureSpec, traces: pd.DataFrame) -> np.ndarray:
    """[rows, 2] normalised (duration, gap)."""
    t = raw_targets(traces, spec.target_transform)
    return ((t - spec._stats(traces["op"], "target_mean", spec.target_mean))
            / spec._stats(traces["op"], "target_std", spec.target_std)).astype(np.float32)


def decode_targets(spec: FeatureSpec, ops: pd.Series, normalised: np.ndarray) -> np.ndarray:
    """Normalised predictions back to µs (negative predictions clipped to 0)."""
    out = normalised * spec._stats(ops, "target_std", spec.target_std) + spec._stats(ops, "target_mean", spec.target_mean)
    if spec.target_transform == "log":
        out = np.expm1(np.minimum(out, 30.0))
    return np.maximum(out, 0.0)

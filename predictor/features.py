"""Per-op feature vectors and targets for the ETS predictor, with their normalisation.

Why: the model sees each op as one vector; the encoding and its scalers are part of the model
(stored in the checkpoint), fitted on the training split only, so an evaluation never leaks.
Design decisions, each with its reason:

* op type is a one-hot over the frequent op names *plus* every rarely seen but heavy op
  (:data:`HEAVY_SHARE`): an LSTM's few heavy ops in the shared "others" slot were predicted far
  too fast;
* ``context`` columns (where the op stands in its iteration: FLOPs, bytes and op count before it
  and in the whole trace): an op's gap depends on the GPU's queue when it is issued, which a
  12-op window cannot see;
* ``target_transform`` "log" (default) weighs each op's error relative to
  its size: the zoo spans six orders of magnitude of op time;
* "anchored" predicts a duration as a correction of its analytical (roofline) time on the model's
  device (:mod:`predictor.emulator.peaks`): efficiency saturates as ops grow and carries to ops
  larger than any in training, where a learned time does not. The decoding bounds it below (the
  roofline, or the fastest ratio a class reached: cuDNN's Winograd/FFT beat the direct count) and,
  where calibration says it holds (:func:`size_ceiling`), above by size; continuous features are
  clipped to their training range so the anchor carries the growth. Gaps are not anchored (the
  host's issue rate is not a roofline of the device).

Vector layout, normalisation and bounds: docs/predictor.md, 'Encoding details'; measured
effects of these choices: docs/predictor.md, 'The ETS predictor'.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np
import pandas as pd

from predictor.common.op_trace import DTYPES, MAX_PARAMS, PHASES
from predictor.emulator.capture.costs import op_class
from predictor.emulator.peaks import Peaks

OPTIMIZERS = ("sgd", "adam")
MIN_PER_OP_ROWS = 50
HEAVY_SHARE = 0.05
NORMS = ("global", "per-op")
CONTEXT_COLUMNS = 6
TARGET_TRANSFORMS = ("log", "none", "anchored")
ANCHOR_COLUMNS = 1  # log(1 + analytical time) with anchored targets
CEILING_BIN = 0.5  # decades of analytical time per bin of the size ceiling
CEILING_SMALLEST_US = 1e-6  # the analytical time of the lowest bin (ops without one go there)
CEILING_MARGINS = (1.0, 1.25, 1.5, 2.0, 3.0, 5.0)  # tried in turn on the training families (size_ceiling)
CEILING_TOLERANCE = 0.01  # the share of a family's true time the others' envelope may cut


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
    peaks: dict = field(default_factory=dict)  # the modelled device's Peaks (JSON form) for "anchored"
    low: list[float] = field(default_factory=list)  # continuous columns' training range ("anchored": clipped to it)
    high: list[float] = field(default_factory=list)
    floor: dict[str, float] = field(default_factory=dict)  # op class -> lowest log(1+d) - log(1+a) in training, <= 0
    # op class -> [[size bin, highest r at or above, + margin]]
    ceiling: dict[str, list[list[float]]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.anchored and not self.peaks:
            raise ValueError("anchored targets need the modelled device's peaks; the spec has none")
        if self.anchored:
            Peaks.from_json(self.peaks, "feature spec: field 'peaks'")  # every field checked, a bad one named
            if self.low and not (len(self.low) == len(self.high) == self.n_continuous):
                raise ValueError(f"feature spec: fields 'low'/'high' hold {len(self.low)}/{len(self.high)} values "
                                 f"for {self.n_continuous} continuous columns")
            _check_ceiling(self.ceiling)

    @property
    def anchored(self) -> bool:
        return self.target_transform == "anchored"

    @property
    def n_onehot(self) -> int:
        return len(self.ops) + 1 + len(PHASES) + len(DTYPES) + len(OPTIMIZERS)

    @property
    def n_continuous(self) -> int:
        return 4 + MAX_PARAMS + (CONTEXT_COLUMNS if self.context else 0) + (ANCHOR_COLUMNS if self.anchored else 0)

    @property
    def dim(self) -> int:
        return self.n_onehot + self.n_continuous

    def to_dict(self) -> dict:
        return {"ops": self.ops, "norm": self.norm, "target_transform": self.target_transform,
                "mean": self.mean, "std": self.std,
                "target_mean": self.target_mean, "target_std": self.target_std, "per_op": self.per_op,
                "context": self.context,
                **({"peaks": self.peaks, "low": self.low, "high": self.high, "floor": self.floor,
                    "ceiling": self.ceiling} if self.peaks else {})}

    @classmethod
    def from_dict(cls, d: dict) -> FeatureSpec:
        return cls(**d)

    def with_peaks(self, peaks: Peaks) -> FeatureSpec:
        """This spec anchored on another device (a model adapted to it); unchanged if not anchored."""
        return replace(self, peaks=peaks.to_json()) if self.anchored else self

    def anchor_us(self, traces: pd.DataFrame) -> np.ndarray:
        """Each op's analytical time on the modelled device (zeros when not anchored)."""
        if not self.anchored:
            return np.zeros(len(traces))
        return Peaks.from_json(self.peaks, "feature spec").estimate_us(
            traces["op"].to_numpy(), np.maximum(traces["flops"].to_numpy(np.float64), 0),
            np.maximum(traces["bytes"].to_numpy(np.float64), 0), traces["dtype"].to_numpy())

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


def _continuous(traces: pd.DataFrame, context: bool = False, anchor: np.ndarray | None = None) -> np.ndarray:
    params = np.zeros((len(traces), MAX_PARAMS))
    for i, p in enumerate(traces["params"]):
        values = np.asarray(p, dtype=np.float64)[:MAX_PARAMS]
        params[i, :len(values)] = np.log1p(np.maximum(values, 0))
    scalars = np.column_stack([traces["batch"].to_numpy(np.float64), traces["input_size"].to_numpy(np.float64),
                               np.log1p(np.maximum(traces["flops"].to_numpy(np.float64), 0)),
                               np.log1p(np.maximum(traces["bytes"].to_numpy(np.float64), 0))])
    parts = [scalars, params] + ([iteration_context(traces)] if context else [])
    return np.hstack(parts + ([np.log1p(anchor)[:, None]] if anchor is not None else []))


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


def raw_targets(traces: pd.DataFrame, transform: str = "none", anchor: np.ndarray | None = None) -> np.ndarray:
    """[rows, 2] (duration, gap) in the target space of ``transform`` ("anchored" needs ``anchor``)."""
    t = np.column_stack([np.maximum(traces["duration_us"].to_numpy(np.float64), 0.0),
                         np.maximum(traces["gap_us"].to_numpy(np.float64), 0.0)])
    if transform == "none":
        return t
    t = np.log1p(t)
    if transform == "anchored":
        t[:, 0] -= np.log1p(anchor)
    return t


def op_classes(ops: pd.Series) -> pd.Series:
    """The cost class of each op (:func:`predictor.emulator.capture.costs.op_class`), via the distinct names."""
    codes, names = pd.factorize(ops)
    classes = np.array([op_class(str(n)) for n in names] + [""], dtype=object)
    return pd.Series(classes[codes], index=ops.index)


def _safe_std(x: np.ndarray) -> np.ndarray:
    std = x.std(axis=0)
    return np.where(std > 1e-9, std, 1.0)


def fit_features(train: pd.DataFrame, top_k: int = 25, norm: str = "global",
                 target_transform: str = "log", context: bool = False, peaks: Peaks | None = None) -> FeatureSpec:
    """Vocabulary and scalers from the training split's ops; ``peaks``: the modelled device's,
    required by anchored targets."""
    if norm not in NORMS:
        raise ValueError(f"norm must be one of {NORMS}, got {norm!r}")
    if target_transform not in TARGET_TRANSFORMS:
        raise ValueError(f"target_transform must be one of {TARGET_TRANSFORMS}, got {target_transform!r}")
    if train.empty:
        raise ValueError("cannot fit features on an empty training split")
    if target_transform == "anchored" and peaks is None:
        raise ValueError("anchored targets need the modelled device's peaks (predictor.emulator.peaks.for_device)")
    counts = train["op"].value_counts()
    ops = sorted(set(counts.index[:top_k]) | heavy_ops(train), key=lambda o: (-counts[o], o))
    spec = FeatureSpec(ops, norm, target_transform, context=context,
                       peaks=peaks.to_json() if target_transform == "anchored" else {})
    anchor = spec.anchor_us(train) if spec.anchored else None
    cont, targets = _continuous(train, context, anchor), raw_targets(train, target_transform, anchor)
    spec.mean, spec.std = cont.mean(axis=0).tolist(), _safe_std(cont).tolist()
    if spec.anchored:
        spec.low, spec.high = cont.min(axis=0).tolist(), cont.max(axis=0).tolist()
        lowest = pd.Series(targets[:, 0]).groupby(op_classes(train["op"]).to_numpy()).min()
        spec.floor = {str(c): float(v) for c, v in lowest.items() if v < 0}
        spec.ceiling = size_ceiling(train, anchor, targets[:, 0])
    spec.target_mean, spec.target_std = targets.mean(axis=0).tolist(), _safe_std(targets).tolist()
    if norm == "per-op":
        values = train["op"].to_numpy()
        for op, n in counts.items():
            if n >= MIN_PER_OP_ROWS:
                rows = values == op
                spec.per_op[str(op)] = {"mean": cont[rows].mean(axis=0).tolist(), "std": _safe_std(cont[rows]).tolist(),
                                        "target_mean": targets[rows].mean(axis=0).tolist(),
                                        "target_std": _safe_std(targets[rows]).tolist()}
    return spec


def _check_ceiling(ceiling: object) -> None:
    """A stranger's ceiling is refused on load, naming what is wrong, not on use."""
    if not isinstance(ceiling, dict):
        raise ValueError(f"feature spec: field 'ceiling' must be an object, got {type(ceiling).__name__}")
    for cls, table in ceiling.items():
        ok = isinstance(table, list) and len(table) > 0 and all(
            isinstance(row, list) and len(row) == 2 and isinstance(row[0], int) and not isinstance(row[0], bool)
            and isinstance(row[1], (int, float)) and np.isfinite(row[1]) for row in table)
        if not ok or [row[0] for row in table] != sorted({row[0] for row in table}):
            raise ValueError(f"feature spec: field 'ceiling.{cls}' must list [size bin, finite value] pairs "
                             "in ascending, distinct bins")


def size_bins(anchor_us: np.ndarray) -> np.ndarray:
    """Each op's half-decade of analytical time (an op without one in the lowest)."""
    return np.floor(np.log10(np.maximum(anchor_us, CEILING_SMALLEST_US)) / CEILING_BIN).astype(int)


def size_ceiling(train: pd.DataFrame, anchor_us: np.ndarray, ratio: np.ndarray) -> dict[str, list[list[float]]]:
    """Per op class, [size bin, highest ratio at or above it, plus the margin] for each bin that
    holds training ops (ascending); {} where the envelope does not hold.

    Calibrated on the training families themselves: each is priced under the envelope of the
    others, and the margin is the smallest of :data:`CEILING_MARGINS` at which none loses more
    than :data:`CEILING_TOLERANCE` of its true time. Where none passes (on a real CPU, VGG's and
    the LSTMs' largest ops are less efficient than smaller ones of other families: caches), the
    device gets no ceiling; with one family there is nothing to check it on, and none either."""
    classes, bins, family = op_classes(train["op"]).to_numpy(), size_bins(anchor_us), train["family"].to_numpy()
    duration = np.nan_to_num(np.maximum(train["duration_us"].to_numpy(np.float64), 0.0))
    gap = np.nan_to_num(np.maximum(train["gap_us"].to_numpy(np.float64), 0.0))
    total = pd.Series(duration + gap).groupby(family).sum()
    per_family = pd.Series(ratio).groupby([family, classes, bins]).max()
    names = per_family.index.get_level_values(0).unique()
    if len(names) < 2:
        return {}
    margins = np.log(CEILING_MARGINS)
    worst = np.zeros(len(margins))
    for name in names:
        rows = family == name
        cap = _ceiling_lookup(_envelope(per_family.drop(name, level=0).groupby(level=[1, 2]).max()),
                              classes[rows], bins[rows])
        for i, margin in enumerate(margins):
            kept = np.expm1(np.minimum(ratio[rows], cap + margin) + np.log1p(anchor_us[rows]))
            worst[i] = max(worst[i], float((duration[rows] - kept).sum() / max(total[name], 1e-9)))
    passing = np.flatnonzero(worst <= CEILING_TOLERANCE)
    if not len(passing):
        return {}
    margin = float(margins[passing[0]])
    return {cls: [[b, v + margin] for b, v in table]
            for cls, table in _envelope(pd.Series(ratio).groupby([classes, bins]).max()).items()}


def _envelope(highest: pd.Series) -> dict[str, list[list[float]]]:
    """(class, bin) -> highest ratio, as per class [bin, running maximum from the largest down]."""
    out = {}
    for cls, per_bin in highest.groupby(level=0):
        running = np.maximum.accumulate(per_bin.to_numpy()[::-1])[::-1]
        out[str(cls)] = [[int(b), float(v)] for b, v in zip(per_bin.index.get_level_values(-1), running)]
    return out


def _ceiling_lookup(ceiling: dict[str, list[list[float]]], classes: np.ndarray, bins: np.ndarray) -> np.ndarray:
    """Each op's ceiling (+inf for a class without one): the value of the largest bin at or below
    its own, the lowest bin's for an op smaller than any seen."""
    out = np.full(len(classes), np.inf)
    for cls, table in ceiling.items():
        rows = classes == cls
        if rows.any():
            edges, values = np.array([b for b, _ in table]), np.array([v for _, v in table])
            out[rows] = values[np.maximum(np.searchsorted(edges, bins[rows], side="right") - 1, 0)]
    return out


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
    cont = _continuous(traces, spec.context, spec.anchor_us(traces) if spec.anchored else None)
    if spec.low:
        cont = np.clip(cont, spec.low, spec.high)
    cont = (cont - spec._stats(traces["op"], "mean", spec.mean)) / spec._stats(traces["op"], "std", spec.std)
    return np.hstack([onehot, cont.astype(np.float32)])


def encode_targets(spec: FeatureSpec, traces: pd.DataFrame) -> np.ndarray:
    """[rows, 2] normalised (duration, gap)."""
    t = raw_targets(traces, spec.target_transform, spec.anchor_us(traces))
    return ((t - spec._stats(traces["op"], "target_mean", spec.target_mean))
            / spec._stats(traces["op"], "target_std", spec.target_std)).astype(np.float32)


def decode_targets(spec: FeatureSpec, traces: pd.DataFrame, normalised: np.ndarray) -> np.ndarray:
    """Normalised predictions of ``traces``' ops back to µs (negative predictions clipped to 0;
    anchored durations bounded below by each op's analytical time, times its class's ``floor``,
    and above by its size's ``ceiling``)."""
    ops = traces["op"]
    out = (normalised * spec._stats(ops, "target_std", spec.target_std)
           + spec._stats(ops, "target_mean", spec.target_mean))
    if spec.target_transform == "none":
        return np.maximum(out, 0.0)
    if spec.anchored:
        out = out.copy()
        classes = op_classes(ops)
        floor = classes.map(spec.floor).fillna(0.0).to_numpy(np.float64)
        anchor = spec.anchor_us(traces)
        ceiling = _ceiling_lookup(spec.ceiling, classes.to_numpy(), size_bins(anchor))
        out[:, 0] = np.minimum(np.maximum(out[:, 0], floor), ceiling) + np.log1p(anchor)
    return np.maximum(np.expm1(np.minimum(out, 30.0)), 0.0)

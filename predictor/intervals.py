"""Prediction intervals for iteration times: split-conformal calibration on held-out families.

Why: a deadline scheduler needs to know how sure a prediction is, not only its value. Every model
method gets the same mechanism, fitted after training and stored in the checkpoint: the signed
log-ratios r = log(true / predicted) of traces of families the model never trained on form an
empirical distribution, and the q-quantile of the true time given a prediction ŷ is
ŷ · exp(Q_r(q)). A two-sided interval at level L is [Q_r((1-L)/2), Q_r((1+L)/2)].

* **Held-out families, not validation configs**: the validation configs of our splits come from
  the training families (:mod:`predictor.dataset`), so their errors understate the error on an
  unseen family; the calibration set is the split's held-out (test) families.
* **Leave-family-out**: a trace of a calibration family gets the quantiles of the *other*
  families (a cross-conformal step by family groups), so every coverage we report, and every
  interval the simulator plans with for a workload job (the workload set is those families), is out of
  sample; a trace of a new family gets all of them.
* **By family groups**: each trace weighs 1 / (its family's trace count), so every family counts
  alike: a family with many configs must not set the interval for the others, and the quantiles
  describe "a trace of a family not yet seen", which is where the model is used.
* **Split-conformal correction**: the weights sum to n / (n + 1) and the last 1 / (n + 1) lies at
  +∞ (upper quantiles) or −∞ (lower ones), so for exchangeable traces each one-sided quantile
  covers with probability ≥ q; a level the calibration set is too small for has an infinite
  bound (:meth:`IntervalCalibration.max_level`).
* **Log-ratios**: the error is relative (10 % on 1 ms and on 1 s alike), and bounds stay positive.
* **Mondrian by family group** (CNN, decoder LM, speech, ... :func:`predictor.common.families.group_of`):
  a trace's quantiles come from the calibration families of its own group only, since one
  calibration pooling families whose errors differ by an order of magnitude or more is far too
  wide for most and too narrow for some (measured: docs/accuracy.md, the real CPU intervals).
  A group with fewer than :data:`MIN_GROUP_FAMILIES` calibration families besides the trace's
  own, or too few traces for the quantile asked (an infinite bound), falls back to the pooled
  residuals, as does a family of no known group. Conformal guarantees hold within each
  group (Vovk et al., Mondrian conformal predictors).

Why not quantile heads or an ensemble: they need every method retrained (four architectures,
twelve checkpoints) and still need a held-out calibration to be trusted on unseen families; the
conformal step costs one pass over the held-out traces and nothing at prediction time.

This module imports no torch: the simulator reads stored calibrations without loading a model.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from predictor.common.families import group_of
from predictor.common.inputs import Checker, check_probability

DEFAULT_LEVEL = 0.9
MIN_GROUP_FAMILIES = 3  # calibration families of a group (the trace's own left out) for its own quantiles
RELIABILITY_LEVELS = (0.5, 0.6, 0.7, 0.8, 0.9, 0.95)


def check_level(value) -> float:
    return check_probability(value, "level")


@dataclass(frozen=True)
class IntervalCalibration:
    """The conformal calibration of one model: held-out log-ratios and the family of each."""

    log_ratios: np.ndarray  # sorted ascending, log(true / predicted)
    family_index: np.ndarray  # per log-ratio, its family (index into ``families``)
    families: tuple[str, ...]  # the calibration families
    source: str  # what it was calibrated on (for reports)
    family_groups: tuple[str, ...] = ()  # the group of each calibration family; () pools every family

    def group_for(self, family: str | None) -> str | None:
        """The group whose residuals calibrate a trace of ``family`` (None: pooled)."""
        if not self.family_groups or family is None:
            return None
        if family in self.families:
            return self.family_groups[self.families.index(family)]
        return group_of(family)

    @property
    def traces(self) -> int:
        return len(self.log_ratios)

    def _keep(self, family: str | None, pooled: bool) -> np.ndarray:
        """Which calibration traces calibrate a trace of ``family``: every other family's, or only
        those of its group's other families (unless ``pooled`` or the group has too few)."""
        keep = (np.ones(self.traces, dtype=bool) if family not in self.families
                else self.family_index != self.families.index(family))
        group = None if pooled else self.group_for(family)
        if group is not None:
            in_group = (np.asarray(self.family_groups, dtype=object) == group)[self.family_index] & keep
            if len(np.unique(self.family_index[in_group])) >= MIN_GROUP_FAMILIES:
                return in_group
        return keep

    def _sample(self, family: str | None, pooled: bool = False) -> tuple[np.ndarray, np.ndarray]:
        """The sorted log-ratios and conformal weights calibrating a trace of ``family`` (its own
        family left out; its group's, when there are enough): each family alike, summing to
        n / (n + 1)."""
        keep = self._keep(family, pooled)
        ratios, codes = self.log_ratios[keep], self.family_index[keep]
        if len(ratios) == 0:
            return ratios, np.zeros(0)
        _, groups, counts = np.unique(codes, return_inverse=True, return_counts=True)
        n = len(ratios)
        return ratios, 1.0 / (len(counts) * counts[groups]) * (n / (n + 1))

    def log_quantile(self, q: float, family: str | None = None) -> float:
        """Q_r(q), the conformal q-quantile of log(true / predicted) for a trace of ``family``
        (left out when it is a calibration family), within its group where the group can say;
        ±inf when too few traces are left for it even pooled."""
        q = check_probability(q, "quantile")
        value = self._quantile(q, *self._sample(family))
        if math.isinf(value) and self.group_for(family) is not None:
            value = self._quantile(q, *self._sample(family, pooled=True))
        return value

    @staticmethod
    def _quantile(q: float, ratios: np.ndarray, weights: np.ndarray) -> float:
        if q >= 0.5:  # the smallest r whose cumulative weight reaches q
            cum = np.cumsum(weights)
            at = int(np.searchsorted(cum, q - 1e-12, side="left"))
            return float(ratios[at]) if at < len(cum) else math.inf
        tail = np.cumsum(weights[::-1])  # the largest r whose upper-tail weight reaches 1 - q
        at = int(np.searchsorted(tail, (1 - q) - 1e-12, side="left"))
        return float(ratios[::-1][at]) if at < len(tail) else -math.inf

    def factor(self, q: float, family: str | None = None) -> float:
        """The q-quantile of true / predicted for a trace of ``family`` (0 or inf where the
        calibration cannot say)."""
        return math.exp(self.log_quantile(q, family))

    def factors(self, q: float, families) -> np.ndarray:
        """:meth:`factor` for each entry of ``families`` (one computation per distinct family)."""
        families = np.asarray(families, dtype=object)
        if len(families) == 0:
            return np.zeros(0)
        names, codes = np.unique(families.astype(str), return_inverse=True)
        return np.array([self.factor(q, f) for f in names])[codes]

    def bounds(self, predicted, level: float = DEFAULT_LEVEL, families=None) -> tuple[np.ndarray, np.ndarray]:
        """(low, high) of the central ``level`` interval around each prediction; ``families``
        (one per prediction, or None: a new family) selects leave-family-out quantiles."""
        level = check_level(level)
        predicted = np.asarray(predicted, dtype="float64")
        fam = np.full(predicted.shape, None, dtype=object) if families is None else np.asarray(families, dtype=object)
        return (predicted * self.factors((1 - level) / 2, fam.ravel()).reshape(predicted.shape),
                predicted * self.factors((1 + level) / 2, fam.ravel()).reshape(predicted.shape))

    def max_level(self, family: str | None = None) -> float:
        """The highest two-sided level whose bounds are finite, (n - 1) / (n + 1) for the n traces
        used (pooled: a group too small for a level falls back to them): each tail's quantile
        (1 + L) / 2 must lie within the finite mass n / (n + 1)."""
        return max(0.0, 2.0 * float(self._sample(family, pooled=True)[1].sum()) - 1.0)

    @property
    def kind(self) -> str:
        return ("split-conformal/log-ratio/family-weighted/leave-family-out"
                + ("/mondrian-by-group" if self.family_groups else ""))

    def to_dict(self) -> dict:
        return {"kind": self.kind, "log_ratios": self.log_ratios.tolist(), "family_index": self.family_index.tolist(),
                "families": list(self.families), "source": self.source,
                **({"family_groups": list(self.family_groups)} if self.family_groups else {})}

    @classmethod
    def from_dict(cls, data: object, check: Checker | None = None) -> IntervalCalibration:
        """The calibration :meth:`to_dict` stored, every value checked (a stranger's checkpoint
        holds it): finite log-ratios in ascending order, one family index in range per ratio,
        distinct family names. ``check`` names a bad field (default: ValueError "intervals.x")."""
        check = check or Checker(lambda field: f"intervals: field {field!r}", ValueError)
        data = check.mapping(data, "")
        ratios = check.numbers(data.get("log_ratios"), "log_ratios", ascending=True)
        families = check.texts(data.get("families"), "families", distinct=True)
        index = check.sequence(data.get("family_index"), "family_index", len(ratios))
        for i, code in enumerate(index):
            check.integer(code, f"family_index[{i}]", 0, max(len(families) - 1, 0))
        if ratios and not families:
            raise check.fail("families", "must name the family of each log-ratio")
        check.text(data.get("kind", ""), "kind", longest=200)
        groups = data.get("family_groups", [])
        if groups:
            check.sequence(groups, "family_groups", len(families))
            for i, g in enumerate(groups):
                check.text(g, f"family_groups[{i}]", longest=200)
        return cls(np.asarray(ratios, dtype="float64"), np.asarray(index, dtype=np.int64), tuple(families),
                   check.text(data.get("source", ""), "source"), tuple(groups))

    def describe(self) -> dict:
        groups = dict(zip(self.families, self.family_groups))
        return {"traces": self.traces, "families": list(self.families), "source": self.source, "kind": self.kind,
                "groups": {g: sum(v == g for v in groups.values()) for g in sorted(set(groups.values()))},
                "max_finite_level_new_family": round(self.max_level(), 4)}


def calibrate(per_trace: pd.DataFrame, source: str = "", by_group: bool = True) -> IntervalCalibration:
    """The calibration from held-out traces' ``pred_us``, ``true_us`` and ``family`` (one row per
    trace, as :func:`predictor.evaluate.evaluate` gives), Mondrian by family group unless
    ``by_group`` is False; ValueError for unusable rows."""
    missing = [c for c in ("pred_us", "true_us", "family") if c not in per_trace.columns]
    if missing:
        raise ValueError(f"calibration traces lack column(s) {', '.join(missing)}")
    if per_trace.empty:
        raise ValueError("no held-out traces to calibrate the intervals on")
    pred, true = per_trace["pred_us"].to_numpy(float), per_trace["true_us"].to_numpy(float)
    bad = ~((pred > 0) & (true > 0) & np.isfinite(pred) & np.isfinite(true))
    if bad.any():
        row = per_trace[bad].iloc[0]
        raise ValueError(f"calibration trace {row.get('config_id', '?')!r}: predicted {row['pred_us']!r} µs, true "
                         f"{row['true_us']!r} µs: both must be positive and finite")
    names, codes = np.unique(per_trace["family"].astype(str).to_numpy(), return_inverse=True)
    ratios = np.log(true / pred)
    order = np.argsort(ratios, kind="stable")
    groups = tuple(group_of(f) for f in names.tolist()) if by_group else ()
    return IntervalCalibration(ratios[order], codes[order].astype(np.int64), tuple(names.tolist()), source, groups)


def with_bounds(per_trace: pd.DataFrame, calibration: IntervalCalibration,
                level: float = DEFAULT_LEVEL) -> pd.DataFrame:
    """``per_trace`` plus ``low_us``, ``high_us`` and, where ``true_us`` is known, ``inside``."""
    low, high = calibration.bounds(per_trace["pred_us"], level, per_trace["family"])
    out = per_trace.assign(low_us=low, high_us=high)
    if "true_us" in out:
        out["inside"] = (out["true_us"] >= low) & (out["true_us"] <= high)
    return out


def interval_metrics(per_trace: pd.DataFrame, calibration: IntervalCalibration,
                     level: float = DEFAULT_LEVEL) -> dict:
    """Coverage (share of traces whose true time lies inside) and median relative width
    ((high - low) / predicted) of the ``level`` intervals, leave-family-out for calibration families;
    over the traces whose interval is bounded (``interval_unbounded`` counts the others: too few
    calibration traces left for that level; None when none is bounded)."""
    t = with_bounds(per_trace, calibration, level)
    bounded = np.isfinite(t["high_us"]) & (t["low_us"] > 0)
    t = t[bounded]
    width = (t["high_us"] - t["low_us"]) / t["pred_us"]
    return {"interval_level": level, "interval_coverage": float(t["inside"].mean()) if len(t) else None,
            "interval_width": float(np.median(width)) if len(t) else None,
            "interval_unbounded": int((~bounded).sum())}


def reliability(per_trace: pd.DataFrame, calibration: IntervalCalibration,
                levels=RELIABILITY_LEVELS) -> pd.DataFrame:
    """Nominal against observed coverage, one row per level (the reliability diagram's points)."""
    rows = []
    for level in levels:
        m = interval_metrics(per_trace, calibration, level)
        rows.append({"level": level, "coverage": m["interval_coverage"], "width": m["interval_width"]})
    return pd.DataFrame(rows)

"""How good a predictor is: iteration-level MRE / RMSE / WAPE, and where its error comes from.

Why: one number hides where a predictor fails. Besides the paper's metrics (predictors.md §1.5:
MRE = mean |y − ŷ| / y over iterations, RMSE in ms, WAPE = Σ|y − ŷ| / Σy) we report the error by
op-count bucket (the paper's 0–250, 250–550, 550–800, 800+), by phase and by op type with kernel
duration and gap separately (as WAPE over the ops of the group, because single tiny ops make
per-op relative errors meaningless), and the convergence curve stored with the model.

Any predictor of :mod:`predictor.methods` can be evaluated: per-op ones through
``predict_ops(traces)`` (the trace rows plus ``pred_duration_us`` and ``pred_gap_us``, which also
gives the per-op breakdowns), whole-iteration ones (DNNPerf-style) through
``iteration_times(traces)``. The truth is always computed here, from the traces themselves.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from predictor.intervals import DEFAULT_LEVEL, IntervalCalibration, calibrate, interval_metrics, reliability

BUCKETS = ((0, 250, "0-250"), (250, 550, "250-550"), (550, 800, "550-800"), (800, np.inf, "800+"))


def _wape(pred: pd.Series, true: pd.Series) -> float:
    denominator = float(np.abs(true).sum())
    return float(np.abs(pred - true).sum() / denominator) if denominator > 0 else float("nan")


def headline_metrics(pred_us: np.ndarray, true_us: np.ndarray) -> dict:
    """MRE, RMSE and WAPE; a zero true time makes the MRE infinite (said so, not warned about)."""
    pred_us, true_us = np.asarray(pred_us, float), np.asarray(true_us, float)
    with np.errstate(divide="ignore", invalid="ignore"):
        return {"traces": int(len(true_us)),
                "mre": float(np.mean(np.abs(pred_us - true_us) / true_us)),
                "rmse_ms": float(np.sqrt(np.mean(((pred_us - true_us) / 1e3) ** 2))),
                "wape": float(np.abs(pred_us - true_us).sum() / true_us.sum())}


@dataclass
class Evaluation:
    per_trace: pd.DataFrame  # per config: family, model, ops, pred_us, true_us, rel_err
    ops: pd.DataFrame | None = None  # per op (per-op methods only): trace columns + pred_duration_us, pred_gap_us
    history: list[dict] = field(default_factory=list)
    calibration: IntervalCalibration | None = None  # the model's intervals (None: it has none)
    level: float = DEFAULT_LEVEL

    def headline(self) -> dict:
        t = self.per_trace
        return headline_metrics(t["pred_us"].to_numpy(), t["true_us"].to_numpy())

    def by_bucket(self) -> pd.DataFrame:
        t = self.per_trace
        rows = []
        for lo, hi, label in BUCKETS:
            part = t[(t["ops"] >= lo) & (t["ops"] < hi)]
            if len(part):
                rows.append({"ops": label, **headline_metrics(part["pred_us"], part["true_us"])})
        return pd.DataFrame(rows)

    def by_family(self) -> pd.DataFrame:
        t = self.per_trace
        return pd.DataFrame([{"family": f, **headline_metrics(g["pred_us"], g["true_us"]), **self._intervals(g)}
                             for f, g in t.groupby("family", sort=True)])

    def _intervals(self, per_trace: pd.DataFrame) -> dict:
        """Coverage and median relative width of the model's ``level`` intervals on these traces."""
        if self.calibration is None:
            return {}
        return {k: v for k, v in interval_metrics(per_trace, self.calibration, self.level).items()
                if k != "interval_level"}

    def intervals(self) -> dict:
        """The interval figures of the JSON report: calibration, level, coverage, width and the
        reliability points (nominal against observed coverage); nulls for a model without intervals."""
        if self.calibration is None:
            return {"intervals": None, "interval_level": self.level, "interval_coverage": None,
                    "interval_width": None, "interval_unbounded": None, "reliability": []}
        return {"intervals": self.calibration.describe(), "interval_level": self.level,
                **self._intervals(self.per_trace),
                "reliability": reliability(self.per_trace, self.calibration).to_dict("records")}

    def by_group(self, keys: list[str], top: int | None = None) -> pd.DataFrame:
        """Duration and gap WAPE per group of ops (e.g. ["phase"] or ["op", "phase"]); empty for
        methods without per-op predictions (DNNPerf-style) or without per-op truth."""
        if self.ops is None:
            return pd.DataFrame(columns=[*keys, "ops", "true_ms", "duration_wape", "gap_wape"])
        rows = []
        for key, g in self.ops.groupby(keys, sort=True):
            key = key if isinstance(key, tuple) else (key,)
            rows.append({**dict(zip(keys, key)), "ops": len(g), "true_ms": g["true_total"].sum() / 1e3,
                         "duration_wape": _wape(g["pred_duration_us"], g["duration_us"]),
                         "gap_wape": _wape(g["pred_gap_us"], g["gap_us"])})
        out = pd.DataFrame(rows).sort_values("true_ms", ascending=False)
        return out.head(top) if top else out

    def to_dict(self) -> dict:
        return {**self.headline(), **self.intervals(), "by_op_count": self.by_bucket().to_dict("records"),
                "by_family": self.by_family().to_dict("records"),
                "by_phase": self.by_group(["phase"]).to_dict("records"),
                "by_op": self.by_group(["op", "phase"], top=20).to_dict("records"),
                "convergence": self.history}


def iteration_truth(traces: pd.DataFrame) -> pd.DataFrame:
    """Per config: family, model, op count and the measured iteration time (Σ duration + gap)."""
    out = traces.groupby("config_id", sort=True).agg(
        family=("family", "first"), model=("model", "first"), ops=("idx", "size"),
        duration=("duration_us", "sum"), gap=("gap_us", "sum"))
    out["true_us"] = out.pop("duration") + out.pop("gap")
    return out.reset_index()


def evaluate(model, traces: pd.DataFrame, level: float = DEFAULT_LEVEL) -> Evaluation:
    """Predict every trace of ``traces`` with ``model`` and keep what the metrics need (the
    intervals at ``level`` when the model has a calibration).

    The truth is the traces of the model's device; ``traces`` may hold other devices' rows too
    (a Habitat-style model reads its source device's traces from them)."""
    target = traces[traces["device"] == model.device]
    if target.empty:
        have = ", ".join(sorted(traces["device"].unique())) or "none"
        raise ValueError(f"no traces of {model.device} to evaluate against (have: {have})")
    if target["duration_us"].isna().any():
        raise ValueError(f"traces of {model.device} without measured durations cannot be evaluated")
    truth = iteration_truth(target)
    ops = None
    if hasattr(model, "predict_ops"):
        ops = model.predict_ops(traces)
        ops = ops.assign(pred_total=ops["pred_duration_us"] + ops["pred_gap_us"],
                         true_total=ops["duration_us"] + ops["gap_us"])
        pred = ops.groupby("config_id", sort=True)["pred_total"].sum().rename("pred_us").reset_index()
        if ops["true_total"].isna().any():  # per-op truth not aligned (e.g. two real GPUs' traces)
            ops = None
    else:
        pred = model.iteration_times(traces)[["config_id", "pred_us"]]
    per_trace = truth.merge(pred, on="config_id", how="inner", validate="one_to_one")
    missing = sorted(set(truth["config_id"]) - set(per_trace["config_id"]))
    if missing:
        raise ValueError(f"{model.device}: {len(missing)} traces got no prediction, e.g. {', '.join(missing[:3])}")
    per_trace["rel_err"] = (per_trace["pred_us"] - per_trace["true_us"]) / per_trace["true_us"]
    return Evaluation(per_trace, ops, list(getattr(model, "history", []) or []), getattr(model, "intervals", None),
                      level)


def fit_intervals(model, traces: pd.DataFrame, source: str) -> Evaluation:
    """Calibrate ``model``'s prediction intervals on held-out ``traces`` (families it never
    trained on; :mod:`predictor.intervals`) and attach them; ``source`` says what they were.
    Returns the evaluation on ``traces`` with those intervals (scored leave-family-out), so a
    caller that reports on the same traces does not predict them twice."""
    result = evaluate(model, traces)
    model.intervals = result.calibration = calibrate(result.per_trace, source)
    return result


def markdown(table: pd.DataFrame, digits: int = 4) -> str:
    """A DataFrame as a Markdown table (no extra dependency)."""
    cols = list(table.columns)

    def cell(v) -> str:
        if isinstance(v, float):
            return f"{v:.{digits}g}"
        return str(v)

    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in table.itertuples(index=False)]
    return "\n".join(lines)

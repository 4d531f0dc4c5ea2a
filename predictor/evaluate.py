"""How good a predictor is: iteration-level MRE / RMSE / WAPE, and where its error comes from.

Why: one number hides where a predictor fails. Besides the paper's metrics (predictors.md §1.5:
MRE = mean |y − ŷ| / y over iterations, RMSE in ms, WAPE = Σ|y − ŷ| / Σy) we report the error by
op-count bucket (the paper's 0–250, 250–550, 550–800, 800+), by phase and by op type with kernel
duration and gap separately (as WAPE over the ops of the group, because single tiny ops make
per-op relative errors meaningless), and the convergence curve stored with the model.

Any model with ``predict_ops(traces)`` returning the trace rows plus ``pred_duration_us`` and
``pred_gap_us`` can be evaluated (ETS and the baselines alike).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

BUCKETS = ((0, 250, "0-250"), (250, 550, "250-550"), (550, 800, "550-800"), (800, np.inf, "800+"))


def _wape(pred: pd.Series, true: pd.Series) -> float:
    denominator = float(np.abs(true).sum())
    return float(np.abs(pred - true).sum() / denominator) if denominator > 0 else float("nan")


def headline_metrics(pred_us: np.ndarray, true_us: np.ndarray) -> dict:
    pred_us, true_us = np.asarray(pred_us, float), np.asarray(true_us, float)
    return {"traces": int(len(true_us)),
            "mre": float(np.mean(np.abs(pred_us - true_us) / true_us)),
            "rmse_ms": float(np.sqrt(np.mean(((pred_us - true_us) / 1e3) ** 2))),
            "wape": float(np.abs(pred_us - true_us).sum() / true_us.sum())}


@dataclass
class Evaluation:
    ops: pd.DataFrame  # per op: trace columns + pred_duration_us, pred_gap_us
    history: list[dict] = field(default_factory=list)

    @property
    def per_trace(self) -> pd.DataFrame:
        ops = self.ops
        out = ops.groupby("config_id", sort=True).agg(
            family=("family", "first"), model=("model", "first"), ops=("idx", "size"),
            pred_us=("pred_total", "sum"), true_us=("true_total", "sum"))
        out["rel_err"] = (out["pred_us"] - out["true_us"]) / out["true_us"]
        return out.reset_index()

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
        return pd.DataFrame([{"family": f, **headline_metrics(g["pred_us"], g["true_us"])}
                             for f, g in t.groupby("family", sort=True)])

    def by_group(self, keys: list[str], top: int | None = None) -> pd.DataFrame:
        """Duration and gap WAPE per group of ops (e.g. ["phase"] or ["op", "phase"])."""
        rows = []
        for key, g in self.ops.groupby(keys, sort=True):
            key = key if isinstance(key, tuple) else (key,)
            rows.append({**dict(zip(keys, key)), "ops": len(g), "true_ms": g["true_total"].sum() / 1e3,
                         "duration_wape": _wape(g["pred_duration_us"], g["duration_us"]),
                         "gap_wape": _wape(g["pred_gap_us"], g["gap_us"])})
        out = pd.DataFrame(rows).sort_values("true_ms", ascending=False)
        return out.head(top) if top else out

    def to_dict(self) -> dict:
        return {**self.headline(), "by_op_count": self.by_bucket().to_dict("records"),
                "by_family": self.by_family().to_dict("records"),
                "by_phase": self.by_group(["phase"]).to_dict("records"),
                "by_op": self.by_group(["op", "phase"], top=20).to_dict("records"),
                "convergence": self.history}


def evaluate(model, traces: pd.DataFrame) -> Evaluation:
    """Predict every trace of ``traces`` with ``model`` and keep what the metrics need."""
    if traces.empty:
        raise ValueError("no traces to evaluate")
    ops = model.predict_ops(traces)
    ops = ops.assign(pred_total=ops["pred_duration_us"] + ops["pred_gap_us"],
                     true_total=ops["duration_us"] + ops["gap_us"])
    return Evaluation(ops, list(getattr(model, "history", []) or []))


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

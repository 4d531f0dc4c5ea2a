"""A sweep's results compared with the truth runs: per-point ratios, the pooled ratio, the table
``simrun sweep`` prints.

Why: the paper's claims are ratios to the truth predictor on the same jobs; the matching of a
point to its truth run and the one aggregation over seeds (:func:`pooled_ratio`) live here, so
that the sweep table, the plots (:mod:`simulator.plots`) and the paper reproduction show the
same numbers.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from simulator.run import DEFAULT_WORKLOAD, RunConfig

# A run's identity apart from its predictor: rows sharing these are compared with the truth run.
MATCH_COLUMNS = ("policy", "trace", "workload", "limit", "cluster", "seed", "deadline_fraction",
                 "reference_gpu", "load_scale", "bind", "observe_after", "placement", "communication", "failures",
                 "checkpoint_every")


def source_label(row: Any) -> str:
    """The workload or trace of a result row, for tables and plot titles."""
    trace = row["trace"] if not isinstance(row, RunConfig) else row.trace
    workload = row["workload"] if not isinstance(row, RunConfig) else row.workload
    if isinstance(trace, str) and trace:
        kind, _, path = trace.partition(":")
        return f"{kind}:{Path(path).name}"
    return workload if isinstance(workload, str) and workload else DEFAULT_WORKLOAD


def normalise_to_truth(results: pd.DataFrame, metrics: Sequence[str] = ("jct_mean", "tardiness_total")) -> pd.DataFrame:
    """The ok rows with ``<metric>_ratio`` = metric / the same metric of the truth run that shares
    :data:`MATCH_COLUMNS`: policy, workload/trace, limit, cluster, seed, deadline fraction, reference
    GPU, load scale, binding and online feedback.

    NaN where there is no truth run; for a truth value of 0 the ratio is 1 when the row's value
    is 0 too, else NaN (undefined). Adds ``source`` (workload or trace label) and ``<metric>_truth``.
    """
    ok = results[results["status"] == "ok"].copy()
    ok["source"] = [source_label(r) for _, r in ok.iterrows()] if len(ok) else []
    if ok.empty:
        for m in metrics:
            ok[f"{m}_ratio"] = []
        return ok
    columns = [c for c in MATCH_COLUMNS if c in ok.columns]  # results written before a field existed lack it
    keys = ["_m_" + c for c in columns]
    for c, k in zip(columns, keys):  # NaN/None never compare equal: match on text
        ok[k] = ok[c].astype(object).where(ok[c].notna(), "<none>").astype(str)
    truth = ok[ok["predictor"] == "truth"][keys + list(metrics)].drop_duplicates(keys)
    merged = ok.merge(truth, on=keys, how="left", suffixes=("", "_truth"))
    for m in metrics:
        num, den = merged[m].astype(float), merged[f"{m}_truth"].astype(float)
        with np.errstate(divide="ignore", invalid="ignore"):
            ratio = num / den
        ratio = ratio.where(den != 0, np.where((den == 0) & (num == 0), 1.0, np.nan))
        merged[f"{m}_ratio"] = ratio
    return merged.drop(columns=keys)


def pooled_ratio(norm: pd.DataFrame, metric: str) -> float:
    """sum of ``metric`` / sum of its truth values over the rows of ``norm`` (from
    :func:`normalise_to_truth`) that have a truth run: robust to near-zero truth tardiness, where
    the mean of per-point ratios explodes. 1 when both sums are 0, NaN when only the truth's is.
    The one aggregation of the sweep table and of the plots, so that both show the same number."""
    matched = norm[norm[f"{metric}_truth"].notna()]
    den = matched[f"{metric}_truth"].sum()
    num = matched[metric].sum()
    return float(num / den) if den > 0 else (1.0 if len(matched) and num == 0 else float("nan"))


def summary_table(results: pd.DataFrame) -> pd.DataFrame:
    """Mean JCT / total tardiness per policy x predictor (over workloads, seeds, loads), with the
    pooled ratio to the matching truth runs (:func:`pooled_ratio`) and counts of ok / failed points."""
    norm = normalise_to_truth(results)
    counts = results.groupby(["policy", "predictor"])["status"].agg(
        ok=lambda s: int((s == "ok").sum()), failed=lambda s: int((s != "ok").sum()))
    if norm.empty:
        return counts.reset_index()
    groups = norm.groupby(["policy", "predictor"])
    agg = pd.DataFrame({
        "jct_mean": groups["jct_mean"].mean(),
        "jct_ratio": groups.apply(lambda g: pooled_ratio(g, "jct_mean"), include_groups=False),
        "tardiness_total": groups["tardiness_total"].mean(),
        "tardiness_ratio": groups.apply(lambda g: pooled_ratio(g, "tardiness_total"), include_groups=False),
    })
    return counts.join(agg, how="left").reset_index()


def format_table(table: pd.DataFrame) -> str:
    """The summary table as aligned text."""
    if table.empty:
        return "  (no points)"
    head = ["policy", "predictor", "ok", "failed", "JCT mean (s)", "xtruth", "tardiness (s)", "xtruth"]

    def num(x, fmt):
        return "-" if x is None or pd.isna(x) else format(x, fmt)

    rows = [[str(r["policy"]), str(r["predictor"]), str(r["ok"]), str(r["failed"]),
             num(r.get("jct_mean"), ",.0f"), num(r.get("jct_ratio"), ".3f"),
             num(r.get("tardiness_total"), ",.0f"), num(r.get("tardiness_ratio"), ".3f")]
            for _, r in table.iterrows()]
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(head)]
    lines = ["  " + "  ".join(h.ljust(w) if i < 2 else h.rjust(w) for i, (h, w) in enumerate(zip(head, widths)))]
    for r in rows:
        lines.append("  " + "  ".join(v.ljust(w) if i < 2 else v.rjust(w) for i, (v, w) in enumerate(zip(r, widths))))
    return "\n".join(lines)

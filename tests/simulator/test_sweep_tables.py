"""A sweep's results against the truth runs: matching, ratios (zero truth), the summary table."""

from __future__ import annotations

import pandas as pd
import pytest

from simulator.sweep.tables import normalise_to_truth, summary_table


def test_normalise_to_truth_matches_runs_and_handles_zero_truth():
    base = dict(trace=None, workload="w", limit=None, cluster="c", deadline_fraction=0.2, reference_gpu=None,
                bind=False, observe_after=None, load_scale=1.0, status="ok")
    rows = [
        dict(base, policy="a", predictor="truth", seed=0, jct_mean=100.0, tardiness_total=0.0),
        dict(base, policy="a", predictor="noisy:0.1", seed=0, jct_mean=110.0, tardiness_total=0.0),
        dict(base, policy="a", predictor="ets", seed=0, jct_mean=90.0, tardiness_total=5.0),
        dict(base, policy="a", predictor="ets", seed=1, jct_mean=90.0, tardiness_total=5.0),  # no truth for seed 1
        dict(base, policy="b", predictor="truth", seed=0, jct_mean=200.0, tardiness_total=10.0),
        dict(base, policy="b", predictor="ets", seed=0, jct_mean=300.0, tardiness_total=25.0),
        dict(base, policy="b", predictor="ets", seed=0, jct_mean=1.0, tardiness_total=1.0, status="error"),
    ]
    norm = normalise_to_truth(pd.DataFrame(rows)).set_index(["policy", "predictor", "seed"])
    assert len(norm) == 6
    assert norm.loc[("a", "noisy:0.1", 0), "jct_mean_ratio"] == pytest.approx(1.1)
    assert norm.loc[("a", "noisy:0.1", 0), "tardiness_total_ratio"] == 1.0  # 0 / 0
    assert pd.isna(norm.loc[("a", "ets", 0), "tardiness_total_ratio"])      # 5 / 0
    assert pd.isna(norm.loc[("a", "ets", 1), "jct_mean_ratio"])             # no truth run
    assert norm.loc[("b", "ets", 0), "jct_mean_ratio"] == pytest.approx(1.5)
    assert norm.loc[("b", "ets", 0), "tardiness_total_ratio"] == pytest.approx(2.5)
    table = summary_table(pd.DataFrame(rows)).set_index(["policy", "predictor"])
    assert table.loc[("b", "ets"), "ok"] == 1 and table.loc[("b", "ets"), "failed"] == 1
    assert table.loc[("a", "ets"), "jct_ratio"] == pytest.approx(0.9)  # only the matched seed

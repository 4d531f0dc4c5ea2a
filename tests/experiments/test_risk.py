"""experiments.risk: ratios to the policy's own truth run and the change against the point estimate."""

from __future__ import annotations

import pandas as pd
import pytest

from experiments.risk import against_point, grid, ratios, setting_of


def row(policy, predictor, seed, late, tardiness, jct):
    return {"status": "ok", "policy": policy, "predictor": predictor, "seed": seed, "workload": "pai-like:10",
            "trace": None, "late_jobs": late, "tardiness_total": tardiness, "jct_mean": jct}


def test_ratios_pool_over_seeds_against_the_plain_policy_with_truth():
    results = pd.DataFrame([
        row("hydra", "truth", 0, 1, 10.0, 100.0), row("hydra", "truth", 1, 1, 30.0, 300.0),
        row("hydra", "ets", 0, 2, 30.0, 110.0), row("hydra", "ets", 1, 2, 50.0, 300.0),
        row("hydra:deadline_quantile=0.9", "ets", 0, 1, 10.0, 120.0),
        row("hydra:deadline_quantile=0.9", "ets", 1, 0, 10.0, 310.0)])
    table = ratios(results).set_index("setting")
    assert table.loc["point", "tardiness_total_ratio"] == pytest.approx(80 / 40)  # sums, not mean of ratios
    assert table.loc["0.9", "tardiness_total_ratio"] == pytest.approx(20 / 40)
    assert table.loc["0.9", "late_jobs_ratio"] == pytest.approx(1 / 2)
    assert table.loc["0.9", "jct_mean_ratio"] == pytest.approx(430 / 400)
    change = against_point(ratios(results)).iloc[0]
    assert change["tardiness_total_change"] == pytest.approx((10 - 40) / 40)  # seed means 10 against 40
    assert change["jct_mean_change"] == pytest.approx((215 - 205) / 205)


def test_the_grid_has_every_setting_predictor_and_a_truth_run_per_policy():
    points = grid(50, 3)
    assert {setting_of(p.policy) for p in points} == {(p, s) for p in ("hydra", "edf")
                                                      for s in ("point", "0.5", "0.8", "0.9", "0.95")}
    assert {p.predictor for p in points} == {"truth", "ets", "habitat", "dnnperf", "noisy:0.1", "noisy:0.2"}
    truth = [p for p in points if p.predictor == "truth"]
    assert {p.policy for p in truth} == {"hydra", "edf"} and len(truth) == 2 * 2 * 3
    assert all(p.bound for p in points)  # every predictor sees the same bound jobs
    assert len(points) == 2 * 5 * 5 * 2 * 3 + len(truth)

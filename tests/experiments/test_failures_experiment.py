"""experiments/failures.py: the ratios to the runs without failures, the best interval, the grid,
and one tiny real sweep through node failures."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from experiments import failures as experiment
from experiments.failures import (
    NEVER,
    NO_END,
    OPTIMAL,
    best_intervals,
    cells,
    checkpoint_cells,
    checkpoint_markdown,
    degradation,
    detail_markdown,
    failed_markdown,
    failed_points,
    growth_markdown,
    least_degraded,
)


def _row(policy, failures, seed, jct, tardiness=0.0, *, every=None, predictor="truth", error=None, **summary):
    with_failures = failures != "none"
    return {"status": "ok" if error is None else "error", "error": error, "key": f"{policy}{seed}{failures}{every}",
            "workload": "philly-like:10", "policy": policy, "predictor": predictor, "seed": seed,
            "failures": failures, "checkpoint_every": every, "jct_mean": jct, "tardiness_total": tardiness,
            "jobs": 10, "jobs_failed": summary.get("failed", 0) if with_failures else np.nan,
            "jobs_cancelled": summary.get("cancelled", 0) if with_failures else np.nan,
            "goodput": summary.get("goodput", 1.0), "failed_attempts": summary.get("attempts", 0),
            "interval_s": summary.get("interval_s", np.nan)}


def _frame() -> pd.DataFrame:
    return pd.DataFrame([
        _row("fifo", "none", 0, 100.0, 10.0), _row("fifo", "none", 1, 300.0, 0.0),
        _row("fifo", "nodes:0.05", 0, 120.0, 20.0, goodput=0.9, attempts=3, interval_s=5000.0),
        _row("fifo", "nodes:0.05", 1, 330.0, 5.0, goodput=0.8, attempts=5, failed=2, cancelled=1, interval_s=7000.0),
        _row("hydra", "none", 0, 100.0), _row("hydra", "none", 1, 200.0),
        _row("hydra", "nodes:0.05", 0, 100.0), _row("hydra", "nodes:0.05", 1, 0.0, error="PolicyError: boom"),
        _row("sjf", "none", 0, 100.0), _row("sjf", "none", 1, 100.0),
        _row("sjf", "nodes:0.05", 0, 110.0), _row("sjf", "nodes:0.05", 1, 104.0),
    ])


def test_ratios_pool_over_seeds_and_a_cell_with_a_failed_point_stays_empty():
    table = cells(_frame()).set_index("policy")
    fifo = table.loc["fifo"]
    assert fifo["jct_ratio"] == pytest.approx(450 / 400)  # sum / sum, not the mean of 1.2 and 1.1
    assert (fifo["jct_ratio_min"], fifo["jct_ratio_max"]) == pytest.approx((1.1, 1.2))
    assert fifo["tardiness_ratio"] == pytest.approx(25 / 10)
    assert fifo["jct_added_h"] == pytest.approx(25 / 3600)
    assert fifo["goodput"] == pytest.approx(0.85) and fifo["failed_attempts"] == pytest.approx(4.0)
    assert fifo["ended_failed_share"] == pytest.approx((0 + 3 / 10) / 2)
    assert fifo["interval"] == OPTIMAL and fifo["interval_s"] == pytest.approx(6000.0)
    hydra = table.loc["hydra"]  # one seed failed: never pooled over the other alone
    assert hydra["error"].startswith("1 of 2 points failed: PolicyError") and np.isnan(hydra["jct_ratio"])
    assert table.loc["sjf", "tardiness_ratio"] == 1.0  # 0 / 0: unchanged
    assert "none" not in set(table["failures"])  # the baselines are the unit, not rows
    assert "| philly-like | hydra | error |" in growth_markdown(degradation(table.reset_index()))
    assert "| philly-like | fifo | truth | nodes:0.05 | " in detail_markdown(degradation(table.reset_index()))


def test_the_least_degraded_policy_is_the_least_pooled_ratio_among_those_with_a_result():
    least = least_degraded(degradation(cells(_frame())))
    row = least[least["failures"] == "nodes:0.05"].iloc[0]
    assert (row["least"], row["most"], row["policies"]) == ("sjf", "fifo", 2)  # 214/200 = 1.07 < 1.125
    assert row["least_ratio"] == pytest.approx(1.07)
    overall = least[least["failures"].str.startswith("overall")].iloc[0]
    assert overall["least"] == "sjf"


def _interval_rows() -> pd.DataFrame:
    rows = []
    for seed in (0, 1):
        rows.append(_row("hydra", "none", seed, 100.0))
        rows.append(_row("hydra", "nodes:0.2", seed, 130.0, goodput=0.95, interval_s=3000.0))
        rows.append(_row("hydra", "nodes:0.2", seed, 120.0, every="600", goodput=0.93, interval_s=600.0))
        rows.append(_row("hydra", "nodes:0.2", seed, 125.0, every="3600", goodput=0.96, interval_s=3600.0))
        rows.append(_row("hydra", "nodes:0.01", seed, 101.0, interval_s=9000.0))
        rows.append(_row("hydra", "nodes:0.01", seed, 102.0, every=NEVER, goodput=0.99))
        rows.append(_row("hydra", "nodes:0.2", seed, 0.0, every=NEVER, error=None if seed else
                         f"SimulationError: job 7 failed 1,001 times by simulated time 1e+07 s: it {NO_END}"))
        rows.append(_row("fifo", "nodes:0.2", seed, 1.0, every="600"))  # not a checkpoint policy
    return pd.DataFrame(rows)


def test_the_best_interval_per_rate_by_jct_and_by_goodput_beside_young_daly():
    points = checkpoint_cells(cells(_interval_rows()))
    assert set(points["policy"]) == {"hydra"} and set(points["rate"]) == {0.01, 0.2}
    best = best_intervals(points).set_index("rate")
    high = best.loc[0.2]
    assert (high["best_jct"], high["best_goodput"]) == ("600", "3600")
    assert high["young_daly_s"] == 3000.0 and high["best_vs_young_daly"] == pytest.approx(120 / 130)
    assert high["best_jct_ratio"] == pytest.approx(1.2) and high["young_daly_jct_ratio"] == pytest.approx(1.3)
    low = best.loc[0.01]
    assert low["best_jct"] == OPTIMAL and low["best_vs_young_daly"] == 1.0 and low["best_goodput"] == OPTIMAL
    text = checkpoint_markdown(points, best_intervals(points))
    assert "| optimal | 600 | 3600 | none |" in text and "| philly-like | hydra | 0.2 | 3,000 | 600 |" in text
    assert "| 1.250 (0.960) | no end (1 of 2) |" in text  # the run that could not end: a result, not pooled


def test_runs_that_cannot_end_are_a_result_and_other_failures_errors_with_their_traceback(tmp_path):
    frame = pd.concat([_frame(), _interval_rows()], ignore_index=True)
    (tmp_path / "runs" / "hydra1nodes:0.05None").mkdir(parents=True)
    (tmp_path / "runs" / "hydra1nodes:0.05None" / "error.txt").write_text("Traceback\n  at policies/x.py\nboom\n")
    failed = failed_points(frame, tmp_path).set_index("kind")
    assert failed.loc["no end", "interval"] == NEVER and failed.loc["no end", "points"] == 1
    assert failed.loc["error", "traceback"].endswith("boom\n") and failed.loc["error", "failures"] == "nodes:0.05"
    text = failed_markdown(failed.reset_index())
    assert "Runs that cannot end" in text and "Errors:" in text and "at policies/x.py" in text


def test_the_grid_binds_every_point_and_runs_each_rate_without_checkpoints_too():
    points = experiment.grid(20, 2, policies=("fifo", "gavel"), predictors=("truth", "ets"),
                             failures=("none", "nodes:0.05"), rates=(0.05, 0.2), intervals=(600,),
                             checkpoint_policies=("hydra",))
    assert all(p.bind for p in points) and len(points) == len(set(points))
    degradation_points = [p for p in points if p.policy != "hydra"]
    assert len(degradation_points) == 2 * 2 * 2 * 2 * 2  # policies x predictors x workloads x seeds x models
    assert all(p.checkpoint_every is None for p in degradation_points)
    hydra = {(p.failures, p.checkpoint_every) for p in points if p.policy == "hydra"}
    assert hydra == {("none", None), ("nodes:0.05", None), ("nodes:0.05", "600"), ("nodes:0.05", NEVER),
                     ("nodes:0.2", None), ("nodes:0.2", "600"), ("nodes:0.2", NEVER)}
    assert {p.predictor for p in points if p.policy == "hydra"} == {"truth"}


def test_a_tiny_sweep_runs_node_failures_and_reads_young_dalys_interval(tmp_path):
    from simulator.run import RunConfig

    configs = [RunConfig(policy="fifo", predictor="truth", workload="philly-like:30", deadline_fraction=0.2,
                         failures=f, checkpoint_every=c)  # unbound: no table to build; plan()'s deadline fraction
               for f, c in (("none", None), ("nodes:0.2", None), ("nodes:0.2", "600"))]
    results = experiment.sweep(configs, tmp_path / "sweep", workers=1)
    assert (results["status"] == "ok").all() and len(results) == 3
    optimal = results[(results["failures"] == "nodes:0.2") & results["checkpoint_every"].isna()].iloc[0]
    fixed = results[results["checkpoint_every"] == "600"].iloc[0]
    assert optimal["interval_s"] > 0 and fixed["interval_s"] == 600.0
    table = cells(results)
    assert len(table) == 2 and table["error"].isna().all() and (table["jct_ratio"] > 0).all()
    assert set(table["interval"]) == {OPTIMAL, "600"}
    assert (table["failed_attempts"] > 0).all() and (table["goodput"] < 1).all()  # nodes did fail (seeded)
    models = experiment.sources(results, tmp_path / "sweep")
    assert models["nodes:0.2"][0]["rate_per_gpu_day"] == 0.2

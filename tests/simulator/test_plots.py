"""``simrun plot``: files for a sweep and a single run, and the plotted numbers against hand
computations from results.parquet and per-job records."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

from simulator.cli import main
from simulator.plots import bar_data, error_curve_data, plot, utilisation_series
from simulator.run import RunConfig, execute
from simulator.sweep import plan, run_sweep

FIGURES = ("jct_mean_vs_truth", "tardiness_total_vs_truth", "jct_vs_error", "jct_cdf", "utilisation")


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    out = tmp_path_factory.mktemp("sweep")
    configs = plan("fifo,hydra", "truth", errors="0.1,0.3", workloads="pai-like:80,philly-like:80", seeds="2",
                   limit=60)
    run_sweep(configs, out, workers=1, progress=False)
    return out


def _truth_ratio(results: pd.DataFrame, metric: str) -> dict:
    """By hand: metric / metric of the truth row with the same policy, workload and seed."""
    truth = {(r.policy, r.workload, r.seed): getattr(r, metric)
             for r in results.itertuples() if r.predictor == "truth"}
    out: dict = {}
    for r in results.itertuples():
        if r.predictor != "truth":
            den = truth[(r.policy, r.workload, r.seed)]
            value = getattr(r, metric)
            ratio = value / den if den else (1.0 if value == 0 else np.nan)
            out.setdefault((r.workload, r.policy, r.predictor), []).append(ratio)
    return out


@pytest.mark.parametrize("metric", ["jct_mean", "tardiness_total"])
def test_bar_numbers_equal_the_hand_computation(sweep, metric):
    results = pd.read_parquet(sweep / "results.parquet")
    assert len(results) == 2 * 3 * 2 * 2 and (results["status"] == "ok").all()
    data = bar_data(results, metric).set_index(["source", "policy", "predictor"])
    expected = _truth_ratio(results, metric)
    checked = 0
    for (workload, policy, predictor), ratios in expected.items():
        ratios = [x for x in ratios if not np.isnan(x)]
        if not ratios:
            assert (workload, policy, predictor) not in data.index
            continue
        row = data.loc[(workload, policy, predictor)]
        assert row["mean"] == pytest.approx(np.mean(ratios))
        assert row["min"] == pytest.approx(min(ratios)) and row["max"] == pytest.approx(max(ratios))
        assert row["n"] == len(ratios)
        checked += 1
    assert checked >= 4
    assert (data.reset_index()["load_scale"] == 1.0).all()


def test_error_curve_numbers_equal_the_hand_computation(sweep):
    results = pd.read_parquet(sweep / "results.parquet")
    curve = error_curve_data(results).set_index(["source", "policy", "mre"])
    expected = _truth_ratio(results, "jct_mean")
    assert len(curve) == 2 * 2 * 2
    for (workload, policy, predictor), ratios in expected.items():
        mre = float(predictor.split(":")[1])
        assert curve.loc[(workload, policy, mre), "ratio"] == pytest.approx(np.mean(ratios))


def test_utilisation_series_by_hand():
    jobs = pd.DataFrame({"start": [0.0, 5.0, 10.0, np.nan], "end": [10.0, 15.0, 20.0, np.nan],
                         "num_gpus": [2, 1, 2, 4], "status": ["completed"] * 3 + ["rejected"]})
    t, u = utilisation_series(jobs, 4)
    assert list(t) == [0.0, 5.0, 10.0, 15.0, 20.0]
    # job 0 ends and job 2 starts at 10: the level there is after both
    assert list(u) == [0.5, 0.75, 0.75, 0.5, 0.0]


def test_sweep_figures_are_written(sweep, tmp_path):
    result = CliRunner().invoke(main, ["plot", str(sweep), "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    for name in FIGURES:
        for ext in ("png", "pdf"):
            path = tmp_path / f"{name}.{ext}"
            assert path.stat().st_size > 1000 and str(path) in result.output


def test_a_sweep_without_truth_skips_the_normalised_panels(tmp_path):
    run_sweep(plan("fifo", errors="0.1", workloads="pai-like:40", seeds="0,"), tmp_path / "s", workers=1,
              progress=False)
    messages: list[str] = []
    files = plot(tmp_path / "s", tmp_path / "p", log=messages.append)
    assert {p.stem for p in files} == {"jct_cdf", "utilisation"}
    assert sum("no truth point" in m for m in messages) == 3


def test_single_run_gives_cdf_and_utilisation(tmp_path):
    run = execute(RunConfig(policy="sjf", predictor="noisy:0.1", workload="pai-like:50")).write(tmp_path / "run")
    result = CliRunner().invoke(main, ["plot", str(run)])
    assert result.exit_code == 0, result.output
    assert {p.name for p in (run / "plots").iterdir()} == {"jct_cdf.png", "jct_cdf.pdf", "utilisation.png",
                                                           "utilisation.pdf"}
    bad = CliRunner().invoke(main, ["plot", str(tmp_path)])
    assert bad.exit_code == 1 and "neither a sweep directory" in bad.output

"""Timing channels: ground truth, injected error with a known mean relative error, table predictors."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from predictor.common.gpus import speed
from predictor.common.inputs import SpecError
from predictor.tables import IterationTimeTable
from simulator.timing import NoisyPredictor, TablePredictor, make_predictor, sigma_for_mre, true_runtimes
from tests.records import from_records


def test_sigma_solves_the_expected_mre_formula_by_monte_carlo():
    z = np.random.default_rng(0).standard_normal(2_000_000)
    for mre in (0.05, 0.1, 0.3, 1.0):
        s = sigma_for_mre(mre)
        assert np.mean(np.abs(np.exp(s * z) - 1)) == pytest.approx(mre, rel=0.01)


def test_noisy_predictor_hits_the_requested_mre_and_is_seeded_per_job():
    n = 40_000
    trace = from_records([dict(job_id=f"j{i}", submit_s=0, num_gpus=1, duration_s=100.0 + i % 7)
                          for i in range(n)])
    types = ["V100", "T4"]
    truth = true_runtimes(trace.jobs, types, "V100")
    pred = NoisyPredictor(0.2, seed=1).runtimes(trace.jobs, types, truth)
    assert np.mean(np.abs(pred / truth - 1)) == pytest.approx(0.2, rel=0.03)
    assert (pred > 0).all()
    # log-error symmetric around 0
    assert abs(np.median(np.log(pred / truth))) < 0.01
    # a job's error does not depend on the other jobs in the run
    sub = trace.head(10)
    pred_sub = NoisyPredictor(0.2, seed=1).runtimes(sub.jobs, types, truth[:10])
    assert np.array_equal(pred_sub, pred[:10])
    # other seed -> other errors; same seed -> same
    assert not np.array_equal(NoisyPredictor(0.2, seed=2).runtimes(sub.jobs, types, truth[:10]), pred_sub)
    # errors differ between GPU types of the same job
    assert not np.allclose(pred[:, 0] / truth[:, 0], pred[:, 1] / truth[:, 1])


def test_seeded_inputs_do_not_use_numpys_simd_exp_or_log(monkeypatch):
    """numpy's exp/log round differently with and without AVX-512; a synthetic trace and its noisy
    predictions must come out bit for bit the same whatever numpy's exp/log return."""
    from traces.synthetic import generate

    def inputs():
        jobs = generate("pai-like", 300, seed=3).jobs
        types = ["T4", "P100", "V100"]
        truth = true_runtimes(jobs, types, "V100")
        return jobs["duration_s"].to_numpy(), NoisyPredictor(0.2, seed=1).runtimes(jobs, types, truth)

    duration, predicted = inputs()
    real_exp, real_log = np.exp, np.log
    monkeypatch.setattr(np, "exp", lambda x, *a, **k: np.nextafter(real_exp(x, *a, **k), np.inf))
    monkeypatch.setattr(np, "log", lambda x, *a, **k: np.nextafter(real_log(x, *a, **k), np.inf))
    assert np.exp(1.0) != real_exp(1.0)  # the perturbation is in place
    moved_duration, moved_predicted = inputs()
    assert np.array_equal(duration, moved_duration) and np.array_equal(predicted, moved_predicted)


def test_zero_error_is_truth_and_specs_parse():
    truth = np.array([[1.0, 2.0]])
    jobs = from_records([dict(submit_s=0, num_gpus=1, duration_s=1)]).jobs
    assert np.array_equal(make_predictor("noisy:0").runtimes(jobs, ["V100", "T4"], truth), truth)
    assert make_predictor("truth").name == "truth"
    for bad in ("oracle", "ets:1", "noisy:abc", "noisy:-0.1", "truth:1"):
        with pytest.raises(SpecError):
            make_predictor(bad)


def test_true_runtimes_prefer_measured_columns_then_scale():
    trace = from_records([
        {"submit_s": 0, "num_gpus": 1, "duration_s": 10, "gpu_type": "A100",
         "runtime_s:A100": 10, "runtime_s:V100": 17},
    ])
    m = true_runtimes(trace.jobs, ["A100", "V100", "T4"], "V100")
    assert m[0, 0] == 10 and m[0, 1] == 17
    assert m[0, 2] == pytest.approx(10 * speed("T4").relative_time / speed("A100").relative_time)


def test_table_predictor_is_iterations_times_table_seconds():
    table = IterationTimeTable(pd.DataFrame({"config_id": ["m1", "m1"], "device": ["V100", "T4"],
                                             "seconds": [0.1, 0.2]}))
    jobs = pd.DataFrame({"job_id": ["a"], "config_id": ["m1"], "iterations": [1000]})
    pred = TablePredictor("ets", table).runtimes(jobs, ["V100", "T4"], np.zeros((1, 2)))
    assert np.allclose(pred, [[100.0, 200.0]])
    with pytest.raises(SpecError, match="bound to model configs"):
        TablePredictor("ets", table).runtimes(jobs.drop(columns="config_id"), ["V100"], np.zeros((1, 1)))

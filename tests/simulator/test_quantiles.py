"""The run-time uncertainty the simulator carries: predictors' quantiles and the policy view's."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from scipy.stats import norm

from policies.base import Placement, Policy
from predictor.common.inputs import SpecError
from simulator.cluster import homogeneous_groups
from simulator.engine import Simulation
from simulator.timing import NoisyPredictor, RuntimePredictor, make_predictor, sigma_for_mre
from tests.records import from_records


def jobs(n: int) -> pd.DataFrame:
    return pd.DataFrame({"job_id": [f"j{i}" for i in range(n)]})


def test_noisy_quantiles_are_the_exact_log_normal_ones():
    noisy = NoisyPredictor(0.2, seed=3)
    sigma = sigma_for_mre(0.2)
    for q in (0.05, 0.5, 0.9, 0.95):
        got = noisy.quantile_factors(q, jobs(4), ["T4", "V100"])
        assert got.shape == (4, 2)
        assert got == pytest.approx(np.full((4, 2), math.exp(sigma * norm.ppf(q))), rel=1e-12)
    # and they hold: the truth lies inside the 90 % interval of 90 % of the predictions
    n = 20000
    truth = np.ones((n, 1))
    predicted = noisy.runtimes(jobs(n), ["T4"], truth)
    low = predicted * noisy.quantile_factors(0.05, jobs(n), ["T4"])
    high = predicted * noisy.quantile_factors(0.95, jobs(n), ["T4"])
    inside = float(((low <= 1.0) & (1.0 <= high)).mean())
    assert inside == pytest.approx(0.9, abs=3 * math.sqrt(0.9 * 0.1 / n))
    below = float((truth <= predicted * noisy.quantile_factors(0.8, jobs(n), ["T4"])).mean())
    assert below == pytest.approx(0.8, abs=3 * math.sqrt(0.8 * 0.2 / n))


def test_truth_is_certain_and_a_bad_quantile_is_refused():
    truth = make_predictor("truth")
    assert (truth.quantile_factors(0.99, jobs(3), ["A100"]) == 1.0).all()
    for bad in (0.0, 1.0, 2.0):
        with pytest.raises(ValueError, match="quantile must lie strictly between 0 and 1"):
            make_predictor("noisy:0.1").quantile_factors(bad, jobs(1), ["T4"])


class Spy(Policy):
    """FIFO on one GPU type that records the view's 0.9-quantile and interval of job 0."""

    name = "spy"

    def __init__(self):
        self.seen = []

    def schedule(self, view):
        low, high = view.interval(0.8)
        self.seen.append((view.now, float(view.quantile(0.9)[0, 0]), float(low[0, 0]), float(high[0, 0])))
        free = int(view.free_by_type[0])
        return [Placement(j, "V100") for j in sorted(view.waiting)[:free]]


class Doubled(RuntimePredictor):
    """Predicts twice the truth and says the truth lies between 0.25 and 1.5 times that (by q)."""

    name = "doubled"

    def runtimes(self, jobs, gpu_types, truth):
        return truth * 2

    def quantile_factors(self, q, jobs, gpu_types):
        return np.full((len(jobs), len(gpu_types)), 0.25 + 1.25 * q)


@pytest.mark.parametrize("observe_after", [None, 10])
def test_the_view_carries_quantiles_and_online_feedback_collapses_them(observe_after):
    records = from_records([dict(job_id="a", submit_s=0.0, num_gpus=1, duration_s=100.0, gpu_type="V100"),
                            dict(job_id="b", submit_s=50.0, num_gpus=1, duration_s=10.0, gpu_type="V100")])
    records.jobs["iterations"] = [100.0, 10.0]  # 1 s per iteration: K = 10 iterations are seen at t = 10
    spy = Spy()
    Simulation(records, homogeneous_groups([("V100", 2, 1)], "n"), spy, Doubled(), observe_after=observe_after).run()
    seen = {t: rest for t, *rest in spy.seen}
    # t = 0: prediction 200 s; 0.9-quantile 200 · 1.375; 80 % interval 200 · (0.375, 1.375)
    assert seen[0.0] == pytest.approx((275.0, 75.0, 275.0))
    # t = 50: measured after 10 iterations when observed: the truth, 100 s, with no spread left
    assert seen[50.0] == pytest.approx((100.0, 100.0, 100.0) if observe_after else (275.0, 75.0, 275.0))


def test_a_predictor_without_uncertainty_fails_only_when_asked():
    class Plain(RuntimePredictor):
        name = "plain"

        def runtimes(self, jobs, gpu_types, truth):
            return truth

    class Asks(Policy):
        name = "asks"

        def schedule(self, view):
            view.quantile(0.9)
            return []

    records = from_records([dict(job_id="a", submit_s=0.0, num_gpus=1, duration_s=1.0, gpu_type="V100")])
    cluster = homogeneous_groups([("V100", 1, 1)], "n")
    with pytest.raises(SpecError, match="'plain' states no uncertainty"):
        Simulation(records, cluster, Asks(), Plain()).run()


def test_model_quantiles_leave_each_jobs_own_family_out():
    """A catalog job's quantile comes from the checkpoint's calibration without its family (the
    catalog is the held-out families the intervals were calibrated on)."""
    from predictor.checkpoints import Pretrained
    from traces.workloads import read_workloads

    catalog = read_workloads().groupby("config_id")["family"].first()
    picked = catalog.groupby(catalog).head(1)  # one config of each family
    bound = pd.DataFrame({"job_id": [f"j{i}" for i in range(len(picked))], "config_id": picked.index})
    got = make_predictor("ets").quantile_factors(0.9, bound, ["T4", "V100"])
    for k, gpu in enumerate(["T4", "V100"]):
        cal = Pretrained("ets", [gpu]).intervals(gpu)
        if cal is None:
            pytest.skip("the shipped ETS checkpoints have no calibrated intervals")
        families = picked.to_numpy()
        assert set(families) <= set(cal.families)
        assert list(got[:, k]) == [cal.factor(0.9, f) for f in families]
        assert any(cal.factor(0.9, f) != cal.factor(0.9) for f in families)  # leaving out matters

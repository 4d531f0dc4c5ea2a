"""Gavel's LPs on cases solved by hand, and the engine's rounds realising an allocation."""

from __future__ import annotations

import numpy as np
import pytest

from policies.base import PolicySpecError
from policies.gavel import Allocation, isolated_share
from policies.registry import make_policy
from simulator.cluster import homogeneous_groups
from simulator.preemption import make_simulation
from simulator.timing import make_predictor
from tests.records import from_records

# Two jobs, two types of one GPU each. Job 1 runs 100 s on A and 200 s on B; job 2 100 s and 400 s.
T = 1.0 / np.array([[100.0, 200.0], [100.0, 400.0]])
ONE_GPU_EACH = (np.array([1, 1]), np.array([1, 1]))


def test_the_equal_share_is_one_nth_of_every_type():
    assert isolated_share(np.array([1, 1]), np.array([1, 1])).tolist() == [[0.5, 0.5], [0.5, 0.5]]
    # 3 jobs on 4 + 2 GPUs: 2 GPUs each, 2/3 of it on the 4-GPU type; an 8-GPU job, 2 of its 8: a quarter
    x = isolated_share(np.array([1, 1, 8]), np.array([4, 2]))
    assert np.allclose(x[0], [2 / 3, 1 / 3]) and np.allclose(x[2], [4 / 6 * 6 / 24, 2 / 6 * 6 / 24])


def test_max_min_fairness_by_hand():
    # Equal shares give job 1 0.0075/s and job 2 0.00625/s. With x1 = (a, 1-a), x2 = (1-a, a) (both
    # types full), job 1 gets (0.005 + 0.005a)/0.0075 and job 2 (0.01 - 0.0075a)/0.00625 of their
    # equal-share throughput: equal at a = 1/2, both 1.0 — the unique optimum.
    x = Allocation(T, *ONE_GPU_EACH).max_min()
    assert np.allclose(x, [[0.5, 0.5], [0.5, 0.5]], atol=1e-7)


def test_makespan_by_hand():
    # One GPU: maximise z with 0.01 x1 >= z and 0.005 x2 >= z, x1 + x2 <= 1 -> x = (1/3, 2/3): both
    # jobs end at 300 s.
    lp = Allocation(1.0 / np.array([[100.0], [200.0]]), np.array([1, 1]), np.array([1]))
    assert np.allclose(lp.makespan(np.array([1.0, 1.0])), [[1 / 3], [2 / 3]], atol=1e-7)


def test_finish_time_fairness_is_never_worse_than_the_equal_share():
    rng = np.random.default_rng(5)
    throughput = 1.0 / rng.uniform(50, 500, (6, 3))
    s, g = np.array([1, 1, 2, 1, 4, 1]), np.array([2, 4, 4])
    lp = Allocation(throughput, s, g)
    remaining, elapsed = rng.uniform(0.2, 1.0, 6), rng.uniform(0, 300, 6)
    x = lp.ftf(remaining, elapsed)

    def worst_rho(alloc):
        thr = (throughput * alloc).sum(axis=1)
        return np.max((elapsed + remaining / thr) / (elapsed + remaining / lp.iso))

    assert (x >= -1e-9).all() and (x.sum(axis=1) <= 1 + 1e-7).all() and ((x * s[:, None]).sum(axis=0) <= g + 1e-7).all()
    assert worst_rho(x) <= 1 + 1e-6  # at least as fair as the equal share it is measured against
    share = isolated_share(s, g)
    assert worst_rho(x) <= worst_rho(share) + 1e-6


def test_the_rounds_realise_the_allocation():
    # The two jobs above, long enough for 40 rounds of 100 s each without restart cost: each job
    # should spend half its time on each type (x = 1/2 everywhere), alternating every round.
    jobs = [{"job_id": "1", "submit_s": 0.0, "num_gpus": 1, "duration_s": 4000.0, "gpu_type": "A100",
             "runtime_s:A100": 4000.0, "runtime_s:V100": 8000.0},
            {"job_id": "2", "submit_s": 0.0, "num_gpus": 1, "duration_s": 4000.0, "gpu_type": "A100",
             "runtime_s:A100": 4000.0, "runtime_s:V100": 16000.0}]
    policy = make_policy("gavel:objective=max_min,lease=100,restart=0")
    res = make_simulation(from_records(jobs), homogeneous_groups([("A100", 1, 1), ("V100", 1, 1)], "t"), policy,
                          make_predictor("truth")).run()
    seg = res.segments
    before = seg[seg["end"] <= 4000.0]  # while both jobs are present
    time_on = before.assign(held=before["end"] - before["start"]).groupby(["job_id", "gpu_type"])["held"].sum()
    for job in ("1", "2"):
        total = time_on.loc[job].sum()
        assert time_on.loc[(job, "A100")] / total == pytest.approx(0.5, abs=100 / total)  # within one round


@pytest.mark.parametrize("spec", ["gavel:objective=fastest", "gavel:objective="])
def test_an_unknown_objective_is_refused_by_name(spec):
    with pytest.raises(PolicySpecError, match="option objective="):
        make_policy(spec)

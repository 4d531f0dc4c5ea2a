"""Gavel's LPs on cases solved by hand, and the engine's rounds realising an allocation."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from policies.gavel import Allocation, isolated_share
from policies.registry import make_policy
from predictor.common.inputs import SpecError
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


def _feasible(throughput, s, g, need) -> bool:
    """Is there an X (Gavel's constraints) with thr_j(X) >= need_j for every j? Dense LP, rows
    divided by need_j (near 1): written here apart from Allocation."""
    from scipy.optimize import linprog

    n, m = throughput.shape
    rows = [np.kron(np.eye(n)[j], -throughput[j] / need[j]) for j in range(n)]  # -thr_j / need_j <= -1
    rows += [np.kron(np.eye(n)[j], np.ones(m)) for j in range(n)]  # Σ_k X[j, k] <= 1
    rows += [np.kron(s.astype(float), np.eye(m)[k]) for k in range(m)]  # Σ_j s_j X[j, k] <= G_k
    b = np.concatenate([-np.ones(n), np.ones(n), g.astype(float)])
    bounds = [(0, 1 if s[j] <= g[k] else 0) for j in range(n) for k in range(m)]
    return linprog(np.zeros(n * m), A_ub=np.array(rows), b_ub=b, bounds=bounds, method="highs").status == 0


@pytest.mark.parametrize("seed", range(4))
def test_finish_time_fairness_reaches_the_least_feasible_rho(seed):
    # The fairest ρ is certified from both sides: the allocation returned achieves it, and no
    # allocation achieves 0.1 % better (a feasibility LP per job's least throughput says so).
    rng = np.random.default_rng(seed)
    n = 8
    throughput = 1.0 / rng.uniform(50, 500, (n, 3))
    s, g = rng.choice([1, 1, 2, 4], n), np.array([4, 2, 4])
    remaining, elapsed = rng.uniform(0.1, 1.0, n), rng.uniform(0, 2000, n)
    lp = Allocation(throughput, s, g)
    x = lp.ftf(remaining, elapsed)
    c = elapsed + remaining / lp.iso
    rho = np.max((elapsed + remaining / (throughput * x).sum(axis=1)) / c)
    assert rho < 1.0 and lp.fallbacks == 0  # heterogeneity: fairer than the equal share
    assert _feasible(throughput, s, g, remaining / (rho * (1 + 1e-6) * c - elapsed))
    below = rho * (1 - 1e-3) * c - elapsed
    assert (below > 0).all() and not _feasible(throughput, s, g, remaining / below)


def test_a_job_with_nothing_left_does_not_pin_finish_time_fairness_to_the_equal_share():
    # A job whose work ends at the round itself has ρ = 1 under any allocation; counted, ρ = 1
    # would be the best worst ρ and the others merely get the most throughput meeting it. It needs
    # nothing and is left out: the others' worst ρ is the least feasible (certified as above).
    rng = np.random.default_rng(4)  # a case where counting it leaves the others at ρ = 1
    throughput = 1.0 / rng.uniform(50, 500, (6, 3))
    s, g = np.array([1, 1, 2, 1, 1, 1]), np.array([4, 2, 4])
    remaining, elapsed = np.append(rng.uniform(0.1, 1.0, 5), 0.0), rng.uniform(0, 2000, 6)
    lp = Allocation(throughput, s, g)
    x = lp.ftf(remaining, elapsed)
    c = elapsed + remaining / lp.iso
    rho = np.max(((elapsed + remaining / (throughput * x).sum(axis=1)) / c)[:5])
    below = rho * (1 - 1e-3) * c - elapsed
    need = np.append(remaining[:5] / below[:5], 1e-12)  # the finished job: next to nothing
    assert rho < 1 and lp.fallbacks == 0 and not _feasible(throughput, s, g, need)
    every_job_done = Allocation(throughput, s, g)  # nothing to solve: not counted as a solver failure
    assert np.array_equal(every_job_done.ftf(np.zeros(6), elapsed), every_job_done.share)
    assert every_job_done.fallbacks == 0


def test_finish_time_fairness_takes_a_few_lps(monkeypatch):
    # Dinkelbach-type steps converge in a handful of LPs, each a fairer allocation (a bisection
    # on ρ took 17); counted, not timed.
    import policies.gavel as gavel

    calls = []
    real = gavel.linprog
    monkeypatch.setattr(gavel, "linprog", lambda *a, **k: calls.append(1) or real(*a, **k))
    rng = np.random.default_rng(11)
    lp = Allocation(1.0 / rng.uniform(50, 500, (40, 4)), rng.choice([1, 2, 4], 40), np.array([8, 8, 4, 16]))
    lp.ftf(rng.uniform(0.1, 1.0, 40), rng.uniform(0, 5000, 40))
    assert 2 <= len(calls) <= 8


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
    with pytest.raises(SpecError, match="option objective="):
        make_policy(spec)


def test_one_row_per_class_reaches_the_optimum_of_one_row_per_job():
    # 3 kinds of jobs, 2 + 3 + 1 of them; jobs of a kind differ in length only (throughputs
    # proportional). The aggregated LP's min normalised throughput is the full LP's optimum.
    kinds = 1.0 / np.array([[100.0, 300.0, 150.0], [200.0, 200.0, 400.0], [50.0, 500.0, 100.0]])
    s_kind, g = np.array([1, 2, 1]), np.array([2, 4, 2])
    members = [0, 0, 1, 1, 1, 2]
    length = np.array([1.0, 3.0, 1.0, 0.5, 2.0, 1.0])
    throughput = kinds[members] / length[:, None]
    full = Allocation(throughput, s_kind[members], g)
    x_full = full.max_min()
    grouped = Allocation(kinds, s_kind, g, counts=np.array([2, 3, 1]))
    x_grouped = grouped.max_min()[members]

    def min_normalised(x):
        return np.min((throughput * x).sum(axis=1) / full.iso)

    assert np.allclose(grouped.iso[members], full.iso * length)  # the equal share counts all 6 jobs
    assert min_normalised(x_grouped) == pytest.approx(min_normalised(x_full), rel=1e-7)
    assert (x_grouped.sum(axis=1) <= 1 + 1e-9).all()
    assert ((x_grouped * s_kind[members][:, None]).sum(axis=0) <= g + 1e-7).all()


def test_alike_jobs_get_equal_allocations():
    jobs = [{"job_id": str(i), "submit_s": 0.0, "num_gpus": 1, "duration_s": d, "gpu_type": "A100",
             "runtime_s:A100": d, "runtime_s:V100": 3 * d} for i, d in enumerate([1000.0, 2000.0, 4000.0])]
    policy = make_policy("gavel:lease=100,restart=0")
    sim = make_simulation(from_records(jobs), homogeneous_groups([("A100", 1, 1), ("V100", 1, 1)], "t"), policy,
                          make_predictor("truth"))
    x = policy.allocation(sim.view, np.arange(3))
    assert np.allclose(x, x[0], atol=1e-9)  # the simplex would return a vertex: unequal shares


def test_ftf_keeps_the_equal_share_when_no_allocation_beats_it_within_tolerance():
    # Captured from a Philly-like run (noisy predictions): a 16-GPU job that only one type can hold
    # makes ρ = 1 the least feasible value, and the LP at exactly ρ = 1 is infeasible by the solver's
    # tolerance (elapsed times of ~280,000 s beside remaining times of a few hundred s). The equal
    # share meets ρ = 1 by construction: it is returned (this raised an AttributeError before).
    seconds = np.array([[175053.32564366006, 364408.5336305088, 108150.84999862127],
                        [184989.50195376907, 141513.80470140523, 339546.564708444],
                        [203103.69860017116, 234874.6425234507, 154786.35712969882],
                        [227704.37991692356, 445102.28870588, 189655.56433938563],
                        [586082.4079278938, 379372.1091320813, 579175.1970808038],
                        [545992.3162400122, 585532.0596766876, 246084.60876219],
                        [530693.4969778369, 508212.81141970283, 464030.77538759797]])
    remaining = np.array([0.26228072014002635, 0.1532506422969957, 0.9181782544927276, 0.5752163721717051,
                          0.48211132453079586, 0.1877450479468481, 0.5227537527431421])
    elapsed = np.array([285309.11555048794, 283513.45105317625, 282922.1995236408, 276773.79034819733,
                        274871.97866118915, 274298.12623245147, 270731.094098296])
    s, g = np.array([8, 4, 16, 8, 1, 1, 4]), np.array([10, 10, 16])
    lp = Allocation(1.0 / seconds, s, g)
    x = lp.ftf(remaining, elapsed)
    assert (x >= -1e-9).all() and (x.sum(axis=1) <= 1 + 1e-7).all() and ((x * s[:, None]).sum(axis=0) <= g + 1e-7).all()
    rho = (elapsed + remaining / (x / seconds).sum(axis=1)) / (elapsed + remaining / lp.iso)
    assert rho.max() <= 1 + 1e-6


def test_ftf_solves_a_round_whose_raw_throughputs_sat_inside_the_solver_tolerance():
    # A captured round (tests/fixtures/gavel/ftf_round.json): with rows in raw throughputs HiGHS
    # could not tell feasibility at some ρ and the run stopped with a PolicyError. In units of each
    # job's equal-share throughput it solves, fairer than the equal share.
    case = json.loads((Path(__file__).parents[1] / "fixtures" / "gavel" / "ftf_round.json").read_text())
    seconds, s, g = np.array(case["seconds"]), np.array(case["num_gpus"]), np.array(case["gpus_by_type"])
    remaining, elapsed = np.array(case["remaining"]), np.array(case["elapsed"])
    lp = Allocation(1.0 / seconds, s, g)
    x = lp.ftf(remaining, elapsed)
    assert lp.fallbacks == 0
    assert (x >= -1e-9).all() and (x.sum(axis=1) <= 1 + 1e-7).all() and ((x * s[:, None]).sum(axis=0) <= g + 1e-7).all()
    rho = (elapsed + remaining / (x / seconds).sum(axis=1)) / (elapsed + remaining / lp.iso)
    assert rho.max() < 0.99  # the equal share's is 1


def test_an_lp_the_solver_cannot_solve_falls_back_to_the_equal_share_and_is_counted(monkeypatch):
    from types import SimpleNamespace

    import policies.gavel as gavel

    monkeypatch.setattr(gavel, "linprog", lambda *a, **k: SimpleNamespace(status=4, x=None))  # numerical trouble
    lp = Allocation(T, *ONE_GPU_EACH)
    assert np.array_equal(lp.max_min(), isolated_share(*ONE_GPU_EACH)) and lp.fallbacks == 1
    assert np.array_equal(lp.ftf(np.ones(2), np.zeros(2)), isolated_share(*ONE_GPU_EACH)) and lp.fallbacks == 2
    jobs = [{"job_id": str(i), "submit_s": 0.0, "num_gpus": 1, "duration_s": 500.0, "gpu_type": "A100",
             "runtime_s:A100": 500.0, "runtime_s:V100": 900.0} for i in range(3)]
    policy = make_policy("gavel:lease=100,restart=0,solver=highs")  # ECOS is not patched
    res = make_simulation(from_records(jobs), homogeneous_groups([("A100", 1, 1), ("V100", 1, 1)], "t"), policy,
                          make_predictor("truth")).run()
    assert (res.records["status"] == "completed").all()
    assert policy.describe()["equal_share_rounds"] >= 1  # said in the run's manifest


def test_gavels_perf_normalisation_on_a_hand_case():
    """Gavel's max_min_perf: each job's throughput over its throughput on the proportional share
    (each type in proportion to its GPUs: here half of each), times its GPUs. Job 0 does 2 and 1
    steps/s on the two one-GPU types (1.5 on the share), job 1 1 and 1 (1.0). Job 1's normalised
    throughput is at most its row's sum, 1, reached with job 0 still at >= 1 (job 0 on type 0
    alone gives it 2 / 1.5): the max-min value is 1, by ECOS (Gavel's solver) and by HiGHS."""
    from policies.gavel import max_min_perf_ecos, proportional_throughput

    t, s, g = np.array([[2.0, 1.0], [1.0, 1.0]]), np.array([1, 1]), np.array([1, 1])
    assert proportional_throughput(t, g).tolist() == [1.5, 1.0]
    prop = proportional_throughput(t, g)

    def worst(x):
        return float(((t * x).sum(axis=1) * s / prop).min())

    x = max_min_perf_ecos(t, s, g)
    assert worst(x) == pytest.approx(1.0, abs=1e-6)
    assert (x.sum(axis=1) <= 1 + 1e-6).all() and ((x * s[:, None]).sum(axis=0) <= g + 1e-6).all()
    highs = Allocation(t, s, g).max_min_weighted(s / prop)
    assert worst(highs) == pytest.approx(1.0, abs=1e-6)
    # the GPU count multiplies: a 1-GPU and a 2-GPU job of equal throughput on one 2-GPU type are
    # equal at 1 X_small = 2 X_big, and X_small + 2 X_big <= 2 (and X <= 1): X_small = 1, X_big = 1/2
    x = max_min_perf_ecos(np.array([[1.0], [1.0]]), np.array([1, 2]), np.array([2]))
    assert x[:, 0] == pytest.approx([1.0, 0.5], abs=1e-6)

"""AlloX: the matching plan against brute force, and the policy's documented behaviour in the engine.

Every expected start/end time below was worked out by hand (see the comments); the random checks
compare against an independent exhaustive search that knows nothing about SPT or the matching.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from scipy.optimize import linear_sum_assignment

from policies.allox import AlloxPolicy, allox_plan
from policies.registry import make_policy
from predictor.common.inputs import SpecError
from tests.policies.helpers import FirstJobPredicted10, SwapTwo, hetero, job, simulate, times

# -- helpers ------------------------------------------------------------------------------------








def queue_total(queue, avail, type_k, P, arrival):
    """Sum of (completion - arrival) of ``queue`` run back to back from ``avail``."""
    clock, total = float(avail), 0.0
    for j in queue:
        clock += P[j, type_k]
        total += clock - arrival[j]
    return total


def brute_force_total(P, arrival, feasible, machine_type, machine_avail):
    """Min of sum(C_j - a_j) over every assignment of jobs to machines and every order per machine.

    The orders are enumerated per (machine, job subset) with itertools.permutations (memoised so
    that every assignment reuses them); nothing here assumes SPT or the slot formulation.
    """
    n, m = P.shape[0], len(machine_type)
    subset_best: dict[tuple[int, int], float] = {}
    for i in range(m):
        t = int(machine_type[i])
        for mask in range(1 << n):
            members = [j for j in range(n) if mask >> j & 1]
            if not all(feasible[j, t] for j in members):
                subset_best[i, mask] = math.inf
                continue
            subset_best[i, mask] = min(queue_total(order, machine_avail[i], t, P, arrival)
                                       for order in itertools.permutations(members))
    best = math.inf
    for assignment in itertools.product(range(m), repeat=n):
        masks = [0] * m
        for j, i in enumerate(assignment):
            masks[i] |= 1 << j
        best = min(best, sum(subset_best[i, masks[i]] for i in range(m)))
    return best


def random_instance(rng, *, identical=False, infeasible=False):
    n = int(rng.integers(1, 7))
    num_types = int(rng.integers(1, 4))
    m = int(rng.integers(1, 4))
    now = 20.0
    if rng.random() < 0.5:
        P = rng.integers(1, 8, size=(n, num_types)).astype(float)  # small integers: many ties
    else:
        P = rng.uniform(0.5, 20.0, size=(n, num_types))
    arrival = rng.uniform(0.0, now, n)
    machine_type = rng.integers(0, num_types, m)
    busy = rng.random(m) < 0.5
    machine_avail = np.where(busy, now + rng.uniform(0.0, 30.0, m), now)
    if identical:  # several interchangeable machines: same type, same avail
        machine_type[:] = machine_type[0]
        machine_avail[:] = machine_avail[0]
    feasible = np.ones((n, num_types), dtype=bool)
    if infeasible:
        feasible = rng.random((n, num_types)) < 0.6
        present = np.unique(machine_type)
        for j in range(n):
            if not feasible[j, present].any():
                feasible[j, rng.choice(present)] = True
    return P, arrival, feasible, machine_type, machine_avail


# -- 1. the plan is optimal ---------------------------------------------------------------------
@pytest.mark.parametrize("flavour,seed,count", [("mixed", 1, 120), ("identical", 2, 60), ("infeasible", 3, 80),
                                                 ("identical+infeasible", 4, 40)])
def test_plan_total_equals_brute_force_optimum(flavour, seed, count):
    rng = np.random.default_rng(seed)
    for case in range(count):
        P, arrival, feasible, mtype, mavail = random_instance(
            rng, identical="identical" in flavour, infeasible="infeasible" in flavour)
        plan = allox_plan(P, arrival, feasible, mtype, mavail)
        where = f"{flavour} case {case}: P={P.tolist()} a={arrival.tolist()} feasible={feasible.tolist()} " \
                f"types={mtype.tolist()} avail={mavail.tolist()} plan={plan}"
        assert len(plan) == len(mtype), where
        assert sorted(j for q in plan for j in q) == list(range(P.shape[0])), where  # each job exactly once
        assert all(feasible[j, mtype[i]] for i, q in enumerate(plan) for j in q), where
        got = sum(queue_total(q, mavail[i], mtype[i], P, arrival) for i, q in enumerate(plan))
        assert got == pytest.approx(brute_force_total(P, arrival, feasible, mtype, mavail), rel=1e-9), where


def full_matrix_total(P, arrival, feasible, machine_type, machine_avail):
    """The textbook AlloX matching: every machine offers all n positions (n*M rows), solved whole;
    its total completion time is the optimum the capped matching must reach."""
    n, m = P.shape[0], len(machine_type)
    k = np.repeat(np.arange(1, n + 1), m)
    machine = np.tile(np.arange(m), n)
    cost = (np.maximum(0.0, machine_avail[machine][:, None] - arrival[None, :])
            + k[:, None] * P[:, machine_type[machine]].T)
    cost[~feasible[:, machine_type[machine]].T] = 1e30
    rows, cols = linear_sum_assignment(cost)
    return float(cost[rows, cols].sum())


def larger_instance(rng, n, m):
    num_types = 3
    P = rng.uniform(1.0, 100.0, size=(n, num_types)) * np.array([1.0, 1.7, 3.1])  # fast and slow types
    arrival = rng.uniform(0.0, 50.0, n)
    machine_type = rng.integers(0, num_types, m)
    machine_avail = np.where(rng.random(m) < 0.5, 50.0, 50.0 + rng.uniform(0.0, 300.0, m))
    feasible = rng.random((n, num_types)) < 0.9
    feasible[np.arange(n), machine_type[rng.integers(0, m, n)]] = True  # each job fits some machine
    return P, arrival, feasible, machine_type, machine_avail


@pytest.mark.parametrize("first_guess", ["as built", "one position"])
def test_capped_matching_reaches_the_full_matrix_optimum(first_guess, monkeypatch):
    # Instances too large to offer every position at once (n*M > SMALL_MATRIX_ROWS), so positions
    # are added lazily; with a first guess of one position per machine every group must grow.
    import policies.allox as allox

    if first_guess == "one position":
        monkeypatch.setattr(allox, "_first_guess", lambda P, feasible, kinds, avail, size: np.zeros(len(size)))
    rng = np.random.default_rng(7)
    for case in range(25):
        n, m = int(rng.integers(20, 70)), int(rng.integers(6, 20))
        P, arrival, feasible, mtype, mavail = larger_instance(rng, n, m)
        stats: dict = {}
        plan = allox.plan_queues(P, arrival, feasible, mtype, mavail, stats)
        assert sorted(j for q in plan.values() for j in q) == list(range(n)), case
        assert all(feasible[j, mtype[i]] for i, q in plan.items() for j in q), case
        got = sum(queue_total(q, mavail[i], mtype[i], P, arrival) for i, q in plan.items())
        want = full_matrix_total(P, arrival, feasible, mtype, mavail)
        assert got == pytest.approx(want, rel=1e-12), case
        assert stats["cells"] < n * n * m  # and it solved less than the full matrix


def test_brute_force_respects_feasibility():
    # guard for the reference itself: job 0 is fast on type 0 but may only run on type 1
    P = np.array([[1.0, 50.0], [2.0, 2.0]])
    feasible = np.array([[False, True], [True, True]])
    total = brute_force_total(P, np.zeros(2), feasible, np.array([0, 1]), np.zeros(2))
    assert total == 52.0  # job 0 on machine 1 (50), job 1 on machine 0 (2)
    assert allox_plan(P, np.zeros(2), feasible, np.array([0, 1]), np.zeros(2)) == [[1], [0]]


# -- 2. hand-checkable plans ---------------------------------------------------------------------
def test_two_identical_idle_machines_three_jobs():
    # sizes 1, 2, 3 on two identical idle machines: the size-1 job takes the only position k=2
    # (it delays one job behind it), sizes 2 and 3 run last (k=1): cost 2*1 + 2 + 3 = 7.
    # Which of 2 and 3 follows the 1 is a tie (both totals are 1 + 3 + 3 = 1 + 4 + 2 = 7).
    P = np.array([[1.0], [2.0], [3.0]])
    plan = allox_plan(P, np.zeros(3), np.ones((3, 1), bool), np.array([0, 0]), np.array([0.0, 0.0]))
    assert sorted(map(tuple, plan)) in ([(0, 1), (2,)], [(0, 2), (1,)])


def test_two_different_machines_unique_optimum():
    # machine 0 (type 0): sizes 1, 2, 3; machine 1 (type 1): 2.5, 4, 7. Enumerated by hand:
    # m0 [0, 2] + m1 [1]: 1 + 4 + 4 = 9 (the unique optimum); m0 [1, 2] + m1 [0]: 2 + 5 + 2.5 = 9.5;
    # all on m0: 1 + 3 + 6 = 10; m0 [0, 1] + m1 [2]: 1 + 3 + 7 = 11.
    P = np.array([[1.0, 2.5], [2.0, 4.0], [3.0, 7.0]])
    plan = allox_plan(P, np.zeros(3), np.ones((3, 2), bool), np.array([0, 1]), np.array([0.0, 0.0]))
    assert plan == [[0, 2], [1]]


def test_busy_machine_and_arrivals_shift_the_plan():
    # now = 10; machine 0 is busy until 14, machine 1 idle (avail 10); same type. Jobs: p = 3
    # (arrived 2) and p = 5 (arrived 9). Both on m1: 13 + 18 = 31 -> JCTs 11 + 9 = 20;
    # 5 on m1, 3 on m0: 15 + 17 -> 6 + 15 = 21; 3 on m1, 5 on m0: 13 + 19 -> 11 + 10 = 21. So m1 [0, 1].
    P = np.array([[3.0], [5.0]])
    plan = allox_plan(P, np.array([2.0, 9.0]), np.ones((2, 1), bool), np.array([0, 0]), np.array([14.0, 10.0]))
    assert plan == [[], [0, 1]]


def test_only_earliest_machines_of_a_type_are_used_for_few_jobs():
    # one job, three machines of one type free at 30, 10, 20: it goes to the one free at 10
    plan = allox_plan(np.array([[4.0]]), np.zeros(1), np.ones((1, 1), bool), np.zeros(3, int),
                      np.array([30.0, 10.0, 20.0]))
    assert plan == [[], [0], []]


def test_empty_job_set():
    assert allox_plan(np.zeros((0, 2)), np.zeros(0), np.zeros((0, 2), bool), np.array([0, 1]),
                      np.zeros(2)) == [[], []]


# -- 3. the policy in the engine -----------------------------------------------------------------
def test_online_starts_only_heads_of_idle_gpus():
    # 2 identical GPUs, jobs of 1, 2, 3, 4 s at t=0: positions k=2 (run first) go to the 1 and 2,
    # so only a and b start at 0 although c and d are planned too. t=1: a's GPU idles -> re-plan
    # c and d with a's GPU free at 1 and b's at 2: one on each (c first: 4 + 6; d first: 5 + 5 -- a
    # tie; both on a's GPU: 4 + 8), so one starts at 1 on a's GPU and the other at 2 on b's.
    # Total completion 1 + 2 + 10 = 13 either way.
    jobs = [job("a", 1), job("b", 2), job("c", 3), job("d", 4)]
    out = times(simulate(jobs, [("V100", 2, 1)], "allox"))
    assert out["a"][:2] == (0, 1) and out["b"][:2] == (0, 2)
    later = sorted((out[j][0], out[j][3]) for j in ("c", "d"))
    assert later == [(1, out["a"][3]), (2, out["b"][3])]
    assert sum(out[j][1] for j in out) == 13


def test_online_does_not_start_jobs_planned_on_busy_gpus():
    # GPU 0 runs L (0-6); at t=1 jobs of 3, 4, 9, 10 s arrive; GPU 1 is free at 1, GPU 0 at 6.
    # t=1 plan (JCTs from t=1): m1 [3, 4, 9] + m0 [10]: 3 + 7 + 16 + 15 = 41 = m1 [3, 4, 10] + m0 [9]
    # (tie); m1 [3, 4] + m0 [9, 10]: 3 + 7 + 14 + 24 = 48; m1 [3, 9] + m0 [4, 10]: 3 + 12 + 9 + 19 = 43;
    # m1 [3, 4, 9, 10]: 52 -> only the 3-s job starts (1-4); GPU 0's head (9 or 10 s) waits for GPU 0.
    # t=4: m1 free at 4, m0 at 6; left 4, 9, 10: m1 [4, 9] + m0 [10]: (8-1) + (17-1) + (16-1) = 38;
    # m1 [4, 10] + m0 [9]: 7 + 17 + 14 = 38 (tie); m1 [4] + m0 [9, 10]: 7 + 14 + 24 = 45 -> the 4-s
    # job heads m1 either way: 4-8. t=6: m0 free, left 9, 10: m0 [9] + m1 (free at 8) [10]: 14 + 17
    # = 31 vs m0 [10] + m1 [9]: 15 + 16 = 31 (tie) vs m0 [9, 10]: 14 + 24 -> one starts at 6 on
    # GPU 0, the other at 8 on GPU 1.
    jobs = [job("L", 6), job("p3", 3, 1), job("p4", 4, 1), job("p9", 9, 1), job("p10", 10, 1)]
    out = times(simulate(jobs, [("V100", 2, 1)], "allox"))
    assert out["L"] == (0, 6, "V100", "0")
    assert out["p3"] == (1, 4, "V100", "1") and out["p4"] == (4, 8, "V100", "1")
    starts = sorted((out[j][0], out[j][3]) for j in ("p9", "p10"))
    assert starts == [(6, "0"), (8, "1")]
    total = sum(out[j][1] - (0 if j == "L" else 1) for j in out)
    assert total == 6 + 3 + 7 + (15 + 16)  # same total for either tie


def test_offline_plan_on_all_at_zero_trace_matches_hand_optimum():
    # A100 x1, V100 x1; (A100, V100) times J0 (2, 4), J1 (3, 4), J2 (6, 8). Hand enumeration:
    # A100 [J0, J2] + V100 [J1]: 2 + 8 + 4 = 14 (unique optimum; next best A100 [J0, J1] + V100 [J2] = 15).
    jobs = [hetero("J0", 2, 4), hetero("J1", 3, 4), hetero("J2", 6, 8)]
    for policy in ("allox:mode=offline", "allox"):
        out = times(simulate(jobs, [("A100", 1, 1), ("V100", 1, 1)], policy))
        assert out == {"J0": (0, 2, "A100", "0"), "J2": (2, 8, "A100", "0"), "J1": (0, 4, "V100", "1")}, policy


@pytest.mark.parametrize("policy", ["allox:mode=offline", "allox"])
def test_offline_total_completion_equals_brute_force(policy):
    # 6 single-GPU jobs at t=0 on A100 x1 + V100 x2 (truth predictor): the simulated sum of JCTs is
    # the exhaustive optimum, and every GPU runs its jobs back to back from t=0.
    rng = np.random.default_rng(7)
    a100 = rng.uniform(2, 30, 6).round(2)
    v100 = (a100 * rng.uniform(1.2, 2.5, 6)).round(2)
    jobs = [hetero(f"j{i}", float(a100[i]), float(v100[i])) for i in range(6)]
    res = simulate(jobs, [("A100", 1, 1), ("V100", 1, 2)], policy)
    rec = res.records
    P = np.stack([a100, v100], axis=1)
    optimum = brute_force_total(P, np.zeros(6), np.ones((6, 2), bool), np.array([0, 1, 1]), np.zeros(3))
    assert rec["jct"].sum() == pytest.approx(optimum, rel=1e-9)
    for _, on_gpu in rec.sort_values("start").groupby("gpu_ids"):
        starts, ends = on_gpu["start"].to_numpy(), on_gpu["end"].to_numpy()
        assert starts[0] == 0 and np.allclose(starts[1:], ends[:-1])
        assert np.allclose(ends - starts, on_gpu["true_runtime"])
    # the optimum is not trivial: the fastest-GPU-only schedule is worse
    assert optimum < queue_total(np.argsort(a100), 0.0, 0, P, np.zeros(6))


def test_offline_later_arrivals_are_planned_behind_installed_queues():
    # one GPU, offline. t=0: a (10) and b (20) arrive -> installed [a, b]. t=5: c (1) arrives; the
    # installed queue is never re-ordered, so c is planned behind it (avail = 0 + 10 + 20 = 30): 30-31.
    # Online re-plans at t=10 and runs c first (10-11, then b 11-31).
    jobs = [job("a", 10), job("b", 20), job("c", 1, 5)]
    off = times(simulate(jobs, [("V100", 1, 1)], "allox:mode=offline"))
    on = times(simulate(jobs, [("V100", 1, 1)], "allox"))
    assert {j: off[j][:2] for j in off} == {"a": (0, 10), "b": (10, 30), "c": (30, 31)}
    assert {j: on[j][:2] for j in on} == {"a": (0, 10), "c": (10, 11), "b": (11, 31)}


def test_window_one_starts_one_job_per_event():
    # 3 idle GPUs, jobs 30, 10, 20 s at t=0, window=1: the only candidate is the shortest on the only
    # type, so one job starts per event although GPUs idle: b 0-10, c 10-30, a 30-60.
    jobs = [job("a", 30), job("b", 10), job("c", 20)]
    out = times(simulate(jobs, [("V100", 3, 1)], "allox:window=1"))
    assert {j: out[j][:2] for j in out} == {"b": (0, 10), "c": (10, 30), "a": (30, 60)}
    full = times(simulate(jobs, [("V100", 3, 1)], "allox:window=all"))
    assert {j: full[j][:2] for j in full} == {"a": (0, 30), "b": (0, 10), "c": (0, 20)}


def test_window_picks_round_robin_shortest_per_type():
    # (A100, V100): J0 (50, 60), J1 (10, 40), J2 (30, 20), J3 (12, 21); 2 GPUs of each type, idle.
    # window=2: A100's shortest is J1, then V100's shortest not yet picked is J2 -> {J1, J2}
    # (not J1, J3 = the 2 shortest on A100 or by min over types; not J0, J1 = arrival order).
    # Plan: J1 -> A100 (0-10), J2 -> V100 (0-20); J0 and J3 wait although 2 GPUs idle.
    # t=10: J0, J3 both candidates (2 <= window): J0 -> A100 (10-60), J3 -> the other A100 (10-22).
    jobs = [hetero("J0", 50, 60), hetero("J1", 10, 40), hetero("J2", 30, 20), hetero("J3", 12, 21)]
    out = times(simulate(jobs, [("A100", 2, 1), ("V100", 2, 1)], "allox:window=2"))
    assert {j: out[j][:3] for j in out} == {"J1": (0, 10, "A100"), "J2": (0, 20, "V100"),
                                          "J0": (10, 60, "A100"), "J3": (10, 22, "A100")}
    # window=3 adds A100's next shortest (J3): it starts at 0 on the second A100
    out3 = times(simulate(jobs, [("A100", 2, 1), ("V100", 2, 1)], "allox:window=3"))
    assert out3["J3"][:3] == (0, 12, "A100") and out3["J0"][0] == 10


def test_window_selection_rule_directly():
    # the documented rule on a view stub: round-robin over types, shortest-not-yet-picked each time
    class View:
        gpu_types = ["A100", "V100"]
        predicted = np.array([[50, 60], [10, 40], [30, 20], [12, 21], [11, 19]], dtype=float)

    # A100 order: 1, 4, 3, 2, 0; V100 order: 4, 2, 3, 1, 0. Picks: A100 -> 1, V100 -> 4,
    # A100 -> 3 (4 already picked), V100 -> 2, A100 -> 0. Returned in job order.
    picks = {w: AlloxPolicy(window=w)._window(View(), [0, 1, 2, 3, 4]) for w in (1, 2, 3, 4, 5)}
    assert picks == {1: [1], 2: [1, 4], 3: [1, 3, 4], 4: [1, 2, 3, 4], 5: [0, 1, 2, 3, 4]}


def test_alpha_with_users_only_lowest_score_users_are_candidates():
    # V100 x2. t=0: alice's A1 (100 s) starts on GPU 0. t=1: alice's A2 (5 s) and bob's B1 (50 s).
    # alpha=0.5 keeps ceil(0.5 * 2) = 1 user: alice's score = 1 GPU / 2 = 0.5, bob's 0 -> only B1 is a
    # candidate: B1 1-51, then A2 51-56. alpha=1: A2 (shorter) first on GPU 1: A2 1-6, B1 6-56.
    jobs = [job("A1", 100, 0, user="alice"), job("A2", 5, 1, user="alice"), job("B1", 50, 1, user="bob")]
    fair = times(simulate(jobs, [("V100", 2, 1)], "allox:alpha=0.5"))
    perf = times(simulate(jobs, [("V100", 2, 1)], "allox:alpha=1"))
    assert {j: fair[j][:2] for j in fair} == {"A1": (0, 100), "B1": (1, 51), "A2": (51, 56)}
    assert {j: perf[j][:2] for j in perf} == {"A1": (0, 100), "A2": (1, 6), "B1": (6, 56)}


def test_alpha_score_is_progress_based_share():
    # V100 x2 (one node), T4 x2 (one node); (V100, T4) times. t=0: X (user other, 1000/5000) -> V100;
    # t=0.5: B1 (amy, 1000/5000) -> the other V100; t=1: Z1 (zed, 40/100) -> V100s busy, runs on T4 1-101.
    # t=2: Z2 (zed, 50/50) and A2 (amy, 5/5). Scores: amy = 1/2 (V100 pool 2) * 1000/1000 = 0.5;
    # zed = 1/2 (T4 pool 2) * 40/100 = 0.2 -> alpha=0.5 keeps zed only: Z2 2-52 on the idle T4,
    # then A2 52-57. (An unscaled share would tie 0.5/0.5 and pick amy by name.)
    def two(job_id, v100, t4, submit, user):
        return {"job_id": job_id, "submit_s": submit, "num_gpus": 1, "duration_s": v100, "gpu_type": "V100",
                "runtime_s:V100": v100, "runtime_s:T4": t4, "user": user}

    jobs = [two("X", 1000, 5000, 0, "other"), two("B1", 1000, 5000, 0.5, "amy"), two("Z1", 40, 100, 1, "zed"),
            two("Z2", 50, 50, 2, "zed"), two("A2", 5, 5, 2, "amy")]
    out = times(simulate(jobs, [("V100", 2, 1), ("T4", 2, 1)], "allox:alpha=0.5"))
    assert out["Z1"][:3] == (1, 101, "T4")
    assert out["Z2"][:3] == (2, 52, "T4") and out["A2"][:3] == (52, 57, "T4")
    perf = times(simulate(jobs, [("V100", 2, 1), ("T4", 2, 1)], "allox"))
    assert perf["A2"][:3] == (2, 7, "T4") and perf["Z2"][:3] == (7, 57, "T4")


def test_alpha_without_users_keeps_longest_waiting_jobs():
    # one GPU: R (10) runs 0-10; X (30) at 1, Y (5) at 2, Z (1) at 3. alpha=0.5:
    # t=10 keeps ceil(1.5) = 2 oldest {X, Y} -> Y (shorter) 10-15; t=15 keeps ceil(1.0) = 1 {X}: 15-45;
    # then Z 45-46. alpha=1 is plain SPT: Z 10-11, Y 11-16, X 16-46.
    jobs = [job("R", 10), job("X", 30, 1), job("Y", 5, 2), job("Z", 1, 3)]
    fair = times(simulate(jobs, [("V100", 1, 1)], "allox:alpha=0.5"))
    perf = times(simulate(jobs, [("V100", 1, 1)], "allox"))
    assert {j: fair[j][:2] for j in fair} == {"R": (0, 10), "Y": (10, 15), "X": (15, 45), "Z": (45, 46)}
    assert {j: perf[j][:2] for j in perf} == {"R": (0, 10), "Z": (10, 11), "Y": (11, 16), "X": (16, 46)}


# -- 4. predictions drive the plan, truth drives completions -------------------------------------


@pytest.mark.parametrize("mode", ["online", "offline"])
def test_plan_follows_predictions_and_jobs_end_after_true_times(mode):
    # one GPU; truths long 100, mid 40, short 10 (rows 0, 1, 2). Swap long/short predictions:
    # AlloX (SPT on predictions) runs long first: long 0-100, mid 100-140, short 140-150.
    jobs = [job("long", 100), job("mid", 40), job("short", 10)]
    res = simulate(jobs, [("V100", 1, 1)], f"allox:mode={mode}", SwapTwo(0, 2))
    out = times(res)
    assert {j: out[j][:2] for j in out} == {"long": (0, 100), "mid": (100, 140), "short": (140, 150)}
    rec = res.records.set_index("job_id")
    assert rec.loc["long", "predicted_runtime"] == 10 and rec.loc["long", "true_runtime"] == 100
    assert (rec["end"] - rec["start"] == rec["true_runtime"]).all()
    truth = times(simulate(jobs, [("V100", 1, 1)], f"allox:mode={mode}"))
    assert {j: truth[j][:2] for j in truth} == {"short": (0, 10), "mid": (10, 50), "long": (50, 150)}


def test_job_overrunning_its_prediction_does_not_block_an_idle_gpu():
    # V100 x2. A is predicted 10 s but runs 100 s; B (20 s) ends at 20. C (30 s) arrives at 50: GPU 0
    # still runs A (predicted end clamped to now = 50), GPU 1 has been idle since 20. Both look free
    # at 50 to the plan; C must start on the idle GPU at 50, not queue behind A until 100.
    jobs = [job("A", 100), job("B", 20), job("C", 30, 50)]
    for mode in ("online", "offline"):
        out = times(simulate(jobs, [("V100", 2, 1)], f"allox:mode={mode}", FirstJobPredicted10()))
        assert out["A"] == (0, 100, "V100", "0") and out["B"] == (0, 20, "V100", "1"), mode
        assert out["C"] == (50, 80, "V100", "1"), mode


def test_overrunning_gpu_gets_no_job_while_identical_gpus_idle():
    # V100 x3. A (predicted 10, truly 1000) on GPU 0; B and X (20 s) on GPUs 1 and 2 end at 20.
    # t=50: jobs of 1, 2, 3, 4 s arrive; all three GPUs look free at 50. 4 jobs on 3 identical
    # machines: one of them runs two (the 1-s job first). That 2-job queue and the other heads must
    # go to the idle GPUs: the 1-s job and one more start at 50. Online, every job then runs on GPU 1
    # or 2 (re-planned at each completion) instead of waiting for A until 1000; offline the one job
    # installed on GPU 0 stays there (installed queues are never re-planned).
    jobs = [job("A", 1000), job("B", 20), job("X", 20)] + [job(f"s{d}", d, 50) for d in (1, 2, 3, 4)]
    for mode in ("online", "offline"):
        out = times(simulate(jobs, [("V100", 3, 1)], f"allox:mode={mode}", FirstJobPredicted10()))
        assert out["A"][3] == "0" and out["s1"][:2] == (50, 51), mode
        assert sorted(out[f"s{d}"][0] for d in (1, 2, 3, 4)).count(50) == 2, mode
        on_idle = [out[f"s{d}"][3] in ("1", "2") and out[f"s{d}"][1] <= 60 for d in (1, 2, 3, 4)]
        assert sum(on_idle) == (4 if mode == "online" else 3), mode


# -- options ------------------------------------------------------------------------------------
def test_options_parse():
    p = make_policy("allox:window=all,alpha=0.5,mode=offline")
    assert isinstance(p, AlloxPolicy)
    assert (p.window, p.alpha, p.mode) == (None, 0.5, "offline")
    d = make_policy("allox").describe()
    assert d == {"name": "allox", "window": 50, "alpha": 1.0, "mode": "online", "max_work_per_decision": 0}
    assert make_policy("allox:window=7").window == 7


@pytest.mark.parametrize("spec,option", [
    ("allox:window=0", "window"), ("allox:window=-3", "window"), ("allox:window=many", "window"),
    ("allox:alpha=0", "alpha"), ("allox:alpha=1.5", "alpha"), ("allox:alpha=x", "alpha"),
    ("allox:mode=batch", "mode"), ("allox:mode=", "mode"),
])
def test_bad_option_values_name_the_option(spec, option):
    with pytest.raises(SpecError, match=rf"\b{option}="):
        make_policy(spec)


def test_unknown_option_is_rejected():
    with pytest.raises(SpecError, match="budget_ms"):
        make_policy("allox:budget_ms=5")


def test_online_looks_only_at_the_gpus_a_plan_can_use():
    # The online decision passes plan_queues the per-type n earliest GPUs instead of all GPUs
    # (idle first); the plan, mapped back to GPU ids, must be the same as with every GPU listed.
    from types import SimpleNamespace

    import policies.allox as allox

    rng = np.random.default_rng(11)
    for case in range(40):
        # more GPUs than jobs, many busy: the choice of which GPUs to look at matters
        gpus, types, jobs = int(rng.integers(8, 60)), int(rng.integers(1, 4)), int(rng.integers(1, 8))
        gpu_type = rng.integers(0, types, gpus)
        running = int(rng.integers(0, gpus))
        predicted = rng.integers(1, 40, size=(jobs + running, types)).astype(float)
        gpu_job = np.full(gpus, -1)
        busy = rng.choice(gpus, size=min(running, gpus), replace=False)
        gpu_job[busy] = jobs + np.arange(len(busy))
        start = np.full(jobs + running, np.nan)
        type_of = np.full(jobs + running, -1)
        start[gpu_job[busy]] = rng.integers(0, 30, len(busy)).astype(float)  # some overrun (end < now)
        type_of[gpu_job[busy]] = gpu_type[busy]
        view = SimpleNamespace(gpu_job=gpu_job, gpu_type=gpu_type, now=25.0, start=start, predicted=predicted,
                               type_of=type_of, gpu_types=[f"t{k}" for k in range(types)])
        avail = np.full(gpus, 25.0)
        avail[busy] = np.maximum(25.0, start[gpu_job[busy]] + predicted[gpu_job[busy], gpu_type[busy]])
        P, arrival = predicted[:jobs], rng.uniform(0.0, 25.0, jobs)
        feasible = np.ones((jobs, types), dtype=bool)
        everything = np.argsort(gpu_job >= 0, kind="stable")
        want = {int(everything[i]): q for i, q in
                allox.plan_queues(P, arrival, feasible, gpu_type[everything], avail[everything]).items()}
        policy = AlloxPolicy()
        order, machine_avail = policy._earliest_gpus(view, jobs)
        assert np.array_equal(machine_avail, avail[order]), case
        got = {int(order[i]): q for i, q in
               allox.plan_queues(P, arrival, feasible, gpu_type[order], machine_avail).items()}
        assert got == want, case

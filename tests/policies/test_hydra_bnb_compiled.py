"""Hydra's compiled branch-and-bound (policies.hydra_search) against the Python search: on random
queues (integer times, so costs tie exactly, and fractional ones; with and without deadlines and a
due clock; node limits that cut the search; incumbents), the same order, the same cost bit for
bit, the same node count and stop reason."""

from __future__ import annotations

import math

import numpy as np

from policies.hydra import Jobs, branch_and_bound, branch_and_bound_py, queue_cost, srtf, swap_heuristic


def _bits(cost):
    return tuple(float(x).hex() for x in cost)


def _random_case(rng):
    n = int(rng.integers(2, 11)) if rng.random() < 0.8 else int(rng.integers(14, 40))
    total = n + int(rng.integers(0, 5))
    integer = rng.random() < 0.5
    if integer:
        p = rng.integers(1, 20, total).astype(float)
        submit = rng.integers(0, 30, total).astype(float)
    else:
        p = rng.uniform(0.1, 20.0, total)
        submit = rng.uniform(0.0, 30.0, total)
    share = rng.choice([0.0, 0.3, 0.7, 1.0])
    slack = rng.uniform(0.0, 2.0) * p.sum() / 2
    deadline = submit + p + (rng.integers(0, int(slack) + 1, total) if integer else rng.uniform(0, slack, total))
    deadline[rng.random(total) >= share] = math.inf
    due_p = None if rng.random() < 0.6 else p * rng.choice([1.0, 1.5, 2.0])
    jobs = Jobs(p, submit, deadline, due_p)
    job_set = frozenset(rng.choice(total, n, replace=False).tolist())
    t0 = float(rng.integers(0, 40)) if integer else float(rng.uniform(0, 40))
    t0_due = None if due_p is None else t0 + float(rng.integers(0, 10))
    return job_set, t0, t0_due, jobs


def test_compiled_search_matches_python():
    rng = np.random.default_rng(55)
    cut = improved = tardy = 0
    for case in range(400):
        job_set, t0, t0_due, jobs = _random_case(rng)
        limit = [None, 1, 2, 5, 20, 200][int(rng.integers(0, 6))]
        if limit is None and len(job_set) > 10:
            limit = 2000  # an unlimited search of a long queue can take very long
        incumbent = None
        if rng.random() < 0.5:
            seq = srtf(job_set, jobs)
            incumbent = swap_heuristic(seq, t0, jobs, t0_due)
        py_seq, py_cost, py_stats = branch_and_bound_py(job_set, t0, jobs, t0_due=t0_due, max_nodes=limit,
                                                        incumbent=incumbent)
        seq, cost, stats = branch_and_bound(job_set, t0, jobs, t0_due=t0_due, max_nodes=limit, incumbent=incumbent)
        assert seq == py_seq, f"case {case}"
        assert _bits(cost) == _bits(py_cost), f"case {case}"
        assert (stats.nodes, stats.stopped_by) == (py_stats.nodes, py_stats.stopped_by), f"case {case}"
        cut += stats.stopped_by == "nodes"
        start = incumbent[1] if incumbent else queue_cost(srtf(job_set, jobs), t0, jobs, t0_due)
        improved += cost < start
        tardy += start[0] > 0
    # the cases exercise cut searches, improvements and tardy queues
    assert cut >= 50 and improved >= 50 and tardy >= 100


def test_python_fallback_for_long_queues_and_clock():
    rng = np.random.default_rng(3)
    p = rng.uniform(1, 10, 70)
    jobs = Jobs(p, np.zeros(70), np.where(rng.random(70) < 0.5, p * 3, math.inf))
    job_set = frozenset(range(70))
    assert branch_and_bound(job_set, 0.0, jobs, max_nodes=30) == branch_and_bound_py(job_set, 0.0, jobs, max_nodes=30)
    small = frozenset(range(8))
    seq, cost, _ = branch_and_bound(small, 0.0, jobs, max_nodes=None, stop_at=1e18)
    assert (seq, cost) == branch_and_bound_py(small, 0.0, jobs, max_nodes=None)[:2]

"""AlloX's fast paths against the from-scratch computations they replace, on seeded random cases:
the waiting jobs' orders kept as jobs arrive and start (the window's candidates), the compiled
greedy guess and cost matrix, and the median by sorting — bit for bit.

Why: each is exact by construction (same candidates, same floating-point operations), and a
different bit in a cost or a guess can change which of several equal-cost matchings is found."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from policies import allox
from policies.allox import INFEASIBLE, AlloxPolicy, _first_guess, _median, _slot_costs
from simulator.cluster import homogeneous_groups
from simulator.failure_models import FailureModel, JobFates
from simulator.failures import FailureSimulation
from simulator.preemption import make_simulation
from simulator.timing import make_predictor
from tests.records import from_records

TYPES = ("A100", "V100", "T4")


class FromScratch(AlloxPolicy):
    """AlloX choosing its window from every waiting job at each decision, as before the kept orders."""

    def __init__(self, **options) -> None:
        super().__init__(**options)
        self._kept = False


def random_jobs(rng: np.random.Generator, n: int) -> list[dict]:
    """Jobs in bursts (a queue builds up), with run times that tie often, some not on every type."""
    records = []
    for i in range(n):
        times = rng.choice([30.0, 60.0, 200.0, 900.0, 3000.0], size=len(TYPES)) * rng.choice([1.0, 1.0, 1.5])
        if rng.random() < 0.2:
            times[rng.integers(len(TYPES))] = math.inf
        records.append({"job_id": f"j{i}", "submit_s": float(rng.integers(0, 20) * 40), "gpu_type": "",
                        "num_gpus": int(rng.choice([1, 1, 1, 2, 4])), "duration_s": float(times[np.isfinite(times)][0]),
                        **{f"runtime_s:{t}": float(x) for t, x in zip(TYPES, times)}})
    return records


class Counted(allox.WaitingOrders):
    made = 0

    def __init__(self, view) -> None:
        super().__init__(view)
        Counted.made += 1


def same_records(make, options: dict, monkeypatch) -> None:
    monkeypatch.setattr(allox, "WaitingOrders", Counted)
    Counted.made = 0
    fast = make(AlloxPolicy(**options))
    assert Counted.made == 1  # made once, then kept as jobs arrive and start: never rebuilt
    pd.testing.assert_frame_equal(fast.records, make(FromScratch(**options)).records)


@pytest.mark.parametrize("seed", range(24))
def test_kept_orders_pick_the_from_scratch_window(seed, monkeypatch):
    rng = np.random.default_rng(seed)
    trace = from_records(random_jobs(rng, int(rng.integers(10, 80))))
    cluster = homogeneous_groups([(t, int(rng.choice([1, 2, 4])), int(rng.integers(1, 3))) for t in TYPES], "t")
    options = {"window": int(rng.choice([2, 3, 5, 12]))}
    predictor = "truth" if seed % 2 else "noisy:0.3"
    same_records(lambda policy: make_simulation(trace, cluster, policy, make_predictor(predictor, seed=seed)).run(),
                 options, monkeypatch)


@pytest.mark.parametrize("seed", range(12))
def test_kept_orders_pick_the_from_scratch_window_as_failed_jobs_come_back(seed, monkeypatch):
    # a failed job is submitted again with what is left of its work: new predictions, a new arrival
    rng = np.random.default_rng(500 + seed)
    records = random_jobs(rng, int(rng.integers(10, 50)))
    lengths = [tuple(float(x) for x in rng.integers(1, 400, rng.integers(0, 3))) for _ in records]
    fates = JobFates(lengths, [tuple(float(g) for g in rng.integers(0, 60, len(x))) for x in lengths],
                     np.array(["completed"] * len(records), dtype=object), False)
    model = FailureModel(spec="test", replay=False, jobs=None, nodes=None)
    trace = from_records(records)
    cluster = homogeneous_groups([(t, 2, 1) for t in TYPES] + [(TYPES[0], 4, 1)], "t")
    same_records(lambda policy: FailureSimulation(trace, cluster, policy, make_predictor("truth", seed=1),
                                                  failures=model, fates=fates, checkpoint_every="50", seed=seed).run(),
                 {"window": int(rng.choice([2, 4, 8]))}, monkeypatch)


def first_guess_numpy(P, feasible, group_type, group_avail, size):
    """The guess as numpy computed it, job by job (reference)."""
    group_of = np.repeat(np.arange(len(size)), size)
    times = np.where(feasible, P, np.inf)
    finish = group_avail[group_of].astype(np.float64)
    machine_times = times[:, group_type[group_of]]
    length = np.zeros(len(finish), dtype=np.int64)
    for j in np.argsort(times.min(axis=1), kind="stable").tolist():
        ends = finish + machine_times[j]
        i = int(ends.argmin())
        if ends[i] < np.inf:
            finish[i] = ends[i]
            length[i] += 1
    greedy = np.maximum.reduceat(length, np.flatnonzero(np.diff(group_of, prepend=-1)))
    type_speed = {t: 1.0 / np.median(P[feasible[:, t], t]) if feasible[:, t].any() else 0.0
                  for t in set(group_type.tolist())}
    speed = np.array([type_speed[t] for t in group_type.tolist()])
    share = P.shape[0] * speed / max(float(np.dot(speed, size)), 1e-300)
    return np.nan_to_num(np.maximum(greedy, share), nan=P.shape[0], posinf=P.shape[0])


def random_matrix_case(rng: np.random.Generator):
    n, types = int(rng.integers(1, 40)), int(rng.integers(1, 4))
    P = rng.choice([0.0, 1.0, 7.5, 60.0, 1e3 / 3, 1e6 + 0.1], size=(n, types)) * rng.uniform(0.5, 2.0, (n, types))
    P[rng.random((n, types)) < 0.1] = np.inf
    feasible = np.isfinite(P) & (rng.random((n, types)) < 0.9)
    groups = int(rng.integers(1, 8))
    group_type = np.sort(rng.integers(0, types, groups))
    group_avail = rng.choice([0.0, 5.0, 1e4 + 0.3, 2e6 / 7], groups)
    size = rng.integers(1, 5, groups)
    return P, feasible, group_type, group_avail, size


@pytest.mark.parametrize("seed", range(300))
def test_the_compiled_guess_and_costs_are_numpys_bit_for_bit(seed):
    rng = np.random.default_rng(seed)
    P, feasible, group_type, group_avail, size = random_matrix_case(rng)
    with np.errstate(divide="ignore", invalid="ignore"):
        expected = first_guess_numpy(P, feasible, group_type, group_avail, size)
        got = _first_guess(P, feasible, group_type, group_avail, size)
    assert got.tobytes() == expected.tobytes()
    # the cost matrix, slots by jobs, as numpy built it
    arrival = rng.choice([0.0, 3.0, 1e4, 2e6 / 7 + 1], P.shape[0])
    rows = int(rng.integers(1, 30))
    t_row, avail_row, k_row = rng.integers(0, P.shape[1], rows), rng.choice(group_avail, rows), rng.integers(1, 9, rows)
    cost = np.maximum(0.0, avail_row[:, None] - arrival[None, :]) + k_row[:, None] * P.T[t_row]
    cost[~feasible.T[t_row]] = INFEASIBLE
    assert _slot_costs(P, arrival, feasible, t_row, avail_row, k_row).tobytes() == cost.tobytes()


@pytest.mark.parametrize("seed", range(200))
def test_the_median_by_sorting_is_numpys(seed):
    rng = np.random.default_rng(seed)
    with np.errstate(over="ignore", invalid="ignore"):
        values = rng.choice([-0.0, 0.0, 1.0, 1e-300, 1e308, 3.3, np.inf], int(rng.integers(1, 12)))
        values = values * rng.uniform(0.1, 3.0)
        assert np.asarray(_median(values)).tobytes() == np.asarray(np.median(values)).tobytes()


def test_the_orders_rebuild_when_a_job_left_unseen():
    # a view whose waiting set lost a job the policy did not start: the orders are made anew
    rng = np.random.default_rng(3)
    trace = from_records(random_jobs(rng, 30))
    cluster = homogeneous_groups([(t, 1, 1) for t in TYPES], "t")
    policy = AlloxPolicy(window=2)
    sim = make_simulation(trace, cluster, policy, make_predictor("truth", seed=1))
    view = sim.view
    for job in range(5):
        view.waiting[job] = None
    policy.on_arrival(view, list(range(5)))
    del view.waiting[2]
    orders = policy._synced_orders(view)
    assert sorted(orders.keys) == [0, 1, 3, 4]
    assert orders.first(0, 10) == sorted([0, 1, 3, 4], key=lambda j: (float(view.predicted[j, 0]), j))
    assert isinstance(allox.WaitingOrders(view), allox.WaitingOrders)


def earliest_gpus_numpy(by_type: list[np.ndarray], gpu_job, start, predicted, type_of, now: float, n: int):
    """The n earliest GPUs per type as numpy computed them before the compiled kernel."""
    idle_parts, busy_parts, busy_avail = [], [], []
    for ids in by_type:
        busy = gpu_job[ids] >= 0
        idle = ids[~busy]
        idle_parts.append(idle[:n])
        if len(idle) < n:
            taken = ids[busy]
            jobs = gpu_job[taken]
            avail = np.maximum(now, start[jobs] + predicted[jobs, type_of[jobs]])
            keep = np.sort(np.lexsort((taken, avail))[:n - len(idle)])
            busy_parts.append(taken[keep])
            busy_avail.append(avail[keep])
    idle = np.concatenate(idle_parts)
    return np.concatenate([idle, *busy_parts]), np.concatenate([np.full(len(idle), now), *busy_avail])


@pytest.mark.parametrize("seed", range(40))
def test_the_compiled_earliest_gpus_are_numpys(seed):
    """GPUs of several types interleaved by id, some idle, busy ones free at tied times (many jobs
    of equal start and run time) or already overdue (free now), windows smaller and larger than a type."""
    rng = np.random.default_rng(seed)
    gpus, types, jobs = int(rng.integers(1, 40)), int(rng.integers(1, 4)), 30
    gpu_type = rng.integers(0, types, gpus)
    gpu_job = np.where(rng.random(gpus) < 0.3, -1, rng.integers(0, jobs, gpus))
    start = rng.choice([0.0, 10.0, 50.0], jobs)
    predicted = rng.choice([5.0, 20.0, 100.0, 400.0], (jobs, types))
    type_of = rng.integers(0, types, jobs)
    now, n = float(rng.choice([0.0, 30.0, 120.0])), int(rng.integers(1, 50))
    by_type = [np.flatnonzero(gpu_type == k) for k in range(types)]
    bounds = np.cumsum([0] + [len(ids) for ids in by_type]).astype(np.int64)
    order, when = allox.earliest_gpus(np.concatenate(by_type).astype(np.int64), bounds, gpu_job, start, predicted,
                                      type_of, now, n)
    want_order, want_when = earliest_gpus_numpy(by_type, gpu_job, start, predicted, type_of, now, n)
    np.testing.assert_array_equal(order, want_order)
    assert when.tobytes() == want_when.tobytes()

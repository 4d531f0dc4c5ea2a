"""A round's reallocation (policies.rounds): the waiting jobs' heaps give the same decisions as
ranking every job, and the heaps' lazy deletion keeps only the current entries."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from policies.base import Placement, Preemption
from policies.rounds import WaitingHeaps, reallocate


def random_round(seed: int):
    """A cluster of 3 types, some jobs running (within capacity), others waiting with frozen keys."""
    rng = np.random.default_rng(seed)
    total = rng.integers(1, 9, 3)
    n = int(rng.integers(5, 40))
    num_gpus = rng.choice([1, 1, 1, 2, 4, 8], n)
    key = np.round(rng.uniform(0, 10, n), 1)  # ties on purpose
    submit = np.round(rng.uniform(0, 5, n))
    free = total.copy()
    running, waiting = {}, {}
    for job in rng.permutation(n).tolist():
        k = int(rng.integers(3))
        if rng.random() < 0.5 and free[k] >= num_gpus[job]:
            free[k] -= num_gpus[job]
            running[job] = (0.0, k)
        else:
            waiting[job] = None
    view = SimpleNamespace(total_by_type=total, running=running, waiting=waiting, num_gpus=num_gpus,
                           gpu_types=["A", "B", "C"])
    return view, key, submit


def choose_most_room(view):
    def choose(job, room):
        most = max(room)
        return room.index(most) if most >= view.num_gpus[job] else None
    return choose


@pytest.mark.parametrize("seed", range(60))
def test_heaps_decide_as_ranking_every_job(seed):
    view, key, submit = random_round(seed)
    ranked_all = sorted((float(key[j]), float(submit[j]), j) for j in [*view.running, *view.waiting])
    expected = reallocate(view, ranked_all, None, choose_most_room(view))
    heaps = WaitingHeaps()
    for job in view.waiting:
        heaps.push(job, int(view.num_gpus[job]), (float(key[job]), float(submit[job])))
    ranked_running = sorted((float(key[j]), float(submit[j]), j) for j in view.running)
    assert reallocate(view, ranked_running, heaps, choose_most_room(view)) == expected
    decisions, suspended = expected
    placed = [d.job for d in decisions if isinstance(d, Placement)]
    preempted = {d.job for d in decisions if isinstance(d, Preemption)}
    assert preempted <= set(view.running) and set(suspended) <= preempted
    assert len(placed) == len(set(placed)) and not set(placed) & (set(view.running) - preempted)
    # capacity: the kept running jobs and the placements fit every type
    use = np.zeros(3, dtype=int)
    for job, (_, k) in view.running.items():
        use[k] += view.num_gpus[job] if job not in preempted else 0
    for d in decisions:
        if isinstance(d, Placement):
            use[view.gpu_types.index(d.gpu_type)] += view.num_gpus[d.job]
    assert (use <= view.total_by_type).all()


def test_a_requeued_job_counts_once_under_its_new_key():
    heaps = WaitingHeaps()
    heaps.push(1, 1, (5.0, 0.0))
    heaps.push(2, 1, (3.0, 0.0))
    heaps.requeue(1, 1, (1.0, 0.0))  # suspended with less left: now first
    waiting = {1: None, 2: None}
    (entry, need) = heaps.head(waiting, 1)
    assert entry[:3] == (1.0, 0.0, 1) and need == 1
    heaps.pop(1)
    assert heaps.head(waiting, 1)[0][2] == 2
    heaps.pop(1)
    assert heaps.head(waiting, 1) is None  # job 1's old entry lapsed with its requeue


def test_counts_that_do_not_fit_are_not_looked_at():
    heaps = WaitingHeaps()
    heaps.push(7, 8, (0.0, 0.0))
    heaps.push(3, 2, (9.0, 0.0))
    waiting = {3: None, 7: None}
    assert heaps.head(waiting, 4)[0][2] == 3  # the 8-GPU job ranks first but cannot fit 4
    assert heaps.head(waiting, 8)[0][2] == 7
    assert heaps.head({3: None}, 8)[0][2] == 3  # job 7 started elsewhere: its entry is dropped

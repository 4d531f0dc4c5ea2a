"""Gavel's rounds as Gavel's scheduler runs them (policies/gavel_rounds.py against
stanford-futuredata/gavel scheduler/scheduler.py): priorities, resets, the per-type walk, and
where rounds fall. Each expected assignment is worked out by hand in the comments."""

from __future__ import annotations

import numpy as np
import pytest

from policies.gavel_rounds import GavelRounds
from policies.registry import make_policy
from simulator.cluster import homogeneous_groups
from simulator.preemption import make_simulation
from simulator.timing import make_predictor
from tests.records import from_records

L = 360.0  # the lease


def _book(x: np.ndarray, *, jobs: int, types: int = 2, min_reset: float = 1920.0, now: float = 10.0) -> GavelRounds:
    """A run whose jobs all arrived at ``now`` and got allocation ``x`` at a reset then."""
    book = GavelRounds(L, min_reset, jobs, types)
    book.begin(now, np.arange(jobs), arrivals_left=False)
    assert book.due(now)
    book.reset(now, x)
    return book


def test_zero_allocations_fill_gpus_the_allocation_leaves_idle():
    """Before: a (job, type) with X = 0 had priority -inf and was never taken, so A's second GPU
    sat idle. Gavel gives it priority 0: taken after every positive one, while GPUs are left."""
    x = np.array([[1.0, 0.0], [0.0, 1.0], [0.0, 0.0]])
    book = _book(x, jobs=3)
    can_run = np.ones((3, 2), dtype=bool)
    # walk A (2 GPUs): job 0 (priority 1 / (1/3) = 3), then jobs 1 and 2 at priority 0 in arrival
    # order: job 1 takes A's second GPU; walk B: job 1 is placed, so job 2 takes B
    assert book.choose(can_run, np.ones(3), np.array([2, 1]), walk=[0, 1]) == {0: 0, 1: 0, 2: 1}
    # a job that cannot run on a type is never taken there, whatever its priority
    can_run[1, 0] = False
    assert book.choose(can_run, np.ones(3), np.array([2, 1]), walk=[0, 1]) == {0: 0, 2: 0, 1: 1}


def test_priorities_time_received_and_a_reset_on_three_jobs_and_two_types():
    """Jobs 0-2 arrive at 10 and get X = 1/3 on each of two one-GPU types A and B (what max-min
    gives alike jobs); job 3 arrives at 730. By hand, priority = X / (t_jk / W_k), with t_jk the
    job's time on k and W_k the type's since the last reset (a reset gives every job half a round,
    t = L/2 = 180, so W = 180 per job):

    round 1 (10): every priority (1/3)/(180/540) = 1; A: job 0, B: job 1 (ties: arrival order).
    its time counts from 0, not 10 (Gavel's quirk): 370 s. W_A = W_B = 540 + 370 = 910.
    round 2 (370): on A job 0 has (1/3)·910/550 = 0.55, jobs 1 and 2 (1/3)·910/180 = 1.69: job 1;
      on B jobs 0 and 2 tie at 1.69: job 0.
    round 3 (730): 360 s more (job 1 on A, job 0 on B). Job 3 arrives: a reset (min_reset 0). Each
      job's deficit grows by X × 720 s since the reset minus what it received: job 0 (240 - 370,
      240 - 360) = (-130, -120), job 1 (-120, -130), job 2 (240, 240), job 3 (0, 0). With the new
      X = 1/4 every priority is (1/4)/(180/720) = 1: the deficit decides, A: job 2; B: job 3.
    """
    book = GavelRounds(L, 0.0, 4, 2)
    can_run, one, room = np.ones((4, 2), dtype=bool), np.ones(4), np.array([1, 1])
    book.begin(10.0, np.arange(3), arrivals_left=True)
    assert book.due(10.0)
    book.reset(10.0, np.full((3, 2), 1 / 3))
    assert book.choose(can_run, one, room, walk=[0, 1]) == {0: 0, 1: 1}
    book.begin(370.0, np.arange(3), arrivals_left=True)
    assert book.worker_time.tolist() == [910.0, 910.0]
    assert book.job_time[0].tolist() == [550.0, 180.0] and book.job_time[1].tolist() == [180.0, 550.0]
    assert not book.due(370.0)  # nothing arrived or finished: the allocation stays
    assert book.choose(can_run, one, room, walk=[0, 1]) == {1: 0, 0: 1}
    book.begin(730.0, np.arange(4), arrivals_left=False)
    assert book.due(730.0)
    book.reset(730.0, np.full((4, 2), 1 / 4))
    owed = [[-130.0, -120.0], [-120.0, -130.0], [240.0, 240.0], [0.0, 0.0]]
    assert np.allclose(book.deficit, owed, rtol=0, atol=1e-9)
    assert book.job_time.tolist() == [[180.0, 180.0]] * 4 and book.worker_time.tolist() == [720.0, 720.0]
    assert book.choose(can_run, one, room, walk=[0, 1]) == {2: 0, 3: 1}


def test_a_job_outside_the_allocation_holds_its_gpus_idle_until_the_next_reset():
    """Gavel's walk counts a job that arrived after the last reset (no allocation yet, priority 0)
    against the type's room but gives it no GPUs, until the allocation is recomputed (at least
    1,920 s after the last reset)."""
    book = GavelRounds(L, 1920.0, 2, 2)
    book.begin(10.0, np.array([0]), arrivals_left=True)
    book.reset(10.0, np.array([[1.0, 0.0]]))
    can_run = np.ones((2, 2), dtype=bool)
    assert book.choose(can_run, np.ones(2), np.array([1, 1]), walk=[0, 1]) == {0: 0}
    book.begin(370.0, np.arange(2), arrivals_left=False)  # job 1 arrives
    assert not book.due(370.0)  # 360 s since the reset at 10: before Gavel's 1,920 s
    assert book.choose(can_run, np.ones(2), np.array([1, 1]), walk=[0, 1]) == {0: 0}  # B idle, job 1 waits
    book.begin(1930.0, np.arange(2), arrivals_left=False)
    assert book.due(1930.0)


def _run(jobs: list[dict], groups, spec: str):
    policy = make_policy(spec)
    result = make_simulation(from_records(jobs), homogeneous_groups(groups, "t"), policy, make_predictor("truth")).run()
    return result.records.set_index("job_id"), policy


def _job(job_id: str, submit: float, **runtimes: float) -> dict:
    first = next(iter(runtimes))
    return {"job_id": job_id, "submit_s": submit, "num_gpus": 1, "duration_s": runtimes[first], "gpu_type": first,
            **{f"runtime_s:{k}": v for k, v in runtimes.items()}}


@pytest.mark.parametrize("solver", ["ecos", "highs"])
def test_the_first_round_is_at_the_first_arrival_and_an_arrival_on_an_idle_cluster_starts_one(solver):
    """Before: the first round came a lease after the first arrival (job a started at 460, not
    100). Gavel's simulator begins a round at an arrival while nothing runs; a round ends when its
    jobs all finish (job a at 150), so job b, arriving at 1000 on an idle cluster, starts at once."""
    records, _ = _run([_job("a", 100.0, A100=50.0), _job("b", 1000.0, A100=70.0)], [("A100", 1, 1)],
                      f"gavel:restart=0,solver={solver}")
    assert records.loc["a", "start"] == 100.0 and records.loc["a", "end"] == 150.0
    assert records.loc["b", "start"] == 1000.0 and records.loc["b", "end"] == 1070.0


def test_an_arrival_during_a_round_waits_for_its_end_and_a_round_ends_when_its_jobs_finish():
    """Job a runs 500 s from 0: its round ends at 360 (the lease), where b, arrived at 100, is
    taken in; both share one GPU by priority. Job c arrives at 200 on the other type's idle GPU
    but waits for the round's end too (Gavel adds arrivals at the end of the round)."""
    records, policy = _run([_job("a", 0.0, A100=500.0, V100=500.0), _job("b", 100.0, A100=100.0, V100=100.0)],
                           [("A100", 1, 1), ("V100", 1, 1)], "gavel:restart=0")
    assert records.loc["a", "start"] == 0.0
    assert records.loc["b", "start"] == 360.0  # not 100: it waits for the round to end
    assert policy.describe()["allocation_resets"] >= 1


def test_a_job_that_is_never_admitted_is_not_waited_for():
    """Found by the engine's property test: after a reset at 1 s, job c arrives at 2 s with no
    allocation (the next reset is 1,920 s away) while job d, too large for the cluster, is
    rejected and never arrives. Waiting for d's arrival left c waiting forever; every job that
    can arrive has arrived, so Gavel resets at once and runs c."""
    jobs = [_job("a", 0.0, V100=0.0), _job("b", 0.0, V100=1.0), _job("c", 2.0, V100=5.0),
            {**_job("d", 3.0, V100=1.0), "num_gpus": 2}]
    records, _ = _run(jobs, [("V100", 1, 1)], "gavel:restart=0")
    assert records.loc["c", "start"] == 2.0 and records.loc["c", "end"] == 7.0
    assert records.loc["d", "status"] == "rejected"


def test_a_job_that_failed_and_came_back_before_the_next_round_is_held_once_as_a_new_job():
    """With failures a job ends (its attempt failed) and is submitted again; back before the next
    round, it was kept in the order and appended as new, so the walk saw it twice and its round's
    time was counted twice. It is new once: at the end of the order, its time and deficit anew."""
    book = GavelRounds(L, 0.0, 3, 1)
    can_run, one, room = np.ones((3, 1), dtype=bool), np.ones(3), np.array([3])
    book.begin(0.0, np.arange(3), arrivals_left=False)
    book.reset(0.0, np.full((3, 1), 1 / 3))
    assert book.choose(can_run, one, room, walk=[0]) == {0: 0, 1: 0, 2: 0}
    book.finish(0, 100.0)  # its attempt failed at 100 s; it is back (waiting) by the round at 360 s
    book.begin(360.0, np.arange(3), arrivals_left=False)
    assert book.order.tolist() == [1, 2, 0]
    assert book.worker_time.tolist() == [3 * L / 2 + 100.0 + 2 * 360.0]  # job 0's 100 s counted once
    assert book.job_time[0, 0] == L / 2 and book.deficit[0, 0] == 0.0

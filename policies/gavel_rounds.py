"""Gavel's rounds: which jobs run in the next round, as Gavel's scheduler chooses them.

Why its own module: Gavel realises an allocation X (the fraction of time each job should have on
each GPU type, :mod:`policies.gavel`) over rounds by priorities, and researchers compare against
Gavel's own simulator, so this follows ``scheduler/scheduler.py`` of stanford-futuredata/gavel
(commit c4fa400) rule by rule; the names in brackets are its methods:

* **Time received** [``_done_callback``]: after each round, a job that ran on type k adds its
  micro-task's time to ``job_time[j, k]`` and to the type's ``worker_time[k]`` (once per job,
  whatever its GPUs). Gavel measures that time from the end of the last round that ran a job
  (its ``current_round_start_time``), not from the round's own start: after an idle gap the gap
  counts as time received (the first round's from time 0). Kept, as it changes priorities.
* **Resets** [``_update_priorities``, ``_reset_time_run_so_far``]: the allocation is recomputed
  only when jobs arrived or finished since, and at least ``min_reset_s`` (Gavel's
  ``minimum_time_between_allocation_resets``, 1,920 s) after the last reset — or whenever the last
  reset was at time 0 (Gavel's "never reset" marker, which a reset at time 0 also leaves). A reset
  adds each job's shortfall (X × time since the reset − time received) to its deficit and gives
  every job half a round of credit on every type. A job that arrived since has no allocation yet.
  Gavel forces a reset once every job has arrived and a round ran nothing.
* **Priorities**: X[j, k] / (job_time[j, k] / worker_time[k]); X × 1e9 before the type has any
  time; 0 for a job outside the allocation, for X = 0, and where the job cannot run.
* **The walk** [``_schedule_jobs_on_workers_helper``]: type by type in a fixed order (Gavel's
  ``*_perf`` policies: V100, P100, K80 — here the fastest type first, by each job's speed
  relative to its fastest type, averaged: :func:`policies.gavel.fastest_first`), each type's
  jobs by (priority, deficit, X) from the highest, in arrival order on
  ties; a job is taken if it has no type yet, can run there and fits in what is left (zero
  priorities last, so GPUs that X leaves idle are filled). A job taken while outside the
  allocation holds its GPUs idle for the round [``_schedule_jobs_on_workers``].
"""

from __future__ import annotations

import numpy as np
from numba import njit

PRIORITY_BEFORE_ANY_TIME = 1e9  # Gavel's "don't use inf so that 2 × priority > priority"


@njit(cache=True)
def ranking(priority: np.ndarray, deficit: np.ndarray, x: np.ndarray) -> np.ndarray:
    """The rows by descending (priority, deficit, X), ties in row (arrival) order: three stable
    sorts from the least significant key, i.e. ``np.lexsort((rows, -x, -deficit, -priority))``."""
    order = np.arange(priority.shape[0])
    for key in (x, deficit, priority):
        order = order[np.argsort(-key[order], kind="mergesort")]
    return order


@njit(cache=True)
def _first(a: int, b: int, priority: np.ndarray, deficit: np.ndarray, x: np.ndarray) -> bool:
    """Whether row a comes before row b in :func:`ranking`'s order (keys without NaN)."""
    if priority[a] != priority[b]:
        return priority[a] > priority[b]
    if deficit[a] != deficit[b]:
        return deficit[a] > deficit[b]
    if x[a] != x[b]:
        return x[a] > x[b]
    return a < b


@njit(cache=True)
def _sift_down(heap: np.ndarray, size: int, i: int, priority: np.ndarray, deficit: np.ndarray,
               x: np.ndarray) -> None:
    while True:
        child = 2 * i + 1
        if child >= size:
            return
        if child + 1 < size and _first(heap[child + 1], heap[child], priority, deficit, x):
            child += 1
        if not _first(heap[child], heap[i], priority, deficit, x):
            return
        heap[child], heap[i] = heap[i], heap[child]
        i = child


@njit(cache=True)
def _fill_type(k: int, left: int, priority: np.ndarray, deficit: np.ndarray, x: np.ndarray,
               can_run: np.ndarray, need: np.ndarray, type_of: np.ndarray, taken: np.ndarray, count: int) -> int:
    """One type of the walk: the rows that can still be taken there, in :func:`ranking`'s order,
    while GPUs are left. A heap, popped only as far as the type's GPUs last: on an overloaded
    cluster thousands of jobs are held and a few dozen run, and a full sort per type and round
    cost more than everything else (a key with NaN, which a heap cannot order as lexsort does:
    the full sort). Returns the new count of rows taken."""
    n = priority.shape[0]
    rows = np.empty(n, np.int64)
    size = 0
    in_order = np.isnan(priority).any() or np.isnan(deficit).any() or np.isnan(x).any()
    for r in ranking(priority, deficit, x) if in_order else np.arange(n):
        # a row taken already, unable to run here or larger than the room is never taken here
        if type_of[r] < 0 and can_run[r, k] and need[r] <= left:
            rows[size] = r
            size += 1
    if not in_order:
        for i in range(size // 2 - 1, -1, -1):
            _sift_down(rows, size, i, priority, deficit, x)
    start = 0
    while start < size and left > 0:
        if in_order:
            r = rows[start]
            start += 1
        else:
            r = rows[0]
            size -= 1
            rows[0] = rows[size]
            _sift_down(rows, size, 0, priority, deficit, x)
        if need[r] > left:
            continue
        left -= need[r]
        type_of[r] = k
        taken[count] = r
        count += 1
    return count


@njit(cache=True)
def choose_rows(jobs: np.ndarray, x: np.ndarray, job_time: np.ndarray, worker_time: np.ndarray,
                allocated: np.ndarray, deficit: np.ndarray, can_run: np.ndarray, num_gpus: np.ndarray,
                room: np.ndarray, walk: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Gavel's round over the held ``jobs`` (arrival order; the other arrays are per job, the
    rows of the result per entry of ``jobs``), compiled: a round visits every held job once per
    type, and in the interpreter that cost more than the rest of the round. Priorities are
    X / (job_time / worker_time) (X × 1e9 before the type has any time; 0 outside the allocation,
    for X = 0 and where the job cannot run) — the same IEEE operations as numpy's; each type in
    ``walk`` order takes, in :func:`ranking`'s order, the rows with no type yet that can run there
    and fit in what is left. Returns the rows taken, in the order taken, and their types."""
    n, m = jobs.shape[0], x.shape[1]
    priority, keys, xs = np.zeros((m, n)), np.empty((m, n)), np.empty((m, n))
    runs, need = np.empty((n, m), np.bool_), np.empty(n, np.int64)
    for r in range(n):
        j = jobs[r]
        need[r] = num_gpus[j]
        for k in range(m):
            xs[k, r], keys[k, r], runs[r, k] = x[j, k], deficit[j, k], can_run[j, k]
            if not (allocated[j] and x[j, k] != 0 and can_run[j, k]):
                continue
            fraction = job_time[j, k] / worker_time[k] if worker_time[k] > 0 else 0.0
            priority[k, r] = x[j, k] / fraction if fraction > 0 else x[j, k] * PRIORITY_BEFORE_ANY_TIME
    type_of = np.full(n, -1, np.int64)
    taken = np.empty(n, np.int64)
    count = 0
    for k in walk:
        count = _fill_type(k, room[k], priority[k], keys[k], xs[k], runs, need, type_of, taken, count)
    return taken[:count], type_of[taken[:count]]


class GavelRounds:
    """The bookkeeping of one run: jobs held, time received, deficits, the allocation and when
    it was reset. ``allocate(jobs)`` gives X for the held jobs (in ascending order) at a reset."""

    def __init__(self, lease_s: float, min_reset_s: float, num_jobs: int, num_types: int) -> None:
        self.lease = lease_s
        self.min_reset_s = min_reset_s
        n, m = num_jobs, num_types
        self.held = np.zeros(n, dtype=bool)  # arrived, not finished: Gavel's self._jobs
        self.order = np.zeros(0, dtype=np.int64)  # held jobs in arrival order (Gavel's dicts keep insertion order)
        self.job_time = np.zeros((n, m))
        self.worker_time = np.zeros(m)
        self.deficit = np.zeros((n, m))
        self.x = np.zeros((n, m))
        self.allocated = np.zeros(n, dtype=bool)  # in the allocation of the last reset
        self._allocated_rows = np.zeros(0, dtype=np.int64)  # its jobs: a reset clears only their rows
        self.last_reset = 0.0
        self.need_allocation = False
        self.busy_end = 0.0  # Gavel's current_round_start_time: the end of the last round that ran a job
        self.ran: dict[int, int] = {}  # job -> type, the last round's, in the order the walk took them
        self._ran_jobs = np.zeros(0, dtype=np.int64)  # ... as arrays, for the accounting
        self._ran_types = np.zeros(0, dtype=np.int64)
        self.finished: dict[int, float] = {}  # job -> when, since the last round
        self.resets = 0
        self._num_gpus: tuple[np.ndarray | None, np.ndarray | None] = (None, None)  # (the view's, as int64)

    # -- events between rounds -----------------------------------------------------------------
    def finish(self, job: int, now: float) -> None:
        self.finished[job] = now

    # -- a round -------------------------------------------------------------------------------
    def begin(self, now: float, present: np.ndarray, arrivals_left: bool) -> None:
        """Account the last round, drop the finished jobs and take in the new ones (``present``:
        the jobs waiting or running now, ascending)."""
        if self.ran:
            self._account(now)
        for job in self.finished:
            self.held[job] = False
            self.need_allocation = True
        # the jobs still held, before the new ones: a job whose attempt failed and that came back
        # since (failures) is a new one, at the end of the order, once
        kept = self.order[self.held[self.order]] if self.finished else self.order
        new = present[~self.held[present]]
        if len(new):
            self.held[new] = True
            self.job_time[new] = self.lease / 2
            self.deficit[new] = 0.0
            self.need_allocation = True
        if self.finished or len(new):
            self.order = np.concatenate([kept, new.astype(np.int64)])
        if not arrivals_left and not len(new) and not self.ran:
            self.last_reset = 0.0  # every job is in and the last round ran nothing: Gavel forces a reset
        self.finished = {}

    def _account(self, now: float) -> None:
        """The last round's time, added job by job in the walk's order (``np.add.at`` adds in
        index order, so each type's total is the same sum Gavel's loop makes)."""
        jobs, types = self._ran_jobs, self._ran_types
        ends = np.full(len(jobs), now)
        if self.finished:
            for i, job in enumerate(jobs.tolist()):
                if job in self.finished:
                    ends[i] = self.finished[job]
        spent = ends - self.busy_end
        self.job_time[jobs, types] += spent
        np.add.at(self.worker_time, types, spent)
        self.busy_end = now

    def due(self, now: float) -> bool:
        """Whether this round recomputes the allocation (then call :meth:`reset` with it)."""
        return self.need_allocation and (now - self.last_reset >= self.min_reset_s or self.last_reset == 0.0)

    def reset(self, now: float, x: np.ndarray) -> None:
        """A reset at ``now`` with the new allocation ``x`` of the held jobs (ascending)."""
        held = np.flatnonzero(self.held)
        elapsed = now - self.last_reset
        received = self.job_time[held] - self.lease / 2
        self.deficit[held] += self.x[held] * elapsed - received
        self.job_time[held] = self.lease / 2
        self.worker_time[:] = len(held) * self.lease / 2
        self.last_reset = now
        self.x[self._allocated_rows] = 0.0
        self.x[held] = x
        self.allocated[self._allocated_rows] = False
        self.allocated[held] = True
        self._allocated_rows = held
        self.need_allocation = False
        self.resets += 1

    def choose(self, can_run: np.ndarray, num_gpus: np.ndarray, room: np.ndarray,
               walk: list[int]) -> dict[int, int]:
        """The next round: job -> type for the jobs given GPUs (``can_run``: (job, type), False
        where the job's throughput is 0; ``walk``: the types in Gavel's order)."""
        jobs = self.order
        if not len(jobs):
            self._ran({}, jobs, jobs)
            return {}
        if num_gpus.dtype != np.int64:  # converted once per run, not per round (the view's never changes)
            if self._num_gpus[0] is not num_gpus:
                self._num_gpus = (num_gpus, num_gpus.astype(np.int64))
            num_gpus = self._num_gpus[1]
        rows, types = choose_rows(jobs, self.x, self.job_time, self.worker_time, self.allocated, self.deficit, can_run,
                                  num_gpus, room.astype(np.int64), np.asarray(walk, dtype=np.int64))
        inside = self.allocated[jobs[rows]]  # a job taken outside the allocation holds its GPUs idle
        ran_jobs, ran_types = jobs[rows[inside]], types[inside]
        ran = dict(zip(ran_jobs.tolist(), ran_types.tolist()))
        self._ran(ran, ran_jobs, ran_types)
        return ran

    def _ran(self, ran: dict[int, int], jobs: np.ndarray, types: np.ndarray) -> None:
        self.ran, self._ran_jobs, self._ran_types = ran, jobs, types

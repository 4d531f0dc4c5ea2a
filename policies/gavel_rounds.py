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

PRIORITY_BEFORE_ANY_TIME = 1e9  # Gavel's "don't use inf so that 2 × priority > priority"


class GavelRounds:
    """The bookkeeping of one run: jobs held, time received, deficits, the allocation and when
    it was reset. ``allocate(jobs)`` gives X for the held jobs (in ascending order) at a reset."""

    def __init__(self, lease_s: float, min_reset_s: float, num_jobs: int, num_types: int) -> None:
        self.lease = lease_s
        self.min_reset_s = min_reset_s
        n, m = num_jobs, num_types
        self.held = np.zeros(n, dtype=bool)  # arrived, not finished: Gavel's self._jobs
        self.order: list[int] = []  # held jobs in arrival order (Gavel's dicts keep insertion order)
        self.job_time = np.zeros((n, m))
        self.worker_time = np.zeros(m)
        self.deficit = np.zeros((n, m))
        self.x = np.zeros((n, m))
        self.allocated = np.zeros(n, dtype=bool)  # in the allocation of the last reset
        self.last_reset = 0.0
        self.need_allocation = False
        self.busy_end = 0.0  # Gavel's current_round_start_time: the end of the last round that ran a job
        self.ran: dict[int, int] = {}  # job -> type, the last round's
        self.finished: dict[int, float] = {}  # job -> when, since the last round
        self.resets = 0

    # -- events between rounds -----------------------------------------------------------------
    def finish(self, job: int, now: float) -> None:
        self.finished[job] = now

    # -- a round -------------------------------------------------------------------------------
    def begin(self, now: float, present: np.ndarray, arrivals_left: bool) -> None:
        """Account the last round, drop the finished jobs and take in the new ones (``present``:
        the jobs waiting or running now, ascending)."""
        if self.ran:
            for job, k in self.ran.items():
                spent = self.finished.get(job, now) - self.busy_end
                self.job_time[job, k] += spent
                self.worker_time[k] += spent
            self.busy_end = now
        for job in self.finished:
            self.held[job] = False
            self.need_allocation = True
        new = present[~self.held[present]]
        if len(new):
            self.held[new] = True
            self.job_time[new] = self.lease / 2
            self.deficit[new] = 0.0
            self.need_allocation = True
        if self.finished or len(new):
            self.order = [j for j in self.order if self.held[j]] + new.tolist()
        if not arrivals_left and not len(new) and not self.ran:
            self.last_reset = 0.0  # every job is in and the last round ran nothing: Gavel forces a reset
        self.finished = {}

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
        self.x[:] = 0.0
        self.x[held] = x
        self.allocated[:] = False
        self.allocated[held] = True
        self.need_allocation = False
        self.resets += 1

    def choose(self, can_run: np.ndarray, num_gpus: np.ndarray, room: np.ndarray,
               walk: list[int]) -> dict[int, int]:
        """The next round: job -> type for the jobs given GPUs (``can_run``: (job, type), False
        where the job's throughput is 0; ``walk``: the types in Gavel's order)."""
        jobs = np.asarray(self.order, dtype=np.int64)
        if not len(jobs):
            self.ran = {}
            return {}
        x = self.x[jobs]
        with np.errstate(divide="ignore", invalid="ignore"):
            fraction = np.where(self.worker_time > 0, self.job_time[jobs] / self.worker_time, 0.0)
            priority = np.where(fraction > 0, x / fraction, x * PRIORITY_BEFORE_ANY_TIME)
        priority = np.where(self.allocated[jobs, None] & (x != 0) & can_run[jobs], priority, 0.0)
        deficit = self.deficit[jobs]
        room = room.astype(np.int64).copy()
        taken: dict[int, int] = {}
        need = num_gpus[jobs].astype(np.int64)
        for k in walk:
            # descending (priority, deficit, X); ties in arrival order (Python's stable sort, reversed)
            ranked = np.lexsort((np.arange(len(jobs)), -x[:, k], -deficit[:, k], -priority[:, k]))
            for r in ranked.tolist():
                if room[k] == 0:
                    break
                job = int(jobs[r])
                if job in taken or not can_run[job, k] or need[r] > room[k]:
                    continue
                room[k] -= need[r]
                taken[job] = k
        self.ran = {job: k for job, k in taken.items() if self.allocated[job]}
        return self.ran

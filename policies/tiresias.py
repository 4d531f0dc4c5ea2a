"""Tiresias: discretised two-dimensional least-attained-service (2D-LAS), preemptive, and blind
to run times.

Why: Tiresias (Gu et al., NSDI'19) schedules without any run-time prediction, by the service a
job has had so far (GPUs × seconds run: the "two dimensions"); it is the control that shows what
a prediction adds to a preemptive scheduler. As the paper's discretised form: priority queues
by attained GPU-seconds, split at ``thresholds`` (ascending, ``/``-separated: ``3200`` gives two
queues, below and from 3,200 GPU-seconds), a job demoted to the next queue as its service
crosses a threshold; first come first served within a queue (by submit time, then job index).
``starve=S`` (the paper's starvation knob; 0: off): a job that has waited S times as long as it
last ran goes back to the first queue.

At a round boundary (every lease) it reallocates: jobs in priority order; a running job keeps
its GPUs if its type still has room after the jobs before it, else it is suspended; every other
job takes the type with the most room left (Tiresias ignores GPU heterogeneity; ties: cluster
type order). Between rounds it starts waiting jobs on free GPUs in the same order, skipping those
that do not fit.
"""

from __future__ import annotations

import numpy as np

from policies.base import Placement, PolicySpecError, Preemption
from policies.options import number
from policies.preemptive import PreemptivePolicy
from policies.rounds import WaitingHeaps, ranked, reallocate


def thresholds_option(value: str | tuple[float, ...]) -> tuple[float, ...]:
    """Ascending positive GPU-second thresholds, given as ``a/b/c``."""
    if isinstance(value, tuple):
        return value
    parts = tuple(number("thresholds", v, 0.0, np.inf, low_open=True, high_open=True)
                  for v in str(value).split("/") if v.strip())
    if not parts or list(parts) != sorted(set(parts)):
        raise PolicySpecError(f"option thresholds={value!r}: expected ascending positive GPU-seconds "
                              "such as 3200/25600")
    return parts


def most_room(room: list[int], n: int, able: np.ndarray | None = None) -> int | None:
    """The type with the most free GPUs (the first such), if ``n`` fit there: Tiresias ignores
    heterogeneity; only the types the job can run on (``able``; a trace may rule some out)."""
    if able is None or able.all():
        most = max(room)
        return room.index(most) if most >= n else None
    types = np.flatnonzero(able).tolist()
    if not types:
        return None
    k = max(types, key=room.__getitem__)  # the first of the most free
    return k if room[k] >= n else None


class TiresiasPolicy(PreemptivePolicy):
    name = "tiresias"

    def __init__(self, thresholds: str | tuple[float, ...] = (3200.0,), starve: float | str = 0.0,
                 lease: float | str = 360.0, restart: float | str = 10.0, storage_gbps: float | str = 2.0) -> None:
        super().__init__(lease, restart, storage_gbps)
        self.thresholds = np.asarray(thresholds_option(thresholds))
        self.starve = number("starve", starve, 0.0, np.inf, high_open=True)
        self._last_ran: dict[int, tuple[float, float]] = {}  # job -> (seconds it last ran, when it stopped)
        # waiting jobs by (queue, submit): a waiting job's service does not change, so its entry
        # stays right until it starts (not so with ``starve``: a starving job's queue moves with the clock)
        self._waiting = WaitingHeaps()

    def on_arrival(self, view, jobs: list[int]) -> None:
        for job in jobs:  # no service yet: the first queue
            self._waiting.push(job, int(view.num_gpus[job]), (0, float(view.submit[job])))

    def queue_of(self, view, jobs: np.ndarray) -> np.ndarray:
        """Each job's queue: how many thresholds its attained service has reached; a starving job
        (``starve``) is back in queue 0."""
        queues = np.searchsorted(self.thresholds, view.attained[jobs], side="right")
        if self.starve > 0:
            for i, job in enumerate(jobs.tolist()):
                ran = self._last_ran.get(job)
                if ran is not None and job in view.waiting and view.now - ran[1] >= self.starve * ran[0]:
                    queues[i] = 0
        return queues

    def _ranked(self, view, jobs) -> list[tuple[int, float, int]]:
        """(queue, submit, job) of ``jobs``, in priority order."""
        jobs = np.fromiter(jobs, dtype=np.int64)
        return ranked(self.queue_of(view, jobs), view.submit[jobs], jobs)

    def schedule(self, view) -> list[Placement | Preemption]:
        if not view.at_round:
            return self._fill(view)
        if not view.waiting:  # every running job has room where it runs: nothing would change
            return []

        def choose(job: int, room: list[int]) -> int | None:
            return most_room(room, int(view.num_gpus[job]), view.can_run(job))

        if self.starve > 0:  # every job ranked afresh
            out, suspended = reallocate(view, self._ranked(view, [*view.running, *view.waiting]), None, choose)
        else:
            out, suspended = reallocate(view, self._ranked(view, view.running), self._waiting, choose)
        for job in suspended:
            self._suspend(view, job)
        return out

    def _suspend(self, view, job: int) -> None:
        """Bookkeeping of a job this round suspends without a new place: when it last ran, and its
        entry in the queue its service has reached."""
        self._last_ran[job] = (view.now - view.running[job][0], view.now)
        queue = int(np.searchsorted(self.thresholds, view.attained[job], side="right"))
        self._waiting.requeue(job, int(view.num_gpus[job]), (queue, float(view.submit[job])))

    def _fill(self, view) -> list[Placement]:
        """Waiting jobs in priority order onto free GPUs, each on the type with the most free GPUs,
        skipping those that do not fit; a fill costs the jobs it starts, not the whole queue."""
        free = view.free_by_type.tolist()
        out: list[Placement] = []
        if self.starve > 0:  # a starving job's queue changes with the clock: order them afresh
            if max(free) > 0:
                for _, _, job in self._ranked(view, view.waiting):
                    self._place(view, job, free, out)
            return out
        passed = []  # heads with room only on types they cannot run on: they stay queued
        while (most := max(free)) > 0 and (head := self._waiting.head(view.waiting, most)) is not None:
            self._waiting.pop(head[1])
            if not self._place(view, head[0][2], free, out):
                passed.append(head)
        self._waiting.restore(passed)
        return out

    @staticmethod
    def _place(view, job: int, free: list[int], out: list[Placement]) -> bool:
        """``job`` on the type with the most free GPUs it can run on, if it fits there (``free``
        is updated); whether it was placed."""
        n = int(view.num_gpus[job])
        k = most_room(free, n, view.can_run(job))
        if k is None:
            return False
        free[k] -= n
        out.append(Placement(job, view.gpu_types[k]))
        return True

    def describe(self) -> dict:
        return {**super().describe(), "thresholds": self.thresholds.tolist(), "starve": self.starve}

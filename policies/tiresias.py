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

import heapq

import numpy as np

from policies.base import Placement, PolicySpecError, Preemption
from policies.options import number
from policies.preemptive import PreemptivePolicy


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


class TiresiasPolicy(PreemptivePolicy):
    name = "tiresias"

    def __init__(self, thresholds: str | tuple[float, ...] = (3200.0,), starve: float | str = 0.0,
                 lease: float | str = 360.0, restart: float | str = 10.0, storage_gbps: float | str = 2.0) -> None:
        super().__init__(lease, restart, storage_gbps)
        self.thresholds = np.asarray(thresholds_option(thresholds))
        self.starve = number("starve", starve, 0.0, np.inf, high_open=True)
        self._last_ran: dict[int, tuple[float, float]] = {}  # job -> (seconds it last ran, when it stopped)
        # waiting jobs by (queue, submit, job) for the fills between rounds: a waiting job's service
        # does not change, so an entry stays right until the job starts (then it is skipped)
        self._heap: list[tuple[int, float, int, int]] = []  # (queue, submit, job, version)
        self._version: dict[int, int] = {}  # bumped when a suspended job is queued again

    def on_arrival(self, view, jobs: list[int]) -> None:
        for job in jobs:  # no service yet: the first queue
            heapq.heappush(self._heap, (0, float(view.submit[job]), job, 0))

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

    def _ordered(self, view, jobs: list[int]) -> np.ndarray:
        jobs = np.asarray(jobs, dtype=np.int64)
        return jobs[np.lexsort((jobs, view.submit[jobs], self.queue_of(view, jobs)))]

    def schedule(self, view) -> list[Placement | Preemption]:
        if not view.at_round:
            return self._fill(view)
        if not view.waiting:  # every running job has room where it runs: nothing would change
            return []
        order = self._ordered(view, [*view.running, *view.waiting])
        room = view.total_by_type.astype(np.int64).copy()
        out: list[Placement | Preemption] = []
        for position, job in enumerate(order.tolist()):
            if not room.any():  # no room left for anyone: the running jobs still unranked lose their place
                rest = order[position:]
                for late in rest[np.isin(rest, list(view.running))].tolist():
                    out.insert(0, Preemption(late))
                    self._suspend(view, late)
                break
            n = int(view.num_gpus[job])
            running = view.running.get(job)
            if running is not None and room[running[1]] >= n:
                room[running[1]] -= n
                continue
            if running is not None:
                out.insert(0, Preemption(job))
            k = int(np.argmax(room))
            if room[k] >= n:
                room[k] -= n
                out.append(Placement(job, view.gpu_types[k]))
            elif running is not None:
                self._suspend(view, job)
        return out

    def _suspend(self, view, job: int) -> None:
        """Bookkeeping of a job this round suspends without a new place: when it last ran, and its
        entry in the queue its service has reached."""
        self._last_ran[job] = (view.now - view.running[job][0], view.now)
        queue = int(np.searchsorted(self.thresholds, view.attained[job], side="right"))
        self._version[job] = version = self._version.get(job, 0) + 1
        heapq.heappush(self._heap, (queue, float(view.submit[job]), job, version))

    def _fill(self, view) -> list[Placement]:
        """Waiting jobs in priority order onto free GPUs, skipping those that do not fit; stops
        once no GPU is free (a heap: a fill costs the jobs it looks at, not the whole queue)."""
        free = view.free_by_type.tolist()
        if max(free) == 0:
            return []
        if self.starve > 0:  # a starving job's queue changes with the clock: order them afresh
            return self._place(view, self._ordered(view, list(view.waiting)).tolist(), free)
        heap, waiting, version = self._heap, view.waiting, self._version
        out: list[Placement] = []
        skipped = []
        while heap and max(free) > 0:
            entry = heapq.heappop(heap)
            job = entry[2]
            if job not in waiting or entry[3] != version.get(job, 0):
                continue  # started since, or queued again after a suspension
            placed = self._place(view, [job], free)
            if placed:
                out += placed
            else:
                skipped.append(entry)
        for entry in skipped:
            heapq.heappush(heap, entry)
        return out

    @staticmethod
    def _place(view, order: list[int], free: list[int]) -> list[Placement]:
        """``order``'s jobs that fit, each on the type with the most free GPUs (``free`` is updated)."""
        out = []
        for job in order:
            n = int(view.num_gpus[job])
            most = max(free)
            if most >= n:
                k = free.index(most)
                free[k] = most - n
                out.append(Placement(job, view.gpu_types[k]))
        return out

    def describe(self) -> dict:
        return {**super().describe(), "thresholds": self.thresholds.tolist(), "starve": self.starve}

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
        order = self._ordered(view, [*view.running, *view.waiting])
        room = view.total_by_type.astype(np.int64).copy()
        out: list[Placement | Preemption] = []
        for job in order.tolist():
            n = int(view.num_gpus[job])
            running = view.running.get(job)
            if running is not None and room[running[1]] >= n:
                room[running[1]] -= n
                continue
            if running is not None:
                out.insert(0, Preemption(job))
                started = running[0]
                self._last_ran[job] = (view.now - started, view.now)
            k = int(np.argmax(room))
            if room[k] >= n:
                room[k] -= n
                out.append(Placement(job, view.gpu_types[k]))
        return out

    def _fill(self, view) -> list[Placement]:
        free = view.free_by_type.astype(np.int64).copy()
        out: list[Placement] = []
        for job in self._ordered(view, list(view.waiting)).tolist():
            n = int(view.num_gpus[job])
            k = int(np.argmax(free))
            if free[k] >= n:
                free[k] -= n
                out.append(Placement(job, view.gpu_types[k]))
        return out

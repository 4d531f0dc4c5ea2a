"""Preemptive shortest-remaining-time-first, heterogeneity-aware.

Why: the classic preemptive baseline, and the one that shows most directly what a run-time
prediction buys a preemptive scheduler: it ranks jobs by what is left of their predicted run
time, (1 − fraction done) × predicted seconds on a GPU type.

At a round boundary (every lease) it reallocates the whole cluster: all waiting and running
jobs in order of their least remaining time over the types that could ever hold them (ties:
earlier submit, then lower job index); each running job keeps its GPUs if its type still has
room for it after the jobs before it, else it is suspended; every other job takes the type with
room where its remaining time is least (ties: cluster type order), a suspended job included (it
then resumes there, paying its restart). Between rounds it starts waiting jobs on free GPUs
exactly as ``sjf`` does, by remaining time. With ``lease=inf`` it never preempts and its plans
are ``sjf``'s.
"""

from __future__ import annotations

import numpy as np

from policies.base import Placement, Preemption
from policies.preemptive import PreemptivePolicy
from policies.sjf import SjfPolicy


class SrtfPolicy(PreemptivePolicy):
    name = "srtf"

    def __init__(self, lease: float | str = 360.0, restart: float | str = 10.0,
                 storage_gbps: float | str = 2.0) -> None:
        super().__init__(lease, restart, storage_gbps)
        self._fill = SjfPolicy()

    def on_arrival(self, view, jobs: list[int]) -> None:
        self._fill.on_arrival(view, jobs)

    def schedule(self, view) -> list[Placement | Preemption]:
        if not view.at_round:
            return self._fill.schedule(view)
        return self._reallocate(view)

    def _reallocate(self, view) -> list[Placement | Preemption]:
        if not view.waiting:  # every running job has room where it runs: nothing would change
            return []
        jobs = np.fromiter([*view.running, *view.waiting], dtype=np.int64)
        need = view.num_gpus[jobs]
        left = (1.0 - view.progress[jobs])[:, None] * view.predicted[jobs]
        fits = need[:, None] <= view.total_by_type[None, :]
        left = np.where(fits, left, np.inf)
        order = np.lexsort((jobs, view.submit[jobs], left.min(axis=1)))
        room = view.total_by_type.astype(np.int64).copy()
        free = int(room.sum())
        out: list[Placement | Preemption] = []
        suspended: list[int] = []
        for position, i in enumerate(order.tolist()):
            if free == 0:  # no room left for anyone: the running jobs still unranked lose their place
                rest = jobs[order[position:]]
                for job in rest[np.isin(rest, list(view.running))].tolist():
                    out.insert(0, Preemption(job))
                    suspended.append(job)
                break
            job, n = int(jobs[i]), int(need[i])
            running = view.running.get(job)
            if running is not None and room[running[1]] >= n:
                room[running[1]] -= n  # keeps its GPUs
                free -= n
                continue
            options = np.where(room >= n, left[i], np.inf)
            k = int(np.argmin(options))
            if running is not None:
                out.insert(0, Preemption(job))  # suspensions first: their GPUs serve the placements
            if not np.isfinite(options[k]):
                if running is not None:
                    suspended.append(job)
                continue
            room[k] -= n
            free -= n
            out.append(Placement(job, view.gpu_types[k]))
        for job in suspended:  # they wait again: queued with what is left of their time
            self._fill.requeue(view, job, ((1.0 - view.progress[job]) * view.predicted[job]).tolist())
        return out

"""Earliest-deadline-first with heterogeneity-aware placement.

Why: the classic deadline baseline. Order: jobs with a deadline first, by deadline; then jobs
without one, shortest first (least predicted run time over all types); ties by submit time and
job index. Walk that order and start every job that fits now (list scheduling: a job that does
not fit does not block later ones), on the GPU type that leaves it the most slack, i.e. the type
with the least predicted run time among those with room (ties: cluster type order). Jobs without
a deadline are placed the same way (fastest type that fits).
"""

from __future__ import annotations

import bisect
import math

import numpy as np

from policies.base import Placement, Policy


class EdfPolicy(Policy):
    name = "edf"

    def __init__(self) -> None:
        self._order: list[tuple[int, float, float, float, int]] = []

    def on_arrival(self, view, jobs: list[int]) -> None:
        for job in jobs:
            shortest = float(view.predicted[job].min())
            deadline = float(view.deadline[job])
            key = (0, deadline, shortest) if not math.isnan(deadline) else (1, shortest, 0.0)
            bisect.insort(self._order, (*key, float(view.submit[job]), job))

    def schedule(self, view) -> list[Placement]:
        free = view.free_by_type.copy()
        out: list[Placement] = []
        placed: set[int] = set()
        for entry in self._order:
            if free.max() <= 0:
                break
            job = entry[-1]
            need = view.num_gpus[job]
            room = np.flatnonzero(free >= need)
            if not len(room):
                continue
            k = int(room[np.argmin(view.predicted[job, room])])
            free[k] -= need
            placed.add(job)
            out.append(Placement(job, view.gpu_types[k]))
        if placed:
            self._order = [e for e in self._order if e[-1] not in placed]
        return out

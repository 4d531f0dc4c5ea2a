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
        free = view.free_by_type.tolist()  # Python ints: the walk below may pass thousands of jobs
        types = range(len(free))
        most = max(free)
        out: list[Placement] = []
        placed: set[int] = set()
        for entry in self._order:
            if most <= 0:
                break
            job = entry[-1]
            need = view.num_gpus[job]
            if need > most:
                continue  # fits no type now
            predicted = view.predicted[job]
            k = min((k for k in types if free[k] >= need), key=predicted.__getitem__)  # first fastest
            free[k] -= need
            most = max(free)
            placed.add(job)
            out.append(Placement(job, view.gpu_types[k]))
        if placed:
            self._order = [e for e in self._order if e[-1] not in placed]
        return out

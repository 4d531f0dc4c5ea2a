"""Earliest-deadline-first with heterogeneity-aware placement.

Why: the classic deadline baseline. Order: jobs with a deadline first, by deadline; then jobs
without one, shortest first (least predicted run time over all types); ties by submit time and
job index. Walk that order and start every job that fits now (list scheduling: a job that does
not fit does not block later ones), on the GPU type that leaves it the most slack, i.e. the type
with the least predicted run time among those with room (ties: cluster type order). Jobs without
a deadline are placed the same way (fastest type that fits).

``deadline_quantile=Q`` (unset by default) plans deadline risk: the order stays the same, but a job
with a deadline goes to the type, among those with room, of least Q-quantile tardiness
max(0, now + its Q-quantile run time there - deadline), then least predicted run time (ties:
cluster type order). Why: the type whose point estimate is fastest may be the riskier one when
the predictor is less sure of the job there; among types where the job is on time even at its
Q-quantile, the fastest still wins. Jobs without a deadline, or no option: as above.

The waiting jobs are kept in one heap per GPU count, so a decision never walks the jobs that do
not fit: the next job of the walk is the first, in the order above, among the heap heads of the
GPU counts that fit in the most free GPUs of any type. (Free GPUs only shrink during a decision,
so every job the walk passed over still does not fit.) That is the same walk in
O(placements x GPU counts x log n) instead of O(waiting jobs).

Only the types a job can run on count (a predicted time of +inf: the trace says it cannot run
there); a job with room only on types it cannot run on is passed over, like one that fits nowhere,
and stays queued.
"""

from __future__ import annotations

import heapq
import math
from typing import Any

from policies.base import Placement, Policy
from policies.options import quantile_level


class EdfPolicy(Policy):
    name = "edf"

    def __init__(self, deadline_quantile: str | float | None = None) -> None:
        self.deadline_quantile = quantile_level("deadline_quantile", deadline_quantile)
        # GPU count -> heap of (0, deadline, shortest, submit, job) or (1, shortest, 0.0, submit, job)
        self._heaps: dict[int, list[tuple[int, float, float, float, int]]] = {}
        self._needs: list[int] = []  # the GPU counts with a heap, ascending

    def on_arrival(self, view, jobs: list[int]) -> None:
        for job in jobs:
            shortest = float(view.predicted[job].min())
            deadline = float(view.deadline[job])
            key = (0, deadline, shortest) if not math.isnan(deadline) else (1, shortest, 0.0)
            need = int(view.num_gpus[job])
            heap = self._heaps.get(need)
            if heap is None:
                heap = self._heaps[need] = []
                self._needs = sorted(self._heaps)
            heapq.heappush(heap, (*key, float(view.submit[job]), job))

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "deadline_quantile": self.deadline_quantile}

    def schedule(self, view) -> list[Placement]:
        free = view.free_by_type.tolist()  # Python ints
        types = range(len(free))
        most = max(free)
        out: list[Placement] = []
        heaps = self._heaps
        q = self.deadline_quantile
        quantile = None if q is None else view.quantile(q)
        passed: list[tuple[int, tuple]] = []  # jobs with room only on types they cannot run on
        while most > 0:
            first, first_need = None, 0
            for need in self._needs:
                if need > most:
                    break  # fits no type now (nor do the larger counts)
                heap = heaps[need]
                if heap and (first is None or heap[0] < first):
                    first, first_need = heap[0], need
            if first is None:
                break
            heapq.heappop(heaps[first_need])
            job = first[-1]
            predicted = view.predicted[job]
            room = [k for k in types if free[k] >= first_need and predicted[k] < math.inf]
            if not room:  # it waits; free GPUs only shrink during a decision, so it is passed for good
                passed.append((first_need, first))
                continue
            deadline = view.deadline[job]
            if quantile is None or math.isnan(deadline):  # the first fastest
                k = min(room, key=predicted.__getitem__)
            else:  # the first of least quantile tardiness, then fastest
                late = view.now + quantile[job] - deadline
                k = min(room, key=lambda k: (max(0.0, late[k]), predicted[k]))
            if first_need > 1 and not view.starts_now(job, k):  # waits for a packed placement
                passed.append((first_need, first))
                continue
            free[k] -= first_need
            most = max(free)
            out.append(Placement(job, view.gpu_types[k]))
        for need, entry in passed:
            heapq.heappush(heaps[need], entry)
        return out

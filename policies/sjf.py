"""Heterogeneity-aware shortest-job-first.

Why: the natural greedy use of per-type predictions. Repeatedly pick, over all waiting jobs and
all GPU types with room for them now, the (job, type) pair with the least predicted run time
(ties: earlier submit, then lower job index, then cluster type order), until no pair fits.
Non-preemptive; a job that does not fit now never blocks smaller ones.

Per-(type, GPU count) heaps keep a pick at O(types x distinct counts x log n), so the policy
stays fast with tens of thousands of waiting jobs.
"""

from __future__ import annotations

import heapq

from policies.base import Placement, Policy


class SjfPolicy(Policy):
    name = "sjf"

    def __init__(self) -> None:
        self._heaps: dict[tuple[int, int], list[tuple[float, float, int]]] = {}

    def on_arrival(self, view, jobs: list[int]) -> None:
        for job in jobs:
            need = int(view.num_gpus[job])
            for k in range(len(view.gpu_types)):
                heapq.heappush(self._heaps.setdefault((k, need), []),
                               (float(view.predicted[job, k]), float(view.submit[job]), job))

    def schedule(self, view) -> list[Placement]:
        free = view.free_by_type.copy()
        waiting, placed = view.waiting, set()
        out: list[Placement] = []
        while True:
            best = None
            for (k, need), heap in self._heaps.items():
                if need > free[k]:
                    continue
                while heap and (heap[0][2] not in waiting or heap[0][2] in placed):
                    heapq.heappop(heap)  # started already (lazy deletion)
                if heap and (best is None or (heap[0], k) < best):
                    best = (heap[0], k)
            if best is None:
                return out
            (_, _, job), k = best
            free[k] -= view.num_gpus[job]
            placed.add(job)
            out.append(Placement(job, view.gpu_types[k]))

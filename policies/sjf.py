"""Heterogeneity-aware shortest-job-first.

Why: the natural greedy use of per-type predictions. Repeatedly pick, over all waiting jobs and
all GPU types with room for them now, the (job, type) pair with the least predicted run time
(ties: earlier submit, then lower job index, then cluster type order), until no pair fits.
Non-preemptive; a job that does not fit now never blocks smaller ones.

Per-(type, GPU count) heaps keep a pick at O(types x distinct counts x log n), so the policy
stays fast with tens of thousands of waiting jobs; per type the counts are kept sorted, so a pick
looks only at the counts that fit in the type's free GPUs.
"""

from __future__ import annotations

import heapq

from policies.base import Placement, Policy


class SjfPolicy(Policy):
    name = "sjf"

    def __init__(self) -> None:
        self._heaps: dict[tuple[int, int], list[tuple[float, float, int]]] = {}
        self._by_type: list[list[tuple[int, list[tuple[float, float, int]]]]] = []  # per type: (count, heap), ascending

    def on_arrival(self, view, jobs: list[int]) -> None:
        types = len(view.gpu_types)
        if not self._by_type:
            self._by_type = [[] for _ in range(types)]
        for job in jobs:
            need = int(view.num_gpus[job])
            submit = float(view.submit[job])
            predicted = view.predicted[job].tolist()
            for k in range(types):
                heap = self._heaps.get((k, need))
                if heap is None:
                    heap = self._heaps[(k, need)] = []
                    self._by_type[k] = sorted(self._by_type[k] + [(need, heap)], key=lambda e: e[0])
                heapq.heappush(heap, (predicted[k], submit, job))

    def schedule(self, view) -> list[Placement]:
        free = view.free_by_type.tolist()  # Python ints
        waiting, placed = view.waiting, set()
        out: list[Placement] = []
        while True:
            best = None
            for k, heaps in enumerate(self._by_type):
                room = free[k]
                for need, heap in heaps:
                    if need > room:
                        break
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

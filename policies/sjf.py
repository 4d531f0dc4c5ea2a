"""Heterogeneity-aware shortest-job-first.

Why: the natural greedy use of per-type predictions. Repeatedly pick, over all waiting jobs and
all GPU types with room for them now, the (job, type) pair with the least predicted run time
(ties: earlier submit, then lower job index, then cluster type order), until no pair fits.
Non-preemptive; a job that does not fit now never blocks smaller ones. A job is queued only on
the types it can run on (a predicted time of +inf: the trace says it cannot run there).

Per-(type, GPU count) heaps keep a pick at O(types x distinct counts x log n), so the policy
stays fast with tens of thousands of waiting jobs; per type the counts are kept sorted, so a pick
looks only at the counts that fit in the type's free GPUs.
"""

from __future__ import annotations

import heapq
import math

from policies.base import Placement, Policy

Entry = tuple[float, float, int, int]  # (seconds, submit, job, version)


class SjfPolicy(Policy):
    name = "sjf"

    def __init__(self) -> None:
        self._heaps: dict[tuple[int, int], list[Entry]] = {}
        self._by_type: list[list[tuple[int, list[Entry]]]] = []  # per type: (count, heap), ascending
        self._version: dict[int, int] = {}  # a job queued again (srtf) outdates its earlier entries
        self._seen: set[int] = set()  # jobs that arrived before (a failed attempt's job comes back)

    def on_arrival(self, view, jobs: list[int]) -> None:
        for job in jobs:
            if job in self._seen:  # back after a failed attempt: its entries of before no longer count
                self.requeue(view, job, view.predicted[job].tolist())
            else:
                self._seen.add(job)
                self.queue(view, job, view.predicted[job].tolist())

    def requeue(self, view, job: int, seconds: list[float]) -> None:
        """Queue ``job`` again (suspended by a preemptive policy) with what is left of its run time;
        its earlier entries no longer count."""
        self._version[job] = self._version.get(job, 0) + 1
        self.queue(view, job, seconds)

    def queue(self, view, job: int, seconds: list[float]) -> None:
        """Queue ``job`` with ``seconds`` on each type (its predicted run time, or what is left of
        it); not on a type of +inf (or NaN) seconds: it cannot run there."""
        types = len(view.gpu_types)
        if not self._by_type:
            self._by_type = [[] for _ in range(types)]
        need = int(view.num_gpus[job])
        submit = float(view.submit[job])
        version = self._version.get(job, 0)
        for k in range(types):
            if not seconds[k] < math.inf:
                continue
            heap = self._heaps.get((k, need))
            if heap is None:
                heap = self._heaps[(k, need)] = []
                self._by_type[k] = sorted(self._by_type[k] + [(need, heap)], key=lambda e: e[0])
            heapq.heappush(heap, (seconds[k], submit, job, version))

    def schedule(self, view) -> list[Placement]:
        free = view.free_by_type.tolist()  # Python ints
        waiting, placed, version = view.waiting, set(), self._version
        out: list[Placement] = []
        passed: list[tuple[int, tuple]] = []
        while True:
            best = None
            for k, heaps in enumerate(self._by_type):
                room = free[k]
                for need, heap in heaps:
                    if need > room:
                        break
                    while heap and (heap[0][2] not in waiting or heap[0][2] in placed
                                    or (version and heap[0][3] != version.get(heap[0][2], 0))):
                        heapq.heappop(heap)  # started already, or queued again since (lazy deletion)
                    if heap and (best is None or (heap[0], k) < best):
                        best = (heap[0], k)
            if best is None:
                for k, entry in passed:  # waited for a packed placement: queued as they were
                    heapq.heappush(self._heaps[(k, int(view.num_gpus[entry[2]]))], entry)
                return out
            entry, k = best
            job = entry[2]
            if view.num_gpus[job] > 1 and not view.starts_now(job, k):
                heapq.heappop(self._heaps[(k, int(view.num_gpus[job]))])  # this call passes it over
                passed.append((k, entry))
                continue
            free[k] -= view.num_gpus[job]
            placed.add(job)
            out.append(Placement(job, view.gpu_types[k]))

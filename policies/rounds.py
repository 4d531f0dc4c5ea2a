"""A round of a preemptive priority scheduler (SRTF, Tiresias): the waiting jobs in priority
order, and the reallocation that lets the highest-ranked jobs keep, take or lose GPUs.

Why one place: both policies rank every job at a round boundary and walk the ranking while GPUs
are left; what differs is the key and the type a job is given. Why heaps: on an overloaded
cluster thousands of jobs wait, and a round that sorted them all would cost time in proportion to
the backlog at every lease. A waiting job's key does not change while it waits (its progress and
service are frozen), so waiting jobs sit in heaps, one per GPU count, and a round looks only at
the heads of the counts that still fit: its cost is the running jobs plus the jobs it starts.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable

import numpy as np

from policies.base import Placement, Preemption

Key = tuple[float, float]  # (priority: lower first, submit time); ties then by job index
Entry = tuple[float, float, int, int]  # (*Key, job, version)


class WaitingHeaps:
    """Waiting jobs by GPU count, each count a heap of (key, job) with lazy deletion: an entry
    counts while its job waits and it is the job's latest (a job queued again outdates it)."""

    def __init__(self) -> None:
        self._heaps: dict[int, list[Entry]] = {}
        self._needs: list[int] = []  # the counts, ascending
        self._version: dict[int, int] = {}

    def push(self, job: int, need: int, key: Key) -> None:
        heap = self._heaps.get(need)
        if heap is None:
            heap = self._heaps[need] = []
            self._needs = sorted([*self._needs, need])
        heapq.heappush(heap, (key[0], key[1], job, self._version.get(job, 0)))

    def requeue(self, job: int, need: int, key: Key) -> None:
        """Queue ``job`` again (it was suspended) under its new key; its older entries lapse."""
        self._version[job] = self._version.get(job, 0) + 1
        self.push(job, need, key)

    def head(self, waiting, most: int) -> tuple[Entry, int] | None:
        """The best entry (and its count) among the counts of at most ``most`` GPUs."""
        best = None
        version = self._version
        for need in self._needs:
            if need > most:
                break
            heap = self._heaps[need]
            while heap and (heap[0][2] not in waiting or heap[0][3] != version.get(heap[0][2], 0)):
                heapq.heappop(heap)  # started since, or queued again
            if heap and (best is None or heap[0] < best[0]):
                best = (heap[0], need)
        return best

    def pop(self, need: int) -> Entry:
        return heapq.heappop(self._heaps[need])

    def restore(self, entries: list[tuple[Entry, int]]) -> None:
        for entry, need in entries:
            heapq.heappush(self._heaps[need], entry)


def ranked(keys: np.ndarray, submit: np.ndarray, jobs: np.ndarray) -> list[tuple[float, float, int]]:
    """(key, submit, job) of ``jobs``, in priority order (a vectorised sort: a round on a large
    cluster ranks thousands of running jobs)."""
    order = np.lexsort((jobs, submit, keys))
    return list(zip(keys[order].tolist(), submit[order].tolist(), jobs[order].tolist()))


def reallocate(view, ranked: list[tuple[float, float, int]], heaps: WaitingHeaps | None,
               choose: Callable[[int, list[int]], int | None]) -> tuple[list[Placement | Preemption], list[int]]:
    """One round: the jobs in priority order — ``ranked`` ((key, submit, job), sorted: the running
    jobs, or every job when there are no ``heaps``) merged with the waiting jobs' ``heaps`` — while
    GPUs are left. A running job keeps its GPUs if its type still has room for it, else it is
    suspended and, like a waiting job, given ``choose(job, room)``'s type (None: none has room for
    it); running jobs not reached once the cluster is full are suspended.

    Returns the decisions (suspensions first, so their GPUs serve the placements) and the jobs
    suspended without a new place (they wait again)."""
    room = view.total_by_type.astype(np.int64).tolist()
    running, waiting, num_gpus = view.running, view.waiting, view.num_gpus
    preempted: list[int] = []
    placements: list[Placement] = []
    suspended: list[int] = []
    unplaced: list[tuple[Entry, int]] = []  # popped waiting entries with no room on a type they can use
    head, i = None, 0
    stale = heaps is not None  # the head must be looked up (again)
    while True:
        most = max(room)
        if most == 0:  # no room left for anyone: the running jobs still unranked lose their place
            late = [job for _, _, job in ranked[i:] if job in running]
            preempted += late
            suspended += late
            break
        if stale or (head is not None and head[1] > most):  # the best head among fewer counts: look again
            head = heaps.head(waiting, most)
            stale = False
        if i < len(ranked) and (head is None or ranked[i] < head[0][:3]):
            job = ranked[i][2]
            i += 1
            n = int(num_gpus[job])
            if job in waiting:
                if n > most:
                    continue
            else:
                kept = running[job][1]
                if room[kept] >= n:
                    room[kept] -= n
                    continue
                preempted.append(job)
        elif head is not None:
            entry, n = head
            heaps.pop(n)
            job, stale = entry[2], True
        else:
            break
        k = choose(job, room)
        if k is None:
            if job in running:
                suspended.append(job)
            elif heaps is not None:
                unplaced.append((entry, n))
            continue
        room[k] -= n
        placements.append(Placement(job, view.gpu_types[k]))
    if heaps is not None:
        heaps.restore(unplaced)
    return [Preemption(job) for job in reversed(preempted)] + placements, suspended

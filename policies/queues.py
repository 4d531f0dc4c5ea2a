"""Per-GPU planned queues, and how their heads start — shared by AlloX and Hydra.

Why: both policies plan a queue of jobs per GPU ("machine") and then start only the heads of
idle GPUs' queues (online: the rest is re-planned at the next event; offline: queues stay
installed). One place defines that step, including gang jobs:

* A job needing n GPUs is planned as a unit in the queue of one GPU (its *lead* GPU), with its run
  time on that GPU's type, and only on types whose pool holds at least n GPUs.
* When it heads an idle lead GPU it starts if n GPUs of that type are free now (the engine places
  them, one node first). Otherwise the type is *held* for it: its GPUs are reserved from the
  predicted time R at which n of them will be free (the n-th earliest predicted free time), so
  free GPUs of the type accumulate until the gang job fits — no starvation by a stream of small
  jobs. Single-GPU heads of a held type still start when they are predicted to finish by R (EASY
  backfilling: they use GPUs that would otherwise idle and, if predictions hold, delay nothing).
* Single-GPU heads start pinned on their own GPU.
"""

from __future__ import annotations

import numpy as np

from policies.base import IDLE_GPU, Placement


class PlannedQueues:
    """Non-empty job queues by GPU id, first-to-run first."""

    def __init__(self) -> None:
        self.queues: dict[int, list[int]] = {}

    def clear(self) -> None:
        self.queues.clear()

    def extend(self, gpu: int, jobs: list[int]) -> None:
        self.queues.setdefault(gpu, []).extend(jobs)

    def planned_jobs(self) -> set[int]:
        return {j for q in self.queues.values() for j in q}

    def start_heads(self, view) -> list[Placement]:
        """Placements for the heads of idle GPUs' queues (started heads leave their queue)."""
        free = view.free_by_type.copy()
        idle = sorted(g for g in self.queues if view.gpu_job[g] == IDLE_GPU)
        reserved_from: dict[int, float] = {}  # held type -> predicted start of its gang job
        avail = None
        gangs: list[Placement] = []
        for g in idle:  # gang heads first: they decide which types are held
            job = self.queues[g][0]
            need = int(view.num_gpus[job])
            if need == 1:
                continue
            k = int(view.gpu_type[g])
            if k not in reserved_from and free[k] >= need and view.starts_now(job, k):
                free[k] -= need
                gangs.append(Placement(job, view.gpu_types[k]))
                self._pop(g)
            elif k not in reserved_from:
                avail = view.gpu_available_at() if avail is None else avail
                reserved_from[k] = float(np.sort(avail[view.gpu_type == k])[need - 1])
        singles: list[Placement] = []
        for g in idle:
            if g not in self.queues:
                continue
            job = self.queues[g][0]
            k = int(view.gpu_type[g])
            if int(view.num_gpus[job]) != 1 or free[k] < 1:
                continue
            if k in reserved_from and view.now + view.predicted[job, k] > reserved_from[k]:
                continue  # would delay the held gang job
            free[k] -= 1
            singles.append(Placement(job, view.gpu_types[k], (g,)))
            self._pop(g)
        return singles + gangs  # pinned GPUs first, so the engine's gang placement avoids them

    def _pop(self, gpu: int) -> None:
        queue = self.queues[gpu]
        queue.pop(0)
        if not queue:
            del self.queues[gpu]

"""FIFO: start jobs strictly in arrival order; the head blocks everything behind it.

Why: the baseline every scheduler is compared with. Heterogeneity-unaware: the head job goes to
the GPU type with the most free GPUs that can hold it (ties: cluster type order), which spreads
load without looking at run times; only the types it can run on count (a trace may say it cannot
run on some: :meth:`policies.base.SchedulerView.can_run`).

The policy keeps its own arrival queue (a deque fed by ``on_arrival``), so a decision costs
O(jobs started + 1) however long the queue is; walking ``view.waiting`` from its front would not
(a dict that loses its oldest keys keeps their empty slots until it is resized).
"""

from __future__ import annotations

from collections import deque

import numpy as np

from policies.base import Placement, Policy


class FifoPolicy(Policy):
    name = "fifo"

    def __init__(self) -> None:
        self._queue: deque[int] = deque()  # waiting jobs in arrival order
        self._num_gpus = None  # the run's GPU counts per job (the view's array) ...
        self._needs: list[int] = []  # ... as Python ints
        self._only: dict[int, list[int]] | None = None  # job -> the types it can run on, where not all

    def on_arrival(self, view, jobs: list[int]) -> None:
        if self._num_gpus is not view.num_gpus:  # a new run
            self._queue.clear()
            self._num_gpus, self._needs = view.num_gpus, view.num_gpus.tolist()
            self._only = None if np.isfinite(view.predicted).all() else {}  # checked once per run
        self._queue.extend(jobs)
        if self._only is not None:
            for job in jobs:
                able = view.can_run(job)
                if not able.all():
                    self._only[job] = np.flatnonzero(able).tolist()

    def schedule(self, view) -> list[Placement]:
        queue, waiting, needs, only = self._queue, view.waiting, self._needs, self._only
        free = view.free_by_type.tolist()  # Python ints: this runs once per event on 100k-job traces
        gpu_types = view.gpu_types
        out: list[Placement] = []
        while queue:
            job = queue[0]
            if job not in waiting:  # no longer waiting (not started by this policy): skip it
                queue.popleft()
                continue
            need = needs[job]
            types = only.get(job) if only else None
            if types is None:
                most = max(free)
                k = free.index(most)  # the first type with the most free GPUs
            else:  # the first of the types it can run on with the most free GPUs
                k = max(types, key=free.__getitem__)
                most = free[k]
            if most < need or (need > 1 and not view.starts_now(job, k)):
                break  # strict FIFO: nothing overtakes the head (nor while it waits for a packed placement)
            free[k] = most - need
            out.append(Placement(job, gpu_types[k]))
            queue.popleft()  # the engine starts it
        return out

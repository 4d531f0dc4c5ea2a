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
from policies.rounds import WaitingHeaps, ranked, reallocate
from policies.sjf import SjfPolicy


class SrtfPolicy(PreemptivePolicy):
    name = "srtf"

    def __init__(self, lease: float | str = 360.0, restart: float | str = 10.0,
                 storage_gbps: float | str = 2.0) -> None:
        super().__init__(lease, restart, storage_gbps)
        self._fill = SjfPolicy()
        self._waiting = WaitingHeaps()  # for the rounds: keyed by the least remaining time
        self._seen: set[int] = set()  # jobs that arrived before

    def on_arrival(self, view, jobs: list[int]) -> None:
        self._fill.on_arrival(view, jobs)
        for job in jobs:
            if job in self._seen:  # back after a failed attempt (simulator.failures): its old entry lapses
                self._waiting.requeue(job, int(view.num_gpus[job]), self._key(view, job))
            else:
                self._seen.add(job)
                self._waiting.push(job, int(view.num_gpus[job]), self._key(view, job))

    def _remaining(self, view, jobs) -> np.ndarray:
        """What is left of ``jobs``' predicted run time on each type (inf where they never fit)."""
        left = (1.0 - view.progress[jobs])[..., None] * view.predicted[jobs]
        return np.where(view.num_gpus[jobs][..., None] <= view.total_by_type, left, np.inf)

    def _key(self, view, job: int) -> tuple[float, float]:
        """(least remaining time over the types that could hold it, submit): ``_remaining``'s
        minimum in plain floats (same products), as it runs once per arrival."""
        left, need = 1.0 - float(view.progress[job]), int(view.num_gpus[job])
        seconds = [left * p for p, total in zip(view.predicted[job].tolist(), view.total_by_type.tolist())
                   if need <= total]
        return min(seconds, default=np.inf), float(view.submit[job])

    def schedule(self, view) -> list[Placement | Preemption]:
        if not view.at_round:
            return self._fill.schedule(view)
        if not view.waiting:  # every running job has room where it runs: nothing would change
            return []
        jobs = np.fromiter(view.running, dtype=np.int64, count=len(view.running))
        running = ranked(self._remaining(view, jobs).min(axis=1), view.submit[jobs], jobs)

        def choose(job: int, room: list[int]) -> int | None:  # where what is left of it is least
            options = np.where(np.asarray(room) >= view.num_gpus[job], self._remaining(view, job), np.inf)
            k = int(np.argmin(options))
            return k if np.isfinite(options[k]) else None

        out, suspended = reallocate(view, running, self._waiting, choose)
        for job in suspended:  # they wait again: queued with what is left of their time
            left = ((1.0 - view.progress[job]) * view.predicted[job]).tolist()
            self._fill.requeue(view, job, left)
            self._waiting.requeue(job, int(view.num_gpus[job]), self._key(view, job))
        return out

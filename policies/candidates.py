"""Bounding a policy's per-decision work: pick a window of candidate jobs from several orders.

Why: AlloX and Hydra cost grows with the number of jobs they plan at once, yet a window that
follows one order starves the others (oldest-first blocks short jobs behind big ones;
shortest-first starves long jobs). Taking jobs round-robin from several orders keeps each
criterion represented.
"""

from __future__ import annotations

import numpy as np


def round_robin_pick(orders: list[list[int]], count: int) -> list[int]:
    """Up to ``count`` distinct jobs, taking in turn the next unpicked job of each order.

    Returned in the order picked. Each order is a ranking of (some of) the same jobs.
    """
    picked: dict[int, None] = {}
    limit = min(count, len(set().union(*orders))) if orders else 0
    rest = [iter(order) for order in orders]  # each order's cursor: it passes only picked jobs
    while len(picked) < limit:
        for order in rest:
            for job in order:
                if job not in picked:
                    picked[job] = None
                    break
            if len(picked) == limit:
                break
    return list(picked)


def first_by(jobs: np.ndarray, key: np.ndarray, limit: int) -> list[int]:
    """The first ``limit`` of ``jobs`` in (key, job) order: ``sorted(jobs, key=(key, job))[:limit]``
    exactly, in O(n) plus a sort of the ``limit`` smallest (a window from 100k waiting jobs).

    Enough for :func:`round_robin_pick` of ``limit`` jobs: its cursor in an order passes only
    jobs already picked, so it never reads past position ``limit``.
    """
    if len(jobs) > limit:
        kth = np.partition(key, limit - 1)[limit - 1]
        keep = key <= kth  # every tie of the limit-th key, so the job-index tie-break stays exact
        jobs, key = jobs[keep], key[keep]
    return jobs[np.lexsort((jobs, key))[:limit]].tolist()

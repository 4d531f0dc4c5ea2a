"""Candidate windows: the partial sort equals a full sort, and round-robin picking needs no more."""

from __future__ import annotations

import numpy as np
import pytest

from policies.candidates import first_by, round_robin_pick


@pytest.mark.parametrize("seed", range(20))
def test_first_by_equals_sorting_everything_ties_included(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 300))
    jobs = rng.permutation(1000)[:n]
    key = rng.integers(0, 12, n).astype(float)  # many ties: the job index must break them
    limit = int(rng.integers(1, 40))
    assert first_by(jobs, key, limit) == sorted(jobs.tolist(), key=lambda j: (key[list(jobs).index(j)], j))[:limit]


@pytest.mark.parametrize("seed", range(20))
def test_round_robin_over_truncated_orders_picks_the_same(seed):
    rng = np.random.default_rng(seed)
    n, count = int(rng.integers(5, 200)), int(rng.integers(1, 30))
    orders = [rng.permutation(n).tolist() for _ in range(3)]
    assert round_robin_pick([o[:count] for o in orders], count) == round_robin_pick(orders, count)


def test_first_by_of_nothing_is_empty():
    assert first_by(np.array([], dtype=int), np.array([]), 5) == []


def round_robin_by_cursors(orders: list[list[int]], count: int) -> list[int]:
    """Round-robin picking written out with a cursor per order: the reference."""
    picked: list[int] = []
    cursor = [0] * len(orders)
    while True:
        moved = False
        for k, order in enumerate(orders):
            while cursor[k] < len(order) and order[cursor[k]] in picked:
                cursor[k] += 1
            if cursor[k] < len(order) and len(picked) < count:
                picked.append(order[cursor[k]])
                moved = True
        if not moved:
            return picked


@pytest.mark.parametrize("seed", range(60))
def test_round_robin_picks_as_cursors_do(seed):
    """Orders of different lengths over overlapping jobs, some empty, counts past the jobs there are."""
    rng = np.random.default_rng(seed)
    pool = rng.permutation(500)[:int(rng.integers(1, 80))]
    orders = [rng.permutation(pool)[:int(rng.integers(0, 60))].tolist() for _ in range(int(rng.integers(1, 5)))]
    count = int(rng.integers(0, 90))
    assert round_robin_pick(orders, count) == round_robin_by_cursors(orders, count)
    assert round_robin_pick([], count) == []

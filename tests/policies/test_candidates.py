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

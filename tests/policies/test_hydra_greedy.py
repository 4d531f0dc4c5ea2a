"""The compiled greedy kernels give numpy's results bit for bit.

Why: Hydra's decisions must not change with the compiled scoring (frozen cases); these tests pin
each kernel against the numpy expression it replaced, on random inputs with many ties.
"""

from __future__ import annotations

import numpy as np
import pytest

from policies import hydra_greedy as kernels

INF = np.inf


def test_pairwise_sum_is_numpys_sum_bit_for_bit():
    rng = np.random.default_rng(3)
    lengths = list(range(0, 140)) + [255, 256, 257, 300, 511, 1000, 1031, 4099]
    for length in lengths:
        # wide magnitudes and signs, so any other summation order rounds differently
        x = rng.standard_normal((4, length)) * 10.0 ** rng.integers(-8, 9, (4, length))
        want = x.sum(axis=1)
        got = np.array([kernels.pairwise_sum(np.ascontiguousarray(row), length) for row in x])
        assert np.array_equal(got, want), length


def test_a_sequential_sum_would_differ_so_the_check_can_fail():
    x = np.array([1e16, 1.0, -1e16, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0])
    sequential = 0.0
    for v in x:
        sequential += v
    assert kernels.pairwise_sum(x, len(x)) == x.sum() != sequential


def numpy_column(seq, t0, k, g_tard, srtf_only, alive, rows, row_p, row_ok, row_submit, row_deadline):
    """The numpy scoring the kernel replaced (policies/hydra.py before the compiled kernels)."""
    pj = row_p[k]
    ok = alive & row_ok[k]
    if not len(seq):
        end = t0 + pj
        tard = np.where(ok, np.maximum(0.0, end - row_deadline), INF)
        return tard, np.where(ok, end - row_submit, INF), np.ones(len(rows), bool)
    ps, jobs = row_p[k][seq], rows[seq]
    ends = np.cumsum(np.concatenate([[t0], ps]))
    before = (ps[None, :] < pj[:, None]) | ((ps[None, :] == pj[:, None]) & (jobs[None, :] < rows[:, None]))
    end_j = ends[before.sum(axis=1)] + pj
    shifted = ends[None, 1:] + np.where(before, 0.0, pj[:, None])
    total_jct = (shifted - row_submit[seq][None, :]).sum(axis=1) + end_j - row_submit
    total_tard = (np.maximum(0.0, shifted - row_deadline[seq][None, :]).sum(axis=1)
                  + np.maximum(0.0, end_j - row_deadline))
    on_time = total_tard == 0.0
    jct = np.where(ok, total_jct, INF)
    if srtf_only:
        return np.where(ok, total_tard, INF), jct, np.ones(len(rows), bool)
    alone = np.maximum(0.0, t0 + pj - row_deadline)
    return np.where(ok, np.where(on_time, 0.0, np.maximum(g_tard, alone)), INF), jct, on_time


@pytest.mark.parametrize("srtf_only", [False, True])
def test_fill_column_equals_the_numpy_scoring(srtf_only):
    rng = np.random.default_rng(7 + srtf_only)
    checked = {kernels.BOUND: 0, kernels.ON_TIME: 0, kernels.EXACT: 0}
    for case in range(300):
        n, num_types = int(rng.integers(1, 40)), int(rng.integers(1, 3))
        rows = rng.permutation(1000)[:n].astype(np.int64)
        # coarse values: many equal run times (ties by job id) and deadlines met exactly
        row_p = np.ascontiguousarray(rng.integers(1, 6, (num_types, n)) * rng.choice([0.5, 1.7, 3.3]))
        row_ok = np.ascontiguousarray(rng.random((num_types, n)) < 0.85)
        row_submit = rng.integers(0, 20, n).astype(float) * 0.3
        row_deadline = np.where(rng.random(n) < 0.6, rng.integers(2, 60, n) * 0.7, INF)
        alive = rng.random(n) < 0.8
        k, t0 = int(rng.integers(0, num_types)), float(rng.integers(0, 30)) * 0.1
        size = int(rng.integers(0, n + 1))
        queued = rng.permutation(n)[:size]
        seq = np.array(sorted(queued, key=lambda i: (row_p[k, i], rows[i])), dtype=np.int64)
        alive[queued] = False  # a queued job is no longer waiting
        g_tard = float(rng.integers(0, 5))
        width = 3
        c = int(rng.integers(0, width))
        tard, jct = np.full((n, width), -1.0), np.full((n, width), -1.0)
        code = np.full((n, width), -1, dtype=np.int8)
        g_type, g_t0, g_tard_a = np.full(width, k, np.int64), np.full(width, t0), np.full(width, g_tard)
        g_len, g_slot = np.full(width, size, np.int64), np.zeros(width, np.int64)
        seqs = np.zeros((max(n, 1), max(n, 1)), np.int64)
        seqs[0, :size] = seq
        counters = np.zeros(3, np.int64)
        kernels.fill_column(c, srtf_only, tard, jct, code, alive, rows, row_p, row_ok, row_submit, row_deadline,
                            g_type, g_t0, g_tard_a, g_len, g_slot, seqs, counters)
        want_t, want_j, want_exact = numpy_column(seq, t0, k, g_tard, srtf_only, alive, rows, row_p, row_ok,
                                                  row_submit, row_deadline)
        assert np.array_equal(tard[:, c], want_t), case
        assert np.array_equal(jct[:, c], want_j), case
        live = np.isfinite(want_t)
        assert np.array_equal(code[live, c] != kernels.BOUND, want_exact[live]), case
        assert np.array_equal(code[live, c] == kernels.ON_TIME, want_exact[live] & (want_t[live] == 0.0)), case
        assert counters[kernels.WORK] == n
        assert (np.delete(tard, c, axis=1) == -1.0).all()  # only column c is written
        for value in code[live, c]:
            checked[int(value)] += 1
    if srtf_only:  # every score exact
        assert checked.pop(kernels.BOUND) == 0, checked
    assert min(checked.values()) >= 5, checked  # every kind of score was exercised


def test_pick_is_numpys_first_lexicographic_minimum():
    rng = np.random.default_rng(11)
    for case in range(500):
        n, width = int(rng.integers(1, 12)), int(rng.integers(1, 12))
        used = int(rng.integers(1, width + 1))
        tard = rng.integers(0, 3, (n, width)).astype(float)
        jct = rng.integers(0, 3, (n, width)).astype(float)
        out = rng.random((n, width)) < 0.3
        tard[out], jct[out] = INF, INF
        alive = rng.random(n) < 0.8
        tard[~alive], jct[~alive] = INF, INF
        t_used, j_used = tard[:, :used], jct[:, :used]
        if not np.isfinite(t_used.min()):
            want = (-1, -1)
        else:
            masked = np.where(t_used == t_used.min(), j_used, INF)
            want = tuple(int(v) for v in np.unravel_index(int(np.argmin(masked)), masked.shape))
        assert tuple(kernels.pick(tard, jct, alive, used)) == want, case

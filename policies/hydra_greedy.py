"""Hydra's greedy assignment scored by compiled loops (numba).

Why: the greedy assignment is where Hydra online spends most of its time on long traces (profile
of a Philly replay, docs/benchmarks.md): per assignment one column of (job, GPU) scores and a
search of the whole score matrix, each a few dozen numpy operations on small arrays, so
interpreter and dispatch overhead, not arithmetic, set the cost; compiled, the same loops do not.
The scores are bit-identical to numpy's: every sum over a queue is numpy's pairwise summation
(:func:`pairwise_sum`, checked against ``ndarray.sum`` in the tests), every other value is the same
IEEE operation in the same order. Assignments whose queue SRTF orders on time are applied here;
everything that needs a real ordering (branch-and-bound, the swap heuristic, the memo) goes back
to :mod:`policies.hydra`.

Two clocks, as in :func:`policies.hydra.queue_cost`: JCT on the point clock (``row_p`` from the
group's t0), tardiness on the due clock (``row_due_p`` from its ``g_t0_due``, e.g. a quantile's run
times). Without ``deadline_quantile`` the due arrays hold the point values, so every due-clock value
is the point-clock one, computed by the same operations.

State of one decision, ``n`` waiting jobs (rows) and up to ``width`` GPU groups (columns):
``tard``/``jct`` the scores, ``code`` what a score is (:data:`BOUND`, :data:`ON_TIME` — exact, the
queue's SRTF order meets every deadline —, :data:`EXACT`), per group its type, free time t0 (and
``g_t0_due`` on the due clock), tardiness, member count and a *slot*: a row of ``seqs`` holding its
jobs (row indices) in SRTF order (predicted run time, then job id).
"""

from __future__ import annotations

import numpy as np
from numba import njit

BOUND, ON_TIME, EXACT = 0, 1, 2  # score codes
DONE, ASK, PAUSE = 0, 1, 2  # why advance() returned
# indices into the int64 ``counters`` array
USED, SLOTS, WORK = 0, 1, 2


@njit(cache=True)
def pairwise_sum(a, n):
    """numpy's float64 ``add.reduce`` of ``a[:n]`` along a contiguous axis, in the same order
    (numpy/_core/src/umath/loops_utils.h.src): blocks of at most 128 summed by eight accumulators,
    longer runs split in two (the first half a multiple of 8) and the halves' sums added. The
    split is walked with an explicit stack: numba's cache cannot reload recursive functions."""
    if n <= 128:
        return _block_sum(a, 0, n)
    depth = 64  # halving from 2**63 elements
    lo, size, stage = np.empty(depth, np.int64), np.empty(depth, np.int64), np.zeros(depth, np.int64)
    sums = np.empty(depth)
    top, done = 0, 0
    lo[0], size[0] = 0, n
    while top >= 0:
        half = size[top] // 2
        half -= half % 8
        if size[top] <= 128:
            sums[done] = _block_sum(a, lo[top], size[top])
            done += 1
            top -= 1
        elif stage[top] < 2:  # descend into the first half, then the second
            first = stage[top] == 0
            stage[top] += 1
            lo[top + 1] = lo[top] if first else lo[top] + half
            size[top + 1] = half if first else size[top] - half
            stage[top + 1] = 0
            top += 1
        else:  # both halves summed: combine them
            done -= 1
            sums[done - 1] = sums[done - 1] + sums[done]
            top -= 1
    return sums[0]


@njit(cache=True)
def _block_sum(a, lo, n):
    if n < 8:
        res = 0.0
        for i in range(lo, lo + n):
            res += a[i]
        return res
    r0, r1, r2, r3 = a[lo], a[lo + 1], a[lo + 2], a[lo + 3]
    r4, r5, r6, r7 = a[lo + 4], a[lo + 5], a[lo + 6], a[lo + 7]
    i = 8
    stop = n - n % 8
    while i < stop:
        r0 += a[lo + i]
        r1 += a[lo + i + 1]
        r2 += a[lo + i + 2]
        r3 += a[lo + i + 3]
        r4 += a[lo + i + 4]
        r5 += a[lo + i + 5]
        r6 += a[lo + i + 6]
        r7 += a[lo + i + 7]
        i += 8
    res = ((r0 + r1) + (r2 + r3)) + ((r4 + r5) + (r6 + r7))
    while i < n:
        res += a[lo + i]
        i += 1
    return res


@njit(cache=True)
def srtf_position(seq, size, k, r, rows, row_p):
    """How many of a queue's jobs (``seq[:size]``, SRTF order on type k) run before row r in SRTF
    order: shorter predicted run time first, ties by job id."""
    p, job = row_p[k, r], rows[r]
    at = 0
    while at < size:
        q = row_p[k, seq[at]]
        if q < p or (q == p and rows[seq[at]] < job):
            at += 1
        else:
            break
    return at


@njit(cache=True)
def fill_column(c, srtf_only, tard, jct, code, alive, rows, row_p, row_ok, row_submit, row_deadline,
                g_type, g_t0, g_tard, g_len, g_slot, seqs, counters, row_due_p=None, g_t0_due=None):
    """Score every waiting job on group c: the SRTF cost of the group's queue with the job added.

    Exact when that order meets every deadline (then it is optimal), or once the decision's budget
    is spent (``srtf_only``: SRTF is then the order used). Otherwise a lower bound on tardiness
    (the queue's own, and the job's if run first) with SRTF's JCT, which no order beats. Without
    ``row_due_p`` and ``g_t0_due`` the due clock is the point clock."""
    due_p = row_p if row_due_p is None else row_due_p
    n = rows.shape[0]
    counters[WORK] += n
    k = g_type[c]
    t0 = g_t0[c]
    t0_due = t0 if g_t0_due is None else g_t0_due[c]
    size = g_len[c]
    inf = np.inf
    if size == 0:  # a lone job has one order: exact
        for i in range(n):
            if alive[i] and row_ok[k, i]:
                late = t0_due + due_p[k, i] - row_deadline[i]
                tard[i, c] = late if late > 0.0 else 0.0
                jct[i, c] = t0 + row_p[k, i] - row_submit[i]
            else:
                tard[i, c] = inf
                jct[i, c] = inf
            code[i, c] = ON_TIME if tard[i, c] == 0.0 else EXACT
        return
    seq = seqs[g_slot[c]]
    ends, ends_due = np.empty(size + 1), np.empty(size + 1)
    ends[0], ends_due[0] = t0, t0_due
    for m in range(size):  # sequential sums, as queue_cost adds
        ends[m + 1] = ends[m] + row_p[k, seq[m]]
        ends_due[m + 1] = ends_due[m] + due_p[k, seq[m]]
    waits = np.empty(size)
    lates = np.empty(size)
    for i in range(n):
        if not (alive[i] and row_ok[k, i]):
            tard[i, c] = inf
            jct[i, c] = inf
            code[i, c] = EXACT
            continue
        pj, qj = row_p[k, i], due_p[k, i]
        before = srtf_position(seq, size, k, i, rows, row_p)
        for m in range(size):
            x = seq[m]
            if m < before:
                shifted, shifted_due = ends[m + 1], ends_due[m + 1]
            else:
                shifted, shifted_due = ends[m + 1] + pj, ends_due[m + 1] + qj
            waits[m] = shifted - row_submit[x]
            late = shifted_due - row_deadline[x]
            lates[m] = late if late > 0.0 else 0.0
        end_j = ends[before] + pj
        own_late = ends_due[before] + qj - row_deadline[i]
        total_jct = pairwise_sum(waits, size) + end_j - row_submit[i]
        total_tard = pairwise_sum(lates, size) + (own_late if own_late > 0.0 else 0.0)
        jct[i, c] = total_jct
        if total_tard == 0.0:
            tard[i, c] = 0.0
            code[i, c] = ON_TIME
        elif srtf_only:
            tard[i, c] = total_tard
            code[i, c] = EXACT
        else:
            alone = t0_due + qj - row_deadline[i]
            alone = alone if alone > 0.0 else 0.0
            tard[i, c] = g_tard[c] if g_tard[c] > alone else alone
            code[i, c] = BOUND


@njit(cache=True)
def fill_all(srtf_only, tard, jct, code, alive, rows, row_p, row_ok, row_submit, row_deadline,
             g_type, g_t0, g_tard, g_len, g_slot, seqs, counters, row_due_p, g_t0_due):
    for c in range(counters[USED]):
        fill_column(c, srtf_only, tard, jct, code, alive, rows, row_p, row_ok, row_submit, row_deadline,
                    g_type, g_t0, g_tard, g_len, g_slot, seqs, counters, row_due_p, g_t0_due)


@njit(cache=True)
def pick(tard, jct, alive, used):
    """The (row, column) of least (tardiness, JCT), first in row-major order among equals, as
    numpy's argmin over the matrix; (-1, -1) when nothing left fits anywhere."""
    best_r, best_c = -1, -1
    bt, bj = np.inf, np.inf
    for r in range(tard.shape[0]):
        if not alive[r]:
            continue
        for c in range(used):
            t = tard[r, c]
            if t < bt or (t == bt and jct[r, c] < bj):
                bt, bj, best_r, best_c = t, jct[r, c], r, c
    return best_r, best_c  # a finite tardiness comes with a finite JCT: inf cells are never picked


@njit(cache=True)
def add_job(r, c, tardiness, srtf_only, tard, jct, code, alive, rows, row_p, row_ok, row_submit, row_deadline,
            g_type, g_t0, g_tard, g_len, g_slot, g_count, g_parent, seqs, counters, row_due_p, g_t0_due):
    """Give row r to group c (whose queue, ordered, has ``tardiness``); a group of several GPUs
    hands the job to a new group split off it (its first GPU). Returns the group that got it."""
    alive[r] = False
    tard[r, :] = np.inf
    jct[r, :] = np.inf
    target = c
    if g_count[c] > 1:
        target = counters[USED]
        counters[USED] += 1
        g_type[target], g_t0[target], g_count[target], g_parent[target] = g_type[c], g_t0[c], 1, c
        g_t0_due[target] = g_t0_due[c]
        g_count[c] -= 1
        g_slot[target] = counters[SLOTS]
        counters[SLOTS] += 1
        size = g_len[c]
        if size:
            seqs[g_slot[target], :size] = seqs[g_slot[c], :size]
        g_len[target] = size
    elif g_slot[c] < 0:
        g_slot[c] = counters[SLOTS]
        counters[SLOTS] += 1
    seq = seqs[g_slot[target]]
    size = g_len[target]
    k = g_type[target]
    at = srtf_position(seq, size, k, r, rows, row_p)
    for m in range(size, at, -1):
        seq[m] = seq[m - 1]
    seq[at] = r
    g_len[target] = size + 1
    g_tard[target] = tardiness
    fill_column(target, srtf_only, tard, jct, code, alive, rows, row_p, row_ok, row_submit, row_deadline,
                g_type, g_t0, g_tard, g_len, g_slot, seqs, counters, row_due_p, g_t0_due)
    return target


@njit(cache=True)
def meets_deadlines(r, c, rows, row_p, row_deadline, g_type, g_len, g_slot, seqs, row_due_p, g_t0_due):
    """Whether group c's queue with row r, in SRTF order, meets every deadline on the due clock,
    summed as :func:`policies.hydra.queue_cost` sums (one start time plus each run time in turn)."""
    k = g_type[c]
    size = g_len[c]
    seq = seqs[g_slot[c]] if size else seqs[0]
    before = srtf_position(seq, size, k, r, rows, row_p)
    t = g_t0_due[c]
    for m in range(size + 1):
        x = seq[m] if m < before else (r if m == before else seq[m - 1])
        t += row_due_p[k, x]
        if t > row_deadline[x]:
            return False
    return True


@njit(cache=True)
def advance(max_rounds, srtf_only, tard, jct, code, alive, rows, row_p, row_ok, row_submit, row_deadline,
            g_type, g_t0, g_tard, g_len, g_slot, g_count, g_parent, g_srtf, seqs, counters, row_due_p, g_t0_due):
    """Run greedy rounds while the best pair's queue orders on time by SRTF (its SRTF order is
    then its optimal order, cost zero tardiness). Returns (DONE, -1, -1) when nothing is left,
    (ASK, r, c) when the best pair needs a real ordering, (PAUSE, -1, -1) after ``max_rounds``."""
    for _ in range(max_rounds):
        r, c = pick(tard, jct, alive, counters[USED])
        if r < 0:
            return DONE, -1, -1
        if code[r, c] != ON_TIME or not meets_deadlines(r, c, rows, row_p, row_deadline, g_type, g_len, g_slot,
                                                        seqs, row_due_p, g_t0_due):
            return ASK, r, c  # (the second: only if rounding differs from the score's sums)
        target = add_job(r, c, 0.0, srtf_only, tard, jct, code, alive, rows, row_p, row_ok, row_submit,
                         row_deadline, g_type, g_t0, g_tard, g_len, g_slot, g_count, g_parent, seqs, counters,
                         row_due_p, g_t0_due)
        g_srtf[target] = True
    return PAUSE, -1, -1

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

BOUND, ON_TIME, EXACT, LAZY = 0, 1, 2, 3  # score codes (LAZY: see fill_lazy)
DONE, ASK, PAUSE = 0, 1, 2  # why advance() returned
# indices into the int64 ``counters`` array (LAZY: 1 when new groups' scores may wait, see add_job;
# LIVE: how many rows are left, ``live[:LIVE]`` in order)
USED, SLOTS, WORK, LAZY, LIVE = 0, 1, 2, 3, 4


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
    ends, ends_due = queue_ends(seq, size, k, t0, t0_due, row_p, due_p)
    waits = np.empty(size)
    lates = np.empty(size)
    for i in range(n):
        if not (alive[i] and row_ok[k, i]):
            tard[i, c] = inf
            jct[i, c] = inf
            code[i, c] = EXACT
            continue
        score_row(i, c, k, srtf_only, t0_due, seq, size, ends, ends_due, waits, lates, tard, jct, code, rows,
                  row_p, due_p, row_submit, row_deadline, g_tard)


@njit(cache=True)
def queue_ends(seq, size, k, t0, t0_due, row_p, due_p):
    """When each job of a queue (SRTF order) ends, on both clocks: sequential sums, as queue_cost adds."""
    ends, ends_due = np.empty(size + 1), np.empty(size + 1)
    ends[0], ends_due[0] = t0, t0_due
    for m in range(size):
        ends[m + 1] = ends[m] + row_p[k, seq[m]]
        ends_due[m + 1] = ends_due[m] + due_p[k, seq[m]]
    return ends, ends_due


@njit(cache=True)
def score_row(i, c, k, srtf_only, t0_due, seq, size, ends, ends_due, waits, lates, tard, jct, code, rows,
              row_p, due_p, row_submit, row_deadline, g_tard):
    """Score row i (alive, feasible) on group c's non-empty queue ``seq[:size]`` ending at ``ends``."""
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
def fill_lazy(c, tard, jct, code, rows, row_p, row_ok, row_submit, row_deadline,
              g_type, g_t0, g_len, g_slot, seqs, counters, row_due_p, g_t0_due, best_c, best_t, best_j, live,
              stale):
    """Like :func:`fill_column` on a non-empty queue, but each live pair gets a lower bound in
    O(1), marked :data:`LAZY`, scored by :func:`score_cell` only if it is ever the least.

    With every run time >= 0 (both clocks), a job's cell is, in floating point too (rounding is
    monotone, and each sum only gains terms no smaller): tardiness >= its tardiness run first
    (``alone``, as :func:`fill_column` computes it; each of its scores is >= that), JCT >= the
    queue's own summed waits (numpy's pairwise order, over the same positions: each wait only
    grows) plus the job's JCT run first. So the least of bounds and scores, scored when a bound,
    is the least score, and equals are resolved in the same (row, column) order. Only the rows
    left (``live``) are scored (no other is read again), each one's best cell kept as
    :func:`update_best_stale` keeps it."""
    n = rows.shape[0]
    counters[WORK] += n
    k = g_type[c]
    t0, t0_due = g_t0[c], g_t0_due[c]
    size = g_len[c]
    seq = seqs[g_slot[c]]
    ends, _ = queue_ends(seq, size, k, t0, t0_due, row_p, row_due_p)
    waits = np.empty(size)
    for m in range(size):
        waits[m] = ends[m + 1] - row_submit[seq[m]]
    queue_jct = pairwise_sum(waits, size)
    for at in range(counters[LIVE]):
        i = live[at]
        if not row_ok[k, i]:
            t, j = np.inf, np.inf
            code[i, c] = EXACT
        else:
            alone = t0_due + row_due_p[k, i] - row_deadline[i]
            t = alone if alone > 0.0 else 0.0
            j = queue_jct + (t0 + row_p[k, i]) - row_submit[i]
            code[i, c] = LAZY
        tard[i, c], jct[i, c] = t, j
        # update_best_stale(i, c, ...), written out: a call per row costs more than its body (as
        # inline="always", 10-15 % more on Philly 20k); keep the two identical
        bt, bj = best_t[i], best_j[i]
        if stale[i]:
            if t < bt or (t == bt and j < bj):
                best_c[i], best_t[i], best_j[i] = c, t, j
                stale[i] = False
            continue
        b = best_c[i]
        if b == c:
            if t < bt or (t == bt and j <= bj):
                best_t[i], best_j[i] = t, j
            else:
                stale[i] = True
        elif t < bt or (t == bt and (j < bj or (j == bj and b >= 0 and c < b))):
            best_c[i], best_t[i], best_j[i] = c, t, j


@njit(cache=True)
def score_cell(r, c, srtf_only, tard, jct, code, rows, row_p, row_submit, row_deadline,
               g_type, g_t0, g_tard, g_len, g_slot, seqs, row_due_p, g_t0_due):
    """The score :func:`fill_column` gives pair (r, c), for a pair :func:`fill_lazy` bounded."""
    k = g_type[c]
    size = g_len[c]
    seq = seqs[g_slot[c]]
    ends, ends_due = queue_ends(seq, size, k, g_t0[c], g_t0_due[c], row_p, row_due_p)
    score_row(r, c, k, srtf_only, g_t0_due[c], seq, size, ends, ends_due, np.empty(size), np.empty(size), tard, jct,
              code, rows, row_p, row_due_p, row_submit, row_deadline, g_tard)


@njit(cache=True)
def fill_all(srtf_only, tard, jct, code, alive, rows, row_p, row_ok, row_submit, row_deadline,
             g_type, g_t0, g_tard, g_len, g_slot, seqs, counters, row_due_p, g_t0_due):
    for c in range(counters[USED]):
        if g_len[c] == 0:  # fill_column's lone-job case, in a function that allocates nothing (cheaper to call)
            fill_empty(c, tard, jct, code, alive, row_p, row_ok, row_submit, row_deadline, g_type, g_t0, counters,
                       row_due_p, g_t0_due)
        else:
            fill_column(c, srtf_only, tard, jct, code, alive, rows, row_p, row_ok, row_submit, row_deadline,
                        g_type, g_t0, g_tard, g_len, g_slot, seqs, counters, row_due_p, g_t0_due)


@njit(cache=True)
def fill_empty(c, tard, jct, code, alive, row_p, row_ok, row_submit, row_deadline, g_type, g_t0, counters,
               row_due_p, g_t0_due):
    """:func:`fill_column` on an empty group (the same operations)."""
    n = tard.shape[0]
    counters[WORK] += n
    k = g_type[c]
    t0 = g_t0[c]
    t0_due = g_t0_due[c]
    inf = np.inf
    for i in range(n):
        if alive[i] and row_ok[k, i]:
            late = t0_due + row_due_p[k, i] - row_deadline[i]
            tard[i, c] = late if late > 0.0 else 0.0
            jct[i, c] = t0 + row_p[k, i] - row_submit[i]
        else:
            tard[i, c] = inf
            jct[i, c] = inf
        code[i, c] = ON_TIME if tard[i, c] == 0.0 else EXACT


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
def rescan_row(r, tard, jct, used, best_c, best_t, best_j):
    """Row r's least (tardiness, JCT) over the first ``used`` columns, first among equals, as
    :func:`pick` scans a row; column -1 when no cell can be picked."""
    bc, bt, bj = -1, np.inf, np.inf
    for c in range(used):
        t = tard[r, c]
        if t < bt or (t == bt and jct[r, c] < bj):
            bt, bj, bc = t, jct[r, c], c
    best_c[r], best_t[r], best_j[r] = bc, bt, bj


@njit(cache=True)
def rescan_rows(tard, jct, alive, used, best_c, best_t, best_j):
    for r in range(tard.shape[0]):
        if alive[r]:
            rescan_row(r, tard, jct, used, best_c, best_t, best_j)


@njit(cache=True)
def refresh_column(c, tard, jct, alive, used, best_c, best_t, best_j):
    """Column c was rescored: keep each live row's best cell current. A row whose best was c and
    got costlier is rescanned; any other row compares c's new cell with its best (ties: lower column)."""
    for r in range(tard.shape[0]):
        if alive[r]:
            update_best(r, c, tard, jct, used, best_c, best_t, best_j)


@njit(cache=True)
def update_best(r, c, tard, jct, used, best_c, best_t, best_j):
    """Row r's cell in column c changed: keep the row's best cell current. If c was its best and
    got costlier the row is rescanned; else c's cell is compared with its best (ties: lower column)."""
    t, j, b = tard[r, c], jct[r, c], best_c[r]
    bt, bj = best_t[r], best_j[r]
    if b == c:
        if t < bt or (t == bt and j <= bj):
            best_t[r], best_j[r] = t, j
        else:
            rescan_row(r, tard, jct, used, best_c, best_t, best_j)
    elif t < bt or (t == bt and (j < bj or (j == bj and b >= 0 and c < b))):
        best_c[r], best_t[r], best_j[r] = c, t, j


@njit(cache=True)
def update_best_stale(r, c, tard, jct, best_c, best_t, best_j, stale):
    """:func:`update_best`, but a row whose best cell got costlier is not rescanned: it is marked
    ``stale``, its old best (t, j) kept as a lower bound on every cell of the row, and
    :func:`pick_fresh` rescans it only if that bound is ever the least. Exact: its old best was no
    more than any other cell (which did not change), and the changed cell is now above it. A stale
    row becomes exact again when a changed cell goes strictly below its bound (then that cell is
    below every other one)."""
    t, j = tard[r, c], jct[r, c]
    bt, bj = best_t[r], best_j[r]
    if stale[r]:
        if t < bt or (t == bt and j < bj):
            best_c[r], best_t[r], best_j[r] = c, t, j
            stale[r] = False
        return
    b = best_c[r]
    if b == c:
        if t < bt or (t == bt and j <= bj):
            best_t[r], best_j[r] = t, j
        else:
            stale[r] = True
    elif t < bt or (t == bt and (j < bj or (j == bj and b >= 0 and c < b))):
        best_c[r], best_t[r], best_j[r] = c, t, j


@njit(cache=True)
def pick_fresh(live, count, tard, jct, used, best_c, best_t, best_j, stale):
    """:func:`pick_live` with stale rows (:func:`update_best_stale`): while the row picked is stale
    its best cell is found again (:func:`rescan_row`) and the pick repeated. A stale row's bound is
    no more than its best cell, so the first exact row of least (tardiness, JCT) is the one a scan
    of every row's true best cell picks (a stale row before it with an equal bound is rescanned)."""
    while True:  # pick_live and rescan_row written out (no call: numba counts references to the arrays at each)
        r, bt, bj = -1, np.inf, np.inf
        for at in range(count):
            x = live[at]
            if best_c[x] >= 0:
                t = best_t[x]
                if t < bt or (t == bt and best_j[x] < bj):
                    bt, bj, r = t, best_j[x], x
        if r < 0:
            return -1, -1
        if not stale[r]:
            return r, best_c[r]
        bc, bt, bj = -1, np.inf, np.inf
        for c in range(used):
            t = tard[r, c]
            if t < bt or (t == bt and jct[r, c] < bj):
                bt, bj, bc = t, jct[r, c], c
        best_c[r], best_t[r], best_j[r] = bc, bt, bj
        stale[r] = False


@njit(cache=True)
def pick_live(live, count, best_c, best_t, best_j):
    """:func:`pick` from the rows' best cells, over the rows left, ``live[:count]`` (ascending):
    the first row of least (tardiness, JCT)."""
    best_r, bt, bj = -1, np.inf, np.inf
    for at in range(count):
        r = live[at]
        if best_c[r] >= 0:
            t = best_t[r]
            if t < bt or (t == bt and best_j[r] < bj):
                bt, bj, best_r = t, best_j[r], r
    if best_r < 0:
        return -1, -1
    return best_r, best_c[best_r]


@njit(cache=True)
def set_exact(r, c, t, j, tard, jct, code, used, best_c, best_t, best_j):
    """Score pair (r, c) exactly (no lower than its bound): row r's best cell is found again."""
    tard[r, c], jct[r, c] = t, j
    code[r, c] = EXACT
    rescan_row(r, tard, jct, used, best_c, best_t, best_j)


@njit(cache=True)
def start(srtf_only, tard, jct, code, alive, rows, row_p, row_ok, row_submit, row_deadline,
          g_type, g_t0, g_tard, g_len, g_slot, seqs, counters, row_due_p, g_t0_due, best_c, best_t, best_j, g_lazy,
          live, stale):
    """Score every pair (:func:`fill_all`, scores held back included) and find each row's best cell."""
    fill_all(srtf_only, tard, jct, code, alive, rows, row_p, row_ok, row_submit, row_deadline,
             g_type, g_t0, g_tard, g_len, g_slot, seqs, counters, row_due_p, g_t0_due)
    g_lazy[:] = False
    counters[LIVE] = 0
    for r in range(alive.shape[0]):
        if alive[r]:
            live[counters[LIVE]] = r
            counters[LIVE] += 1
    rescan_rows(tard, jct, alive, counters[USED], best_c, best_t, best_j)
    stale[:] = False


@njit(cache=True)
def new_decision(rows, row_p, row_due_p, submit, deadline, given_type, given_t0, given_t0_due, given_count, lazy):
    """The arrays of one greedy decision (:func:`policies.hydra.assign`) on ``n`` rows and ``m``
    given groups (``width`` = m + n columns: every assignment splits at most one group off): scores
    (inf), codes, alive rows, the rows' submit and deadline, the groups (the given ones first),
    queues, counters, and per row its best cell, per group whether held back, the rows left and
    per row whether stale. ``counters[LAZY]``: ``lazy`` asked, some group given, no GPU free before
    a job's submission (both clocks), every run time >= 0 (both clocks), every submit finite, as
    numpy's ``min``/``max`` (NaN-propagating) tested them before."""
    n, m = rows.shape[0], given_type.shape[0]
    width = m + n
    tard = np.full((n, width), np.inf)
    jct = np.full((n, width), np.inf)
    code = np.zeros((n, width), dtype=np.int8)
    alive = np.ones(n, dtype=np.bool_)
    row_submit, row_deadline = np.empty(n), np.empty(n)
    for i in range(n):
        row_submit[i], row_deadline[i] = submit[rows[i]], deadline[rows[i]]
    g_type, g_t0, g_t0_due = np.zeros(width, dtype=np.int64), np.zeros(width), np.zeros(width)
    g_count = np.zeros(width, dtype=np.int64)
    for c in range(m):
        g_type[c], g_t0[c], g_t0_due[c], g_count[c] = given_type[c], given_t0[c], given_t0_due[c], given_count[c]
    g_tard, g_len = np.zeros(width), np.zeros(width, dtype=np.int64)
    g_slot, g_parent = np.full(width, -1, dtype=np.int64), np.full(width, -1, dtype=np.int64)
    g_srtf = np.zeros(width, dtype=np.bool_)
    seqs = np.empty((n, n), dtype=np.int64)
    ok = lazy and m > 0
    if ok:
        # min(g_t0.min(), g_t0_due.min()) >= row_submit.max() with every submit finite: every t0 >= the
        # latest submit (a NaN t0 fails), and every t0_due too unless one is NaN (Python's min then
        # keeps g_t0's minimum)
        latest = -np.inf
        for i in range(n):
            ok = ok and np.isfinite(row_submit[i])
            latest = max(latest, row_submit[i])
        due_nan, due_ok = False, True
        for c in range(m):
            ok = ok and g_t0[c] >= latest
            due_nan = due_nan or np.isnan(g_t0_due[c])
            due_ok = due_ok and g_t0_due[c] >= latest
        ok = ok and (due_nan or due_ok)
        for k in range(row_p.shape[0]):  # row_p.min() >= 0.0: no NaN, none < 0
            for i in range(n):
                ok = ok and row_p[k, i] >= 0.0 and row_due_p[k, i] >= 0.0
    counters = np.zeros(5, dtype=np.int64)
    counters[USED], counters[LAZY], counters[LIVE] = m, 1 if ok else 0, n
    best_c, best_t, best_j = np.full(n, -1, dtype=np.int64), np.full(n, np.inf), np.full(n, np.inf)
    return (tard, jct, code, alive, row_submit, row_deadline, g_type, g_t0, g_t0_due, g_count, g_tard, g_len,
            g_slot, g_parent, g_srtf, seqs, counters, best_c, best_t, best_j, np.zeros(width, dtype=np.bool_),
            np.arange(n), np.zeros(n, dtype=np.bool_))


@njit(cache=True)
def add_job(r, c, tardiness, srtf_only, tard, jct, code, alive, rows, row_p, row_ok, row_submit, row_deadline,
            g_type, g_t0, g_tard, g_len, g_slot, g_count, g_parent, seqs, counters, row_due_p, g_t0_due,
            best_c, best_t, best_j, g_lazy, live, stale):
    """Give row r to group c (whose queue, ordered, has ``tardiness``); a group of several GPUs
    hands the job to a new group split off it (its first GPU). Returns the group that got it.

    A group split off an empty group (its queue: this one job) costs every job at least what the
    empty group costs it, on both clocks, in floating point too (with every run time >= 0 and every
    GPU free no earlier than any job's submission, ``counters[LAZY]``: each sum only adds terms >=
    0, and rounding is monotone), and the empty group comes first among equals: none of its pairs
    can be the least while the empty group stays empty. Its scores are held back (``g_lazy``) and
    computed when that group gets a job itself (counted as scored now, as before)."""
    target = take_row(r, c, tardiness, tard, jct, alive, rows, row_p, g_type, g_t0, g_tard, g_len, g_slot, g_count,
                      g_parent, seqs, counters, g_t0_due, live)
    if target != c and g_len[c] == 0 and counters[LAZY]:
        g_lazy[target] = True
        counters[WORK] += rows.shape[0]
        return target
    rescore_taken(c, target, srtf_only, tard, jct, code, alive, rows, row_p, row_ok, row_submit, row_deadline,
                  g_type, g_t0, g_tard, g_len, g_slot, g_parent, seqs, counters, row_due_p, g_t0_due,
                  best_c, best_t, best_j, g_lazy, live, stale)
    return target


@njit(cache=True)
def take_row(r, c, tardiness, tard, jct, alive, rows, row_p, g_type, g_t0, g_tard, g_len, g_slot, g_count, g_parent,
             seqs, counters, g_t0_due, live):
    """The bookkeeping of :func:`add_job`: row r leaves, and joins group c's queue (SRTF order) or
    that of a group split off c; returns the group that got it. It runs at every greedy round, with
    no allocation and no call inside (each call counts references to the arrays it passes)."""
    alive[r] = False
    for x in range(tard.shape[1]):
        tard[r, x] = np.inf
        jct[r, x] = np.inf
    left = 0
    for i in range(counters[LIVE]):
        if live[i] != r:
            live[left] = live[i]
            left += 1
    counters[LIVE] = left
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
        for m in range(size):
            seqs[g_slot[target], m] = seqs[g_slot[c], m]
        g_len[target] = size
    elif g_slot[c] < 0:
        g_slot[c] = counters[SLOTS]
        counters[SLOTS] += 1
    slot = g_slot[target]
    size = g_len[target]
    k = g_type[target]
    p, job = row_p[k, r], rows[r]
    at = 0  # srtf_position(seqs[slot], size, k, r, rows, row_p), written out
    while at < size:
        q = row_p[k, seqs[slot, at]]
        if q < p or (q == p and rows[seqs[slot, at]] < job):
            at += 1
        else:
            break
    for m in range(size, at, -1):
        seqs[slot, m] = seqs[slot, m - 1]
    seqs[slot, at] = r
    g_len[target] = size + 1
    g_tard[target] = tardiness
    return target


@njit(cache=True)
def rescore_taken(c, target, srtf_only, tard, jct, code, alive, rows, row_p, row_ok, row_submit, row_deadline,
                  g_type, g_t0, g_tard, g_len, g_slot, g_parent, seqs, counters, row_due_p, g_t0_due,
                  best_c, best_t, best_j, g_lazy, live, stale):
    """The rescoring of :func:`add_job` once ``target`` (c or split off it) got a job whose scores
    are not held back: its column, and if c's queue was empty, the groups held back off it."""
    _rescore(target, srtf_only, tard, jct, code, alive, rows, row_p, row_ok, row_submit, row_deadline,
             g_type, g_t0, g_tard, g_len, g_slot, seqs, counters, row_due_p, g_t0_due, best_c, best_t, best_j, live,
             stale)
    if target == c:  # c's queue is no longer empty: the groups split off it may now cost less
        for u in range(counters[USED]):
            if g_lazy[u] and g_parent[u] == c:
                g_lazy[u] = False
                _rescore(u, srtf_only, tard, jct, code, alive, rows, row_p, row_ok, row_submit, row_deadline,
                         g_type, g_t0, g_tard, g_len, g_slot, seqs, counters, row_due_p, g_t0_due, best_c, best_t,
                         best_j, live, stale)
                counters[WORK] -= rows.shape[0]  # counted when it split off


@njit(cache=True)
def _rescore(c, srtf_only, tard, jct, code, alive, rows, row_p, row_ok, row_submit, row_deadline,
             g_type, g_t0, g_tard, g_len, g_slot, seqs, counters, row_due_p, g_t0_due, best_c, best_t, best_j, live,
             stale):
    """Score group c's column after its queue grew (bounds when ``counters[LAZY]``), rows' best cells kept."""
    if counters[LAZY]:
        fill_lazy(c, tard, jct, code, rows, row_p, row_ok, row_submit, row_deadline,
                  g_type, g_t0, g_len, g_slot, seqs, counters, row_due_p, g_t0_due, best_c, best_t, best_j, live,
                  stale)
    else:
        fill_column(c, srtf_only, tard, jct, code, alive, rows, row_p, row_ok, row_submit, row_deadline,
                    g_type, g_t0, g_tard, g_len, g_slot, seqs, counters, row_due_p, g_t0_due)
        refresh_column(c, tard, jct, alive, counters[USED], best_c, best_t, best_j)


@njit(cache=True)
def meets_deadlines(r, c, rows, row_p, row_deadline, g_type, g_len, g_slot, seqs, row_due_p, g_t0_due):
    """Whether group c's queue with row r, in SRTF order, meets every deadline on the due clock,
    summed as :func:`policies.hydra.queue_cost` sums (one start time plus each run time in turn)."""
    k = g_type[c]
    size = g_len[c]
    slot = g_slot[c] if size else 0
    p, job = row_p[k, r], rows[r]
    before = 0  # srtf_position(seqs[slot], size, k, r, rows, row_p), written out (no call)
    while before < size:
        q = row_p[k, seqs[slot, before]]
        if q < p or (q == p and rows[seqs[slot, before]] < job):
            before += 1
        else:
            break
    t = g_t0_due[c]
    for m in range(size + 1):
        x = seqs[slot, m] if m < before else (r if m == before else seqs[slot, m - 1])
        t += row_due_p[k, x]
        if t > row_deadline[x]:
            return False
    return True


@njit(cache=True)
def advance(max_rounds, srtf_only, tard, jct, code, alive, rows, row_p, row_ok, row_submit, row_deadline,
            g_type, g_t0, g_tard, g_len, g_slot, g_count, g_parent, g_srtf, seqs, counters, row_due_p, g_t0_due,
            best_c, best_t, best_j, g_lazy, live, stale):
    """Run greedy rounds while the best pair's queue orders on time by SRTF (its SRTF order is
    then its optimal order, cost zero tardiness). Returns (DONE, -1, -1) when nothing is left,
    (ASK, r, c) when the best pair needs a real ordering, (PAUSE, -1, -1) after ``max_rounds``.
    The best pair is :func:`pick`'s, found from the rows' best cells (kept current by
    :func:`add_job`) instead of a scan of the whole matrix."""
    rounds = 0
    while rounds < max_rounds:
        r, c = pick_fresh(live, counters[LIVE], tard, jct, counters[USED], best_c, best_t, best_j, stale)
        if r < 0:
            return DONE, -1, -1
        if code[r, c] == LAZY:  # a bound is the least: score the pair, and look again
            score_cell(r, c, srtf_only, tard, jct, code, rows, row_p, row_submit, row_deadline,
                       g_type, g_t0, g_tard, g_len, g_slot, seqs, row_due_p, g_t0_due)
            rescan_row(r, tard, jct, counters[USED], best_c, best_t, best_j)
            continue
        rounds += 1
        if code[r, c] != ON_TIME or not meets_deadlines(r, c, rows, row_p, row_deadline, g_type, g_len, g_slot,
                                                        seqs, row_due_p, g_t0_due):
            return ASK, r, c  # (the second: only if rounding differs from the score's sums)
        # add_job(r, c, 0.0, ...), its steps called one by one (a call costs a count per array passed)
        target = take_row(r, c, 0.0, tard, jct, alive, rows, row_p, g_type, g_t0, g_tard, g_len, g_slot, g_count,
                          g_parent, seqs, counters, g_t0_due, live)
        if target != c and g_len[c] == 0 and counters[LAZY]:
            g_lazy[target] = True
            counters[WORK] += rows.shape[0]
        else:
            rescore_taken(c, target, srtf_only, tard, jct, code, alive, rows, row_p, row_ok, row_submit, row_deadline,
                          g_type, g_t0, g_tard, g_len, g_slot, g_parent, seqs, counters, row_due_p, g_t0_due,
                          best_c, best_t, best_j, g_lazy, live, stale)
        g_srtf[target] = True
    return PAUSE, -1, -1


@njit(cache=True)
def _nth_smallest(values, n):
    """The n-th smallest (1-based) of ``values`` (a copy is partitioned)."""
    return np.partition(values.copy(), n - 1)[n - 1]


@njit(cache=True)
def _by_busy(ids, busy):
    """Idle before busy, each in the order they came (a stable sort on ``busy``)."""
    out = np.empty_like(ids)
    at = 0
    for flag in (False, True):
        for g in ids:
            if busy[g] == flag:
                out[at] = g
                at += 1
    return out


@njit(cache=True)
def _sort_ties(ids, t0_due, busy):
    """Stable sort of ``ids`` (equal t0) by (t0_due, busy): their order in ``np.lexsort``."""
    same_due = True
    for g in ids:
        same_due = same_due and t0_due[g] == t0_due[ids[0]]
    if same_due:
        return _by_busy(ids, busy)
    keys = np.empty(ids.shape[0])
    for i in range(ids.shape[0]):
        keys[i] = t0_due[ids[i]]
    by_due = ids[np.argsort(keys, kind="mergesort")]
    lo = 0
    while lo < by_due.shape[0]:
        hi = lo
        while hi < by_due.shape[0] and t0_due[by_due[hi]] == t0_due[by_due[lo]]:
            hi += 1
        by_due[lo:hi] = _by_busy(by_due[lo:hi].copy(), busy)
        lo = hi
    return by_due


@njit(cache=True)
def _by_t0(ids, t0):
    """``ids`` (ascending) stably sorted by t0. The GPUs free earliest (every idle one: t0 = now)
    are often most of them: they come first in the order given, and only the others are sorted."""
    if ids.shape[0] == 0:
        return ids.copy()
    first = t0[ids[0]]
    for g in ids:
        first = min(first, t0[g])
    out = np.empty_like(ids)
    rest = np.empty_like(ids)
    keys = np.empty(ids.shape[0])
    heads, others = 0, 0
    for g in ids:  # ids[t0[ids] == first], then the others (their t0 as sort keys), in one pass
        if t0[g] == first:
            out[heads] = g
            heads += 1
        else:
            rest[others] = g
            keys[others] = t0[g]
            others += 1
    out[heads:] = rest[:others][np.argsort(keys[:others], kind="mergesort")]
    return out


@njit(cache=True)
def sort_gpus(ids, t0, t0_due, busy):
    """``ids[np.lexsort((busy[ids], t0_due[ids], t0[ids]))]`` for ascending ``ids``: a stable sort
    by t0, then each run of equal t0 by (t0_due, busy) when they differ in it."""
    out = _by_t0(ids, t0)
    lo = 0
    while lo < out.shape[0]:
        hi, mixed = lo + 1, False
        while hi < out.shape[0] and t0[out[hi]] == t0[out[lo]]:
            mixed = mixed or t0_due[out[hi]] != t0_due[out[lo]] or busy[out[hi]] != busy[out[lo]]
            hi += 1
        if mixed:
            out[lo:hi] = _sort_ties(out[lo:hi].copy(), t0_due, busy)
        lo = hi
    return out


@njit(cache=True)
def _kept(ids, t0, t0_due, n):
    """Of one type's GPUs (more than n), those that can receive a job: freeing no later than the
    n-th earliest (in (t0, t0_due, busy, id) order), or earlier on the due clock than one of the n
    first. The n first are those with t0 < T and the first of those with t0 == T."""
    times = np.empty(ids.shape[0])
    low, at_low = np.inf, 0  # the least t0 and how many share it (NaN: neither)
    for i in range(ids.shape[0]):
        times[i] = t0[ids[i]]
        if times[i] < low:
            low, at_low = times[i], 0
        if times[i] == low:
            at_low += 1
    last = low if at_low >= n else _nth_smallest(times, n)  # n of them share the least: it is the n-th
    fewer, tied, due_max = 0, 0, -np.inf
    for g in ids:
        if t0[g] < last:
            fewer += 1
            due_max = max(due_max, t0_due[g])
        elif t0[g] == last:
            tied += 1
    tie_due = np.empty(tied)
    at = 0
    for g in ids:
        if t0[g] == last:
            tie_due[at] = t0_due[g]
            at += 1
    same = tied > 0  # all tied GPUs free at one due-clock time (not NaN): it is the n-th smallest of them
    for i in range(tied):
        same = same and tie_due[i] == tie_due[0]
    nth = tie_due[0] if same else _nth_smallest(tie_due, n - fewer)
    due_max = max(due_max, nth)  # the last of the n first, on the due clock
    keep = np.empty(ids.shape[0], dtype=np.bool_)
    for i in range(ids.shape[0]):
        keep[i] = t0[ids[i]] <= last or t0_due[ids[i]] < due_max
    return ids[keep]


@njit(cache=True)
def group_gpus(by_type, type_start, t0, t0_due, busy, n):
    """Hydra's GPU groups for a decision planning n jobs: per type (GPU ids ``by_type[type_start[k]:
    type_start[k + 1]]``, ascending), the GPUs that can receive a job, ordered by when they free
    (t0, then t0_due; idle before busy at equal times, then by id), cut into runs of equal (t0,
    t0_due). Returns per group its type, t0, t0_due, GPU count and first position in ``members``,
    the groups' GPUs in order."""
    num_types = type_start.shape[0] - 1
    members = np.empty(by_type.shape[0], dtype=np.int64)
    cap = by_type.shape[0]
    g_type, g_t0, g_t0_due = np.empty(cap, np.int64), np.empty(cap), np.empty(cap)
    g_count, g_first = np.empty(cap, np.int64), np.empty(cap, np.int64)
    used, placed = 0, 0
    for k in range(num_types):
        ids = by_type[type_start[k]:type_start[k + 1]]
        if ids.shape[0] > n:
            ids = _kept(ids, t0, t0_due, n)
        ids = sort_gpus(ids, t0, t0_due, busy)
        for i in range(ids.shape[0]):
            g = ids[i]
            if i == 0 or t0[g] != t0[ids[i - 1]] or t0_due[g] != t0_due[ids[i - 1]]:
                g_type[used], g_t0[used], g_t0_due[used] = k, t0[g], t0_due[g]
                g_count[used], g_first[used] = 0, placed
                used += 1
            g_count[used - 1] += 1
            members[placed] = g
            placed += 1
    return g_type[:used], g_t0[:used], g_t0_due[:used], g_count[:used], g_first[:used], members[:placed]


@njit(cache=True)
def leads(m, used, g_parent, g_first, members):
    """Each group's lead GPU once the greedy is done: a group split off group c takes c's first GPU
    left (groups split in column order), and group c keeps the one after those handed out."""
    handed = np.zeros(m, np.int64)
    out = np.empty(used, np.int64)
    for u in range(m, used):
        c = g_parent[u]
        out[u] = members[g_first[c] + handed[c]]
        handed[c] += 1
    for c in range(m):
        out[c] = members[g_first[c] + handed[c]]
    return out


@njit(cache=True)
def first_by(jobs, key, limit):
    """:func:`policies.candidates.first_by` compiled: the first ``limit`` of ``jobs`` in (key, job) order."""
    if jobs.shape[0] > limit:
        kth = np.partition(key.copy(), limit - 1)[limit - 1]
        keep = key <= kth
        jobs, key = jobs[keep], key[keep]
    by_job = np.argsort(jobs)  # distinct jobs: any sort is the stable one
    jobs, key = jobs[by_job], key[by_job]
    return jobs[np.argsort(key, kind="mergesort")][:limit]


@njit(cache=True)
def round_robin(orders, lengths, count, mark):
    """:func:`policies.candidates.round_robin_pick` on ``orders[k, :lengths[k]]``, as a sorted array.
    ``mark`` (one flag per job, all False) is left as it came."""
    picked = np.empty(count, np.int64)
    cursor = np.zeros(orders.shape[0], np.int64)
    size = 0
    while size < count:
        moved = False
        for k in range(orders.shape[0]):
            while cursor[k] < lengths[k] and mark[orders[k, cursor[k]]]:
                cursor[k] += 1
            if cursor[k] < lengths[k] and size < count:
                mark[orders[k, cursor[k]]] = True
                picked[size] = orders[k, cursor[k]]
                size += 1
                moved = True
        if not moved:
            break
    for i in range(size):
        mark[picked[i]] = False
    return np.sort(picked[:size])


@njit(cache=True)
def window(jobs, deadline, predicted, count, mark):
    """Hydra's online window: ``count`` jobs (sorted) picked round-robin from the longest-waiting
    (``jobs`` is in arrival order), the earliest deadline (NaN: none) and the shortest predicted run
    time on any type, each order's ties broken by job index."""
    orders = np.empty((3, count), np.int64)
    lengths = np.empty(3, np.int64)
    orders[0, :count] = jobs[:count]
    lengths[0] = count
    dated = ~np.isnan(deadline[jobs])
    due = first_by(jobs[dated], deadline[jobs[dated]], count)
    orders[1, :due.shape[0]] = due
    lengths[1] = due.shape[0]
    shortest = np.empty(jobs.shape[0])
    for i in range(jobs.shape[0]):
        row = predicted[jobs[i]]
        low = row[0]
        for k in range(1, row.shape[0]):
            if row[k] < low or row[k] != row[k]:  # NaN propagates, as in numpy's min
                low = row[k]
        shortest[i] = low
    short = first_by(jobs, shortest, count)
    orders[2, :short.shape[0]] = short
    lengths[2] = short.shape[0]
    return round_robin(orders, lengths, count, mark)


@njit(cache=True)
def available_at(now, gpu_job, start, type_of, runtimes):
    """:meth:`policies.base.SchedulerView.gpu_available_at` compiled: per GPU, now when idle, else
    when its job is expected to end (never before now)."""
    out = np.empty(gpu_job.shape[0])
    for g in range(gpu_job.shape[0]):
        j = gpu_job[g]
        if j < 0:
            out[g] = now
        else:
            end = start[j] + runtimes[j, type_of[j]]
            out[g] = end if end > now or end != end else now  # np.maximum(now, end)
    return out


@njit(cache=True)
def flat_queues(columns, rows, seqs, slot, length):
    """The SRTF queues (job ids) of ``columns``, one after another, and where each ends."""
    ends = np.empty(columns.shape[0], np.int64)
    total = 0
    for i in range(columns.shape[0]):
        total += length[columns[i]]
        ends[i] = total
    jobs = np.empty(total, np.int64)
    at = 0
    for c in columns:
        for m in range(length[c]):
            jobs[at] = rows[seqs[slot[c], m]]
            at += 1
    return jobs, ends

"""Hydra's compiled decision steps give the Python steps they replaced, bit for bit.

Why: the grouping of GPUs, the online window, the GPUs' free times and the greedy's row-wise
search for the best pair were moved into compiled kernels (:mod:`policies.hydra_greedy`) for
speed; Hydra's decisions must not change (frozen cases). Each test runs a kernel and the former
Python expression on seeded random inputs full of ties.
"""

from __future__ import annotations

import numpy as np

from policies import hydra_greedy as kernels
from policies.candidates import first_by, round_robin_pick

INF = np.inf


def python_groups(gpu_type, num_types, t0, t0_due, busy, n):
    """The per-type grouping of ``HydraPolicy._plan`` before it was compiled."""
    out = []
    for k in range(num_types):
        ids = np.flatnonzero(gpu_type == k)
        ids = ids[np.lexsort((busy[ids], t0_due[ids], t0[ids]))]
        if len(ids) > n:
            first = ids[:n]
            ids = ids[(t0[ids] <= t0[first[-1]]) | (t0_due[ids] < t0_due[first].max())]
        times, due_times, members = t0[ids], t0_due[ids], ids.tolist()
        changes = (times[1:] != times[:-1]) | (due_times[1:] != due_times[:-1])
        cuts = [0, *(np.flatnonzero(changes) + 1).tolist(), len(members)]
        for a, b in zip(cuts, cuts[1:]):
            if b > a:
                out.append((k, float(times[a]), float(due_times[a]), members[a:b]))
    return out


def compiled_groups(gpu_type, num_types, t0, t0_due, busy, n):
    by_type = np.argsort(gpu_type, kind="stable").astype(np.int64)
    type_start = np.searchsorted(gpu_type[by_type], np.arange(num_types + 1)).astype(np.int64)
    g_type, g_t0, g_t0_due, g_count, g_first, members = kernels.group_gpus(by_type, type_start, t0, t0_due, busy, n)
    return [(int(g_type[c]), float(g_t0[c]), float(g_t0_due[c]), members[g_first[c]:g_first[c] + g_count[c]].tolist())
            for c in range(len(g_type))]


def test_group_gpus_equals_the_python_grouping():
    rng = np.random.default_rng(5)
    for case in range(400):
        gpus, num_types = int(rng.integers(1, 40)), int(rng.integers(1, 4))
        gpu_type = rng.integers(0, num_types, gpus).astype(np.int64)
        now = 10.0
        busy = rng.random(gpus) < rng.random()
        t0 = np.where(busy, now + rng.integers(0, 4, gpus) * rng.choice([0.0, 1.0, 2.5]), now)
        two_clocks = rng.random() < 0.5
        t0_due = t0 + (rng.integers(0, 3, gpus) if two_clocks else 0.0)
        n = int(rng.integers(1, 12))
        want = python_groups(gpu_type, num_types, t0, t0_due, busy, n)
        assert compiled_groups(gpu_type, num_types, t0, t0_due, busy, n) == want, case


def test_sort_gpus_is_lexsort_on_big_tie_blocks():
    rng = np.random.default_rng(6)
    for case in range(100):
        ids = np.sort(rng.choice(3000, int(rng.integers(1, 2000)), replace=False)).astype(np.int64)
        t0 = np.where(rng.random(3000) < 0.7, 5.0, 5.0 + rng.integers(0, 50, 3000))
        t0_due = t0 + np.where(rng.random(3000) < 0.5, 0.0, rng.integers(0, 3, 3000))
        busy = rng.random(3000) < 0.3
        want = ids[np.lexsort((busy[ids], t0_due[ids], t0[ids]))]
        assert np.array_equal(kernels.sort_gpus(ids, t0, t0_due, busy), want), case


def python_window(waiting, deadline, predicted, window):
    """``HydraPolicy._window`` before it was compiled."""
    if len(waiting) <= window:
        return waiting
    idx = np.asarray(waiting)
    due = deadline[idx]
    dated = ~np.isnan(due)
    orders = [waiting[:window], first_by(idx[dated], due[dated], window),
              first_by(idx, predicted[idx].min(axis=1), window)]
    return sorted(round_robin_pick(orders, window))


def test_window_equals_the_python_window():
    rng = np.random.default_rng(7)
    mark = np.zeros(300, dtype=bool)
    for case in range(400):
        jobs, types = 300, int(rng.integers(1, 4))
        predicted = rng.integers(1, 6, (jobs, types)).astype(float)
        predicted[rng.random((jobs, types)) < 0.1] = INF
        deadline = np.where(rng.random(jobs) < rng.random(), rng.integers(0, 8, jobs).astype(float), np.nan)
        waiting = [int(j) for j in rng.permutation(jobs)[:int(rng.integers(1, 120))]]
        window = int(rng.integers(1, 40))
        want = python_window(waiting, deadline, predicted, window)
        if len(waiting) <= window:
            continue  # taken as is, no kernel
        got = kernels.window(np.array(waiting, dtype=np.int64), deadline, predicted, window, mark)
        assert got.tolist() == want, case
        assert not mark.any()


def test_available_at_equals_the_views():
    rng = np.random.default_rng(8)
    for case in range(100):
        jobs, gpus, types = 20, 15, 2
        now = float(rng.integers(0, 30))
        gpu_job = np.where(rng.random(gpus) < 0.6, rng.integers(0, jobs, gpus), rng.choice([-1, -2], gpus))
        start = rng.integers(0, 30, jobs).astype(float)
        type_of = rng.integers(0, types, jobs)
        runtimes = rng.integers(1, 20, (jobs, types)).astype(float)
        busy = gpu_job >= 0
        want = np.full(gpus, now)
        j = gpu_job[busy]
        want[busy] = np.maximum(now, start[j] + runtimes[j, type_of[j]])
        assert np.array_equal(kernels.available_at(now, gpu_job, start, type_of, runtimes), want), case


def test_row_bests_pick_what_a_full_scan_picks():
    """Rescoring columns one at a time and keeping each row's best cell picks :func:`kernels.pick`'s pair."""
    rng = np.random.default_rng(9)
    for case in range(300):
        n, width = int(rng.integers(1, 10)), int(rng.integers(1, 10))
        tard = rng.integers(0, 3, (n, width)).astype(float)
        jct = rng.integers(0, 3, (n, width)).astype(float)
        alive = rng.random(n) < 0.8
        best = (np.full(n, -1, dtype=np.int64), np.full(n, INF), np.full(n, INF))
        kernels.rescan_rows(tard, jct, alive, width, *best)
        for _ in range(6):
            c = int(rng.integers(0, width))
            tard[:, c] = rng.integers(0, 4, n)
            jct[:, c] = rng.integers(0, 4, n)
            out = rng.random(n) < 0.2
            tard[out, c], jct[out, c] = INF, INF
            kernels.refresh_column(c, tard, jct, alive, width, *best)
            masked_t, masked_j = np.where(alive[:, None], tard, INF), np.where(alive[:, None], jct, INF)
            live = np.flatnonzero(alive).astype(np.int64)
            got = kernels.pick_live(live, len(live), *best)
            assert tuple(got) == tuple(kernels.pick(masked_t, masked_j, alive, width)), case


def random_decision(rng):
    """A random greedy input: jobs with ties and deadlines on 1-2 types, GPU groups of 1-6 GPUs."""
    from policies.hydra import Jobs

    n, types = int(rng.integers(1, 25)), int(rng.integers(1, 3))
    base = rng.integers(1, 8, n).astype(float)
    p = np.stack([base * (1.0 + k * float(rng.integers(0, 3))) for k in range(types)], axis=1)
    two_clocks = rng.random() < 0.3
    due_p = p * rng.choice([1.0, 1.5], (n, types)) if two_clocks else p
    submit = rng.integers(0, 5, n).astype(float)
    deadline = np.where(rng.random(n) < rng.random(), 5.0 + rng.integers(0, 25, n), INF)
    per_type = [Jobs(p[:, k], submit, deadline, due_p[:, k] if two_clocks else None) for k in range(types)]
    m = int(rng.integers(1, 6))
    g_type = rng.integers(0, types, m).astype(np.int64)
    g_t0 = 5.0 + rng.integers(0, 4, m) * float(rng.choice([0.0, 1.0, 3.0]))
    g_t0_due = g_t0 + (rng.integers(0, 3, m) if two_clocks else 0.0)
    g_count = np.where(rng.random(m) < 0.5, rng.integers(1, 7, m), 1).astype(np.int64)
    feasible = rng.random((n, types)) < 0.9
    rows = rng.permutation(n).astype(np.int64)
    row_p = np.ascontiguousarray(p[rows].T)
    row_due_p = np.ascontiguousarray(due_p[rows].T)
    row_ok = np.ascontiguousarray(feasible[rows].T)
    return rows, row_p, row_due_p, row_ok, per_type, (g_type, g_t0, g_t0_due, g_count)


def test_lazy_scores_give_the_eager_assignment():
    """Held-back and bounded scores (``assign(lazy=True)``) give the plan, queue for queue, and the
    work count of scoring every pair when the queue changes, also when the budget runs out midway."""
    from policies.hydra import QueueOrderer, assign

    rng = np.random.default_rng(10)
    lazy_picks = 0
    for case in range(300):
        decision = random_decision(rng)
        work = int(rng.choice([0, 5, 50, 100_000]))
        plans = []
        for lazy in (False, True):
            orderer = QueueOrderer(bnb=True, work=work)
            orderer.start_decision()
            plan = assign(*decision, orderer, lazy=lazy)
            queues = {c: plan.queue(c) for c in range(plan.used) if plan.length[c]}
            plans.append((queues, plan.parent[:plan.used].tolist(), plan.tardiness[:plan.used].tolist(),
                          orderer.pairs, orderer.search_work))
        assert plans[0] == plans[1], case
        lazy_picks += plan.used > plan.m
    assert lazy_picks > 100  # groups split off: held-back scores were exercised


def test_stale_row_bests_pick_what_a_full_scan_picks():
    """Rows whose best cell got costlier kept as stale lower bounds (:func:`kernels.update_best_stale`)
    and rescanned only when least (:func:`kernels.pick_fresh`) pick :func:`kernels.pick`'s pair, and
    give the best cells a rescan of every row gives; cells change up and down, with ties and inf."""
    rng = np.random.default_rng(11)
    stale_picks = 0
    for case in range(400):
        n, width = int(rng.integers(1, 12)), int(rng.integers(1, 10))
        tard = rng.integers(0, 3, (n, width)).astype(float)
        jct = rng.integers(0, 3, (n, width)).astype(float)
        alive = rng.random(n) < 0.9
        best = (np.full(n, -1, dtype=np.int64), np.full(n, INF), np.full(n, INF))
        stale = np.zeros(n, dtype=bool)
        kernels.rescan_rows(tard, jct, alive, width, *best)
        for _ in range(8):
            c = int(rng.integers(0, width))
            live = np.flatnonzero(alive).astype(np.int64)
            tard[live, c] = rng.integers(0, 4, len(live))
            jct[live, c] = rng.integers(0, 4, len(live))
            out = live[rng.random(len(live)) < 0.2]
            tard[out, c], jct[out, c] = INF, INF
            for r in live:
                kernels.update_best_stale(r, c, tard, jct, *best, stale)
            stale_picks += int(stale[live].any())
            masked_t, masked_j = np.where(alive[:, None], tard, INF), np.where(alive[:, None], jct, INF)
            got = kernels.pick_fresh(live, len(live), tard, jct, width, *best, stale)
            assert tuple(got) == tuple(kernels.pick(masked_t, masked_j, alive, width)), case
            fresh = live[~stale[live]]  # rows not stale hold their true best cell
            want = (np.full(n, -1, dtype=np.int64), np.full(n, INF), np.full(n, INF))
            kernels.rescan_rows(tard, jct, alive, width, *want)
            for a, b in zip(best, want):
                assert np.array_equal(a[fresh], b[fresh]), case
            if len(live) and rng.random() < 0.5:  # the picked row leaves, as in add_job
                r = int(got[0]) if got[0] >= 0 else int(live[0])
                alive[r] = False
    assert stale_picks > 100


def test_fill_lazy_keeps_row_bests_as_update_best_stale_does():
    """:func:`kernels.fill_lazy` carries a written-out copy of :func:`kernels.update_best_stale`
    (for speed): driven on random queues with stale rows, ties and infeasible pairs, the row bests
    and stale flags it leaves are those ``update_best_stale`` gives on the cells it wrote."""
    rng = np.random.default_rng(13)
    went_stale = recovered = 0
    for case in range(400):
        n, width, types = int(rng.integers(1, 10)), int(rng.integers(1, 5)), int(rng.integers(1, 3))
        row_p = rng.integers(0, 4, (types, n)).astype(float)
        row_due_p = row_p * rng.choice([1.0, 1.5])
        row_ok = rng.random((types, n)) < 0.85
        row_submit = rng.integers(0, 3, n).astype(float)
        row_deadline = np.where(rng.random(n) < 0.5, rng.integers(0, 12, n).astype(float), INF)
        g_type = rng.integers(0, types, width).astype(np.int64)
        g_t0 = rng.integers(0, 4, width).astype(float)
        g_t0_due = g_t0 + rng.integers(0, 2, width)
        g_len = rng.integers(1, n + 1, width).astype(np.int64)
        g_slot = np.arange(width, dtype=np.int64)
        seqs = np.stack([rng.permutation(n) for _ in range(width)]).astype(np.int64)
        tard = rng.integers(0, 4, (n, width)).astype(float)
        jct = rng.integers(0, 30, (n, width)).astype(float)
        alive = rng.random(n) < 0.9
        live = np.flatnonzero(alive).astype(np.int64)
        counters = np.zeros(5, dtype=np.int64)
        counters[kernels.LIVE] = len(live)
        best = (np.full(n, -1, dtype=np.int64), np.full(n, INF), np.full(n, INF))
        kernels.rescan_rows(tard, jct, alive, width, *best)
        stale = rng.random(n) < 0.3  # some rows already hold a stale bound
        for _ in range(4):
            c = int(rng.integers(0, width))
            before = stale.copy()
            want = tuple(a.copy() for a in best) + (stale.copy(),)
            code = np.zeros((n, width), dtype=np.int8)
            kernels.fill_lazy(c, tard, jct, code, live, row_p, row_ok, row_submit, row_deadline, g_type, g_t0,
                              g_len, g_slot, seqs, counters, row_due_p, g_t0_due, *best, live, stale)
            for r in live:
                kernels.update_best_stale(r, c, tard, jct, *want)
            for got, expected in zip((*best, stale), want):
                assert np.array_equal(got, expected), case
            went_stale += int((stale & ~before).sum())
            recovered += int((before & ~stale).sum())
    assert went_stale > 100 and recovered > 100  # both branches of the copy exercised


def test_new_decision_arrays_and_lazy_flag_equal_the_numpy_ones():
    """:func:`kernels.new_decision` makes the arrays ``assign`` made with numpy, and its LAZY flag is
    the former numpy test (NaN-propagating ``min``/``max``, Python's ``min`` of the two clocks)."""
    rng = np.random.default_rng(12)
    odd = np.array([np.nan, -np.inf, np.inf, -1.0])
    for case in range(600):
        n, m, types = int(rng.integers(1, 6)), int(rng.integers(0, 5)), int(rng.integers(1, 3))
        jobs = 8
        submit = rng.integers(0, 5, jobs).astype(float)
        deadline = np.where(rng.random(jobs) < 0.5, np.inf, rng.integers(0, 20, jobs).astype(float))
        rows = rng.choice(jobs, n, replace=False).astype(np.int64)
        row_p = rng.integers(0, 9, (types, n)).astype(float)
        row_due_p = row_p + rng.integers(0, 3, (types, n))
        g_t0 = 4.0 + rng.integers(0, 3, m)
        g_t0_due = g_t0 + rng.integers(0, 2, m)
        for arr in (submit, row_p, row_due_p, g_t0, g_t0_due):  # now and then a NaN, inf or negative value
            if arr.size and rng.random() < 0.15:
                arr.flat[int(rng.integers(0, arr.size))] = rng.choice(odd)
        given = (rng.integers(0, types, m).astype(np.int64), g_t0, g_t0_due, rng.integers(1, 4, m).astype(np.int64))
        lazy = bool(rng.random() < 0.9)
        out = kernels.new_decision(rows, row_p, row_due_p, submit, deadline, *given, lazy)
        row_submit = submit[rows]
        want = lazy and m > 0 and bool(min(g_t0[:m].min(), g_t0_due[:m].min()) >= row_submit.max()
                                       and row_p.min() >= 0.0 and row_due_p.min() >= 0.0
                                       and np.isfinite(row_submit).all())
        counters = out[16]
        assert counters.tolist() == [m, 0, 0, int(want), n], case
        width = m + n
        assert np.array_equal(out[4], row_submit, equal_nan=True) and np.array_equal(out[5], deadline[rows]), case
        for got, value in zip(out[6:10], given):
            assert np.array_equal(got[:m], value, equal_nan=True) and not got[m:].any(), case
        assert out[0].shape == (n, width) and np.isinf(out[0]).all() and np.isinf(out[1]).all(), case
        assert (out[12] == -1).all() and (out[13] == -1).all() and out[17].tolist() == [-1] * n, case
        assert out[21].tolist() == list(range(n)) and not out[20].any() and not out[22].any(), case

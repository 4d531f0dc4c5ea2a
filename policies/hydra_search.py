"""Hydra's branch-and-bound search compiled (numba), bit-identical to the Python search.

Why: on an overloaded cluster most of Hydra's decision time is the best-first search of
:func:`policies.hydra.branch_and_bound` (its nodes, the SRTF completion of each state and the
dominance checks), interpreter overhead on a few floats per step. :func:`search` runs the same
search on per-SRTF-position arrays: the same IEEE operations in the same order, the same memo of
completions and the same dominance dict (keyed by both clocks' end times and the remaining
positions as a bitmask, so a queue of at most :data:`MAX_JOBS` jobs), and a heap with the same
total order ((tardiness, JCT), then the push counter), so it pops the same nodes and returns the
same order, cost and node count. Anything else (a longer queue, a wall-clock stop, non-finite
run times) stays with the Python search.

A node is stored once, at the index of its push counter (the root is 0): its parent, its last
position, both clocks' end times, the prefix's tardiness and JCT, its remaining positions and its
heap key. The best order is rebuilt from the parents at the end.
"""

from __future__ import annotations

import numpy as np
from numba import njit, types
from numba.typed import Dict

MAX_JOBS = 63  # remaining positions are an int64 bitmask

_KEY = types.Tuple((types.float64, types.float64, types.int64))
_DONE = types.UniTuple(types.float64, 3)
_COST = types.UniTuple(types.float64, 2)


@njit(cache=True)
def _before(ft, fj, a, b):
    """Heap order of nodes a and b: ((tardiness, JCT), counter) compared as Python tuples."""
    if ft[a] != ft[b]:
        return ft[a] < ft[b]
    if fj[a] != fj[b]:
        return fj[a] < fj[b]
    return a < b


@njit(cache=True)
def _push(heap, size, k, ft, fj):
    i = size
    heap[i] = k
    while i > 0:
        up = (i - 1) >> 1
        if _before(ft, fj, heap[i], heap[up]):
            heap[i], heap[up] = heap[up], heap[i]
            i = up
        else:
            break


@njit(cache=True)
def _pop(heap, size, ft, fj):
    """Removes and returns the first node of ``heap[:size]`` (the caller shrinks size by one)."""
    top = heap[0]
    size -= 1
    heap[0] = heap[size]
    i = 0
    while True:
        left = 2 * i + 1
        if left >= size:
            break
        child = left
        if left + 1 < size and _before(ft, fj, heap[left + 1], heap[left]):
            child = left + 1
        if _before(ft, fj, heap[child], heap[i]):
            heap[i], heap[child] = heap[child], heap[i]
            i = child
        else:
            break
    return top


@njit(cache=True)
def _grow_f(a):
    b = np.empty(2 * a.size, a.dtype)
    b[:a.size] = a
    return b


@njit(cache=True)
def _grow_i(a):
    b = np.empty(2 * a.size, a.dtype)
    b[:a.size] = a
    return b


@njit(cache=True)
def _completion(start, start_due, rest, n, p, due_p, submit, due):
    """:func:`policies.hydra.branch_and_bound`'s completion(): positions ``rest`` in order."""
    t, t_due, tard, jct, floor = start, start_due, 0.0, 0.0, 0.0
    for x in range(n):
        if (rest >> x) & 1:
            t += p[x]
            t_due += due_p[x]
            jct += t - submit[x]
            if t_due > due[x]:
                tard += t_due - due[x]
                if start_due + due_p[x] > due[x]:
                    floor += start_due + due_p[x] - due[x]
    return tard, jct, floor


@njit(cache=True)
def search(p, due_p, submit, due, free, t0, t0_due, limited, max_nodes, best_t, best_j):
    """The search over SRTF positions 0..n-1 (``free``: deadline-free), from the incumbent cost
    (best_t, best_j). Returns (improved, best_t, best_j, order of positions when improved, nodes,
    stopped by the node limit)."""
    n = p.size
    cap = 256
    parent = np.empty(cap, np.int64)
    last = np.empty(cap, np.int64)
    rest_of = np.empty(cap, np.int64)
    t_of = np.empty(cap)
    tdue_of = np.empty(cap)
    tard_of = np.empty(cap)
    jct_of = np.empty(cap)
    ft = np.empty(cap)
    fj = np.empty(cap)
    heap = np.empty(cap, np.int64)
    parent[0], last[0], rest_of[0] = -1, -1, (np.int64(1) << n) - 1
    t_of[0], tdue_of[0], tard_of[0], jct_of[0], ft[0], fj[0] = t0, t0_due, 0.0, 0.0, 0.0, 0.0
    heap[0] = 0
    size = 1
    counter = 0
    seen = Dict.empty(key_type=_KEY, value_type=_DONE)
    cheapest = Dict.empty(key_type=_KEY, value_type=_COST)
    nodes = 0
    stopped = False
    improved = False
    best_node, best_r, best_rest = -1, -1, np.int64(0)
    while size > 0:
        if limited and nodes >= max_nodes:
            stopped = True
            break
        k = _pop(heap, size, ft, fj)
        size -= 1
        nodes += 1
        rest = rest_of[k]
        t_end, t_end_due, tard, jct = t_of[k], tdue_of[k], tard_of[k], jct_of[k]
        first_free = -1
        for r in range(n):
            if (rest >> r) & 1 and free[r]:
                first_free = r
                break
        for r in range(n):
            if not (rest >> r) & 1:
                continue
            if free[r] and r != first_free:
                continue
            t = t_end + p[r]
            t_due = t_end_due + due_p[r]
            c_tard = tard + (t_due - due[r] if t_due > due[r] else 0.0)
            c_jct = jct + t - submit[r]
            c_rest = rest & ~(np.int64(1) << r)
            key = (t, t_due, c_rest)
            if key in seen:
                done = seen[key]
            else:
                done = _completion(t, t_due, c_rest, n, p, due_p, submit, due)
                seen[key] = done
            r_tard, r_jct, r_floor = done
            full_t = c_tard + r_tard
            full_j = c_jct + r_jct
            if full_t < best_t or (full_t == best_t and full_j < best_j):
                best_t, best_j = full_t, full_j
                improved = True
                best_node, best_r, best_rest = k, r, c_rest
            if r_tard == 0.0 or c_rest == 0:
                continue
            low_t = c_tard + r_floor
            low_j = c_jct + r_jct
            if not (low_t < best_t or (low_t == best_t and low_j < best_j)):
                continue
            if key in cheapest:
                rival = cheapest[key]
                if rival[0] < c_tard or (rival[0] == c_tard and rival[1] <= c_jct):
                    continue
            cheapest[key] = (c_tard, c_jct)
            counter += 1
            if counter >= parent.size:
                parent, last, rest_of = _grow_i(parent), _grow_i(last), _grow_i(rest_of)
                t_of, tdue_of, tard_of, jct_of = _grow_f(t_of), _grow_f(tdue_of), _grow_f(tard_of), _grow_f(jct_of)
                ft, fj = _grow_f(ft), _grow_f(fj)
            if size >= heap.size:
                heap = _grow_i(heap)
            parent[counter], last[counter], rest_of[counter] = k, r, c_rest
            t_of[counter], tdue_of[counter], tard_of[counter], jct_of[counter] = t, t_due, c_tard, c_jct
            ft[counter], fj[counter] = full_t, full_j
            _push(heap, size, counter, ft, fj)
            size += 1
    order = np.empty(n if improved else 0, np.int64)
    if improved:
        depth = 0
        k = best_node
        while parent[k] >= 0:
            depth += 1
            k = parent[k]
        k = best_node
        i = depth - 1
        while parent[k] >= 0:
            order[i] = last[k]
            i -= 1
            k = parent[k]
        order[depth] = best_r
        i = depth + 1
        for x in range(n):
            if (best_rest >> x) & 1:
                order[i] = x
                i += 1
    return improved, best_t, best_j, order, nodes, stopped

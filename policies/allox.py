"""AlloX (Le et al., EuroSys'20): scheduling on interchangeable devices as a min-cost matching.

Why: AlloX is one of the two policies of the study (../shared/research/policies.md §1). If machine
i runs jobs in order, the job k-th from the end delays itself and the k-1 jobs behind it, so it
contributes k*P[i][j] to the total completion time; a machine still busy until avail(i) adds
D[i][j] = max(0, avail(i) - arrival(j)) once. Assigning jobs to (machine, position) slots with
cost D + k*P (Hungarian method, ``scipy.optimize.linear_sum_assignment``) minimises
sum(completion - arrival) exactly. P is the *predicted* run time.

Machines are single GPUs. Exact size reductions (no approximation):

* machines of one type with equal avail (e.g. all idle GPUs of a type) form a group of m
  interchangeable machines; a group needs only ceil(n/m) positions per machine, since an optimal
  plan balances identical machines;
* per type, only the n earliest-available machines can be used by an optimal plan of n jobs.

Online (default): at every scheduling event re-plan and start only the first job of each idle
GPU's planned queue; the rest is provisional. Offline (``mode=offline``): planned queues are
installed and never re-ordered; jobs arriving later are matched with each GPU's avail = the
predicted end of its installed queue (for the all-at-t=0 Hydra cases this is a single plan).

Candidates (bounding the matrix): ``window`` jobs (AlloX's own default 50; ``window=all`` for the
exact matching over every waiting job), picked round-robin over GPU types, each time the
shortest-on-that-type job not yet picked (AlloX's jobSubSet). Fairness ``alpha`` in (0, 1]:
before the window, only jobs of the ceil(alpha * |users|) users with the lowest fairness score
enter (score = sum over the user's running jobs of GPUs / pool size of the type, scaled by
fastest / actual predicted run time: progress-based share); for traces without users, alpha keeps
the ceil(alpha * |waiting|) longest-waiting jobs. alpha = 1 (default) is pure performance.

Gang jobs: see :mod:`policies.queues` (planned on one lead GPU, only on types whose pool is large
enough; they start when n GPUs of the type are free, holding the type meanwhile). A job is never
planned on a type it cannot run on (a predicted time of +inf: the trace says so).
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit
from scipy.optimize import linear_sum_assignment
from sortedcontainers import SortedList

from policies.base import Placement, Policy
from policies.candidates import first_by, round_robin_pick
from policies.options import count_or_all, number, planning_mode
from policies.queues import PlannedQueues

INFEASIBLE = 1e30  # cost of a slot a job cannot use (gang job larger than the type's pool)
SMALL_MATRIX_ROWS = 256  # up to this many slots, every position is offered at once (no first guess)


def allox_plan(P: np.ndarray, arrival: np.ndarray, feasible: np.ndarray, machine_type: np.ndarray,
               machine_avail: np.ndarray) -> list[list[int]]:
    """Optimal plan for n jobs on M machines: per machine, the job positions (0..n-1) in run order.

    P[j, t]: predicted run time of job j on type t; arrival[j]; feasible[j, t]: job j may run on t;
    machine_type[i], machine_avail[i]: each machine's type index and when it is free.
    """
    queues: list[list[int]] = [[] for _ in range(len(machine_type))]
    for i, queue in plan_queues(P, arrival, feasible, machine_type, machine_avail).items():
        queues[i] = queue
    return queues


def plan_queues(P: np.ndarray, arrival: np.ndarray, feasible: np.ndarray, machine_type: np.ndarray,
                machine_avail: np.ndarray, stats: dict | None = None) -> dict[int, list[int]]:
    """:func:`allox_plan` as {machine: non-empty queue}. Within a group of interchangeable machines
    the longest queues go to the machines listed first (callers list idle machines first).
    ``stats["cells"]`` gets the number of cost-matrix cells solved (the decision's work).

    Positions are added lazily: the matching is first solved with the positions a cheap guess
    expects each machine to use (plus a margin), and a group whose machine fills all of its
    positions gets twice as many, until none does. The result is the full matching's optimum: a
    slot's cost D + k*P never falls as k grows (P >= 0), so when every machine leaves its last
    offered position empty, that slot's dual price is 0 and no slot further back can improve the
    matching (LP complementary slackness). Without the cap, n jobs on M machines of distinct
    free times need n*M rows; with it, about n + M. Among matchings of equal cost (same-type GPUs
    swapping equally long queues) the one found depends on the matrix, so on the guess.
    """
    n = P.shape[0]
    if n == 0:
        return {}
    # groups of interchangeable machines (same type and avail), the n earliest of each type, in
    # (type, avail, id) order: group g holds machines[start[g]:start[g] + size[g]]
    order = np.lexsort((np.arange(len(machine_type)), machine_avail, machine_type))
    kinds = machine_type[order]
    keep = np.arange(len(order)) - np.searchsorted(kinds, kinds) < n  # place among its type < n
    machines, kinds, avails = order[keep], kinds[keep], machine_avail[order[keep]]
    start = _run_starts(kinds, avails)
    size = _run_lengths(start, len(machines))
    group_type, group_avail = kinds[start].astype(np.int64), avails[start]
    needed = -(-n // size)  # ceil(n / size): enough positions, always
    if int(np.dot(needed, size)) <= SMALL_MATRIX_ROWS:
        caps = needed.copy()  # small enough to solve whole at once
    else:
        guess = _first_guess(P, feasible, group_type, group_avail, size)
        caps = np.minimum(needed, np.ceil(1.25 * guess).astype(np.int64) + 1)
    cells = 0
    while True:
        (group, copy, k, job), cells_solved = _match(P, arrival, feasible, group_type, group_avail, size, caps)
        cells += cells_solved
        full = np.unique(group[k == caps[group]])
        full = full[caps[full] < needed[full]]
        if not len(full):
            break
        caps[full] = np.minimum(needed[full], 2 * caps[full])  # only groups that used their last position
    if stats is not None:
        stats["cells"] = cells
    if not len(job):
        return {}
    # queues per (group, member), largest k (first to run) first
    by_slot = np.lexsort((-k, copy, group))
    group, copy, job = group[by_slot], copy[by_slot], job[by_slot]
    cut = _run_starts(group, copy)
    length = _run_lengths(cut, len(job))
    jobs = job.tolist()
    queues = [jobs[a:a + m] for a, m in zip(cut.tolist(), length.tolist())]
    # within a group the longest queues go to the machines listed first (ties: member order)
    unit_group = group[cut]
    rank_order = np.lexsort((copy[cut], -length, unit_group))
    rank = np.empty(len(cut), dtype=np.int64)
    rank[rank_order] = np.arange(len(cut)) - np.searchsorted(unit_group[rank_order], unit_group[rank_order])
    target = machines[start[unit_group] + rank]
    target = target.tolist()
    return {target[u]: queues[u] for u in rank_order.tolist()}


def _run_lengths(starts: np.ndarray, total: int) -> np.ndarray:
    """The lengths of the runs that begin at ``starts`` in a sequence of ``total`` items."""
    lengths = np.empty(len(starts), dtype=np.int64)
    lengths[:-1] = starts[1:] - starts[:-1]
    lengths[-1] = total - starts[-1]
    return lengths


def _run_starts(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Where each run of equal (a, b) pairs begins (a non-empty sequence)."""
    change = np.empty(len(a), dtype=bool)
    change[0] = True
    np.not_equal(a[1:], a[:-1], out=change[1:])
    change[1:] |= b[1:] != b[:-1]
    return np.flatnonzero(change)


def _first_guess(P: np.ndarray, feasible: np.ndarray, group_type: np.ndarray, group_avail: np.ndarray,
                 size: np.ndarray) -> np.ndarray:
    """Per group, a guess at how many positions the matching uses on its machines: the larger of
    the longest queue of a greedy plan (shortest jobs first, each on the machine where it would
    finish first) and a share of the jobs in proportion to the type's speed (1 / median time).
    The guess changes the work, and which of several equal-cost plans is found; never the cost."""
    group_of = np.repeat(np.arange(len(size)), size)
    times = np.where(feasible, P, np.inf)
    order = np.argsort(times.min(axis=1), kind="stable")
    greedy = _greedy_longest(times[:, group_type[group_of]], group_avail[group_of].astype(np.float64), order,
                             group_of, len(size))
    type_speed = {t: 1.0 / _median(P[feasible[:, t], t]) if feasible[:, t].any() else 0.0
                  for t in set(group_type.tolist())}
    speed = np.array([type_speed[t] for t in group_type.tolist()])
    share = P.shape[0] * speed / max(float(np.dot(speed, size)), 1e-300)
    guess = np.maximum(greedy, share)
    # as np.nan_to_num(guess, nan=n, posinf=n) (zero times), without its overhead
    guess[np.isnan(guess) | (guess == np.inf)] = P.shape[0]
    guess[guess == -np.inf] = np.finfo(guess.dtype).min
    return guess


@njit(cache=True)
def _slot_costs(P: np.ndarray, arrival: np.ndarray, feasible: np.ndarray, t_row: np.ndarray, avail_row: np.ndarray,
                k_row: np.ndarray) -> np.ndarray:
    """The cost matrix, slots by jobs: D + k*P = max(0, avail - arrival) + k * P[job, type], or
    INFEASIBLE where the job cannot run on the slot's type — numpy's arithmetic, element by element
    (np.maximum(0, x) keeps a NaN), compiled: built at every decision."""
    cost = np.empty((len(t_row), len(arrival)))
    for r in range(len(t_row)):
        t, k = t_row[r], float(k_row[r])
        for j in range(len(arrival)):
            if not feasible[j, t]:
                cost[r, j] = INFEASIBLE
                continue
            late = avail_row[r] - arrival[j]
            cost[r, j] = (0.0 if 0.0 >= late else late) + k * P[j, t]
    return cost


@njit(cache=True)
def _greedy_longest(machine_times: np.ndarray, finish: np.ndarray, order: np.ndarray, group_of: np.ndarray,
                    groups: int) -> np.ndarray:
    """The greedy plan of :func:`_first_guess`: jobs in ``order``, each on the machine where it
    would finish first (the first such), if any; per group of machines (``group_of``), the most
    jobs one of them got. Compiled: a step per job, at every decision."""
    length = np.zeros(len(finish), dtype=np.int64)
    longest = np.zeros(groups, dtype=np.int64)
    if len(finish) == 0:
        return longest
    for j in order:
        best, at = finish[0] + machine_times[j, 0], 0
        for i in range(1, len(finish)):
            end = finish[i] + machine_times[j, i]
            if end < best:
                best, at = end, i
        if best < np.inf:
            finish[at] = best
            length[at] += 1
    for i in range(len(finish)):
        longest[group_of[i]] = max(longest[group_of[i]], length[i])
    return longest


def _median(values: np.ndarray) -> np.floating:
    """``np.median`` of a non-empty 1-D float array, as numpy computes it (the middle value, or the
    mean of the two middle ones), by a sort: a window's few values, without np.median's overhead.
    With a NaN, or a zero in the middle (a sort and numpy's partition may place -0.0 and 0.0
    differently, and 1 / median differs), numpy's own."""
    ordered = np.sort(values)
    half = len(ordered) // 2
    middle = ordered[half] if len(ordered) % 2 else (ordered[half - 1] + ordered[half]) / 2
    if np.isnan(ordered[-1]) or middle == 0 or ordered[half] == 0:
        return np.median(values)
    return middle


def _match(P: np.ndarray, arrival: np.ndarray, feasible: np.ndarray, group_type: np.ndarray,
           group_avail: np.ndarray, size: np.ndarray, caps: np.ndarray
           ) -> tuple[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray], int]:
    """The min-cost matching with at most ``caps[g]`` positions per machine of group g: per
    feasibly placed job its group, member, position from the end and index; and the cost
    matrix's size."""
    per_group = size * caps
    group_of_row = np.repeat(np.arange(len(size)), per_group)
    first = np.cumsum(per_group) - per_group  # each group's first row
    offset = np.arange(len(group_of_row)) - first[group_of_row]
    k_of_row = offset // size[group_of_row] + 1   # slot position from the end
    copy_of_row = offset % size[group_of_row]     # which member of the group
    cost = _slot_costs(P, arrival, feasible, group_type[group_of_row], group_avail[group_of_row], k_of_row)
    rows, cols = linear_sum_assignment(cost)
    placed = cost[rows, cols] < INFEASIBLE  # a job with no feasible slot (cannot happen while some type fits it)
    rows, cols = rows[placed], cols[placed]
    return (group_of_row[rows], copy_of_row[rows], k_of_row[rows], cols), cost.size


@njit(cache=True)
def earliest_gpus(ids: np.ndarray, bounds: np.ndarray, gpu_job: np.ndarray, start: np.ndarray, predicted: np.ndarray,
                  type_of: np.ndarray, now: float, n: int) -> tuple[np.ndarray, np.ndarray]:
    """:meth:`AlloxPolicy._earliest_gpus` over the GPUs of each type (``ids[bounds[t]:bounds[t + 1]]``,
    by id): per type its first n idle GPUs, and if fewer are idle the busy ones free first (by
    when, then id; np.maximum(now, start + predicted) as numpy computes it), listed by id; every
    type's idle GPUs first. Compiled: it runs at every decision, over every GPU."""
    idle = np.empty(len(ids), np.int64)
    busy = np.empty(len(ids), np.int64)
    busy_free = np.empty(len(ids))
    idle_count = busy_count = 0
    for t in range(len(bounds) - 1):
        lo, hi = bounds[t], bounds[t + 1]
        idle_here = 0
        for i in range(lo, hi):
            if gpu_job[ids[i]] < 0:
                if idle_here < n:
                    idle[idle_count] = ids[i]
                    idle_count += 1
                idle_here += 1
        if idle_here >= n:
            continue
        taken = np.empty(hi - lo - idle_here, np.int64)
        free = np.empty(len(taken))
        c = 0
        for i in range(lo, hi):
            job = gpu_job[ids[i]]
            if job >= 0:
                taken[c] = ids[i]
                free[c] = np.maximum(now, start[job] + predicted[job, type_of[job]])
                c += 1
        keep = np.sort(np.argsort(free, kind="mergesort")[:n - idle_here])  # by (free, id), listed by id
        for i in keep:
            busy[busy_count] = taken[i]
            busy_free[busy_count] = free[i]
            busy_count += 1
    order = np.concatenate((idle[:idle_count], busy[:busy_count]))
    when = np.concatenate((np.full(idle_count, now), busy_free[:busy_count]))
    return order, when


class AlloxPolicy(Policy):
    name = "allox"

    def __init__(self, window: str | int = 50, alpha: str | float = 1.0, mode: str = "online"):
        self.window = count_or_all("window", window)
        self.alpha = number("alpha", alpha, 0.0, 1.0, low_open=True)
        self.mode = planning_mode(mode)
        self._queues = PlannedQueues()
        self._gpus_of_type: tuple | None = None  # (the run's per-GPU type array, GPU ids by type, bounds), made once
        self.max_work = 0  # the largest cost matrix (cells) one decision solved
        # online, with a window and no fairness filter: the waiting jobs in each type's order, kept
        # as they arrive and start (the window's candidates without sorting every waiting job)
        self._orders: WaitingOrders | None = None
        self._kept = self.mode == "online" and self.window is not None and self.alpha >= 1.0

    def describe(self) -> dict:
        return {"name": self.name, "window": self.window or "all", "alpha": self.alpha, "mode": self.mode,
                "max_work_per_decision": self.max_work}

    # -- candidate selection -----------------------------------------------------------------
    def on_arrival(self, view, jobs: list[int]) -> None:
        if self._kept:
            self._synced_orders(view, jobs).add(view, jobs)

    def _synced_orders(self, view, arrived: list[int] = ()) -> WaitingOrders:
        """This run's orders, holding exactly the waiting jobs but those ``arrived`` (not added yet):
        made anew for a new run, or should a job have left the waiting set unseen."""
        orders = self._orders
        if orders is None or orders.submit is not view.submit or len(orders) + len(arrived) != len(view.waiting):
            orders = self._orders = WaitingOrders(view)
            new = set(arrived)
            orders.add(view, [j for j in view.waiting if j not in new])
        return orders

    def _online_candidates(self, view) -> list[int]:
        """What ``_window(_fairness_filter(waiting))`` picks, from the kept orders when they apply."""
        if not self._kept or len(view.waiting) <= self.window:
            return self._window(view, self._fairness_filter(view, list(view.waiting)))
        orders = self._synced_orders(view)
        by_type = [orders.first(k, self.window) for k in range(len(view.gpu_types))]
        return sorted(round_robin_pick(by_type, self.window))

    def _fairness_filter(self, view, jobs: list[int]) -> list[int]:
        if self.alpha >= 1.0:
            return jobs
        users = {view.users[j] for j in jobs}
        if users == {""}:  # no users in the trace: alpha keeps the longest-waiting jobs
            return jobs[:max(1, math.ceil(self.alpha * len(jobs)))]
        score = dict.fromkeys(users, 0.0)
        for j, (_, k) in view.running.items():
            u = view.users[j]
            if u in score:
                share = view.num_gpus[j] / view.total_by_type[k]
                score[u] += share * view.predicted[j].min() / view.predicted[j, k]
        keep = set(sorted(users, key=lambda u: (score[u], u))[:max(1, math.ceil(self.alpha * len(users)))])
        return [j for j in jobs if view.users[j] in keep]

    def _window(self, view, jobs: list[int]) -> list[int]:
        if self.window is None or len(jobs) <= self.window:
            return jobs
        idx = np.asarray(jobs)
        by_type = [first_by(idx, view.predicted[idx, k], self.window) for k in range(len(view.gpu_types))]
        return sorted(round_robin_pick(by_type, self.window))

    def _earliest_gpus(self, view, n: int) -> tuple[np.ndarray, np.ndarray]:
        """Per type the n GPUs a plan of n jobs can use (the earliest free; idle before busy, then
        by id), idle ones first, with when each is free: what :func:`plan_queues` keeps of all
        GPUs listed idle first, without computing every busy GPU's free time."""
        if self._gpus_of_type is None or self._gpus_of_type[0] is not view.gpu_type:  # a new run
            by_type = [np.flatnonzero(view.gpu_type == k) for k in range(len(view.gpu_types))]
            bounds = np.cumsum([0] + [len(ids) for ids in by_type]).astype(np.int64)
            self._gpus_of_type = (view.gpu_type, np.concatenate(by_type).astype(np.int64), bounds)
        _, ids, bounds = self._gpus_of_type
        return earliest_gpus(ids, bounds, view.gpu_job, view.start, view.predicted, view.type_of, float(view.now), n)

    # -- scheduling ----------------------------------------------------------------------------
    def schedule(self, view) -> list[Placement]:
        if self.mode == "online":
            self._queues.clear()
            if not view.free_by_type.any():
                return []  # only idle GPUs' heads start, and the plan is redone at the next event
            candidates = self._online_candidates(view)
            avail = None  # only the GPUs that can take a job are looked at (_earliest_gpus)
        else:
            planned = self._queues.planned_jobs()
            pending = [j for j in view.waiting if j not in planned]
            avail = view.gpu_available_at()
            for g, q in self._queues.queues.items():
                avail[g] += float(view.predicted[q, view.gpu_type[g]].sum())
            candidates = self._window(view, self._fairness_filter(view, pending))
        if candidates:
            idx = np.array(candidates)
            # a type whose pool is too small, or that the trace says the job cannot run on (+inf)
            feasible = (view.num_gpus[idx][:, None] <= view.total_by_type[None, :]) & np.isfinite(view.predicted[idx])
            # idle GPUs listed first: among GPUs free at the same time (a job that overran its
            # prediction is "free now" too) they get the jobs, which then start at once
            if avail is None:
                order, machine_avail = self._earliest_gpus(view, len(idx))
            else:
                order = np.argsort(view.gpu_job >= 0, kind="stable")
                machine_avail = avail[order]
            stats: dict = {}
            plan = plan_queues(view.predicted[idx], view.submit[idx], feasible, view.gpu_type[order], machine_avail,
                               stats)
            self.max_work = max(self.max_work, stats.get("cells", 0))
            online = self.mode == "online"
            for i, positions in plan.items():
                gpu = int(order[i])
                if online and view.gpu_job[gpu] >= 0:
                    continue  # online, only idle GPUs' heads start; the rest is re-planned anyway
                self._queues.extend(gpu, [int(idx[p]) for p in positions])
        started = self._queues.start_heads(view)
        if self._orders is not None:
            self._orders.remove([int(p.job) for p in started])
        return started


class WaitingOrders:
    """The waiting jobs in each GPU type's order — (predicted run time there, job index), the order
    of :func:`policies.candidates.first_by` — kept sorted as jobs arrive and start.

    Why: a window's candidates are the first jobs of each order; sorting every waiting job at every
    decision made a decision's cost grow with the queue. A waiting job's predictions do not change
    while it waits (the engine changes them for a running job it measures, or before a failed job
    is submitted again, an arrival), so its keys are read once, as it arrives."""

    def __init__(self, view) -> None:
        self.submit = view.submit  # the run these orders belong to
        self.orders = [SortedList() for _ in view.gpu_types]
        self.keys: dict[int, list[float]] = {}  # per waiting job, its keys as added

    def __len__(self) -> int:
        return len(self.keys)

    def add(self, view, jobs: list[int]) -> None:
        for job, row in zip(jobs, view.predicted[jobs].tolist()):
            self.remove([job])  # should it be there still (not seen to start)
            self.keys[job] = row
            for order, key in zip(self.orders, row):
                order.add((key, job))

    def remove(self, jobs: list[int]) -> None:
        for job in jobs:
            row = self.keys.pop(job, None)
            if row is not None:
                for order, key in zip(self.orders, row):
                    order.remove((key, job))

    def first(self, k: int, limit: int) -> list[int]:
        """The first ``limit`` waiting jobs in type k's order."""
        return [job for _, job in self.orders[k].islice(0, limit)]

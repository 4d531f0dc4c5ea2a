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
enough; they start when n GPUs of the type are free, holding the type meanwhile).
"""

from __future__ import annotations

import math

import numpy as np
from scipy.optimize import linear_sum_assignment

from policies.base import Placement, Policy
from policies.candidates import first_by, round_robin_pick
from policies.options import choice, count_or_all, number
from policies.queues import PlannedQueues

INFEASIBLE = 1e30  # cost of a slot a job cannot use (gang job larger than the type's pool)


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
    ``stats["cells"]`` gets the size of the cost matrix solved (the decision's work)."""
    n = P.shape[0]
    if n == 0:
        return {}
    # groups of interchangeable machines: (type, avail) -> machine ids, n earliest per type
    groups: dict[tuple[int, float], list[int]] = {}
    for t in np.unique(machine_type):
        ids = np.flatnonzero(machine_type == t)
        ids = ids[np.argsort(machine_avail[ids], kind="stable")][:n]
        for i in ids:
            groups.setdefault((int(t), float(machine_avail[i])), []).append(int(i))
    rows_group, rows_copy, rows_k, blocks = [], [], [], []
    for gid, ((t, avail), members) in enumerate(groups.items()):
        positions = math.ceil(n / len(members))
        rows_k.append(np.repeat(np.arange(1, positions + 1), len(members)))  # slot position from the end
        rows_copy.append(np.tile(np.arange(len(members)), positions))
        rows_group.append(np.full(positions * len(members), gid))
        delay = np.maximum(0.0, avail - arrival)                               # D[i][j]
        cost = delay[None, :] + rows_k[-1][:, None] * P[:, t][None, :]
        cost[:, ~feasible[:, t]] = INFEASIBLE
        blocks.append(cost)
    cost = np.vstack(blocks)
    if stats is not None:
        stats["cells"] = cost.size
    group_of_row, copy_of_row, k_of_row = (np.concatenate(x) for x in (rows_group, rows_copy, rows_k))
    rows, cols = linear_sum_assignment(cost)
    slots: dict[tuple[int, int], list[tuple[int, int]]] = {}
    for r, j in zip(rows, cols):
        if cost[r, j] >= INFEASIBLE:
            continue  # no feasible slot for this job (cannot happen while some type fits it)
        slots.setdefault((int(group_of_row[r]), int(copy_of_row[r])), []).append((int(k_of_row[r]), int(j)))
    by_group: dict[int, list[list[int]]] = {}
    for (gid, _), entries in sorted(slots.items()):
        by_group.setdefault(gid, []).append([j for _, j in sorted(entries, key=lambda s: (-s[0], s[1]))])
    plan: dict[int, list[int]] = {}
    members_of = list(groups.values())
    for gid, queues in by_group.items():  # largest k runs first; longest queues to the first members
        for machine, queue in zip(members_of[gid], sorted(queues, key=len, reverse=True)):
            plan[machine] = queue
    return plan


class AlloxPolicy(Policy):
    name = "allox"

    def __init__(self, window: str | int = 50, alpha: str | float = 1.0, mode: str = "online"):
        self.window = count_or_all("window", window)
        self.alpha = number("alpha", alpha, 0.0, 1.0, low_open=True)
        self.mode = choice("mode", mode, ("online", "offline"))
        self._queues = PlannedQueues()
        self.max_work = 0  # the largest cost matrix (cells) one decision solved

    def describe(self) -> dict:
        return {"name": self.name, "window": self.window or "all", "alpha": self.alpha, "mode": self.mode,
                "max_work_per_decision": self.max_work}

    # -- candidate selection -----------------------------------------------------------------
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

    # -- scheduling ----------------------------------------------------------------------------
    def schedule(self, view) -> list[Placement]:
        state = view.state
        if self.mode == "online":
            self._queues.clear()
            if not view.free_by_type.any():
                return []  # only idle GPUs' heads start, and the plan is redone at the next event
            pending = list(view.waiting)
            avail = view.gpu_available_at()
        else:
            planned = self._queues.planned_jobs()
            pending = [j for j in view.waiting if j not in planned]
            avail = view.gpu_available_at()
            for g, q in self._queues.queues.items():
                avail[g] += float(view.predicted[q, state.gpu_type[g]].sum())
        candidates = self._window(view, self._fairness_filter(view, pending))
        if candidates:
            idx = np.array(candidates)
            feasible = view.num_gpus[idx][:, None] <= view.total_by_type[None, :]
            # idle GPUs listed first: among GPUs free at the same time (a job that overran its
            # prediction is "free now" too) they get the jobs, which then start at once
            order = np.argsort(state.gpu_job >= 0, kind="stable")
            stats: dict = {}
            plan = plan_queues(view.predicted[idx], view.submit[idx], feasible, state.gpu_type[order], avail[order],
                               stats)
            self.max_work = max(self.max_work, stats.get("cells", 0))
            for i, positions in plan.items():
                self._queues.extend(int(order[i]), [int(idx[p]) for p in positions])
        return self._queues.start_heads(view)

"""Hydra (Yang et al., IEEE TC 2023): deadline-aware, efficiency-oriented scheduling on heterogeneous GPUs.

Why: Hydra is the deadline-aware policy of the study (../shared/research/policies.md §2), built
as its authors' simulator does, with its known bug fixed. Design decisions:

* **Queue cost** with absolute times (Σ JCT + 1e20·Σ tardiness, compared as (tardiness, JCT)
  pairs, so no float absorption): Hydra's code carries JCTs as offsets, right only when every job
  is submitted at 0.
* **Ordering a GPU's queue**: SRTF when it violates no deadline (then optimal), else
  branch-and-bound (FixNonDDL) raced against the swap heuristic; the search is compiled
  (:mod:`policies.hydra_search`, bit-identical) where it can be.
* **Budget in search work units** by default (``work=N|all``, :data:`DEFAULT_WORK`), not
  wall-clock time: the count depends on the inputs alone, so the same inputs give bit-identical
  plans on any machine at any load. ``budget_ms`` binds only when asked for; the manifest says
  which bound was in force (``bound``) and how many searches and decisions each cut short.
* **Assignment**: greedy "K-means" over (job, GPU) pairs by absolute queue cost, scored by
  compiled loops (:mod:`policies.hydra_greedy`).
* **Modes**: ``mode=online`` re-plans at every event over a ``window``; ``mode=offline``
  installs whole queues, as Hydra's simulator.
* **Deadline risk** (``deadline_quantile=Q``): a second, Q-quantile clock prices tardiness;
  unset, every decision is unchanged, bit for bit.

Gang jobs: see :mod:`policies.queues`. A job is never assigned to a type it cannot run on (a
predicted time of +inf: the trace says so), as to one whose pool is too small.

Every rule in full (costs, ties, budgets, modes, quantile clocks): docs/scheduling.md, 'Hydra: how a
decision is made'.
"""

from __future__ import annotations

import heapq
import math
import time
from dataclasses import dataclass

import numpy as np

from policies import hydra_greedy as kernels
from policies import hydra_search as search_kernel
from policies.base import IDLE_GPU, Placement, Policy
from policies.options import count_or_all, number, planning_mode, quantile_level, switch
from policies.queues import PlannedQueues

Cost = tuple[float, float]  # (total tardiness, total JCT), compared lexicographically
SearchState = tuple[float, float, tuple[int, ...]]  # (end, due-clock end, remaining SRTF positions)
# Search work budget of one decision by mode (QueueOrderer.search_work), used unless budget_ms is
# given. Online re-plans at every event (a replay makes ~2 decisions per job): about what the former
# 20 ms searched on a quiet machine, and more than any decision of the 400-job Hydra cases takes
# (at most 1,832). Offline plans each batch of arrivals once: about twice what the heavy 400-job
# plan takes (103,967; a plan cut short orders its remaining queues by SRTF, far more tardy).
# Measured by ``python -m experiments.bench_policies --hydra-budgets``.
DEFAULT_WORK = {"online": 2_000, "offline": 200_000}
TARDINESS_WEIGHT = 1e20
ROUNDS_PER_CHECK = 64  # compiled greedy rounds between two looks at the budget
BOUNDS = ("nodes", "work", "time")  # what can cut a search short


def weighted(cost: Cost) -> float:
    """Hydra's scalar cost, Σ JCT + 1e20 · Σ tardiness (for reports; comparisons use the pair)."""
    return cost[1] + TARDINESS_WEIGHT * cost[0]


@dataclass(frozen=True)
class Jobs:
    """Per-job arrays for one GPU type: predicted run time, submit, deadline (inf = none), and the
    run time on the due clock (``due_p``: a quantile's, or ``p`` itself when not given)."""

    p: np.ndarray
    submit: np.ndarray
    deadline: np.ndarray
    due_p: np.ndarray | None = None

    def __post_init__(self) -> None:
        if self.due_p is None:
            object.__setattr__(self, "due_p", self.p)


def queue_cost(seq, t0: float, jobs: Jobs, t0_due: float | None = None) -> Cost:
    """(tardiness, JCT) of ``seq`` run back to back: JCT from t0 on the point clock, tardiness
    from ``t0_due`` (default t0) on the due clock."""
    t = t0
    t_due = t0 if t0_due is None else t0_due
    tard, jct = 0.0, 0.0
    for j in seq:
        t += jobs.p[j]
        t_due += jobs.due_p[j]
        jct += t - jobs.submit[j]
        if t_due > jobs.deadline[j]:
            tard += t_due - jobs.deadline[j]
    return tard, jct


def srtf(job_set, jobs: Jobs) -> list[int]:
    return sorted(job_set, key=lambda j: (jobs.p[j], j))


def swap_heuristic(seq: list[int], t0: float, jobs: Jobs, t0_due: float | None = None) -> tuple[list[int], Cost]:
    """Slide a window of deadline-violating jobs (on the due clock) left from the right-most
    violation; keep the best sequence seen (so it is never worse than its input). Costs are
    :func:`queue_cost`'s, on each job's facts read once as Python floats (the same IEEE sums)."""
    t0_due = t0 if t0_due is None else t0_due
    seq = list(seq)
    facts = {j: (float(jobs.p[j]), float(jobs.due_p[j]), float(jobs.submit[j]), float(jobs.deadline[j])) for j in seq}

    def cost(s: list[int]) -> Cost:
        t, t_due, tard, jct = t0, t0_due, 0.0, 0.0
        for j in s:
            p, due_p, submit, deadline = facts[j]
            t += p
            t_due += due_p
            jct += t - submit
            if t_due > deadline:
                tard += t_due - deadline
        return tard, jct

    def violating(s: list[int]) -> list[bool]:
        t, out = t0_due, []
        for j in s:
            t += facts[j][1]
            out.append(t > facts[j][3])
        return out

    best, best_cost = list(seq), cost(seq)
    late = violating(seq)
    if not any(late):
        return best, best_cost
    hi = max(i for i, v in enumerate(late) if v)
    lo = hi
    while lo > 0:
        displaced = seq[lo - 1]
        seq[lo - 1:hi] = seq[lo:hi + 1]
        seq[hi] = displaced
        lo, hi = lo - 1, hi - 1
        candidate = cost(seq)
        if candidate < best_cost:
            best, best_cost = list(seq), candidate
        late = violating(seq)
        if late[hi + 1]:
            hi += 1  # the displaced job now misses its deadline: it joins the window
        while hi >= lo and not late[hi]:
            hi -= 1  # satisfied jobs leave the window from the right
        if hi < lo:
            break
    return best, best_cost


@dataclass
class SearchStats:
    nodes: int = 0
    stopped_by: str = ""  # "", "nodes" (max_nodes reached) or "time"


def branch_and_bound(job_set, t0: float, jobs: Jobs, *, t0_due: float | None = None, stop_at: float = math.inf,
                     max_nodes: int | None, incumbent: tuple[list[int], Cost] | None = None,
                     ) -> tuple[list[int], Cost, SearchStats]:
    """:func:`branch_and_bound_py`, compiled (:mod:`policies.hydra_search`, the same nodes, order,
    cost and stats) when it can be: at most ``MAX_JOBS`` jobs, finite run times and submit times,
    no NaN deadline, and no wall-clock stop (the clock is read between nodes, in Python)."""
    if stop_at != math.inf or len(job_set) > search_kernel.MAX_JOBS:
        return branch_and_bound_py(job_set, t0, jobs, t0_due=t0_due, stop_at=stop_at, max_nodes=max_nodes,
                                   incumbent=incumbent)
    t0_due = t0 if t0_due is None else t0_due
    order = srtf(job_set, jobs)
    at = np.array(order, dtype=np.int64)  # the float64 values float() reads, as arrays
    p = np.asarray(jobs.p, dtype=np.float64)[at]
    due_p = np.asarray(jobs.due_p, dtype=np.float64)[at]
    submit = np.asarray(jobs.submit, dtype=np.float64)[at]
    due = np.asarray(jobs.deadline, dtype=np.float64)[at]
    if not (np.isfinite(p).all() and np.isfinite(due_p).all() and np.isfinite(submit).all()
            and not np.isnan(due).any() and math.isfinite(t0) and math.isfinite(t0_due)):
        return branch_and_bound_py(job_set, t0, jobs, t0_due=t0_due, stop_at=stop_at, max_nodes=max_nodes,
                                   incumbent=incumbent)
    best_seq, best = incumbent if incumbent else (order, queue_cost(order, t0, jobs, t0_due))
    improved, b_tard, b_jct, positions, nodes, stopped = search_kernel.search(
        p, due_p, submit, due, np.isinf(due), float(t0), float(t0_due), max_nodes is not None,
        0 if max_nodes is None else int(max_nodes), float(best[0]), float(best[1]))
    stats = SearchStats(nodes=int(nodes), stopped_by="nodes" if stopped else "")
    if improved:
        best_seq, best = [order[x] for x in positions.tolist()], (b_tard, b_jct)
    return best_seq, best, stats


def branch_and_bound_py(job_set, t0: float, jobs: Jobs, *, t0_due: float | None = None, stop_at: float = math.inf,
                        max_nodes: int | None, incumbent: tuple[list[int], Cost] | None = None,
                        ) -> tuple[list[int], Cost, SearchStats]:
    """Best-first search over job orders (FixNonDDL) until ``max_nodes`` or ``stop_at``
    (``time.perf_counter``; the clock is read only when ``stop_at`` is finite, so a search bounded
    by nodes alone ends the same way on any machine); returns the best order found and stats.
    Tardiness runs on the due clock from ``t0_due`` (default t0), JCT on the point clock.

    Prefixes that are reorderings of one another leave the same jobs from the same times (on both
    clocks): such a state is expanded only from its cheapest prefix (any other one's completions
    cost no less), and the SRTF completion of a state is computed once."""
    t0_due = t0 if t0_due is None else t0_due
    order = srtf(job_set, jobs)
    stats = SearchStats()
    best_seq, best = incumbent if incumbent else (order, queue_cost(order, t0, jobs, t0_due))
    deadline_free = [math.isinf(jobs.deadline[j]) for j in order]

    # per SRTF position, as Python floats (the same IEEE sums as numpy's, without its per-scalar cost)
    p = [float(jobs.p[j]) for j in order]
    due_p = [float(jobs.due_p[j]) for j in order]
    submit = [float(jobs.submit[j]) for j in order]
    due = [float(jobs.deadline[j]) for j in order]

    def completion(start: float, start_due: float, rest: tuple[int, ...]) -> tuple[float, float, float]:
        """Running positions ``rest`` (SRTF) from ``start`` (``start_due`` on the due clock): its
        tardiness and JCT, and a lower bound on the tardiness of any order of it (each job finishing
        as early as it possibly could)."""
        t, t_due, tard, jct, floor = start, start_due, 0.0, 0.0, 0.0
        for x in rest:
            t += p[x]
            t_due += due_p[x]
            jct += t - submit[x]
            if t_due > due[x]:
                tard += t_due - due[x]
                if start_due + due_p[x] > due[x]:
                    floor += start_due + due_p[x] - due[x]
        return tard, jct, floor

    # node: (key cost, tie counter, prefix, end time, due-clock end, prefix tardiness, prefix JCT,
    # remaining positions)
    counter = 0
    heap = [((0.0, 0.0), counter, (), float(t0), float(t0_due), 0.0, 0.0, tuple(range(len(order))))]
    seen: dict[SearchState, tuple[float, float, float]] = {}  # completion() memo
    cheapest: dict[SearchState, Cost] = {}  # best prefix cost pushed per state
    timed = stop_at != math.inf
    while heap:
        if max_nodes is not None and stats.nodes >= max_nodes:
            stats.stopped_by = "nodes"
            break
        if timed and time.perf_counter() > stop_at:
            stats.stopped_by = "time"
            break
        _, _, prefix, t_end, t_end_due, tard, jct, rest = heapq.heappop(heap)
        stats.nodes += 1
        first_free = next((r for r in rest if deadline_free[r]), None)  # shortest deadline-free job left
        for i, r in enumerate(rest):
            if deadline_free[r] and r != first_free:
                continue  # FixNonDDL: deadline-free jobs keep SRTF order
            t = t_end + p[r]
            t_due = t_end_due + due_p[r]
            c_tard = tard + (t_due - due[r] if t_due > due[r] else 0.0)
            c_jct = jct + t - submit[r]
            c_rest = rest[:i] + rest[i + 1:]
            key = (t, t_due, c_rest)  # the same job set after a reordered prefix ends at the same times
            done = seen.get(key)
            if done is None:
                done = seen[key] = completion(t, t_due, c_rest)
            r_tard, r_jct, r_floor = done
            full = (c_tard + r_tard, c_jct + r_jct)  # prefix + SRTF(rest): an upper bound
            if full < best:
                best, best_seq = full, list(prefix) + [order[r]] + [order[x] for x in c_rest]
            if r_tard == 0.0 or not c_rest:
                continue  # the branch's optimum is known (SRTF rest meets every deadline)
            if (c_tard + r_floor, c_jct + r_jct) >= best:
                continue  # lower bound: prefix tardiness is final, each rest job ends no earlier than
                # t_due + its due-clock run time, and SRTF minimises the (point-clock) JCT of the rest
            rival = cheapest.get(key)
            if rival is not None and rival <= (c_tard, c_jct):
                continue  # dominated: the same jobs left from the same time, after a prefix no cheaper
            cheapest[key] = (c_tard, c_jct)
            counter += 1
            heapq.heappush(heap, (full, counter, prefix + (order[r],), t, t_due, c_tard, c_jct, c_rest))
    return best_seq, best, stats


class QueueOrderer:
    """Orders a GPU's job set (SRTF / branch-and-bound / swap heuristic), memoised.

    The budget is per decision (:meth:`start_decision`), shared by all its orderings: ``work``
    units of search work (deterministic) and/or ``budget_ms`` of wall-clock time (machine-dependent;
    the clock is read only when it is set). Once either is spent, the rest of the decision orders
    by SRTF alone, so one decision does about ``work`` units of heuristic and search (the budget is
    checked before each heuristic, which may pass it by its queue's length), however many queues it
    orders."""

    def __init__(self, bnb: bool, budget_ms: float | None = None, max_nodes: int | None = None,
                 work: int | None = None):
        self.bnb, self.max_nodes, self.work_budget = bnb, max_nodes, work
        self.budget_s = None if budget_ms is None else budget_ms / 1000.0
        self.memo: dict[tuple, tuple[list[int], Cost]] = {}
        self.searches = 0
        self.stopped = dict.fromkeys(BOUNDS, 0)  # searches cut short (work, time: or skipped, budget spent)
        self.decisions_cut = {"work": 0, "time": 0}  # decisions whose budget ran out
        self.stop_at = math.inf
        self.pairs = 0  # this decision's (job, GPU) pairs scored (counted, not budgeted)
        self.search_work = 0  # this decision's budgeted work: heuristic positions + search nodes
        self._cut = ""  # the bound this decision has used up, if any

    def start_decision(self) -> None:
        """A new decision: its budget starts, its work count and the memo are reset (the memo's keys
        hold absolute times; a new decision rarely reuses them)."""
        self.stop_at = math.inf if self.budget_s is None else time.perf_counter() + self.budget_s
        self.pairs = self.search_work = 0
        self._cut = ""
        self.memo.clear()

    @property
    def work(self) -> int:
        """This decision's work units: (job, GPU) pairs scored + search work."""
        return self.pairs + self.search_work

    def spent(self) -> str:
        """The bound of this decision that is used up ("work", checked first, or "time"); "" while
        both last (the clock is read only with a time budget)."""
        if self.work_budget is not None and self.search_work >= self.work_budget:
            cut = "work"
        elif self.stop_at != math.inf and time.perf_counter() >= self.stop_at:
            cut = "time"
        else:
            return ""
        if not self._cut:
            self._cut = cut
            self.decisions_cut[cut] += 1
        return cut

    def order(self, job_set: frozenset, t0: float, type_k: int, jobs: Jobs,
              t0_due: float | None = None) -> tuple[list[int], Cost]:
        """The best order found for the set: SRTF when it meets every deadline (on the due clock,
        from ``t0_due``, default t0); else the swap heuristic and branch-and-bound, while the
        decision's budget lasts (SRTF after)."""
        t0_due = t0 if t0_due is None else t0_due
        key = (type_k, t0, t0_due, job_set)
        hit = self.memo.get(key)
        if hit is not None:
            return hit
        seq = srtf(job_set, jobs)
        cost = queue_cost(seq, t0, jobs, t0_due)
        if cost[0] > 0.0:
            cut = self.spent()
            if cut:
                self.stopped[cut] += 1  # SRTF only
                return seq, cost  # not memoised: a memo hit must not depend on when it was made
            self.search_work += len(seq)
            seq, cost = swap_heuristic(seq, t0, jobs, t0_due)
            if self.bnb and len(seq) > 1:
                seq, cost = self._search(job_set, t0, t0_due, jobs, (seq, cost))
        self.memo[key] = (seq, cost)
        return seq, cost

    def _search(self, job_set: frozenset, t0: float, t0_due: float, jobs: Jobs,
                heuristic: tuple[list[int], Cost]) -> tuple[list[int], Cost]:
        """Branch-and-bound from the heuristic's order, up to the work left, unless the decision's
        budget is spent."""
        cut = self.spent()
        if cut:
            self.stopped[cut] += 1  # heuristic only
            return heuristic
        limit, limited_by = self.max_nodes, "nodes"
        left = None if self.work_budget is None else self.work_budget - self.search_work  # >= 1: not spent
        if left is not None and (limit is None or left < limit):
            limit, limited_by = left, "work"
        b_seq, b_cost, stats = branch_and_bound(job_set, t0, jobs, t0_due=t0_due, stop_at=self.stop_at,
                                                max_nodes=limit, incumbent=heuristic)
        self.searches += 1
        self.search_work += stats.nodes
        if stats.stopped_by:
            self.stopped[limited_by if stats.stopped_by == "nodes" else stats.stopped_by] += 1
        return (b_seq, b_cost) if b_cost < heuristic[1] else heuristic


@dataclass
class GpuState:
    """A set of interchangeable GPUs (same type, same t0 and t0_due, same planned sequence)."""

    type_k: int
    t0: float
    members: list[int]
    seq: list[int]
    tardiness: float = 0.0  # of ``seq`` as ordered
    t0_due: float | None = None  # when free on the due clock; None: t0

    def __post_init__(self) -> None:
        if self.t0_due is None:
            self.t0_due = self.t0


@dataclass
class Assignment:
    """The greedy's result as arrays over its groups (columns ``used``; the first ``m`` given, the
    rest split off them in order): a group's parent (-1: given), its queue length, and its queue:
    ``ordered[c]`` (job ids) where an ordering was searched, else its SRTF order, row indices in
    ``seqs[slot[c], :length[c]]``. ``tardiness`` is of each queue as ordered."""

    m: int
    used: int
    rows: np.ndarray
    parent: np.ndarray
    length: np.ndarray
    slot: np.ndarray
    srtf: np.ndarray
    seqs: np.ndarray
    tardiness: np.ndarray
    ordered: dict[int, list[int]]

    def queue(self, c: int) -> list[int]:
        """Group c's planned jobs, first to run first."""
        return self.queues([c])[0]

    def queues(self, columns: list[int]) -> list[list[int]]:
        """The planned jobs of each group in ``columns``, first to run first (one conversion for all)."""
        cols = np.asarray(columns, dtype=np.int64)
        jobs, ends = kernels.flat_queues(cols, self.rows, self.seqs, self.slot, self.length)
        flat, bounds = jobs.tolist(), ends.tolist()
        return [flat[a:b] if self.srtf[c] else self.ordered[c]
                for c, a, b in zip(columns, [0, *bounds[:-1]], bounds)]


def greedy_assign(waiting: list[int], gpus: list[GpuState], per_type: list[Jobs],
                  feasible: np.ndarray, orderer: QueueOrderer) -> list[GpuState]:
    """Hydra's greedy assignment of ``waiting`` jobs (rows of ``feasible[job, type]``) to GPU
    groups with empty plans; returns the groups, new ones (split off a group) appended, each new
    one holding the first GPU left in its parent (:func:`assign` on groups given as objects)."""
    if any(g.seq for g in gpus):
        raise ValueError("greedy_assign takes GPU groups with empty plans; a group came with one")
    if not waiting:
        return list(gpus)
    rows = np.asarray(waiting, dtype=np.int64)
    row_p = np.stack([np.asarray(jobs.p, dtype=np.float64)[rows] for jobs in per_type])
    row_due_p = np.stack([np.asarray(jobs.due_p, dtype=np.float64)[rows] for jobs in per_type])
    row_ok = np.ascontiguousarray(np.asarray(feasible, dtype=bool)[rows].T)
    given = (np.array([g.type_k for g in gpus], dtype=np.int64), np.array([g.t0 for g in gpus], dtype=np.float64),
             np.array([g.t0_due for g in gpus], dtype=np.float64),
             np.array([len(g.members) for g in gpus], dtype=np.int64))
    plan = assign(rows, row_p, row_due_p, row_ok, per_type, given, orderer)
    out = list(gpus)
    for u in range(plan.m, plan.used):  # in the order they split off their group
        parent = gpus[plan.parent[u]]
        out.append(GpuState(parent.type_k, parent.t0, [parent.members.pop(0)], [], t0_due=parent.t0_due))
    for c, group in enumerate(out):
        if plan.length[c]:
            group.seq = plan.queue(c)
            group.tardiness = float(plan.tardiness[c])
    return out


def assign(rows: np.ndarray, row_p: np.ndarray, row_due_p: np.ndarray, row_ok: np.ndarray, per_type: list[Jobs],
           given: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray], orderer: QueueOrderer,
           lazy: bool = True) -> Assignment:
    """Hydra's greedy assignment of jobs ``rows`` (their (type, row) run times on both clocks and
    feasibility) to GPU groups with empty plans, ``given`` as arrays: type, t0, t0_due and GPU count.

    Each round takes the (job, GPU) pair of least absolute queue cost. Pairs are first scored by
    SRTF, which is exact when SRTF meets every deadline and otherwise gives a lower bound
    (tardiness >= the queue's own and the job's tardiness if run first, both on the due clock;
    JCT >= SRTF's). The expensive ordering (branch-and-bound) runs only for a pair whose bound is
    the current minimum, so the choice is the same as scoring every pair exactly. Once the
    decision's budget is spent, every pair is scored by its SRTF cost as exact and queues are
    ordered by SRTF. Scoring and the rounds whose queue SRTF orders on time run compiled
    (:mod:`policies.hydra_greedy`); the budget is checked whenever control is back here (with a
    time budget, at least every ``ROUNDS_PER_CHECK`` rounds; a work budget changes only here).
    With ``lazy`` (when exact: no run time < 0, no GPU free before a job's submission), a grown
    queue's pairs get lower bounds scored only when least, and groups split off an empty group are
    scored only once that group gets a job (:func:`policies.hydra_greedy.add_job`): the same picks.
    """
    n, m = len(rows), len(given[0])  # width m + n: every assignment can split at most one new group off
    # every array of the decision, made by one compiled call (kernels.new_decision): scores and their
    # codes, rows left, groups, queues (seqs), counters; per row its least cell; per group whether its
    # scores are held back (kernels.add_job); the rows left; per row whether its least cell is a lower
    # bound (kernels.update_best_stale). Held-back scores are exact only if no GPU frees before a job's
    # submission and no run time is < 0 (``counters[LAZY]``).
    (tard, jct, code, alive, row_submit, row_deadline, g_type, g_t0, g_t0_due, g_count, g_tard, g_len, g_slot,
     g_parent, g_srtf, seqs, counters, *best) = kernels.new_decision(
        rows, row_p, row_due_p, np.asarray(per_type[0].submit, dtype=np.float64),
        np.asarray(per_type[0].deadline, dtype=np.float64), *given, lazy)
    scores = (tard, jct, code, alive, rows, row_p, row_ok, row_submit, row_deadline)
    groups = (g_type, g_t0, g_tard, g_len, g_slot)
    due = (row_due_p, g_t0_due)
    ordered: dict[int, list[int]] = {}
    rounds = ROUNDS_PER_CHECK if orderer.stop_at != math.inf else n + 1  # untimed: pause never needed
    srtf_only = False  # the budget is spent: SRTF scores are taken as exact
    kernels.start(srtf_only, *scores, *groups, seqs, counters, *due, *best)
    while True:
        if not srtf_only and orderer.spent():
            srtf_only = True
            kernels.start(srtf_only, *scores, *groups, seqs, counters, *due, *best)
        status, r, c = kernels.advance(rounds, srtf_only, *scores, *groups, g_count, g_parent, g_srtf,
                                       seqs, counters, *due, *best)
        if status == kernels.DONE:
            break
        if status == kernels.PAUSE:
            continue
        k = int(g_type[c])
        planned = rows[seqs[g_slot[c], :g_len[c]]].tolist() if g_len[c] else []
        seq, cost = orderer.order(frozenset(planned) | {int(rows[r])}, float(g_t0[c]), k, per_type[k],
                                  float(g_t0_due[c]))
        if code[r, c] == kernels.BOUND:  # the bound is the minimum: score the pair exactly
            kernels.set_exact(r, c, cost[0], cost[1], tard, jct, code, counters[kernels.USED], *best[:3])
            continue
        target = kernels.add_job(r, c, cost[0], srtf_only, *scores, *groups, g_count, g_parent, seqs, counters,
                                 *due, *best)
        ordered[target] = seq
        g_srtf[target] = False
    orderer.pairs += int(counters[kernels.WORK])
    return Assignment(m, int(counters[kernels.USED]), rows, g_parent, g_len, g_slot, g_srtf, seqs, g_tard, ordered)


class HydraPolicy(Policy):
    name = "hydra"

    def __init__(self, budget_ms: str | float | None = None, nodes: str | int | None = None, bnb: str | bool = "on",
                 mode: str = "online", window: str | int = 100, deadline_quantile: str | float | None = None,
                 work: str | int | None = None):
        """``work`` unset: :data:`DEFAULT_WORK` of the mode, unless ``budget_ms`` is given (then
        the time budget alone, as asked; the plan then depends on the machine)."""
        self.mode = planning_mode(mode)
        self.deadline_quantile = quantile_level("deadline_quantile", deadline_quantile)
        self.budget_ms = None if budget_ms is None else number("budget_ms", budget_ms, 0.0, 3.6e6)
        if work is None:
            self.work = DEFAULT_WORK[self.mode] if self.budget_ms is None else None
        else:
            self.work = count_or_all("work", work)
        self.max_nodes = count_or_all("nodes", nodes)
        self.bnb = switch("bnb", bnb)
        self.window = count_or_all("window", window)
        self.orderer = QueueOrderer(self.bnb, self.budget_ms, self.max_nodes, self.work)
        self._queues = PlannedQueues()
        self._static: _Facts | None = None
        self._mark: np.ndarray | None = None  # scratch of :meth:`_window`
        self.max_work = 0  # the most work units one decision took (QueueOrderer.work)
        self.max_search_work = 0  # the most search work one decision took (what ``work`` bounds)

    def bound(self) -> str:
        """Which budget bounds a decision: "work" (machine-independent), "time" (wall clock),
        "work+time", or "none"."""
        kinds = [k for k, on in (("work", self.work is not None), ("time", self.budget_ms is not None)) if on]
        return "+".join(kinds) or "none"

    def describe(self) -> dict:
        return {"name": self.name, "bound": self.bound(), "work": self.work or "all", "budget_ms": self.budget_ms,
                "nodes": self.max_nodes or "unbounded",
                "bnb": self.bnb, "mode": self.mode, "window": self.window or "all",
                "deadline_quantile": self.deadline_quantile,
                "bnb_searches": self.orderer.searches,
                "bnb_stopped_by_node_budget": self.orderer.stopped["nodes"],
                "bnb_stopped_by_work_budget": self.orderer.stopped["work"],
                "bnb_stopped_by_time_budget": self.orderer.stopped["time"],
                "decisions_cut_by_work_budget": self.orderer.decisions_cut["work"],
                "decisions_cut_by_time_budget": self.orderer.decisions_cut["time"],
                "max_work_per_decision": self.max_work,
                "max_search_work_per_decision": self.max_search_work}

    def schedule(self, view) -> list[Placement]:
        if self.mode == "online":
            self._queues.clear()
            if not view.free_by_type.any():
                return []  # only idle GPUs' heads start, and the plan is redone at the next event
            pending = self._window(view)
        else:
            planned = self._queues.planned_jobs()
            pending = np.array([j for j in view.waiting if j not in planned], dtype=np.int64)
        if len(pending):
            avail = self._available_at(view, view.predicted)
            q = self.deadline_quantile
            self._plan(view, pending, avail, avail if q is None else self._available_at(view, view.quantile(q)))
        return self._queues.start_heads(view)

    @staticmethod
    def _available_at(view, runtimes: np.ndarray) -> np.ndarray:
        """``view.gpu_available_at(runtimes)``, compiled."""
        return kernels.available_at(float(view.now), view.gpu_job, view.start, view.type_of, runtimes)

    def _window(self, view) -> np.ndarray:
        """The jobs planned in one online decision (ascending): round-robin over longest-waiting,
        earliest deadline and shortest predicted run time (on any type), ``window`` in all."""
        jobs = np.fromiter(view.waiting, dtype=np.int64, count=len(view.waiting))
        if self.window is None or len(jobs) <= self.window:
            return jobs
        if self._mark is None or len(self._mark) != len(view.submit):
            self._mark = np.zeros(len(view.submit), dtype=bool)  # scratch: one flag per job
        return kernels.window(jobs, view.deadline, view.predicted, self.window, self._mark)

    def _plan(self, view, pending: np.ndarray, avail: np.ndarray, avail_due: np.ndarray) -> None:
        """Plan ``pending`` on the GPUs, free at ``avail`` (``avail_due`` on the due clock)."""
        static = self._facts(view)
        per_type = static.per_type
        t0, t0_due = avail, avail_due
        if self._queues.queues:  # offline: new jobs go behind installed queues
            t0, t0_due = avail.copy(), avail_due.copy()
            for g, queue in self._queues.queues.items():
                jobs = per_type[view.gpu_type[g]]
                ahead = float(jobs.p[queue].sum())
                t0[g] += ahead
                t0_due[g] += ahead if jobs.due_p is jobs.p else float(jobs.due_p[queue].sum())
        # idle before busy at equal times (a job that overran its prediction is "free now" too, but a
        # job given to that GPU would wait for it). Only len(pending) GPUs of a type can receive a job:
        # a GPU that frees later than each of the len(pending) first ones, and no earlier on the due
        # clock, costs more than any of them still empty (exact; without the option: the len(pending)
        # earliest-free GPUs). Equal t0 and t0_due: one group.
        g_type, g_t0, g_t0_due, g_count, g_first, members = kernels.group_gpus(
            static.by_type, static.type_start, t0, t0_due, view.gpu_job >= 0, len(pending))
        rows = pending
        row_p = np.ascontiguousarray(static.predicted[rows].T)
        row_due_p = row_p if static.due is None else np.ascontiguousarray(static.due[rows].T)
        row_ok = np.ascontiguousarray(static.feasible[rows].T)
        self.orderer.start_decision()
        plan = assign(rows, row_p, row_due_p, row_ok, per_type, (g_type, g_t0, g_t0_due, g_count), self.orderer)
        lead = kernels.leads(plan.m, plan.used, plan.parent, g_first, members)
        columns = np.flatnonzero(plan.length[:plan.used])
        if self.mode == "online":  # only idle GPUs' queues are read before the next re-plan
            columns = columns[view.gpu_job[lead[columns]] == IDLE_GPU]
        columns = columns.tolist()
        for gpu, queue in zip(lead[columns].tolist(), plan.queues(columns)):
            self._queues.extend(gpu, queue)
        self.max_work = max(self.max_work, self.orderer.work)
        self.max_search_work = max(self.max_search_work, self.orderer.search_work)

    def _facts(self, view) -> _Facts:
        """Per-job and per-GPU facts that never change during a run (the engine keeps the run-time
        arrays current: these are views of them)."""
        if self._static is None:
            deadline = np.where(np.isnan(view.deadline), np.inf, view.deadline)
            q = self.deadline_quantile
            due_p = None if q is None else view.quantile(q)  # None: the due clock is the point clock
            per_type = [Jobs(view.predicted[:, k], view.submit, deadline, None if due_p is None else due_p[:, k])
                        for k in range(len(view.gpu_types))]
            # a pool too small, or a type the trace says the job cannot run on (+inf)
            feasible = (view.num_gpus[:, None] <= view.total_by_type[None, :]) & np.isfinite(view.predicted)
            by_type = np.argsort(view.gpu_type, kind="stable").astype(np.int64)
            type_start = np.searchsorted(view.gpu_type[by_type], np.arange(len(view.gpu_types) + 1)).astype(np.int64)
            self._static = _Facts(per_type, feasible, np.asarray(view.predicted, dtype=np.float64),
                                  None if due_p is None else np.asarray(due_p, dtype=np.float64), by_type, type_start)
        return self._static


@dataclass(frozen=True)
class _Facts:
    """What :meth:`HydraPolicy._plan` reads at every decision and computes once: per type the jobs'
    arrays, feasibility (job, type), run times (job, type) on both clocks (``due`` None: the point
    clock), and the GPU ids grouped by type (ascending; type k's from ``type_start[k]``)."""

    per_type: list[Jobs]
    feasible: np.ndarray
    predicted: np.ndarray
    due: np.ndarray | None
    by_type: np.ndarray
    type_start: np.ndarray

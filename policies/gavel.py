"""Gavel: heterogeneity-aware allocation by linear programming, realised in rounds.

Why: Gavel (Narayanan et al., OSDI'20) is the heterogeneity-aware scheduler researchers compare
against. It plans an allocation X — X[j, k], the fraction of time job j should run on GPU type k —
from every job's throughput on every type, and realises it over rounds (leases). Here the
throughputs are the *predicted* ones, 1 / predicted run time (a job's fraction done per second
on its GPUs of type k), so a predictor's error shows in the plan; the engine runs the true ones.

Objectives (``objective=``), each an LP solved with SciPy's HiGHS (``scipy.optimize.linprog``)
under Gavel's constraints — X >= 0, Σ_k X[j, k] <= 1 per job, Σ_j s_j X[j, k] <= G_k per type
(s_j: the job's GPUs, G_k: the type's), X[j, k] = 0 where s_j > G_k:

* ``max_min`` (Gavel's heterogeneity-aware max-min fairness): maximise min_j thr_j(X) / iso_j,
  thr_j(X) = Σ_k T[j, k] X[j, k] and iso_j its throughput on an equal 1/n share of every type
  (X_iso[j, k] = G_k / ΣG × min(1, ΣG / (n s_j)); Gavel takes it from another LP, whose optimum is
  not unique, so that the normalisation depended on the solver). The LP's optimum is not unique
  either: of its optima, the one giving alike jobs (same GPUs, predicted times proportional)
  equal allocations — what an interior-point solver such as Gavel's CVXPY converges to, where
  the simplex would pick a vertex — solved with one row per kind of job (see ``_max_min``);
* ``ftf`` (finish-time fairness, Themis as Gavel writes it): minimise max_j ρ_j, ρ_j = (t_j +
  R_j / thr_j(X)) / (t_j + R_j / iso_j), t_j the time since the job arrived, R_j the fraction of
  it left; each ρ_j is a ratio of two functions linear in X, so the least worst ρ is found by a
  Dinkelbach-type sequence of LPs from the equal share (ρ = 1), each fairer than the one before
  (see ``Allocation.ftf``), and of the allocations meeting it the one of most total throughput;
* ``makespan`` (Gavel's minimal total duration): minimise max_j R_j / thr_j(X), i.e. maximise z
  with thr_j(X) >= R_j z.

Rounds (Gavel's priorities): at each round boundary the allocation is recomputed for the jobs
then present, and each job's priority on type k is X[j, k] over the share of its time it has had
on k so far (infinite before its first round there); (job, type) pairs are taken in order of
priority (ties: job index, type order), a job at most once, while the type has room. A running
job given its own type keeps its GPUs, one given another type moves (a preemption and a resume
there), one given none is suspended. Between rounds nothing starts: as in Gavel, a job waits for
the next round.
"""

from __future__ import annotations

import numpy as np
from scipy import sparse
from scipy.optimize import linprog

from policies.base import Placement, Preemption
from policies.options import choice
from policies.preemptive import PreemptivePolicy

OBJECTIVES = ("max_min", "ftf", "makespan")
FTF_STEPS = 16  # at most this many LPs improving finish-time fairness (see Allocation.ftf)
FTF_TOLERANCE = 1e-6  # ... and none once one improves the worst ρ by less than this, relatively


def isolated_share(num_gpus: np.ndarray, gpus_by_type: np.ndarray, jobs: int | None = None) -> np.ndarray:
    """X_iso: each of the n jobs' equal 1/n share of every type, (row, type); n is ``jobs``, by
    default one per row."""
    total = float(gpus_by_type.sum())
    n = len(num_gpus) if jobs is None else jobs
    scale = np.minimum(1.0, total / (n * num_gpus.astype("float64")))
    return (gpus_by_type / total)[None, :] * scale[:, None]


class Allocation:
    """The LPs of one round: throughputs ``T`` (row, type), GPUs per job ``s``, per type ``G``;
    a row stands for ``counts`` jobs alike (by default one), each given the row's allocation."""

    def __init__(self, throughput: np.ndarray, num_gpus: np.ndarray, gpus_by_type: np.ndarray,
                 counts: np.ndarray | None = None) -> None:
        self.T, self.s, self.G = throughput, num_gpus.astype("float64"), gpus_by_type.astype("float64")
        self.n, self.m = throughput.shape
        counts = np.ones(self.n) if counts is None else counts.astype("float64")
        self.fits = (self.s[:, None] <= self.G[None, :]) & (throughput > 0)
        self.share = isolated_share(num_gpus, gpus_by_type, int(counts.sum())) * self.fits
        self.iso = (throughput * self.share).sum(axis=1)
        self._counts = counts
        self.fallbacks = 0  # LPs HiGHS could not solve, replaced by the equal share (see _solve)

    def _solve(self, cost: np.ndarray, coef: np.ndarray, t_coef: np.ndarray | None,
               upper: np.ndarray) -> np.ndarray | None:
        """min cost·(X, t) s.t. Σ_k coef[j, k] X[j, k] + t_coef[j] t <= upper[j] per row j, and
        Gavel's constraints; ``t`` (free) only if ``t_coef`` is given. None if infeasible, or if
        HiGHS cannot tell (numerical trouble: its status "unknown"); the callers then keep to what
        is certified — the fairest allocation found so far, or the equal share, always feasible.

        The matrix is assembled column by column (CSC) from arrays: each X[j, k] is in three rows
        (row j's own, Σ_k X[j, k] <= 1, the type's capacity); rebuilding it with scipy.sparse's
        stacking cost more than the solve at every round."""
        n, m = self.n, self.m
        j = np.repeat(np.arange(n), m)
        index = np.column_stack([j, n + j, 2 * n + np.tile(np.arange(m), n)]).ravel()
        value = np.column_stack([coef.ravel(), np.ones(n * m), np.repeat(self._counts * self.s, m)]).ravel()
        start = np.arange(0, 3 * n * m + 1, 3)
        bounds = np.zeros((n * m, 2))
        bounds[:, 1] = self.fits.ravel()
        if t_coef is not None:
            rows = np.flatnonzero(t_coef)
            index, value = np.concatenate([index, rows]), np.concatenate([value, t_coef[rows]])
            start = np.append(start, len(index))
            bounds = np.vstack([bounds, [-np.inf, np.inf]])
        a = sparse.csc_array((value, index, start), shape=(2 * n + m, len(start) - 1))
        b = np.concatenate([upper, np.ones(n), self.G])
        result = linprog(cost, A_ub=a, b_ub=b, bounds=bounds, method="highs")
        return result.x if result.status == 0 else None

    def _max_scaled_min(self, weights: np.ndarray) -> np.ndarray:
        """X maximising min_j weights_j × thr_j(X) (rows of jobs no type can hold are left out)."""
        n, m = self.n, self.m
        able = self.fits.any(axis=1)
        # t - w_j thr_j(X) <= 0 for every job that fits somewhere; variables: X (n m), t
        scaled = np.where(able, weights, 0.0)[:, None] * self.T
        cost = np.zeros(n * m + 1)
        cost[-1] = -1.0
        x = self._solve(cost, -scaled, able.astype("float64"), np.zeros(n))
        return x[:-1].reshape(n, m) if x is not None else self._equal_share()

    def _equal_share(self) -> np.ndarray:
        self.fallbacks += 1
        return self.share

    def max_min(self) -> np.ndarray:
        return self._max_scaled_min(1.0 / np.where(self.iso > 0, self.iso, 1.0))

    def makespan(self, remaining: np.ndarray) -> np.ndarray:
        # weights scaled to a largest coefficient of 1 (the optimum does not change): HiGHS's
        # tolerances are absolute, and throughputs of 1e-5 per second would sit inside them
        weights = 1.0 / np.maximum(remaining, 1e-12)
        largest = (weights[:, None] * self.T).max(initial=0.0)
        return self._max_scaled_min(weights / largest if largest > 0 else weights)

    def ftf(self, remaining: np.ndarray, elapsed: np.ndarray) -> np.ndarray:
        """X minimising max_j ρ_j(X), ρ_j = (t_j + R_j / thr_j(X)) / c_j, c_j = t_j + R_j / iso_j.

        ρ_j is a ratio of two functions linear in X, N_j = t_j thr_j(X) + R_j over D_j = c_j
        thr_j(X): a generalised linear-fractional program, solved by Crouzeix, Ferland and
        Schaible's Dinkelbach-type method (J. Optim. Theory Appl. 47, 1985). From an allocation
        X_k of worst ratio θ_k (X_0 the equal share, θ_0 = 1), the LP min_X max_j (N_j(X) - θ_k
        D_j(X)) / D_j(X_k) gives X_{k+1}, every iterate feasible and fairer than the one before,
        until one improves θ by less than ``FTF_TOLERANCE`` (typically 2–5 LPs; the bisection on ρ
        it replaced took 17 and reached no lower θ on any of 183 rounds captured from three simulated runs).
        Then, of the allocations meeting the final θ, the one of most total throughput (the
        fairness LP's own optimum may leave GPUs idle)."""
        n, m = self.n, self.m
        # a job with nothing left (done at this very round) needs nothing; its ρ would be 1 whatever X
        able = self.fits.any(axis=1) & (self.iso > 0) & (remaining > 0)
        if not able.any():
            return self.share  # no job needs anything: no ρ to better
        remaining = np.where(able, remaining, 0.0)
        elapsed = np.where(able, elapsed, 0.0)
        iso = np.where(able, self.iso, 1.0)
        c = np.where(able, elapsed + remaining / iso, 1.0)

        def worst(x: np.ndarray) -> tuple[float, np.ndarray]:  # θ(x) and each row's thr(x)
            thr = (self.T * x).sum(axis=1)
            with np.errstate(divide="ignore", invalid="ignore"):
                left = np.where(remaining > 0, remaining / thr, 0.0)  # a row given nothing: inf
            return float(np.max(np.where(able, (elapsed + left) / c, 0.0), initial=0.0)), thr

        best, (theta, thr) = self.share, worst(self.share)
        cost = np.zeros(n * m + 1)
        cost[-1] = 1.0  # min t, t >= (N_j(X) - θ D_j(X)) / D_j(X_k) for every able row
        for step in range(FTF_STEPS):
            d = np.where(able, c * thr, 1.0)
            coef = -(np.where(able, theta * c - elapsed, 0.0) / d)[:, None] * self.T
            x = self._solve(cost, coef, -able.astype("float64"), -remaining / d)
            if x is None:
                if step == 0:  # not one LP solved: the equal share, as the solver could not better it
                    return self._equal_share()
                break
            x = x[:-1].reshape(n, m)
            improved, thr_new = worst(x)
            if not improved < theta:
                break
            gain, best, theta, thr = theta - improved, x, improved, thr_new
            if gain <= FTF_TOLERANCE * theta:
                break
        # each row in units of its equal-share throughput: coefficients near 1, where raw
        # throughputs (1e-5 per second) sit inside HiGHS's absolute tolerances
        with np.errstate(divide="ignore"):
            need = np.where(able, remaining / np.maximum(theta * c - elapsed, 1e-300) / iso, 0.0)
        most = self._solve(-(self.T / self.T.max(initial=1e-300)).ravel(), -self.T / iso[:, None], None, -need)
        return best if most is None else most.reshape(n, m)


def take_by_priority(priority: np.ndarray, need: np.ndarray, room: list[int], chunk: int = 64) -> dict[int, int]:
    """Gavel's round: (row, type) pairs in order of ``priority`` (rows: jobs in ascending order;
    highest first, ties: lower job, then type order; -inf: never), each taken if its row has no
    type yet and the type still has room for the row's ``need`` GPUs. Returns row -> type.

    A round usually fills the cluster within its first pairs, so they are sorted a ``chunk`` at a
    time (the highest, with every pair tied with the last), and between chunks the pairs that can
    no longer be taken (their row placed, their type too full: room only shrinks) are dropped."""
    m = len(room)
    room, need_of = list(room), need.tolist()
    free = sum(room)
    flat = priority.ravel()
    pairs = np.flatnonzero(flat > -np.inf)
    keys = -flat[pairs]
    given: dict[int, int] = {}
    placed = np.zeros(len(need_of), dtype=bool)
    while pairs.size:
        take = keys <= np.partition(keys, chunk)[chunk] if pairs.size > chunk else np.ones(pairs.size, dtype=bool)
        head = pairs[take]
        for pair in head[np.lexsort((head, keys[take]))].tolist():
            r, k = divmod(pair, m)
            if r not in given and room[k] >= need_of[r]:
                given[r] = k
                placed[r] = True
                room[k] -= need_of[r]
                free -= need_of[r]
                if free == 0:
                    return given
        pairs, keys = pairs[~take], keys[~take]
        rows, types = np.divmod(pairs, m)
        alive = (np.asarray(room)[types] >= need[rows]) & ~placed[rows]
        pairs, keys = pairs[alive], keys[alive]
    return given


class GavelPolicy(PreemptivePolicy):
    name = "gavel"

    def __init__(self, objective: str = "max_min", lease: float | str = 360.0, restart: float | str = 10.0,
                 storage_gbps: float | str = 2.0) -> None:
        super().__init__(lease, restart, storage_gbps)
        self.objective = choice("objective", objective, OBJECTIVES)
        self._received: np.ndarray | None = None  # (job, type): seconds each job was given on each type
        self._rounds: np.ndarray | None = None  # per job: rounds it has been present at
        self._cached: tuple[bytes, np.ndarray] | None = None  # max_min: (classes and counts, X per class)
        self._class_of: np.ndarray | None = None  # max_min: each job's class (see _max_min)
        self._representative: np.ndarray | None = None  # a job of each class
        self.equal_share_rounds = 0  # rounds whose LP HiGHS could not solve: the equal share instead

    def allocation(self, view, jobs: np.ndarray) -> np.ndarray:
        """X for ``jobs`` (indices) by this policy's objective, from the predicted throughputs."""
        if self.objective == "max_min":
            return self._max_min(view, jobs)
        remaining = 1.0 - view.progress[jobs]
        lp = Allocation(self._throughput(view, jobs), view.num_gpus[jobs], view.total_by_type)
        x = lp.makespan(remaining) if self.objective == "makespan" else lp.ftf(remaining, view.now - view.submit[jobs])
        self.equal_share_rounds += lp.fallbacks
        return x

    @staticmethod
    def _throughput(view, jobs: np.ndarray) -> np.ndarray:
        """Predicted fraction of each job done per second on each type."""
        return 1.0 / np.maximum(view.predicted[jobs], 1e-6)  # a job of no predicted time: done at once

    def _max_min(self, view, jobs: np.ndarray) -> np.ndarray:
        """Max-min fairness over the jobs' classes: jobs alike in GPUs and in relative speed on
        each type (predicted run times proportional, to 9 digits) have the same normalised
        throughputs, so one of the LP's optima gives them equal allocations; it is found with one
        row per class (the backlog of an overloaded cluster is thousands of jobs of far fewer
        kinds; with per-job noise in the predictions every job is its own class). The allocation
        depends on the classes present and their counts alone: it is reused while they stay."""
        if self._class_of is None:
            seconds = np.maximum(view.predicted, 1e-6)
            with np.errstate(invalid="ignore"):
                relative = seconds / seconds.min(axis=1, keepdims=True)
            kinds = np.column_stack([np.where(np.isfinite(relative), np.round(relative, 9), -1.0), view.num_gpus])
            _, first, self._class_of = np.unique(kinds, axis=0, return_index=True, return_inverse=True)
            self._representative = first
        of = self._class_of[jobs]
        counts = np.bincount(of, minlength=len(self._representative))
        classes = np.flatnonzero(counts)
        counts = counts[classes]
        position = np.empty(len(self._representative), dtype=np.int64)
        position[classes] = np.arange(len(classes))
        inverse = position[of]
        key = classes.tobytes() + counts.tobytes()
        if self._cached is None or self._cached[0] != key:
            rows = self._representative[classes]
            lp = Allocation(self._throughput(view, rows), view.num_gpus[rows], view.total_by_type, counts)
            self._cached = (key, lp.max_min())
            self.equal_share_rounds += lp.fallbacks
        return self._cached[1][inverse]

    def schedule(self, view) -> list[Placement | Preemption]:
        if not view.at_round:
            return []  # Gavel starts and moves jobs at rounds only
        if self._received is None or len(self._rounds) != len(view.submit):  # a new run
            self._received = np.zeros((len(view.submit), len(view.gpu_types)))
            self._rounds = np.zeros(len(view.submit), dtype=np.int64)
            self._cached = self._class_of = None
            self.equal_share_rounds = 0
        jobs = np.sort(np.fromiter([*view.running, *view.waiting], dtype=np.int64))
        x = self.allocation(view, jobs)
        rounds = self._rounds[jobs]
        share = self._received[jobs] / np.maximum(rounds * self.lease_seconds, 1e-12)[:, None]
        with np.errstate(divide="ignore", invalid="ignore"):
            priority = np.where(x > 1e-9, np.where(share > 0, x / share, np.inf), -np.inf)
        rows = take_by_priority(priority, view.num_gpus[jobs], view.total_by_type.astype(np.int64).tolist())
        given = {int(jobs[r]): k for r, k in rows.items()}
        self._rounds[jobs] += 1
        out: list[Placement | Preemption] = []
        for job, (_, k) in view.running.items():
            if given.get(job) != k:
                out.append(Preemption(job))
        for job, k in given.items():
            self._received[job, k] += self.lease_seconds
            running = view.running.get(job)
            if running is None or running[1] != k:
                out.append(Placement(job, view.gpu_types[k]))
        return out

    def describe(self) -> dict:
        return {**super().describe(), "objective": self.objective, "equal_share_rounds": self.equal_share_rounds}

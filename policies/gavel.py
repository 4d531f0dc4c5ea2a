"""Gavel: heterogeneity-aware allocation by linear programming, realised in rounds.

Why: Gavel (Narayanan et al., OSDI'20) is the heterogeneity-aware scheduler researchers compare
against. It plans an allocation X — X[j, k], the fraction of time job j should run on GPU type k —
from every job's throughput on every type, and realises it over rounds (leases). Here the
throughputs are the *predicted* ones, 1 / predicted run time (a job's fraction done per second
on its GPUs of type k), so a predictor's error shows in the plan; the engine runs the true ones.

Objectives (``objective=``), under Gavel's constraints — X >= 0, Σ_k X[j, k] <= 1 per job,
Σ_j s_j X[j, k] <= G_k per type (s_j: the job's GPUs, G_k: the type's):

* ``max_min`` (Gavel's heterogeneity-aware max-min fairness, ``MaxMinFairnessPolicyWithPerf`` in
  ``scheduler/policies/max_min_fairness.py``): maximise min_j s_j thr_j(X) / prop_j, thr_j(X) =
  Σ_k T[j, k] X[j, k] and prop_j the job's throughput on Gavel's proportional share (each type in
  proportion to its GPUs; ``share=perf``, the default). The LP's optimum is not unique — beyond
  the worst-off job any split is optimal — and Gavel takes the one its interior-point solver
  lands on: ``solver=ecos`` (the default) solves Gavel's own formulation with ECOS, as Gavel
  does, given the very problem CVXPY compiles it to (built directly, without CVXPY's cost), so
  that the split is Gavel's; ``solver=highs`` solves it with SciPy's HiGHS (a
  vertex of the optimum: faster, but a different split). ``share=isolated`` normalises by the
  job's equal 1/n share instead (X_iso[j, k] = G_k / ΣG × min(1, ΣG / (n s_j)), HiGHS): what a
  job would get if the cluster were split evenly among the jobs present, which unlike Gavel's
  does not make a job's weight grow with its GPU count;
* ``ftf`` (finish-time fairness, Themis as Gavel writes it): minimise max_j ρ_j, ρ_j = (t_j +
  R_j / thr_j(X)) / (t_j + R_j / iso_j), t_j the time since the job arrived, R_j the fraction of
  it left; each ρ_j is a ratio of two functions linear in X, so the least worst ρ is found by a
  Dinkelbach-type sequence of HiGHS LPs from the equal share (ρ = 1), each fairer than the one
  before (see ``Allocation.ftf``), and of the allocations meeting it the one of most total
  throughput (ours: Gavel solves it as one non-linear program);
* ``makespan`` (Gavel's minimal total duration): minimise max_j R_j / thr_j(X), i.e. maximise z
  with thr_j(X) >= R_j z (HiGHS).

Rounds (:mod:`policies.gavel_rounds`, rule by rule Gavel's ``scheduler.py``): the allocation is
recomputed at a *reset* — when jobs arrived or finished, at least ``reset`` seconds (Gavel's
``minimum_time_between_allocation_resets``, 1,920 s) after the last — and realised by priorities
(X over the share of each type's time the job has had since the reset), type by type, the
fastest type first, zero priorities last. A round lasts a lease (``lease``, 360 s), or until its
jobs all finish; arrivals wait for the round's end; with nothing running an arrival begins a round
(``rounds = "work"`` in :mod:`simulator.preemption`). A running job given its own type keeps its
GPUs, one given another type moves (a preemption and a resume there), one given none is
suspended. The reproduction of Gavel's own simulator on Gavel's traces, and where ours differs, is
in docs/scheduling.md.
"""

from __future__ import annotations

import numpy as np
from scipy import sparse
from scipy.optimize import linprog

from policies.base import Placement, Preemption
from policies.gavel_rounds import GavelRounds
from policies.options import choice, number
from policies.preemptive import PreemptivePolicy

OBJECTIVES = ("max_min", "ftf", "makespan")
SHARES = ("perf", "isolated")  # max_min's normalisation: Gavel's proportional share, or the equal 1/n share
SOLVERS = ("ecos", "highs")  # max_min with share=perf: Gavel's ECOS (on CVXPY's problem), or HiGHS (a vertex)
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

    def max_min_weighted(self, weights: np.ndarray) -> np.ndarray:
        """X maximising min_j weights_j × thr_j(X), weights scaled to a largest coefficient of 1
        (HiGHS's tolerances are absolute)."""
        largest = (weights[:, None] * self.T).max(initial=0.0)
        return self._max_scaled_min(weights / largest if largest > 0 else weights)

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


def proportional_throughput(throughput: np.ndarray, gpus_by_type: np.ndarray) -> np.ndarray:
    """Each job's throughput on Gavel's proportional share (``policies/proportional.py``): the
    cluster split over the types by their GPU counts, the same for every job (the share of each
    type, G_k / ΣG, once Gavel scales its rows to a largest sum of 1)."""
    return throughput @ (gpus_by_type / float(gpus_by_type.sum()))


def _max_min_perf_coefficients(throughput: np.ndarray, num_gpus: np.ndarray,
                               gpus_by_type: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Gavel's objective coefficients s_j T[j, k] / prop_j and its GPUs-per-job matrix, computed
    as Gavel computes them (the same floating-point operations, so the same LP to the bit)."""
    m = throughput.shape[1]
    prop = proportional_throughput(throughput, gpus_by_type)
    weights = 1.0 / np.where(prop > 0, prop, 1.0)
    scale = np.repeat(num_gpus.astype("float64")[:, None], m, axis=1)
    return np.multiply(throughput * weights[:, None], scale), scale


def max_min_perf_ecos_data(throughput: np.ndarray, num_gpus: np.ndarray,
                           gpus_by_type: np.ndarray) -> tuple[np.ndarray, sparse.csc_matrix, np.ndarray]:
    """(c, G, h) of ``min c·v s.t. G v <= h`` that CVXPY hands ECOS for Gavel's max-min LP, built
    directly: CVXPY's compilation cost far more than ECOS's solve at every reset. The layout is
    CVXPY's own — v = (t, X in column-major order), t the epigraph of -min_j; rows: t's n rows
    (-t - Σ_k a[j, k] X[j, k] <= 0, zero coefficients left out), -X <= 0, the types' capacities,
    Σ_k X[j, k] <= 1 — entry for entry (tests compare it with CVXPY's), so ECOS takes the same
    steps and lands on the same optimum, Gavel's split of it included."""
    n, m = throughput.shape
    coef, scale = _max_min_perf_coefficients(throughput, num_gpus, gpus_by_type)
    nx = n * m
    j, k = np.tile(np.arange(n), m), np.repeat(np.arange(m), n)  # X's column-major order
    rows = np.column_stack([j, n + np.arange(nx), n + nx + k, n + nx + m + j])
    values = np.column_stack([-coef.ravel(order="F"), -np.ones(nx), scale.ravel(order="F"), np.ones(nx)])
    keep = values != 0  # CVXPY stores no zero coefficient
    indptr = np.concatenate([[0, n], n + np.cumsum(keep.sum(axis=1))])
    indices = np.concatenate([np.arange(n), rows[keep]])
    data = np.concatenate([-np.ones(n), values[keep]])
    g = sparse.csc_matrix((data, indices, indptr), shape=(2 * n + nx + m, nx + 1))
    h = np.concatenate([np.zeros(n + nx), gpus_by_type.astype("float64"), np.ones(n)])
    c = np.zeros(nx + 1)
    c[0] = 1.0
    return c, g, h


def max_min_perf_ecos(throughput: np.ndarray, num_gpus: np.ndarray, gpus_by_type: np.ndarray) -> np.ndarray | None:
    """Gavel's ``MaxMinFairnessPolicyWithPerf.get_allocation`` as Gavel writes and solves it —
    CVXPY's ECOS problem (:func:`max_min_perf_ecos_data`), rows in job order, columns in
    type-name order (the caller's) — so that of the LP's many optima the one Gavel's
    interior-point solver lands on is taken: maximise min_j s_j Σ_k T[j, k] X[j, k] / prop_j,
    X >= 0, Σ_j s_j X[j, k] <= G_k, Σ_k X[j, k] <= 1, clipped to [0, 1]. None if ECOS does not
    report an optimum (CVXPY's status "optimal": ECOS's exit flag 0)."""
    import ecos

    n, m = throughput.shape
    c, g, h = max_min_perf_ecos_data(throughput, num_gpus, gpus_by_type)
    try:
        solution = ecos.solve(c, g, h, {"l": g.shape[0], "q": [], "e": 0}, None, None, verbose=False)
    except ValueError:  # ECOS refuses the data (CVXPY raises a SolverError then)
        return None
    if solution["info"]["exitFlag"] != 0:
        return None
    return np.asarray(solution["x"][1:], dtype="float64").reshape((n, m), order="F").clip(min=0.0, max=1.0)


def max_min_perf_cvxpy(throughput: np.ndarray, num_gpus: np.ndarray, gpus_by_type: np.ndarray) -> np.ndarray | None:
    """:func:`max_min_perf_ecos` through CVXPY, Gavel's own code path: the reference the direct
    construction is checked against."""
    import cvxpy as cp

    n, m = throughput.shape
    coef, scale = _max_min_perf_coefficients(throughput, num_gpus, gpus_by_type)
    x = cp.Variable((n, m))
    objective = cp.Maximize(cp.min(cp.sum(cp.multiply(coef, x), axis=1)))
    constraints = [x >= 0, cp.sum(cp.multiply(scale, x), axis=0) <= gpus_by_type.astype("float64"),
                   cp.sum(x, axis=1) <= 1]
    problem = cp.Problem(objective, constraints)
    try:
        problem.solve(solver="ECOS")
    except cp.error.SolverError:
        return None
    if problem.status != "optimal" or x.value is None:
        return None
    return x.value.clip(min=0.0, max=1.0)


def fastest_first(seconds: np.ndarray) -> list[int]:
    """The types in Gavel's walk order (its ``*_perf`` policies: V100, P100, K80): by each job's
    speed there relative to its fastest type, averaged over the jobs (relative, so that short jobs
    weigh no more than long ones); a type a job cannot run on counts 0 for it."""
    with np.errstate(divide="ignore", invalid="ignore"):
        throughput = np.where(np.isfinite(seconds), 1.0 / np.maximum(seconds, 1e-6), 0.0)
        best = throughput.max(axis=1, keepdims=True)
        relative = np.where(best > 0, throughput / best, 0.0)
    return np.argsort(-relative.mean(axis=0), kind="stable").tolist() if len(seconds) else list(range(seconds.shape[1]))


class GavelPolicy(PreemptivePolicy):
    """Gavel (module docstring): an allocation at each reset, realised round by round as Gavel's
    scheduler does (:mod:`policies.gavel_rounds`)."""

    name = "gavel"
    rounds = "work"  # Gavel's simulator: a round ends when its leases do, or its jobs all finish
    reads_attained = False  # nor view.attained: the engine need not keep it current (simulator.preemption)

    def __init__(self, objective: str = "max_min", lease: float | str = 360.0, restart: float | str = 10.0,
                 storage_gbps: float | str = 2.0, reset: float | str = 1920.0, share: str = "perf",
                 solver: str = "ecos") -> None:
        super().__init__(lease, restart, storage_gbps)
        self.objective = choice("objective", objective, OBJECTIVES)
        self.min_reset_s = number("reset", reset, 0.0, np.inf, unit="s")
        self.share = choice("share", share, SHARES)
        self.solver = choice("solver", solver, SOLVERS)
        # only these objectives read each job's fraction done: the engine keeps it current for them alone
        self.reads_progress = self.objective in ("ftf", "makespan")
        self._book: GavelRounds | None = None
        self._walk: list[int] = []
        self._last_arrival = -np.inf  # the last admitted job's submit time
        self._can_run: np.ndarray | None = None  # (job, type): finite predicted time
        self._arrived: list[int] = []  # jobs arrived since the last round
        self.equal_share_rounds = 0  # resets whose LP could not be solved: the equal share instead
        self.ecos_fallbacks = 0  # resets ECOS could not solve, solved with HiGHS instead

    # -- the allocation ------------------------------------------------------------------------
    def allocation(self, view, jobs: np.ndarray) -> np.ndarray:
        """X for ``jobs`` (indices, ascending) by this policy's objective, from the predicted
        throughputs; columns in the view's type order."""
        throughput = self._throughput(view, jobs)
        if self.objective == "max_min" and self.share == "perf" and self.solver == "ecos":
            names = np.argsort([t.lower() for t in view.gpu_types], kind="stable")  # Gavel's sorted worker types
            x = max_min_perf_ecos(throughput[:, names], view.num_gpus[jobs], view.total_by_type[names])
            if x is not None:
                out = np.empty_like(x)
                out[:, names] = x
                return out
            self.ecos_fallbacks += 1  # ECOS reported no optimum: HiGHS below, said in the manifest
        lp = Allocation(throughput, view.num_gpus[jobs], view.total_by_type)
        if self.objective == "max_min":
            if self.share == "perf":
                prop = proportional_throughput(throughput, view.total_by_type)
                x = lp.max_min_weighted(view.num_gpus[jobs] / np.where(prop > 0, prop, 1.0))
            else:
                x = lp.max_min()
        elif self.objective == "makespan":
            x = lp.makespan(1.0 - view.progress[jobs])
        else:
            x = lp.ftf(1.0 - view.progress[jobs], view.now - view.submit[jobs])
        self.equal_share_rounds += lp.fallbacks
        return x

    @staticmethod
    def _throughput(view, jobs: np.ndarray) -> np.ndarray:
        """Predicted fraction of each job done per second on each type (0 where it cannot run)."""
        with np.errstate(divide="ignore"):
            return 1.0 / np.maximum(view.predicted[jobs], 1e-6)  # a job of no predicted time: done at once

    # -- the rounds ----------------------------------------------------------------------------
    def on_arrival(self, view, jobs: list[int]) -> None:
        self._arrived += jobs  # taken in at the next round (Gavel adds arrivals at a round's end)

    def on_finish(self, view, job: int, now: float) -> None:
        if self._book is not None:
            self._book.finish(job, now)

    def _start_run(self, view) -> None:
        self._book = GavelRounds(self.lease_seconds, self.min_reset_s, len(view.submit), len(view.gpu_types))
        self._walk = fastest_first(view.predicted)
        # jobs some type can hold and run: the others are rejected and never arrive
        holds = view.num_gpus[:, None] <= view.total_by_type[None, :]
        self._can_run = np.isfinite(view.predicted)
        admitted = (holds & self._can_run).any(axis=1)
        self._last_arrival = float(view.submit[admitted].max()) if admitted.any() else -np.inf
        self.equal_share_rounds = self.ecos_fallbacks = 0

    def schedule(self, view) -> list[Placement | Preemption]:
        if not view.at_round:
            return []  # Gavel starts and moves jobs at rounds only
        if self._book is None or len(self._book.held) != len(view.submit):
            self._start_run(view)
        book, now = self._book, view.now
        # the jobs arrived since the last round (every job waiting or running is held, or one of them)
        arrived = np.sort(np.asarray(self._arrived, dtype=np.int64))
        self._arrived = []
        arrivals_left = self._last_arrival > now  # an admitted job has yet to arrive
        can_run = self._can_run
        # (job, type) with a finite predicted time: the engine's predictions are finite exactly where
        # the job can run, and online feedback replaces one by a finite truth, so a row never changes
        can_run[arrived] = np.isfinite(view.predicted[arrived])
        for _ in range(2):  # a round that runs nothing with every job in: Gavel resets and goes again
            book.begin(now, arrived, arrivals_left)
            if book.due(now):
                held = np.flatnonzero(book.held)
                book.reset(now, self.allocation(view, held) if len(held) else np.zeros((0, len(view.gpu_types))))
            given = book.choose(can_run, view.num_gpus, view.total_by_type, self._walk)
            if given or not (view.running or view.waiting) or arrivals_left:
                break
        running, types, get = view.running, view.gpu_types, given.get
        out: list[Placement | Preemption] = [Preemption(job) for job, (_, k) in running.items() if get(job) != k]
        out += [Placement(job, types[k]) for job, k in given.items()
                if (held := running.get(job)) is None or held[1] != k]
        return out

    def describe(self) -> dict:
        return {**super().describe(), "objective": self.objective, "reset_s": self.min_reset_s,
                "share": self.share, "solver": self.solver, "equal_share_rounds": self.equal_share_rounds,
                "ecos_fallbacks": self.ecos_fallbacks,
                "allocation_resets": self._book.resets if self._book is not None else 0}

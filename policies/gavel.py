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
  not unique, so that the normalisation depended on the solver);
* ``ftf`` (finish-time fairness, Themis as Gavel writes it): minimise max_j ρ_j, ρ_j = (t_j +
  R_j / thr_j(X)) / (t_j + R_j / iso_j), t_j the time since the job arrived, R_j the fraction of
  it left; ρ_j <= ρ is linear in X for a fixed ρ (thr_j(X) >= R_j / (ρ c_j - t_j)), so the least
  feasible ρ is found by bisection on feasibility LPs (``FTF_STEPS`` steps; ρ = 1, the equal
  share, is always feasible), and of the allocations meeting it the one of most total throughput;
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

from policies.base import Placement, PolicyError, Preemption
from policies.options import choice
from policies.preemptive import PreemptivePolicy

OBJECTIVES = ("max_min", "ftf", "makespan")
FTF_STEPS = 16  # bisection steps on ρ: ρ within (1 - lower bound) / 2**16 of the least feasible


def isolated_share(num_gpus: np.ndarray, gpus_by_type: np.ndarray) -> np.ndarray:
    """X_iso: each of the n jobs' equal 1/n share of every type, (job, type)."""
    total = float(gpus_by_type.sum())
    scale = np.minimum(1.0, total / (len(num_gpus) * num_gpus.astype("float64")))
    return (gpus_by_type / total)[None, :] * scale[:, None]


class Allocation:
    """The LPs of one round: throughputs ``T`` (job, type), GPUs per job ``s``, per type ``G``."""

    def __init__(self, throughput: np.ndarray, num_gpus: np.ndarray, gpus_by_type: np.ndarray) -> None:
        self.T, self.s, self.G = throughput, num_gpus.astype("float64"), gpus_by_type.astype("float64")
        self.n, self.m = throughput.shape
        self.fits = (self.s[:, None] <= self.G[None, :]) & (throughput > 0)
        self.iso = (throughput * isolated_share(num_gpus, gpus_by_type) * self.fits).sum(axis=1)
        n, m = self.n, self.m
        rows = np.repeat(np.arange(n), m)
        cols = np.arange(n * m)
        per_job = sparse.csr_matrix((np.ones(n * m), (rows, cols)), shape=(n, n * m))  # Σ_k X[j, k] <= 1
        per_type = sparse.csr_matrix((np.repeat(self.s, m), (np.tile(np.arange(m), n), cols)),
                                     shape=(m, n * m))  # Σ_j s_j X[j, k] <= G_k
        self.capacity = sparse.vstack([per_job, per_type]).tocsr()
        self.capacity_rhs = np.concatenate([np.ones(n), self.G])
        self.bounds = [(0.0, 1.0 if f else 0.0) for f in self.fits.ravel()]
        self.throughput_rows = sparse.csr_matrix((throughput.ravel(), (rows, cols)), shape=(n, n * m))

    def _solve(self, c: np.ndarray, a_extra, b_extra: np.ndarray, extra_bounds: list) -> np.ndarray | None:
        extra = a_extra.shape[1] - self.n * self.m  # variables besides X (the objective's t or z)
        capacity = self.capacity if not extra else sparse.hstack(
            [self.capacity, sparse.csr_matrix((self.n + self.m, extra))])
        a = sparse.vstack([a_extra, capacity])
        b = np.concatenate([b_extra, self.capacity_rhs])
        result = linprog(c, A_ub=a.tocsr(), b_ub=b, bounds=self.bounds + extra_bounds, method="highs")
        if result.status == 2:  # infeasible
            return None
        if result.status != 0:
            raise PolicyError(f"gavel: the allocation LP failed ({result.message})")
        return result.x

    def _max_scaled_min(self, weights: np.ndarray) -> np.ndarray:
        """X maximising min_j weights_j × thr_j(X) (rows of jobs no type can hold are left out)."""
        n, m = self.n, self.m
        able = self.fits.any(axis=1)
        # t - w_j thr_j(X) <= 0 for every job that fits somewhere; variables: X (n m), t
        scaled = sparse.diags(np.where(able, weights, 0.0)) @ self.throughput_rows
        a = sparse.hstack([-scaled, sparse.csr_matrix(able.astype("float64")[:, None])])
        c = np.zeros(n * m + 1)
        c[-1] = -1.0
        x = self._solve(c, a, np.zeros(n), [(None, None)])
        return x[:-1].reshape(n, m)

    def max_min(self) -> np.ndarray:
        return self._max_scaled_min(1.0 / np.where(self.iso > 0, self.iso, 1.0))

    def makespan(self, remaining: np.ndarray) -> np.ndarray:
        return self._max_scaled_min(1.0 / np.maximum(remaining, 1e-12))

    def ftf(self, remaining: np.ndarray, elapsed: np.ndarray) -> np.ndarray:
        able = self.fits.any(axis=1) & (self.iso > 0)
        c_iso = elapsed + remaining / np.where(able, self.iso, 1.0)
        low = float(np.max(np.where(able, elapsed / c_iso, 0.0), initial=0.0))
        high = 1.0  # the equal share meets ρ = 1 by construction
        zero = np.zeros(self.n * self.m)

        def need(rho: float) -> np.ndarray:  # the least throughput of each job for ρ_j <= rho
            return np.where(able, remaining / np.maximum(rho * c_iso - elapsed, 1e-12), 0.0)

        for _ in range(FTF_STEPS):
            rho = (low + high) / 2
            if self._solve(zero, -self.throughput_rows, -need(rho), []) is None:
                low = rho
            else:
                high = rho
        # of the allocations meeting the least feasible ρ, the one of most total throughput (a
        # feasibility LP would return an arbitrary one, GPUs left idle included)
        best = self._solve(-self.T.ravel(), -self.throughput_rows, -need(high), [])
        return best.reshape(self.n, self.m)


class GavelPolicy(PreemptivePolicy):
    name = "gavel"

    def __init__(self, objective: str = "max_min", lease: float | str = 360.0, restart: float | str = 10.0,
                 storage_gbps: float | str = 2.0) -> None:
        super().__init__(lease, restart, storage_gbps)
        self.objective = choice("objective", objective, OBJECTIVES)
        self._received: np.ndarray | None = None  # (job, type): seconds each job was given on each type
        self._rounds: np.ndarray | None = None  # per job: rounds it has been present at
        self._cached: tuple[bytes, np.ndarray] | None = None  # max_min: (the jobs, X), reused while they stay

    def allocation(self, view, jobs: np.ndarray) -> np.ndarray:
        """X for ``jobs`` (indices) by this policy's objective, from the predicted throughputs."""
        if self.objective == "max_min":  # depends on the jobs and their predictions alone
            key = jobs.tobytes()
            if self._cached is not None and self._cached[0] == key:
                return self._cached[1]
        remaining = 1.0 - view.progress[jobs]
        throughput = 1.0 / np.maximum(view.predicted[jobs], 1e-6)  # a job of no predicted time: done at once
        lp = Allocation(throughput, view.num_gpus[jobs], view.total_by_type)
        if self.objective == "max_min":
            x = lp.max_min()
            self._cached = (key, x)
            return x
        if self.objective == "makespan":
            return lp.makespan(remaining)
        return lp.ftf(remaining, view.now - view.submit[jobs])

    def schedule(self, view) -> list[Placement | Preemption]:
        if not view.at_round:
            return []  # Gavel starts and moves jobs at rounds only
        if self._received is None or len(self._rounds) != len(view.submit):  # a new run
            self._received = np.zeros((len(view.submit), len(view.gpu_types)))
            self._rounds = np.zeros(len(view.submit), dtype=np.int64)
            self._cached = None
        jobs = np.array(sorted([*view.running, *view.waiting]), dtype=np.int64)
        x = self.allocation(view, jobs)
        rounds = self._rounds[jobs]
        share = self._received[jobs] / np.maximum(rounds * self.lease_seconds, 1e-12)[:, None]
        with np.errstate(divide="ignore", invalid="ignore"):
            priority = np.where(x > 1e-9, np.where(share > 0, x / share, np.inf), -np.inf)
        rows, cols = np.nonzero(priority > -np.inf)
        order = np.lexsort((cols, jobs[rows], -priority[rows, cols]))
        room = view.total_by_type.astype(np.int64).copy()
        need = view.num_gpus[jobs].tolist()
        given: dict[int, int] = {}
        for r, k in zip(rows[order].tolist(), cols[order].tolist()):
            job = int(jobs[r])
            if job not in given and room[k] >= need[r]:
                given[job] = k
                room[k] -= need[r]
                if not room.any():
                    break
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
        return {**super().describe(), "objective": self.objective}

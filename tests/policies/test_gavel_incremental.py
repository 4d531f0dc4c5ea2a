"""Gavel's fast paths against the from-scratch ones, on seeded random small cases: the ECOS data
built directly against CVXPY's compilation (entry for entry), its allocation against CVXPY's
(bit for bit), the compiled round against Gavel's loop as first written, and whole runs of the
fast policy against a policy that compiles with CVXPY and walks in Python."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scipy import sparse

from policies import gavel
from policies.gavel_rounds import PRIORITY_BEFORE_ANY_TIME, GavelRounds
from policies.registry import make_policy
from simulator.cluster import homogeneous_groups
from simulator.preemption import make_simulation
from simulator.timing import make_predictor
from tests.records import from_records


def _lp_case(rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Throughputs of a few magnitudes with zeros (a type a job cannot use), GPUs per job and
    per type; now and then every row alike (a degenerate optimum: Gavel's split matters)."""
    n, m = int(rng.integers(1, 25)), int(rng.integers(1, 5))
    throughput = rng.random((n, m)) * 10.0 ** rng.uniform(-6, 0, (n, 1))
    throughput[rng.random((n, m)) < 0.2] = 0.0
    if rng.random() < 0.2:
        throughput[:] = throughput[0]
    return throughput, rng.choice([1, 2, 4, 8], n), rng.integers(1, 30, m)


@pytest.mark.parametrize("seed", range(40))
def test_the_ecos_data_is_cvxpys_entry_for_entry(seed):
    cp = pytest.importorskip("cvxpy")
    throughput, s, g = _lp_case(np.random.default_rng(seed))
    n, m = throughput.shape
    coef, scale = gavel._max_min_perf_coefficients(throughput, s, g)
    x = cp.Variable((n, m))
    problem = cp.Problem(cp.Maximize(cp.min(cp.sum(cp.multiply(coef, x), axis=1))),
                         [x >= 0, cp.sum(cp.multiply(scale, x), axis=0) <= g.astype("float64"), cp.sum(x, axis=1) <= 1])
    data, _, _ = problem.get_problem_data(cp.ECOS)
    c, matrix, h = gavel.max_min_perf_ecos_data(throughput, s, g)
    assert data["A"] is None and data["dims"].zero == 0 and data["dims"].nonneg == matrix.shape[0]
    assert np.array_equal(data["c"], c) and np.array_equal(data["h"], h)
    theirs = data["G"]  # as CVXPY's ECOS interface hands it over: a csc_matrix of its arrays
    theirs = sparse.csc_matrix((theirs.data, theirs.indices, theirs.indptr), shape=theirs.shape)
    assert theirs.shape == matrix.shape
    for a, b in [(theirs.indptr, matrix.indptr), (theirs.indices, matrix.indices), (theirs.data, matrix.data)]:
        assert a.dtype == b.dtype and np.array_equal(a, b)


@pytest.mark.parametrize("seed", range(40))
def test_the_direct_ecos_allocation_is_cvxpys_bit_for_bit(seed):
    pytest.importorskip("cvxpy")
    throughput, s, g = _lp_case(np.random.default_rng(100 + seed))
    ours, theirs = gavel.max_min_perf_ecos(throughput, s, g), gavel.max_min_perf_cvxpy(throughput, s, g)
    assert (ours is None) == (theirs is None)
    assert ours is None or np.array_equal(ours, theirs)


def _reference_choose(book: GavelRounds, can_run: np.ndarray, num_gpus: np.ndarray, room: np.ndarray,
                      walk: list[int]) -> dict[int, int]:
    """Gavel's walk as first written here (numpy priorities, one Python loop per type)."""
    jobs = np.asarray(book.order, dtype=np.int64)
    if not len(jobs):
        return {}
    x = book.x[jobs]
    with np.errstate(divide="ignore", invalid="ignore"):
        fraction = np.where(book.worker_time > 0, book.job_time[jobs] / book.worker_time, 0.0)
        priority = np.where(fraction > 0, x / fraction, x * PRIORITY_BEFORE_ANY_TIME)
    priority = np.where(book.allocated[jobs, None] & (x != 0) & can_run[jobs], priority, 0.0)
    deficit = book.deficit[jobs]
    room = room.astype(np.int64).copy()
    taken: dict[int, int] = {}
    need = num_gpus[jobs].astype(np.int64)
    for k in walk:
        ranked = np.lexsort((np.arange(len(jobs)), -x[:, k], -deficit[:, k], -priority[:, k]))
        for r in ranked.tolist():
            if room[k] == 0:
                break
            job = int(jobs[r])
            if job in taken or not can_run[job, k] or need[r] > room[k]:
                continue
            room[k] -= need[r]
            taken[job] = k
    return {job: k for job, k in taken.items() if book.allocated[job]}


class ReferenceRounds(GavelRounds):
    """:class:`GavelRounds` with the accounting and the walk as first written (Python loops)."""

    def _account(self, now: float) -> None:
        for job, k in self.ran.items():
            spent = self.finished.get(job, now) - self.busy_end
            self.job_time[job, k] += spent
            self.worker_time[k] += spent
        self.busy_end = now

    def choose(self, can_run, num_gpus, room, walk) -> dict[int, int]:
        self.ran = _reference_choose(self, can_run, num_gpus, room, walk)
        jobs = np.fromiter(self.ran, dtype=np.int64, count=len(self.ran))
        self._ran(self.ran, jobs, np.fromiter(self.ran.values(), dtype=np.int64, count=len(self.ran)))
        return self.ran


def _random_book(rng: np.random.Generator) -> tuple[GavelRounds, np.ndarray, np.ndarray, np.ndarray, list[int]]:
    """A book part-way through a run: held jobs out of arrival order, ties in X, zero X, jobs
    outside the allocation, types with and without time, jobs that cannot run on some type."""
    n, m = int(rng.integers(1, 40)), int(rng.integers(1, 4))
    book = GavelRounds(360.0, 1920.0, n + 5, m)
    held = rng.permutation(n + 5)[:n]
    book.held[held] = True
    book.order = held.astype(np.int64)
    levels = np.array([0.0, 0.25, 0.5, 1.0])
    book.x[held] = np.where(rng.random((n, m)) < 0.5, levels[rng.integers(0, 4, (n, m))], rng.random((n, m)))
    book.allocated[held] = rng.random(n) < 0.85
    book.job_time[held] = np.where(rng.random((n, m)) < 0.3, 180.0, rng.random((n, m)) * 1e3)
    book.worker_time[:] = np.where(rng.random(m) < 0.2, 0.0, rng.random(m) * 1e4)
    book.deficit[held] = np.where(rng.random((n, m)) < 0.5, 0.0, rng.normal(0, 100, (n, m)))
    can_run = rng.random((n + 5, m)) < 0.9
    num_gpus = rng.choice([1, 2, 4, 8], n + 5)
    room = rng.integers(0, 20, m)
    return book, can_run, num_gpus, room, rng.permutation(m).tolist()


@pytest.mark.parametrize("seed", range(200))
def test_the_compiled_round_takes_the_jobs_gavels_loop_takes_in_its_order(seed):
    book, can_run, num_gpus, room, walk = _random_book(np.random.default_rng(seed))
    expected = _reference_choose(book, can_run, num_gpus, room, walk)
    got = book.choose(can_run, num_gpus, room, walk)
    assert list(got.items()) == list(expected.items())  # the order too: it orders the round's accounting


@pytest.mark.parametrize("seed", range(30))
def test_a_round_with_nan_keys_keeps_lexsorts_order(seed):
    """No NaN arises in a run, but should one, the compiled round orders it as lexsort does (last)."""
    rng = np.random.default_rng(1000 + seed)
    book, can_run, num_gpus, room, walk = _random_book(rng)
    held = np.flatnonzero(book.held)
    book.deficit[held] = np.where(rng.random(book.deficit[held].shape) < 0.3, np.nan, book.deficit[held])
    expected = _reference_choose(book, can_run, num_gpus, room, walk)
    assert list(book.choose(can_run, num_gpus, room, walk).items()) == list(expected.items())


def _trace(rng: np.random.Generator, types: list[str]) -> list[dict]:
    """Jobs arriving in bursts (resets with many jobs at once), of 1-4 GPUs, each on every type
    at its own speed, some unable to use a type, a few with identical run times (ties)."""
    jobs = []
    submit = 0.0
    for i in range(int(rng.integers(8, 30))):
        submit += float(rng.choice([0.0, rng.exponential(400.0)]))
        base = float(rng.choice([300.0, 1000.0]) if rng.random() < 0.3 else rng.uniform(60, 5000))
        runtimes = {t: base * float(rng.choice([1.0, rng.uniform(1, 3)])) for t in types}
        if len(types) > 1 and rng.random() < 0.2:
            runtimes[types[int(rng.integers(len(types)))]] = np.inf
        first = next(t for t in types if np.isfinite(runtimes[t]))
        jobs.append({"job_id": f"j{i}", "submit_s": submit, "num_gpus": int(rng.choice([1, 1, 2, 4])),
                     "duration_s": runtimes[first], "gpu_type": first,
                     **{f"runtime_s:{t}": v for t, v in runtimes.items()}})
    return jobs


def _records(jobs: list[dict], groups, spec: str, reference: bool, monkeypatch) -> pd.DataFrame:
    policy = make_policy(spec)
    if reference:
        start = policy._start_run

        def start_with_reference_rounds(view) -> None:
            start(view)
            policy._book = ReferenceRounds(policy.lease_seconds, policy.min_reset_s, len(view.submit),
                                           len(view.gpu_types))

        monkeypatch.setattr(policy, "_start_run", start_with_reference_rounds)
        monkeypatch.setattr(gavel, "max_min_perf_ecos", gavel.max_min_perf_cvxpy)
    result = make_simulation(from_records(jobs), homogeneous_groups(groups, "t"), policy, make_predictor("truth")).run()
    monkeypatch.undo()
    return result.records


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("spec", ["gavel", "gavel:objective=ftf,reset=600"])
def test_a_run_decides_as_the_from_scratch_policy_does(seed, spec, monkeypatch):
    pytest.importorskip("cvxpy")
    rng = np.random.default_rng(seed)
    groups = [("A100", 2, int(rng.integers(1, 3))), ("V100", 4, 1), ("T4", 1, int(rng.integers(1, 4)))]
    groups = groups[: int(rng.integers(1, 4))]
    jobs = _trace(rng, [g[0] for g in groups])
    fast = _records(jobs, groups, spec, False, monkeypatch)
    reference = _records(jobs, groups, spec, True, monkeypatch)
    pd.testing.assert_frame_equal(fast, reference, check_exact=True)

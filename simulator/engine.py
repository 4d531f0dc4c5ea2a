"""The simpy discrete-event engine: arrivals, policy calls coalesced per timestamp, completions.

Why: one place owns the semantics of DESIGN §5 — non-preemptive gang jobs on GPUs of one type,
policies planning with predicted times while jobs finish after their true times, jobs that no
placement could ever hold (too large for every type, or unable to run on every type large enough)
rejected up front, and per-job records identical for identical inputs. Where a job's GPUs go is
the run's placement rule (``consolidate``, ``spread``, ``tiresias``); in a bound run with its
communication model a multi-GPU job's run time is charged for the GPUs it gets
(:mod:`simulator.communication`).
"""

from __future__ import annotations

import gc
import math
import time
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
import simpy
from tqdm import tqdm

from policies.base import Placement, Policy, PolicyError, SchedulerView
from predictor.common.inputs import SimulationError
from simulator.allocation import ClusterState
from simulator.cluster import Cluster
from simulator.communication import PlacementTiming, check_placement
from simulator.timing import RuntimePredictor, true_runtimes
from traces.schema import ALLOWED_GPUS, ALLOWED_SEPARATOR, JobTrace


def sim_clock(seconds: float) -> str:
    """A simulated time as days and hours (replays span months)."""
    days, rest = divmod(max(0.0, seconds), 86400.0)
    return f"{int(days):,} d {rest / 3600:04.1f} h"


GC_THRESHOLD = 100_000  # allocations between collections of the youngest generation, during a replay


@dataclass
class SimulationResult:
    records: pd.DataFrame
    policy_seconds: float
    policy_calls: int
    wall_seconds: float
    events: int
    manifest: dict = field(default_factory=dict)
    busy_by_type: dict[str, float] | None = None  # GPU-seconds held per type, where jobs moved between types
    segments: pd.DataFrame | None = None  # a preemptive run's stretches on GPUs (simulator.preemption)
    rounds: int | None = None  # a preemptive run's round boundaries (None: not preemptive)


class Simulation:
    """Replay a job trace on a cluster under a non-preemptive policy, with predicted and true run
    times (a preemptive policy runs in :class:`simulator.preemption.PreemptiveSimulation`;
    :func:`simulator.preemption.make_simulation` picks the engine for a policy).

    simpy drives the clock with few events: one per distinct arrival time (the next one is
    scheduled when it fires), one per distinct completion time (jobs that end at the same instant
    share it), and one per online-feedback observation. The policy call of a timestamp is no event
    of its own: the callback of the last event queued for that timestamp runs it (``env.peek()``
    shows that no other event of the same time is left), which is exactly the moment a separate
    scheduling event, queued behind every event of that time, would run. Jobs that a policy call
    starts with a zero run time complete at the same timestamp, after the call, and their
    completion callbacks call the policy again, as before.
    """

    PREEMPTIVE = False  # this engine never suspends a job

    def __init__(self, trace: JobTrace, cluster: Cluster, policy: Policy, predictor: RuntimePredictor,
                 *, reference_type: str | None = None, progress: bool = False, observe_after: int | None = None,
                 timing: PlacementTiming | None = None, placement: str = "consolidate"):
        if policy.preemptive and not self.PREEMPTIVE:
            raise TypeError(f"policy {policy.name!r} is preemptive: run it with simulator.preemption.make_simulation")
        self.trace, self.cluster, self.policy, self.predictor = trace, cluster, policy, predictor
        self.state = ClusterState(cluster)
        jobs = trace.jobs
        # Where a multi-GPU job runs changes its run time (simulator.communication): None keeps
        # every job at its truth-matrix time, wherever its GPUs are.
        self.timing = timing
        self.placement = check_placement(placement)
        self.slowdown = np.ones(len(jobs))  # each job's step at its GPUs ÷ packed (1: one GPU, or no timing)
        self._spread = (np.zeros(len(jobs), dtype=bool) if placement == "consolidate" else
                        np.ones(len(jobs), dtype=bool) if placement == "spread" else
                        ~self._skewed(jobs))
        self.reference_type = reference_type or cluster.reference_type()
        self.truth = true_runtimes(jobs, cluster.gpu_types, self.reference_type)
        runnable = np.isfinite(self.truth)  # +inf: the trace says the job cannot run on that type
        self.predicted = predictor.runtimes(jobs, cluster.gpu_types, self.truth)
        if self.predicted.shape != self.truth.shape or not np.all(np.isfinite(self.predicted[runnable])):
            raise SimulationError(f"predictor {predictor.name!r} returned a bad run-time matrix")
        if not runnable.all():  # a stated constraint, not an estimate: every policy sees it as +inf
            self.predicted = np.where(runnable, self.predicted, np.inf)
        self.initial_predicted = self.predicted.copy()
        # Online feedback: after K iterations on a type, the policy's estimate becomes the truth.
        self.observe_time = None
        if observe_after is not None:
            if "iterations" not in jobs.columns:
                raise SimulationError("observe-after needs a workload bound to model configs (iterations per job)")
            self.observe_time = observe_after * self.truth / jobs["iterations"].to_numpy(dtype="float64")[:, None]
        self.progress = progress
        n = len(jobs)
        self.start = np.full(n, np.nan)
        self.end = np.full(n, np.nan)
        self.type_of = np.full(n, -1, dtype=np.int64)
        self.gpus_of: list[tuple[int, ...]] = [()] * n
        num = jobs["num_gpus"].to_numpy()
        holds = num[:, None] <= self.state.total_by_type[None, :]
        self.rejected = ~(holds & runnable).any(axis=1)
        self.reject_reason = np.full(n, "", dtype=object)
        for i in np.flatnonzero(self.rejected):
            self.reject_reason[i] = self._reject_reason(i, int(num[i]), holds[i], runnable[i])
        self.view = SchedulerView(
            now=0.0, gpu_types=cluster.gpu_types, type_index=self.state.type_index,
            predicted=self.predicted, submit=jobs["submit_s"].to_numpy(), num_gpus=num,
            deadline=jobs["deadline_s"].to_numpy(), users=jobs["user"].to_numpy(dtype=object),
            job_ids=jobs["job_id"].to_numpy(dtype=object), waiting={}, running={},
            start=self.start, type_of=self.type_of, gpu_type=self.state.gpu_type, gpu_job=self.state.gpu_job,
            free_by_type=self.state.free_by_type, total_by_type=self.state.total_by_type,
            quantiles=self._quantile)
        if timing is not None:
            self.view.placement_estimate = self._placement_estimate
            # how the predictor sees communication against the model (its error on it, if any)
            self._comm_scale = np.asarray(predictor.comm_scale(jobs, cluster.gpu_types), dtype="float64")
        self._quantiles: dict[float, np.ndarray] = {}  # q -> (job, type) seconds, kept current
        self._observed = np.zeros(self.truth.shape, dtype=bool)
        self.policy_seconds = 0.0
        self.policy_calls = 0
        self.events = 0
        self._pending = False  # something changed at the current timestamp: the policy is due
        self._new: list[int] = []
        self._bar: tqdm | None = None
        self._env: simpy.Environment | None = None

    def _reject_reason(self, job: int, need: int, holds: np.ndarray, runnable: np.ndarray) -> str:
        """Why no GPU type of the cluster can take ``job``: too few GPUs of every type, or the
        trace says it cannot run on the types that would hold it."""
        types = self.cluster.gpu_types
        largest = int(self.state.total_by_type.max())
        if not holds.any():
            return f"needs {need} GPUs of one type; the largest pool has {largest}"
        cannot = ", ".join(t for t, h, r in zip(types, holds, runnable) if h and not r)
        if not runnable.any():
            allowed = ""
            only = self.trace.jobs[ALLOWED_GPUS].iloc[job] if ALLOWED_GPUS in self.trace.jobs.columns else ""
            if only:
                allowed = f"; it may run only on {only.replace(ALLOWED_SEPARATOR, ', ')}"
            return f"the trace says it cannot run on any GPU type of the cluster ({cannot}){allowed}"
        can = [t for t, r in zip(types, runnable) if r]
        most = max(self.cluster.gpus_of_type(t) for t in can)
        return (f"needs {need} GPUs of one type it can run on: {', '.join(can)} hold at most {most}, and the "
                f"trace says it cannot run on {cannot}")

    def _quantile(self, q: float) -> np.ndarray:
        """The view's q-quantile run times: the predictions times the predictor's stated factors,
        the truth where online feedback measured it; one array per q, kept current."""
        matrix = self._quantiles.get(q)
        if matrix is None:
            factors = np.asarray(self.predictor.quantile_factors(q, self.trace.jobs, self.cluster.gpu_types),
                                 dtype="float64")
            if factors.shape != self.predicted.shape or not np.all(np.isfinite(factors) & (factors > 0)):
                raise SimulationError(f"predictor {self.predictor.name!r} gave no finite positive {q:g}-quantile "
                                      "for every job and GPU type")
            matrix = np.where(self._observed, self.truth, self.predicted * factors)
            self._quantiles[q] = matrix
        return matrix

    # -- simpy callbacks ---------------------------------------------------------------------------
    def _arrive(self, _ev) -> None:
        """Jobs of the next arrival time join the waiting set; the following arrival time is queued."""
        env = self._env
        now = env.now
        bounds, times, b = self._arrival_bounds, self._arrival_times, self._arrival_batch
        jobs = self._arrival_order[bounds[b]:bounds[b + 1]]
        b += 1
        while b < len(times) and not times[b] > now:  # the clock already passed that arrival time
            jobs += self._arrival_order[bounds[b]:bounds[b + 1]]
            b += 1
        if b < len(times):
            env.timeout(times[b] - now).callbacks.append(self._arrive)
        self._arrival_batch = b
        waiting = self.view.waiting
        for job in jobs:
            waiting[job] = None
        self._new += jobs
        self.events += len(jobs)
        self._pending = True
        self._after_event()

    def _after_event(self) -> None:
        """Call the policy if something changed at this timestamp and no other event of it is left
        (the moment a scheduling event queued behind every event of the timestamp would run)."""
        if self._pending and self._env.peek() > self._env.now:
            self._schedule()

    def _schedule(self) -> None:
        """The policy's turn at this timestamp: new arrivals, a decision, and the jobs it starts."""
        self._pending = False
        view = self.view
        view.now = now = self._env.now
        waiting = view.waiting
        if not (self._new or waiting):
            return  # nothing for the policy to see or decide
        placements = self._decide(view)
        if not placements:
            return
        env, occupy, start, timing = self._env, self._occupy, self.start, self.timing
        truth, num_types = self._truth, self._num_types
        ending, observe = self._ending, self.observe_time
        for p in placements:
            job, k = occupy(p, now)
            start[job] = now
            duration = truth[job * num_types + k]
            if timing is not None and self._num[job] > 1:
                duration *= self._charge(job, k)
            end = now + duration  # the time simpy gives the timeout below
            if end in ending:
                ending[end].append(job)
            else:  # the first job to end at that instant: one event for all of them
                ending[end] = jobs = [job]
                env.timeout(duration, jobs).callbacks.append(self._complete)
            if observe is not None and observe[job, k] < self.truth[job, k]:
                seen = env.timeout(float(observe[job, k]))
                seen.callbacks.append(lambda _ev, job=job, k=k: self._observe(job, k))

    def _decide(self, view: SchedulerView) -> list:
        """The policy's turn: new arrivals first, then its decisions (when a job waits, or at a
        preemptive engine's round), timed."""
        t0 = time.perf_counter()
        if self._new:
            self.policy.on_arrival(view, self._new)
            self._new = []
        decisions = []
        if view.waiting or view.at_round:
            decisions = self.policy.schedule(view)
            self.policy_calls += 1
        self.policy_seconds += time.perf_counter() - t0
        return decisions

    def _occupy(self, p: Placement, now: float) -> tuple[int, int]:
        """Start placement ``p``, checked (a bad placement is a PolicyError): the job's GPUs are
        claimed and it moves from waiting to running. Returns (job, GPU type index)."""
        state, waiting = self.state, self.view.waiting
        job = int(p.job)
        if job not in waiting:
            raise PolicyError(f"policy {self.policy.name!r} started job {job} which is not waiting")
        k = state.type_index.get(p.gpu_type)
        if k is None:
            raise PolicyError(f"policy {self.policy.name!r} chose GPU type {p.gpu_type!r}, not in the cluster")
        if self._truth[job * self._num_types + k] == math.inf:
            raise PolicyError(f"policy {self.policy.name!r} placed job {job} on {p.gpu_type}, where the trace says "
                              "it cannot run (its predicted run time there is +inf)")
        n = self._num[job]
        if p.gpu_ids is not None:
            if len(p.gpu_ids) != n:
                raise PolicyError(f"job {job} needs {n} GPUs, policy gave {len(p.gpu_ids)}")
            ids = state.claim(k, tuple(int(g) for g in p.gpu_ids))
        elif state.free_by_type[k] < n:
            raise PolicyError(f"policy {self.policy.name!r} placed job {job} ({n} GPUs) on "
                              f"{p.gpu_type} with only {state.free_by_type[k]} free")
        elif n > 1 and self._spread[job]:
            ids = state.take(k, self._plan(job, k, n))
        else:
            ids = state.allocate(k, n)
        gpu_job = state.gpu_job
        for g in ids:
            gpu_job[g] = job
        del waiting[job]
        self.view.running[job] = (now, k)
        self.type_of[job] = k
        self.gpus_of[job] = ids
        return job, k

    def _plan(self, job: int, k: int, n: int) -> list[tuple[int, int]]:
        """The (node, GPUs) the run's placement rule gives ``job`` on type k now, taking nothing."""
        state = self.state
        if not self._spread[job] or n == 1:
            return state.best_fit(k, n)
        return state.spread(k, n) if self.placement == "spread" else state.first_fit(k, n)

    def _placement_estimate(self, job: int, k: int) -> tuple[float, float] | None:
        """The view's placement estimate (:meth:`policies.base.SchedulerView.starts_now`): the
        job's predicted run time at the GPUs the rule gives it now, and when a packed placement is
        predicted to free; None where placement does not matter or the job does not fit now."""
        n = self._num[job]
        if n <= 1 or self.state.free_by_type[k] < n or self._spread[job]:
            return None  # one GPU; no room now (the policy's own check); a rule that never packs it
        return self.timing.estimate(job, k, self._plan(job, k, n), self.view, float(self._comm_scale[job, k]))

    def _charge(self, job: int, k: int) -> float:
        """The job's step at the GPUs it got ÷ its step packed on type k, kept for its records."""
        factor = self.timing.slowdown(job, k, self.gpus_of[job])
        self.slowdown[job] = factor
        return factor

    def _skewed(self, jobs: pd.DataFrame) -> np.ndarray:
        """Tiresias' rule: which jobs must be consolidated (a skewed model, one large gradient)."""
        if self.timing is None:
            raise SimulationError("placement 'tiresias' needs jobs bound to model configs (their gradients)")
        return self.timing.skewed()

    def _observe(self, job: int, k: int) -> None:
        """The job has run K iterations on type k: its measured time replaces the prediction."""
        self._observed[job, k] = True
        for matrix in self._quantiles.values():  # a measured time has no uncertainty left
            matrix[job, k] = self.truth[job, k]
        if self.predicted[job, k] != self.truth[job, k]:
            self.predicted[job, k] = self.truth[job, k]
            self.events += 1
            self._pending = True
        self._after_event()

    def _complete(self, ev: simpy.Event) -> None:
        """Jobs end (all those whose end is this instant); their GPUs are free."""
        now = self._env.now
        jobs = ev.value
        del self._ending[now]
        running, release, end, gpus_of = self.view.running, self.state.release, self.end, self.gpus_of
        for job in jobs:
            release(running.pop(job)[1], gpus_of[job])
            end[job] = now
        self.events += len(jobs)
        if self._bar is not None:
            before = self._bar.n
            self._bar.update(len(jobs))
            if before // 512 != self._bar.n // 512:  # the simulated clock beside jobs done, now and then
                self._bar.set_postfix_str(f"simulated clock {sim_clock(now)}", refresh=False)
        self._pending = True
        self._after_event()

    # -- driver ----------------------------------------------------------------------------------
    def run(self) -> SimulationResult:
        wall0 = time.perf_counter()
        admitted = int((~self.rejected).sum())
        first = float(self.view.submit[~self.rejected].min()) if admitted else 0.0
        env = self._env = simpy.Environment(initial_time=first)
        self._num = self.view.num_gpus.tolist()
        self._num_types = self.truth.shape[1]
        self._truth = self.truth.ravel().tolist()  # Python floats: read once per started job
        self._ending: dict[float, list[int]] = {}  # completion time -> jobs ending then (one event)
        # Arrival batches: runs of equal submit times in trace order (the trace is sorted by submit time).
        order = np.flatnonzero(~self.rejected)
        submit = self.view.submit[order]
        cuts = np.flatnonzero(submit[1:] != submit[:-1]) + 1
        self._arrival_order = order.tolist()
        self._arrival_bounds = [0, *cuts.tolist(), len(order)]
        self._arrival_times = submit[self._arrival_bounds[:-1]].tolist() if len(order) else []
        self._arrival_batch = 0
        self._bar = tqdm(total=admitted, desc=f"simulating {self.policy.name}", unit="job",
                         leave=False) if self.progress else None
        if self._arrival_times:
            t = self._arrival_times[0]
            env.timeout(t - first if t > first else 0.0).callbacks.append(self._arrive)
        self._before_replay()
        # The replay allocates a few short-lived containers per event; a collection of the youngest
        # generation every 700 allocations (the default) costs ~8 % of a FIFO replay, for no
        # garbage (cycles are rare here). Collect less often while the replay runs.
        thresholds = gc.get_threshold()
        gc.set_threshold(max(thresholds[0], GC_THRESHOLD), *thresholds[1:])
        try:
            env.run()
        finally:
            gc.set_threshold(*thresholds)
        if self._bar is not None:
            self._bar.close()
        if self.view.waiting:
            stuck = list(self.view.waiting)[:5]
            raise SimulationError(
                f"policy {self.policy.name!r} left {len(self.view.waiting)} job(s) waiting on an idle "
                f"cluster (first: {[self.view.job_ids[j] for j in stuck]})")
        return SimulationResult(self._records(), self.policy_seconds, self.policy_calls,
                                time.perf_counter() - wall0, self.events, busy_by_type=self._busy_by_type(),
                                segments=self._segments_frame(), rounds=self._rounds_taken())

    def _before_replay(self) -> None:
        """Queue what the replay needs besides arrivals (the preemptive engine's first round)."""

    def _busy_by_type(self) -> dict[str, float] | None:
        """GPU-seconds held per type when a job's records cannot tell it (None: they can)."""
        return None

    def _rounds_taken(self) -> int | None:
        """Round boundaries the policy was called at (a preemptive run's; None here)."""
        return None

    def _segments_frame(self) -> pd.DataFrame | None:
        """Each stretch a job held GPUs, where a job may hold them more than once (None: once)."""
        return None

    def _records(self) -> pd.DataFrame:
        jobs = self.trace.jobs
        k = self.type_of
        rows = np.arange(len(jobs))
        placed = k >= 0
        pred = np.where(placed, self.initial_predicted[rows, np.where(placed, k, 0)], np.nan)
        true = np.where(placed, self.truth[rows, np.where(placed, k, 0)] * self.slowdown, np.nan)
        deadline = jobs["deadline_s"].to_numpy()
        end = self.end
        with np.errstate(invalid="ignore"):
            tardiness = np.where(np.isnan(deadline), 0.0, np.maximum(0.0, end - deadline))
        tardiness = np.where(placed, tardiness, np.nan)
        sets = {g: i for i, g in enumerate(dict.fromkeys(self.gpus_of))}  # jobs often share a GPU set: join each once
        gpu_codes = np.fromiter(map(sets.__getitem__, self.gpus_of), np.intp, len(jobs))
        reasons: dict[str, int] = {"": 0}
        reason_codes = np.zeros(len(jobs), np.intp)
        for i in np.flatnonzero(self.rejected):
            reason_codes[i] = reasons.setdefault(self.reject_reason[i], len(reasons))
        ids = jobs["job_id"]
        records = pd.DataFrame({
            "job_id": (ids.astype(TEXT) if pd.api.types.is_string_dtype(ids) else ids.to_numpy(dtype=object)),
            "status": text_column(["completed", "rejected"], self.rejected.astype(np.intp)),
            "submit": jobs["submit_s"].to_numpy(),
            "start": self.start,
            "end": end,
            "gpu_type": text_column(self.cluster.gpu_types + [""], k),  # -1 (never started): ""
            "num_gpus": jobs["num_gpus"].to_numpy(),
            "deadline": deadline,
            "predicted_runtime": pred,
            "true_runtime": true,
            "queueing_delay": self.start - jobs["submit_s"].to_numpy(),
            "jct": end - jobs["submit_s"].to_numpy(),
            "tardiness": tardiness,
            "gpu_ids": text_column([",".join(map(str, g)) for g in sets], gpu_codes),
            "reason": text_column(list(reasons), reason_codes),
            "line": jobs["line"].to_numpy(),
        }, index=pd.RangeIndex(len(jobs)))
        if self.timing is not None:  # seconds a job's GPUs spent on exposed communication
            records["communication_s"] = true - np.where(placed, self.timing.compute_runtime(np.where(placed, k, 0)),
                                                         np.nan)
        return records


# The dtype pandas gives a column of Python or numpy strings (``str`` from pandas 3, object before).
TEXT = pd.DataFrame({"text": np.array([""])})["text"].dtype


def text_column(labels: list[str], codes: np.ndarray):
    """``labels[codes]`` (numpy indexing: -1 is the last label) as the text column pandas would make
    of those strings, without building one string object per row."""
    return pd.array(labels, dtype=TEXT).take(codes)

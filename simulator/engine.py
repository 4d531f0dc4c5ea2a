"""The simpy discrete-event engine: arrivals, policy calls coalesced per timestamp, completions.

Why: one place owns the semantics of DESIGN §5 — non-preemptive gang jobs on GPUs of one type,
policies planning with predicted times while jobs finish after their true times, jobs that no
placement could ever hold rejected up front, and per-job records identical for identical inputs.
"""

from __future__ import annotations

import heapq
import time
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
import simpy
from tqdm import tqdm

from policies.base import Placement, Policy, PolicyError
from simulator.cluster import Cluster
from simulator.timing import Predictor, true_runtimes
from traces.schema import JobTrace


def sim_clock(seconds: float) -> str:
    """A simulated time as days and hours (replays span months)."""
    days, rest = divmod(max(0.0, seconds), 86400.0)
    return f"{int(days):,} d {rest / 3600:04.1f} h"


class SimulationError(RuntimeError):
    """The run could not finish (e.g. a policy left jobs waiting on an idle cluster)."""


class ClusterState:
    """Free GPUs per node, and the allocation rule for gang jobs.

    Per-event work is Python-level and O(log nodes): node free counts in lists, and per (type,
    free count) a heap of node ids (lazy deletion: an entry is live while the node still has that
    many free), so best fit is a lookup, not a scan of every node of the type.
    """

    def __init__(self, cluster: Cluster):
        self.cluster = cluster
        self.types = cluster.gpu_types
        self.type_index = {t: k for k, t in enumerate(self.types)}
        sizes = [n.num_gpus for n in cluster.nodes]
        self.node_type = np.array([self.type_index[n.gpu_type] for n in cluster.nodes])
        self.node_type_list = self.node_type.tolist()
        self.node_free = list(sizes)
        self.type_nodes = [np.flatnonzero(self.node_type == k) for k in range(len(self.types))]
        self.free_by_type = np.array([cluster.gpus_of_type(t) for t in self.types], dtype=np.int64)
        self.total_by_type = self.free_by_type.copy()
        first = np.concatenate([[0], np.cumsum(sizes)])
        self.gpu_node = np.repeat(np.arange(len(cluster.nodes)), sizes)
        self.gpu_node_list = self.gpu_node.tolist()
        # free GPU ids per node, kept so that the lowest ids are handed out first
        self.free_ids: list[list[int]] = [list(range(first[i + 1] - 1, first[i] - 1, -1))
                                          for i in range(len(cluster.nodes))]
        self.gpu_busy = [False] * cluster.total_gpus
        self.gpu_type = self.node_type[self.gpu_node]
        self.gpu_job = np.full(cluster.total_gpus, -1, dtype=np.int64)  # running job per GPU, -1 = idle
        self.max_node = max(sizes, default=0)
        self._by_free: dict[tuple[int, int], list[int]] = {}
        for node, free in enumerate(sizes):
            self._by_free.setdefault((self.node_type_list[node], free), []).append(node)  # ascending: a heap

    def _best_fit(self, type_k: int, n: int) -> int | None:
        """The node of the type with the fewest free GPUs >= n (lowest id among equals)."""
        for free in range(n, self.max_node + 1):
            heap = self._by_free.get((type_k, free))
            while heap and self.node_free[heap[0]] != free:
                heapq.heappop(heap)  # stale: the node's free count changed since
            if heap:
                return heap[0]
        return None

    def _set_free(self, node: int, free: int) -> None:
        self.node_free[node] = free
        if free:  # best fit never asks for full nodes
            heapq.heappush(self._by_free.setdefault((self.node_type_list[node], free), []), node)

    def allocate(self, type_k: int, n: int) -> tuple[int, ...]:
        best = self._best_fit(type_k, n)
        if best is not None:
            chosen = [(best, n)]
        else:  # across nodes: the fullest-free first (ties: lower id), as few nodes as possible
            nodes = self.type_nodes[type_k]
            free = np.array([self.node_free[i] for i in nodes])
            chosen = []
            need = n
            for i in np.argsort(-free, kind="stable"):
                if need == 0:
                    break
                take = int(min(free[i], need))
                if take:
                    chosen.append((int(nodes[i]), take))
                    need -= take
            if need:
                raise PolicyError(f"not enough free {self.types[type_k]} GPUs for a {n}-GPU job")
        ids: list[int] = []
        for node, take in chosen:
            pool = self.free_ids[node]
            ids.extend(reversed(pool[-take:]))
            del pool[-take:]
        return self._mark(type_k, ids)

    def claim(self, type_k: int, gpu_ids: tuple[int, ...]) -> tuple[int, ...]:
        for g in gpu_ids:
            if not 0 <= g < len(self.gpu_node_list) or self.node_type_list[self.gpu_node_list[g]] != type_k:
                raise PolicyError(f"GPU {g} is not a {self.types[type_k]} GPU")
            if self.gpu_busy[g]:
                raise PolicyError(f"GPU {g} is already busy")
        if len(set(gpu_ids)) != len(gpu_ids):
            raise PolicyError(f"GPU ids repeat in {gpu_ids}")
        for g in gpu_ids:
            self.free_ids[self.gpu_node_list[g]].remove(g)
        return self._mark(type_k, list(gpu_ids))

    def _mark(self, type_k: int, ids: list[int]) -> tuple[int, ...]:
        for g in ids:
            node = self.gpu_node_list[g]
            self._set_free(node, self.node_free[node] - 1)
            self.gpu_busy[g] = True
        self.free_by_type[type_k] -= len(ids)
        return tuple(ids)

    def release(self, type_k: int, ids: tuple[int, ...]) -> None:
        for g in ids:
            node = self.gpu_node_list[g]
            self._set_free(node, self.node_free[node] + 1)
            pool = self.free_ids[node]
            pool.append(g)
            if len(pool) > 1 and pool[-2] < g:  # keep descending order so pops give low ids
                pool.sort(reverse=True)
            self.gpu_busy[g] = False
            self.gpu_job[g] = -1
        self.free_by_type[type_k] += len(ids)


@dataclass
class SchedulerView:
    """What a policy may look at: the clock, waiting and running jobs, free GPUs, and *predicted*
    run times. True run times are deliberately absent."""

    now: float
    gpu_types: list[str]
    type_index: dict[str, int]
    predicted: np.ndarray            # seconds, (job, type)
    submit: np.ndarray
    num_gpus: np.ndarray
    deadline: np.ndarray             # NaN = none
    users: np.ndarray
    job_ids: np.ndarray
    waiting: dict[int, None]         # job indices in arrival order
    running: dict[int, tuple[float, int]]  # job -> (start, type index)
    start: np.ndarray                # start time per job (NaN until started)
    type_of: np.ndarray              # GPU type index per started job (-1 until started)
    state: ClusterState
    cluster: Cluster

    @property
    def free_by_type(self) -> np.ndarray:
        """Free GPUs per type (index = position in ``gpu_types``). Copy it before planning."""
        return self.state.free_by_type

    @property
    def total_by_type(self) -> np.ndarray:
        return self.state.total_by_type

    def estimate(self, job: int, gpu_type: str) -> float:
        return float(self.predicted[job, self.type_index[gpu_type]])

    def predicted_end(self, job: int) -> float:
        """When a running job is expected to finish by the prediction, never earlier than now: a job
        that overran its prediction is expected to end any moment."""
        start, k = self.running[job]
        return max(self.now, start + float(self.predicted[job, k]))

    def gpu_available_at(self) -> np.ndarray:
        """Per GPU, when it is expected to be free (now for idle GPUs), by the predictions."""
        jobs = self.state.gpu_job
        busy = jobs >= 0
        avail = np.full(len(jobs), self.now)
        j = jobs[busy]
        avail[busy] = np.maximum(self.now, self.start[j] + self.predicted[j, self.type_of[j]])
        return avail


@dataclass
class SimulationResult:
    records: pd.DataFrame
    policy_seconds: float
    policy_calls: int
    wall_seconds: float
    events: int
    manifest: dict = field(default_factory=dict)


class Simulation:
    """Replay a job trace on a cluster under a policy, with predicted and true run times."""

    def __init__(self, trace: JobTrace, cluster: Cluster, policy: Policy, predictor: Predictor,
                 *, reference_type: str | None = None, progress: bool = False, observe_after: int | None = None):
        self.trace, self.cluster, self.policy, self.predictor = trace, cluster, policy, predictor
        self.state = ClusterState(cluster)
        jobs = trace.jobs
        self.reference_type = reference_type or max(cluster.gpu_types, key=cluster.gpus_of_type)
        self.truth = true_runtimes(jobs, cluster.gpu_types, self.reference_type)
        self.predicted = predictor.runtimes(jobs, cluster.gpu_types, self.truth)
        if self.predicted.shape != self.truth.shape or not np.all(np.isfinite(self.predicted)):
            raise SimulationError(f"predictor {predictor.name!r} returned a bad run-time matrix")
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
        largest = int(self.state.total_by_type.max())
        num = jobs["num_gpus"].to_numpy()
        self.rejected = num > largest
        self.reject_reason = np.where(
            self.rejected, [f"needs {g} GPUs of one type; the largest pool has {largest}" for g in num], "")
        self.view = SchedulerView(
            now=0.0, gpu_types=cluster.gpu_types, type_index=self.state.type_index,
            predicted=self.predicted, submit=jobs["submit_s"].to_numpy(), num_gpus=num,
            deadline=jobs["deadline_s"].to_numpy(), users=jobs["user"].to_numpy(dtype=object),
            job_ids=jobs["job_id"].to_numpy(dtype=object), waiting={}, running={},
            start=self.start, type_of=self.type_of,
            state=self.state, cluster=cluster)
        self.policy_seconds = 0.0
        self.policy_calls = 0
        self.events = 0
        self._pending = False
        self._new: list[int] = []
        self._bar: tqdm | None = None

    # -- simpy processes and callbacks -------------------------------------------------------
    def _arrivals(self, env: simpy.Environment):
        submit = self.view.submit
        order = np.flatnonzero(~self.rejected)  # trace is sorted by submit time
        i = 0
        while i < len(order):
            t = submit[order[i]]
            if t > env.now:
                yield env.timeout(t - env.now)
            while i < len(order) and submit[order[i]] == t:
                job = int(order[i])
                self.view.waiting[job] = None
                self._new.append(job)
                self.events += 1
                i += 1
            self._request_schedule(env)

    def _request_schedule(self, env: simpy.Environment) -> None:
        if not self._pending:
            self._pending = True
            ev = env.event()
            ev.callbacks.append(lambda _ev: self._schedule(env))
            ev.succeed()  # runs after every event already queued for this timestamp

    def _schedule(self, env: simpy.Environment) -> None:
        self._pending = False
        view = self.view
        view.now = env.now
        t0 = time.perf_counter()
        if self._new:
            self.policy.on_arrival(view, self._new)
            self._new = []
        placements: list[Placement] = []
        if view.waiting:
            placements = self.policy.schedule(view)
            self.policy_calls += 1
        self.policy_seconds += time.perf_counter() - t0
        for p in placements:
            self._start(env, p)

    def _start(self, env: simpy.Environment, p: Placement) -> None:
        job = int(p.job)
        if job not in self.view.waiting:
            raise PolicyError(f"policy {self.policy.name!r} started job {job} which is not waiting")
        k = self.state.type_index.get(p.gpu_type)
        if k is None:
            raise PolicyError(f"policy {self.policy.name!r} chose GPU type {p.gpu_type!r}, not in the cluster")
        n = int(self.view.num_gpus[job])
        if p.gpu_ids is not None:
            if len(p.gpu_ids) != n:
                raise PolicyError(f"job {job} needs {n} GPUs, policy gave {len(p.gpu_ids)}")
            ids = self.state.claim(k, tuple(int(g) for g in p.gpu_ids))
        else:
            if self.state.free_by_type[k] < n:
                raise PolicyError(f"policy {self.policy.name!r} placed job {job} ({n} GPUs) on "
                                  f"{p.gpu_type} with only {self.state.free_by_type[k]} free")
            ids = self.state.allocate(k, n)
        for g in ids:
            self.state.gpu_job[g] = job
        del self.view.waiting[job]
        self.view.running[job] = (env.now, k)
        self.start[job], self.type_of[job], self.gpus_of[job] = env.now, k, ids
        done = env.timeout(float(self.truth[job, k]))
        done.callbacks.append(lambda _ev, job=job: self._complete(env, job))
        if self.observe_time is not None and self.observe_time[job, k] < self.truth[job, k]:
            seen = env.timeout(float(self.observe_time[job, k]))
            seen.callbacks.append(lambda _ev, job=job, k=k: self._observe(env, job, k))

    def _observe(self, env: simpy.Environment, job: int, k: int) -> None:
        """The job has run K iterations on type k: its measured time replaces the prediction."""
        if self.predicted[job, k] != self.truth[job, k]:
            self.predicted[job, k] = self.truth[job, k]
            self.events += 1
            self._request_schedule(env)

    def _complete(self, env: simpy.Environment, job: int) -> None:
        _, k = self.view.running.pop(job)
        self.state.release(k, self.gpus_of[job])
        self.end[job] = env.now
        self.events += 1
        if self._bar is not None:
            self._bar.update(1)
            if self._bar.n % 512 == 0:  # the simulated clock beside jobs done; cheap enough per 512
                self._bar.set_postfix_str(f"simulated clock {sim_clock(env.now)}", refresh=False)
        self._request_schedule(env)

    # -- driver ----------------------------------------------------------------------------------
    def run(self) -> SimulationResult:
        wall0 = time.perf_counter()
        admitted = int((~self.rejected).sum())
        first = float(self.view.submit[~self.rejected].min()) if admitted else 0.0
        env = simpy.Environment(initial_time=first)
        self._bar = tqdm(total=admitted, desc=f"simulating {self.policy.name}", unit="job",
                         leave=False) if self.progress else None
        env.process(self._arrivals(env))
        env.run()
        if self._bar is not None:
            self._bar.close()
        if self.view.waiting:
            stuck = list(self.view.waiting)[:5]
            raise SimulationError(
                f"policy {self.policy.name!r} left {len(self.view.waiting)} job(s) waiting on an idle "
                f"cluster (first: {[self.view.job_ids[j] for j in stuck]})")
        return SimulationResult(self._records(), self.policy_seconds, self.policy_calls,
                                time.perf_counter() - wall0, self.events)

    def _records(self) -> pd.DataFrame:
        jobs = self.trace.jobs
        k = self.type_of
        rows = np.arange(len(jobs))
        placed = k >= 0
        types = np.array(self.cluster.gpu_types + [""], dtype=object)
        pred = np.where(placed, self.initial_predicted[rows, np.where(placed, k, 0)], np.nan)
        true = np.where(placed, self.truth[rows, np.where(placed, k, 0)], np.nan)
        deadline = jobs["deadline_s"].to_numpy()
        end = self.end
        with np.errstate(invalid="ignore"):
            tardiness = np.where(np.isnan(deadline), 0.0, np.maximum(0.0, end - deadline))
        tardiness = np.where(placed, tardiness, np.nan)
        return pd.DataFrame({
            "job_id": jobs["job_id"].to_numpy(dtype=object),
            "status": np.where(self.rejected, "rejected", "completed"),
            "submit": jobs["submit_s"].to_numpy(),
            "start": self.start,
            "end": end,
            "gpu_type": types[k],
            "num_gpus": jobs["num_gpus"].to_numpy(),
            "deadline": deadline,
            "predicted_runtime": pred,
            "true_runtime": true,
            "queueing_delay": self.start - jobs["submit_s"].to_numpy(),
            "jct": end - jobs["submit_s"].to_numpy(),
            "tardiness": tardiness,
            "gpu_ids": [",".join(map(str, g)) for g in self.gpus_of],
            "reason": self.reject_reason,
            "line": jobs["line"].to_numpy(),
        })

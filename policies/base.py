"""The policy contract: what a scheduling policy sees (:class:`SchedulerView`) and what it returns.

Why: the engine must not care which policy runs, and policies must never see true run times —
only the predictor's estimates exposed through the scheduler view. The contract lives here, below
the engine: the engine fills the view and keeps its arrays current; policies only read it.

"Cannot run here": a trace may say a job cannot run on a GPU type (a throughput of 0, a type
constraint). The view shows it as a predicted run time of +inf for that pair, whatever the
predictor: a policy must never place the job there (:meth:`SchedulerView.can_run`), and the
engine refuses such a placement. A job no type of the cluster can run never reaches a policy.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

# What a view's ``gpu_job`` holds for a GPU that runs no job: free, or on a failed node (out of the
# free and total counts until it is repaired; a policy must not pin a job to it).
IDLE_GPU = -1
DOWN_GPU = -2


class PolicyError(RuntimeError):
    """A policy returned an impossible decision (a bug in the policy, not in user input)."""


def read_only(array: np.ndarray) -> np.ndarray:
    """A view of ``array`` that sees every later write to it but refuses its own writes."""
    view = array.view()
    view.flags.writeable = False
    return view


@dataclass(frozen=True)
class Placement:
    """Start job ``job`` (its index in the run) on ``num_gpus`` GPUs of ``gpu_type``.

    ``gpu_ids`` pins specific GPUs; when None the engine picks them: one node if any node of that
    type has enough free GPUs (best fit: the fullest such node), otherwise the fewest nodes.
    """

    job: int
    gpu_type: str
    gpu_ids: tuple[int, ...] | None = None


@dataclass(frozen=True)
class Preemption:
    """Suspend running job ``job`` (a preemptive policy, at a round boundary only): it keeps the
    iterations it has done, gives its GPUs back and waits again; resuming it costs its restart
    delay (:class:`RestartCost`)."""

    job: int


@dataclass(frozen=True)
class RestartCost:
    """What resuming a suspended job costs, in seconds: a fixed restart plus reading its checkpoint
    (``checkpoint_bytes`` / ``storage_gbps``), as Gavel's and Sia's simulators charge it. Charged
    once per resume, never at a job's first start."""

    fixed_s: float = 10.0
    storage_gbps: float = 2.0

    def seconds(self, checkpoint_bytes: np.ndarray) -> np.ndarray:
        return self.fixed_s + np.asarray(checkpoint_bytes, dtype="float64") / (self.storage_gbps * 1e9)


@dataclass
class SchedulerView:
    """What a policy may look at: the clock, waiting and running jobs, free GPUs, and *predicted*
    run times. True run times are deliberately absent. Arrays are read-only views of the engine's
    own (zero-copy, current at every call): a policy that writes to one gets numpy's "read-only"
    error instead of corrupting the simulation; copy before changing."""

    now: float
    gpu_types: list[str]
    type_index: dict[str, int]
    predicted: np.ndarray            # seconds, (job, type); +inf: cannot run on that type, never place it there
    submit: np.ndarray
    num_gpus: np.ndarray
    deadline: np.ndarray             # NaN = none
    users: np.ndarray
    job_ids: np.ndarray
    waiting: dict[int, None]         # job indices in arrival order
    running: dict[int, tuple[float, int]]  # job -> (start, type index)
    start: np.ndarray                # start time per job (NaN until started)
    type_of: np.ndarray              # GPU type index per started job (-1 until started)
    gpu_type: np.ndarray             # type index per GPU
    gpu_job: np.ndarray              # running job per GPU; IDLE_GPU (-1): free; DOWN_GPU (-2): its node failed
    free_by_type: np.ndarray         # free GPUs per type (index = position in ``gpu_types``)
    total_by_type: np.ndarray        # GPUs per type
    # q -> the q-quantile of the true run time given the prediction, (job, type), kept current by
    # the engine; None: the predictions are taken as exact (a view built by hand)
    quantiles: Callable[[float], np.ndarray] | None = None
    # Preemptive runs only (None / False otherwise): per job, the fraction of its iterations done
    # (measured, current at every call: a remaining time is (1 - progress) x a predicted one) and
    # the GPU-seconds of service it has had; at_round: this call is a round boundary, where leases
    # end and a policy may return Preemptions.
    progress: np.ndarray | None = None
    attained: np.ndarray | None = None
    at_round: bool = False
    # Where a multi-GPU job's GPUs are changes its run time (a bound run with its communication
    # model): (job, type index) -> its predicted run time at the placement it would get now, and
    # the predicted time a packed placement frees (None: placement does not matter, or the job
    # does not fit now). ``predicted`` holds the packed run times.
    placement_estimate: Callable[[int, int], tuple[float, float] | None] | None = None

    def __post_init__(self) -> None:
        for name, value in vars(self).items():
            if isinstance(value, np.ndarray):
                setattr(self, name, read_only(value))

    def quantile(self, q: float) -> np.ndarray:
        """Seconds, (job, type): the q-quantile of each job's true run time as the predictor's
        stated uncertainty gives it (the point estimate for a job already measured on that type).
        The engine keeps the array current: a policy may hold on to it (read-only)."""
        return self.predicted if self.quantiles is None else read_only(self.quantiles(q))

    def interval(self, level: float = 0.9) -> tuple[np.ndarray, np.ndarray]:
        """(lower, upper) bounds of the central ``level`` interval of every run time."""
        from predictor.common.inputs import check_probability

        level = check_probability(level, "level")
        return self.quantile((1 - level) / 2), self.quantile((1 + level) / 2)

    def can_run(self, job: int) -> np.ndarray:
        """Per type, whether ``job`` may run there at all: False where the trace says it cannot
        (the engine gives such pairs a predicted run time of +inf and refuses a placement there)."""
        return np.isfinite(self.predicted[job])

    def estimate(self, job: int, gpu_type: str) -> float:
        return float(self.predicted[job, self.type_index[gpu_type]])

    def starts_now(self, job: int, k: int) -> bool:
        """Whether to start ``job`` on type k now rather than wait for a packed placement, by the
        predictions: now + its predicted run time at the GPUs it would get now ≤ when a packed
        placement is predicted to free + its packed run time. True where placement does not
        matter (one GPU, a blind run, packed already) — so a policy that asks changes nothing there.
        A policy's own earlier placements of the same call are not seen (the engine books them after)."""
        if self.placement_estimate is None:
            return True
        estimate = self.placement_estimate(job, k)
        if estimate is None:
            return True
        placed, packed_free = estimate
        return self.now + placed <= packed_free + float(self.predicted[job, k])

    def predicted_end(self, job: int) -> float:
        """When a running job is expected to finish by the prediction, never earlier than now: a job
        that overran its prediction is expected to end any moment."""
        start, k = self.running[job]
        return max(self.now, start + float(self.predicted[job, k]))

    def gpu_available_at(self, runtimes: np.ndarray | None = None) -> np.ndarray:
        """Per GPU, when it is expected to be free (now for idle GPUs), by the predictions (or by
        ``runtimes``, a (job, type) matrix such as a quantile's)."""
        runtimes = self.predicted if runtimes is None else runtimes
        jobs = self.gpu_job
        busy = jobs >= 0
        avail = np.full(len(jobs), self.now)
        j = jobs[busy]
        avail[busy] = np.maximum(self.now, self.start[j] + runtimes[j, self.type_of[j]])
        return avail


class Policy(ABC):
    """A scheduler called once per timestamp at which something changed; non-preemptive unless it
    is a :class:`PreemptivePolicy`."""

    name: str = "policy"
    preemptive: bool = False

    def on_arrival(self, view: SchedulerView, jobs: list[int]) -> None:  # noqa: B027 (a hook: doing nothing is the default)
        """New jobs joined the waiting set (called before ``schedule`` at the same timestamp)."""

    @abstractmethod
    def schedule(self, view: SchedulerView) -> list[Placement]:
        """Return the jobs to start now; each must fit in the free GPUs left by the earlier ones."""

    def describe(self) -> dict[str, Any]:
        return {"name": self.name}


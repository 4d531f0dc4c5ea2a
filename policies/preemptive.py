"""The base of preemptive policies: the lease (round length) and restart-cost options they share.

Why a module of its own: the options are parsed with :mod:`policies.options`, which sits above
the contract in :mod:`policies.base`; the engine for these policies is
:mod:`simulator.preemption`.
"""

from __future__ import annotations

from abc import abstractmethod
from typing import Any

import numpy as np

from policies.base import Placement, Policy, Preemption, RestartCost, SchedulerView
from policies.options import number

# The ranges of the shared options. Each keeps a run finite and its clock exact:
# * lease >= 1 s: times are float seconds up to ~1e13 (traces.schema.TIME_LIMIT_S plus the work),
#   where a step of 1 s is still exact (float64 spaces them 2^-9 s apart there), so the next round
#   always falls later; a lease of 1e-12 s fell at the same instant and rounds repeated forever.
#   Real schedulers' rounds are minutes (Gavel's and Blox's 6 min; Tiresias checks every few s).
# * restart <= 1 day, storage_gbps >= 1e-3 (1 MB/s): a resume costs at most a day plus the
#   checkpoint (traces.schema.MAX_CHECKPOINT_BYTES) read at 1 MB/s; restart=1e17 pushed a run's
#   clock so far that 10^14 rounds followed.
MIN_LEASE_S = 1.0
MAX_RESTART_S = 86_400.0
MIN_STORAGE_GBPS = 1e-3


class PreemptivePolicy(Policy):
    """A scheduler that may suspend running jobs: the engine also calls it every ``lease_seconds``
    (a round: Gavel's and Blox's lease, 6 minutes by default), and there, and only there, its
    decisions may include :class:`Preemption` s, taken before its :class:`Placement` s. Between
    rounds it may only start jobs on free GPUs. ``lease=inf`` never preempts. The options' ranges
    (module constants above) keep every run finite."""

    preemptive = True
    # where round boundaries fall (simulator.preemption): "grid", every lease from the first
    # arrival; "work", as Gavel's simulator: when the round's leases end or its jobs all finish,
    # and at an arrival while nothing runs; "event", as Tiresias' simulator: at every arrival and
    # completion, and at the policy's own next_event
    rounds = "grid"
    # whether the policy reads view.progress (every running job's fraction done): the engine keeps
    # it current at every call only for one that does, and leaves it out (None) otherwise
    reads_progress = True
    # likewise view.attained (every running job's GPU-seconds of service so far)
    reads_attained = True

    def __init__(self, lease: float | str = 360.0, restart: float | str = 10.0,
                 storage_gbps: float | str = 2.0) -> None:
        self.lease_seconds = number("lease", lease, MIN_LEASE_S, np.inf, unit="s")
        self.restart = RestartCost(number("restart", restart, 0.0, MAX_RESTART_S, unit="s"),
                                   number("storage_gbps", storage_gbps, MIN_STORAGE_GBPS, np.inf, unit="GB/s"))

    @abstractmethod
    def schedule(self, view: SchedulerView) -> list[Placement | Preemption]:
        """The jobs to suspend (at a round only) and to start now."""

    def next_event(self, view: SchedulerView) -> float:
        """``rounds = "event"`` only: when the policy next needs a round with no arrival or
        completion (inf: never), asked after each of its calls."""
        return float("inf")

    def on_finish(self, view: SchedulerView, job: int, now: float) -> None:  # noqa: B027 (a hook: doing nothing is the default)
        """``job`` finished at ``now`` (called as it ends, before the policy's next call)."""

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "lease_seconds": self.lease_seconds, "restart_fixed_s": self.restart.fixed_s,
                "storage_gbps": self.restart.storage_gbps}

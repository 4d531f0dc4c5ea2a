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


class PreemptivePolicy(Policy):
    """A scheduler that may suspend running jobs: the engine also calls it every ``lease_seconds``
    (a round: Gavel's and Blox's lease, 6 minutes by default), and there, and only there, its
    decisions may include :class:`Preemption` s, taken before its :class:`Placement` s. Between
    rounds it may only start jobs on free GPUs. ``lease=inf`` never preempts."""

    preemptive = True

    def __init__(self, lease: float | str = 360.0, restart: float | str = 10.0,
                 storage_gbps: float | str = 2.0) -> None:
        self.lease_seconds = number("lease", lease, 0.0, np.inf, low_open=True)
        self.restart = RestartCost(number("restart", restart, 0.0, np.inf, high_open=True),
                                   number("storage_gbps", storage_gbps, 0.0, np.inf, low_open=True))

    @abstractmethod
    def schedule(self, view: SchedulerView) -> list[Placement | Preemption]:
        """The jobs to suspend (at a round only) and to start now."""

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "lease_seconds": self.lease_seconds, "restart_fixed_s": self.restart.fixed_s,
                "storage_gbps": self.restart.storage_gbps}

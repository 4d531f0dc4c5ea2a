"""The Policy interface: what a scheduling policy sees and what it returns.

Why: the engine must not care which policy runs, and policies must never see true run times —
only the predictor's estimates exposed through the scheduler view.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from simulator.engine import SchedulerView


class PolicyError(RuntimeError):
    """A policy returned an impossible decision (a bug in the policy, not in user input)."""


class PolicySpecError(ValueError):
    """An unknown policy name or option on the command line."""


@dataclass(frozen=True)
class Placement:
    """Start job ``job`` (its index in the run) on ``num_gpus`` GPUs of ``gpu_type``.

    ``gpu_ids`` pins specific GPUs; when None the engine picks them: one node if any node of that
    type has enough free GPUs (best fit: the fullest such node), otherwise the fewest nodes.
    """

    job: int
    gpu_type: str
    gpu_ids: tuple[int, ...] | None = None


class Policy(ABC):
    """A non-preemptive scheduler called once per timestamp at which something changed."""

    name: str = "policy"

    def on_arrival(self, view: "SchedulerView", jobs: list[int]) -> None:
        """New jobs joined the waiting set (called before ``schedule`` at the same timestamp)."""

    @abstractmethod
    def schedule(self, view: "SchedulerView") -> list[Placement]:
        """Return the jobs to start now; each must fit in the free GPUs left by the earlier ones."""

    def describe(self) -> dict[str, Any]:
        return {"name": self.name}

"""Policies read the engine's state through zero-copy views they cannot write to.

Why: a policy that scribbled on ``free_by_type`` or the predictions would corrupt the simulation
silently; with read-only views numpy refuses the write, and the views still follow the engine.
"""

from __future__ import annotations

import numpy as np
import pytest

from policies.base import Placement, Policy
from simulator.cluster import homogeneous_groups
from simulator.engine import Simulation
from simulator.timing import make_predictor
from tests.records import from_records

JOBS = [dict(job_id="A", submit_s=0, num_gpus=1, duration_s=100),
        dict(job_id="B", submit_s=10, num_gpus=1, duration_s=50)]


class Recorder(Policy):
    """First come, first served on one GPU type; records what it saw and what its writes did."""

    name = "recorder"

    def __init__(self, attempt: str | None = None):
        self.attempt, self.seen, self.errors = attempt, [], []

    def schedule(self, view):
        self.seen.append((view.now, view.free_by_type.copy(), view.gpu_job.copy(), view.start.copy()))
        if self.attempt is not None:
            try:
                target = getattr(view, self.attempt) if self.attempt != "quantile" else view.quantile(0.5)
                target[...] = target  # any write, even of the same values
            except ValueError as exc:
                self.errors.append(str(exc))
        free = int(view.free_by_type[0])
        return [Placement(j, view.gpu_types[0]) for j in list(view.waiting)[:free]]


def simulate(policy: Policy) -> Simulation:
    sim = Simulation(from_records(JOBS), homogeneous_groups([("V100", 1, 1)], "t"), policy, make_predictor("truth"))
    sim.run()
    return sim


@pytest.mark.parametrize("field", ["free_by_type", "gpu_job", "predicted", "start", "type_of", "submit",
                                   "num_gpus", "deadline", "job_ids", "quantile"])
def test_a_policy_cannot_write_what_it_reads(field):
    policy = Recorder(attempt=field)
    simulate(policy)
    assert policy.errors and all("read-only" in e for e in policy.errors)


def test_the_views_share_the_engines_memory_and_follow_its_writes():
    policy = Recorder()
    sim = simulate(policy)
    view = sim.view
    for engine_array, view_array in ((sim.start, view.start), (sim.type_of, view.type_of),
                                     (sim.state.free_by_type, view.free_by_type), (sim.predicted, view.predicted)):
        assert np.shares_memory(engine_array, view_array) and not view_array.flags.writeable
    # A starts at 0 on the one GPU; B arrives at 10 and waits; A ends at 100, B starts then.
    assert [t for t, *_ in policy.seen] == [0.0, 10.0, 100.0]
    assert [int(free[0]) for _, free, _, _ in policy.seen] == [1, 0, 1]
    assert np.isnan(policy.seen[0][3]).all() and policy.seen[1][3][0] == 0.0
    np.testing.assert_array_equal(sim.start, [0.0, 100.0])

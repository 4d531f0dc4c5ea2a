"""The preemption experiment's grid: every policy spec builds, ftf only in the full run."""

from __future__ import annotations

from experiments import preemption
from policies.preemptive import PreemptivePolicy
from policies.registry import make_policy


def test_the_full_grid_runs_every_policy_on_the_same_bound_jobs():
    points = preemption.grid(50, 2)
    assert {p.policy for p in points} == set(preemption.POLICIES)
    assert {p.predictor for p in points} == {"truth", "ets", "habitat", "dnnperf",
                                             "noisy:0.1", "noisy:0.2", "noisy:0.4"}
    assert {p.workload for p in points} == {"pai-like:50", "philly-like:50"} and {p.seed for p in points} == {0, 1}
    assert all(p.bind for p in points)
    assert len(points) == len(preemption.POLICIES) * 7 * 2 * 2


def test_every_policy_spec_builds_and_ftf_is_gavel_with_its_objective():
    policies = {spec: make_policy(spec) for spec in preemption.POLICIES}
    assert policies[preemption.FTF].name == "gavel" and policies[preemption.FTF].objective == "ftf"
    assert policies["gavel"].objective == "max_min"
    assert set(preemption.PREEMPTIVE) == {s for s, p in policies.items() if isinstance(p, PreemptivePolicy)}


def test_quick_leaves_out_ftf_alone():
    assert set(preemption.POLICIES) - set(preemption.QUICK_POLICIES) == {preemption.FTF}

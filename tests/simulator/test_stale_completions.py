"""The preemptive engine's per-move shortcuts leave every result as it was: stale completions
taken out of simpy's queue (and put back where one could matter), the allocation rule's exact
per-free-count node lists, and a suspension's fraction done in Python floats."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import simulator.preemption as preemption
from policies.base import Placement, Preemption
from policies.preemptive import PreemptivePolicy
from policies.registry import make_policy
from simulator.allocation import ClusterState
from simulator.cluster import Cluster, Node, homogeneous_groups
from simulator.preemption import PreemptiveSimulation, make_simulation
from simulator.timing import make_predictor
from tests.records import from_records


def simulate(records, groups, policy, *, drop: bool, counts: dict | None = None):
    sim = make_simulation(from_records(records), homogeneous_groups(groups, "t"),
                          make_policy(policy) if isinstance(policy, str) else policy, make_predictor("truth", seed=1))
    sim._drop = drop
    if counts is not None:
        for name in ("_drop_stale", "_restore_dropped"):
            method = getattr(sim, name)

            def counted(*args, _method=method, _name=name):
                counts[_name] = counts.get(_name, 0) + 1
                return _method(*args)
            setattr(sim, name, counted)
    return sim.run()


def same(a, b) -> None:
    pd.testing.assert_frame_equal(a.records, b.records)
    pd.testing.assert_frame_equal(a.segments, b.segments)
    assert (a.events, a.rounds, a.policy_calls) == (b.events, b.rounds, b.policy_calls)


class HoldsL(PreemptivePolicy):
    """Gavel's rounds ("work"); suspends job L at every round from t=100 and starts it only before
    t=100 and from t=500; starts every other job as soon as a GPU is free."""

    name = "holds-l"
    rounds = "work"
    reads_progress = False

    def __init__(self) -> None:
        super().__init__(lease=100.0, restart=0.0)

    def schedule(self, view):
        if not view.at_round:
            return []
        out = [Preemption(j) for j in view.running if view.job_ids[j] == "L" and view.now >= 100]
        free = int(view.free_by_type[0]) + len(out)
        for j in [*view.waiting, *(p.job for p in out)]:
            if free and (view.job_ids[j] != "L" or not 100 <= view.now < 500):
                out.append(Placement(j, view.gpu_types[0]))
                free -= 1
        return out


def job(job_id, duration, submit):
    return {"job_id": job_id, "submit_s": submit, "num_gpus": 1, "duration_s": duration}


def test_a_dropped_completion_goes_back_where_a_stale_round_end_leaves_the_policy_waiting(monkeypatch):
    # 1 GPU, lease 100. t=0: L starts (its completion queued at 1000). t=100: L is suspended (that
    # completion is stale, and dropped). t=200: X arrives and runs to 230, when its round ends
    # early: the round end queued for 300 is stale. t=300: Y arrives, then that stale round end,
    # the last event at 300: the policy is not called at 300, and in the engine as it was, the
    # stale completion at 1000 was the next event and called it. It goes back, so it still does.
    monkeypatch.setattr(preemption, "DROP_AT", 0)
    records = [job("L", 1000.0, 0.0), job("X", 30.0, 200.0), job("Y", 30.0, 300.0)]
    counts: dict = {}
    kept = simulate(records, [("V100", 1, 1)], HoldsL(), drop=False)
    dropped = simulate(records, [("V100", 1, 1)], HoldsL(), drop=True, counts=counts)
    same(kept, dropped)
    assert counts.get("_drop_stale", 0) >= 1 and counts.get("_restore_dropped", 0) >= 1


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("policy", ["gavel:lease=60,reset=120", "srtf:lease=60", "tiresias"])
def test_dropping_stale_completions_changes_nothing(monkeypatch, seed, policy):
    # submit times and run times on a coarse grid: many events share a timestamp with round ends
    monkeypatch.setattr(preemption, "DROP_AT", 0)
    rng = np.random.default_rng(seed)
    n = 40
    submit = np.sort(rng.integers(0, 30, n)) * 60.0
    records = [{"job_id": f"j{i}", "submit_s": float(submit[i]), "num_gpus": int(rng.choice([1, 1, 2, 4])),
                "duration_s": float(rng.integers(1, 12) * 30)} for i in range(n)]
    groups = [("V100", 2, 4), ("K80", 2, 2)]
    same(simulate(records, groups, policy, drop=False), simulate(records, groups, policy, drop=True))


def test_a_subclass_keeps_every_event_queued():
    # a subclass (simulator.failures) may queue events of its own that _drop_stale knows nothing of
    class Sub(PreemptiveSimulation):
        pass

    args = (from_records([job("A", 10.0, 0.0)]), homogeneous_groups([("V100", 1, 1)], "t"), make_policy("gavel"),
            make_predictor("truth", seed=1))
    assert PreemptiveSimulation(*args)._drop and not Sub(*args)._drop


class Reference:
    """Best fit by brute force over the nodes' free counts: the rule ClusterState keeps lists for."""

    def __init__(self, sizes):
        self.free = list(sizes)
        self.first = np.concatenate([[0], np.cumsum(sizes)]).tolist()
        self.pool = [set(range(self.first[i], self.first[i + 1])) for i in range(len(sizes))]

    def allocate(self, n):
        fits = [(f, node) for node, f in enumerate(self.free) if f >= n]
        if fits:
            chosen = [(min(fits)[1], n)]
        else:
            chosen, need = [], n
            free = [node for node, f in enumerate(self.free) if f]
            for node in sorted(free, key=lambda node: (-self.free[node], node)):
                take = min(self.free[node], need)
                chosen.append((node, take))
                need -= take
                if not need:
                    break
        ids = []
        for node, take in chosen:
            got = sorted(self.pool[node])[:take]
            self.pool[node] -= set(got)
            self.free[node] -= take
            ids += got
        return tuple(ids)

    def release(self, ids):
        for g in ids:
            node = int(np.searchsorted(self.first, g, side="right")) - 1
            self.pool[node].add(g)
            self.free[node] += 1


@pytest.mark.parametrize("seed", range(5))
def test_allocation_matches_best_fit_by_brute_force(seed):
    rng = np.random.default_rng(seed)
    sizes = rng.choice([2, 4, 8], 12).tolist()
    state = ClusterState(Cluster("t", tuple(Node(f"n{i}", "V100", s) for i, s in enumerate(sizes))))
    ref = Reference(sizes)
    held = []
    for _ in range(3000):
        free = int(state.free_by_type[0])
        if held and (rng.random() < 0.45 or free == 0):
            ids = held.pop(int(rng.integers(len(held))))
            state.release(0, ids)
            ref.release(ids)
        else:
            n = int(rng.integers(1, min(free, 12) + 1))
            got = state.allocate(0, n)
            assert got == ref.allocate(n)
            held.append(got)
        assert state.node_free == ref.free
        for f in range(1, state.max_node + 1):  # the per-free-count lists: exact and ascending
            assert state._by_free[0][f] == [node for node, c in enumerate(state.node_free) if c == f]

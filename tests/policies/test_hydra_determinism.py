"""Hydra decides the same on any machine at any load by default (issue 31, finding 8).

Why: Hydra's default budget was wall-clock (20 ms per decision online, 1 s offline), so a loaded
machine planned differently: on the heavy 400-job case offline, tardiness 4,150 s on a quiet
machine and 314,701 s on a loaded one. The default is now a budget in work units; the clock binds
only when ``budget_ms`` is asked for. A clock that jumps 10 s at every reading makes any
wall-clock budget bind at once, so it separates decisions that read the clock from those that do
not. The frozen cases are experiments/frozen_cases.py's.
"""

from __future__ import annotations

import itertools
import time

import numpy as np
import pandas as pd
import pytest

from experiments.frozen_cases import CASES, digest, key, load_digests
from experiments.hydra_cases import default_cases
from policies.hydra import Jobs, QueueOrderer
from simulator.run import RunConfig, execute

DIGESTS = load_digests()
SMALL = {c.name: c for c in CASES if not c.big}
HEAVY, PHILLY = "hydra-heavy-100", "philly-like-300-noisy"  # a Hydra case (../shared) and a synthetic one
# The frozen Hydra specs, recorded before issue 31 with a time budget that never binds.
TIMED = ("hydra:nodes=2000,budget_ms=3600000", "hydra:mode=offline,nodes=2000,budget_ms=3600000",
         "hydra:bnb=off,budget_ms=3600000")
# Hydra's defaults on the small cases, recorded with this change (also in experiments/frozen_cases.json).
DEFAULT_DIGESTS = {
    (HEAVY, "hydra"): "65e58eacbf58354624b9559cc7f7b3a2a3384a892e7a3fae41c3e5da0351df4d",
    (HEAVY, "hydra:mode=offline"): "4a23a4e3486c08e5da0a057e77d5b6f00d674dbeae9789fdea02978d04187a77",
    (PHILLY, "hydra"): "ac14db660a1a724323c629e5bb98544e14b998bcde70f10767457777f9f93a29",
}
# Runs whose plan a clock could change: the defaults, and work budgets that cut decisions short here.
# (Offline on the Philly-like case searches next to nothing: the old time budget did not change it.)
RUNS = [(HEAVY, "hydra"), (HEAVY, "hydra:mode=offline"), (HEAVY, "hydra:work=20"),
        (HEAVY, "hydra:mode=offline,work=20"), (PHILLY, "hydra"), (PHILLY, "hydra:work=20")]


def race_the_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    """``time.perf_counter`` jumps 10 s at every call from now on: every wall-clock budget is
    spent at once (the engine's policy time reads it too; no record holds it)."""
    start, calls = time.perf_counter(), itertools.count(1)
    monkeypatch.setattr(time, "perf_counter", lambda: start + 10.0 * next(calls))


@pytest.fixture
def slow_clock(monkeypatch):
    """The clock races for the whole test."""
    race_the_clock(monkeypatch)


def case(name: str):
    """A small frozen case; skipped when it needs Hydra's case files and they are not there."""
    if SMALL[name].needs_shared and not default_cases().exists():
        pytest.skip(f"Hydra's cases not found at {default_cases()} (set ETS_SHARED)")
    return SMALL[name]


def policy_manifest(spec: str) -> tuple[pd.DataFrame, dict]:
    """Records and the manifest's policy entry of ``spec`` on the small Philly-like case."""
    frozen = SMALL[PHILLY]
    out = execute(RunConfig(policy=spec, predictor=frozen.predictor, workload=frozen.workload))
    return out.records, out.manifest["policy"]


@pytest.mark.parametrize("name,spec", RUNS)
def test_hydra_defaults_and_work_budgets_decide_the_same_on_a_slowed_clock(name, spec, monkeypatch):
    """The records with the clock racing are those with the real clock, bit for bit."""
    frozen = case(name)
    real = frozen.run(spec)
    race_the_clock(monkeypatch)
    pd.testing.assert_frame_equal(frozen.run(spec), real, check_exact=True)


@pytest.mark.parametrize("timed", TIMED)
@pytest.mark.parametrize("name", list(SMALL))
def test_frozen_digests_hold_on_a_slowed_clock_when_the_budget_is_work(name, timed, slow_clock):
    """The frozen Hydra specs with the time budget that never bound spelled ``work=all`` (no clock)
    give their frozen records bit for bit while the clock races."""
    frozen = case(name)
    assert digest(frozen.run(timed.replace("budget_ms=3600000", "work=all"))) == DIGESTS[key(frozen, timed)]


@pytest.mark.parametrize("name,spec", list(DEFAULT_DIGESTS))
def test_the_default_on_a_slowed_clock_reproduces_its_recorded_digest(name, spec, slow_clock):
    frozen = case(name)
    want = DEFAULT_DIGESTS[(name, spec)]
    assert digest(frozen.run(spec)) == want
    assert DIGESTS[key(frozen, spec)] == want  # the frozen cases' record of it


def test_a_time_budget_binds_when_asked_and_the_manifest_says_time(slow_clock):
    default, default_policy = policy_manifest("hydra")
    timed, timed_policy = policy_manifest("hydra:budget_ms=1000")
    assert not timed.equals(default)  # 10 s per reading: every decision's time budget is spent at once
    assert timed_policy["decisions_cut_by_time_budget"] > 0 and timed_policy["bnb_stopped_by_time_budget"] > 0
    assert {k: timed_policy[k] for k in ("bound", "work", "budget_ms", "decisions_cut_by_work_budget")} == \
        {"bound": "time", "work": "all", "budget_ms": 1000.0, "decisions_cut_by_work_budget": 0}
    assert {k: default_policy[k] for k in ("bound", "work", "budget_ms", "decisions_cut_by_time_budget")} == \
        {"bound": "work", "work": 2000, "budget_ms": None, "decisions_cut_by_time_budget": 0}


def test_the_manifest_says_how_often_the_work_budget_cut_a_decision_short():
    _, policy = policy_manifest("hydra:work=20")
    assert (policy["bound"], policy["work"], policy["budget_ms"]) == ("work", 20, None)
    assert (policy["decisions_cut_by_work_budget"], policy["bnb_stopped_by_work_budget"]) == (86, 271)
    assert policy["decisions_cut_by_time_budget"] == policy["bnb_stopped_by_time_budget"] == 0
    # the last heuristic may pass the budget by one queue's length, never more
    assert 20 <= policy["max_search_work_per_decision"] < 20 + 100


def test_a_search_stops_at_the_work_left_and_later_queues_get_srtf():
    """The budget is checked in work, not time: a search ends at exactly the decision's work left."""
    p = np.array([16, 2, 4, 5, 4, 16, 17, 12, 1, 2], dtype=float)
    deadline = np.array([11, 8, 1, 5, 18, 47, 2, 37, 3, 28], dtype=float)
    jobs = Jobs(p, np.zeros(10), deadline)
    orderer = QueueOrderer(bnb=True, work=25)
    orderer.start_decision()
    assert orderer.order(frozenset(range(10)), 0.0, 0, jobs) == ([3, 8, 1, 2, 9, 4, 0, 7, 5, 6], (138.0, 284.0))
    assert orderer.search_work == 25  # 10 heuristic positions + 15 nodes
    assert orderer.stopped == {"nodes": 0, "work": 1, "time": 0}
    # the budget is spent: the decision's next queue is ordered by SRTF alone
    assert orderer.order(frozenset(range(6)), 0.0, 0, jobs) == ([1, 2, 4, 3, 0, 5], (35.0, 111.0))
    assert orderer.stopped["work"] == 2 and orderer.decisions_cut == {"work": 1, "time": 0}
    # without a budget the same search runs to its end and finds a less tardy order
    free = QueueOrderer(bnb=True)
    free.start_decision()
    assert free.order(frozenset(range(10)), 0.0, 0, jobs) == ([8, 2, 1, 3, 9, 4, 0, 7, 5, 6], (135.0, 278.0))
    assert free.search_work == 569

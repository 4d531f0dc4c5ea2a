"""Preemptive runs that always end (issue 50, class 6): option values that made rounds repeat at
one instant or pushed the clock 10^17 s ahead are refused when the policy is parsed; a lease too
short for its trace is refused before the run; a run that passes the round limit anyway stops
with one line naming the lease. Each case ends at once by construction (no run is timed)."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from policies.registry import make_policy
from predictor.common.inputs import SimulationError, SpecError
from simulator.cli import main
from simulator.cluster import homogeneous_groups
from simulator.preemption import make_simulation
from simulator.timing import make_predictor
from tests.cli_checks import one_line_error
from tests.records import from_records


def simulation(records: list[dict], policy: str):
    return make_simulation(from_records(records), homogeneous_groups([("V100", 1, 1)], "t"), make_policy(policy),
                           make_predictor("truth", seed=1))


def job(job_id: str, duration: float, submit: float = 0.0) -> dict:
    return {"job_id": job_id, "submit_s": submit, "num_gpus": 1, "duration_s": duration}


@pytest.mark.parametrize("policy,option,value,expected", [
    *[(p, "lease", "1e-12", "must lie in [1, inf] s") for p in ("srtf", "gavel")],  # the next round: the same instant
    *[(p, "lease", "0.5", "must lie in [1, inf] s") for p in ("srtf", "gavel")],
    *[(p, "lease", "nan", "must lie in [1, inf] s") for p in ("srtf", "gavel")],
    *[(p, "restart", "1e17", "must lie in [0, 86400] s") for p in ("srtf", "tiresias", "gavel")],  # 10^17 rounds
    *[(p, "storage_gbps", "1e-300", "must lie in [0.001, inf] GB/s") for p in ("srtf", "tiresias", "gavel")],
])
def test_options_that_make_a_run_endless_are_refused_when_parsed(policy, option, value, expected):
    with pytest.raises(SpecError, match="option " + option) as info:
        make_policy(f"{policy}:{option}={value}")
    assert expected in str(info.value)


def test_the_edges_of_the_ranges_are_accepted():
    policy = make_policy("srtf:lease=1,restart=86400,storage_gbps=0.001")
    assert policy.describe() == {"name": "srtf", "lease_seconds": 1.0, "restart_fixed_s": 86400.0,
                                 "storage_gbps": 0.001}
    assert make_policy("srtf:lease=inf").lease_seconds == float("inf")


def test_simrun_refuses_a_tiny_lease_in_one_line_before_the_run(tmp_path):
    result = CliRunner().invoke(main, ["--policy", "srtf:lease=1e-12", "--predictor", "truth", "--workload",
                                       "pai-like:20", "--out", str(tmp_path / "o")])
    one_line_error(result, "option lease='1e-12'", "[1, inf] s")
    assert not (tmp_path / "o").exists()


def test_a_lease_too_short_for_the_trace_is_refused_before_the_run():
    # one job of 3e6 s at lease 1 s: at least 3,000,000 rounds, over the 1,000,000 a run may take
    with pytest.raises(SimulationError, match=r"option lease=1 s: this trace's jobs run for at least 3e\+06 s") as info:
        simulation([job("A", 3e6)], "srtf:lease=1")
    assert ("at most 1,000,000 rounds (for this trace use lease >= 3, or raise the limit with "
            "ETS_SIM_MAX_ROUNDS=N)") in str(info.value)
    assert simulation([job("A", 3e6)], "srtf:lease=3").lease == 3.0  # the least lease quoted fits


def test_a_run_that_passes_the_round_limit_stops_naming_the_lease(monkeypatch):
    # A resume of 1,000 s at a 1 s lease: A (40 s), suspended at t=10 for B (20 s), resumes at 30
    # and restarts until 1030, a round every second. At least 40 rounds (the up-front bound) fit a
    # limit of 50; the run stops at the 51st round (t=51), naming the lease.
    monkeypatch.setenv("ETS_SIM_MAX_ROUNDS", "50")
    sim = simulation([job("A", 40.0), job("B", 20.0, submit=10.0)], "srtf:lease=1,restart=1000")
    with pytest.raises(SimulationError, match=r"option lease=1 s: policy 'srtf' passed 50 rounds at simulated "
                                              r"time 51 s with 1 job\(s\) unfinished"):
        sim.run()
    assert sim._rounds == 51  # counted, then stopped: not one round more


def test_a_policy_with_a_round_per_event_stops_at_the_limit_naming_it_not_a_lease(monkeypatch):
    # Tiresias reschedules at every arrival and completion: five jobs arriving one second apart on
    # one GPU make more than 3 rounds; there is no lease to raise, so the message names the limit.
    monkeypatch.setenv("ETS_SIM_MAX_ROUNDS", "3")
    sim = simulation([job(f"j{i}", 10.0, submit=float(i)) for i in range(5)], "tiresias:restart=0")
    with pytest.raises(SimulationError, match=r"policy 'tiresias' passed 3 rounds \(one at every arrival, "
                                              r"completion and demotion\)") as info:
        sim.run()
    assert "lease" not in str(info.value) and "ETS_SIM_MAX_ROUNDS=N" in str(info.value)


def test_the_hand_case_at_a_one_second_lease_is_unchanged():
    # lease=1 is the smallest accepted; B arrives at 100 and takes A's GPU at once (100 is on the grid)
    result = simulation([job("A", 1000.0), job("B", 200.0, submit=100.0)], "srtf:lease=1,restart=10").run()
    ends = dict(zip(result.records["job_id"], result.records["end"]))
    assert ends == {"A": 1210.0, "B": 300.0}

"""Hand-computed schedules: every start and end time below was worked out on paper."""

from __future__ import annotations

import math

import numpy as np
import pytest

from policies.base import Placement, Policy, PolicyError
from policies.registry import make_policy
from simulator.cluster import homogeneous_groups
from simulator.engine import Simulation, SimulationError
from simulator.metrics import summarize
from simulator.timing import RuntimePredictor, make_predictor
from tests.records import from_records


def run(records, groups, policy, predictor="truth", reference=None):
    sim = Simulation(from_records(records), homogeneous_groups(groups, "t"), make_policy(policy)
                     if isinstance(policy, str) else policy, make_predictor(predictor)
                     if isinstance(predictor, str) else predictor, reference_type=reference)
    return sim.run()


def times(result):
    r = result.records.set_index("job_id")
    return {j: (row.start, row.end, row.gpu_type, row.gpu_ids) for j, row in r.iterrows()}


def hetero(a100, v100, **extra):
    """A job with measured run times on A100 and V100 (Hydra-case style)."""
    return {"num_gpus": 1, "duration_s": a100, "gpu_type": "A100",
            "runtime_s:A100": a100, "runtime_s:V100": v100, "submit_s": 0, **extra}


def test_fifo_single_gpu_jobs_wait_in_arrival_order():
    jobs = [dict(job_id="A", submit_s=0, num_gpus=1, duration_s=100),
            dict(job_id="B", submit_s=0, num_gpus=1, duration_s=50),
            dict(job_id="C", submit_s=10, num_gpus=1, duration_s=30),
            dict(job_id="D", submit_s=20, num_gpus=2, duration_s=20)]
    out = times(run(jobs, [("V100", 1, 2)], "fifo"))
    assert out == {"A": (0, 100, "V100", "0"), "B": (0, 50, "V100", "1"),
                   "C": (50, 80, "V100", "1"), "D": (100, 120, "V100", "0,1")}


def test_fifo_head_of_line_blocks_smaller_jobs():
    jobs = [dict(job_id="A", submit_s=0, num_gpus=1, duration_s=10),
            dict(job_id="B", submit_s=1, num_gpus=2, duration_s=10),
            dict(job_id="C", submit_s=2, num_gpus=1, duration_s=10)]
    out = times(run(jobs, [("V100", 1, 2)], "fifo"))
    # C could run on the idle GPU at t=2 but B (2 GPUs) is ahead of it
    assert out["B"][:2] == (10, 20) and out["C"][:2] == (20, 30)


def test_sjf_picks_least_predicted_pair_across_types():
    jobs = [hetero(10, 20, job_id="J0"), hetero(30, 40, job_id="J1"), hetero(5, 100, job_id="J2")]
    out = times(run(jobs, [("A100", 1, 1), ("V100", 1, 1)], "sjf"))
    assert out == {"J2": (0, 5, "A100", "0"), "J0": (0, 20, "V100", "1"), "J1": (5, 35, "A100", "0")}


def test_sjf_does_not_let_a_big_job_block_small_ones():
    jobs = [dict(job_id="big", submit_s=0, num_gpus=2, duration_s=5),
            dict(job_id="run", submit_s=0, num_gpus=1, duration_s=50),
            dict(job_id="small", submit_s=1, num_gpus=1, duration_s=100)]
    out = times(run(jobs, [("V100", 1, 2)], "sjf"))
    # t=0: big (5 s) first -> both GPUs; t=5: run (50) and small (100) start together
    assert out["big"][:2] == (0, 5) and out["run"][:2] == (5, 55) and out["small"][:2] == (5, 105)


def test_edf_orders_by_deadline_and_uses_the_type_with_most_slack():
    jobs = [hetero(10, 20, job_id="J0"),
            hetero(30, 40, job_id="J1", deadline_s=35),
            hetero(20, 24, job_id="J2", deadline_s=25)]
    res = run(jobs, [("A100", 1, 1), ("V100", 1, 1)], "edf")
    out = times(res)
    assert out == {"J2": (0, 20, "A100", "0"), "J1": (0, 40, "V100", "1"), "J0": (20, 30, "A100", "0")}
    rec = res.records.set_index("job_id")
    assert rec.loc["J1", "tardiness"] == 5 and rec.loc["J2", "tardiness"] == 0
    assert rec.loc["J0", "tardiness"] == 0  # no deadline


def test_edf_non_deadline_jobs_shortest_first():
    jobs = [dict(job_id="long", submit_s=0, num_gpus=1, duration_s=30),
            dict(job_id="short", submit_s=0, num_gpus=1, duration_s=10),
            dict(job_id="blocker", submit_s=0, num_gpus=1, duration_s=1, deadline_s=100)]
    out = times(run(jobs, [("V100", 1, 1)], "edf"))
    assert out["blocker"][:2] == (0, 1) and out["short"][:2] == (1, 11) and out["long"][:2] == (11, 41)


def test_gang_jobs_consolidate_on_one_node_best_fit():
    jobs = [dict(job_id="A", submit_s=0, num_gpus=2, duration_s=100),
            dict(job_id="B", submit_s=0, num_gpus=4, duration_s=50),
            dict(job_id="C", submit_s=0, num_gpus=4, duration_s=10),
            dict(job_id="D", submit_s=0, num_gpus=2, duration_s=10)]
    out = times(run(jobs, [("V100", 4, 2)], "fifo"))
    # A -> node 0 (ids 0,1); B -> node 1 (best fit needs 4 free); C waits for B
    assert out["A"] == (0, 100, "V100", "0,1")
    assert out["B"] == (0, 50, "V100", "4,5,6,7")
    assert out["C"] == (50, 60, "V100", "4,5,6,7")
    # D (2 GPUs) was behind C: FIFO starts it at 50 too, on node 0 (best fit: 2 free there)
    assert out["D"] == (50, 60, "V100", "2,3")


def test_gang_job_spreads_over_fewest_nodes_when_no_node_fits():
    jobs = [dict(job_id="wide", submit_s=0, num_gpus=6, duration_s=10)]
    out = times(run(jobs, [("V100", 4, 2)], "fifo"))
    assert out["wide"] == (0, 10, "V100", "0,1,2,3,4,5")


def test_job_larger_than_any_type_pool_is_rejected_up_front():
    jobs = [dict(job_id="ok", submit_s=0, num_gpus=2, duration_s=10),
            dict(job_id="huge", submit_s=0, num_gpus=3, duration_s=10)]
    res = run(jobs, [("V100", 2, 1), ("T4", 2, 1)], "fifo")  # 4 GPUs, but only 2 of each type
    rec = res.records.set_index("job_id")
    assert rec.loc["huge", "status"] == "rejected" and "largest pool has 2" in rec.loc["huge", "reason"]
    assert rec.loc["ok", "status"] == "completed"
    assert math.isnan(rec.loc["huge", "start"])


def test_policy_plans_with_predictions_but_jobs_end_with_truth():
    class Swapped(RuntimePredictor):
        name = "swapped"

        def runtimes(self, jobs, gpu_types, truth):
            return truth[::-1].copy()  # job 0 looks like job 1 and vice versa

    jobs = [dict(job_id="long", submit_s=0, num_gpus=1, duration_s=100),
            dict(job_id="short", submit_s=0, num_gpus=1, duration_s=10)]
    res = run(jobs, [("V100", 1, 1)], "sjf", predictor=Swapped())
    out = times(res)
    assert out["long"][:2] == (0, 100) and out["short"][:2] == (100, 110)
    rec = res.records.set_index("job_id")
    assert rec.loc["long", "predicted_runtime"] == 10 and rec.loc["long", "true_runtime"] == 100


def test_true_runtime_scales_by_measured_speed_ratio():
    jobs = [dict(job_id="x", submit_s=0, num_gpus=1, duration_s=100, gpu_type="V100")]
    res = run(jobs, [("A100", 1, 1)], "fifo")
    assert res.records["true_runtime"].iloc[0] == pytest.approx(100 * 0.780)
    # no observed type: taken as observed on the reference type
    jobs = [dict(job_id="y", submit_s=0, num_gpus=1, duration_s=100)]
    assert run(jobs, [("A100", 1, 1)], "fifo", reference="V100").records["true_runtime"].iloc[0] == \
        pytest.approx(78.0)
    assert run(jobs, [("A100", 1, 1)], "fifo").records["true_runtime"].iloc[0] == 100.0


def test_zero_duration_job_and_simultaneous_events():
    jobs = [dict(job_id="z", submit_s=5, num_gpus=1, duration_s=0),
            dict(job_id="a", submit_s=5, num_gpus=1, duration_s=10)]
    out = times(run(jobs, [("V100", 1, 1)], "fifo"))
    assert out["z"][:2] == (5, 5) and out["a"][:2] == (5, 15)


def test_summary_values_on_the_fifo_case():
    jobs = [dict(job_id="A", submit_s=0, num_gpus=1, duration_s=100, deadline_s=90),
            dict(job_id="B", submit_s=0, num_gpus=1, duration_s=50),
            dict(job_id="C", submit_s=10, num_gpus=1, duration_s=30, deadline_s=100),
            dict(job_id="D", submit_s=20, num_gpus=2, duration_s=20, deadline_s=110)]
    cluster = homogeneous_groups([("V100", 1, 2)], "t")
    res = run(jobs, [("V100", 1, 2)], "fifo")
    s = summarize(res.records, cluster, policy_seconds=res.policy_seconds, policy_calls=res.policy_calls,
                  wall_seconds=res.wall_seconds, events=res.events)
    # JCTs: A 100, B 50, C 70, D 100; queueing 0, 0, 40, 80; tardiness 10, 0, 0, 10
    assert s["jobs"] == 4 and s["rejected"] == 0
    assert s["jct_mean"] == pytest.approx(80.0)
    assert s["jct_p50"] == pytest.approx(85.0)
    assert s["queue_mean"] == pytest.approx(30.0)
    assert s["makespan"] == 120
    assert s["tardiness_total"] == 20 and s["tardiness_mean"] == 5 and s["late_jobs"] == 2
    assert s["late_tardiness_mean"] == 10 and s["jobs_with_deadline"] == 3
    # busy GPU-seconds 100 + 50 + 30 + 40 = 220 over 2 GPUs x 120 s
    assert s["utilization"] == pytest.approx(220 / 240)
    assert s["events"] == 8  # 4 arrivals + 4 completions


class _Lazy(Policy):
    name = "lazy"

    def schedule(self, view):
        return []


class _Greedy(Policy):
    name = "greedy"

    def schedule(self, view):
        return [Placement(j, view.gpu_types[0]) for j in view.waiting]


def test_policy_that_never_starts_a_job_is_reported_not_hung():
    with pytest.raises(SimulationError, match="left 1 job"):
        run([dict(submit_s=0, num_gpus=1, duration_s=1)], [("V100", 1, 1)], _Lazy())


def test_policy_overbooking_is_caught():
    with pytest.raises(PolicyError, match="only 0 free"):
        run([dict(submit_s=0, num_gpus=1, duration_s=1)] * 1 + [dict(job_id="b", submit_s=0, num_gpus=1,
                                                                      duration_s=1)],
            [("V100", 1, 1)], _Greedy())


def test_records_are_identical_across_runs_with_noise():
    rng = np.random.default_rng(3)
    jobs = [dict(job_id=f"j{i}", submit_s=float(rng.integers(0, 50)), num_gpus=int(rng.choice([1, 2, 4])),
                 duration_s=float(rng.integers(1, 40)), gpu_type=str(rng.choice(["T4", "V100"])))
            for i in range(60)]
    a = run(jobs, [("T4", 2, 3), ("V100", 4, 1)], "sjf", "noisy:0.3").records
    b = run(jobs, [("T4", 2, 3), ("V100", 4, 1)], "sjf", "noisy:0.3").records
    assert a.equals(b)


def test_policy_called_once_per_timestamp_with_changes():
    # t=10: A completes and B, C arrive -> one call; t=15: B ends, C starts; t=20: nothing waits
    jobs = [dict(job_id="A", submit_s=0, num_gpus=1, duration_s=10),
            dict(job_id="B", submit_s=10, num_gpus=1, duration_s=5),
            dict(job_id="C", submit_s=10, num_gpus=1, duration_s=5)]
    res = run(jobs, [("V100", 1, 1)], "fifo")
    assert res.policy_calls == 3
    assert times(res)["C"][:2] == (15, 20)

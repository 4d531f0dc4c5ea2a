"""The engine with failures (simulator.failures): hand cases worked out on paper, a node failure
that stops exactly the jobs on the node, Young/Daly, and the invariants of every policy on a
cluster whose nodes fail and come back."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from policies.registry import POLICIES, make_policy
from predictor.common.inputs import SpecError
from simulator.cluster import homogeneous_groups
from simulator.failure_models import FailureModel, JobFates
from simulator.failures import (
    FailureSimulation,
    check_checkpoint_every,
    checkpoint_intervals,
)
from simulator.metrics import summarize
from simulator.run import RunConfig, execute
from simulator.timing import make_predictor
from tests.failing import RandomNodes
from tests.records import from_records


def fates(lengths, gaps=None, outcome=None) -> JobFates:
    gaps = gaps if gaps is not None else [tuple(0.0 for _ in job) for job in lengths]
    outcome = outcome if outcome is not None else ["completed"] * len(lengths)
    return JobFates([tuple(x) for x in lengths], [tuple(g) for g in gaps], np.array(outcome, dtype=object), False)


def job(job_id, duration, submit=0.0, num_gpus=1, **extra):
    return {"job_id": job_id, "submit_s": submit, "num_gpus": num_gpus, "duration_s": duration, **extra}


NOTHING = FailureModel(spec="test", replay=False, jobs=None, nodes=None)


def simulate(records, groups, job_fates, *, policy="fifo", model=NOTHING, every="none", seed=0, predictor="truth"):
    trace = from_records(records)
    cluster = homogeneous_groups(groups, "t")
    sim = FailureSimulation(trace, cluster, make_policy(policy), make_predictor(predictor, seed=1), failures=model,
                            fates=job_fates, checkpoint_every=every, seed=seed)
    result = sim.run()
    return sim, result, result.records.set_index("job_id")


def test_one_failure_with_checkpoints_by_hand():
    # 1 GPU; A: 1000 s of work, checkpoint every 200 s of work, each write 10 s (the default restart
    # cost's fixed part: no checkpoint bytes). Its first attempt fails after 450 s on the GPUs:
    # work 0-200, write 200-210, work 210-410, write 410-420, work 420-450 -> 400 s kept, 30 s lost.
    # Back after a 100 s gap at 550; restart 10 s; 600 s of work with 2 writes: ends at 550 + 630.
    _, res, r = simulate([job("A", 1000.0)], [("V100", 1, 1)], fates([(450.0,)], [(100.0,)]), every="200")
    assert r.loc["A", "end"] == pytest.approx(1180.0) and r.loc["A", "jct"] == pytest.approx(1180.0)
    assert r.loc["A", "status"] == "completed"
    assert (r.loc["A", "attempts"], r.loc["A", "failed_attempts"]) == (2, 1)
    assert r.loc["A", "lost_work_s"] == pytest.approx(30.0)
    assert r.loc["A", "checkpoint_s"] == pytest.approx(40.0)  # 2 writes in each attempt
    assert r.loc["A", "restart_overhead_s"] == pytest.approx(10.0)
    assert r.loc["A", "gpu_seconds"] == pytest.approx(450.0 + 630.0)
    assert r.loc["A", "true_runtime"] == pytest.approx(1030.0)  # trained: 430 + 600 s
    segments = res.segments
    assert segments[["start", "end", "restart_s", "work_s", "checkpoint_s", "ended"]].values.tolist() == [
        [0.0, 450.0, 0.0, 430.0, 20.0, "failed"], [550.0, 1180.0, 10.0, 600.0, 20.0, "completed"]]
    s = summarize(res.records, homogeneous_groups([("V100", 1, 1)], "t"), policy_seconds=0, policy_calls=0,
                  wall_seconds=1, events=1, busy_by_type=res.busy_by_type)
    assert s["gpu_seconds_total"] == pytest.approx(1080.0)
    assert s["gpu_seconds_lost"] == pytest.approx(10.0 + 30.0 + 40.0)  # restart + redone + writes
    assert s["goodput"] == pytest.approx(1000.0 / 1080.0)
    assert (s["failed_attempts"], s["attempts_mean"], s["jobs_failed"], s["jobs_cancelled"]) == (1, 2.0, 0, 0)


def test_a_failure_during_a_write_loses_that_write():
    # fails at 205 s, inside the first write (200-210): nothing kept, 200 s redone
    _, _, r = simulate([job("A", 500.0)], [("V100", 1, 1)], fates([(205.0,)]), every="200")
    assert r.loc["A", "lost_work_s"] == pytest.approx(200.0)
    # again from 205: restart 10, 500 s of work with 2 writes -> 205 + 10 + 520
    assert r.loc["A", "end"] == pytest.approx(735.0)


def test_without_checkpoints_a_failure_loses_everything_and_a_failed_job_ends_failed():
    _, res, r = simulate([job("A", 100.0), job("B", 100.0)], [("V100", 1, 2)],
                         fates([(60.0,), ()], outcome=["failed", "cancelled"]))
    # A: fails at 60 (all lost), again at once: restart 10 + 100 s -> its final attempt ends failed
    assert (r.loc["A", "status"], r.loc["A", "end"], r.loc["A", "lost_work_s"]) == ("failed", 170.0, 60.0)
    assert (r.loc["B", "status"], r.loc["B", "end"]) == ("cancelled", 100.0)
    s = summarize(res.records, homogeneous_groups([("V100", 1, 2)], "t"), policy_seconds=0, policy_calls=0,
                  wall_seconds=1, events=1, busy_by_type=res.busy_by_type)
    assert (s["jobs"], s["jobs_failed"], s["jobs_cancelled"]) == (2, 1, 1)
    assert s["failed_gpu_seconds"] == pytest.approx(170.0) and s["gpu_seconds_total"] == pytest.approx(270.0)
    assert s["goodput"] == 0.0  # no job completed


def test_a_failed_attempt_longer_than_the_work_left_does_not_happen():
    _, _, r = simulate([job("A", 100.0)], [("V100", 1, 1)], fates([(150.0,)]))
    assert (r.loc["A", "end"], r.loc["A", "failed_attempts"]) == (100.0, 0)


def test_failed_lengths_scale_with_the_gpu_type():
    # on a T4 a 100 s (V100-clock) job runs longer: its failure after "50 s" comes later by the same factor
    trace_records = [job("A", 100.0, gpu_type="V100")]
    sim, _, r = simulate(trace_records, [("T4", 1, 1)], fates([(50.0,)]))
    factor = sim.truth[0, 0] / 100.0
    assert factor > 1
    assert r.loc["A", "end"] == pytest.approx(50.0 * factor + 10.0 + 100.0 * factor)


class FirstFailure:
    """A node-failure model for a hand case: one failure at ``at`` seconds, repaired after ``repair``."""

    rate_per_gpu_day = 0.0  # no failure counted in a job's MTBF (the hand case checkpoints never)

    def __init__(self, at: float, repair: float):
        self.calls = 0
        self.at, self.repair = at, _Fixed(repair)

    def interval(self, rng, up_gpus):
        self.calls += 1
        return self.at if self.calls == 1 else math.inf


class _Fixed:
    def __init__(self, seconds):
        self.seconds = seconds

    def sample(self, rng, n):
        return np.full(n, self.seconds)


def test_a_node_failure_stops_the_jobs_on_that_node_and_no_other():
    # two 2-GPU nodes, four 1-GPU jobs of 1000 s: two on each node (best fit fills a node first)
    model = FailureModel(spec="test", replay=False, jobs=None, nodes=FirstFailure(300.0, 500.0))
    jobs = [job(name, 1000.0) for name in "ABCD"]
    sim, res, r = simulate(jobs, [("V100", 2, 2)], fates([()] * 4), model=model)
    assert len(sim.outages) == 1
    node, failed_at, repaired_at = sim.outages[0]
    assert (failed_at, repaired_at) == (300.0, 800.0)
    names = [n.name for n in sim.cluster.nodes]
    on_node = {j for j, ids in r["gpu_ids"].items()
               if any(sim.state.gpu_node[int(g)] == node for g in ids.split(","))}
    first = res.segments.groupby("job_id").first()
    hit = set(first.index[first["ended"] == "node failure"])
    assert len(hit) == 2 and hit.isdisjoint(set("ABCD") - hit)
    for name in hit:  # failed at 300 (all lost: no checkpoints), back at once but the node is down
        assert r.loc[name, "failed_attempts"] == 1 and r.loc[name, "lost_work_s"] == pytest.approx(300.0)
        assert r.loc[name, "end"] == pytest.approx(800.0 + 10.0 + 1000.0)  # waits for the repair
    for name in set("ABCD") - hit:
        assert r.loc[name, "failed_attempts"] == 0 and r.loc[name, "end"] == 1000.0
    assert on_node == hit  # the records' GPUs of the re-run are on the repaired node again
    assert res.records["status"].eq("completed").all()
    assert sim.outages_frame()["node"].tolist() == [names[node]]


def test_young_daly_by_hand():
    # write 10 s, MTBF 1 h: sqrt(2 x 10 x 3600) = 268.33 s; nothing fails: never
    got = checkpoint_intervals("optimal", np.array([10.0, 10.0]), np.array([3600.0, np.inf]))
    assert got[0] == pytest.approx(math.sqrt(72000.0)) and got[1] == np.inf
    assert checkpoint_intervals("900", np.array([10.0]), np.array([5.0])).tolist() == [900.0]
    assert checkpoint_intervals("none", np.array([10.0]), np.array([5.0])).tolist() == [np.inf]


@pytest.mark.parametrize("bad", ["0", "-5", "nan", "inf", "soon", ""])
def test_a_bad_checkpoint_interval_is_refused_in_one_line(bad):
    with pytest.raises(ValueError, match="--checkpoint-every"):
        check_checkpoint_every(bad)


def test_checkpoints_without_failures_are_refused():
    with pytest.raises(SpecError, match="only with --failures"):
        execute(RunConfig(policy="fifo", predictor="truth", workload="pai-like:20", checkpoint_every="600"))


def test_no_failures_runs_the_plain_engine():
    plain = execute(RunConfig(policy="fifo", predictor="truth", workload="pai-like:50"))
    assert "failed_attempts" not in plain.records and plain.manifest["failures"] is None


def test_node_failures_end_to_end_are_deterministic_per_seed(tmp_path):
    def run(seed):
        config = RunConfig(policy="sjf", predictor="truth", workload="pai-like:300", seed=seed, failures="nodes:2")
        return execute(config)

    a, b, c = run(0), run(0), run(1)
    pd.testing.assert_frame_equal(a.records, b.records)
    assert a.summary["failed_attempts"] > 0 and a.outages is not None and len(a.outages) > 0
    assert not a.records.equals(c.records)
    assert a.summary["jobs"] == 300 - a.summary["rejected"]
    written = a.write(tmp_path / "run")
    assert (written / "outages.parquet").exists() and (written / "segments.parquet").exists()
    assert json.loads((written / "manifest.json").read_text())["failures"]["node_failures"] == len(a.outages)


# -- every policy, random failures ---------------------------------------------------------------
GPU_TYPES = ["V100", "T4"]
POLICY_SPECS = sorted(POLICIES) + ["srtf:lease=20,restart=3", "tiresias:thresholds=40/200,restart=3"]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(jobs=st.lists(st.tuples(st.integers(0, 200), st.sampled_from([1, 1, 2, 4]), st.integers(0, 150),
                               st.lists(st.tuples(st.integers(0, 150), st.integers(0, 30)), max_size=2),
                               st.sampled_from(["completed", "completed", "failed", "cancelled"])),
                     min_size=1, max_size=20),
       groups=st.lists(st.tuples(st.sampled_from(GPU_TYPES), st.sampled_from([1, 2, 4]), st.integers(1, 3)),
                       min_size=1, max_size=3),
       policy=st.sampled_from(POLICY_SPECS), nodes=st.sampled_from([None, 40.0, 400.0]),
       every=st.sampled_from(["none", "30", "optimal"]), seed=st.integers(0, 3))
def test_every_policy_with_random_failures(jobs, groups, policy, nodes, every, seed):
    records = [job(f"j{i}", float(d), submit=float(s), num_gpus=n) for i, (s, n, d, _, _) in enumerate(jobs)]
    plan = fates([tuple(float(x) for x, _ in tries) for *_, tries, _ in jobs],
                 [tuple(float(g) for _, g in tries) for *_, tries, _ in jobs], [o for *_, o in jobs])
    model = FailureModel(spec="test", replay=False, jobs=None, nodes=None if nodes is None else RandomNodes(nodes))
    sim, res, _ = simulate(records, groups, plan, policy=policy, model=model, every=every, seed=seed)
    rec = res.records
    admitted = rec["status"] != "rejected"
    # nothing lost: every job completed, failed, was cancelled, or was rejected with a reason
    assert set(rec["status"]) <= {"completed", "failed", "cancelled", "rejected"}
    assert (rec.loc[~admitted, "reason"] != "").all()
    assert rec.loc[admitted, "end"].notna().all() and (rec.loc[admitted, "end"] >= rec.loc[admitted, "start"]).all()
    for i, (*_, outcome) in enumerate(jobs):
        if admitted.iloc[i]:
            assert rec["status"].iloc[i] == outcome
    seg = res.segments
    if not len(seg):
        return  # every job was rejected
    # the work done once: each admitted job's stretches hold its work plus what was redone
    done = seg.groupby("job")["work_s"].sum()
    one_type = seg.groupby("job")["gpu_type"].nunique() == 1
    for i in np.flatnonzero(admitted.to_numpy()):
        if one_type[i]:  # seconds of work add up on one type
            k = sim.type_of[i]
            assert done[i] == pytest.approx(sim.truth[i, k] * sim.slowdown[i] + sim.lost_work[i], rel=1e-6, abs=1e-6)
    # GPU-seconds: the records hold the stretches', and no GPU runs two stretches at once
    held = (seg["end"] - seg["start"]) * rec["num_gpus"].to_numpy()[seg["job"]]
    assert held.groupby(seg["job"]).sum().to_numpy() == pytest.approx(rec.loc[seg["job"].unique(), "gpu_seconds"]
                                                                        .sort_index().to_numpy())
    per_gpu = seg.assign(gpu=seg["gpu_ids"].str.split(",")).explode("gpu")
    for _, stretches in per_gpu.sort_values(["start", "end"]).groupby("gpu"):
        assert (stretches["start"].to_numpy()[1:] >= stretches["end"].to_numpy()[:-1] - 1e-9).all()
    # no stretch on a node while it was down
    for node, failed_at, repaired_at in sim.outages:
        on = per_gpu[per_gpu["gpu"].astype(int).map(lambda g: sim.state.gpu_node[g]) == node]
        assert ((on["end"] <= failed_at + 1e-9) | (on["start"] >= repaired_at - 1e-9)).all()
    assert not sim.state.down or sim.outages  # a node down at the end failed during the run


def test_replay_of_a_three_job_log_by_hand(tmp_path):
    # checkpoints never: a failed attempt loses all its work; each start after the first pays the
    # 10 s restart. A: 100 s, then 300 s after a 50 s gap -> work 400; fails at 100, back at 150,
    # 10 + 400 -> ends at 560. B: one attempt of 200 s. C: 50 s, gap 10, 30 s, gap 10, then 100 s
    # -> work 180; fails at 50 and at 60 + 30 = 90, back at 100, 10 + 180 -> ends at 290.
    def attempt(start, end):
        return {"start_time": f"2017-10-01 00:{start // 60:02d}:{start % 60:02d}",
                "end_time": f"2017-10-01 00:{end // 60:02d}:{end % 60:02d}"}

    log = [{"id": "A", "num_gpus": 1, "submitted_time": "2017-10-01 00:00:00",
            "attempts": [attempt(0, 100), attempt(150, 450)]},
           {"id": "B", "num_gpus": 1, "submitted_time": "2017-10-01 00:00:00", "attempts": [attempt(0, 200)]},
           {"id": "C", "num_gpus": 1, "submitted_time": "2017-10-01 00:00:00",
            "attempts": [attempt(0, 50), attempt(60, 90), attempt(100, 200)]}]
    path = tmp_path / "log.json"
    path.write_text(json.dumps(log))
    from traces.philly import load_json

    trace = load_json(path, epoch="2017-10-01 00:00:00")
    config = RunConfig(policy="fifo", predictor="truth", trace=f"philly-json:{path}", failures="replay",
                       checkpoint_every="none", deadline_fraction=0.0)
    out = execute(config, trace=trace, cluster=homogeneous_groups([("V100", 4, 1)], "t"))
    r = out.records.set_index("job_id")
    assert r["end"].to_dict() == {"A": 560.0, "B": 200.0, "C": 290.0}
    assert r["failed_attempts"].to_dict() == {"A": 1, "B": 0, "C": 2}
    assert r["lost_work_s"].to_dict() == {"A": 100.0, "B": 0.0, "C": 70.0}
    assert out.summary["attempts_mean"] == pytest.approx(6 / 3)
    assert out.manifest["failures"]["models"][0]["model"] == "replay"


def test_the_timeline_marks_failed_stretches_and_failed_nodes(tmp_path):
    from simulator.timeline import run_timeline

    out = execute(RunConfig(policy="fifo", predictor="truth", workload="pai-like:200", failures="nodes:5"))
    run = out.write(tmp_path / "run")
    events = run_timeline(run)["traceEvents"]
    failed = [e for e in events if e.get("cat") == "job" and e.get("cname") == "terrible"]
    down = [e for e in events if e.get("cat") == "outage"]
    assert failed and all(e["args"]["stretch_ended"] == "node failure" for e in failed)
    assert len({(e["args"]["node"], e["ts"]) for e in down}) == len(out.outages)


def test_the_command_line_refuses_a_bad_failure_spec_in_one_line():
    from click.testing import CliRunner

    from simulator.cli import main

    for spec in ("nodes:-1", "jobs:nowhere", "nodes:1,repair=0", "replay+jobs:philly"):
        result = CliRunner().invoke(main, ["--policy", "fifo", "--predictor", "truth", "--workload", "pai-like:5",
                                           "--failures", spec, "--quiet"])
        assert result.exit_code != 0 and "--failures" in result.output, result.output
        assert "Traceback" not in result.output and len(result.output.strip().splitlines()) == 1


def test_a_sweep_grid_takes_failures_and_checkpoints_as_axes():
    from simulator.sweep.grid import plan

    configs = plan("fifo", "truth", failures=["none,nodes:1,repair=600"], checkpoints="optimal,600")
    got = sorted((c.failures, str(c.checkpoint_every)) for c in configs)
    assert got == [("nodes:1,repair=600", "600"), ("nodes:1,repair=600", "optimal"), ("none", "None")]


def test_a_run_with_failures_plots_the_gpus_of_failed_attempts(tmp_path):
    from simulator.plots import held_gpus, plot_run

    out = execute(RunConfig(policy="fifo", predictor="truth", workload="pai-like:100", failures="nodes:5"))
    run = out.write(tmp_path / "run")
    held = held_gpus(run, out.records)
    assert held["failed"].sum() == (out.segments["ended"] == "node failure").sum() > 0
    assert {p.name for p in plot_run(run, tmp_path / "plots")} >= {"utilisation.png", "jct_cdf.png"}


def test_a_job_that_cannot_finish_between_failures_stops_the_run_with_a_reason():
    # no checkpoints and a node failure every ~10 s on a job of 1,000 s: it would start again for ever
    from simulator.engine import SimulationError

    model = FailureModel(spec="test", replay=False, jobs=None, nodes=RandomNodes(10.0))
    with pytest.raises(SimulationError, match="cannot finish between failures"):
        simulate([job("A", 1000.0)], [("V100", 1, 1)], fates([()]), model=model)

"""The preemptive engine and its policies, on cases worked out by hand, and the invariants of
preemption: progress conserved across suspensions and moves, restarts charged once per resume."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

from policies.base import Placement, PolicyError, Preemption
from policies.preemptive import PreemptivePolicy
from policies.registry import make_policy
from predictor.common.inputs import SpecError
from simulator.cluster import homogeneous_groups
from simulator.preemption import make_simulation
from simulator.timing import make_predictor
from tests.records import from_records


def run(records, groups, policy, predictor="truth"):
    policy = make_policy(policy) if isinstance(policy, str) else policy
    return make_simulation(from_records(records), homogeneous_groups(groups, "t"), policy,
                           make_predictor(predictor, seed=1)).run()


def by_job(result) -> pd.DataFrame:
    return result.records.set_index("job_id")


def job(job_id, duration, submit=0.0, **extra):
    return {"job_id": job_id, "submit_s": submit, "num_gpus": 1, "duration_s": duration, **extra}


def test_srtf_preempts_the_longer_job_at_the_next_round():
    # 1 GPU, lease 300 s, restart 50 s. t=0: A (1000 s) starts. t=100: B (200 s) waits (no round).
    # t=300 round: A has 700 s left, B 200 s: B takes the GPU, A is suspended (30 % done).
    # t=500: B ends; A resumes: 50 s restart + 700 s -> ends at 1250.
    res = run([job("A", 1000.0), job("B", 200.0, submit=100.0)], [("V100", 1, 1)], "srtf:lease=300,restart=50")
    r = by_job(res)
    assert (r.loc["A", "start"], r.loc["A", "end"]) == (0.0, 1250.0)
    assert (r.loc["B", "start"], r.loc["B", "end"]) == (300.0, 500.0)
    assert (r.loc["A", "jct"], r.loc["B", "jct"]) == (1250.0, 400.0)
    assert r.loc["A", "preemptions"] == 1 and r.loc["B", "preemptions"] == 0
    assert r.loc["A", "restart_overhead_s"] == 50.0 and r.loc["B", "restart_overhead_s"] == 0.0
    assert r.loc["A", "true_runtime"] == pytest.approx(1000.0)  # trained 300 + 700 s
    segments = res.segments.sort_values(["start", "job"])
    assert segments[["job_id", "start", "end", "restart_s"]].values.tolist() == [
        ["A", 0.0, 300.0, 0.0], ["B", 300.0, 500.0, 0.0], ["A", 500.0, 1250.0, 50.0]]


def test_tiresias_demotes_by_attained_service_and_serves_a_queue_running_jobs_first():
    # 1 GPU, threshold 100 GPU-s, no restart cost. A (1000 s) at 0, B (1000 s) at 10 (waits: A runs).
    # t=100: A has 100 GPU-s -> the second queue; B (first queue) preempts it. t=200: B has 100 ->
    # the second queue too, behind A, which waits there first: A resumes (900 s left) and ends at
    # 1100; B resumes then with 900 s left and ends at 2000.
    res = run([job("A", 1000.0), job("B", 1000.0, submit=10.0)], [("V100", 1, 1)], "tiresias:thresholds=100,restart=0")
    r = by_job(res)
    assert (r.loc["A", "start"], r.loc["A", "end"], r.loc["A", "preemptions"]) == (0.0, 1100.0, 1)
    assert (r.loc["B", "start"], r.loc["B", "end"], r.loc["B", "preemptions"]) == (100.0, 2000.0, 1)


@pytest.mark.parametrize("timer, demoted", [("paper", 50.0), ("simulator", 70.0)])
def test_tiresias_demotion_timer_the_papers_rule_and_the_simulators_slip(timer, demoted):
    # 2 GPUs. A (2 GPUs, 1000 s) at 0 holds both; B and C (1 GPU, 10 s) arrive at 1 and 40 and wait.
    # A's service reaches the 100 GPU-s threshold at 50 s (the paper's rule). Tiresias' simulator
    # sets its timer at each event to now + (100 - seconds run) // GPUs: at 40, 40 + 60 // 2 = 70.
    # At the demotion B and C run for 10 s, then A resumes: it ends at 1010 either way.
    jobs = [job("A", 1000.0, num_gpus=2), job("B", 10.0, submit=1.0), job("C", 10.0, submit=40.0)]
    r = by_job(run(jobs, [("V100", 2, 1)], f"tiresias:thresholds=100,restart=0,timer={timer}"))
    assert (r.loc["B", "start"], r.loc["B", "end"]) == (demoted, demoted + 10)
    assert (r.loc["C", "start"], r.loc["C", "end"]) == (demoted, demoted + 10)
    assert r.loc["A", "end"] == pytest.approx(1010.0) and r.loc["A", "preemptions"] == 1


def test_restarts_are_charged_once_per_resume_never_at_a_first_start():
    # A (300 s) at 0 is preempted at each of the rounds 100 and 200 by shorter arrivals, once each.
    jobs = [job("A", 300.0), job("B", 50.0, submit=50.0), job("C", 20.0, submit=160.0)]
    res = run(jobs, [("V100", 1, 1)], "srtf:lease=100,restart=7")
    r = by_job(res)
    segments = res.segments
    for job_id in ("A", "B", "C"):
        own = segments[segments["job_id"] == job_id].sort_values("start")
        assert own["restart_s"].iloc[0] == 0.0  # a first start costs nothing
        assert (own["restart_s"].iloc[1:] == 7.0).all()
        assert r.loc[job_id, "restart_overhead_s"] == 7.0 * r.loc[job_id, "preemptions"]
        assert len(own) == r.loc[job_id, "preemptions"] + 1
    assert r.loc["A", "preemptions"] == 2
    summary_lost = (r["restart_overhead_s"] * r["num_gpus"]).sum()
    assert summary_lost == 14.0


def test_progress_is_conserved_across_preemptions_and_moves_between_types():
    # Two GPU types with different true speeds; SRTF moves suspended jobs to wherever they finish
    # first. Every completed job's work, summed over its segments as fractions of its true run time
    # on each segment's type, is exactly one job.
    rng = np.random.default_rng(3)
    jobs = []
    for i in range(40):
        a100 = float(rng.integers(50, 2000))
        jobs.append({"job_id": f"j{i}", "submit_s": float(rng.integers(0, 3000)),
                     "num_gpus": int(rng.choice([1, 1, 2])), "duration_s": a100, "gpu_type": "A100",
                     "runtime_s:A100": a100, "runtime_s:V100": a100 * float(rng.uniform(1.2, 3.0))})
    res = run(jobs, [("A100", 2, 1), ("V100", 2, 1)], "srtf:lease=120,restart=5", predictor="noisy:0.3")
    rec = res.records
    assert rec["preemptions"].sum() > 5
    truth = {(j["job_id"], "A100"): j["runtime_s:A100"] for j in jobs} | \
            {(j["job_id"], "V100"): j["runtime_s:V100"] for j in jobs}
    fractions = res.segments.assign(fraction=[w / truth[(j, t)] for j, t, w in res.segments[
        ["job_id", "gpu_type", "work_s"]].itertuples(index=False)]).groupby("job_id")["fraction"].sum()
    assert np.allclose(fractions.loc[rec["job_id"]].to_numpy(), 1.0, rtol=0, atol=1e-9)
    moved = res.segments.groupby("job_id")["gpu_type"].nunique()
    assert (moved > 1).any()  # some job resumed on the other type


def test_a_policy_that_reads_no_progress_gets_none_and_its_preempted_work_is_kept():
    # Tiresias reads attained service alone: the engine leaves progress out of its view and works
    # out a suspended job's fraction done at the suspension; every job's work still adds up to one.
    rng = np.random.default_rng(5)
    jobs = [job(f"j{i}", float(rng.integers(50, 1500)), submit=float(rng.integers(0, 2000)),
                num_gpus=int(rng.choice([1, 1, 2]))) for i in range(40)]
    policy, seen = make_policy("tiresias:thresholds=100/400,restart=5"), []
    schedule = policy.schedule

    def recorded(view):
        seen.append(view.progress is None)
        return schedule(view)

    policy.schedule = recorded
    res = run(jobs, [("V100", 2, 2)], policy)
    assert seen and all(seen)
    assert res.records["preemptions"].sum() > 5
    duration = {j["job_id"]: j["duration_s"] for j in jobs}
    worked = res.segments.groupby("job_id")["work_s"].sum()
    assert np.allclose([worked[j] / duration[j] for j in worked.index], 1.0, rtol=0, atol=1e-9)


def test_srtf_with_an_infinite_lease_is_sjf():
    rng = np.random.default_rng(11)
    jobs = [{"job_id": f"j{i}", "submit_s": float(rng.integers(0, 500)), "num_gpus": int(rng.choice([1, 2, 4])),
             "duration_s": float(rng.integers(1, 400))} for i in range(120)]
    groups = [("V100", 4, 2), ("T4", 2, 2)]
    srtf = run(jobs, groups, "srtf:lease=inf,restart=0", predictor="noisy:0.5")
    sjf = run(jobs, groups, "sjf", predictor="noisy:0.5")
    assert srtf.records[sjf.records.columns].equals(sjf.records)
    assert (srtf.records["preemptions"] == 0).all()


class PreemptsBetweenRounds(PreemptivePolicy):
    name = "rogue"

    def schedule(self, view):
        if view.running and not view.at_round:
            return [Preemption(next(iter(view.running)))]
        return [Placement(j, view.gpu_types[0]) for j in list(view.waiting)[:1]
                if view.free_by_type[0] >= view.num_gpus[j]]


def test_a_preemption_between_rounds_is_refused():
    with pytest.raises(PolicyError, match="between rounds"):
        run([job("A", 100.0), job("B", 10.0, submit=5.0)], [("V100", 1, 1)], PreemptsBetweenRounds(lease=1000))


@pytest.mark.parametrize("spec,option", [("srtf:lease=0", "lease"), ("srtf:lease=-6", "lease"),
                                         ("tiresias:restart=-1", "restart"), ("srtf:storage_gbps=0", "storage_gbps"),
                                         ("tiresias:thresholds=500/100", "thresholds"),
                                         ("tiresias:starve=nan", "starve")])
def test_bad_preemption_options_name_the_option(spec, option):
    with pytest.raises(SpecError, match=f"option {option}="):
        make_policy(spec)


def test_simrun_prints_the_preemptions_and_refuses_a_bad_lease_in_one_line(tmp_path):
    from simulator.cli import main

    out = CliRunner().invoke(main, ["--policy", "srtf:lease=300", "--predictor", "truth", "--workload",
                                    "philly-like:200", "--out", str(tmp_path / "run"), "--quiet"])
    assert out.exit_code == 0, out.output
    import json

    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["preemptions"] > 0 and summary["gpu_seconds_lost"] > 0
    bad = CliRunner().invoke(main, ["--policy", "srtf:lease=0", "--predictor", "truth", "--quiet"])
    assert bad.exit_code != 0 and "option lease='0'" in bad.output and len(bad.output.strip().splitlines()) == 1


def test_tiresias_reads_no_prediction():
    rng = np.random.default_rng(2)
    jobs = [job(f"j{i}", float(rng.integers(10, 900)), submit=float(rng.integers(0, 2000)),
                num_gpus=int(rng.choice([1, 2]))) for i in range(60)]
    truth = run(jobs, [("V100", 2, 2)], "tiresias:thresholds=200/2000")
    noisy = run(jobs, [("V100", 2, 2)], "tiresias:thresholds=200/2000", predictor="noisy:1.0")
    assert truth.records.drop(columns="predicted_runtime").equals(noisy.records.drop(columns="predicted_runtime"))
    assert truth.records["preemptions"].sum() > 0


def test_a_resume_reads_the_jobs_checkpoint_at_the_storage_bandwidth():
    # The SRTF case above, A's checkpoint 4 GB at 2 GB/s: its resume costs 50 + 2 s, so it ends at 1252.
    res = run([job("A", 1000.0, checkpoint_bytes=4e9), job("B", 200.0, submit=100.0, checkpoint_bytes=1e12)],
              [("V100", 1, 1)], "srtf:lease=300,restart=50,storage_gbps=2")
    r = by_job(res)
    assert r.loc["A", "restart_overhead_s"] == 52.0 and r.loc["A", "end"] == 1252.0
    assert r.loc["B", "restart_overhead_s"] == 0.0  # never resumed: its size costs nothing


def test_a_preemptive_run_writes_its_segments_and_the_timeline_draws_each(tmp_path):
    # The SRTF hand case, through simrun's files: segments.parquet holds A's two stretches and B's,
    # and the timeline draws those three bars (not A as one bar over B's), the queue rising
    # again when A is suspended.
    from simulator.run import RunConfig, RunOutput, execute
    from simulator.timeline import run_timeline

    trace = from_records([job("A", 1000.0), job("B", 200.0, submit=100.0)])
    config = RunConfig(policy="srtf:lease=300,restart=50", predictor="truth")
    out = execute(config, trace=trace, cluster=homogeneous_groups([("V100", 1, 1)], "t"))
    assert out.files() == (*RunOutput.FILES, RunOutput.SEGMENTS)
    folder = out.write(tmp_path / "run")
    saved = pd.read_parquet(folder / "segments.parquet").sort_values("start")
    assert saved[["job_id", "start", "end", "restart_s", "work_s"]].values.tolist() == [
        ["A", 0.0, 300.0, 0.0, 300.0], ["B", 300.0, 500.0, 0.0, 200.0], ["A", 500.0, 1250.0, 50.0, 700.0]]
    doc = run_timeline(folder)
    bars = sorted((e["args"]["job_id"], e["ts"] / 1e6, (e["ts"] + e["dur"]) / 1e6)
                  for e in doc["traceEvents"] if e["ph"] == "X")
    assert bars == [("A", 0.0, 300.0), ("A", 500.0, 1250.0), ("B", 300.0, 500.0)]
    waiting = [(e["ts"] / 1e6, e["args"]["waiting"]) for e in doc["traceEvents"] if e["ph"] == "C"]
    assert waiting == [(0.0, 0), (100.0, 1), (300.0, 1), (500.0, 0)]  # at 300 B starts, A waits
    # a non-preemptive run writes none
    fifo = execute(RunConfig(policy="fifo", predictor="truth"), trace=trace,
                   cluster=homogeneous_groups([("V100", 1, 1)], "t"))
    assert fifo.files() == RunOutput.FILES and fifo.segments is None


def test_a_bad_segments_file_is_named_by_row_and_field(tmp_path):
    from predictor.common.inputs import InputError
    from simulator.run import RunConfig, execute
    from simulator.timeline import run_timeline

    trace = from_records([job("A", 1000.0), job("B", 200.0, submit=100.0)])
    folder = execute(RunConfig(policy="srtf:lease=300", predictor="truth"), trace=trace,
                     cluster=homogeneous_groups([("V100", 1, 1)], "t")).write(tmp_path / "run")
    segments = pd.read_parquet(folder / "segments.parquet")
    segments.loc[1, "job"] = 7  # the run has 2 jobs
    segments.to_parquet(folder / "segments.parquet")
    with pytest.raises(InputError, match=r"segments.parquet: row 2 field 'job': 7 is not a row"):
        run_timeline(folder)


def test_a_preemptive_runs_utilisation_counts_gpus_only_while_held(tmp_path):
    # The SRTF hand case: its one GPU is busy from 0 to 1250 s without a gap (A, then B, then A);
    # the records alone would count it twice while B holds it (A from 0 to 1250 s, B 300–500 s).
    from simulator.plots import held_gpus, utilisation_series
    from simulator.run import RunConfig, execute

    trace = from_records([job("A", 1000.0), job("B", 200.0, submit=100.0)])
    folder = execute(RunConfig(policy="srtf:lease=300,restart=50", predictor="truth"), trace=trace,
                     cluster=homogeneous_groups([("V100", 1, 1)], "t")).write(tmp_path / "run")
    jobs = pd.read_parquet(folder / "jobs.parquet")
    t, u = utilisation_series(held_gpus(folder, jobs), 1)
    assert t.tolist() == [0.0, 300.0, 500.0, 1250.0] and u.tolist() == [1.0, 1.0, 1.0, 0.0]
    t, u = utilisation_series(jobs, 1)  # the records alone: 2 GPUs busy on a 1-GPU cluster
    assert u.max() == 2.0

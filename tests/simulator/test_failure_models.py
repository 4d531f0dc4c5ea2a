"""The failure models (simulator.failure_models): the --failures grammar and its one-line errors,
the presets against their sources, Young/Daly's MTBF by hand, the GPU-time tilt solved on hand
cases, seeded draws that respect each job's duration, and replayed fates from a written log."""

from __future__ import annotations

import csv
import json
import math
import os
from pathlib import Path

import numpy as np
import pytest

from predictor.common.inputs import SpecError
from simulator.failure_models import (
    ACME_ROWS,
    DEFAULT_REPAIR_S,
    GPU_CLASSES,
    JOB_PRESETS,
    NODE_PRESETS,
    TILT_B_LIMIT,
    AttemptData,
    FailureModel,
    JobFates,
    RepairTime,
    draw_attempts,
    draw_outcomes,
    gpu_class,
    job_fates,
    parse_failures,
    philly_attempts,
    tilt,
)
from tests.records import from_records
from traces import philly
from traces.schema import parse_attempts

REPO = Path(__file__).resolve().parents[2]
SHARED = Path(os.environ.get("ETS_SHARED") or REPO.parent / "shared")


def shared_file(rel: str) -> Path:
    path = SHARED / rel
    if not path.is_file():
        pytest.skip(f"{path} not present (set ETS_SHARED to the shared/ folder)")
    return path


# -- parsing ------------------------------------------------------------------------------------

def test_none_and_each_model_parse():
    assert parse_failures("none") is None and parse_failures(" None ") is None
    m = parse_failures("replay")
    assert (m.replay, m.jobs, m.nodes, m.spec) == (True, None, None, "replay")
    m = parse_failures("jobs:philly")
    assert m.jobs is JOB_PRESETS["philly"] and not m.replay and m.nodes is None
    assert (m.jobs.fail_share, m.jobs.fail_gpu_time_share, m.jobs.cancel_share, m.jobs.cancel_gpu_time_share) == \
        (0.305, 0.386, 0.09, 0.294)
    m = parse_failures("jobs:fail=0.25,cancel=0.1,fail_gpu_time=0.4")
    assert (m.jobs.name, m.jobs.fail_share, m.jobs.cancel_share) == ("explicit", 0.25, 0.1)
    assert (m.jobs.fail_gpu_time_share, m.jobs.cancel_gpu_time_share) == (0.4, None)
    m = parse_failures("nodes:1")
    assert (m.nodes.rate_per_gpu_day, m.nodes.name) == (1.0, "explicit")
    assert m.nodes.repair == RepairTime() and m.nodes.repair.mean_s == DEFAULT_REPAIR_S == 14_400.0
    assert "assumption, no source" in m.nodes.repair.source
    m = parse_failures("nodes:LLAMA3,repair=3600 + replay")
    assert m.replay and m.nodes.name == "llama3" and m.nodes.rate_per_gpu_day == 419 / (54 * 16_384)
    assert (m.nodes.repair.mean_s, m.nodes.repair.kind) == (3600.0, "exponential")
    m = parse_failures("nodes:0.5+jobs:helios")
    assert m.jobs is JOB_PRESETS["helios"] and m.nodes.rate_per_gpu_day == 0.5


BAD_SPECS = [
    ("", "empty"),
    ("disk:1", "unknown model 'disk'; known: replay, jobs:, nodes:"),
    ("nodes:1+", "an empty model between '+' signs"),
    ("none+nodes:1", "'none' stands alone"),
    ("replay:all", "replay takes no value"),
    ("jobs:alibaba", "unknown preset 'alibaba'; known: philly, acme-seren, acme-kalos, helios"),
    ("nodes:-1", "nodes: rate -1 must be above 0"),
    ("nodes:0", "nodes: rate 0 must be above 0"),
    ("nodes:often", "nodes: rate 'often' is not a number"),
    ("nodes:nan", "nodes: rate 'nan' is not finite"),
    ("nodes:inf", "nodes: rate 'inf' is not finite"),
    ("nodes:1_0", "nodes: rate '1_0' is not a number"),
    ("nodes:repair=5", "give a rate (failures per GPU-day) or a preset (llama3, rsc1, rsc2) first"),
    ("nodes:1,repair=0", "nodes: repair 0 must be above 0 seconds"),
    ("nodes:1,repair=-60", "nodes: repair -60 must be above 0 seconds"),
    ("nodes:1,repair=nan", "nodes: repair 'nan' is not finite"),
    ("nodes:1,fix=3", "nodes: unknown key 'fix'; known: repair"),
    ("nodes:1,repair=5,repair=6", "nodes: repair given twice"),
    ("nodes:1+nodes:2", "nodes given twice"),
    ("jobs:philly+jobs:helios", "jobs given twice"),
    ("replay+jobs:philly", "replay and jobs: do not combine"),
    ("jobs:fail=1.2,cancel=0", "jobs: fail 1.2 is outside [0, 1)"),
    ("jobs:fail=-0.1,cancel=0", "jobs: fail -0.1 is outside [0, 1)"),
    ("jobs:fail=0.6,cancel=0.5", "jobs: fail + cancel = 1.1, must be below 1"),
    ("jobs:fail=0.2", "jobs: cancel= is missing"),
    ("jobs:fail=0.2,cancel", "jobs: 'cancel' is not KEY=VALUE"),
    ("jobs:fail=0.2,cancel=0.1,cancel=0.2", "jobs: cancel given twice"),
    ("jobs:fail=0.2,cancel=0.1,retries=3", "jobs: unknown key 'retries'"),
    ("jobs:fail=0.2,cancel=0.1,fail_gpu_time=0", "jobs: fail_gpu_time 0 is outside (0, 1)"),
    ("jobs:fail=0,cancel=0.1,fail_gpu_time=0.3", "jobs: fail_gpu_time needs a share of jobs above 0"),
    ("jobs:fail=0.2,cancel=0.1,fail_gpu_time=0.6,cancel_gpu_time=0.5", "must be below 1"),
]


@pytest.mark.parametrize("spec,text", BAD_SPECS, ids=[s or "empty" for s, _ in BAD_SPECS])
def test_bad_specs_are_one_line_naming_the_option_and_value(spec, text):
    with pytest.raises(SpecError) as info:
        parse_failures(spec)
    message = str(info.value)
    assert "\n" not in message and message.startswith(f"--failures {spec!r}: "), message
    assert text in message, message


# -- presets and their sources ------------------------------------------------------------------

def test_the_acme_presets_are_the_published_summary():
    path = shared_file("traces/acme/cluster_summary.csv")
    with path.open(newline="") as handle:
        rows = {row["id"]: row for row in csv.DictReader(handle)}
    for name, (row, fail, fail_time, cancel, cancel_time) in ACME_ROWS.items():
        published = rows[row]
        assert (fail, fail_time, cancel, cancel_time) == tuple(
            float(published[c]) for c in ("fail_rate_gpu", "fail_rate_gpu_time", "cancel_rate_gpu",
                                          "cancel_rate_gpu_time")), name
        preset = JOB_PRESETS[name]
        assert f"row {row}" in preset.source and "NSDI'24" in preset.source


def test_the_node_presets_by_hand():
    llama3, source = NODE_PRESETS["llama3"]
    assert round(1 / llama3) == 2_112 and "419" in source and "16,384" in source  # ~ one per 2,100 GPU-days
    rsc1 = NODE_PRESETS["rsc1"][0]
    assert rsc1 == pytest.approx(6.50e-3 / 8) and NODE_PRESETS["rsc2"][0] == pytest.approx(2.34e-3 / 8)
    # the paper's projection: MTTF 1.8 h for a 16,384-GPU job on RSC-1
    mtbf = FailureModel("nodes:rsc1", False, None, parse_failures("nodes:rsc1").nodes).mtbf_s(
        np.array([16_384]), JobFates([()], [()], np.array(["completed"], dtype=object), False))
    assert mtbf[0] / 3600 == pytest.approx(24 / (2048 * 6.5e-3)) and round(mtbf[0] / 3600, 1) == 1.8


def test_describe_names_every_model_and_source():
    described = parse_failures("jobs:philly+nodes:llama3").describe()
    assert described["spec"] == "jobs:philly+nodes:llama3"
    jobs, nodes = described["models"]
    assert jobs["model"] == "jobs" and "AcmeTrace" in jobs["source"] and "Philly subset" in jobs["retried_attempts"]
    assert nodes["model"] == "nodes" and "Llama 3" in nodes["source"] and nodes["rate_per_gpu_day"] == 419 / 884_736
    assert "assumption" in nodes["repair"]["source"] and nodes["repair"]["mean_s"] == 14_400.0
    assert parse_failures("replay").describe()["models"][0]["model"] == "replay"
    json.dumps(described)  # fit for the manifest


# -- node failures and Young/Daly ---------------------------------------------------------------

def test_node_intervals_and_repairs_are_the_seeded_exponentials():
    nodes = parse_failures("nodes:2,repair=600").nodes
    assert nodes.interval(np.random.default_rng(0), 0) == math.inf
    assert nodes.interval(np.random.default_rng(3), 8) == np.random.default_rng(3).exponential(86_400 / 16)
    assert (nodes.repair.sample(np.random.default_rng(1), 4) == np.random.default_rng(1).exponential(600, 4)).all()
    assert (RepairTime.fixed(90).sample(np.random.default_rng(1), 3) == 90).all()


def _fates(n: int, mtbf: dict[str, float] | None = None) -> JobFates:
    return JobFates([()] * n, [()] * n, np.full(n, "completed", dtype=object), False, mtbf or {})


def test_mtbf_by_hand():
    gpus = np.array([8, 1, 4, 5, 9])
    assert list(gpu_class(gpus)) == [1, 0, 0, 1, 2]  # 1-4, 5-8, 9+
    nodes = parse_failures("nodes:1")
    assert nodes.mtbf_s(np.array([8]), _fates(1))[0] == 10_800.0  # 86,400 / (1 × 8)
    per_class = {"1-4": 21_600.0, "5-8": 21_600.0, "9+": math.inf}
    both = parse_failures("jobs:philly+nodes:1")
    # rates add: 1 / (1/10,800 + 1/21,600) = 7,200 s; a 9-GPU job: its nodes only, 86,400 / 9
    assert both.mtbf_s(gpus, _fates(5, per_class)).tolist() == pytest.approx(
        [7_200.0, 1 / (1 / 86_400 + 1 / 21_600), 1 / (4 / 86_400 + 1 / 21_600), 1 / (5 / 86_400 + 1 / 21_600),
         9_600.0])
    assert (parse_failures("replay").mtbf_s(gpus, _fates(5, {c: math.inf for c in GPU_CLASSES})) == math.inf).all()


# -- the GPU-time tilt --------------------------------------------------------------------------

def test_the_tilt_reproduces_both_shares_on_a_hand_case():
    # g = 1, 1, 1, 9: p = a g^b with a = 1/6, b = 1/2 gives 1/6, 1/6, 1/6, 1/2: mean 1/4, and
    # Σ p g / Σ g = (3/6 + 9/2) / 12 = 5/12
    p, info = tilt(np.array([1.0, 1.0, 1.0, 9.0]), 0.25, 5 / 12)
    assert p == pytest.approx([1 / 6, 1 / 6, 1 / 6, 1 / 2], rel=1e-9)
    assert (info["a"], info["b"]) == (pytest.approx(1 / 6, rel=1e-9), pytest.approx(0.5, rel=1e-9))
    # capped: g = 1, 1, 1, 16 at a share of 1/2 and 17/19 of the GPU time: 1/3, 1/3, 1/3 and 1
    p, _ = tilt(np.array([1.0, 1.0, 1.0, 16.0]), 0.5, 17 / 19)
    assert p == pytest.approx([1 / 3, 1 / 3, 1 / 3, 1.0], rel=1e-9)
    # a share of GPU time below the job share tilts towards the small jobs (b < 0)
    # (b = -1, a = 0.8: p = 0.8, 0.2, mean 1/2 and (0.8 + 4 × 0.2) / 5 = 0.32 of the GPU time)
    p, info = tilt(np.array([1.0, 4.0]), 0.5, 0.32)
    assert p == pytest.approx([0.8, 0.2], rel=1e-9) and info["b"] == pytest.approx(-1.0, rel=1e-9)


def test_the_tilt_is_flat_without_a_gpu_time_share_or_with_equal_jobs():
    p, info = tilt(np.array([1.0, 2.0, 30.0]), 0.3, None)
    assert (p == 0.3).all() and info["b"] == 0.0
    p, info = tilt(np.array([5.0, 5.0, 5.0]), 0.3, 0.6)
    assert (p == 0.3).all() and info["b"] == 0.0
    assert (tilt(np.array([1.0, 2.0]), 0.0, None)[0] == 0).all()


def test_an_unreachable_gpu_time_share_is_clipped_and_said():
    # the most the largest job can take: p = 0, 0, 0, 1 gives 9/12 of the GPU time, never 0.9
    p, info = tilt(np.array([1.0, 1.0, 1.0, 9.0]), 0.25, 0.9)
    assert info["b"] == TILT_B_LIMIT and "out of reach" in info["note"]
    assert p.mean() == pytest.approx(0.25) and info["achieved_gpu_time_share"] < 0.75


def test_outcomes_follow_the_probabilities_with_one_uniform_per_job():
    jobs = parse_failures("jobs:fail=0.25,cancel=0.25").jobs  # flat: p_f = p_c = 1/4
    rng = np.random.default_rng(7)
    outcome, info = draw_outcomes(jobs, np.ones(8, dtype=int), np.full(8, 100.0), rng)
    u = np.random.default_rng(7).random(8)
    expected = np.where(u < 0.25, "failed", np.where(u < 0.5, "cancelled", "completed"))
    assert outcome.tolist() == expected.tolist() and info["jobs_scaled_down"] == 0


# -- drawn attempts -----------------------------------------------------------------------------

DATA = AttemptData("hand", (np.array([0, 1, 2]), np.array([3]), np.array([0])),
                   np.array([5.0, 50.0, 500.0, 5000.0]), np.array([10.0, 20.0, 30.0, 40.0]))


def test_drawn_failed_lengths_are_shorter_than_each_job():
    gpus = np.array([1, 4, 8, 8, 8, 16])
    duration = np.array([600.0, 60.0, 0.0, 5.0, 5.5, 1e6])
    lengths, gaps = draw_attempts(DATA, gpus, duration, np.random.default_rng(11))
    for i, (ls, gs) in enumerate(zip(lengths, gaps)):
        assert len(ls) == len(gs) and all(length < duration[i] for length in ls)
        assert set(ls) <= set(DATA.lengths) and set(gs) <= set(DATA.gaps)
    assert lengths[2] == lengths[3] == ()  # duration 0, and shorter than every recorded length
    assert len(lengths[4]) == 3 and set(lengths[4]) == {5.0}  # 8 GPUs: three retries, only 5 s fits in 5.5 s
    assert lengths[5] == ()  # 9+ GPUs: the class's jobs never retried
    again = draw_attempts(DATA, gpus, duration, np.random.default_rng(11))
    assert again == (lengths, gaps)


def _write_subset(path: Path) -> Path:
    """A tiny Philly log in the subset's layout: a 4-GPU job retried once (3,600 s, then 100 s),
    an 8-GPU job run once."""
    records = [
        {"id": "a", "num_gpus": 4, "submitted_time": "2017-10-01 00:00:00", "attempts": [
            {"start_time": "2017-10-01 00:00:00", "end_time": "2017-10-01 01:00:00"},
            {"start_time": "2017-10-01 01:01:40", "end_time": "2017-10-01 02:00:00"}]},
        {"id": "b", "num_gpus": 8, "submitted_time": "2017-10-01 00:00:00", "attempts": [
            {"start_time": "2017-10-01 00:00:00", "end_time": "2017-10-01 05:00:00"}]},
    ]
    path.write_text(json.dumps(records))
    return path


def test_job_fates_are_seeded_and_read_the_subset_named(tmp_path, monkeypatch):
    monkeypatch.setenv("ETS_PHILLY_ATTEMPTS", str(_write_subset(tmp_path / "subset.json")))
    trace = from_records([{"job_id": f"j{i}", "submit_s": float(i), "num_gpus": 1 + i % 3,
                           "duration_s": 1000.0 * (i + 1)} for i in range(40)])
    model = parse_failures("jobs:fail=0.3,cancel=0.1,fail_gpu_time=0.5+nodes:1")
    a, b, c = job_fates(model, trace, 0), job_fates(model, trace, 0), job_fates(model, trace, 1)
    assert (a.failed_lengths, a.gaps, a.outcome.tolist()) == (b.failed_lengths, b.gaps, b.outcome.tolist())
    assert (a.failed_lengths, a.outcome.tolist()) != (c.failed_lengths, c.outcome.tolist())
    assert not a.replayed and set(a.outcome) <= {"completed", "failed", "cancelled"}
    # every retry is the subset's one: 3,600 s then 100 s, and only for jobs longer than 3,600 s
    for ls, gs, duration in zip(a.failed_lengths, a.gaps, trace.jobs["duration_s"]):
        assert set(ls) <= {3600.0} and set(gs) <= {100.0} and (not ls or duration > 3600)
    # the subset's 1-4 class: 1 failure (3,600 s) in 2 attempts: MTBF 3,600 / (1/2) = 7,200 s
    assert a.mtbf_by_class == {"1-4": 7_200.0, "5-8": math.inf, "9+": math.inf}
    assert a.info["outcome"]["failed"]["achieved_gpu_time_share"] == pytest.approx(0.5)


def test_without_the_subset_jobs_models_say_which_file_they_need(tmp_path, monkeypatch):
    monkeypatch.setenv("ETS_PHILLY_ATTEMPTS", str(tmp_path / "missing.json"))
    with pytest.raises(SpecError, match="set ETS_PHILLY_ATTEMPTS to that file") as info:
        job_fates(parse_failures("jobs:philly"), from_records([{"job_id": "a", "submit_s": 0.0, "num_gpus": 1,
                                                                 "duration_s": 10.0}]), 0)
    assert str(info.value).startswith("--failures 'jobs:philly': ") and "missing.json" in str(info.value)


def test_node_failures_alone_give_no_job_fates():
    trace = from_records([{"job_id": "a", "submit_s": 0.0, "num_gpus": 2, "duration_s": 10.0}])
    fates = job_fates(parse_failures("nodes:llama3"), trace, 0)
    assert (fates.failed_lengths, fates.gaps, fates.outcome.tolist(), fates.replayed) == ([()], [()], ["completed"],
                                                                                         False)


# -- replay -------------------------------------------------------------------------------------

def test_replay_gives_the_logs_own_attempts(tmp_path):
    records = [  # three jobs of the original log's layout: retried twice, run once, retried once
        {"jobid": "x", "status": "Failed", "user": "u", "submitted_time": "2017-10-01 00:00:00", "attempts": [
            {"start_time": "2017-10-01 00:00:00", "end_time": "2017-10-01 00:10:00", "detail": [{"gpus": [0, 1]}]},
            {"start_time": "2017-10-01 00:10:30", "end_time": "2017-10-01 00:40:30", "detail": [{"gpus": [0, 1]}]},
            {"start_time": "2017-10-01 00:41:00", "end_time": "2017-10-01 01:00:00", "detail": [{"gpus": [0, 1]}]}]},
        {"jobid": "y", "status": "Pass", "user": "u", "submitted_time": "2017-10-01 00:01:00", "attempts": [
            {"start_time": "2017-10-01 00:02:00", "end_time": "2017-10-01 00:03:00", "detail": [{"gpus": [0]}]}]},
        {"jobid": "z", "status": "Killed", "user": "u", "submitted_time": "2017-10-01 00:02:00", "attempts": [
            {"start_time": "2017-10-01 00:02:00", "end_time": "2017-10-01 00:02:05", "detail": [{"gpus": [0]}]},
            {"start_time": "2017-10-01 00:05:05", "end_time": "2017-10-01 00:06:00", "detail": [{"gpus": [0]}]}]},
    ]
    path = tmp_path / "log.json"
    path.write_text(json.dumps(records))
    trace = philly.load_json(path)
    fates = job_fates(parse_failures("replay"), trace, 0)
    assert trace.jobs["job_id"].tolist() == ["x", "y", "z"]
    assert fates.failed_lengths == [(600.0, 1800.0), (), (5.0,)]
    assert fates.gaps == [(30.0, 30.0), (), (180.0,)]
    assert fates.outcome.tolist() == ["failed", "completed", "cancelled"] and fates.replayed
    # 3 failed attempts of mean 2,405/3 s in 6 attempts (all 1-4 GPUs): MTBF (2,405/3) / (3/6) = 1,603.3 s
    assert fates.mtbf_by_class == {"1-4": pytest.approx(2405 / 3 * 2), "5-8": math.inf, "9+": math.inf}
    assert job_fates(parse_failures("replay"), trace, 5).failed_lengths == fates.failed_lengths  # no draw
    assert [parse_attempts(t) for t in trace.jobs["attempts"]] == [((600.0, 30.0), (1800.0, 30.0)), (), ((5.0, 180.0),)]


def test_replay_needs_a_trace_that_records_attempts():
    trace = from_records([{"job_id": "a", "submit_s": 0.0, "num_gpus": 1, "duration_s": 10.0}])
    with pytest.raises(SpecError) as info:
        job_fates(parse_failures("replay+nodes:1"), trace, 0)
    message = str(info.value)
    assert message.startswith("--failures 'replay+nodes:1': replay needs a trace that records attempts "
                              "(philly-json does; or a CSV with an `attempts` column)")
    assert f"this {trace.kind} trace" in message


# -- the real Philly subset ---------------------------------------------------------------------

def test_the_real_subsets_attempts(monkeypatch):
    path = shared_file("traces/philly/marwage_philly_jobs_subset.json")
    monkeypatch.delenv("ETS_PHILLY_ATTEMPTS", raising=False)
    described = philly_attempts().describe()
    assert described["jobs_by_class"] == {"1-4": 1457, "5-8": 1354, "9+": 223}  # one 7-GPU job among the 8s
    shares = described["retried_share_by_class"]
    assert (round(shares["1-4"], 3), round(shares["5-8"], 3), round(shares["9+"], 3)) == (0.251, 0.274, 0.354)
    assert described["failed_attempts"] == 1456 and described["gap_median_s"] == 186.0
    assert described["failed_length_median_s"] == 13_957.0  # 3.9 h
    trace = philly.load_json(path)
    fates = job_fates(parse_failures("jobs:philly"), trace, 0)
    for kind, (share, time_share) in {"failed": (0.305, 0.386), "cancelled": (0.09, 0.294)}.items():
        info = fates.info["outcome"][kind]
        assert (info["achieved_share"], info["achieved_gpu_time_share"]) == (pytest.approx(share),
                                                                             pytest.approx(time_share))
    lengths = [(ls, d) for ls, d in zip(fates.failed_lengths, trace.jobs["duration_s"]) if ls]
    assert lengths and all(max(ls) < d for ls, d in lengths)

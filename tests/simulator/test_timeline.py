"""``simrun timeline``: exact Chrome-trace events for a hand-built schedule, and no GPU
double-booked in a real run."""

from __future__ import annotations

import json
from collections import defaultdict

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

from predictor.common.inputs import InputError
from simulator.cli import main
from simulator.cluster import Cluster, Node
from simulator.run import RunConfig, execute
from simulator.timeline import chrome_trace, run_timeline

NAN = float("nan")


def hand_jobs() -> pd.DataFrame:
    return pd.DataFrame({
        "job_id": ["a", "b", "c", "r"],
        "status": ["completed", "completed", "completed", "rejected"],
        "submit": [0.0, 1.0, 2.0, 3.0],
        "start": [0.0, 10.0, 10.0, NAN],
        "end": [10.0, 15.0, 12.0, NAN],
        "gpu_type": ["V100", "V100", "V100", ""],
        "num_gpus": [2, 1, 1, 64],
        "deadline": [NAN, 12.0, NAN, NAN],
        "predicted_runtime": [9.0, 4.0, 2.5, NAN],
        "tardiness": [0.0, 3.0, 0.0, NAN],
        "gpu_ids": ["0,1", "0", "1", ""],
    })


def job_event(job, gpu, ts, dur, args):
    return {"name": f"job {job}", "cat": "job", "ph": "X", "ts": ts, "dur": dur, "pid": 1, "tid": gpu, "args": args}


def test_hand_built_schedule_gives_exactly_the_expected_events():
    cluster = Cluster("tiny", (Node("n0", "V100", 2),))
    doc = chrome_trace(hand_jobs(), cluster)
    assert doc["displayTimeUnit"] == "ms"
    a = {"job_id": "a", "num_gpus": 2, "gpu_type": "V100", "submit_s": 0.0, "queueing_delay_s": 0.0,
         "runtime_s": 10.0, "deadline_s": None, "tardiness_s": None, "predicted_runtime_s": 9.0}
    c = {"job_id": "c", "num_gpus": 1, "gpu_type": "V100", "submit_s": 2.0, "queueing_delay_s": 8.0,
         "runtime_s": 2.0, "deadline_s": None, "tardiness_s": None, "predicted_runtime_s": 2.5}
    b = {"job_id": "b", "num_gpus": 1, "gpu_type": "V100", "submit_s": 1.0, "queueing_delay_s": 9.0,
         "runtime_s": 5.0, "deadline_s": 12.0, "tardiness_s": 3.0, "predicted_runtime_s": 4.0}
    expected = [
        {"name": "process_name", "ph": "M", "pid": 1, "tid": 0, "args": {"name": "n0 (V100)"}},
        {"name": "process_sort_index", "ph": "M", "pid": 1, "tid": 0, "args": {"sort_index": 1}},
        {"name": "thread_name", "ph": "M", "pid": 1, "tid": 0, "args": {"name": "GPU 0"}},
        {"name": "thread_name", "ph": "M", "pid": 1, "tid": 1, "args": {"name": "GPU 1"}},
        job_event("a", 0, 0.0, 10e6, a), job_event("a", 1, 0.0, 10e6, a),
        job_event("c", 1, 10e6, 2e6, c),   # same start as b, ends first
        job_event("b", 0, 10e6, 5e6, b),
        {"name": "process_name", "ph": "M", "pid": 2, "tid": 0, "args": {"name": "queue"}},
        {"name": "process_sort_index", "ph": "M", "pid": 2, "tid": 0, "args": {"sort_index": -1}},
        {"name": "waiting jobs", "ph": "C", "ts": 0.0, "pid": 2, "tid": 0, "args": {"waiting": 0}},
        {"name": "waiting jobs", "ph": "C", "ts": 1e6, "pid": 2, "tid": 0, "args": {"waiting": 1}},
        {"name": "waiting jobs", "ph": "C", "ts": 2e6, "pid": 2, "tid": 0, "args": {"waiting": 2}},
        {"name": "waiting jobs", "ph": "C", "ts": 10e6, "pid": 2, "tid": 0, "args": {"waiting": 0}},
    ]
    assert doc["traceEvents"] == expected
    json.dumps(doc, allow_nan=False)  # valid JSON: no NaN


def test_without_a_cluster_processes_are_gpu_types():
    events = chrome_trace(hand_jobs(), None, queue_counter=False)["traceEvents"]
    assert events[0] == {"name": "process_name", "ph": "M", "pid": 1, "tid": 0, "args": {"name": "V100"}}
    assert [e["tid"] for e in events if e["ph"] == "X"] == [0, 1, 1, 0]


def test_real_run_never_double_books_a_gpu(tmp_path):
    out = execute(RunConfig(policy="hydra", predictor="noisy:0.2", workload="philly-like:300",
                            load_scale=2.0)).write(tmp_path / "run")
    jobs = pd.read_parquet(out / "jobs.parquet")
    result = CliRunner().invoke(main, ["timeline", str(out), "--out", str(tmp_path / "t.json")])
    assert result.exit_code == 0, result.output
    doc = json.loads((tmp_path / "t.json").read_text())
    assert doc == run_timeline(out)
    slices = [e for e in doc["traceEvents"] if e["ph"] == "X"]
    done = jobs[jobs["status"] == "completed"]
    assert len(slices) == done["num_gpus"].sum()
    tracks = defaultdict(list)
    for e in slices:
        tracks[(e["pid"], e["tid"])].append((e["ts"], e["ts"] + e["dur"]))
    names = {(e["pid"], e["tid"]) for e in doc["traceEvents"] if e["name"] == "thread_name"}
    assert set(tracks) <= names and len(names) == 36  # the default cluster, one track per GPU
    assert max(len(s) for s in tracks.values()) > 1  # GPUs are reused, so overlaps could happen
    for spans in tracks.values():
        spans.sort()
        for (_, end), (start, _) in zip(spans, spans[1:]):
            assert start >= end - 1e-3
    waiting = [e["args"]["waiting"] for e in doc["traceEvents"] if e["ph"] == "C"]
    assert min(waiting) >= 0 and max(waiting) > 0 and waiting[-1] == 0
    # process names are the default cluster's nodes
    pnames = {e["args"]["name"] for e in doc["traceEvents"] if e["name"] == "process_name"}
    assert "v100-8g-0 (V100)" in pnames and "queue" in pnames
    assert np.isclose(max(e["ts"] + e["dur"] for e in slices) / 1e6, done["end"].max())


def test_directory_without_jobs_is_a_clear_error(tmp_path):
    result = CliRunner().invoke(main, ["timeline", str(tmp_path)])
    assert result.exit_code == 1 and "no jobs.parquet" in result.output
    with pytest.raises(InputError):
        run_timeline(tmp_path)

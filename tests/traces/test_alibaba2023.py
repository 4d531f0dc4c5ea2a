"""Alibaba's 2023 GPU pod list (``--trace alibaba2023:PATH``): a fixture written here (CPU-only and
never-scheduled pods counted out, fractional GPUs as whole ones, ``gpu_spec`` as a type
constraint honoured by a run), bad input in one line, and the real files' counts when at hand."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from policies.registry import make_policy
from predictor.common.inputs import LocatedError
from simulator.cluster import homogeneous_groups
from simulator.preemption import make_simulation
from simulator.timing import make_predictor
from traces import alibaba2023
from traces.registry import load_trace

HEADER = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time"
PODS = [
    "pod-0,12000,16384,1,1000,,LS,Running,0,5000,10",           # whole GPU, any type
    "pod-1,6000,12288,1,460,T4,BE,Succeeded,100,700,150",        # 0.46 GPU taken as 1; T4 only
    "pod-2,8000,8192,0,0,,BE,Running,200,900,200",               # CPU-only: left out
    "pod-3,8000,8192,2,1000,,LS,Pending,300,400,",               # never scheduled: left out
    "pod-4,64000,65536,8,1000,V100M16|V100M32|V100M32,LS,Failed,400,1400,420",  # ran until it failed
    "pod-5,4000,4096,1,1000,G2,LS,Running,500,800,500",          # Alibaba's anonymised model only
]


def write(path: Path, *rows: str) -> Path:
    path.write_text("\n".join([HEADER, *rows]) + "\n", encoding="utf-8")
    return path


def test_pods_become_jobs_and_left_out_pods_are_counted(tmp_path):
    trace = load_trace(f"alibaba2023:{write(tmp_path / 'pods.csv', *PODS)}")
    j = trace.jobs.set_index("job_id")
    assert trace.kind == "alibaba2023" and not trace.deadlines_stated
    assert trace.excluded == {alibaba2023.CPU_ONLY: 1, alibaba2023.NEVER_SCHEDULED: 1}
    assert list(j.index) == ["pod-0", "pod-1", "pod-4", "pod-5"]
    assert j["submit_s"].tolist() == [0.0, 100.0, 400.0, 500.0]  # creation_time
    assert j["duration_s"].tolist() == [4990.0, 550.0, 980.0, 300.0]  # deletion - scheduled
    assert j["num_gpus"].tolist() == [1, 1, 8, 1] and (j["gpu_type"] == "").all()
    assert j["allowed_gpus"].tolist() == ["", "T4", "V100|V100M32", "G2"]  # V100M16 is V100; G2 kept
    assert j["line"].tolist() == [2, 3, 6, 7]
    assert trace.meta == {"fractional_gpu_pods_taken_as_whole_gpus": 1, "gpu_spec_constrained_pods": 3}


def test_gpu_spec_is_honoured_by_a_run(tmp_path):
    trace = load_trace(f"alibaba2023:{write(tmp_path / 'pods.csv', *PODS)}")
    cluster = homogeneous_groups([("V100", 8, 1), ("T4", 1, 2)], "ali")
    records = make_simulation(trace, cluster, make_policy("fifo"), make_predictor("truth")).run().records
    r = records.set_index("job_id")
    assert r.loc["pod-1", "gpu_type"] == "T4" and r.loc["pod-4", "gpu_type"] == "V100"
    assert r.loc["pod-5", "status"] == "rejected"
    assert r.loc["pod-5", "reason"] == ("the trace says it cannot run on any GPU type of the cluster (V100, T4); "
                                        "it may run only on G2")
    assert (r.loc[["pod-0", "pod-1", "pod-4"], "status"] == "completed").all()


@pytest.mark.parametrize("row,line,field,text", [
    ("p,1,1,-1,0,,LS,Running,0,10,0", 2, "num_gpu", "value -1 is below the minimum 0"),
    ("p,1,1,1.5,1000,,LS,Running,0,10,0", 2, "num_gpu", "GPU count must be a whole number >= 0, got 1.5"),
    ("p,1,1,1,1200,,LS,Running,0,10,0", 2, "gpu_milli", "above the maximum 1000"),
    ("p,1,1,0,500,,LS,Running,0,10,0", 2, "gpu_milli", "a share of a GPU for a pod of num_gpu 0"),
    ("p,1,1,1,0,,LS,Running,0,10,0", 2, "gpu_milli", "no share of a GPU"),
    ("p,1,1,1,1000,H9000,LS,Running,0,10,0", 2, "gpu_spec", "unknown GPU type 'H9000'"),
    ("p,1,1,1,1000,,LS,Exploded,0,10,0", 2, "pod_phase", "unknown pod phase"),
    ("p,1,1,1,1000,,LS,Running,0,10,", 2, "scheduled_time", "pod phase Running but no scheduled_time"),
    ("p,1,1,1,1000,,LS,Running,50,10,20", 2, "scheduled_time", "before its creation_time"),
    ("p,1,1,1,1000,,LS,Running,0,10,20", 2, "deletion_time", "before its scheduled_time"),
])
def test_bad_input_is_one_line_naming_file_row_and_field(tmp_path, row, line, field, text):
    path = write(tmp_path / "bad.csv", row)
    with pytest.raises(LocatedError) as info:
        load_trace(f"alibaba2023:{path}")
    err, message = info.value, str(info.value)
    assert "\n" not in message and (err.path, err.line, err.field) == (str(path), line, field), message
    assert text in message, message


def test_a_list_of_only_cpu_pods_is_refused(tmp_path):
    with pytest.raises(LocatedError, match="no usable pods"):
        load_trace(f"alibaba2023:{write(tmp_path / 'cpu.csv', PODS[2])}")


@pytest.mark.parametrize("name,constrained", [("openb_pod_list_default.csv", 0),
                                              ("openb_pod_list_gpuspec33.csv", 2092)])
def test_the_real_pod_lists(shared_dir, name, constrained):
    path = shared_dir / "traces" / "alibaba_gpu_v2023" / name
    if not path.is_file():
        pytest.skip(f"{path} not found")
    trace = alibaba2023.load(path)
    assert len(trace) == 6203  # 8,152 pods less 1,088 CPU-only and 861 never scheduled GPU pods
    assert trace.excluded == {alibaba2023.CPU_ONLY: 1088, alibaba2023.NEVER_SCHEDULED: 861}
    assert trace.meta["gpu_spec_constrained_pods"] == constrained
    assert np.isfinite(trace.jobs["duration_s"]).all() and (trace.jobs["duration_s"] >= 0).all()

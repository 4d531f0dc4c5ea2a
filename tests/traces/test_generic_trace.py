"""The generic job trace (``--trace csv:PATH``, CSV or Parquet): every column on a fixture written
here, the "cannot run" marker, the bad-input catalogue (one line naming file, row and field), and
deadlines that are stated, not made up."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from predictor.common.inputs import LocatedError
from simulator.run import RunConfig, load_workload
from traces import generic
from traces.registry import load_trace

HEADER = ("job_id,submit_s,num_gpus,duration_s,gpu_type,runtime_s:v100,runtime_s:K80,deadline_s,allowed_gpus,"
          "model,batch,size,dtype,checkpoint_bytes,user,vc")
ROWS = [
    "a,0,1,100,V100,100,never,500,,densenet121,64,128,fp32,1e9,alice,vc1",
    "b,10,2,,,50,200,,K80|v100,,,,,0,bob,",
    "c,5,4,300,,,,,,ResNet-50,,,bf16,5,,vc2",
]


def write(path: Path, header: str, *rows: str) -> Path:
    path.write_text("\n".join([header, *rows]) + "\n", encoding="utf-8")
    return path


def expect_error(path: Path, line: int | None, field: str | None, text: str) -> str:
    """Loading ``path`` raises one line naming file, line and field, containing ``text``."""
    with pytest.raises(LocatedError) as info:
        load_trace(f"csv:{path}")
    err, message = info.value, str(info.value)
    assert "\n" not in message and (err.path, err.line, err.field) == (str(path), line, field), message
    assert message.startswith(f"{path}:{line}:" if line is not None else f"{path}:"), message
    assert (field is None or repr(field) in message) and text in message, message
    return message


def test_every_column_is_read_and_kept(tmp_path):
    trace = load_trace(f"csv:{write(tmp_path / 'jobs.csv', HEADER, *ROWS)}")
    j = trace.jobs.set_index("job_id")
    assert trace.kind == "csv" and trace.deadlines_stated and trace.meta == {"format": "csv"}
    assert list(trace.jobs["job_id"]) == ["a", "c", "b"]  # by submit time
    assert j["submit_s"].to_dict() == {"a": 0.0, "c": 5.0, "b": 10.0}
    assert j["num_gpus"].to_dict() == {"a": 1, "c": 4, "b": 2}
    assert j["line"].to_dict() == {"a": 2, "c": 4, "b": 3}
    # duration_s on gpu_type; empty: the run time of the first runtime_s column the job has one in
    assert j["duration_s"].to_dict() == {"a": 100.0, "c": 300.0, "b": 50.0}
    assert j["gpu_type"].to_dict() == {"a": "V100", "c": "", "b": "V100"}
    assert trace.runtime_types() == ["V100", "K80"]  # canonical names, header order
    assert j.loc["a", "runtime_s:K80"] == np.inf  # never: cannot run there
    assert np.isnan(j.loc["c", "runtime_s:V100"]) and np.isnan(j.loc["c", "runtime_s:K80"])  # empty: not known
    assert j.loc["b", "runtime_s:K80"] == 200.0
    assert j["allowed_gpus"].to_dict() == {"a": "", "c": "", "b": "K80|V100"}
    assert j.loc["a", "deadline_s"] == 500.0 and j["deadline_s"].isna().sum() == 2
    assert j["model"].to_dict() == {"a": "densenet121", "c": "ResNet-50", "b": ""}
    assert j["workload"].to_dict() == j["model"].to_dict()  # the model name tags the job's class
    assert j.loc["a", "batch"] == 64 and j.loc["a", "input_size"] == 128 and pd.isna(j.loc["b", "batch"])
    assert j["dtype"].to_dict() == {"a": "float32", "c": "bfloat16", "b": ""}
    assert j["checkpoint_bytes"].to_dict() == {"a": 1e9, "c": 5.0, "b": 0.0}
    assert j["user"].to_dict() == {"a": "alice", "c": "", "b": "bob"}
    assert j["vc"].to_dict() == {"a": "vc1", "c": "vc2", "b": ""}


def test_attempts_and_outcomes_are_read_and_kept(tmp_path):
    """The recorded attempts (traces.schema): kept as given, checked against the duration; a
    failed attempt and its gap may take all of it (the last attempt then ran 0 s)."""
    path = write(tmp_path / "jobs.csv", "job_id,submit_s,num_gpus,duration_s,attempts,outcome",
                 "a,0,8,15000,14033/186;500.5/30,failed", "b,1,1,100,,", "c,2,1,100, 60/40 ,cancelled")
    j = load_trace(f"csv:{path}").jobs.set_index("job_id")
    assert j["attempts"].to_dict() == {"a": "14033/186;500.5/30", "b": "", "c": "60/40"}
    assert j["outcome"].to_dict() == {"a": "failed", "b": "", "c": "cancelled"}
    assert str(j["attempts"].dtype) == str(j["outcome"].dtype) == "string"


def test_only_the_required_columns_are_enough(tmp_path):
    trace = load_trace(f"csv:{write(tmp_path / 'min.csv', 'job_id,submit_s,num_gpus,duration_s', 'x,3,2,60')}")
    row = trace.jobs.iloc[0]
    assert (row["job_id"], row["submit_s"], row["num_gpus"]) == ("x", 3.0, 2)
    assert (row["duration_s"], row["gpu_type"]) == (60.0, "")


def test_parquet_holds_the_same_table_and_inf_means_never(tmp_path):
    frame = pd.DataFrame({"job_id": ["a", "b"], "submit_s": [0.0, 1.0], "num_gpus": [1, 2],
                          "runtime_s:V100": [100.0, np.nan], "runtime_s:A100": [np.inf, 40.0],
                          "deadline_s": [None, 90.0], "user": ["u", None], "batch": [32, None]})
    frame.to_parquet(tmp_path / "jobs.parquet", index=False)
    trace = load_trace(f"csv:{tmp_path / 'jobs.parquet'}")
    j = trace.jobs.set_index("job_id")
    assert trace.meta == {"format": "parquet"} and j["line"].to_dict() == {"a": 1, "b": 2}  # rows, 1-based
    assert j.loc["a", "runtime_s:A100"] == np.inf and np.isnan(j.loc["b", "runtime_s:V100"])
    assert j["duration_s"].to_dict() == {"a": 100.0, "b": 40.0}
    assert j["gpu_type"].to_dict() == {"a": "V100", "b": "A100"}
    assert j.loc["b", "deadline_s"] == 90.0 and j["user"].to_dict() == {"a": "u", "b": ""} and j.loc["a", "batch"] == 32
    bad = frame.assign(num_gpus=[1, -2])
    bad.to_parquet(tmp_path / "bad.parquet", index=False)
    expect_error(tmp_path / "bad.parquet", 2, "num_gpus", "GPU count must be a whole number >= 1, got -2")


def test_a_file_that_is_not_parquet_is_refused_in_one_line(tmp_path):
    path = tmp_path / "jobs.parquet"
    path.write_text("job_id,submit_s,num_gpus\n")
    expect_error(path, None, None, "not a readable Parquet file")


@pytest.mark.parametrize("header,row,line,field,text", [
    ("job_id,submit_s,num_gpus,duration_s", "a,0,-2,10", 2, "num_gpus",
     "GPU count must be a whole number >= 1, got -2"),
    ("job_id,submit_s,num_gpus,duration_s", "a,0,1.5,10", 2, "num_gpus", "whole number"),
    ("job_id,submit_s,num_gpus,runtime_s:V10O", "a,0,1,10", 1, "runtime_s:V10O", "names no known GPU type"),
    ("job_id,submit_s,num_gpus,runtime_s:V100,runtime_s:v100", "a,0,1,1,1", 1, "runtime_s:v100",
     "same GPU type (V100)"),
    ("job_id,submit_s,num_gpus,duration_s,deadline", "a,0,1,10,5", 1, "deadline", "unknown column; the known ones are"),
    ("job_id,submit_s,num_gpus,runtime_s:V100", "a,0,1,inf", 2, "runtime_s:V100", "write 'never'"),
    ("job_id,submit_s,num_gpus,runtime_s:V100", "a,0,1,-5", 2, "runtime_s:V100", "below the minimum 0"),
    ("job_id,submit_s,num_gpus,runtime_s:V100", "a,0,1,soon", 2, "runtime_s:V100", "not a number"),
    ("job_id,submit_s,num_gpus,duration_s,gpu_type,runtime_s:V100", "a,0,1,10,V100,12", 2, "duration_s",
     "differs from its runtime_s:V100"),
    ("job_id,submit_s,num_gpus,duration_s,gpu_type,runtime_s:V100", "a,0,1,10,V100,never", 2, "gpu_type",
     "cannot run on"),
    ("job_id,submit_s,num_gpus,runtime_s:V100,runtime_s:K80", "a,0,1,never,never", 2, "duration_s",
     "no GPU type can run this job: every runtime_s:<GPU> value is 'never'"),
    ("job_id,submit_s,num_gpus,runtime_s:V100,runtime_s:K80", "a,0,1,never,", 2, "duration_s", "no run time"),
    ("job_id,submit_s,num_gpus,gpu_type,runtime_s:V100", "a,0,1,K80,10", 2, "duration_s", "its gpu_type K80"),
    ("job_id,submit_s,num_gpus,duration_s,gpu_type", "a,0,1,10,V1OO", 2, "gpu_type", "unknown GPU type"),
    ("job_id,submit_s,num_gpus,duration_s,allowed_gpus", "a,0,1,10,T4|nope", 2, "allowed_gpus", "unknown GPU type"),
    ("job_id,submit_s,num_gpus,duration_s,gpu_type,allowed_gpus", "a,0,1,10,V100,T4", 2, "allowed_gpus",
     "not among the types it may run on"),
    ("job_id,submit_s,num_gpus,duration_s,dtype", "a,0,1,10,int8", 2, "dtype", "unknown dtype"),
    ("job_id,submit_s,num_gpus,duration_s,batch", "a,0,1,10,0", 2, "batch", "whole number >= 1"),
    ("job_id,submit_s,num_gpus,duration_s,size", "a,0,1,10,2.5", 2, "size", "whole number >= 1"),
    ("job_id,submit_s,num_gpus,duration_s,deadline_s", "a,5,1,10,1", 2, "deadline_s", "before the submit time"),
    ("job_id,submit_s,num_gpus,duration_s,checkpoint_bytes", "a,0,1,10,", 2, "checkpoint_bytes", "missing"),
    ("job_id,submit_s,num_gpus,duration_s", "a,-1,1,10", 2, "submit_s", "below the minimum 0"),
    ("job_id,submit_s,duration_s", "a,0,10", 1, "num_gpus", "missing column"),
    ("job_id,submit_s,num_gpus,duration_s,attempts", "a,0,1,100,14033", 2, "attempts",
     "attempt 1 ('14033') is not LENGTH/GAP in seconds"),
    ("job_id,submit_s,num_gpus,duration_s,attempts", "a,0,1,100,10/1;", 2, "attempts", "attempt 2 ('') is not"),
    ("job_id,submit_s,num_gpus,duration_s,attempts", "a,0,1,100,10/x", 2, "attempts",
     "attempt 1: gap 'x' is not a number"),
    ("job_id,submit_s,num_gpus,duration_s,attempts", "a,0,1,100,1_0/1", 2, "attempts",
     "attempt 1: length '1_0' is not a number"),
    ("job_id,submit_s,num_gpus,duration_s,attempts", "a,0,1,100,5/1;10/-1", 2, "attempts",
     "attempt 2: gap -1 is negative"),
    ("job_id,submit_s,num_gpus,duration_s,attempts", "a,0,1,100,nan/1", 2, "attempts",
     "attempt 1: length 'nan' is not finite"),
    ("job_id,submit_s,num_gpus,duration_s,attempts", "a,0,1,100,inf/1", 2, "attempts", "is not finite"),
    ("job_id,submit_s,num_gpus,duration_s,attempts", "a,0,1,100,60/30;10/0.5", 2, "attempts",
     "add up to 100.5 s, more than the job's duration_s of 100 s"),
    ("job_id,submit_s,num_gpus,duration_s,outcome", "a,0,1,100,killed", 2, "outcome",
     "unknown outcome 'killed'; expected completed, failed, cancelled or empty"),
])
def test_bad_input_is_one_line_naming_file_row_and_field(tmp_path, header, row, line, field, text):
    expect_error(write(tmp_path / "bad.csv", header, row), line, field, text)


def test_a_duplicate_job_id_names_both_lines(tmp_path):
    path = write(tmp_path / "dup.csv", "job_id,submit_s,num_gpus,duration_s", "a,0,1,10", "a,1,1,10")
    expect_error(path, 3, "job_id", "first seen on line 2")


def test_a_trace_that_states_its_deadlines_gets_none_made_up(tmp_path):
    path = write(tmp_path / "jobs.csv", "job_id,submit_s,num_gpus,duration_s", *(f"j{i},{i},1,100" for i in range(50)))
    trace = load_workload(RunConfig(policy="fifo", predictor="truth", trace=f"csv:{path}"))
    assert trace.jobs["deadline_s"].isna().all()
    asked = load_workload(RunConfig(policy="fifo", predictor="truth", trace=f"csv:{path}", deadline_fraction=0.5))
    assert 0 < asked.jobs["deadline_s"].notna().sum() < 50
    itp = write(tmp_path / "itp.csv", "job_id,submission_time,duration,num_gpu",
                *(f"j{i},{i},100,1" for i in range(50)))
    default = load_workload(RunConfig(policy="fifo", predictor="truth", trace=f"itp:{itp}"))
    assert not default.deadlines_stated and default.jobs["deadline_s"].notna().any()  # 0.2, as before


def test_a_run_records_what_the_trace_states(tmp_path):
    from simulator.cluster import homogeneous_groups
    from simulator.run import execute

    path = write(tmp_path / "jobs.csv", "job_id,submit_s,num_gpus,duration_s", "a,0,1,10")
    config = RunConfig(policy="fifo", predictor="truth", trace=f"csv:{path}")
    manifest = execute(config, cluster=homogeneous_groups([("V100", 1, 1)], "one")).manifest["trace"]
    assert manifest["deadlines_stated_by_trace"] is True and manifest["deadline_fraction_applied"] == 0.0
    assert manifest["loader"] == {"format": "csv"}


def test_the_known_columns_are_documented():
    doc = generic.__doc__
    for name in (*generic.REQUIRED, *generic.OPTIONAL, "runtime_s:<GPU>", generic.NEVER):
        assert f"``{name}``" in doc or name in doc, name

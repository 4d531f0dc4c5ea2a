"""Real-trace loaders: exact output on hand-written fixtures, the bad-input catalogue, and the
counts/statistics of the real files in ../shared (docs: ../shared/research/traces.md)."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from predictor.common.inputs import LocatedError, SpecError
from traces import alibaba2023, gavel, generic, hydra_cases, itp, pai, philly
from traces.registry import KINDS, load_machine_table, load_trace, parse_spec
from traces.schema import JOB_COLUMNS, OPTIONAL_COLUMNS, JobTrace

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "traces"


def expect_error(call: Callable[[], object], path: Path | str, line: int | None, field: str | None) -> LocatedError:
    """The call raises LocatedError whose attributes and message name file, line and field."""
    with pytest.raises(LocatedError) as info:
        call()
    err = info.value
    msg = str(err)
    assert err.path == str(path) and str(path) in msg, msg
    assert err.line == line, msg
    if line is not None:
        assert f"{path}:{line}:" in msg, msg
    assert err.field == field, msg
    if field is not None:
        assert repr(field) in msg, msg
    return err


def check_table(tr: JobTrace) -> None:
    """Exactly the schema columns (plus runtime columns and the schema's optional ones, such as
    Philly's recorded ``shape``), in schema dtypes, sorted by submit."""
    base = list(tr.jobs.columns[: len(JOB_COLUMNS)])
    assert base == list(JOB_COLUMNS)
    assert all(c.startswith("runtime_s:") or c in OPTIONAL_COLUMNS for c in tr.jobs.columns[len(JOB_COLUMNS):])
    for col, dtype in JOB_COLUMNS.items():
        assert str(tr.jobs[col].dtype) == dtype or tr.jobs[col].dtype == pd.StringDtype(), col
    assert tr.jobs["submit_s"].is_monotonic_increasing


def write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


# ---------------------------------------------------------------------------------------------
# Exact output on the fixtures.

def test_philly_csv_fixture() -> None:
    tr = philly.load(FIXTURES / "philly_jobs.csv")
    check_table(tr)
    j = tr.jobs
    assert tr.kind == "philly" and tr.excluded == {}
    assert j["job_id"].tolist() == ["10", "14", "11", "12", "13"]  # by submit, ties in file order
    assert j["submit_s"].tolist() == [0.0, 10.0, 30.0, 30.0, 95.5]
    assert j["num_gpus"].tolist() == [1, 1, 16, 2, 4]
    assert j["duration_s"].tolist() == [120.0, 60.0, 3600.0, 0.0, 7200.5]
    assert j["line"].tolist() == [2, 6, 3, 4, 5]
    assert (j["gpu_type"] == "").all() and j["deadline_s"].isna().all()
    assert (j["user"] == "").all() and (j["workload"] == "").all()


def test_philly_json_fixture_marwage_layout() -> None:
    tr = philly.load_json(FIXTURES / "philly_jobs_subset.json")
    check_table(tr)
    j = tr.jobs
    assert j["job_id"].tolist() == ["application_7_0005", "application_7_0001"]
    assert j["submit_s"].tolist() == [0.0, 1800.0]  # seconds after 2017-08-14 23:27:00
    assert j["duration_s"].tolist() == [172800.0, 720.0]  # first start → last end, retries included
    assert j["num_gpus"].tolist() == [2, 4]
    assert j["line"].tolist() == [5, 1]  # record numbers
    assert tr.excluded == {philly.NO_ATTEMPTS: 2, philly.NO_END: 1, philly.NO_START: 1}


def test_philly_json_fixture_original_layout() -> None:
    tr = philly.load_json(FIXTURES / "philly_cluster_job_log.json")
    j = tr.jobs
    assert j["job_id"].tolist() == ["application_8_0001", "application_8_0004"]
    assert j["user"].tolist() == ["alice", "carol"]
    assert j["num_gpus"].tolist() == [8, 1]  # counted from the first attempt's detail
    assert j["submit_s"].tolist() == [4098780.0, 4105920.0]
    assert j["duration_s"].tolist() == [3600.0, 1800.0]
    assert j["attempts"].tolist() == ["", "60/240"]  # 12:00-12:01, then 12:05: 60 s, a 240 s gap
    assert j["outcome"].tolist() == ["completed", "failed"]  # status Pass, Failed
    assert tr.excluded == {philly.NO_ATTEMPTS: 1, philly.NO_END: 1}


def test_philly_json_epoch_option() -> None:
    tr = philly.load_json(FIXTURES / "philly_cluster_job_log.json", epoch=None)
    assert tr.jobs["submit_s"].tolist() == [0.0, 7140.0]
    tr = philly.load_json(FIXTURES / "philly_jobs_subset.json", epoch="2017-08-14 23:50:00")
    assert tr.jobs["job_id"].tolist() == ["application_7_0001"]
    assert tr.jobs["submit_s"].tolist() == [420.0]
    assert tr.excluded[philly.BEFORE_EPOCH] == 1


def test_philly_machine_list_fixture() -> None:
    m = philly.load_machine_list(FIXTURES / "philly_machines.csv")
    assert list(m.columns) == ["node", "gpu_type", "num_gpus"]
    assert m["node"].tolist() == ["n1", "n2", "n4"]
    assert m["gpu_type"].tolist() == ["P100", "P40", "P100"]
    assert m["num_gpus"].tolist() == [2, 8, 2] and m["num_gpus"].dtype == "int64"
    assert m.attrs["excluded"] == {"machines with 0 GPUs": 1}


def test_pai_official_fixture_join_rules() -> None:
    tr = pai.load(FIXTURES / "pai_official")
    check_table(tr)
    j = tr.jobs.set_index("job_id")
    assert tr.jobs["job_id"].tolist() == ["jobE", "jobA", "jobC"]
    # jobA: 2 instances x 1 GPU on V100, task span 1010 → 4010.
    assert j.loc["jobA", ["submit_s", "num_gpus", "duration_s", "gpu_type", "user", "line"]].tolist() == \
        [1000.0, 2, 3000.0, "V100", "userA", 1]
    # jobC: ps (CPU) + worker 4 x 200 % (8 GPUs, V100M32) + evaluator 1 x 100 % (T4); the type is
    # the worker's (most GPUs); the span covers every finished task, the ps included.
    assert j.loc["jobC", ["submit_s", "num_gpus", "duration_s", "gpu_type", "user", "line"]].tolist() == \
        [1200.0, 9, 7250.0, "V100M32", "userA", 3]
    # jobE: plan_gpu 50 (half a GPU) occupies one whole GPU.
    assert j.loc["jobE", ["submit_s", "num_gpus", "duration_s", "gpu_type", "user", "line"]].tolist() == \
        [900.0, 1, 1000.0, "MISC", "userB", 5]
    assert (tr.jobs["workload"] == "").all() and tr.jobs["deadline_s"].isna().all()
    assert tr.excluded == {pai.ORPHAN_TASKS: 1, pai.NO_TASKS: 1, pai.CPU_ONLY: 1, pai.UNFINISHED: 1}
    # The job-table file works as the path too (the task table lies beside it).
    same = pai.load(FIXTURES / "pai_official" / "pai_job_table.csv")
    pd.testing.assert_frame_equal(same.jobs, tr.jobs)


def test_pai_official_header_tolerated(tmp_path: Path) -> None:
    for name, cols in ((pai.JOB_TABLE_FILE, pai.JOB_TABLE_COLUMNS), (pai.TASK_TABLE_FILE, pai.TASK_TABLE_COLUMNS)):
        body = (FIXTURES / "pai_official" / name).read_text()
        write(tmp_path / name, ",".join(cols) + "\n" + body)
    tr = pai.load(tmp_path)
    assert tr.jobs["job_id"].tolist() == ["jobE", "jobA", "jobC"]
    assert tr.jobs["line"].tolist() == [6, 2, 4]


def test_pai_column_names_match_official_headers(shared_dir: Path) -> None:
    headers = shared_dir / "traces" / "alibaba_pai_v2020" / "headers"
    if not headers.is_dir():
        pytest.skip(f"{headers} not found: set ETS_SHARED")
    for name, cols in (("pai_job_table", pai.JOB_TABLE_COLUMNS), ("pai_task_table", pai.TASK_TABLE_COLUMNS),
                       ("pai_machine_spec", pai.MACHINE_SPEC_COLUMNS)):
        assert (headers / f"{name}.header").read_text().strip().split(",") == cols


def test_pai_sample_fixture() -> None:
    tr = pai.load_sample(FIXTURES / "pai_sample.csv")
    check_table(tr)
    j = tr.jobs
    assert j["job_id"].tolist() == ["s0002", "s0001", "s0003"]
    assert j["submit_s"].tolist() == [4000.0, 5000.0, 6000.0]  # the task start
    assert j["num_gpus"].tolist() == [4, 1, 2]  # 2 instances x ceil(50/100)
    assert j["duration_s"].tolist() == [500.0, 3000.0, 3600.0]  # end − start, not runtime_<GPU>
    assert j["gpu_type"].tolist() == ["V100", "T4", "P100"]
    assert (j["workload"] == "").all()  # task_name is a synthetic model name
    assert j["line"].tolist() == [3, 2, 4]
    assert tr.excluded == {pai.CPU_ONLY: 1, pai.UNFINISHED_TASKS: 1}


def test_pai_machine_spec_fixture() -> None:
    m = pai.load_machine_spec(FIXTURES / "pai_machine_spec.csv")
    assert m["node"].tolist() == ["mach01", "mach03", "mach04", "mach05"]
    assert m["gpu_type"].tolist() == ["T4", "V100M32", "MISC", "P100"]
    assert m["num_gpus"].tolist() == [2, 8, 8, 2]
    assert m.attrs["excluded"] == {"machines without GPUs": 1}


def test_itp_fixture() -> None:
    tr = itp.load(FIXTURES / "itp_cluster.csv")
    check_table(tr)
    j = tr.jobs
    assert j["job_id"].tolist() == ["0a1b-c2d3-0002", "0a1b-c2d3-0001", "0a1b-c2d3-0003"]
    assert j["submit_s"].tolist() == [1500.0, 2000.0, 2000.0]
    assert j["num_gpus"].tolist() == [8, 1, 64]
    assert j["duration_s"].tolist() == [3600.0, 100.0, 50.0]
    assert (j["gpu_type"] == "").all() and tr.excluded == {}


def test_hydra_fixture_keeps_file_order() -> None:
    tr = hydra_cases.load(FIXTURES / "hydra_case.csv")
    check_table(tr)
    j = tr.jobs
    assert j["job_id"].tolist() == ["h03", "h01", "h02"]
    assert (j["submit_s"] == 0).all() and (j["num_gpus"] == 1).all()
    np.testing.assert_array_equal(j["deadline_s"].to_numpy(), [np.nan, 4000.0, np.nan])
    assert tr.runtime_types() == ["A100", "V100", "RTX2080Ti"]
    assert j["gpu_type"].tolist() == ["A100"] * 3
    assert j["duration_s"].tolist() == [1000.0, 2000.0, 1200.0]
    assert j["runtime_s:V100"].tolist() == [1500.0, 3000.0, 1800.0]
    assert j["runtime_s:RTX2080Ti"].tolist() == [2500.0, 5000.0, 3100.0]
    assert tr.head(2).jobs["job_id"].tolist() == ["h03", "h01"]


# ---------------------------------------------------------------------------------------------
# Registry.

def test_registry_loads_every_kind(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    throughputs = write(tmp_path / "throughputs.json", json.dumps({"v100": {"('A3C', 1)": {"null": 2.0}}}))
    monkeypatch.setenv("ETS_GAVEL_THROUGHPUTS", str(throughputs))
    specs = {
        "philly": FIXTURES / "philly_jobs.csv",
        "philly-json": FIXTURES / "philly_jobs_subset.json",
        "pai": FIXTURES / "pai_official",
        "pai-sample": FIXTURES / "pai_sample.csv",
        "itp": FIXTURES / "itp_cluster.csv",
        "hydra": FIXTURES / "hydra_case.csv",
        # the peers' formats: small files written here (tests/traces/test_{generic_trace,gavel_trace,alibaba2023}.py)
        "csv": write(tmp_path / "jobs.csv", "job_id,submit_s,num_gpus,duration_s\na,0,1,10\n"),
        "gavel": write(tmp_path / "jobs.trace", "A3C\tpython3 main.py\trl\t--max-steps\t0\t100\t1\t1\t-1\t0\n"),
        "alibaba2023": write(tmp_path / "pods.csv", "name,num_gpu,gpu_milli,gpu_spec,pod_phase,creation_time,"
                             "deletion_time,scheduled_time\np,1,1000,,Running,0,10,0\n"),
    }
    assert set(specs) == set(KINDS)
    for kind, path in specs.items():
        tr = load_trace(f"{kind}:{path}")
        assert len(tr) > 0
    assert len(load_trace(f"philly-json:{specs['philly-json']}", epoch=None)) == 2
    assert load_machine_table("philly", FIXTURES / "philly_machines.csv")["num_gpus"].sum() == 12
    assert load_machine_table("pai", FIXTURES / "pai_machine_spec.csv")["num_gpus"].sum() == 20


def test_registry_errors(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="known: philly, philly-json, pai, pai-sample, itp, hydra, csv, gavel, "
                                             "alibaba2023"):
        load_trace("sia:/x.csv")
    with pytest.raises(SpecError, match="KIND:PATH"):
        load_trace("philly")
    assert parse_spec("philly:/a:b.csv") == ("philly", "/a:b.csv")
    missing = tmp_path / "nope.csv"
    with pytest.raises(LocatedError) as info:
        load_trace(f"philly:{missing}")
    assert info.value.path == str(missing)
    assert str(missing) in str(info.value)
    with pytest.raises(SpecError, match="known: philly, pai"):
        load_machine_table("itp", missing)


@pytest.mark.parametrize("loader", [philly.load, philly.load_json, pai.load, pai.load_sample, itp.load,
                                    hydra_cases.load, philly.load_machine_list, pai.load_machine_spec,
                                    generic.load, gavel.load, alibaba2023.load])
def test_missing_file_names_path(loader: Callable, tmp_path: Path) -> None:
    missing = tmp_path / "absent.csv"
    with pytest.raises(LocatedError) as info:
        loader(missing)
    assert str(missing.name) in str(info.value) and "not found" in str(info.value)


def test_pai_missing_task_table_names_it(tmp_path: Path) -> None:
    shutil.copy(FIXTURES / "pai_official" / pai.JOB_TABLE_FILE, tmp_path)
    with pytest.raises(LocatedError) as info:
        pai.load(tmp_path / pai.JOB_TABLE_FILE)
    assert info.value.path == str(tmp_path / pai.TASK_TABLE_FILE)


def test_csv_layout_crlf_bom_blank_lines_quotes(tmp_path: Path) -> None:
    """Line numbers stay true to the file across a BOM, CRLF ends, blank lines, quotes and a
    missing final newline."""
    text = '\ufeffjob_id,submission_time,duration,num_gpu\r\nj1,0,10,1\r\n\r\n"j,2",5,20,2\r\n\nj3,7,30,4'
    path = tmp_path / "x.csv"
    path.write_bytes(text.encode("utf-8"))
    tr = itp.load(path)
    assert tr.jobs["job_id"].tolist() == ["j1", "j,2", "j3"]
    assert tr.jobs["line"].tolist() == [2, 4, 6]
    path.write_bytes(text.replace("30,4", "x,4").encode("utf-8"))
    expect_error(lambda: itp.load(path), path, 6, "duration")
    path.write_bytes(text.replace("\r\n\r\n", "\r\n\r\nj9,1\r\n").encode("utf-8"))
    expect_error(lambda: itp.load(path), path, 4, "duration")
    path.write_bytes(b"job_id,submission_time,duration,num_gpu\nj1,0,10,1\n\xff\xfe,1,1,1\n")
    with pytest.raises(LocatedError, match="UTF-8"):
        itp.load(path)


# ---------------------------------------------------------------------------------------------
# Bad-input catalogue: each case names file, line and field.

PH = "#job id,arrival time (sec),topology,shape,size,duration (sec)\n1,0,CLOS,1,1,10\n"
IT = "job_id,submission_time,duration,num_gpu\nj1,0,10,1\n"
HY = ",job_name,norm_job_submit_time,ddl,A100,V100,GTX2080Ti\n0,h1,0,inf,10,20,30\n"
SA = (",job_name,task_name,inst_num,status,start_time,end_time,plan_cpu,plan_mem,plan_gpu,gpu_type,"
      "runtime,runtime_T4,runtime_P100,runtime_V100\n0,s1,M,1.0,Terminated,10,20,600,29,100,T4,10,10,9,5\n")
PM = "machineId, number of GPUs, single GPU mem\nn1,2, 12GB\n"
PS = "m1,T4,96,512,2\n"

# (case id, loader, file text, line, field)
CSV_CASES: list[tuple[str, Callable, str, int | None, str | None]] = [
    ("philly-non-numeric", philly.load, PH + "2,5,CLOS,1,two,10\n", 3, "size"),
    ("philly-too-few-fields", philly.load, PH + "2,5,CLOS,1,1\n", 3, "duration (sec)"),
    ("philly-too-many-fields", philly.load, PH + "2,5,CLOS,1,1,10,7\n", 3, "duration (sec)"),
    ("philly-missing-column", philly.load, "#job id,arrival time (sec),topology,shape,duration (sec)\n1,0,C,1,9\n",
     1, "size"),
    ("philly-empty-duration", philly.load, PH + "2,5,CLOS,1,1,\n", 3, "duration (sec)"),
    ("philly-nan-duration", philly.load, PH + "2,5,CLOS,1,1,nan\n", 3, "duration (sec)"),
    ("philly-negative-duration", philly.load, PH + "2,5,CLOS,1,1,-3\n", 3, "duration (sec)"),
    ("philly-zero-gpus", philly.load, PH + "2,5,CLOS,1,0,3\n", 3, "size"),
    ("philly-fractional-gpus", philly.load, PH + "2,5,CLOS,1,1.5,3\n", 3, "size"),
    ("philly-negative-arrival", philly.load, PH + "2,-5,CLOS,1,1,3\n", 3, "arrival time (sec)"),
    ("philly-empty-id", philly.load, PH + ",5,CLOS,1,1,3\n", 3, "job id"),
    ("philly-header-only", philly.load, PH.splitlines()[0] + "\n", 1, None),
    ("philly-empty-file", philly.load, "", 1, None),
    ("philly-duplicate-id", philly.load, PH + "\n2,5,CLOS,1,1,3\n1,6,CLOS,1,1,3\n", 5, "job id"),
    ("itp-non-numeric", itp.load, IT + "j2,soon,10,1\n", 3, "submission_time"),
    ("itp-too-few-fields", itp.load, IT + "j2,5,10\n", 3, "num_gpu"),
    ("itp-missing-column", itp.load, "job_id,submission_time,num_gpu\nj1,0,1\n", 1, "duration"),
    ("itp-nan-duration", itp.load, IT + "j2,5,,1\n", 3, "duration"),
    ("itp-negative-duration", itp.load, IT + "j2,5,-1,1\n", 3, "duration"),
    ("itp-header-only", itp.load, IT.splitlines()[0] + "\n", 1, None),
    ("itp-duplicate-id", itp.load, IT + "j1,5,10,1\n", 3, "job_id"),
    ("hydra-unknown-type-column", hydra_cases.load,
     ",job_name,norm_job_submit_time,ddl,A100,TPUv9\n0,h1,0,inf,10,20\n", 1, "TPUv9"),
    ("hydra-duplicate-type-column", hydra_cases.load,
     ",job_name,norm_job_submit_time,ddl,V100,V100M16\n0,h1,0,inf,10,20\n", 1, "V100M16"),
    ("hydra-no-type-column", hydra_cases.load, ",job_name,norm_job_submit_time,ddl\n0,h1,0,inf\n", 1,
     "(GPU type columns)"),
    ("hydra-missing-column", hydra_cases.load, ",job_name,norm_job_submit_time,A100\n0,h1,0,10\n", 1, "ddl"),
    ("hydra-non-numeric", hydra_cases.load, HY + "1,h2,0,inf,10,fast,30\n", 3, "V100"),
    ("hydra-nan-duration", hydra_cases.load, HY + "1,h2,0,inf,,20,30\n", 3, "A100"),
    ("hydra-negative-duration", hydra_cases.load, HY + "1,h2,0,inf,10,20,-30\n", 3, "GTX2080Ti"),
    ("hydra-deadline-before-submit", hydra_cases.load, HY + "1,h2,50,40,10,20,30\n", 3, "ddl"),
    ("hydra-negative-deadline", hydra_cases.load, HY + "1,h2,0,-inf,10,20,30\n", 3, "ddl"),
    ("hydra-header-only", hydra_cases.load, HY.splitlines()[0] + "\n", 1, None),
    ("hydra-duplicate-id", hydra_cases.load, HY + "1,h1,0,inf,10,20,30\n", 3, "job_name"),
    ("sample-unknown-gpu-type", pai.load_sample, SA + "1,s2,M,1.0,Terminated,10,20,600,29,100,TPUv9,10,1,1,1\n",
     3, "gpu_type"),
    ("sample-non-numeric", pai.load_sample, SA + "1,s2,M,1.0,Terminated,10,20,600,29,all,T4,10,1,1,1\n",
     3, "plan_gpu"),
    ("sample-nan-duration", pai.load_sample, SA + "1,s2,M,1.0,Terminated,10,nan,600,29,100,T4,10,1,1,1\n",
     3, "end_time"),
    ("sample-negative-duration", pai.load_sample, SA + "1,s2,M,1.0,Terminated,30,20,600,29,100,T4,10,1,1,1\n",
     3, "end_time"),
    ("sample-zero-instances", pai.load_sample, SA + "1,s2,M,0.0,Terminated,10,20,600,29,100,T4,10,1,1,1\n",
     3, "inst_num"),
    ("sample-too-many-fields", pai.load_sample, SA + "1,s2,M,1.0,Terminated,10,20,600,29,100,T4,10,1,1,1,9\n",
     3, "runtime_V100"),
    ("sample-missing-column", pai.load_sample, SA.replace("plan_gpu", "plan_gpus"), 1, "plan_gpu"),
    ("sample-header-only", pai.load_sample, SA.splitlines()[0] + "\n", 1, None),
    ("sample-duplicate-id", pai.load_sample, SA + "1,s1,M,1.0,Terminated,10,20,600,29,100,T4,10,1,1,1\n",
     3, "job_name"),
    ("philly-machines-unknown-memory", philly.load_machine_list, PM + "n2,8, 16GB\n", 3, "single GPU mem"),
    ("philly-machines-bad-memory", philly.load_machine_list, PM + "n2,8, big\n", 3, "single GPU mem"),
    ("philly-machines-non-numeric", philly.load_machine_list, PM + "n2,eight, 24GB\n", 3, "number of GPUs"),
    ("philly-machines-duplicate", philly.load_machine_list, PM + "n1,8, 24GB\n", 3, "machineId"),
    ("philly-machines-missing-column", philly.load_machine_list, "machineId, number of GPUs\nn1,2\n", 1,
     "single GPU mem"),
    ("pai-spec-unknown-type", pai.load_machine_spec, PS + "m2,TPUv9,96,512,8\n", 2, "gpu_type"),
    ("pai-spec-cpu-with-gpus", pai.load_machine_spec, PS + "m2,CPU,96,512,8\n", 2, "gpu_type"),
    ("pai-spec-too-few-fields", pai.load_machine_spec, PS + "m2,T4,96,512\n", 2, "cap_gpu"),
    ("pai-spec-non-numeric", pai.load_machine_spec, PS + "m2,T4,96,512,two\n", 2, "cap_gpu"),
    ("pai-spec-empty", pai.load_machine_spec, "", 1, None),
]


@pytest.mark.parametrize("case", CSV_CASES, ids=[c[0] for c in CSV_CASES])
def test_bad_csv(case: tuple, tmp_path: Path) -> None:
    _, loader, text, line, field = case
    path = write(tmp_path / "bad.csv", text)
    expect_error(lambda: loader(path), path, line, field)


def _job(rec_id: str = "a2", **overrides: object) -> dict:
    rec: dict = {"id": rec_id, "num_gpus": 4, "runtime": 1.0, "submitted_time": "2017-09-01 00:00:00",
                 "attempts": [{"start_time": "2017-09-01 00:01:00", "end_time": "2017-09-01 00:02:00"}]}
    rec.update(overrides)
    return rec


JSON_CASES: list[tuple[str, object, int | None, str | None]] = [
    ("malformed-start", [_job("a1"), _job(attempts=[{"start_time": "2017-13-01 00:00:00",
                                                      "end_time": "2017-09-01 00:02:00"}])], 2,
     "attempts[0].start_time"),
    ("malformed-middle-end", [_job("a1"), _job(attempts=[
        {"start_time": "2017-09-01 00:00:00", "end_time": "soon"},
        {"start_time": "2017-09-01 00:03:00", "end_time": "2017-09-01 00:04:00"}])], 2, "attempts[0].end_time"),
    ("malformed-submit", [_job("a1"), _job(submitted_time="yesterday")], 2, "submitted_time"),
    ("missing-submit", [_job("a1"), _job(submitted_time=None)], 2, "submitted_time"),
    ("missing-attempts", [_job("a1"), {k: v for k, v in _job().items() if k != "attempts"}], 2, "attempts"),
    ("missing-id", [_job("a1"), {k: v for k, v in _job().items() if k != "id"}], 2, "jobid"),
    ("non-numeric-gpus", [_job("a1"), _job(num_gpus="four")], 2, "num_gpus"),
    ("zero-gpus", [_job("a1"), _job(num_gpus=0)], 2, "num_gpus"),
    ("negative-duration", [_job("a1"), _job(attempts=[{"start_time": "2017-09-01 00:05:00",
                                                        "end_time": "2017-09-01 00:02:00"}])], 2,
     "attempts[0].end_time"),
    ("negative-duration-retries", [_job("a1"), _job(attempts=[  # the second attempt overlaps the first
        {"start_time": "2017-09-01 00:05:00", "end_time": "2017-09-01 00:06:00"},
        {"start_time": "2017-09-01 00:01:00", "end_time": "2017-09-01 00:02:00"}])], 2, "attempts[1].start_time"),
    ("attempt-backwards", [_job("a1"), _job(attempts=[
        {"start_time": "2017-09-01 00:01:00", "end_time": "2017-09-01 00:02:00"},
        {"start_time": "2017-09-01 00:04:00", "end_time": "2017-09-01 00:03:00"},
        {"start_time": "2017-09-01 00:05:00", "end_time": "2017-09-01 00:06:00"}])], 2, "attempts[1].end_time"),
    ("attempt-overlaps", [_job("a1"), _job("a3"), _job(attempts=[
        {"start_time": "2017-09-01 00:01:00", "end_time": "2017-09-01 00:03:00"},
        {"start_time": "2017-09-01 00:02:59", "end_time": "2017-09-01 00:04:00"}])], 3, "attempts[1].start_time"),
    ("middle-attempt-no-end", [_job("a1"), _job(attempts=[
        {"start_time": "2017-09-01 00:01:00", "end_time": None},
        {"start_time": "2017-09-01 00:05:00", "end_time": "2017-09-01 00:06:00"}])], 2, "attempts[0].end_time"),
    ("unknown-status", [_job("a1"), _job(status="Queued")], 2, "status"),
    ("status-not-text", [_job("a1"), _job(status=3)], 2, "status"),
    ("no-gpu-count", [_job("a1"), {k: v for k, v in _job().items() if k != "num_gpus"}], 2,
     "attempts[0].detail"),
    ("null-gpu-count-no-detail", [_job("a1"), _job(num_gpus=None)], 2, "attempts[0].detail"),
    ("bad-detail", [_job("a1"), {**{k: v for k, v in _job().items() if k != "num_gpus"},
                                 "attempts": [{"start_time": "2017-09-01 00:01:00", "end_time": "2017-09-01 00:02:00",
                                               "detail": [{"ip": "n1", "gpus": 4}]}]}], 2,
     "attempts[0].detail[0].gpus"),
    ("duplicate-id", [_job("a1"), _job("a1")], 2, "id"),
    ("empty", [], 1, None),
    ("record-not-object", [_job("a1"), 7], 2, None),
]


@pytest.mark.parametrize("case", JSON_CASES, ids=[c[0] for c in JSON_CASES])
def test_bad_json(case: tuple, tmp_path: Path) -> None:
    _, records, line, field = case
    path = write(tmp_path / "bad.json", json.dumps(records))
    expect_error(lambda: philly.load_json(path), path, line, field)


def test_philly_json_records_attempts_and_outcomes(tmp_path: Path) -> None:
    """Each attempt but the last becomes LENGTH/GAP (end − start, next start − end); the original
    log's status maps to the outcome; an unfinished job's status is not checked (it is left out)."""
    records = [
        _job("pass", status="Pass", attempts=[
            {"start_time": "2017-09-01 00:00:00", "end_time": "2017-09-01 03:53:53"},  # 14,033 s
            {"start_time": "2017-09-01 03:56:59", "end_time": "2017-09-01 04:00:00"},  # 186 s later
            {"start_time": "2017-09-01 04:00:30", "end_time": "2017-09-01 05:00:00"}]),
        _job("killed", status="Killed"),
        _job("failed", status="Failed"),
        _job("running", status="Running", attempts=[{"start_time": "2017-09-01 00:01:00", "end_time": None}]),
        _job("unknown"),  # no status: not recorded
    ]
    path = write(tmp_path / "log.json", json.dumps(records))
    tr = philly.load_json(path)
    j = tr.jobs.set_index("job_id")
    assert j.loc["pass", "attempts"] == "14033/186;181/30"
    assert j.loc["pass", "duration_s"] == 18_000.0  # 14,033 + 186 + 181 + 30 + the last attempt's 3,570 s
    assert (j.drop("pass")["attempts"] == "").all()
    assert j["outcome"].to_dict() == {"pass": "completed", "killed": "cancelled", "failed": "failed", "unknown": ""}
    assert tr.excluded == {philly.NO_END: 1}


def test_bad_json_syntax_names_text_line(tmp_path: Path) -> None:
    path = write(tmp_path / "bad.json", '[\n  {"id": "a1",\n  "num_gpus": 4,,\n}]\n')
    err = expect_error(lambda: philly.load_json(path), path, 3, None)
    assert "invalid JSON" in str(err)
    path = write(tmp_path / "obj.json", '{"id": "a1"}')
    expect_error(lambda: philly.load_json(path), path, None, None)


def _pai_tables(tmp_path: Path, job: str | None = None, task: str | None = None) -> Path:
    src = FIXTURES / "pai_official"
    write(tmp_path / pai.JOB_TABLE_FILE, job if job is not None else (src / pai.JOB_TABLE_FILE).read_text())
    write(tmp_path / pai.TASK_TABLE_FILE, task if task is not None else (src / pai.TASK_TABLE_FILE).read_text())
    return tmp_path


JOBS = "j1,i1,u1,Terminated,100,900\nj2,i2,u2,Terminated,200,900\n"
TASKS = "j1,worker,1.0,Terminated,110,500,600,29,100,T4\nj2,worker,2.0,Terminated,210,700,600,29,100,P100\n"

# (case id, job table, task table, file with the error, line, field)
PAI_CASES: list[tuple[str, str, str, str, int | None, str | None]] = [
    ("task-non-numeric", JOBS, TASKS + "j2,ps,1.0,Terminated,210,700,600,29,lots,\n", "task", 3, "plan_gpu"),
    ("task-unknown-gpu-type", JOBS, TASKS + "j2,ev,1.0,Terminated,210,700,600,29,100,TPUv9\n", "task", 3,
     "gpu_type"),
    ("task-negative-duration", JOBS, TASKS + "j2,ev,1.0,Terminated,800,700,600,29,100,T4\n", "task", 3,
     "end_time"),
    ("task-malformed-end", JOBS, TASKS + "j2,ev,1.0,Terminated,210,7e,600,29,100,T4\n", "task", 3, "end_time"),
    ("task-zero-instances", JOBS, TASKS + "j2,ev,0,Terminated,210,700,600,29,100,T4\n", "task", 3, "inst_num"),
    ("task-too-few-fields", JOBS, TASKS + "j2,ev,1.0,Terminated,210,700,600,29,100\n", "task", 3, "gpu_type"),
    ("job-non-numeric", JOBS + "j3,i3,u3,Terminated,early,900\n", TASKS, "job", 3, "start_time"),
    ("job-missing-submit", JOBS.replace("200,900", ",900"), TASKS, "job", 2, "start_time"),
    ("job-missing-column", "j1,i1,u1,Terminated,100\n", TASKS, "job", 1, "end_time"),
    ("job-duplicate", JOBS + "j1,i9,u9,Terminated,300,900\n", TASKS, "job", 3, "job_name"),
    ("job-table-empty", "", TASKS, "job", 1, None),
    ("task-table-empty", JOBS, "\n", "task", 1, None),
]


@pytest.mark.parametrize("case", PAI_CASES, ids=[c[0] for c in PAI_CASES])
def test_bad_pai_tables(case: tuple, tmp_path: Path) -> None:
    _, jobs, tasks, which, line, field = case
    root = _pai_tables(tmp_path, jobs, tasks)
    path = root / (pai.JOB_TABLE_FILE if which == "job" else pai.TASK_TABLE_FILE)
    expect_error(lambda: pai.load(root), path, line, field)


def test_pai_missing_end_time_is_an_unfinished_job_not_an_error(tmp_path: Path) -> None:
    """NaN/empty end times are the documented 'unfinished' rule: counted, never silently dropped."""
    for end in ("", "NaN", "\\N"):
        root = _pai_tables(tmp_path, JOBS, TASKS.replace("210,700", f"210,{end}"))
        tr = pai.load(root)
        assert tr.jobs["job_id"].tolist() == ["j1"]
        assert tr.excluded == {pai.UNFINISHED: 1}


def test_pai_no_usable_jobs(tmp_path: Path) -> None:
    root = _pai_tables(tmp_path, "j1,i1,u1,Running,100,\n", "j1,worker,1.0,Running,110,,600,29,100,T4\n")
    with pytest.raises(LocatedError, match="no usable jobs"):
        pai.load(root)


# ---------------------------------------------------------------------------------------------
# The real files (counts and statistics from ../shared/research/traces.md).

def need(shared_dir: Path, rel: str) -> Path:
    path = shared_dir / rel
    if not path.exists():
        pytest.skip(f"{path} not found: set ETS_SHARED")
    return path


def pct(values: pd.Series, q: float) -> float:
    """The percentile convention of traces.md (numpy method "higher": no interpolation, round up)."""
    return float(np.percentile(values.to_numpy(), q, method="higher"))


def test_real_philly_csv(shared_dir: Path) -> None:
    path = need(shared_dir, "traces/philly/rfold_philly_trace.csv")
    tr = philly.load(path)  # its speed: experiments/bench_*.py, never a timed assert (it failed on a slower CPU)
    j = tr.jobs
    check_table(tr)
    assert len(tr) == 111_549 and tr.excluded == {}
    assert j["submit_s"].min() == 0.0 and j["submit_s"].max() == 11_176_511.0
    sizes = j["num_gpus"].value_counts()
    assert (sizes[1], sizes[2], sizes[4], sizes[8], sizes[16], sizes[24], sizes[32], sizes[64], sizes[128]) == \
        (96_662, 2_522, 5_487, 5_716, 852, 40, 212, 28, 11)
    assert sizes.drop([1, 2, 4, 8, 16, 24, 32, 64, 128]).sum() == 19
    d = j["duration_s"]
    assert (pct(d, 50), pct(d, 90), pct(d, 99), d.max()) == (1_321.0, 33_476.0, 756_454.0, 5_196_151.0)
    assert (d == 0).sum() == 10
    assert round((d * j["num_gpus"]).sum() / 3600 / 1e6, 2) == 3.62
    assert (j["gpu_type"] == "").all()


def test_real_philly_json(shared_dir: Path) -> None:
    path = need(shared_dir, "traces/philly/marwage_philly_jobs_subset.json")
    tr = philly.load_json(path)
    assert len(tr) == 3_034 and tr.excluded == {}
    sizes = tr.jobs["num_gpus"].value_counts()
    assert (sizes[4], sizes[8], sizes[16], sizes[32], sizes[64], sizes[128]) == (1_457, 1_353, 148, 61, 4, 2)
    assert (tr.jobs["num_gpus"] >= 4).all()
    first = pd.Timestamp("2017-09-04 10:30:41") - philly.PHILLY_EPOCH
    last = pd.Timestamp("2017-12-22 04:44:24") - philly.PHILLY_EPOCH
    assert tr.jobs["submit_s"].min() == first.total_seconds()
    assert tr.jobs["submit_s"].max() == last.total_seconds()
    # duration = first start → last end equals the record's own runtime (minutes) for every job
    raw = {r["id"]: r["runtime"] * 60 for r in json.loads(path.read_text())}
    np.testing.assert_allclose(tr.jobs["duration_s"], tr.jobs["job_id"].map(raw).astype(float), atol=0.5)
    # every attempt but the last is recorded (issue 54: 26.9 % of the jobs ran more than once)
    runs = {r["id"]: len(r["attempts"]) for r in json.loads(path.read_text())}
    retried = tr.jobs["attempts"] != ""
    assert retried.sum() == 816 and (tr.jobs["outcome"] == "").all()
    counts = tr.jobs["attempts"].str.count(";") + retried.astype(int)
    assert (counts == tr.jobs["job_id"].map(runs) - 1).all()


def test_real_philly_machine_list(shared_dir: Path) -> None:
    m = philly.load_machine_list(need(shared_dir, "traces/philly/cluster_machine_list.csv"))
    assert len(m) == 552 and m["num_gpus"].sum() == 2_490
    assert m.groupby("gpu_type")["num_gpus"].sum().to_dict() == {"P100": 642, "P40": 1_848}
    assert m.groupby("gpu_type").size().to_dict() == {"P100": 321, "P40": 231}


ITP_COUNTS = {1: 1_595, 2: 5_778, 3: 3_011, 4: 15_802, 5: 3_629, 6: 2_396, 7: 12_699, 8: 13_047, 9: 11_134,
              10: 260}


def test_real_itp(shared_dir: Path) -> None:
    root = need(shared_dir, "traces/microsoft_itp_elasticflow")
    traces = {n: itp.load(root / f"cluster{n:02d}.csv") for n in ITP_COUNTS}
    assert {n: len(t) for n, t in traces.items()} == ITP_COUNTS
    assert (traces[9].jobs["num_gpus"] == 1).all()
    j = pd.concat([t.jobs for t in traces.values()], ignore_index=True)
    assert len(j) == 69_351 and j["job_id"].is_unique
    assert j["submit_s"].min() == 1_999 and j["submit_s"].max() == 5_175_336
    sizes = j["num_gpus"].value_counts().to_dict()
    assert sizes == {1: 57_682, 2: 1_483, 4: 2_371, 8: 7_009, 16: 381, 32: 354, 64: 71}
    d = j["duration_s"]
    assert (pct(d, 50), pct(d, 90), pct(d, 99)) == (10_537.0, 28_787.0, 210_241.0)
    assert round((d * j["num_gpus"]).sum() / 3600 / 1e6, 2) == 1.63


def test_real_pai_sample(shared_dir: Path) -> None:
    tr = pai.load_sample(need(shared_dir, "traces/alibaba_pai_v2020/cedtrain_case_random_10000_tasks.csv"))
    j = tr.jobs
    assert len(tr) == 10_000 and tr.excluded == {}
    assert j["gpu_type"].value_counts().to_dict() == {"P100": 4_918, "T4": 3_049, "V100": 2_033}
    assert j["num_gpus"].value_counts().to_dict() == {1: 9_274, 8: 193, 4: 183, 2: 150, 5: 128, 6: 39, 3: 30,
                                                      7: 3}
    assert j["submit_s"].min() == 991_185 and j["submit_s"].max() == 6_441_285
    assert pct(j["duration_s"], 50) == 5_745 and j["duration_s"].max() == 600_961
    assert (j["duration_s"] >= 1000).all() and (j["workload"] == "").all()


def test_real_pai_machine_spec(shared_dir: Path) -> None:
    m = pai.load_machine_spec(need(shared_dir, "traces/alibaba_pai_v2020/pai_machine_spec.csv"))
    assert m["num_gpus"].sum() == 6_742 and len(m) == 1_897 - 83
    assert m.attrs["excluded"] == {"machines without GPUs": 83}
    assert m.groupby("gpu_type")["num_gpus"].sum().to_dict() == \
        {"MISC": 2_240, "P100": 1_596, "T4": 994, "V100": 832, "V100M32": 1_080}
    assert m.groupby("gpu_type").size().to_dict() == {"MISC": 280, "P100": 798, "T4": 497, "V100": 104,
                                                     "V100M32": 135}


@pytest.mark.parametrize("name,share", [("20_ddl.csv", 0.197), ("30_ddl.csv", 0.2946)])
def test_real_hydra_cases(shared_dir: Path, name: str, share: float) -> None:
    path = need(shared_dir, f"hydra_cases/{name}")
    tr = hydra_cases.load(path)
    j = tr.jobs
    assert len(tr) == 5_000 and (j["submit_s"] == 0).all() and (j["num_gpus"] == 1).all()
    assert j["deadline_s"].notna().mean() == pytest.approx(share, abs=1e-9)
    assert tr.runtime_types() == ["A100", "V100", "RTX2080Ti"]
    assert j["line"].tolist() == list(range(2, 5_002))  # file order kept
    assert (j["duration_s"] == j["runtime_s:A100"]).all() and (j["gpu_type"] == "A100").all()
    assert (j["runtime_s:A100"] < j["runtime_s:V100"]).all()
    assert (j["runtime_s:V100"] < j["runtime_s:RTX2080Ti"]).all()
    first400 = j.iloc[:400]
    if name == "20_ddl.csv":
        assert first400["deadline_s"].notna().mean() == pytest.approx(0.225)
        assert first400["runtime_s:A100"].sum() == 4_458_087
    else:
        assert first400["deadline_s"].notna().mean() == pytest.approx(0.295)
        assert first400["runtime_s:A100"].sum() == 3_546_021

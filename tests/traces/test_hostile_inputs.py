"""Trace files and workload sizes from strangers (issue 31): every trace loader refuses a named
pipe, a device, a directory, an over-size file, a 10^6-column header and a 100,000-deep JSON with
one short line naming the file, before reading it whole; a synthetic workload cut by --limit is
generated only as far as the limit, yet holds exactly the first jobs of the whole workload."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import threading
import time
import tracemalloc
from pathlib import Path

import pandas as pd
import pytest

from predictor.common.inputs import LocatedError
from simulator.run import RunConfig, load_workload
from traces import synthetic as syn
from traces.registry import load_trace

ITP_HEADER = "job_id,submission_time,duration,num_gpu\n"
TRACE_KINDS = ("philly", "philly-json", "pai-sample", "itp", "hydra", "csv", "gavel", "alibaba2023")
MAX_LINE = 500  # characters: no refusal here may print more (the GPU type list alone is 200)


def refusal(spec: str) -> str:
    """The one-line message loading ``spec`` raises (any error: a traceback-free refusal is a ValueError)."""
    with pytest.raises(ValueError) as info:
        load_trace(spec)
    message = str(info.value)
    assert "\n" not in message and len(message) < MAX_LINE, message[:MAX_LINE]
    return message


@contextlib.contextmanager
def pipe(path: Path):
    """A named pipe at ``path`` with a writer waiting to open it, so a loader that opens it reads
    an empty stream instead of blocking forever; on exit the writer is released (and ends) either
    way, no thread left behind."""
    os.mkfifo(path)
    writer = threading.Thread(target=lambda: os.close(os.open(path, os.O_WRONLY)), daemon=True)
    writer.start()
    try:
        yield path
    finally:  # a reader that opens and closes the pipe lets a waiting writer through
        for _ in range(200):
            with contextlib.suppress(OSError):
                os.close(os.open(path, os.O_RDONLY | os.O_NONBLOCK))
            writer.join(0.05)
            if not writer.is_alive():
                break


@pytest.fixture
def fifo(tmp_path):
    with pipe(tmp_path / "trace.csv") as path:
        yield path


# -- non-regular files, sizes ------------------------------------------------------------------

@pytest.mark.parametrize("kind", TRACE_KINDS)
def test_a_named_pipe_is_refused_without_opening_it(kind, fifo):
    assert refusal(f"{kind}:{fifo}") == f"{fifo}: is a named pipe (FIFO), not a regular trace file"


@pytest.mark.parametrize("kind", TRACE_KINDS)
def test_a_device_is_refused_instead_of_read_forever(kind, tmp_path):
    link = tmp_path / "zero.csv"
    link.symlink_to("/dev/zero")  # a link must not hide what it points to
    assert refusal(f"{kind}:{link}") == f"{link}: is a device, not a regular trace file"


def test_the_official_pai_tables_are_refused_when_one_is_a_pipe(tmp_path):
    (tmp_path / "pai_task_table.csv").write_text("")
    with pipe(tmp_path / "pai_job_table.csv") as job_table:
        assert refusal(f"pai:{tmp_path}") == f"{job_table}: is a named pipe (FIFO), not a regular trace file"


def test_a_directory_given_as_a_json_trace_is_refused_naming_it(tmp_path):
    folder = tmp_path / "trace.json"  # the CSV loaders said so already; the JSON one raised IsADirectoryError
    folder.mkdir()
    assert refusal(f"philly-json:{folder}") == f"{folder}: is a directory, expected a file"


@pytest.mark.parametrize("kind", TRACE_KINDS)
def test_a_file_over_the_size_limit_is_refused_before_it_is_read(kind, tmp_path, monkeypatch):
    path = tmp_path / "trace.csv"
    path.write_text(ITP_HEADER + "a,0,10,1\n" * 20)
    monkeypatch.setenv("ETS_SIM_MAX_FILE_BYTES", "100")
    assert refusal(f"{kind}:{path}") == (
        f"{path}: 220 bytes exceeds the limit of 100 (size of one input file read whole (trace, dataset, "
        "checkpoint, cache); raise it with ETS_SIM_MAX_FILE_BYTES=N)")


# -- wide headers and lines --------------------------------------------------------------------

@pytest.mark.parametrize("kind", ["itp", "philly", "hydra", "pai-sample", "csv", "alibaba2023"])
def test_a_million_column_header_is_refused_in_one_short_line(kind, tmp_path):
    path = tmp_path / "wide.csv"
    path.write_text(",".join(f"c{i}" for i in range(1_000_000)) + "\n" + "1," * 999_999 + "1\n")
    assert refusal(f"{kind}:{path}") == (
        f"{path}:1 (the header): 1,000,000 fields in one line: 1,000,000 columns exceeds the limit of 10,000 "
        "(fields in a CSV header or line; raise it with ETS_SIM_MAX_COLUMNS=N)")


def test_a_million_field_data_line_is_refused_even_inside_quotes(tmp_path):
    path = tmp_path / "wide.csv"
    path.write_text(ITP_HEADER + '"' + "1," * 999_999 + '1",0,10,1\n')
    assert refusal(f"itp:{path}").startswith(f"{path}:2: 1,000,003 fields in one line: 1,000,003 columns exceeds")


def test_a_header_missing_columns_lists_only_a_few_of_its_names(tmp_path):
    path = tmp_path / "wrong.csv"
    path.write_text(",".join(f"c{i}" for i in range(9_000)) + "\n" + ",".join(["1"] * 9_000) + "\n")
    assert refusal(f"itp:{path}") == (
        f"{path}:1: field 'job_id': missing column(s) ['job_id', 'submission_time', 'duration', 'num_gpu'] in the "
        "header; found ['c0', 'c1', 'c2', 'c3', 'c4', 'c5', 'c6', 'c7', … (8,992 more)]")


def test_a_short_line_under_a_wide_header_lists_only_a_few_names(tmp_path):
    path = tmp_path / "short.csv"
    path.write_text(ITP_HEADER.strip() + "," + ",".join(f"x{i}" for i in range(5_000)) + "\na,0\n")
    assert refusal(f"itp:{path}") == (
        f"{path}:2: field 'duration': line has 2 field(s), expected 5004 ('job_id', 'submission_time', 'duration', "
        "'num_gpu', 'x0', 'x1', 'x2', 'x3', … (4,996 more)); this and later fields are missing")


def test_a_field_past_the_csv_modules_limit_is_a_one_line_refusal(tmp_path):
    path = tmp_path / "huge_name.csv"
    path.write_text(ITP_HEADER.strip() + "," + "x" * 200_000 + "\na,0,10,1,1\n")
    assert refusal(f"itp:{path}") == (
        f"{path}:1: cannot split the line into CSV fields (field larger than field limit (131072))")


def test_huge_values_are_quoted_cut_short(tmp_path):
    path = tmp_path / "dup.csv"
    path.write_text(ITP_HEADER + "A" * 100_000 + ",0,10,1\n" + "A" * 100_000 + ",5,10,1\n")
    assert refusal(f"itp:{path}") == (f"{path}:3: field 'job_id': duplicate id "
                                      f"'{'A' * 27}...{'A' * 28}' (first seen on line 2)")
    column = tmp_path / "hydra.csv"
    column.write_text("job_name,norm_job_submit_time,ddl," + "Z" * 100_000 + "\na,0,inf,1\n")
    assert refusal(f"hydra:{column}").startswith(
        f"{column}:1: field '{'Z' * 27}...{'Z' * 28}': column is not a GPU type: unknown GPU type ")


# -- JSON --------------------------------------------------------------------------------------

def test_a_100000_deep_json_trace_is_refused_before_parsing(tmp_path):
    path = tmp_path / "deep.json"
    path.write_text("[" * 100_000 + "]" * 100_000)
    assert refusal(f"philly-json:{path}") == (
        f"{path}: JSON nested 100,000 levels deep: 100,000 levels exceeds the limit of 100 (nesting of a JSON or "
        "YAML document (real traces: at most 7); raise it with ETS_SIM_MAX_JSON_DEPTH=N)")


def test_a_json_number_python_will_not_parse_is_a_trace_error(tmp_path):
    path = tmp_path / "bigint.json"
    path.write_text('[{"id": "a", "num_gpus": ' + "9" * 5_000 + "}]")
    assert refusal(f"philly-json:{path}") == (
        f"{path}: invalid JSON: Exceeds the limit (4300 digits) for integer string conversion: value has 5000 digits")


# -- synthetic workloads: --limit while generating ---------------------------------------------

def _peak_bytes(fn) -> tuple[object, int]:
    tracemalloc.start()
    try:
        return fn(), tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def _limited(kind: str, n: int, k: int, seed: int):
    config = RunConfig(policy="fifo", predictor="truth", workload=f"{kind}:{n}", limit=k, seed=seed,
                       deadline_fraction=0.0)
    return load_workload(config)


# Digests of whole workloads as the original generator made them: every recorded result uses them.
ORIGINAL_DIGESTS = {("pai-like", 0): "764d0ca1fe5fd51f", ("pai-like", 5): "62c0f09b51268a23",
                    ("philly-like", 123): "949a773a3390f815"}


def _digest(jobs: pd.DataFrame) -> str:
    return hashlib.sha256(pd.util.hash_pandas_object(jobs, index=False).to_numpy().tobytes()).hexdigest()[:16]


@pytest.mark.parametrize("one_stream_max", [None, 1_000], ids=["one stream", "stream per column"])
@pytest.mark.parametrize("kind, k, seed", [("pai-like", 1, 0), ("pai-like", 37, 5), ("philly-like", 12, 123)])
def test_limit_generates_only_the_first_jobs_and_exactly_those_of_the_whole_workload(kind, k, seed, one_stream_max,
                                                                                    monkeypatch):
    if one_stream_max is not None:  # the layout of workloads too large to generate whole in a test
        monkeypatch.setattr(syn, "ONE_STREAM_MAX_JOBS", one_stream_max, raising=False)
    n = 20_000
    whole, whole_peak = _peak_bytes(lambda: syn.generate(kind, n, seed=seed))
    if one_stream_max is None:
        assert _digest(whole.jobs) == ORIGINAL_DIGESTS[kind, seed]  # the whole workload did not change
    limited, limited_peak = _peak_bytes(lambda: _limited(kind, n, k, seed))
    pd.testing.assert_frame_equal(limited.jobs, whole.head(k).jobs)
    assert limited.source == whole.source == f"synthetic:{kind}:{n}:seed={seed}"
    assert limited_peak < whole_peak / 5, (limited_peak, whole_peak)
    for small, past in ((2, 1), (50, 50), (50, 500), (1_001, 999)):  # a limit at or past the size keeps it whole
        pd.testing.assert_frame_equal(_limited(kind, small, past, seed).jobs,
                                      syn.generate(kind, small, seed=seed).head(past).jobs)


def test_a_hundred_billion_job_workload_limited_to_ten_is_instant():
    start = time.perf_counter()
    trace, peak = _peak_bytes(lambda: _limited("pai-like", 100_000_000_000, 10, 3))
    assert len(trace) == 10 and list(trace.jobs["job_id"]) == [str(i) for i in range(10)]
    assert trace.source == "synthetic:pai-like:100000000000:seed=3"
    assert time.perf_counter() - start < 5 and peak < 5 * 2**20


def test_a_workload_over_the_job_limit_is_refused_before_it_is_drawn():
    config = RunConfig(policy="fifo", predictor="truth", workload="pai-like:100000000000")
    with pytest.raises(ValueError) as info:
        load_workload(config)
    assert str(info.value) == (
        "--workload 'pai-like:100000000000': synthetic workload: 100,000,000,000 jobs exceeds the limit of "
        "10,000,000 (jobs in one simulated workload (the full Philly trace: 111,549); raise it with "
        "ETS_SIM_MAX_JOBS=N); or keep the first K jobs with --limit K")


# -- values that multiply, reach a terminal, or lose their meaning (issue 50) ------------------

def itp_trace(tmp_path: Path, *rows: str) -> str:
    path = tmp_path / "itp.csv"
    path.write_text(ITP_HEADER + "".join(row + "\n" for row in rows))
    return f"itp:{path}"


def philly_json(tmp_path: Path, job_id: str) -> str:
    """A philly-json trace of one job with ``job_id`` (JSON escapes let it hold any character)."""
    path = tmp_path / "philly.json"
    attempt = {"start_time": "2017-10-03 10:00:00", "end_time": "2017-10-03 10:01:40", "detail": []}
    path.write_text(json.dumps([{"id": job_id, "num_gpus": 1, "submitted_time": "2017-10-03 10:00:00",
                                 "attempts": [attempt]}]))
    return f"philly-json:{path}"


@pytest.mark.parametrize("row,field,value", [
    ("a,1e300,100,1", "submit_s", "1e+300"),  # 1e300 + 100 == 1e300: the job "finished" with a JCT of 0
    ("a,0,1e13,1", "duration_s", "1e+13"),
    ("a,1000000000001,100,1", "submit_s", "1e+12"),
])
def test_times_past_the_exact_clock_are_refused_naming_row_and_field(tmp_path, row, field, value):
    spec = itp_trace(tmp_path, row, "b,0,100,1")
    assert refusal(spec).endswith(f"itp.csv:2: field '{field}': value {value} is above the maximum 1e+12 (times are "
                                  "float seconds, exact to the millisecond up to 1e12 s, about 31,700 years)")


def test_the_largest_time_is_accepted_and_stays_exact(tmp_path):
    jobs = load_trace(itp_trace(tmp_path, "a,1e12,100,1", "b,0,1e12,1")).jobs.set_index("job_id")
    assert jobs.loc["a", "submit_s"] + jobs.loc["a", "duration_s"] == 1_000_000_000_100.0
    assert jobs.loc["b", "duration_s"] == 1e12


@pytest.mark.parametrize("column,value,message", [
    ("deadline_s", 1e300, "value 1e+300 is above the maximum 1e+12"),
    ("runtime_s:V100", 2e12, "value 2e+12 is above the maximum 1e+12"),
    ("checkpoint_bytes", 1e300, "value 1e+300 is above the maximum 1e+15 (1 PB)"),
])
def test_other_times_and_checkpoint_sizes_are_bounded(column, value, message):
    from tests.records import from_records

    with pytest.raises(LocatedError) as info:
        from_records([{"job_id": "a", "submit_s": 0.0, "num_gpus": 1, "duration_s": 10.0, column: value}])
    assert str(info.value) == f"<table>:1: field '{column}': {message}" + (
        "" if column == "checkpoint_bytes" else " (times are float seconds, exact to the millisecond up to 1e12 s, "
                                                "about 31,700 years)")


@pytest.mark.parametrize("job_id,shown", [
    ("x\nresults in /etc/", r"'x\nresults in /etc/'"),  # forged a line of simrun's output
    ("x\x1b[2Jy", r"'x\x1b[2Jy'"),  # cleared the screen
    ("ab\u202ecd", r"'ab\u202ecd'"),  # reversed what followed
])
def test_a_job_id_with_a_control_character_is_refused(tmp_path, job_id, shown):
    assert refusal(philly_json(tmp_path, job_id)).endswith(
        f"philly.json:1: field 'job_id': holds a control or format character: {shown}")


def test_long_ids_users_and_workloads_are_refused(tmp_path):
    assert refusal(itp_trace(tmp_path, "A" * 201 + ",0,10,1")).endswith(
        f"itp.csv:2: field 'job_id': 201 characters, at most 200 ('{'A' * 27}...{'A' * 28}')")
    load_trace(itp_trace(tmp_path, "A" * 200 + ",0,10,1", "é,0,10,1"))  # 200 characters, and not ASCII, are fine
    from tests.records import from_records

    for field in ("user", "workload"):
        with pytest.raises(LocatedError, match=f"<table>:1: field '{field}': 1,000,000 characters, at most 200"):
            from_records([{"job_id": "a", "submit_s": 0.0, "num_gpus": 1, "duration_s": 1.0, field: "u" * 10**6}])

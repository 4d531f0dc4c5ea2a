"""Trace files and workload sizes from strangers (issue 31): every trace loader refuses a named
pipe, a device, a directory, an over-size file, a 10^6-column header and a 100,000-deep JSON with
one short line naming the file, before reading it whole; a synthetic workload cut by --limit is
generated only as far as the limit, yet holds exactly the first jobs of the whole workload."""

from __future__ import annotations

import contextlib
import hashlib
import os
import threading
import time
import tracemalloc
from pathlib import Path

import pandas as pd
import pytest

from simulator.run import RunConfig, load_workload
from traces import synthetic as syn
from traces.registry import load_trace

ITP_HEADER = "job_id,submission_time,duration,num_gpu\n"
TRACE_KINDS = ("philly", "philly-json", "pai-sample", "itp", "hydra")
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

@pytest.mark.parametrize("kind", ["itp", "philly", "hydra", "pai-sample"])
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

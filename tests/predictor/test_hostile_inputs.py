"""Hostile and malformed inputs on the predictor side (issue 31): trace importers, datasets, the
iteration-time table cache and the files `ets devices` reads. Each test names the finding it
guards; each refusal is one line naming the file (and row and field where there is one), never
a traceback, a hang or a silent wrong result."""

from __future__ import annotations

import gzip
import json
import os
import shutil
import sqlite3
import threading
import time
import zlib
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from predictor.checkpoints import CHECKPOINT_DIR
from predictor.cli import main as ets
from predictor.common.op_trace import OpTraceFormatError, read_dataset, validate
from predictor.emulator.devices.measurements import MeasurementError, load_gavel, load_spread
from predictor.emulator.devices.specs import DeviceParamsError, load_params
from predictor.tables import IterationTimeTable, truth_table
from tests.cli_checks import one_line_error as _one_line_error
from tests.predictor.capture.test_nsys import MAIN, Fixture, T

REPO = Path(__file__).resolve().parents[2]
KINETO = REPO / "tests" / "fixtures" / "kineto" / "new_schema.json"
ETS_TRACES = Path(os.environ.get("ETS_SHARED", REPO.parent / "shared")) / "ets_traces"


# -- helpers --------------------------------------------------------------------------------------

def invoke(*args) -> object:
    return CliRunner().invoke(ets, [str(a) for a in args])


def one_line_error(result, *fragments: str) -> str:
    return _one_line_error(result, *fragments, codes=(1,), alone=True)


@contextmanager
def fifo(path: Path, unblock_after: float = 5.0):
    """A named pipe at ``path``. Code that opens it and waits (the old readers did) is given an
    empty stream after ``unblock_after`` s, so it ends instead of hanging the test run."""
    os.mkfifo(path)
    stop = threading.Event()

    def writer() -> None:
        deadline = time.monotonic() + unblock_after
        while not stop.wait(0.05):
            if time.monotonic() < deadline:
                continue
            try:
                fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)  # ENXIO while nobody reads
            except OSError:
                continue
            os.close(fd)
            return

    thread = threading.Thread(target=writer, daemon=True)
    thread.start()
    try:
        yield path
    finally:
        stop.set()
        thread.join()


def gzip_of(prefix: bytes, filler: bytes, repeat: int, suffix: bytes) -> bytes:
    """A gzip stream of prefix + filler * repeat + suffix, built without holding it inflated."""
    packer = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    parts = [packer.compress(prefix)] + [packer.compress(filler) for _ in range(repeat)]
    return b"".join(parts + [packer.compress(suffix), packer.flush()])


def trace(config: str = "resnet18:b2:s32:float32:sgd:c10", device: str = "T4", n: int = 6) -> pd.DataFrame:
    return validate(pd.DataFrame({
        "config_id": config, "device": device, "family": "resnet", "model": "resnet18", "idx": range(n),
        "op": "conv2d", "phase": "forward", "input_shapes": "[[2,3,32,32]]", "params": [[1, 2]] * n,
        "flops": 1e6, "bytes": 4e3, "dtype": "float32", "batch": 2, "input_size": 32, "cpu_us": np.nan,
        "duration_us": [1000.0] * n, "gap_us": [5.0] * n, "kernels": 1, "source": "test"}), "test")


def dataset(tmp_path: Path, frame: pd.DataFrame, name: str = "T4.parquet") -> Path:
    directory = tmp_path / "data"
    directory.mkdir(exist_ok=True)
    frame.to_parquet(directory / name, index=False)
    return directory


# -- importers ------------------------------------------------------------------------------------

def test_a_gzip_bomb_stops_at_the_inflate_limit_not_after_inflating_whole(tmp_path, monkeypatch):
    monkeypatch.setenv("ETS_SIM_MAX_INFLATED_BYTES", str(2**20))
    bomb = tmp_path / "bomb.json.gz"
    bomb.write_bytes(gzip_of(b'{"traceEvents": [', b" " * 2**20, 24, b"]}"))  # 24 MiB of spaces
    line = one_line_error(invoke("import", "kineto", bomb, "--out", tmp_path / "out"),
                          f"{bomb}: gzip data inflated past", "ETS_SIM_MAX_INFLATED_BYTES")
    assert "operator" not in line


def test_a_named_pipe_as_a_kineto_trace_is_refused_without_opening_it(tmp_path):
    with fifo(tmp_path / "trace.json") as pipe:
        one_line_error(invoke("import", "kineto", pipe, "--out", tmp_path / "out"),
                       f"{pipe}: is a named pipe (FIFO), not a regular Kineto trace file")


def test_a_device_as_a_kineto_trace_is_refused_by_stat(tmp_path):
    one_line_error(invoke("import", "kineto", "/dev/null", "--out", tmp_path / "out"),
                   "/dev/null: is a device, not a regular Kineto trace file")


def test_a_100000_deep_json_trace_is_one_line_not_a_recursion_traceback(tmp_path):
    deep = tmp_path / "deep.json"
    deep.write_text('{"traceEvents": ' + "[" * 100_000 + "]" * 100_000 + "}")
    one_line_error(invoke("import", "kineto", deep, "--out", tmp_path / "out"),
                   f"{deep}: JSON nested 100,001 levels deep", "ETS_SIM_MAX_JSON_DEPTH")


def test_deep_input_dims_text_names_the_event_and_field(tmp_path):
    data = json.loads(KINETO.read_text())
    at = next(i for i, e in enumerate(data["traceEvents"]) if e.get("cat") == "cpu_op")
    data["traceEvents"][at].setdefault("args", {})["Input Dims"] = "[" * 5000 + "]" * 5000
    path = tmp_path / "dims.json"
    path.write_text(json.dumps(data))
    one_line_error(invoke("import", "kineto", path, "--out", tmp_path / "out"),
                   f"{path}:{at}: field 'Input Dims': the shapes: JSON nested 5,000 levels deep")


def test_two_trace_files_of_one_iteration_are_refused_not_summed(tmp_path):
    folder = tmp_path / "traces"
    folder.mkdir()
    shutil.copy(KINETO, folder / "new_schema.json")
    (folder / "new_schema.json.gz").write_bytes(gzip.compress(KINETO.read_bytes()))  # the same iteration
    out = tmp_path / "out"
    one_line_error(invoke("import", "kineto", folder, "--out", out),
                   f"{folder / 'new_schema.json.gz'}: same device and config_id", "'kineto:new_schema:",
                   f"as {folder / 'new_schema.json'}")
    assert not out.exists() or not any(out.iterdir())


def _ets_csv_folder(tmp_path: Path) -> tuple[Path, list[str]]:
    """A folder with op_codes.txt and the lines of one real ETS CSV file."""
    if not (ETS_TRACES / "T4").is_dir():
        pytest.skip("the shared ETS traces are missing")
    source = min((ETS_TRACES / "T4").glob("*.csv"))
    folder = tmp_path / "T4"
    folder.mkdir()
    shutil.copy(ETS_TRACES / "op_codes.txt", folder / "op_codes.txt")
    return folder, source.read_text().splitlines()


def test_a_csv_header_wider_than_the_column_limit_is_refused_before_parsing(tmp_path, monkeypatch):
    folder, lines = _ets_csv_folder(tmp_path)
    monkeypatch.setenv("ETS_SIM_MAX_COLUMNS", "30")
    wide = folder / "resnet18.1_7.csv"
    wide.write_text("\n".join([lines[0] + "," + ",".join(f"x{i}" for i in range(10))] + lines[1:]) + "\n")
    line = one_line_error(invoke("import", "ets-csv", wide, "--out", tmp_path / "out", "--features", "recorded"),
                          f"{wide}:1: header: 32 fields in one line", "ETS_SIM_MAX_COLUMNS")
    assert "x9" not in line  # the names are not listed


def test_deep_params_in_an_ets_csv_row_are_one_line_with_a_short_quote(tmp_path):
    folder, lines = _ets_csv_folder(tmp_path)
    head, _, rest = lines[1].partition('"')
    _, _, tail = rest.partition('"')
    path = folder / "resnet18.1_7.csv"
    deep = "[" * 100_000 + "]" * 100_000
    path.write_text(f'{lines[0]}\n{head}"{deep}"{tail}\n')
    line = one_line_error(invoke("import", "ets-csv", path, "--out", tmp_path / "out", "--features", "recorded"),
                          f"{path}:2: field 'params': expected a JSON list of integers, got '[[[")
    assert line.endswith("]]]'") and len(line) - len(str(path)) < 150  # the quote is cut short


def test_a_named_pipe_among_ets_csv_files_is_refused_not_skipped(tmp_path):
    folder, lines = _ets_csv_folder(tmp_path)
    (folder / "resnet18.1_7.csv").write_text("\n".join(lines) + "\n")
    with fifo(folder / "resnet18.2_7.csv") as pipe:
        one_line_error(invoke("import", "ets-csv", folder, "--out", tmp_path / "out", "--features", "recorded"),
                       f"{pipe}: is a named pipe (FIFO), not a regular ETS CSV file")


def _nsys_export(path: Path, marker: str = "aten::add_, seq = 1") -> Path:
    fx = Fixture(path)
    fx.range(MAIN, T, T + 100, marker)
    fx.launch(MAIN, 1, T + 10, T + 20, T + 30, T + 50)
    return fx.close()


def test_an_nsys_kernel_view_is_refused_not_queried(tmp_path):
    path = _nsys_export(tmp_path / "run.sqlite")
    con = sqlite3.connect(path)  # the same rows, behind a view (a view may run any query, unending)
    con.executescript("ALTER TABLE CUPTI_ACTIVITY_KIND_KERNEL RENAME TO k; "
                      "CREATE VIEW CUPTI_ACTIVITY_KIND_KERNEL AS SELECT * FROM k;")
    con.close()
    one_line_error(invoke("import", "nsys", path, "--out", tmp_path / "out"),
                   f"{path}: field 'CUPTI_ACTIVITY_KIND_KERNEL': CUPTI_ACTIVITY_KIND_KERNEL is a view, not a plain "
                   "table")


def test_deep_nsys_sizes_name_the_nvtx_row(tmp_path):
    path = _nsys_export(tmp_path / "run.sqlite", "aten::add_, seq = 1, sizes = " + "[" * 5000 + "]" * 5000)
    one_line_error(invoke("import", "nsys", path, "--out", tmp_path / "out"),
                   f"{path}:1: field 'NVTX_EVENTS.text': the op's sizes: JSON nested 5,000 levels deep")


@pytest.mark.parametrize("kind", ["fifo", "device"])
def test_an_nsys_export_that_is_no_regular_file_is_named_so(tmp_path, kind):
    if kind == "device":
        one_line_error(invoke("import", "nsys", "/dev/null", "--out", tmp_path / "out"),
                       "/dev/null: is a device, not a regular Nsight Systems SQLite export")
        return
    with fifo(tmp_path / "run.sqlite") as pipe:
        one_line_error(invoke("import", "nsys", pipe, "--out", tmp_path / "out"),
                       f"{pipe}: is a named pipe (FIFO), not a regular Nsight Systems SQLite export")


# -- datasets -------------------------------------------------------------------------------------

@pytest.mark.parametrize("command", ["info", "train", "evaluate"])
def test_duplicated_rows_are_refused_naming_file_config_idx_and_row(tmp_path, command):
    configs = [trace(f"{model}:b{b}:s32:float32:sgd:c10").assign(family=family, model=model)
               for family, model in (("resnet", "resnet18"), ("vgg", "vgg11"), ("alexnet", "alexnet"))
               for b in (2, 4, 8)]
    rows = pd.concat(configs + configs, ignore_index=True)  # a file appended to itself
    directory = dataset(tmp_path, rows)
    args = {"info": ["dataset", "info", directory],
            "train": ["train", "--data", directory, "--out", tmp_path / "m.pt", "--epochs", "1"],
            "evaluate": ["evaluate", "--ckpt", CHECKPOINT_DIR / "ets-T4.pt", "--data", directory, "--device", "T4",
                         "--split", "all"]}[command]
    one_line_error(invoke(*args), f"{directory / 'T4.parquet'}:54: field 'idx': config resnet18:b2:s32:float32:sgd:c10 "
                                  "idx 0 on T4 is also row 0 (54 duplicate row(s) in all)")
    assert not (tmp_path / "m.pt").exists()


def test_duplicated_rows_are_refused_before_they_are_written(tmp_path):
    from predictor.common.op_trace import write_traces

    with pytest.raises(OpTraceFormatError, match=f"^{tmp_path / 'T4.parquet'}:6: field 'idx': config "
                                               "resnet18:b2:s32:float32:sgd:c10 idx 0 on T4 is also row 0"):
        write_traces(tmp_path, pd.concat([trace(), trace()], ignore_index=True))
    assert not (tmp_path / "T4.parquet").exists()


def test_one_duplicated_op_is_refused_even_among_shuffled_rows(tmp_path):
    rows = pd.concat([trace(), trace().iloc[[3]]], ignore_index=True).iloc[[6, 0, 5, 1, 4, 2, 3]]
    directory = dataset(tmp_path, rows)
    with pytest.raises(OpTraceFormatError, match="idx 3 on T4 is also row 0 \\(1 duplicate row"):
        read_dataset(directory)


def test_a_config_in_two_files_of_one_device_is_refused(tmp_path):
    dataset(tmp_path, trace())
    directory = dataset(tmp_path, trace(), name="T4-copy.parquet")
    with pytest.raises(OpTraceFormatError) as info:
        read_dataset(directory)
    assert str(info.value) == (f"{directory / 'T4.parquet'}: field 'config_id': config "
                               f"resnet18:b2:s32:float32:sgd:c10 on T4 is also in {directory / 'T4-copy.parquet'}: "
                               "its iteration would count twice; keep one of the two files")


def test_a_config_split_across_two_devices_in_one_file_is_refused_naming_both(tmp_path):
    split = trace(n=6)
    split.loc[3:, "device"] = "V100"
    directory = dataset(tmp_path, split)
    one_line_error(invoke("dataset", "info", directory),
                   f"{directory / 'T4.parquet'}:3: field 'device': config resnet18:b2:s32:float32:sgd:c10 has rows "
                   "on two devices, T4 and V100")


@pytest.mark.parametrize("column", ["duration_us", "kernels", "idx"])
def test_a_numeric_column_stored_as_text_is_one_line_naming_file_and_column(tmp_path, column):
    directory = dataset(tmp_path, trace().assign(**{column: lambda t: t[column].astype(str)}))
    one_line_error(invoke("dataset", "info", directory),
                   f"{directory / 'T4.parquet'}: field {column!r}: stored as text")


def test_text_numbers_in_a_table_given_in_memory_are_refused_by_row(tmp_path):
    frame = trace()
    frame["gap_us"] = frame["gap_us"].astype(object)
    frame.loc[2, "gap_us"] = "5.0"
    with pytest.raises(OpTraceFormatError, match=r"^x:2: field 'gap_us': must be a number, got '5.0'"):
        validate(frame, "x")


@pytest.mark.parametrize("kind", ["fifo", "device", "oversize"])
def test_a_dataset_file_that_is_no_regular_file_or_too_large_is_refused_before_pyarrow(tmp_path, monkeypatch, kind):
    directory = tmp_path / "data"
    directory.mkdir()
    path = directory / "T4.parquet"
    if kind == "device":
        path.symlink_to("/dev/null")
        one_line_error(invoke("dataset", "info", directory), f"{path}: is a device, not a regular dataset file")
    elif kind == "oversize":
        trace().to_parquet(path, index=False)
        monkeypatch.setenv("ETS_SIM_MAX_FILE_BYTES", "1000")
        one_line_error(invoke("dataset", "info", directory), f"{path}: ", "bytes exceeds the limit of 1,000",
                       "ETS_SIM_MAX_FILE_BYTES")
    else:
        with fifo(path):
            one_line_error(invoke("dataset", "info", directory),
                           f"{path}: is a named pipe (FIFO), not a regular dataset file")


# -- the iteration-time table cache ---------------------------------------------------------------

SMALL_CONFIG = "randwire_ba:b96:s160:float32:sgd:c515:xbe13481c"  # the workload set's fewest ops


@pytest.fixture(scope="module")
def built_cache(tmp_path_factory) -> tuple[Path, pd.DataFrame, pd.DataFrame]:
    """A cache holding the true table of one small catalog config on T4, and that table."""
    from traces.workloads import WORKLOADS_FILE

    sequences = pd.read_parquet(WORKLOADS_FILE, filters=[("config_id", "==", SMALL_CONFIG)])
    sequences = sequences.assign(duration_us=0.0, gap_us=0.0, cpu_us=np.nan, kernels=0, source="catalog")
    cache = tmp_path_factory.mktemp("cache")
    old = os.environ.get("ETS_SIM_CACHE")
    os.environ["ETS_SIM_CACHE"] = str(cache)
    try:
        table = truth_table(sequences, ["T4"]).to_frame()
    finally:
        os.environ.pop("ETS_SIM_CACHE") if old is None else os.environ.__setitem__("ETS_SIM_CACHE", old)
    return cache, sequences, table


def _spoil(path: Path, how: str) -> None:
    if how == "scaled":  # the content changed, the recorded hash kept (as an editor would)
        arrow = pq.read_table(path)
        arrow = arrow.set_column(arrow.schema.get_field_index("seconds"), "seconds",
                                 pa.compute.multiply(arrow["seconds"], 10.0))
        pq.write_table(arrow, path)
    elif how == "unhashed":  # as an older version wrote it
        pd.read_parquet(path).assign(seconds=lambda t: t["seconds"] * 10).to_parquet(path, index=False)
    else:
        data = path.read_bytes()
        path.write_bytes(data[: len(data) // 2])


@pytest.mark.parametrize("how", ["scaled", "unhashed", "truncated"])
def test_a_spoilt_cache_table_is_rebuilt_with_one_warning_never_used(tmp_path, monkeypatch, capsys, built_cache, how):
    cache, sequences, truth = built_cache
    shutil.copytree(cache, tmp_path / "cache")
    monkeypatch.setenv("ETS_SIM_CACHE", str(tmp_path / "cache"))
    path = next((tmp_path / "cache" / "tables").glob("truth-*.parquet"))
    _spoil(path, how)
    again = truth_table(sequences, ["T4"])
    pd.testing.assert_frame_equal(again.to_frame(), truth)
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"warning: cache table {path} does not match its hash: rebuilt ("), err
    assert again.warnings == [err[0].removeprefix("warning: ")]
    # rewritten with its hash: the next run trusts it, silently
    assert truth_table(sequences, ["T4"]).warnings == [] and capsys.readouterr().err == ""
    # a caller's callback gets the line instead of stderr (simrun's --quiet, the run manifest)
    _spoil(path, how)
    heard: list[str] = []
    pd.testing.assert_frame_equal(truth_table(sequences, ["T4"], warn=heard.append).to_frame(), truth)
    assert len(heard) == 1 and heard[0].startswith(f"cache table {path} does not match its hash: rebuilt ("), heard
    assert capsys.readouterr().err == ""


def test_a_user_table_whose_content_does_not_match_its_hash_is_refused(tmp_path):
    path = tmp_path / "t.parquet"
    IterationTimeTable(pd.DataFrame({"config_id": ["m1", "m2"], "device": ["T4", "T4"],
                                     "seconds": [0.1, 0.2]})).save(path)
    _spoil(path, "scaled")
    with pytest.raises(ValueError, match=f"^{path}: iteration-time table refused: content hash .* differs from the "
                                         "recorded"):
        IterationTimeTable.load(path)


def test_a_user_table_with_text_seconds_or_a_repeated_row_is_one_line(tmp_path):
    path = tmp_path / "t.parquet"
    pd.DataFrame({"config_id": ["m1"], "device": ["T4"], "seconds": ["x" * 10_000]}).to_parquet(path, index=False)
    with pytest.raises(ValueError, match="non-positive seconds for config 'm1' on 'T4'") as info:
        IterationTimeTable.load(path)
    assert len(str(info.value)) < 300
    with pytest.raises(ValueError, match="config 'm1' on 'T4' appears more than once"):
        IterationTimeTable(pd.DataFrame({"config_id": ["m1", "m1"], "device": ["T4", "T4"], "seconds": [0.1, 1.0]}))


# -- files `ets devices` and the calibration read -------------------------------------------------

SPEC = {"Device": "MyGPU", "Dev_Mem": 16, "Mem_Bw": 900, "Num_Sm": 80, "Freq": 1500, "SingleFLOPs": 15000,
        "L2Cache": 6}


@pytest.mark.parametrize("text, message", [
    ("[" * 100_000 + "]" * 100_000, "JSON nested 100,000 levels deep"),
    (json.dumps(SPEC).replace('"Mem_Bw": 900', '"Mem_Bw": 1e400'),
     "field 'Mem_Bw' must be a positive finite number, got inf"),
    (json.dumps(SPEC).replace('"Num_Sm": 80', '"Num_Sm": ' + "9" * 4000),
     "field 'Num_Sm' must be a positive finite number, got 999"),
    (json.dumps(dict(SPEC, Mem_Bw="x" * 1_000_000)), "field 'Mem_Bw' must be float, got 'xxx"),
])
def test_a_hostile_spec_file_is_one_short_line(tmp_path, text, message):
    spec = tmp_path / "gpu.json"
    spec.write_text(text)
    line = one_line_error(invoke("devices", "time", "resnet18", "--device", f"emulated:{spec}"),
                          f"--device: {spec}: {message}")
    assert len(line) < 400


def test_a_named_pipe_as_a_spec_file_is_refused_without_opening_it(tmp_path):
    with fifo(tmp_path / "gpu.json") as pipe:
        one_line_error(invoke("devices", "time", "resnet18", "--device", f"emulated:{pipe}"),
                       f"--device: {pipe}: is a named pipe (FIFO), not a regular spec file")


def test_deep_device_parameter_and_measurement_json_are_refused_by_name(tmp_path):
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(DeviceParamsError, match=f"^{deep}: JSON nested 100,000 levels deep"):
        load_params(deep)
    with pytest.raises(MeasurementError, match=f"^{deep}: JSON nested 100,000 levels deep"):
        load_gavel(deep)


def test_a_wide_measurement_csv_header_is_refused_without_listing_it(tmp_path):
    path = tmp_path / "spread.csv"
    path.write_text(",".join(f"column{i}" for i in range(20_000)) + "\n")
    with pytest.raises(MeasurementError) as info:
        load_spread(path)
    assert str(info.value).startswith(f"{path}: line 1: this line: 20,000 fields in one line")
    assert "ETS_SIM_MAX_COLUMNS" in str(info.value) and len(str(info.value)) < 300


def test_a_named_pipe_as_a_measurement_file_is_named_so(tmp_path):
    with fifo(tmp_path / "gavel.json") as pipe, pytest.raises(
            MeasurementError, match=f"^{pipe}: is a named pipe \\(FIFO\\), not a regular JSON file"):
        load_gavel(pipe)


def test_dataset_info_escapes_names_from_a_strangers_dataset(tmp_path):
    """A family or device name holding a screen clear and a newline (issue 50): printed escaped,
    never raw (it forged a line of our output and cleared the terminal)."""
    frame = trace(device="T4\x1b[2J").assign(family="res\nnet")
    result = invoke("dataset", "info", dataset(tmp_path, frame))
    assert result.exit_code == 0, result.output
    assert "\x1b" not in result.output and "per device: T4\\x1b[2J 1" in result.output
    assert "per family: res\\nnet 1" in result.output

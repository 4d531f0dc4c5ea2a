"""Hostile inputs on the capture side (issue 50, round 2): model files that hang, allocate without
end or kill their process; two imports into one dataset at once; Kineto flows that share an id;
a dataset whose shapes are garbage. Each refusal is one line naming the file (and the limit, or
the row and field), never a hang, a traceback or a silently wrong number."""

from __future__ import annotations

import json
import os
import textwrap
from pathlib import Path

import pytest
from click.testing import CliRunner

from predictor.cli import main as ets
from tests.cli_checks import one_line_error

TINY = """\
    import os
    import torch

    class Model(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = torch.nn.Linear(16, 4)

        def forward(self, x):
            return self.fc(x)

    def get_inputs():
        return [torch.randn(8, 16)]

    with open(os.environ["ETS_TEST_PID_FILE"], "w") as fh:  # where the file's code ran
        fh.write(str(os.getpid()))
    """

# Each guards against running in the test's own process (the old in-process capture): there it
# raises instead of exiting, hanging or allocating, so the test fails instead of dying.
CRASH = """\
    import os
    if os.getpid() == int(os.environ["ETS_TEST_PARENT"]):
        raise RuntimeError("ran in the parent process")
    os._exit(3)  # as a C extension that aborts would end it
    """
HOG = """\
    import os
    if os.getpid() == int(os.environ["ETS_TEST_PARENT"]):
        raise RuntimeError("ran in the parent process")
    hoard = bytearray(8 * 2**30)  # over the 5 GiB limit the test sets
    """
LOOP = """\
    import os
    if os.getpid() == int(os.environ["ETS_TEST_PARENT"]):
        raise RuntimeError("ran in the parent process")
    while True:
        pass
    """


def _write(folder: Path, name: str, text: str) -> Path:
    path = folder / name
    path.write_text(textwrap.dedent(text))
    return path


# -- model files: time and memory limits, a child process ----------------------------------------

def test_model_files_that_crash_hog_memory_or_loop_fail_in_one_line_each_and_the_others_go_on(tmp_path, monkeypatch):
    """Before: the loop hung `ets devices time` forever, the allocation had no limit, and an
    ``os._exit`` in the file ended the command itself. Now each is one line naming the file and
    the limit, and the good file among them is still timed, its code run in another process (one
    child for the first three files; the crash ends it, so a second one runs the loop)."""
    folder = tmp_path / "models"
    folder.mkdir()
    for name, text in (("a_hog.py", HOG), ("b_tiny.py", TINY), ("c_crash.py", CRASH), ("d_loop.py", LOOP)):
        _write(folder, name, text)
    pid_file = tmp_path / "pid"
    monkeypatch.setenv("ETS_TEST_PID_FILE", str(pid_file))
    monkeypatch.setenv("ETS_TEST_PARENT", str(os.getpid()))
    monkeypatch.setenv("ETS_SIM_MAX_MODEL_SECONDS", "2")
    monkeypatch.setenv("ETS_SIM_MAX_MODEL_BYTES", str(5 * 2**30))
    result = CliRunner().invoke(ets, ["devices", "time", "--model-file", str(folder), "--device", "emulated:T4",
                                      "--inference", "--json"])
    assert result.exit_code == 1, result.output
    assert "Traceback" not in result.output
    lines = result.stderr.splitlines()
    crash = next(x for x in lines if x.startswith(f"{folder / 'c_crash.py'}: "))
    assert "the capture process ended (exit status 3)" in crash and "ETS_SIM_MAX_MODEL_BYTES" in crash
    hog = next(x for x in lines if x.startswith(f"{folder / 'a_hog.py'}: "))
    assert "MemoryError" in hog and "memory limit of 5.0 GiB" in hog and "ETS_SIM_MAX_MODEL_BYTES=N" in hog
    assert "(at " in hog and "a_hog.py:4" in hog
    loop = next(x for x in lines if x.startswith(f"{folder / 'd_loop.py'}: "))
    assert "did not finish within 2 s" in loop and "ETS_SIM_MAX_MODEL_SECONDS=N" in loop
    assert "3 of 4 model file(s) failed" in result.stderr
    timed = [json.loads(x) for x in result.stdout.splitlines()]
    assert [r["model_file"] for r in timed] == [str(folder / "b_tiny.py")] and timed[0]["total_ms"] > 0
    assert int(pid_file.read_text()) != os.getpid()  # the file's code ran in a child


def test_a_shell_address_limit_below_the_model_limit_is_kept_and_named(tmp_path):
    """Before: the child asked for the 16 GiB default even under a lower ``ulimit -v``; the kernel
    refused it and every file failed with "the capture process ended". Now the child keeps the
    shell's limit, times the good file, and names that limit when a file runs out of it."""
    import subprocess
    import sys

    good = _write(tmp_path, "b_tiny.py", TINY)
    hog = _write(tmp_path, "a_hog.py", HOG)  # 8 GiB: over the 6 GiB the shell allows
    shell = ("import resource, sys; resource.setrlimit(resource.RLIMIT_AS, (6 << 30, 6 << 30)); "
             "from predictor.cli import main; sys.exit(main())")
    env = {**os.environ, "ETS_TEST_PID_FILE": str(tmp_path / "pid"), "ETS_TEST_PARENT": "0"}
    env.pop("ETS_SIM_MAX_MODEL_BYTES", None)  # the 16 GiB default, above the shell's limit
    result = subprocess.run([sys.executable, "-c", shell, "devices", "time", "--model-file", str(tmp_path),
                             "--device", "emulated:T4", "--inference", "--json"],
                            capture_output=True, text=True, env=env, timeout=300)
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr
    timed = [json.loads(x) for x in result.stdout.splitlines()]
    assert [r["model_file"] for r in timed] == [str(good)] and timed[0]["total_ms"] > 0
    line = next(x for x in result.stderr.splitlines() if x.startswith(f"{hog}: "))
    assert "MemoryError" in line and "the shell's address-space limit of 6.0 GiB" in line, line
    assert "1 of 2 model file(s) failed" in result.stderr


@pytest.mark.parametrize("value, message", [("soon", "not a number"), ("-1", "must be a positive finite number")])
def test_a_bad_model_limit_variable_is_one_line_before_any_file_runs(tmp_path, monkeypatch, value, message):
    """Before: the variables did not exist; a value that is not a positive number is refused by name."""
    pid_file = tmp_path / "pid"
    monkeypatch.setenv("ETS_TEST_PID_FILE", str(pid_file))
    monkeypatch.setenv("ETS_SIM_MAX_MODEL_SECONDS", value)
    path = _write(tmp_path, "tiny.py", TINY)
    result = CliRunner().invoke(ets, ["devices", "time", "--model-file", str(path), "--device", "emulated:T4"])
    one_line_error(result, f"ETS_SIM_MAX_MODEL_SECONDS={value!r}", message, codes=(1,))
    assert not pid_file.exists()


# -- one dataset, one writer ----------------------------------------------------------------------

KINETO = Path(__file__).resolve().parents[1] / "fixtures" / "kineto" / "new_schema.json"


@pytest.mark.parametrize("command", ["import", "collect", "peaks"])
def test_a_dataset_another_run_is_changing_is_refused_at_once_and_left_as_it_was(tmp_path, command):
    """Before: two `ets import` into one dataset both read the old file, and the second rename
    dropped the first's iteration (3 of 4 trials; both exit 0). Now every command that rewrites a
    dataset holds it: the second is refused in one line naming the first's PID, before any work."""
    from predictor.common.outputs import locked_folder

    out = tmp_path / "data"
    assert CliRunner().invoke(ets, ["import", "kineto", str(KINETO), "--out", str(out)]).exit_code == 0
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    alpha = tmp_path / "alpha.json"
    alpha.write_bytes(KINETO.read_bytes())
    args = {"import": ["import", "kineto", str(alpha), "--out", str(out)],
            "collect": ["collect", "--device", "meta", "--limit", "1", "--out", str(out)],
            "peaks": ["dataset", "peaks", str(out)]}[command]
    with locked_folder(out):
        result = CliRunner().invoke(ets, args)
    option = "DIRECTORY" if command == "peaks" else "--out"
    one_line_error(result, f"{option} {out} is in use by another run (PID {os.getpid()})", codes=(1,), alone=True)
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    if command == "import":  # once the other run is over, the import lands beside the first
        assert CliRunner().invoke(ets, args).exit_code == 0
        from predictor.common.op_trace import read_dataset

        assert set(read_dataset(out)["config_id"]) == {"kineto:new_schema:3", "kineto:alpha:3"}


# -- Kineto ids -----------------------------------------------------------------------------------

def _kineto(tmp_path: Path, change) -> Path:
    data = json.loads(KINETO.read_text())
    for event in data["traceEvents"]:
        change(event)
    path = tmp_path / "trace.json"
    path.write_text(json.dumps(data))
    return path


def _one_flow_id(event: dict) -> None:  # ids only on the flows, and all of them one
    if isinstance(event.get("args"), dict):
        event["args"].pop("correlation", None)
    if event.get("ph") in ("s", "f"):
        event["id"] = 7


def _one_correlation(event: dict) -> None:
    if "correlation" in event.get("args", {}):
        event["args"]["correlation"] = 1


def _shift_correlation(by: int):
    def change(event: dict) -> None:
        if "correlation" in event.get("args", {}):
            event["args"]["correlation"] += by
    return change


def _shift_flow_id(by: int):
    def change(event: dict) -> None:
        if isinstance(event.get("args"), dict):
            event["args"].pop("correlation", None)
        if event.get("ph") in ("s", "f"):
            event["id"] += by
    return change


@pytest.mark.parametrize("change, located, message", [
    (_one_flow_id, ":13: field 'id'", "correlation id 7 is shared by the runtime calls at events 4 and 13"),
    (_one_correlation, ":13: field 'args.correlation'", "correlation id 1 is shared by the runtime calls"),
    (_shift_correlation(2**53 + 1), ":4: field 'args.correlation'", "id 9007199254741083 is not a whole number"),
    (_shift_flow_id(2**64), ":6: field 'id'", "id 18446744073709551706 is not a whole number from 0 to 2**53"),
], ids=["flows-share-an-id", "calls-share-a-correlation", "beyond-2**53", "beyond-uint64"])
def test_kineto_ids_that_are_shared_or_too_large_are_refused_not_imported_as_wrong_kernel_time(
        tmp_path, change, located, message):
    """Before: each imported with exit 0 and wrong kernel time (0 µs of the 73 µs; 148 µs for ids
    past 2**53, where float64 merges neighbours). Now one line naming the file, event and id."""
    path = _kineto(tmp_path, change)
    result = CliRunner().invoke(ets, ["import", "kineto", str(path), "--out", str(tmp_path / "data")])
    one_line_error(result, f"{path}{located}", message, codes=(1,), alone=True)
    assert not (tmp_path / "data").exists()


# -- garbage shapes -------------------------------------------------------------------------------

@pytest.mark.parametrize("shapes, message", [
    ("[[xxx]]", "not JSON"),
    ("[[8,-3,32,32]]", "dimension -3 is outside 0 to 1,000,000,000,000"),
    ("[[8,3,10000000000000,32]]", "dimension 10,000,000,000,000 is outside"),
    ("[[8,3.5]]", "dimension 3.5 is not a whole number"),
    ('{"a": 1}', "not a list of shapes"),
])
def test_a_dataset_with_garbage_shapes_is_refused_by_row_not_scored(tmp_path, shapes, message):
    """Before: `ets evaluate` of dnnperf-T4 scored a dataset whose shapes were half garbage at 70 %
    MRE (17 % on the same rows with their shapes) and negative dims at NaN, without a word. Now the
    dataset is refused, naming the file, row, field and config."""
    from predictor.checkpoints import CHECKPOINT_DIR
    from tests.predictor.test_hostile_inputs import dataset, trace

    rows = trace()
    rows["input_shapes"] = ["[[2,3,32,32]]", "[[2,3,32,32],[[4,4],[4]]]", shapes] + ["[]"] * (len(rows) - 3)
    directory = dataset(tmp_path, rows)
    result = CliRunner().invoke(ets, ["evaluate", "--ckpt", str(CHECKPOINT_DIR / "dnnperf-T4.pt"),
                                      "--data", str(directory), "--device", "T4", "--split", "all"])
    one_line_error(result, f"{directory / 'T4.parquet'}:2: field 'input_shapes': {message}",
                   "(config resnet18:b2:s32:float32:sgd:c10, op conv2d; 1 bad row(s) in all)", codes=(1,), alone=True)

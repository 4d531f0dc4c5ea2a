"""One run per output folder, nothing replaced without --overwrite, nothing left by a failed run
(issue 31, findings 4, 6 and 9): a second run or sweep into a folder in use is refused at once,
naming the first's PID; `simrun timeline` and `simrun plot` keep earlier files; a malformed
--ray is one line."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

import simulator.cli
import simulator.sweep.driver
from simulator.cli import main
from tests.cli_checks import one_line_error

SMALL = ["--policy", "fifo", "--predictor", "truth", "--workload", "pai-like:20"]


def simrun(*args) -> object:
    return CliRunner().invoke(main, [str(a) for a in args])


@pytest.fixture
def no_work(monkeypatch):
    """Fail the test if a simulation or sweep starts: the refusal must come before any work."""
    def refuse(*_a, **_k):
        raise AssertionError("the work started although --out was in use")
    monkeypatch.setattr(simulator.cli, "execute", refuse)
    monkeypatch.setattr(simulator.sweep.driver, "run_points", refuse)


def start_long_run(out: Path) -> subprocess.Popen:
    """A real ``simrun`` into ``out`` that runs for minutes (a million-job FIFO replay), once it
    has claimed the folder."""
    run = subprocess.Popen([sys.executable, "-c", "from simulator.cli import main; main()", *SMALL[:4],
                            "--workload", "pai-like:1000000", "--out", str(out), "--quiet"],
                           cwd=Path(__file__).resolve().parents[2], stderr=subprocess.DEVNULL)
    lock, pid = out / ".lock", f"{run.pid}\n"
    deadline = time.monotonic() + 60
    while not (lock.exists() and lock.read_text() == pid) and time.monotonic() < deadline:
        time.sleep(0.05)  # the folder exists before the lock is taken: wait for the PID in it
    assert lock.exists() and lock.read_text() == pid and run.poll() is None, "the first run did not take its lock"
    return run


def test_a_second_run_or_sweep_into_a_folder_in_use_is_refused_at_once(tmp_path, no_work):
    out = tmp_path / "run"
    first = start_long_run(out)
    try:
        one_line_error(simrun(*SMALL, "--out", out), f"--out {out} is in use by another run (PID {first.pid})")
        one_line_error(simrun(*SMALL, "--out", out, "--overwrite"), f"is in use by another run (PID {first.pid})")
        one_line_error(simrun("sweep", "--policies", "fifo", "--predictors", "truth", "--workloads", "pai-like:20",
                              "--out", out), f"is in use by another run (PID {first.pid})")
    finally:
        first.kill()  # SIGKILL: no cleanup runs, the kernel drops the lock
        first.wait()


def test_a_lock_dies_with_its_holder_and_is_removed_when_a_run_ends(tmp_path):
    out = tmp_path / "run"
    first = start_long_run(out)
    first.kill()
    first.wait()
    result = simrun(*SMALL, "--out", out, "--quiet", "--overwrite")  # the killed run's folder: replaced
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in out.iterdir()) == ["jobs.parquet", "manifest.json", "summary.json"]
    from predictor.common.outputs import LOCK_NAME, locked_folder

    with locked_folder(tmp_path / "sweep"):  # held by this process: a sweep is refused too
        one_line_error(simrun("sweep", "--policies", "fifo", "--predictors", "truth", "--out", tmp_path / "sweep"),
                       f"(PID {os.getpid()})")
    assert not (tmp_path / "sweep" / LOCK_NAME).exists()


def test_a_failed_run_leaves_no_empty_folder(tmp_path):
    out = tmp_path / "new" / "run"
    one_line_error(simrun(*SMALL[:4], "--trace", f"philly:{tmp_path / 'missing.csv'}", "--out", out), "missing.csv")
    assert not out.exists()
    kept = tmp_path / "kept"
    kept.mkdir()
    one_line_error(simrun(*SMALL[:4], "--trace", f"philly:{tmp_path / 'missing.csv'}", "--out", kept), "missing.csv")
    assert kept.is_dir() and not any(kept.iterdir())  # the user's own folder stays


def test_timeline_and_plot_keep_earlier_files_without_overwrite(tmp_path):
    run = tmp_path / "run"
    assert simrun(*SMALL, "--out", run, "--quiet").exit_code == 0
    assert simrun("timeline", run).exit_code == 0
    before = (run / "timeline.json").read_bytes()
    one_line_error(simrun("timeline", run), f"--out {run / 'timeline.json'} already exists; pass --overwrite")
    notes = tmp_path / "notes.txt"
    notes.write_text("mine")
    one_line_error(simrun("timeline", run, "--out", notes), f"--out {notes} already exists")
    assert notes.read_text() == "mine" and (run / "timeline.json").read_bytes() == before
    assert simrun("timeline", run, "--overwrite").exit_code == 0
    assert simrun("plot", run).exit_code == 0
    one_line_error(simrun("plot", run), f"--out {run / 'plots'} already holds figures")
    assert simrun("plot", run, "--overwrite").exit_code == 0
    one_line_error(simrun("plot", run, "--out", tmp_path, "--overwrite"), "holds files that are not figures")
    assert notes.read_text() == "mine"


@pytest.mark.parametrize("address, needle", [
    ("foo", "'foo': expected auto, local, HOST:PORT or ray://HOST:PORT"),
    ("ray://host:99999", "expected auto, local, HOST:PORT"),
    ("127.0.0.1:9", "no Ray cluster answers there"),
])
def test_a_bad_ray_address_is_one_line_before_any_work(tmp_path, address, needle, no_work):
    started = time.perf_counter()
    result = simrun("sweep", "--policies", "fifo", "--predictors", "truth", "--workloads", "pai-like:20",
                    "--out", tmp_path / "s", "--ray", address)
    one_line_error(result, needle)
    assert time.perf_counter() - started < 20  # no retries for minutes

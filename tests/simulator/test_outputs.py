"""`simrun` and `simrun timeline` outputs: checked before any work, written all or nothing, never
mixed with another run's files.

A read-only folder is made with chmod where that blocks writes (not as root), and by a
monkeypatched failing write everywhere; a full disk is a monkeypatched write that stops half-way
with ENOSPC.
"""

from __future__ import annotations

import errno
import json
import os
import stat
import tempfile
from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner

import simulator.cli
from predictor.common.outputs import OutputError
from simulator.cli import default_out_dir, main
from simulator.run import RunConfig, execute

SMALL = ["--policy", "fifo", "--predictor", "truth", "--workload", "pai-like:20"]
RUN_FILES = {"jobs.parquet", "summary.json", "manifest.json"}
ROOT = os.geteuid() == 0  # root writes into a chmod 0o500 folder anyway


def simrun(*args: str):
    return CliRunner().invoke(main, list(args))


def files(folder: Path) -> dict[str, bytes]:
    """Every file under ``folder`` (hidden ones too) with its bytes."""
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def one_line_error(result, *needles: str) -> None:
    assert result.exit_code == 1, result.output
    assert "Traceback" not in result.output and not isinstance(result.exception, (OSError, TypeError))
    errors = [line for line in result.output.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1, result.output
    for needle in needles:
        assert needle in errors[0], errors[0]


@pytest.fixture
def no_simulation(monkeypatch):
    """Fail the test if the simulation starts: the output folder must be refused before."""
    def refuse(*_a, **_k):
        raise AssertionError("the simulation ran although --out was unusable")
    monkeypatch.setattr(simulator.cli, "execute", refuse)


@pytest.fixture
def unwritable(monkeypatch):
    """Every write-check file creation fails as in a read-only folder (works as root too)."""
    def denied(*_a, **_k):
        raise PermissionError(errno.EACCES, "Permission denied")
    monkeypatch.setattr(tempfile, "NamedTemporaryFile", denied)


def full_disk_parquet(monkeypatch) -> None:
    """DataFrame.to_parquet writes half of its file, then fails with ENOSPC (a full disk)."""
    real = pd.DataFrame.to_parquet

    def half_then_enospc(self, path, *args, **kwargs):
        real(self, path, *args, **kwargs)
        Path(path).write_bytes(Path(path).read_bytes()[:100])
        raise OSError(errno.ENOSPC, "No space left on device")
    monkeypatch.setattr(pd.DataFrame, "to_parquet", half_then_enospc)


def full_disk_text(monkeypatch) -> None:
    """Path.write_text writes half of its text, then fails with ENOSPC (a full disk)."""
    real = Path.write_text

    def half_then_enospc(self, text, *args, **kwargs):
        real(self, text[: len(text) // 2], *args, **kwargs)
        raise OSError(errno.ENOSPC, "No space left on device")
    monkeypatch.setattr(Path, "write_text", half_then_enospc)


# -- writability checked before any work -------------------------------------------------------

@pytest.mark.skipif(ROOT, reason="root writes into a read-only folder; see the monkeypatched test")
def test_read_only_out_is_refused_before_the_simulation(tmp_path, no_simulation):
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(stat.S_IRUSR | stat.S_IXUSR)  # 0o500
    try:
        result = simrun(*SMALL, "--out", str(locked / "run"))
    finally:
        locked.chmod(0o700)
    one_line_error(result, f"cannot write to {locked / 'run'}", "Permission denied")


def test_unwritable_out_is_refused_before_the_simulation(tmp_path, no_simulation, unwritable):
    result = simrun(*SMALL, "--out", str(tmp_path / "run"))
    one_line_error(result, f"cannot write to {tmp_path / 'run'}: Permission denied")


def test_unwritable_default_folder_is_refused_before_the_simulation(tmp_path, monkeypatch, no_simulation,
                                                                    unwritable):
    monkeypatch.chdir(tmp_path)
    result = simrun(*SMALL)
    one_line_error(result, "cannot write to runs/", "Permission denied")


def test_out_that_is_a_file_is_refused(tmp_path, no_simulation):
    path = tmp_path / "f"
    path.write_text("x")
    result = simrun(*SMALL, "--out", str(path))
    assert result.exit_code == 2 and "is a file" in result.output


# -- a full disk -------------------------------------------------------------------------------

def test_full_disk_leaves_no_truncated_file_and_keeps_the_earlier_run(tmp_path, monkeypatch):
    out = tmp_path / "run"
    assert simrun(*SMALL, "--out", str(out)).exit_code == 0
    before = files(out)
    full_disk_parquet(monkeypatch)
    result = simrun(*SMALL, "--seed", "1", "--out", str(out), "--overwrite")
    one_line_error(result, f"cannot write {out / 'jobs.parquet'}", "No space left on device")
    assert files(out) == before  # the earlier run whole, no half file, no temporary file


def test_full_disk_in_a_new_folder_leaves_nothing(tmp_path, monkeypatch):
    out = tmp_path / "run"
    full_disk_parquet(monkeypatch)
    one_line_error(simrun(*SMALL, "--out", str(out)), "No space left on device")
    assert files(out) == {}


def test_write_is_all_or_nothing_when_a_later_file_fails(tmp_path, monkeypatch):
    """summary.json fails after jobs.parquet was written: no file of the new run replaces one of
    the old run's (which would mix the two)."""
    out = tmp_path / "run"
    old = execute(RunConfig(policy="fifo", predictor="truth", workload="pai-like:20"))
    old.write(out)
    before = files(out)
    new = execute(RunConfig(policy="sjf", predictor="truth", workload="pai-like:30"))
    full_disk_text(monkeypatch)
    with pytest.raises(OutputError, match="summary.json: No space left on device"):
        new.write(out)
    assert files(out) == before


def test_write_accepts_a_fresh_folder(tmp_path):
    """As sweeps use it: a folder that does not exist yet, with the truth run beside."""
    run = execute(RunConfig(policy="fifo", predictor="truth", workload="pai-like:20"))
    out = run.write(tmp_path / "a" / "b", truth=run)
    assert set(files(out)) == RUN_FILES | {f"truth/{f}" for f in RUN_FILES}
    assert pd.read_parquet(out / "jobs.parquet").equals(run.records)


# -- reusing --out -----------------------------------------------------------------------------

def test_reused_out_is_refused_without_overwrite(tmp_path, no_simulation):
    out = tmp_path / "run"
    out.mkdir()
    (out / "jobs.parquet").write_text("an earlier run")
    result = simrun(*SMALL, "--out", str(out))
    one_line_error(result, f"--out {out} already holds files of another run", "--overwrite")
    assert (out / "jobs.parquet").read_text() == "an earlier run"


def test_overwrite_replaces_the_earlier_run_and_nothing_of_it_stays(tmp_path):
    out = tmp_path / "run"
    big = ["--policy", "sjf", "--predictor", "noisy:0.1", "--workload", "pai-like:60", "--compare-truth"]
    assert simrun(*big, "--out", str(out)).exit_code == 0
    assert simrun("timeline", str(out)).exit_code == 0
    assert {"truth", "timeline.json"} <= {p.name for p in out.iterdir()}
    result = simrun(*SMALL, "--out", str(out), "--overwrite")
    assert result.exit_code == 0, result.output
    assert set(files(out)) == RUN_FILES  # exactly the new run's files
    assert json.loads((out / "manifest.json").read_text())["trace"]["jobs"] == 20
    assert len(pd.read_parquet(out / "jobs.parquet")) == 20


def test_a_failing_run_keeps_the_earlier_run_despite_overwrite(tmp_path):
    out = tmp_path / "run"
    assert simrun(*SMALL, "--out", str(out)).exit_code == 0
    before = files(out)
    result = simrun("--policy", "fifo", "--predictor", "truth", "--workload", "pai-like:ten", "--out", str(out),
                    "--overwrite")
    one_line_error(result, "expected KIND:N")
    assert files(out) == before


def test_overwrite_refuses_a_folder_that_is_not_a_run(tmp_path, no_simulation):
    (tmp_path / "notes.txt").write_text("keep me")
    result = simrun(*SMALL, "--out", str(tmp_path), "--overwrite")
    one_line_error(result, "holds files that are not a simrun run", "notes.txt")
    assert (tmp_path / "notes.txt").read_text() == "keep me"


def test_default_run_folders_are_new_and_unique(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    first, second = default_out_dir("fifo", "noisy:0.1"), default_out_dir("fifo", "noisy:0.1")
    assert first != second and first.is_dir() and second.is_dir()
    assert not any(first.iterdir()) and not any(second.iterdir())


def test_a_failing_run_leaves_no_empty_default_folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    one_line_error(simrun("--policy", "tetris", "--predictor", "truth"), "unknown policy")
    assert not any((tmp_path / "runs").iterdir())


# -- simrun timeline ---------------------------------------------------------------------------

@pytest.fixture
def run_dir(tmp_path) -> Path:
    return execute(RunConfig(policy="fifo", predictor="truth", workload="pai-like:20")).write(tmp_path / "run")


@pytest.mark.skipif(ROOT, reason="root writes into a read-only folder; see the monkeypatched test")
def test_timeline_to_a_read_only_folder_is_one_line(run_dir, tmp_path):
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    try:
        result = simrun("timeline", str(run_dir), "--out", str(locked / "t.json"))
    finally:
        locked.chmod(0o700)
    one_line_error(result, f"cannot write to {locked}", "Permission denied")
    assert not (locked / "t.json").exists()


def test_timeline_to_an_unwritable_place_is_one_line(run_dir, tmp_path, monkeypatch, unwritable):
    built = []
    monkeypatch.setattr("simulator.timeline.run_timeline", lambda *a: built.append(a) or {})
    result = simrun("timeline", str(run_dir), "--out", str(tmp_path / "t" / "t.json"))
    one_line_error(result, f"cannot write to {tmp_path / 't'}: Permission denied")
    assert not built  # refused before the trace was built
    assert not (tmp_path / "t" / "t.json").exists()


def test_timeline_on_a_full_disk_keeps_the_old_file(run_dir, monkeypatch):
    assert simrun("timeline", str(run_dir)).exit_code == 0
    before = files(run_dir)
    full_disk_text(monkeypatch)
    result = simrun("timeline", str(run_dir), "--overwrite")
    one_line_error(result, f"cannot write {run_dir / 'timeline.json'}: No space left on device")
    assert files(run_dir) == before  # no 0-byte or half file, no temporary file

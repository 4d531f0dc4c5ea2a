"""The sweep's driver: a killed sweep resumes without recomputing finished points (and matches a
clean run), an unusable ``--out`` is refused in one line before any point runs, and an ``--out``
that breaks mid-sweep stops it in one line, keeping the finished points."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner

import simulator.sweep.executors as sweep_executors
from predictor.common.outputs import OutputError
from simulator.cli import main
from simulator.sweep.driver import run_sweep
from simulator.sweep.grid import plan
from simulator.sweep.points import config_key, load_results
from tests.simulator.helpers import REPO, comparable, grid_args, grid_configs, records

# ---------------------------------------------------------------------------------------------
# Resume after a kill


def _cli(out: Path, *extra: str) -> list[str]:
    return [sys.executable, "-c", "from simulator.cli import main; main()", "sweep",
            "--policies", "fifo,sjf,allox,hydra",
            "--predictors", "truth", "--errors", "0.2", "--workloads", "pai-like:400", "--seeds", "0,",
            "--workers", "1", "--quiet", "--out", str(out), *extra]


def test_killed_sweep_resumes_without_recomputing_and_matches_a_clean_run(tmp_path):
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    out = tmp_path / "killed"
    proc = subprocess.Popen(_cli(out), cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 60
    points = out / "points"
    while time.monotonic() < deadline and proc.poll() is None:
        if points.is_dir() and any(not p.name.startswith(".") for p in points.iterdir()):
            break
        time.sleep(0.01)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    finished = {p.name: p.stat().st_mtime_ns for p in points.iterdir() if not p.name.startswith(".")}
    print(f"killed after {len(finished)} of 8 points")
    assert 1 <= len(finished) < 8, f"kill came too late ({len(finished)} of 8 points done)"
    assert not (out / "results.parquet").exists()

    (points / ".half.parquet.tmp-1").write_bytes(b"PAR1 half written")  # as a kill mid-write would leave
    rerun = subprocess.run(_cli(out), cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert rerun.returncode == 0, rerun.stderr
    assert f"8 points: {len(finished)} already done (skipped), {8 - len(finished)} to run" in rerun.stderr
    for name, mtime in finished.items():
        assert (points / name).stat().st_mtime_ns == mtime, f"{name} was recomputed"
    assert "fifo" in rerun.stdout and "xtruth" in rerun.stdout
    assert not (points / ".half.parquet.tmp-1").exists()

    clean = run_sweep(plan("fifo,sjf,allox,hydra", "truth", errors="0.2", workloads="pai-like:400", seeds="0,"),
                      tmp_path / "clean", workers=1, progress=False)
    resumed = load_results(out)
    pd.testing.assert_frame_equal(comparable(resumed), comparable(clean))
    for key in clean["key"]:
        pd.testing.assert_frame_equal(records(out, key), records(tmp_path / "clean", key))


# ---------------------------------------------------------------------------------------------
# An unusable --out: one line, before any work


def _no_point_may_run(monkeypatch) -> None:
    def refuse(config):
        raise AssertionError(f"a point ran before --out was checked: {config}")

    monkeypatch.setattr(sweep_executors, "run_point", refuse)


def test_an_out_under_a_file_is_refused_in_one_line_before_any_point(tmp_path, monkeypatch):
    _no_point_may_run(monkeypatch)
    (tmp_path / "file").write_text("not a folder")
    out = tmp_path / "file" / "sweep"
    result = CliRunner().invoke(main, grid_args(out))
    assert result.exit_code == 1
    assert result.output.splitlines() == [f"Error: cannot write to {out}: Not a directory"]


@pytest.mark.skipif(os.name != "posix" or os.geteuid() == 0, reason="root writes into read-only folders")
def test_a_read_only_out_is_refused_in_one_line_before_any_point(tmp_path, monkeypatch):
    _no_point_may_run(monkeypatch)
    out = tmp_path / "ro"
    out.mkdir()
    out.chmod(0o555)
    try:
        result = CliRunner().invoke(main, grid_args(out))
    finally:
        out.chmod(0o755)
    assert result.exit_code == 1
    assert result.output.splitlines() == [f"Error: cannot write to {out}: Permission denied"]


def test_a_read_only_points_folder_inside_out_is_refused_too(tmp_path, monkeypatch):
    _no_point_may_run(monkeypatch)
    (tmp_path / "points").write_text("a file where the points folder belongs")
    with pytest.raises(OutputError, match=r"cannot write to .*points: (Not a directory|File exists)"):
        run_sweep(grid_configs(), tmp_path, workers=1, progress=False)


# ---------------------------------------------------------------------------------------------
# An out that breaks mid-sweep


def test_an_out_that_breaks_mid_sweep_stops_it_in_one_line_keeping_finished_points(tmp_path, monkeypatch):
    run_point = sweep_executors.run_point
    calls: list[str] = []

    def then_break(config):
        if calls:  # after the first point is written: the runs folder becomes a file
            shutil.rmtree(tmp_path / "runs")
            (tmp_path / "runs").write_text("")
        calls.append(config.policy)
        return run_point(config)

    monkeypatch.setattr(sweep_executors, "run_point", then_break)
    result = CliRunner().invoke(main, grid_args(tmp_path))
    assert result.exit_code == 1, result.output
    assert "Traceback" not in result.output
    last = result.output.splitlines()[-1]
    assert last.startswith(f"Error: cannot write {tmp_path / 'runs'}/") and "the sweep stops" in last
    assert "rerun with the same --out to resume" in last
    first = next(c for c in grid_configs() if c.policy == calls[0])
    assert (tmp_path / "points" / f"{config_key(first)}.parquet").exists()
    assert not (tmp_path / "results.parquet").exists()

"""``simrun sweep`` when things go wrong around it: an unusable ``--out`` (refused in one line
before any point runs), a point whose files cannot be written (recorded as failed, the sweep goes
on), an ``--out`` that breaks mid-sweep (one line, finished points kept), and a SIGKILLed driver
(its pool workers and the resource tracker die with it)."""

from __future__ import annotations

import errno
import multiprocessing
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner

import simulator.sweep as sweep
from simulator.cli import main
from simulator.sweep import _iter_local, _watch_parent, config_key, load_results, plan, run_sweep

REPO = Path(__file__).resolve().parents[2]
GRID = dict(policies="fifo,sjf", predictors="truth", workloads="pai-like:60", limit=30, seeds="0,")


def _args(out: Path, *extra: str) -> list[str]:
    return ["sweep", "--policies", GRID["policies"], "--predictors", GRID["predictors"], "--workloads",
            GRID["workloads"], "--limit", str(GRID["limit"]), "--seeds", GRID["seeds"], "--workers", "1",
            "--quiet", "--out", str(out), *extra]


def _configs():
    return plan(GRID["policies"], GRID["predictors"], workloads=GRID["workloads"], limit=GRID["limit"],
                seeds=GRID["seeds"])


def _no_point_may_run(monkeypatch) -> None:
    def refuse(config):
        raise AssertionError(f"a point ran before --out was checked: {config}")

    monkeypatch.setattr(sweep, "run_point", refuse)


# ---------------------------------------------------------------------------------------------
# An unusable --out: one line, before any work


def test_an_out_under_a_file_is_refused_in_one_line_before_any_point(tmp_path, monkeypatch):
    _no_point_may_run(monkeypatch)
    (tmp_path / "file").write_text("not a folder")
    out = tmp_path / "file" / "sweep"
    result = CliRunner().invoke(main, _args(out))
    assert result.exit_code == 1
    assert result.output.splitlines() == [f"Error: cannot write to {out}: Not a directory"]


@pytest.mark.skipif(os.name != "posix" or os.geteuid() == 0, reason="root writes into read-only folders")
def test_a_read_only_out_is_refused_in_one_line_before_any_point(tmp_path, monkeypatch):
    _no_point_may_run(monkeypatch)
    out = tmp_path / "ro"
    out.mkdir()
    out.chmod(0o555)
    try:
        result = CliRunner().invoke(main, _args(out))
    finally:
        out.chmod(0o755)
    assert result.exit_code == 1
    assert result.output.splitlines() == [f"Error: cannot write to {out}: Permission denied"]


def test_a_read_only_points_folder_inside_out_is_refused_too(tmp_path, monkeypatch):
    _no_point_may_run(monkeypatch)
    (tmp_path / "points").write_text("a file where the points folder belongs")
    with pytest.raises(sweep.OutputError, match=r"cannot write to .*points: (Not a directory|File exists)"):
        run_sweep(_configs(), tmp_path, workers=1, progress=False)


# ---------------------------------------------------------------------------------------------
# A point that cannot be written; an out that breaks mid-sweep


def _full_disk_for(monkeypatch, key: str) -> None:
    """Writing jobs.parquet of point ``key``'s run folder fails with ENOSPC, as on a full disk."""
    to_parquet = pd.DataFrame.to_parquet

    def full(self, path, *args, **kwargs):
        if f"/.{key}.tmp-" in str(path):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return to_parquet(self, path, *args, **kwargs)

    monkeypatch.setattr(pd.DataFrame, "to_parquet", full)


def test_a_point_that_fails_to_write_is_recorded_as_failed_and_the_sweep_goes_on(tmp_path, monkeypatch):
    fifo, sjf = sorted(_configs(), key=lambda c: c.policy)
    _full_disk_for(monkeypatch, config_key(fifo))
    result = CliRunner().invoke(main, _args(tmp_path))
    assert result.exit_code == 1, result.output
    assert "Traceback" not in result.output
    (line,) = [x for x in result.output.splitlines() if "point(s) failed" in x]
    run_dir = tmp_path / "runs" / config_key(fifo)
    assert line.startswith(f"1 point(s) failed, e.g. fifo | truth: OutputError: cannot write {run_dir}")
    assert "No space left on device" in line and ".tmp-" not in line
    table = load_results(tmp_path).set_index("policy")
    assert table.loc["fifo", "status"] == "error" and table.loc["sjf", "status"] == "ok"
    assert table.loc["sjf", "jobs"] == 30 and (tmp_path / "runs" / config_key(sjf) / "jobs.parquet").exists()
    record = (tmp_path / "runs" / config_key(fifo) / "error.txt").read_text()
    assert record.startswith("the point ran, but its output could not be written: cannot write")
    assert not (tmp_path / "runs" / config_key(fifo) / "jobs.parquet").exists()
    assert not [p for p in tmp_path.rglob(".*")], "temporary files were left behind"
    # with room again, a rerun retries the failed point only
    monkeypatch.undo()
    logs: list[str] = []
    table = run_sweep(_configs(), tmp_path, workers=1, progress=False, log=logs.append)
    assert logs == ["2 points: 1 already done (skipped), 1 to run with 1 worker(s)"]
    assert (table["status"] == "ok").all()


def test_an_out_that_breaks_mid_sweep_stops_it_in_one_line_keeping_finished_points(tmp_path, monkeypatch):
    run_point = sweep.run_point
    calls: list[str] = []

    def then_break(config):
        if calls:  # after the first point is written: the runs folder becomes a file
            shutil.rmtree(tmp_path / "runs")
            (tmp_path / "runs").write_text("")
        calls.append(config.policy)
        return run_point(config)

    monkeypatch.setattr(sweep, "run_point", then_break)
    result = CliRunner().invoke(main, _args(tmp_path))
    assert result.exit_code == 1, result.output
    assert "Traceback" not in result.output
    last = result.output.splitlines()[-1]
    assert last.startswith(f"Error: cannot write {tmp_path / 'runs'}/") and "the sweep stops" in last
    assert "rerun with the same --out to resume" in last
    first = next(c for c in _configs() if c.policy == calls[0])
    assert (tmp_path / "points" / f"{config_key(first)}.parquet").exists()
    assert not (tmp_path / "results.parquet").exists()


# ---------------------------------------------------------------------------------------------
# Workers die with the driver


def _proc_stat(pid: int) -> tuple[int, str, int] | None:
    """(parent pid, state, start time) of a live process from /proc, None when gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text.rsplit(")", 1)[1].split()
    return int(fields[1]), fields[0], int(fields[19])


def _descendants(pid: int) -> dict[int, int]:
    """pid -> start time of every live descendant of ``pid``."""
    children: dict[int, list[int]] = {}
    starts: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and (stat := _proc_stat(int(entry.name))) and stat[1] not in "ZX":
            children.setdefault(stat[0], []).append(int(entry.name))
            starts[int(entry.name)] = stat[2]
    found, todo = {}, [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found[child] = starts[child]
            todo.append(child)
    return found


def _alive(pid: int, start: int) -> bool:
    stat = _proc_stat(pid)
    return stat is not None and stat[2] == start and stat[1] not in "ZX"  # a zombie is dead


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return "?"


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs /proc to find the workers")
def test_sigkill_of_a_sweep_leaves_no_worker_and_no_resource_tracker(tmp_path):
    out = tmp_path / "sweep"
    cmd = [sys.executable, "-c", "from simulator.cli import main; main()", "sweep", "--policies",
           "fifo,sjf,allox,hydra", "--predictors", "truth", "--workloads", "pai-like:400", "--seeds", "3",
           "--workers", "2", "--quiet", "--out", str(out)]
    proc = subprocess.Popen(cmd, cwd=REPO, env={**os.environ, "OMP_NUM_THREADS": "1"},
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    family: dict[int, int] = {}
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and proc.poll() is None:
            family.update(_descendants(proc.pid))
            workers = [p for p in family if "spawn_main" in _cmdline(p)]
            points = out / "points"
            if len(workers) >= 2 and points.is_dir() and any(not p.name.startswith(".") for p in points.iterdir()):
                break
            time.sleep(0.05)
        family.update(_descendants(proc.pid))
        assert proc.poll() is None, "the sweep ended before it could be killed"
        kinds = {p: _cmdline(p) for p in family}
        assert sum("spawn_main" in c for c in kinds.values()) == 2, kinds
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and any(_alive(p, s) for p, s in family.items()):
            time.sleep(0.05)
        left = {p: kinds[p] for p, s in family.items() if _alive(p, s)}
        assert not left, f"still running after the sweep was SIGKILLed: {left}"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for pid, start in family.items():  # only the processes this test started
            if _alive(pid, start):
                os.kill(pid, signal.SIGKILL)


def test_a_worker_without_prctl_notices_that_its_parent_is_gone():
    orphaned = threading.Event()
    thread = _watch_parent(-1, on_orphan=orphaned.set, interval=0.01)  # -1: never this process's parent
    assert orphaned.wait(30)
    thread.join(30)
    assert not thread.is_alive()


def test_a_stopped_sweep_terminates_its_workers_instead_of_waiting_for_their_points():
    configs = plan("fifo,sjf,allox,hydra", "truth", workloads="pai-like:60", limit=20, seeds="0,")
    before = set(multiprocessing.active_children())
    points = _iter_local(configs, 2)
    first = next(points)
    assert first["row"]["status"] == "ok"
    workers = [p for p in multiprocessing.active_children() if p not in before]
    assert len(workers) == 2
    points.close()
    deadline = time.monotonic() + 30
    # poll: the pool's own thread may reap a worker while this one waits on it (then join returns
    # before the exit code is recorded on the shared Process object)
    while any(w.exitcode is None for w in workers) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert [w.exitcode for w in workers] == [-signal.SIGTERM] * 2

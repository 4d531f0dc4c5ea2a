"""Where a sweep's points run: identical results on the local pool and a real local Ray cluster;
pool workers die with a SIGKILLed driver (and the resource tracker with them), notice a dead
parent without prctl, and stop at once when the sweep stops."""

from __future__ import annotations

import multiprocessing
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pandas as pd
import pytest

from simulator.sweep.driver import run_sweep
from simulator.sweep.executors import _watch_parent, run_points
from simulator.sweep.grid import plan
from tests.simulator.helpers import REPO, comparable, records

SMALL = dict(workloads="pai-like:60", seeds="0,", limit=40)


def test_local_pool_and_ray_give_identical_results(tmp_path):
    try:
        import ray
    except ImportError:
        pytest.skip("ray is not installed (pip install 'ets-sim[distributed]')")
    configs = plan("allox,hydra", "truth,noisy:0.2", **SMALL)
    t0 = time.perf_counter()
    local = run_sweep(configs, tmp_path / "local", workers=2, progress=False)
    local_s = time.perf_counter() - t0
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        t0 = time.perf_counter()
        remote = run_sweep(configs, tmp_path / "ray", ray_address="auto", progress=False)
        ray_s = time.perf_counter() - t0
    finally:
        ray.shutdown()
    print(f"4-point sweep: local pool {local_s:.2f} s, Ray (after init) {ray_s:.2f} s")
    assert len(local) == 4 and (local["status"] == "ok").all()
    pd.testing.assert_frame_equal(comparable(local), comparable(remote))
    for key in local["key"]:
        pd.testing.assert_frame_equal(records(tmp_path / "local", key), records(tmp_path / "ray", key))
    # the same files were written by the driver in both cases
    for out in ("local", "ray"):
        assert (sorted(p.name for p in (tmp_path / out / "points").iterdir())
                == sorted(f"{k}.parquet" for k in local["key"]))
        pd.testing.assert_frame_equal(comparable(pd.read_parquet(tmp_path / out / "results.parquet")),
                                      comparable(local))


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
    points = run_points(configs, workers=2)
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

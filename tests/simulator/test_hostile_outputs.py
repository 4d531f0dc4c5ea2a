"""Outputs a stranger cannot redirect, and sweeps that stop cleanly (issue 50, findings 1, 6, 7, 10).

A shared or handed-over output folder may hold symbolic links planted to send our writes (or our
removal of an earlier run's files) elsewhere: a predictable temporary name, ``truth/``,
``plots/``, ``runs/``, ``.lock``. Each is refused in one line, or never followed; the victim's
files stay as they were. A sweep that fails leaves no worker behind, runs no more workers than
the machine has cores, and never trusts a point file edited after it was written.
"""

from __future__ import annotations

import multiprocessing
import os
import threading
from concurrent.futures.process import _ExecutorManagerThread
from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner

import simulator.sweep.driver as sweep_driver
import simulator.sweep.executors as sweep_executors
from predictor.common.outputs import OutputError, atomic_dir, atomic_file, inside, locked_folder, write_text
from simulator.cli import main
from simulator.run import RunConfig, execute
from simulator.sweep.driver import run_sweep
from simulator.sweep.grid import plan
from simulator.sweep.points import config_key, done_keys, load_results
from tests.cli_checks import one_line_error
from tests.simulator.helpers import grid_args, grid_configs

SMALL = ["--policy", "fifo", "--predictor", "truth", "--workload", "pai-like:20", "--quiet"]


def simrun(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def files(folder: Path) -> dict[str, bytes]:
    """Every file under ``folder`` with its bytes."""
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture
def victim(tmp_path) -> Path:
    """A folder of someone else's files, which a planted link points at."""
    folder = tmp_path / "victim"
    folder.mkdir()
    for name in ("summary.json", "jobs.parquet", "jct_cdf.png", "precious.txt"):
        (folder / name).write_text(f"the victim's {name}")
    return folder


# ---------------------------------------------------------------------------------------------
# Temporary files: unpredictable, created exclusively


def test_a_link_planted_at_the_old_temporary_name_is_never_written_through(tmp_path, victim):
    before = files(victim)
    target = tmp_path / "out.txt"
    for pattern in (f".out.txt.tmp-{os.getpid()}", f".out.txt.tmp{os.getpid()}"):
        (tmp_path / pattern).symlink_to(victim / "precious.txt")
    write_text(target, "ours")
    assert files(victim) == before
    assert not target.is_symlink() and target.read_text() == "ours"


def test_temporary_names_are_new_files_with_the_usual_mode(tmp_path):
    names = []
    for _ in range(2):
        with atomic_file(tmp_path / "a.txt") as tmp:
            assert tmp.exists() and not tmp.is_symlink() and tmp.name.startswith(".a.txt.tmp-")
            names.append(tmp.name)
            tmp.write_text("x")
    assert names[0] != names[1]
    umask = os.umask(0)
    os.umask(umask)
    assert (tmp_path / "a.txt").stat().st_mode & 0o777 == 0o666 & ~umask  # not mkstemp's private 0o600


def test_a_destination_that_is_a_link_is_replaced_not_written_through(tmp_path, victim):
    before = files(victim)
    (tmp_path / "out.txt").symlink_to(victim / "precious.txt")
    write_text(tmp_path / "out.txt", "ours")
    (tmp_path / "run").symlink_to(victim)
    with atomic_dir(tmp_path / "run") as tmp:
        (tmp / "jobs.parquet").write_text("ours")
    assert files(victim) == before
    assert not (tmp_path / "out.txt").is_symlink() and (tmp_path / "out.txt").read_text() == "ours"
    assert not (tmp_path / "run").is_symlink() and files(tmp_path / "run") == {"jobs.parquet": b"ours"}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.txt", "run", "victim"]  # no leftover


def test_a_planted_lock_link_is_refused_and_its_target_kept(tmp_path, victim):
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / ".lock").symlink_to(victim / "precious.txt")
    with pytest.raises(OutputError, match=r"lock file .*\.lock is a symbolic link"):
        with locked_folder(tmp_path / "out"):
            pass
    assert (victim / "precious.txt").read_text() == "the victim's precious.txt"


def test_inside_refuses_a_link_below_the_root_but_takes_the_root_as_given(tmp_path, victim):
    (tmp_path / "given").symlink_to(victim)
    assert inside(tmp_path / "given", "new", "file") == tmp_path / "given" / "new" / "file"
    (victim / "plots").symlink_to(tmp_path)
    with pytest.raises(OutputError, match=r"given/plots is a symbolic link; refusing to write through it"):
        inside(tmp_path / "given", "plots", "a.png")


# ---------------------------------------------------------------------------------------------
# Links inside run, sweep and figures folders


def test_compare_truth_overwrite_refuses_a_planted_truth_link(tmp_path, victim):
    out = tmp_path / "run"
    assert simrun(*SMALL, "--out", out).exit_code == 0
    (out / "truth").symlink_to(victim)
    before, ours = files(victim), files(out)
    one_line_error(simrun(*SMALL, "--seed", "1", "--compare-truth", "--overwrite", "--out", out),
                   f"{out / 'truth'} is a symbolic link", "remove it")
    assert files(victim) == before
    assert files(out) == ours  # the earlier run kept whole


def test_plot_overwrite_refuses_a_planted_plots_link(tmp_path, victim):
    run = execute(RunConfig(policy="fifo", predictor="truth", workload="pai-like:20")).write(tmp_path / "run")
    (run / "plots").symlink_to(victim)
    before = files(victim)
    one_line_error(simrun("plot", run, "--overwrite"), f"{run / 'plots'} is a symbolic link")
    assert files(victim) == before


def test_a_sweep_refuses_a_planted_runs_link_before_any_point(tmp_path, victim, monkeypatch):
    out = tmp_path / "sweep"
    out.mkdir()
    (out / "runs").symlink_to(victim)
    monkeypatch.setattr(sweep_driver, "run_points", lambda *a, **k: pytest.fail("a point ran"))
    before = files(victim)
    one_line_error(simrun(*grid_args(out)), f"{out / 'runs'} is a symbolic link")
    assert files(victim) == before


def test_timeline_refuses_a_planted_default_file_link(tmp_path, victim):
    run = execute(RunConfig(policy="fifo", predictor="truth", workload="pai-like:20")).write(tmp_path / "run")
    (run / "timeline.json").symlink_to(victim / "precious.txt")
    before = files(victim)
    one_line_error(simrun("timeline", run, "--overwrite"), f"{run / 'timeline.json'} is a symbolic link")
    assert files(victim) == before


# ---------------------------------------------------------------------------------------------
# A failing sweep stops its workers


def test_a_sweep_that_fails_to_write_returns_with_no_worker_left(tmp_path, monkeypatch):
    """As on a full disk: not even a failure record can be written, so the sweep stops; it must
    return with its workers ended and reaped, not leave them (or itself) running."""
    def full_disk(out, result):
        raise OutputError("cannot write points: No space left on device")

    monkeypatch.setattr(sweep_driver, "save_point", full_disk)
    monkeypatch.setattr(sweep_executors, "usable_cores", lambda: 2)
    before = set(multiprocessing.active_children())
    configs = plan("fifo,sjf,allox,hydra", "truth", workloads="pai-like:60", limit=20, seeds="0,1")
    with pytest.raises(OutputError, match="No space left"):
        run_sweep(configs, tmp_path, workers=2, progress=False)
    left = [p for p in multiprocessing.active_children() if p not in before]  # also reaps the finished
    assert not left, f"workers still running after the sweep returned: {left}"
    managers = [t for t in threading.enumerate() if isinstance(t, _ExecutorManagerThread) and t.is_alive()]
    assert not managers, "the pool's manager thread outlived the sweep (the interpreter would wait on it)"


# ---------------------------------------------------------------------------------------------
# --workers: no more than the cores


def test_workers_past_the_cores_are_capped_with_a_warning(tmp_path, monkeypatch):
    monkeypatch.setattr(sweep_executors, "usable_cores", lambda: 1)
    before = set(multiprocessing.active_children())
    logs: list[str] = []
    table = run_sweep(grid_configs(), tmp_path, workers=12, progress=False, log=logs.append)
    assert logs == ["warning: --workers 12: this process may use 1 CPU core(s), so 1 worker(s) run (more would "
                    "only share the cores and multiply memory)",
                    "2 points: 0 already done (skipped), 2 to run with 1 worker(s)"]
    assert (table["status"] == "ok").all()
    assert set(multiprocessing.active_children()) <= before  # ran in this process: no pool at all


def test_the_core_count_is_this_process_affinity(monkeypatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {3})
    assert sweep_executors.usable_cores() == 1
    assert sweep_executors.worker_count(None, 10) == (1, None)
    assert sweep_executors.worker_count(4, 2)[0] == 1  # never more workers than points or cores


# ---------------------------------------------------------------------------------------------
# An edited point is never trusted


@pytest.fixture
def finished_sweep(tmp_path) -> Path:
    run_sweep(grid_configs(), tmp_path / "s", workers=1, progress=False)
    return tmp_path / "s"


def _edit_point(out: Path, key: str, **changes) -> None:
    path = out / "points" / f"{key}.parquet"
    row = pd.read_parquet(path)
    for column, value in changes.items():
        row[column] = value
    row.to_parquet(path, index=False)


def test_an_edited_point_is_rerun_on_resume_with_a_warning(finished_sweep):
    sjf = config_key(max(grid_configs(), key=lambda c: c.policy))
    true = pd.read_parquet(finished_sweep / "points" / f"{sjf}.parquet")["jct_mean"].iloc[0]
    _edit_point(finished_sweep, sjf, jct_mean=1.0)
    logs: list[str] = []
    table = run_sweep(grid_configs(), finished_sweep, workers=1, progress=False, log=logs.append)
    assert logs[0].startswith("warning: 1 point file(s) do not match their run folder (edited, or copied in), so "
                              f"their points run again; e.g. {finished_sweep / 'points' / sjf}.parquet: field "
                              "'jct_mean': 1.0 differs from")
    assert logs[1] == "2 points: 1 already done (skipped), 1 to run with 1 worker(s)"
    assert table.set_index("key").loc[sjf, "jct_mean"] == true  # rerun: the true number again


@pytest.mark.parametrize("change", [dict(seed=7), dict(made_up_metric=0.5), dict(utilization=0.99)])
def test_a_point_that_differs_from_its_run_folder_is_not_done(finished_sweep, change):
    fifo = config_key(min(grid_configs(), key=lambda c: c.policy))
    _edit_point(finished_sweep, fifo, **change)
    logs: list[str] = []
    assert fifo not in done_keys(finished_sweep, warn=logs.append)
    assert len(logs) == 1 and "do not match their run folder" in logs[0] and fifo in logs[0]
    assert fifo not in set(load_results(finished_sweep)["key"])  # nor drawn, nor in results.parquet


def test_a_point_copied_under_another_key_is_not_done(finished_sweep):
    fifo, sjf = sorted(grid_configs(), key=lambda c: c.policy)
    points, runs = finished_sweep / "points", finished_sweep / "runs"
    row = pd.read_parquet(points / f"{config_key(fifo)}.parquet").assign(key=config_key(sjf))
    row.to_parquet(points / f"{config_key(sjf)}.parquet", index=False)  # fifo's numbers as sjf's point
    for name in ("summary.json", "manifest.json"):
        (runs / config_key(sjf) / name).write_bytes((runs / config_key(fifo) / name).read_bytes())
    assert done_keys(finished_sweep, configs=grid_configs()) == {config_key(fifo)}


# ---------------------------------------------------------------------------------------------
# A stranger's manifest.json


@pytest.mark.parametrize("cluster", ["default:1e30", 12345, "missing-file.yaml"])
def test_a_manifest_cluster_that_cannot_be_built_is_said_not_silently_dropped(tmp_path, cluster):
    import json

    run = execute(RunConfig(policy="fifo", predictor="truth", workload="pai-like:20")).write(tmp_path / "run")
    manifest = json.loads((run / "manifest.json").read_text())
    manifest["config"]["cluster"] = cluster
    (run / "manifest.json").write_text(json.dumps(manifest))
    result = simrun("timeline", run)
    assert result.exit_code == 0 and "Traceback" not in result.output, result.output
    (line,) = [x for x in result.output.splitlines() if x.startswith("warning:")]
    assert line.startswith(f"warning: {run / 'manifest.json'}: ") and line.endswith("one process per GPU type")
    assert json.loads((run / "timeline.json").read_text())["traceEvents"]

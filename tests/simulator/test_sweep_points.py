"""A sweep's points: the key, the point row, a failing point and a point whose files cannot be
written (both recorded as failed while the others finish, then retried)."""

from __future__ import annotations

import errno
import hashlib
import json
import os
from dataclasses import asdict

import pandas as pd
from click.testing import CliRunner

import simulator.sweep.points as sweep_points
from simulator.cli import main
from simulator.run import RunConfig
from simulator.sweep.driver import run_sweep
from simulator.sweep.grid import plan
from simulator.sweep.points import config_key, config_of, load_results
from tests.simulator.helpers import grid_args, grid_configs

SMALL = dict(workloads="pai-like:60", seeds="0,", limit=40)


def test_key_is_a_hash_of_the_sorted_config_json():
    config = RunConfig(policy="allox", predictor="truth", workload="pai-like:60")
    fields = {k: v for k, v in asdict(config).items() if k not in ("failures", "checkpoint_every")}
    expected = hashlib.sha256(json.dumps(fields, sort_keys=True, separators=(",", ":")).encode()).hexdigest()[:16]
    assert config_key(config) == expected  # fields newer than finished sweeps' keys leave them as they were
    assert config_key(RunConfig(policy="allox", predictor="truth", workload="pai-like:60", seed=1)) != expected
    failing = RunConfig(policy="allox", predictor="truth", workload="pai-like:60", failures="nodes:1")
    assert config_key(failing) != expected
    assert config_key(RunConfig(policy="allox", predictor="truth", workload="pai-like:60", failures="nodes:1",
                                checkpoint_every="600")) != config_key(failing)


def digest_of_gpu_defaults(method: str) -> str:
    """The checkpoints a run loads: ``<method>-<GPU>.pt`` for GPU types of the catalogue only."""
    import hashlib

    from predictor.checkpoints import CHECKPOINT_DIR
    from predictor.emulator.devices.specs import spec_sheets

    h = hashlib.sha1()
    for path in sorted(CHECKPOINT_DIR.glob(f"{method}-*.pt")):
        if path.stem.removeprefix(f"{method}-") in spec_sheets():
            h.update(path.name.encode())
            h.update(path.read_bytes())
    return h.hexdigest()[:12]


def test_a_model_predictors_key_follows_its_checkpoints(monkeypatch):
    ets = RunConfig(policy="allox", predictor="ets", workload="pai-like:60", seed=1)
    truth = RunConfig(policy="allox", predictor="truth", workload="pai-like:60", seed=1)
    assert len(sweep_points.checkpoint_digest("ets")) == 12  # the shipped files
    assert sweep_points.checkpoint_digest("ets") == digest_of_gpu_defaults("ets")  # not ets-T4-real.pt, ets-cpu.pt
    before = config_key(ets), config_key(truth)
    monkeypatch.setattr(sweep_points, "checkpoint_digest", lambda method: "retrained")
    assert config_key(ets) != before[0]  # retrained weights: the point runs again
    assert config_key(truth) == before[1]


def test_point_rows_hold_config_metrics_and_status(tmp_path):
    configs = plan("sjf", "truth,noisy:0.1", **SMALL)
    table = run_sweep(configs, tmp_path, workers=1, progress=False)
    assert list(table["key"]) == sorted(config_key(c) for c in configs)
    row = table[table["predictor"] == "truth"].iloc[0]
    summary = json.loads((tmp_path / "runs" / row["key"] / "summary.json").read_text())
    for k, v in summary.items():
        if k == "utilization_by_type":
            assert all(row[f"utilization_{t}"] == u for t, u in v.items())
        else:
            assert row[k] == v, k
    assert row["status"] == "ok" and pd.isna(row["error"]) and row["point_seconds"] > 0
    assert config_of(row) in configs
    assert (tmp_path / "runs" / row["key"] / "manifest.json").exists()
    # no temp files left behind
    assert not [p for p in tmp_path.rglob(".*")]


def test_a_failing_point_is_recorded_and_the_others_finish_then_retried(tmp_path):
    result = CliRunner().invoke(main, ["sweep", "--policies", "fifo,nosuchpolicy", "--predictors", "truth",
                                       "--workloads", "pai-like:60", "--limit", "30", "--seeds", "0,",
                                       "--workers", "1", "--quiet", "--out", str(tmp_path)])
    assert result.exit_code == 1, result.output
    assert "1 point(s) failed" in result.output and "unknown policy 'nosuchpolicy'" in result.output
    table = load_results(tmp_path)
    assert len(table) == 2
    bad = table[table["policy"] == "nosuchpolicy"].iloc[0]
    good = table[table["policy"] == "fifo"].iloc[0]
    assert bad["status"] == "error" and "SpecError" in bad["error"] and "nosuchpolicy" in bad["error"]
    assert "Traceback" in (tmp_path / "runs" / bad["key"] / "error.txt").read_text()
    assert good["status"] == "ok" and good["jobs"] == 30
    assert (tmp_path / "results.parquet").exists()
    # a rerun retries the failed point only
    good_mtime = (tmp_path / "points" / f"{good['key']}.parquet").stat().st_mtime_ns
    logs = []
    run_sweep(plan("fifo,nosuchpolicy", "truth", workloads="pai-like:60", limit=30, seeds="0,"), tmp_path,
              workers=1, progress=False, log=logs.append)
    assert logs == ["2 points: 1 already done (skipped), 1 to run with 1 worker(s)"]
    assert (tmp_path / "points" / f"{good['key']}.parquet").stat().st_mtime_ns == good_mtime


def _full_disk_for(monkeypatch, key: str) -> None:
    """Writing jobs.parquet of point ``key``'s run folder fails with ENOSPC, as on a full disk."""
    to_parquet = pd.DataFrame.to_parquet

    def full(self, path, *args, **kwargs):
        if f"/.{key}.tmp-" in str(path):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return to_parquet(self, path, *args, **kwargs)

    monkeypatch.setattr(pd.DataFrame, "to_parquet", full)


def test_a_point_that_fails_to_write_is_recorded_as_failed_and_the_sweep_goes_on(tmp_path, monkeypatch):
    fifo, sjf = sorted(grid_configs(), key=lambda c: c.policy)
    _full_disk_for(monkeypatch, config_key(fifo))
    result = CliRunner().invoke(main, grid_args(tmp_path))
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
    table = run_sweep(grid_configs(), tmp_path, workers=1, progress=False, log=logs.append)
    assert logs == ["2 points: 1 already done (skipped), 1 to run with 1 worker(s)"]
    assert (table["status"] == "ok").all()

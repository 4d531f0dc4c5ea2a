"""``simrun sweep``: grid expansion, per-point caching, resume after a kill, failed points, and
identical results on the local pool and a real local Ray cluster."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import asdict
from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner

from simulator.cli import main
from simulator.run import DEFAULT_WORKLOAD, RunConfig
from simulator.sweep import (TIMING_COLUMNS, SweepSpecError, config_key, config_of, load_results,
                             normalise_to_truth, parse_seeds, plan, run_sweep, split_specs, summary_table)

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "fixtures" / "traces"


def comparable(table: pd.DataFrame) -> pd.DataFrame:
    """Result rows without the host-timing columns (which differ between two runs of a config)."""
    return table.drop(columns=[c for c in TIMING_COLUMNS if c in table]).reset_index(drop=True)


def records(out: Path, key: str) -> pd.DataFrame:
    return pd.read_parquet(out / "runs" / key / "jobs.parquet")


# ---------------------------------------------------------------------------------------------
# plan()


def test_plan_expands_the_full_grid_with_error_points():
    configs = plan("allox,hydra", "truth,ets", errors="0,0.05,0.1", workloads="pai-like:300,philly-like:300",
                   seeds="0,1", load_scales="1,1.5", limit=50)
    assert len(configs) == 2 * 5 * 2 * 2 * 2
    assert len(set(configs)) == len(configs) and len({config_key(c) for c in configs}) == len(configs)
    assert {c.predictor for c in configs} == {"truth", "ets", "noisy:0", "noisy:0.05", "noisy:0.1"}
    assert {c.policy for c in configs} == {"allox", "hydra"}
    assert {c.workload for c in configs} == {"pai-like:300", "philly-like:300"}
    assert {c.seed for c in configs} == {0, 1} and {c.load_scale for c in configs} == {1.0, 1.5}
    assert all(c.limit == 50 and c.trace is None and c.cluster == "default" for c in configs)


def test_seeds_are_a_count_or_a_list():
    assert parse_seeds("3") == [0, 1, 2]
    assert parse_seeds(3) == [0, 1, 2]
    assert parse_seeds("0,5") == [0, 5]
    assert parse_seeds("7,") == [7]
    assert [c.seed for c in plan("fifo", "truth", seeds="3")] == [0, 1, 2]
    assert [c.seed for c in plan("fifo", "truth", seeds="4,9")] == [4, 9]
    for bad in ("0", "x", "1,a"):
        with pytest.raises(SweepSpecError):
            parse_seeds(bad)


def test_plan_defaults_traces_and_spec_splitting(monkeypatch):
    # no workload/trace: the embedded default workload
    assert [c.workload for c in plan("fifo", "truth")] == [DEFAULT_WORKLOAD]
    # errors alone are enough predictors; duplicates collapse
    assert [c.predictor for c in plan("fifo", errors="0.1,0.1")] == ["noisy:0.1"]
    # policy options with commas stay with their policy
    assert split_specs("hydra:window=10,bnb=off,allox") == ["hydra:window=10,bnb=off", "allox"]
    assert split_specs(("fifo", "sjf,edf")) == ["fifo", "sjf", "edf"]
    # trace paths are made absolute so workers elsewhere find them
    monkeypatch.chdir(FIXTURES)
    (config,) = plan("fifo", "truth", traces="hydra:hydra_case.csv")
    assert config.trace == f"hydra:{FIXTURES / 'hydra_case.csv'}" and config.workload is None
    with pytest.raises(SweepSpecError):
        plan("fifo")  # no predictor
    with pytest.raises(SweepSpecError):
        plan("fifo", "truth", load_scales="0")


def test_key_is_a_hash_of_the_sorted_config_json():
    config = RunConfig(policy="allox", predictor="truth", workload="pai-like:60")
    expected = hashlib.sha256(json.dumps(asdict(config), sort_keys=True, separators=(",", ":")).encode()).hexdigest()[:16]
    assert config_key(config) == expected
    assert config_key(RunConfig(policy="allox", predictor="truth", workload="pai-like:60", seed=1)) != expected


# ---------------------------------------------------------------------------------------------
# Local pool and Ray


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
        assert sorted(p.name for p in (tmp_path / out / "points").iterdir()) == sorted(f"{k}.parquet" for k in local["key"])
        pd.testing.assert_frame_equal(comparable(pd.read_parquet(tmp_path / out / "results.parquet")), comparable(local))


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


# ---------------------------------------------------------------------------------------------
# Resume and failures


def _cli(out: Path, *extra: str) -> list[str]:
    return [sys.executable, "-c", "from simulator.cli import main; main()", "sweep", "--policies", "fifo,sjf,allox,hydra",
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
    assert bad["status"] == "error" and "PolicySpecError" in bad["error"] and "nosuchpolicy" in bad["error"]
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


def test_bad_sweep_options_are_usage_errors(tmp_path):
    result = CliRunner().invoke(main, ["sweep", "--policies", "fifo", "--predictors", "truth", "--seeds", "x",
                                       "--out", str(tmp_path)])
    assert result.exit_code == 2 and "--seeds 'x'" in result.output


# ---------------------------------------------------------------------------------------------
# Comparison with truth


def test_normalise_to_truth_matches_runs_and_handles_zero_truth():
    base = dict(trace=None, workload="w", limit=None, cluster="c", deadline_fraction=0.2, reference_gpu=None, bind=False, observe_after=None,
                load_scale=1.0, status="ok")
    rows = [
        dict(base, policy="a", predictor="truth", seed=0, jct_mean=100.0, tardiness_total=0.0),
        dict(base, policy="a", predictor="noisy:0.1", seed=0, jct_mean=110.0, tardiness_total=0.0),
        dict(base, policy="a", predictor="ets", seed=0, jct_mean=90.0, tardiness_total=5.0),
        dict(base, policy="a", predictor="ets", seed=1, jct_mean=90.0, tardiness_total=5.0),  # no truth for seed 1
        dict(base, policy="b", predictor="truth", seed=0, jct_mean=200.0, tardiness_total=10.0),
        dict(base, policy="b", predictor="ets", seed=0, jct_mean=300.0, tardiness_total=25.0),
        dict(base, policy="b", predictor="ets", seed=0, jct_mean=1.0, tardiness_total=1.0, status="error"),
    ]
    norm = normalise_to_truth(pd.DataFrame(rows)).set_index(["policy", "predictor", "seed"])
    assert len(norm) == 6
    assert norm.loc[("a", "noisy:0.1", 0), "jct_mean_ratio"] == pytest.approx(1.1)
    assert norm.loc[("a", "noisy:0.1", 0), "tardiness_total_ratio"] == 1.0  # 0 / 0
    assert pd.isna(norm.loc[("a", "ets", 0), "tardiness_total_ratio"])      # 5 / 0
    assert pd.isna(norm.loc[("a", "ets", 1), "jct_mean_ratio"])             # no truth run
    assert norm.loc[("b", "ets", 0), "jct_mean_ratio"] == pytest.approx(1.5)
    assert norm.loc[("b", "ets", 0), "tardiness_total_ratio"] == pytest.approx(2.5)
    table = summary_table(pd.DataFrame(rows)).set_index(["policy", "predictor"])
    assert table.loc[("b", "ets"), "ok"] == 1 and table.loc[("b", "ets"), "failed"] == 1
    assert table.loc[("a", "ets"), "jct_ratio"] == pytest.approx(0.9)  # only the matched seed


def test_a_model_predictors_key_follows_its_checkpoints(monkeypatch):
    import simulator.sweep as sweep

    ets = RunConfig(policy="allox", predictor="ets", workload="pai-like:60", seed=1)
    truth = RunConfig(policy="allox", predictor="truth", workload="pai-like:60", seed=1)
    assert len(sweep.checkpoint_digest("ets")) == 12  # the shipped files
    before = config_key(ets), config_key(truth)
    monkeypatch.setattr(sweep, "checkpoint_digest", lambda method: "retrained")
    assert config_key(ets) != before[0]  # retrained weights: the point runs again
    assert config_key(truth) == before[1]

"""`simrun` on hostile input (issue 31, findings 2, 3, 5, 6): sizes refused before the work, error
lines that stay short whatever the file holds, option values that would make the simulation
non-finite, corrupt run files and caches — each one line, or a warning and a rebuild."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from simulator.cli import main
from tests.cli_checks import one_line_error

SMALL = ["--policy", "fifo", "--predictor", "truth", "--workload", "pai-like:20"]
SWEEP = ["sweep", "--policies", "fifo", "--predictors", "truth", "--workloads", "pai-like:20"]


def simrun(*args, env: dict | None = None):
    return CliRunner().invoke(main, [str(a) for a in args], env=env)


def test_a_grid_of_a_hundred_million_seeds_is_refused_before_it_is_built(tmp_path):
    started = time.perf_counter()
    one_line_error(simrun(*SWEEP, "--seeds", "100000000", "--out", tmp_path / "s"), "--seeds",
                   "100,000,000 points exceeds the limit of 100,000", "ETS_SIM_MAX_GRID_POINTS")
    assert time.perf_counter() - started < 5 and not (tmp_path / "s").exists()
    # the product counts: 2 policies x 3 seeds = 6 points over a limit of 5
    one_line_error(simrun("sweep", "--policies", "fifo,sjf", "--predictors", "truth", "--seeds", "3",
                          "--out", tmp_path / "s", env={"ETS_SIM_MAX_GRID_POINTS": "5"}),
                   "2 --policies x 1 --predictors/--errors x 1 --workloads/--traces x 3 --seeds x 1 --load-scales")


def test_a_workload_of_a_hundred_billion_jobs_limited_to_ten_runs_ten(tmp_path):
    result = simrun("--policy", "fifo", "--predictor", "truth", "--workload", "pai-like:100000000000",
                    "--limit", "10", "--out", tmp_path / "run", "--quiet")
    assert result.exit_code == 0, result.output
    assert len(pd.read_parquet(tmp_path / "run" / "jobs.parquet")) == 10
    one_line_error(simrun("--policy", "fifo", "--predictor", "truth", "--workload", "pai-like:100000000000",
                          "--out", tmp_path / "big"), "exceeds the limit of 10,000,000", "--limit K")


def test_a_yaml_alias_bomb_as_a_cluster_is_one_short_line(tmp_path):
    lines = ['a0: &a0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    lines += [f"a{i}: &a{i} [" + ",".join([f"*a{i - 1}"] * 9) + "]" for i in range(1, 10)]
    laughs = tmp_path / "laughs.yaml"
    laughs.write_text("\n".join(lines) + "\nnodes: *a9\n")  # 9^10 nodes once expanded
    started = time.perf_counter()
    one_line_error(simrun(*SMALL, "--cluster", laughs, "--out", tmp_path / "o"), f"{laughs}: YAML aliases expand")
    assert time.perf_counter() - started < 10


def test_a_load_scale_that_makes_time_infinite_is_refused(tmp_path):
    one_line_error(simrun(*SMALL, "--load-scale", "1e-308", "--out", tmp_path / "o"), "--load-scale 1e-308",
                   "for this trace use a finite value of at least")
    one_line_error(simrun(*SWEEP, "--errors", "nan", "--out", tmp_path / "s"), "--errors", "finite")


@pytest.fixture
def run_dir(tmp_path) -> Path:
    run = tmp_path / "run"
    assert simrun(*SMALL, "--out", run, "--quiet").exit_code == 0
    return run


@pytest.mark.parametrize("command", ["timeline", "plot"])
@pytest.mark.parametrize("damaged", ["jobs.parquet", "manifest.json"])
def test_a_truncated_run_file_is_one_line_naming_it(run_dir, command, damaged):
    path = run_dir / damaged
    data = path.read_bytes()
    path.write_bytes(data[:len(data) // 2])
    one_line_error(simrun(command, run_dir), str(path))


def test_a_truncated_point_file_is_redone_with_a_warning(tmp_path):
    out = tmp_path / "s"
    first = simrun(*SWEEP, "--seeds", "2", "--out", out, "--quiet")
    assert first.exit_code == 0, first.output
    points = sorted((out / "points").glob("*.parquet"))
    data = points[0].read_bytes()
    points[0].write_bytes(data[:len(data) // 3])
    again = simrun(*SWEEP, "--seeds", "2", "--out", out, "--quiet")
    assert again.exit_code == 0 and "Traceback" not in again.output, again.output
    assert "1 point file(s) unreadable or not sweep points, so their points run again" in again.output
    assert pq.read_table(points[0]).num_rows == 1  # redone
    assert len(pd.read_parquet(out / "results.parquet")) == 2


def test_an_edited_cache_table_is_rebuilt_with_a_warning_in_the_manifest(tmp_path):
    env = {"ETS_SIM_CACHE": str(tmp_path / "cache")}
    args = ["--policy", "fifo", "--predictor", "truth", "--bind", "--workload", "pai-like:5", "--quiet"]
    assert simrun(*args, "--out", tmp_path / "clean", env=env).exit_code == 0
    (table,) = (tmp_path / "cache" / "tables").glob("truth-*.parquet")
    arrow = pq.read_table(table)
    frame = arrow.to_pandas()
    frame["seconds"] *= 10  # the cached truth x10, its recorded hash kept
    pq.write_table(pa.Table.from_pandas(frame, preserve_index=False).replace_schema_metadata(arrow.schema.metadata),
                   table)
    result = simrun(*args, "--out", tmp_path / "again", env=env)
    assert result.exit_code == 0, result.output
    assert f"warning: cache table {table} does not match its hash: rebuilt" in result.output
    warnings = json.loads((tmp_path / "again" / "manifest.json").read_text())["warnings"]
    assert any("does not match its hash" in w for w in warnings), warnings
    pd.testing.assert_frame_equal(pd.read_parquet(tmp_path / "again" / "jobs.parquet"),
                                  pd.read_parquet(tmp_path / "clean" / "jobs.parquet"))  # the x10 was never used

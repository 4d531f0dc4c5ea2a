"""Helpers shared by the sweep tests: a small grid (as options and as configs), result rows
without host timings, and a point's per-job records."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from simulator.run import RunConfig
from simulator.sweep.grid import plan
from simulator.sweep.points import TIMING_COLUMNS

REPO = Path(__file__).resolve().parents[2]
GRID = dict(policies="fifo,sjf", predictors="truth", workloads="pai-like:60", limit=30, seeds="0,")


def grid_args(out: Path, *extra: str) -> list[str]:
    """``simrun sweep`` arguments of :data:`GRID` into ``out``, in this process, without a bar."""
    return ["sweep", "--policies", GRID["policies"], "--predictors", GRID["predictors"], "--workloads",
            GRID["workloads"], "--limit", str(GRID["limit"]), "--seeds", GRID["seeds"], "--workers", "1",
            "--quiet", "--out", str(out), *extra]


def grid_configs() -> list[RunConfig]:
    """The points of :data:`GRID`."""
    return plan(GRID["policies"], GRID["predictors"], workloads=GRID["workloads"], limit=GRID["limit"],
                seeds=GRID["seeds"])


def comparable(table: pd.DataFrame) -> pd.DataFrame:
    """Result rows without the host-timing columns (which differ between two runs of a config)."""
    return table.drop(columns=[c for c in TIMING_COLUMNS if c in table]).reset_index(drop=True)


def records(out: Path, key: str) -> pd.DataFrame:
    return pd.read_parquet(out / "runs" / key / "jobs.parquet")

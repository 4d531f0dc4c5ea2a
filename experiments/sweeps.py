"""A sweep an experiment's tables are built from: every point run (or resumed), none failed.

Why: an experiment's table pooled over a sweep with failed points would silently average fewer
runs; reproduce, risk and preemption all stop instead, naming the first failure.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import click
import pandas as pd


def completed_sweep(configs: Sequence, directory: Path, workers: int) -> pd.DataFrame:
    """The sweep's results (resumable in ``directory``); ClickException when any point failed."""
    from simulator.sweep.driver import run_sweep

    results = run_sweep(configs, directory, workers=workers, progress=True)
    failed = results[results["status"] != "ok"]
    if len(failed):
        raise click.ClickException(f"{len(failed)} sweep point(s) failed, e.g. {failed['error'].iloc[0]}")
    return results

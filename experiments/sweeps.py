"""A sweep an experiment's tables are built from: every point run (or resumed), none failed.

Why: an experiment's table pooled over a sweep with failed points would silently average fewer
runs; reproduce, risk and preemption all stop instead, naming the first failure.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
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


def sweep_options(jobs: int, out: str, quick: str) -> Callable:
    """The options of an experiment over a sweep: ``--quick`` (its help: ``quick``), ``--jobs``
    (default ``jobs``), ``--seeds``, ``--out`` (default ``out``) and ``--workers``."""
    options = [
        click.option("--quick", is_flag=True, help=quick),
        click.option("--jobs", type=click.IntRange(10), default=jobs, show_default=True, help="Jobs per workload."),
        click.option("--seeds", type=click.IntRange(1), default=3, show_default=True),
        click.option("--out", type=click.Path(file_okay=False, path_type=Path), default=Path(out), show_default=True),
        click.option("--workers", type=click.IntRange(1), default=2, show_default=True),
    ]

    def decorate(command: Callable) -> Callable:
        for option in reversed(options):  # the first listed ends outermost: --help keeps this order
            command = option(command)
        return command
    return decorate

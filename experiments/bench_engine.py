"""Engine speed: FIFO replays of the first 10k Philly jobs and of the full Philly trace.

Why: DESIGN §5 asks the engine to replay 100k-job traces; the targets are a full Philly replay
(111,549 jobs) in <= 60 s and wall(full) / wall(10k) <= 12 (near-linear scaling). Each case is
run ``--repeat`` times in this process; the table reports medians and the ratio to the 10k case
measured in the same run.

    python -m experiments.bench_engine [--philly PATH] [--repeat 3] [--policy fifo]
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path

import click

from experiments.shared_data import shared_dir
from policies.registry import make_policy
from simulator.cluster import resolve
from simulator.engine import Simulation
from simulator.timing import make_predictor
from traces.philly import load as load_philly


def default_philly() -> Path:
    return shared_dir() / "traces" / "philly" / "rfold_philly_trace.csv"


@click.command()
@click.option("--philly", type=click.Path(exists=True, dir_okay=False, path_type=Path), default=None,
              help="rfold_philly_trace.csv [default: $ETS_SHARED/traces/philly/...].")
@click.option("--repeat", type=int, default=3, show_default=True)
@click.option("--policy", default="fifo", show_default=True)
@click.option("--cluster", default="philly", show_default=True)
def main(philly: Path | None, repeat: int, policy: str, cluster: str) -> None:
    path = philly or default_philly()
    if not path.exists():
        raise click.ClickException(f"Philly trace not found at {path}; pass --philly or set ETS_SHARED")
    t0 = time.perf_counter()
    full = load_philly(path)
    load_s = time.perf_counter() - t0
    machines = resolve(cluster)
    cases = {"10k": full.head(10_000), "full": full}
    rows = {}
    for name, trace in cases.items():
        walls, policy_s, events = [], [], 0
        for _ in range(repeat):
            t0 = time.perf_counter()  # end to end: run-time matrices, engine, records
            res = Simulation(trace, machines, make_policy(policy), make_predictor("truth")).run()
            walls.append(time.perf_counter() - t0)
            policy_s.append(res.policy_seconds)
            events = res.events
        rows[name] = (len(trace), events, statistics.median(walls), statistics.median(policy_s))
    base = rows["10k"][2]
    click.echo(f"trace {path} loaded in {load_s:.2f} s; cluster {cluster} ({machines.total_gpus} GPUs); "
               f"policy {policy}; median of {repeat}")
    click.echo("| case | jobs | events | wall s | events/s | policy s | wall / wall(10k) |")
    click.echo("|---|---:|---:|---:|---:|---:|---:|")
    for name, (jobs, ev, wall, pol) in rows.items():
        click.echo(f"| {name} | {jobs:,} | {ev:,} | {wall:.2f} | {ev / wall:,.0f} | {pol:.2f} | {wall / base:.2f} |")
    ok_full = rows["full"][2] <= 60
    ok_ratio = rows["full"][2] / base <= 12
    click.echo(f"targets: full <= 60 s: {'met' if ok_full else 'MISSED'}; "
               f"wall(full)/wall(10k) <= 12: {'met' if ok_ratio else 'MISSED'}")


if __name__ == "__main__":
    main()

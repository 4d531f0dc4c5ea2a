"""What charging multi-GPU jobs for their communication costs a replay: full Philly, bound, blind
against timed, interleaved in one process.

Why: issue 52's target is a FIFO replay of the full Philly trace (111,549 jobs, 14,887 on
several GPUs) with communication in at most 2× the blind replay's wall time. Each repeat runs the
blind and the timed run back to back (the trace is read once; the iteration-time tables are
cached by the first, untimed, warm-up run), and the table reports the medians, their ratio, and
the timed run's own parts: the data-parallel timing of the trace (``distribute``) and the replay.

    python -m experiments.bench_communication [--philly PATH] [--repeat 3] [--policy fifo]
"""

from __future__ import annotations

import statistics
import time
from dataclasses import replace
from pathlib import Path

import click

from experiments.bench_engine import default_philly
from simulator.run import RunConfig, execute
from traces.philly import load as load_philly


@click.command()
@click.option("--philly", type=click.Path(exists=True, dir_okay=False, path_type=Path), default=None,
              help="rfold_philly_trace.csv [default: $ETS_SHARED/traces/philly/...].")
@click.option("--repeat", type=click.IntRange(1), default=3, show_default=True)
@click.option("--policy", default="fifo", show_default=True)
def main(philly: Path | None, repeat: int, policy: str) -> None:
    path = philly or default_philly()
    if not path.exists():
        raise click.ClickException(f"Philly trace not found at {path}; pass --philly or set ETS_SHARED")
    trace = load_philly(path)
    timed = RunConfig(policy=policy, predictor="truth", trace=f"philly:{path}", cluster="philly", bind=True)
    blind = replace(timed, communication=False)
    execute(timed, trace=trace)  # warm-up: builds and caches the truth tables (both phases)
    walls: dict[str, list[float]] = {"blind": [], "timed": []}
    replay: dict[str, list[float]] = {"blind": [], "timed": []}
    for _ in range(repeat):
        for name, config in (("blind", blind), ("timed", timed)):
            t0 = time.perf_counter()
            out = execute(config, trace=trace)
            walls[name].append(time.perf_counter() - t0)
            replay[name].append(out.summary["wall_seconds"])
    med = {k: statistics.median(v) for k, v in walls.items()}
    rep = {k: statistics.median(v) for k, v in replay.items()}
    click.echo(f"| {policy} on full Philly ({len(trace.jobs):,} jobs), median of {repeat} | blind | timed | ratio |")
    click.echo("|---|---:|---:|---:|")
    click.echo(f"| run (bind, time, replay, summarise) | {med['blind']:.1f} s | {med['timed']:.1f} s | "
               f"{med['timed'] / med['blind']:.2f} |")
    click.echo(f"| replay alone | {rep['blind']:.2f} s | {rep['timed']:.2f} s | {rep['timed'] / rep['blind']:.2f} |")


if __name__ == "__main__":
    main()

"""Op-sequence extraction speed: seconds per config on the meta device, median per family.

Why: the ETS paper needed up to 3 s per config to extract an op sequence; the target here is a
median of <= 1 s. Also reports how many configs per family the zoo yields. Each config is
captured once after one untimed capture of the same family (imports and first-call caches).

    python -m experiments.bench_capture [--per-family 3] [--zoo all]
"""

from __future__ import annotations

import statistics
import time
from collections import defaultdict

import click

from predictor.emulator.capture.opseq import capture
from predictor.emulator.zoo.registry import zoo_configs


@click.command()
@click.option("--per-family", type=click.IntRange(1), default=3, show_default=True,
              help="Configs timed per family (the zoo's deterministic sample order).")
@click.option("--zoo", type=click.Choice(["hpo", "randwire", "nlp", "all"]), default="all", show_default=True)
@click.option("--seed", type=int, default=0, show_default=True)
def main(per_family: int, zoo: str, seed: int) -> None:
    configs = zoo_configs(zoo, seed=seed)
    sizes: dict[str, int] = defaultdict(int)
    chosen: dict[str, list] = defaultdict(list)
    for c in configs:
        sizes[c.family] += 1
        if len(chosen[c.family]) < per_family:
            chosen[c.family].append(c)
    capture(next(iter(chosen.values()))[0], "meta")  # warm the process once
    rows, everything = [], []
    for family, group in chosen.items():
        times, ops = [], []
        for c in group:
            t0 = time.perf_counter()
            trace = capture(c, "meta")
            times.append(time.perf_counter() - t0)
            ops.append(len(trace))
        everything += times
        rows.append((family, sizes[family], len(group), statistics.median(times), max(times),
                     statistics.median(ops)))
    click.echo("| family | configs in zoo | timed | median s | max s | median ops |")
    click.echo("|---|---:|---:|---:|---:|---:|")
    for family, n, timed, med, worst, ops in rows:
        click.echo(f"| {family} | {n:,} | {timed} | {med:.2f} | {worst:.2f} | {ops:,.0f} |")
    overall = statistics.median(everything)
    click.echo(f"overall median {overall:.2f} s per config over {len(everything)} configs "
               f"(target <= 1 s: {'met' if overall <= 1 else 'MISSED'}); paper: up to 3 s")


if __name__ == "__main__":
    main()

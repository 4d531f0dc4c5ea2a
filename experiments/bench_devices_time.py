"""Speed of ``ets devices time``: seconds per step-time estimate (capture + emulate) of a ~1,000-op model.

Why: the command answers an interactive question, so the target is a median of <= 2 s per call
for a config of about 1,000 ops (mobilenet_v2, batch 32, 224 px: 995 ops). The meta capture
alone is timed in the same run as the ratio baseline, and the emulation of an already captured
trace on its own. One untimed call first warms imports and first-call caches; process start-up
(importing torch) is not counted.

    python -m experiments.bench_devices_time [--model mobilenet_v2] [--batch 32] [--size 224]
                                             [--device emulated:T4] [--repeats 5]
"""

from __future__ import annotations

import statistics
import time

import click

from predictor.emulator.capture.quiet import capture_quietly
from predictor.emulator.devices.specs import load_params
from predictor.emulator.devices.step_time import resolve_config, step_time, step_time_of_trace

TARGET_S = 2.0


def _times(fn, repeats: int) -> list[float]:
    out = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return out


@click.command()
@click.option("--model", default="mobilenet_v2", show_default=True)
@click.option("--batch", type=click.IntRange(1), default=32, show_default=True)
@click.option("--size", type=click.IntRange(1), default=224, show_default=True)
@click.option("--device", default="emulated:T4", show_default=True)
@click.option("--repeats", type=click.IntRange(1), default=5, show_default=True)
def main(model: str, batch: int, size: int, device: str, repeats: int) -> None:
    config = resolve_config(model, batch, size)
    params = load_params()
    warm = step_time(config, device, params)  # imports, first-call caches
    trace = capture_quietly(config)
    rows = {
        "step_time (capture + emulate)": _times(lambda: step_time(config, device, params), repeats),
        "capture alone (baseline)": _times(lambda: capture_quietly(config), repeats),
        "emulate alone": _times(lambda: step_time_of_trace(trace, device, params), repeats),
    }
    click.echo(f"{config.config_id} on {warm['device']}: {warm['ops']:,} ops, {warm['total_ms']:.2f} ms per step "
               f"({warm['source']}); {repeats} calls each")
    click.echo("| what | median s | min s | max s | / capture |")
    click.echo("|---|---:|---:|---:|---:|")
    base = statistics.median(rows["capture alone (baseline)"])
    for name, times in rows.items():
        med = statistics.median(times)
        click.echo(f"| {name} | {med:.3f} | {min(times):.3f} | {max(times):.3f} | {med / base:.2f} |")
    med = statistics.median(rows["step_time (capture + emulate)"])
    click.echo(f"median step_time {med:.2f} s (target <= {TARGET_S:g} s: {'met' if med <= TARGET_S else 'MISSED'})")


if __name__ == "__main__":
    main()

"""ETS speed: inference time for a ~1,000-op model and training wall time to convergence.

Why: the paper's pitch is that ETS is cheap enough to sit inside a scheduler (targets: inference
≤ 20 ms for a 1,000-op model, its prediction interval ≤ +20 % on top; training ≤ 15 min on 2 CPU
cores for the default dataset). Ratios
are against baselines measured in the same run: inference against capturing the model's op
sequence on the meta device (what any prediction of an unseen model costs first), training
against one epoch.

    python -m experiments.bench_ets [--ckpt predictor/checkpoints/ets-V100.pt]
                                    [--train-data reports/pretrain/data --device emulated:V100]
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path

import click
import pandas as pd

from predictor.checkpoints import pretrained
from predictor.common.op_trace import device_file
from predictor.dataset import split_by_family
from predictor.emulator.capture.opseq import capture
from predictor.emulator.zoo.config import ModelConfig
from predictor.methods import ets

THOUSAND_OPS = ModelConfig(kind="vision", family="mobilenet_v2", model="mobilenet_v2", batch=32, input_size=224)


def _median_seconds(fn, repeats: int) -> float:
    fn()  # warm-up
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


@click.command()
@click.option("--ckpt", type=click.Path(dir_okay=False, path_type=Path), help="[default: the shipped V100 model]")
@click.option("--repeats", type=click.IntRange(1), default=20, show_default=True)
@click.option("--train-data", type=click.Path(file_okay=False, path_type=Path),
              help="Also time training on this dataset directory (one device, family split seed 0).")
@click.option("--device", default="emulated:V100", show_default=True)
@click.option("--minutes", type=float, default=15.0, show_default=True)
def main(ckpt: Path | None, repeats: int, train_data: Path | None, device: str, minutes: float) -> None:
    model = ets.load(ckpt) if ckpt else pretrained("V100")
    sequence = capture(THOUSAND_OPS, "meta")
    infer = _median_seconds(lambda: model.iteration_times(sequence), repeats)
    capture_s = _median_seconds(lambda: capture(THOUSAND_OPS, "meta"), max(3, repeats // 5))
    click.echo("| measurement | ops | median ms | ratio to op-sequence capture |\n|---|---:|---:|---:|")
    click.echo(f"| ETS inference ({model.device}) | {len(sequence)} | {infer * 1e3:.1f} | {infer / capture_s:.3f} |")
    click.echo(f"| op-sequence capture (meta) | {len(sequence)} | {capture_s * 1e3:.1f} | 1.000 |")
    click.echo(f"inference target <= 20 ms: {'met' if infer <= 0.020 else 'MISSED'}")
    if model.intervals is None:
        click.echo("the checkpoint has no calibrated intervals (`ets calibrate`): interval cost not measured")
    else:
        def with_interval():
            summary = model.iteration_times(sequence)
            return model.intervals.bounds(summary["pred_us"], 0.9, summary["family"])

        both = _median_seconds(with_interval, repeats)
        click.echo(f"ETS inference with its 90 % interval: {both * 1e3:.1f} ms, {both / infer - 1:+.1%} against "
                   f"inference alone; target <= +20 %: {'met' if both <= 1.2 * infer else 'MISSED'}")
    if train_data is None:
        return
    data = pd.read_parquet(device_file(train_data, device))
    split = split_by_family(data, seed=0)
    trained = ets.train(split.part(data, "train"), split.part(data, "val"), ets.EtsConfig(max_minutes=minutes))
    best = min(trained.history, key=lambda h: h["val_mre"])
    first = trained.history[0]["wall_s"]
    click.echo(f"training on {len(split.train)} configs ({device}): {len(trained.history)} epochs in "
               f"{trained.history[-1]['wall_s'] / 60:.1f} min; best validation MRE {best['val_mre']:.2%} at "
               f"{best['wall_s'] / 60:.1f} min (epoch {best['epoch']}) = {best['wall_s'] / first:.1f} epoch-times; "
               f"target <= 15 min: {'met' if best['wall_s'] <= 900 else 'MISSED'}")


if __name__ == "__main__":
    main()

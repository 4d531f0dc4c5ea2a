"""``ets train | evaluate | predict``: fit a predictor on a dataset, measure it, use it.

Why a module of its own: :mod:`predictor.cli` handles datasets, :mod:`predictor.cli.devices` the
emulated GPUs; these commands handle models. All stay thin: options in, calls out (what `predict`
predicts and how it labels each number is :mod:`predictor.prediction`), user errors as one-line
messages.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import TYPE_CHECKING

import click
import pandas as pd

from predictor.common.inputs import printable
from predictor.common.op_trace import OpTraceFormatError, read_dataset
from predictor.features import TARGET_TRANSFORMS
from predictor.intervals import DEFAULT_LEVEL, check_level
from predictor.methods import METHODS, info
from predictor.methods.checks import ARCHS
from predictor.prediction import Subject, UnusablePrediction, predictions, subject_of

if TYPE_CHECKING:
    pass

def _device_rows(traces: pd.DataFrame, device: str | None, what: str, *, whose: str = "",
                 purpose: str = "") -> pd.DataFrame:
    """The rows of ``device`` (the only device when None); a one-line error that says which
    --device would work. ``whose``, ``purpose``: how the device was chosen and what --device
    does, for the message."""
    devices = sorted(traces["device"].unique())
    if device is None:
        if len(devices) != 1:
            raise click.ClickException(f"{what} holds traces of {len(devices)} devices ({', '.join(devices)}); "
                                       "pick one with --device")
        return traces
    rows = traces[traces["device"] == device]
    if rows.empty:
        fix = f"pass --device {devices[0]}" if len(devices) == 1 else "pass --device with one of them"
        raise click.ClickException(f"{what} has no traces of {whose}device {device!r}; it has: {', '.join(devices)}; "
                                   f"{fix}{purpose}")
    return rows


def _level_option(_ctx, _param, value: float) -> float:
    try:
        return check_level(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None


def _load_checkpoint(path: Path):
    from predictor.checkpoint_file import CheckpointError
    from predictor.methods import load

    try:
        return load(path)
    except CheckpointError as exc:
        raise click.ClickException(str(exc)) from None


def _check_out(out: Path, overwrite: bool) -> None:
    """Refuse an unusable checkpoint destination before training, not after it: an existing file
    without --overwrite (or one that is not a checkpoint), an unwritable folder."""
    from predictor.checkpoint_file import looks_like_checkpoint
    from predictor.common.outputs import OutputError, claim_file

    try:
        claim_file(out, overwrite, is_ours=looks_like_checkpoint)
    except OutputError as exc:
        raise click.ClickException(str(exc)) from None


OVERWRITE_HELP = "Let --out replace an existing checkpoint file."


class PositiveMinutes(click.ParamType):
    """A time limit: a finite number of minutes > 0 (0, negative and NaN would never stop, or stop at once)."""

    name = "MINUTES"

    def convert(self, value, param, ctx) -> float:
        try:
            minutes = float(value)
        except (TypeError, ValueError):
            self.fail(f"{value!r} is not a number", param, ctx)
        if not (0 < minutes < math.inf):
            self.fail(f"{value!r}: a time limit must be a finite number of minutes > 0", param, ctx)
        return minutes


MINUTES = PositiveMinutes()


def _save(model, out: Path) -> Path:
    from predictor.common.outputs import OutputError

    try:
        return model.save(out)
    except OutputError as exc:
        raise click.ClickException(str(exc)) from None


def json_text(value, **options) -> str:
    """``value`` as strict JSON (RFC 8259 has no NaN or Infinity; Python's ``json`` writes them
    and most other parsers refuse the document): each non-finite number becomes null, and an
    object gains ``"non_finite"``: {path of each such value: "nan" | "inf" | "-inf"} — e.g. an
    MRE over traces whose true time is 0 is infinite. numpy scalars become plain numbers."""
    found: dict[str, str] = {}
    clean = _finite(value, "", found)
    if found and isinstance(clean, dict):
        clean["non_finite"] = found
    return json.dumps(clean, allow_nan=False, default=float, **options)


def _finite(value, where: str, found: dict[str, str]):
    """``value`` with each non-finite float replaced by None and recorded in ``found``."""
    if isinstance(value, dict):
        return {k: _finite(v, f"{where}.{k}" if where else str(k), found) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v, f"{where}[{i}]", found) for i, v in enumerate(value)]
    if hasattr(value, "item") and getattr(value, "ndim", None) == 0:  # a numpy or torch scalar
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        found[where] = str(value)
        return None
    return value


def _print_evaluation(result, as_json: bool, extra: dict) -> None:
    from predictor.evaluate import markdown

    if as_json:
        click.echo(json_text({**extra, **result.to_dict()}, indent=1))
        return
    h = result.headline()
    click.echo(f"{h['traces']} traces: MRE {h['mre']:.2%}, RMSE {h['rmse_ms']:.2f} ms, WAPE {h['wape']:.2%}")
    intervals = result.intervals()
    if intervals["intervals"] is None:
        click.echo("prediction intervals: none (the checkpoint has no calibration; `ets calibrate`)")
    else:
        bounded = "" if not intervals["interval_unbounded"] else (
            f" ({intervals['interval_unbounded']} traces unbounded at this level: too few calibration traces "
            "of other families)")
        if intervals["interval_coverage"] is None:
            click.echo(f"{intervals['interval_level']:.0%} prediction intervals: none bounded{bounded}")
        else:
            click.echo(f"{intervals['interval_level']:.0%} prediction intervals: {intervals['interval_coverage']:.1%} "
                       f"of the traces inside, median width {intervals['interval_width']:.1%} of the prediction"
                       + bounded)
    click.echo("by op count:\n" + markdown(result.by_bucket()))
    click.echo("by phase (duration and gap WAPE):\n" + markdown(result.by_group(["phase"])))
    click.echo("largest op types:\n" + markdown(result.by_group(["op", "phase"], top=10)))


@click.command("train")
@click.option("--method", type=click.Choice(list(METHODS)), default="ets",
              show_default=True, help="ETS, or a baseline: operator-based MLP, Habitat-style, DNNPerf-style GNN.")
@click.option("--data", "data_dir", type=click.Path(file_okay=False, path_type=Path), required=True,
              help="Dataset directory (`ets collect` / `ets import`).")
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), required=True, help="Checkpoint file to write.")
@click.option("--overwrite", is_flag=True, help=OVERWRITE_HELP)
@click.option("--device", help="Device whose traces to learn [default: the only one in the data].")
@click.option("--source-device", help="habitat: the device whose measured traces it scales to --device.")
@click.option("--window", type=click.IntRange(1), help="ets: window width [12].")
@click.option("--stride", type=click.IntRange(1), help="ets: window stride [4].")
@click.option("--arch", type=click.Choice(ARCHS), help="ets: window model [lstm].")
@click.option("--layers", type=click.IntRange(1), help="Layers [method default].")
@click.option("--hidden", type=click.IntRange(1), help="Hidden size [method default; ets: the feature dimension].")
@click.option("--norm", type=click.Choice(["global", "per-op"]),
              help="Z-score the features over all training ops, or per op type [global].")
@click.option("--target-transform", type=click.Choice(TARGET_TRANSFORMS),
              help="ets/opbased/dnnperf: 'anchored' (default): log of each op's time over its roofline on the "
                   "device (peaks from the GPU catalogue or, for a CPU, the dataset's peaks.json: "
                   "ets dataset peaks DIR); 'log': z-scored log(1 + µs); 'none': raw µs as the authors (not dnnperf).")
@click.option("--epochs", type=click.IntRange(1), help="Maximum epochs [200].")
@click.option("--patience", type=click.IntRange(1), help="Stop after this many epochs without a better validation MRE.")
@click.option("--minutes", type=MINUTES, default=15.0, show_default=True,
              help="Wall-time limit for training (checked before every batch).")
@click.option("--lr", type=float, help="Learning rate [method default].")
@click.option("--batch-size", type=click.IntRange(1), help="Batch size [method default].")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--test-families", help="Comma-separated families held out for testing [default: drawn by seed].")
@click.option("--test-fraction", type=click.FloatRange(0, 0.9), default=0.25, show_default=True)
@click.option("--val-fraction", type=click.FloatRange(0.01, 0.9), default=0.15, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Print the test evaluation as one JSON object.")
def train_cmd(method: str, data_dir: Path, out: Path, overwrite: bool, device: str | None, source_device: str | None,
              window: int | None, stride: int | None, arch: str | None, layers: int | None, hidden: int | None,
              norm: str | None, target_transform: str | None, epochs: int | None, patience: int | None,
              minutes: float, lr: float | None, batch_size: int | None, seed: int, test_families: str | None,
              test_fraction: float, val_fraction: float, as_json: bool) -> None:
    """Train a predictor on a dataset with a family-disjoint split; save the checkpoint; evaluate
    on the held-out families. Habitat-style learns from every device in the data and predicts
    --device from --source-device traces."""
    from predictor import methods
    from predictor.dataset import split_by_family
    from predictor.evaluate import fit_intervals

    _check_out(out, overwrite)
    try:
        data = read_dataset(data_dir)
        scales_source = info(method).reads_source_device
        if scales_source and not source_device:
            raise ValueError(f"--method {method} needs --source-device (the device whose traces it scales)")
        if not scales_source and source_device:
            readers = [m for m, spec in METHODS.items() if spec.reads_source_device]
            raise ValueError(f"--source-device applies to --method {' or '.join(readers)} only")
        target = _device_rows(data, device, str(data_dir))
        traces = data if scales_source else target
        split = split_by_family(target, test_fraction=test_fraction, val_fraction=val_fraction, seed=seed,
                                test_families=test_families.split(",") if test_families else None)
        config = methods.make_config(
            method, width=window, stride=stride, arch=arch, layers=layers, hidden=hidden, norm=norm,
            target_transform=target_transform, lr=lr, batch_size=batch_size, max_epochs=epochs, patience=patience,
            max_minutes=minutes, seed=seed, source_device=source_device)
        model = methods.train(method, split.part(traces, "train"), split.part(traces, "val"), config,
                              device=str(target["device"].iloc[0]), split=split.to_dict(), data_dir=data_dir)
        test = split.part(traces, "test")
        result = None if test.empty else fit_intervals(
            model, test, f"{data_dir}: held-out families {', '.join(split.test_units)}")
    except (OpTraceFormatError, ValueError) as exc:
        raise click.ClickException(str(exc)) from None
    path = _save(model, out)
    best = min(model.history, key=lambda h: h["val_mre"])
    if not as_json:
        click.echo(f"checkpoint {path}: {method} for {model.device}, {len(model.history)} epochs in "
                   f"{model.history[-1]['wall_s']:.0f} s, best validation MRE {best['val_mre']:.2%} "
                   f"(epoch {best['epoch']}); test families: {', '.join(split.test_units) or '-'}; "
                   + _calibration_line(model.intervals))
    if result is None:
        click.echo("no test traces (--test-fraction 0)")
        return
    _print_evaluation(result, as_json, {"checkpoint": str(path), "method": method, "device": model.device,
                                        "split": split.to_dict()})


@click.command("finetune")
@click.option("--ckpt", type=click.Path(dir_okay=False, path_type=Path), required=True,
              help="The ETS checkpoint to continue (trained on another device, e.g. emulated:T4).")
@click.option("--data", "data_dir", type=click.Path(file_okay=False, path_type=Path), required=True,
              help="Dataset directory with traces of the device to adapt to (`ets import` / `ets collect`).")
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), required=True, help="Checkpoint file to write.")
@click.option("--overwrite", is_flag=True, help=OVERWRITE_HELP)
@click.option("--device", help="Device whose traces to learn [default: the only one in the data].")
@click.option("--minutes", type=MINUTES, default=2.0, show_default=True,
              help="Wall-time limit (checked before every batch).")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--lr", type=float, help="--tune all: learning rate [5e-4, a quarter of pretraining's].")
@click.option("--epochs", type=click.IntRange(1),
              help="--tune all: epochs, fixed below 10 traces [25], the maximum with early stopping from 10 on [60].")
@click.option("--tune", type=click.Choice(["scale", "all"]),
              help="scale: calibrate the checkpoint to the device (two factors, kernel time and overhead, "
                   "fitted to the iteration times; no weight moves); all: fine-tune every weight "
                   "[scale below 20 traces, all from 20].")
@click.option("--test-families", help="Comma-separated families held out of fine-tuning and evaluated after it.")
@click.option("--json", "as_json", is_flag=True, help="Print the result (and any test evaluation) as one JSON object.")
def finetune_cmd(ckpt: Path, data_dir: Path, out: Path, overwrite: bool, device: str | None, minutes: float, seed: int,
                 lr: float | None, epochs: int | None, tune: str | None, test_families: str | None,
                 as_json: bool) -> None:
    """Fine-tune an ETS checkpoint on a few traces of another device. Below 20 traces it is
    calibrated (two factors on its kernel-time and overhead predictions, fitted to the traces'
    iteration times); from 20 every weight is trained (below 10 traces a fixed number of epochs,
    from 10 on with 20 % held out for early stopping). The new checkpoint models the data's
    device and records its parent and the traces it saw."""
    from predictor.dataset import split_by_family
    from predictor.evaluate import evaluate
    from predictor.finetune import check_compatible, fit_small

    _check_out(out, overwrite)
    parent = _load_checkpoint(ckpt)
    try:
        data = read_dataset(data_dir)
        rows = _device_rows(data, device, str(data_dir))
        held: dict = {}
        if test_families:
            split = split_by_family(rows, test_fraction=0, val_fraction=0, test_families=test_families.split(","))
            test, rows = split.part(rows, "test"), split.part(rows, "train")
            held = {"test": len(split.test), "test_units": list(split.test_units)}
        else:
            test = rows.iloc[:0]
        check_compatible(parent, rows, str(ckpt))
        model = fit_small(rows, parent, parent_path=str(ckpt), seed=seed, minutes=minutes, lr=lr, epochs=epochs,
                          tune=tune, split=held)
    except (OpTraceFormatError, ValueError) as exc:
        raise click.ClickException(str(exc)) from None
    path = _save(model, out)
    summary = {"checkpoint": str(path), "parent": str(ckpt), "parent_device": parent.device, "device": model.device,
               "traces": model.split["train"] + model.split["val"], "validation": model.split["validation"],
               "tune": model.split["tune"],
               "epochs": len(model.history), "wall_s": model.history[-1]["wall_s"] if model.history else 0.0,
               "scale": list(model.scale)}
    if not as_json:
        click.echo(printable(  # the parent's device is its checkpoint's
            f"checkpoint {path}: ETS for {model.device}, fine-tuned from {ckpt} ({parent.device}) on "
            f"{summary['traces']} traces ({summary['validation']}; {summary['tune']}), "
            f"{summary['epochs']} epochs in {summary['wall_s']:.0f} s; kernel-time and overhead factors "
            f"{model.scale[0]:.3f}, {model.scale[1]:.3f}"))
    if test.empty:
        if as_json:
            click.echo(json_text(summary, indent=1))
        return
    try:
        result = evaluate(model, test)
    except ValueError as exc:
        raise click.ClickException(str(exc)) from None
    _print_evaluation(result, as_json, summary)


@click.command("evaluate")
@click.option("--ckpt", type=click.Path(dir_okay=False, path_type=Path), required=True)
@click.option("--data", "data_dir", type=click.Path(file_okay=False, path_type=Path), required=True)
@click.option("--split", "which", type=click.Choice(["test", "all"]), default="test", show_default=True,
              help="test: only the families the checkpoint held out (when it records a split).")
@click.option("--device", "data_device",
              help="Score the checkpoint on this device's rows [default: the checkpoint's own device], "
                   "e.g. an emulated-T4 model on real T4 traces.")
@click.option("--level", type=float, default=DEFAULT_LEVEL, show_default=True, callback=_level_option,
              help="Prediction-interval level whose coverage and width are reported.")
@click.option("--json", "as_json", is_flag=True,
              help="Print one JSON object (traces, mre, rmse_ms, wape, interval_coverage, interval_width, ...); "
                   "strict JSON: a non-finite number (the MRE of a trace timed 0 µs) is null, its path and value "
                   "listed under non_finite.")
def evaluate_cmd(ckpt: Path, data_dir: Path, which: str, data_device: str | None, level: float,
                 as_json: bool) -> None:
    """Evaluate a checkpoint on a dataset: MRE, RMSE, WAPE, where the error comes from, and how
    often its prediction intervals hold the truth (for a checkpoint with calibrated intervals)."""
    from predictor.dataset import rows_of_units
    from predictor.evaluate import evaluate

    model = _load_checkpoint(ckpt)
    traces, data_device = _scored_rows(model, data_dir, data_device)
    held_out = set((model.split or {}).get("test_units", []))
    if which == "test" and held_out:
        traces = rows_of_units(traces, held_out)
        if traces.empty:
            raise click.ClickException(f"{data_dir} has no traces of the held-out families "
                                       f"({', '.join(sorted(held_out))}); use --split all")
    try:
        result = evaluate(model, traces, level)
    except ValueError as exc:
        raise click.ClickException(str(exc)) from None
    _print_evaluation(result, as_json, {"checkpoint": str(ckpt), "method": model.method, "device": model.device,
                                        "data_device": data_device})


def _scored_rows(model, data_dir: Path, data_device: str | None) -> tuple[pd.DataFrame, str]:
    """The dataset's rows of ``data_device`` (default: the model's own) relabelled as the model's
    device, plus a Habitat-style model's source rows; and the device scored."""
    whose = "" if data_device else "the checkpoint's "
    data_device = data_device or model.device
    try:
        data = read_dataset(data_dir)
        traces = _device_rows(data, data_device, str(data_dir), whose=whose,
                              purpose=f" to score this {model.device} checkpoint on those rows")
    except OpTraceFormatError as exc:
        raise click.ClickException(str(exc)) from None
    if info(model.method).reads_source_device:  # it reads its source device's traces too
        traces = pd.concat([traces, data[data["config_id"].isin(set(traces["config_id"]))
                                         & ~data["device"].isin({data_device, model.device})]], ignore_index=True)
    # The truth is the named device's rows; the model predicts them as its own device.
    return traces.assign(device=traces["device"].where(traces["device"] != data_device, model.device)), data_device


@click.command("calibrate")
@click.option("--ckpt", type=click.Path(dir_okay=False, path_type=Path), required=True)
@click.option("--data", "data_dir", type=click.Path(file_okay=False, path_type=Path), required=True,
              help="Dataset holding the checkpoint's held-out families (the data it was trained from).")
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path),
              help="Checkpoint file to write [default: --ckpt itself, with --overwrite; its weights are not touched].")
@click.option("--overwrite", is_flag=True, help="Let --out (or --ckpt, without --out) be replaced.")
@click.option("--device", "data_device", help="Calibrate on this device's rows [default: the checkpoint's own].")
@click.option("--families", help="Comma-separated families (split units) the checkpoint never trained on "
                                 "[default: its recorded held-out families].")
@click.option("--json", "as_json", is_flag=True)
def calibrate_cmd(ckpt: Path, data_dir: Path, out: Path | None, overwrite: bool, data_device: str | None,
                  families: str | None, as_json: bool) -> None:
    """Calibrate a checkpoint's prediction intervals (split-conformal, leave-family-out, Mondrian
    by family group: CNN, decoder LM, ...; `ets train` does this itself) on families it never trained on: by default its
    recorded held-out families. Stores them in the checkpoint; nothing else changes."""
    from predictor.dataset import rows_of_units
    from predictor.evaluate import fit_intervals

    model = _load_checkpoint(ckpt)
    recorded = (model.split or {}).get("test_units")
    units = families.split(",") if families else recorded
    if families and recorded and set(units) - set(recorded):
        raise click.ClickException(f"{ckpt} did not hold out {', '.join(sorted(set(units) - set(recorded)))}: "
                                   "intervals calibrated on families it trained on would be too narrow; omit "
                                   "--families to use its held-out families")
    if not units:
        raise click.ClickException(f"{ckpt} records no held-out families "
                                   f"(split: {sorted(model.split or {}) or 'none'}); "
                                   "pass --families with families it never trained on")
    _check_out(out or ckpt, overwrite)
    traces, data_device = _scored_rows(model, data_dir, data_device)
    held = rows_of_units(traces, units)
    if held.empty:
        raise click.ClickException(f"{data_dir} has no {data_device} traces of the calibration families "
                                   f"({', '.join(sorted(units)[:8])}{', ...' if len(units) > 8 else ''})")
    try:
        fit_intervals(model, held, f"{data_dir} ({data_device}): held-out families")
    except ValueError as exc:
        raise click.ClickException(str(exc)) from None
    path = _save(model, out or ckpt)
    if as_json:
        click.echo(json_text({"checkpoint": str(path), "method": model.method, "device": model.device,
                              **model.intervals.describe()}, indent=1))
    else:
        click.echo(f"checkpoint {path}: " + _calibration_line(model.intervals))


def _calibration_line(calibration) -> str:
    if calibration is None:
        return "no calibrated prediction intervals"
    lo, hi = calibration.factor(0.05), calibration.factor(0.95)
    groups = calibration.describe()["groups"]
    by_group = (f"; calibrated within each family group of {', '.join(f'{g} ({n})' for g, n in groups.items())}, "
                f"pooled for a group with fewer than 3 families" if groups else "")
    return (f"prediction intervals calibrated on {calibration.traces} traces of {len(calibration.families)} "
            f"held-out families (90 % for a new family of no known group: [{lo:.3f}, {hi:.3f}] × the prediction"
            f"{by_group})")


@click.command("predict")
@click.option("--ckpt", type=click.Path(dir_okay=False, path_type=Path), required=True)
@click.argument("target", required=False)
@click.option("--model-file", "model_files", multiple=True, metavar="FILE|DIR",
              help="Instead of TARGET: a Python file defining Model, get_inputs() and optionally get_init_inputs() "
                   "(KernelBench's convention), captured on the meta device; repeatable; a directory means every "
                   "*.py in it, sorted. Runs the file's code, as `python FILE` would.")
@click.option("--inference", is_flag=True, help="--model-file: capture the forward alone under torch.no_grad().")
@click.option("--dtype", type=click.Choice(["float32", "float16", "bfloat16", "amp"]),
              help="--model-file: cast the model and its floating inputs [default: float32].")
@click.option("--batch", type=click.IntRange(1), default=32, show_default=True, help="For a model name.")
@click.option("--size", type=click.IntRange(1), default=224, show_default=True,
              help="Image size or sequence length, for a model name.")
@click.option("--level", type=float, default=DEFAULT_LEVEL, show_default=True, callback=_level_option,
              help="Level of the prediction interval (low_ms, high_ms), for a checkpoint with calibrated intervals.")
@click.option("--gpus", type=int, default=1, show_default=True,
              help="Data-parallel (DDP) step on N GPUs of the checkpoint's device at this per-GPU batch: adds "
                   "compute (the prediction), all-reduce, exposed communication, total and scaling efficiency "
                   "(communication spec-derived; docs/gpus.md).")
@click.option("--per-node", type=int, help="GPUs per node (K, dividing N) [default: all N on one node up to a "
              "server's 8 GPUs; 8 per node beyond].")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object (one line per model file).")
@click.pass_context
def predict_cmd(ctx: click.Context, ckpt: Path, target: str | None, model_files: tuple[str, ...], inference: bool,
                dtype: str | None, batch: int, size: int, level: float, gpus: int, per_node: int | None,
                as_json: bool) -> None:
    """Predict the iteration time of TARGET: a zoo config id (resnet50:b32:s224:float32:sgd:c1000),
    a model name (resnet50, with --batch/--size), or a trace file (.parquet, ETS .csv, Kineto
    .json[.gz], nsys .sqlite). A model name or config id is captured on the meta device (op
    order and shapes, nothing is timed); a Habitat-style checkpoint whose source GPU is emulated
    gets the capture timed on that emulated GPU, as the simulator does. Every number printed
    says what it is: the checkpoint's prediction, or a timing the trace file (or emulator) holds.
    Or, instead of TARGET, --model-file FILE|DIR: each file's model; a file that fails is named in
    one line on stderr, the others are still predicted, and the exit status is 1. --gpus N > 1
    adds the data-parallel step on N GPUs of the checkpoint's device, K per node (--per-node), as
    `ets devices time --gpus` prints it: the prediction as per-GPU compute (its backward phase
    overlapping the all-reduces), the all-reduces of the config's own gradients, spec-derived."""
    from predictor.cli.devices import check_model_or_files, check_placement
    from predictor.memory import estimate, too_big_warning

    check_model_or_files(target, model_files, "TARGET", inference)
    per_node = check_placement(gpus, per_node)
    if model_files and gpus > 1:
        raise click.UsageError("--gpus applies to TARGET; --model-file is predicted on one GPU")
    if model_files:
        explicit = [f"--{n}" for n in ("batch", "size")
                    if ctx.get_parameter_source(n) is not click.core.ParameterSource.DEFAULT]
        if explicit:
            raise click.UsageError(f"{' and '.join(explicit)} apply to a model name; a model file sets its sizes in "
                                   "get_inputs()")
        _predict_model_files(ckpt, model_files, inference, dtype or "float32", level, as_json)
        return
    if dtype:
        raise click.UsageError("--dtype applies to --model-file (a config id names its dtype)")
    try:  # the target first: a hostile trace file is refused before the model's memory is spent
        subject = subject_of(target, batch, size)
    except (OpTraceFormatError, ValueError) as exc:
        raise click.ClickException(str(exc)) from None
    model = _load_checkpoint(ckpt)
    if subject.config is not None:
        warning = too_big_warning(estimate(subject.config, subject.traces))
        if warning:
            click.echo(warning, err=True)
    try:
        rows = predictions(model, ckpt, subject, level)
    except (OpTraceFormatError, ValueError) as exc:  # e.g. a Habitat-style model given no trace of its source
        raise click.ClickException(str(exc)) from None
    if gpus > 1:
        rows = _with_data_parallel(rows, subject, model, gpus, per_node)
    if as_json:
        intervals = model.intervals.describe() if model.intervals is not None else None
        click.echo(json_text({"device": model.device, "method": model.method, "checkpoint": str(ckpt),
                              "ops_from": subject.origin, "intervals": intervals, "predictions": rows}, indent=1))
        return
    for r in rows:
        click.echo(printable(_prediction_line(r)))
        if gpus > 1:
            _print_data_parallel(r, model.method)


def _with_data_parallel(rows: list[dict], subject: Subject, model, gpus: int, per_node: int) -> list[dict]:
    """Each prediction record with its data-parallel step's fields (as `ets devices time --gpus`
    gives them; ``compute_ms`` = the prediction) and ``overlap``."""
    from predictor.cli.data_parallel import data_parallel_fields
    from predictor.emulator.devices.collectives import CollectiveError
    from predictor.emulator.devices.specs import DeviceParamsError
    from predictor.prediction import data_parallel_steps

    try:
        steps = data_parallel_steps(rows, subject, model.device, gpus, per_node)
    except (CollectiveError, DeviceParamsError) as exc:
        raise click.ClickException(f"--gpus {gpus}: {exc}") from None
    return [r | data_parallel_fields(step, r["iteration_ms"]) | {"overlap": step["overlap"]}
            for r, step in zip(rows, steps)]


def _print_data_parallel(r: dict, method: str) -> None:
    from predictor.cli.data_parallel import print_data_parallel

    print_data_parallel(r, "the prediction above")
    if r["overlap"] == "none":
        click.echo(f"    ({method} predicts no backward phase for the all-reduces to overlap: all of them are "
                   "counted as exposed, an upper bound)")


def _predict_model_files(ckpt: Path, model_files: tuple[str, ...], inference: bool, dtype: str, level: float,
                         as_json: bool) -> None:
    """`ets predict --model-file`: one prediction per file (one JSON line with ``model_file``)."""
    from predictor.cli.devices import ModelFileRun
    from predictor.emulator.devices.kernels import KernelModelError

    model = _load_checkpoint(ckpt)  # before any user code runs: a bad checkpoint fails once, at once
    intervals = model.intervals.describe() if model.intervals is not None else None
    run = ModelFileRun(model_files, inference=inference, dtype=dtype)
    for path, trace in run:
        subject = Subject(trace, f"a meta-device capture of {path} (op order and shapes; nothing timed)",
                           captured=True)
        try:
            rows = predictions(model, ckpt, subject, level)
        except (KernelModelError, UnusablePrediction) as exc:  # the installation or the checkpoint, not the file
            raise click.ClickException(str(exc)) from None
        except (OpTraceFormatError, ValueError) as exc:  # e.g. a Habitat-style model without an emulated source
            run.fail(f"{path}: {exc}")
            continue
        if as_json:
            click.echo(json_text({"model_file": path, "device": model.device, "method": model.method,
                                  "checkpoint": str(ckpt), "ops_from": subject.origin, "intervals": intervals,
                                  "predictions": rows}))
        else:
            for r in rows:
                click.echo(printable(_prediction_line(r)))
    run.finish()


def _prediction_line(r: dict) -> str:
    breakdown = "" if pd.isna(r.get("pred_duration_us")) else (
        f" (kernels {r['pred_duration_us'] / 1e3:.2f} ms + overhead {r['pred_gap_us'] / 1e3:.2f} ms; "
        f"forward {r['pred_forward_us'] / 1e3:.2f}, backward {r['pred_backward_us'] / 1e3:.2f}, "
        f"update {r['pred_update_us'] / 1e3:.2f} ms)")
    timings = "".join(f"; {t['what']}: {t['ms']:.2f} ms" for t in r["timings"])
    interval = ("" if r["low_ms"] is None and r["high_ms"] is None else
                f" [{r['level']:.0%} interval {_ms(r['low_ms'])}–{_ms(r['high_ms'])} ms]")
    return (f"{r['config_id']}: {r['prediction']}: {r['pred_us'] / 1e3:.2f} ms per iteration{interval}{breakdown}; "
            f"{r['ops']} ops from {r['ops_from']}{timings}")


def _ms(value: float | None) -> str:
    return "unbounded" if value is None else f"{value:.2f}"

"""``ets devices``: emulated GPUs — list, time one training step, calibrate, validate.

Why a module of its own: the ``devices`` group is the user's door to the emulated GPUs, whose
logic lives in :mod:`predictor.devices`; this layer turns options into calls and user errors into
one-line messages.
"""

from __future__ import annotations

import json
from datetime import date
from pathlib import Path

import click

@click.group()
def devices() -> None:
    """Emulated GPUs: list them, time a training step on one, calibrate and validate them on real
    measurements."""


@devices.command("list")
def devices_list() -> None:
    """Every emulated device: its silicon (SMs, clock, L2, memory), spec-sheet rates, where its
    kernel times come from (measured-kernels: real kernels of that GPU trained the kernel model;
    spec-derived: from its spec sheet only) and its fitted parameters."""
    from predictor.devices.kernels import kernel_source
    from predictor.devices.specs import FITTED_FIELDS, load_params

    params = load_params()
    model = _kernel_model()
    trained = f"kernel model trained on {', '.join(model.devices)}" if model is not None else "no kernel model"
    click.echo(f"parameters {params.version} ({params.source}); {trained}")
    width = max(len(s.emulated_name) for s in params.devices.values()) + 1
    for key, spec in params.devices.items():
        fitted = ", ".join(f"{f} {getattr(spec, f):.3g}" for f in FITTED_FIELDS)
        tf32 = f"{spec.tf32_tflops:g}" if spec.tf32_tflops else "-"
        click.echo(f"{spec.emulated_name + ':':<{width}} {spec.sms:>3} SMs {spec.clock_mhz:>5.0f} MHz  "
                   f"L2 {spec.l2_mb:>4g} MB  {spec.mem_gb:>3g} GB {spec.mem_gbs:>5g} GB/s  "
                   f"FP32 {spec.fp32_tflops:>5g} / TF32 {tf32:>5} / FP16 {spec.fp16_tflops:>5g} TFLOP/s  "
                   f"kernels: {kernel_source(key, model)}")
        click.echo(f"{'':<{width}} fitted on {spec.fitted}: {fitted}; spec: {spec.spec}")


def _kernel_model():
    from predictor.devices.kernels import KernelModelError, load

    try:
        return load()
    except KernelModelError as exc:
        raise click.ClickException(str(exc)) from None


@devices.command("time")
@click.argument("model")
@click.option("--device", required=True, help="emulated:<GPU> (`ets devices list`), e.g. emulated:T4.")
@click.option("--batch", type=click.IntRange(1), help="Batch size [default: 32; 8 for LLMs].")
@click.option("--size", "--seq", "size", type=click.IntRange(1),
              help="Image size (px), or sequence length (--seq) for sequence models [default: 224 px; "
                   "128 tokens; 400 speech frames; 512 for LLMs].")
@click.option("--dtype", type=click.Choice(["float32", "float16", "bfloat16"]), help="[default: float32]")
@click.option("--optimizer", type=click.Choice(["sgd", "adam"]), help="[default: sgd; adam for LLMs]")
@click.option("--regime", type=click.Choice(["plain", "nsys"]), default="plain", show_default=True,
              help="Host times of a plain run, or under Nsight Systems with per-op NVTX ranges.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def devices_time(model: str, device: str, batch: int | None, size: int | None, dtype: str | None,
                 optimizer: str | None, regime: str, as_json: bool) -> None:
    """How long one training step of MODEL takes on an emulated GPU: the config's op sequence
    (meta device) timed by the emulator without noise, split into forward, backward and update.
    MODEL: a zoo model name (resnet50, mobilenet_v2, transformer_encoder[_tiny|_base...], lstm_lm,
    gpt2_medium, ...) or a zoo config id."""
    from predictor.devices.kernels import KernelModelError
    from predictor.devices.specs import DeviceParamsError, load_params
    from predictor.devices.step_time import UnknownModelError, resolve_config, step_time
    from predictor.zoo.config import ModelBuildError

    try:
        params = load_params()
        params.device(device)
    except DeviceParamsError as exc:
        if device.endswith(".json"):  # the spec file is at fault, not the option: one line naming it
            raise click.ClickException(f"--device: {exc}") from None
        raise click.BadParameter(str(exc), param_hint="--device") from None
    try:
        config = resolve_config(model, batch, size, dtype, optimizer)
    except (UnknownModelError, ModelBuildError) as exc:
        raise click.UsageError(str(exc)) from None
    try:
        result = step_time(config, device, params, regime)
    except ModelBuildError as exc:
        raise click.UsageError(str(exc)) from None
    except KernelModelError as exc:  # a broken kernel-model file: one line, not a traceback
        raise click.ClickException(str(exc)) from None
    if as_json:
        click.echo(json.dumps(result))
        return
    r = result
    click.echo(f"{r['config_id']} on {r['device']} (emulated GPU; kernel times {r['source']}, "
               f"{r['regime']} regime, params {r['params_version']})")
    click.echo(f"  forward   {r['forward_ms']:>10.3f} ms")
    click.echo(f"  backward  {r['backward_ms']:>10.3f} ms")
    click.echo(f"  update    {r['update_ms']:>10.3f} ms")
    click.echo(f"  total     {r['total_ms']:>10.3f} ms   kernels {r['kernel_ms']:.3f} ms, "
               f"overhead {r['overhead_share']:.1%}, {r['ops']:,} ops")



_DATA_OPTIONS = (
    click.option("--calibration", "calibration_dir", type=click.Path(file_okay=False, path_type=Path),
                 help="Real measurements (Gavel, Sia, SPREAD, NeuSight) [default: $ETS_CALIBRATION, else "
                      "$ETS_SHARED/calibration, else ../shared/calibration]."),
    click.option("--ets", "ets_dir", type=click.Path(file_okay=False, path_type=Path),
                 help="Real ETS traces with T4/ and 2080Ti/ [default: beside the calibration folder]."),
    click.option("--cache", type=click.Path(dir_okay=False, path_type=Path),
                 default=Path("reports/calibration/op_sequences.parquet"), show_default=True,
                 help="Op sequences of the measured configs (captured once, reused)."),
)


def _data_options(f):
    for option in reversed(_DATA_OPTIONS):
        f = option(f)
    return f


def _inputs(calibration_dir: Path | None, ets_dir: Path | None):
    """Targets, skipped files, host table and real kernels; user errors as one line."""
    from predictor.trace_table import TraceFormatError
    from predictor.devices import calibrate as cal
    from predictor.devices import kernel_data
    from predictor.devices.measurements import MeasurementError, default_calibration_dir

    calibration_dir = calibration_dir or default_calibration_dir()
    ets_dir = ets_dir or calibration_dir.parent / "ets_traces"
    try:
        targets, skipped, host = cal.load_targets(calibration_dir, ets_dir)
        kernels = kernel_data.load_all(calibration_dir, ets_dir)
    except (MeasurementError, TraceFormatError, kernel_data.KernelDataError, FileNotFoundError) as exc:
        raise click.ClickException(str(exc)) from None
    return calibration_dir, ets_dir, targets, skipped, host, kernels


def _op_sequences(targets, cache: Path):
    """The targets' op sequences (:func:`predictor.devices.calibrate.op_sequences`); a broken
    --cache file is one line naming it, not a traceback."""
    from predictor.devices import calibrate as cal
    from predictor.trace_table import TraceFormatError

    try:
        return cal.op_sequences([t.config for t in targets], cache)
    except TraceFormatError as exc:
        raise click.ClickException(f"--cache {exc} (delete it to capture the op sequences again)") from None


def _claim_outputs(overwrite: bool, *outputs: tuple[str, Path]) -> None:
    """Every file the command will write, checked before the minutes of fitting: an existing one
    only with --overwrite."""
    from predictor.outputs import OutputError, claim_file

    try:
        for option, path in outputs:
            claim_file(path, overwrite, option=option)
    except OutputError as exc:
        raise click.ClickException(str(exc)) from None


@devices.command("calibrate")
@_data_options
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Parameter file to write [default: the package's predictor/devices/params.json].")
@click.option("--kernel-model", "kernel_out", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Kernel-model file to write [default: the package's predictor/devices/kernel_model.json].")
@click.option("--report", "report_dir", type=click.Path(file_okay=False, path_type=Path),
              default=Path("reports/calibration"), show_default=True, help="Where report.md / report.json go.")
@click.option("--overwrite", is_flag=True,
              help="Let the parameter file, the kernel model and the report replace existing ones (the "
                   "defaults are the package's own files: refitting them needs --overwrite).")
def devices_calibrate(calibration_dir: Path | None, ets_dir: Path | None, cache: Path, out: Path | None,
                      kernel_out: Path | None, report_dir: Path, overwrite: bool) -> None:
    """Fit the kernel model on every real kernel (NeuSight, ETS), then every emulated GPU's host
    side to the measured iterations; write both files and the in-sample report (out-of-sample
    figures: `ets devices validate`)."""
    from predictor.devices import calibrate as cal
    from predictor.devices import kernels as kernel_model
    from predictor.devices.specs import PARAMS_FILE, SPEC_SHEETS, save_params

    calibration_dir, ets_dir, targets, skipped, host, kernels = _inputs(calibration_dir, ets_dir)
    _claim_outputs(overwrite, ("--out", out or PARAMS_FILE), ("--kernel-model", kernel_out or kernel_model.MODEL_FILE),
                   ("--report", report_dir / "report.md"), ("--report", report_dir / "report.json"))
    click.echo(f"kernel model: fitting on {int((~kernels['censored']).sum()):,} real kernels ...")
    model = kernel_model.fit(kernels, SPEC_SHEETS)
    kernel_path = model.save(kernel_out or kernel_model.MODEL_FILE)
    sequences = _op_sequences(targets, cache)
    version = "v2-" + date.today().isoformat()
    params, report = cal.calibrate(targets, sequences, host, lomo=False, version=version, model=model)
    report["skipped"] = skipped
    report["inputs"] = {"calibration": str(calibration_dir), "ets": str(ets_dir)}
    path = save_params(params, out or PARAMS_FILE, report)
    report_dir.mkdir(parents=True, exist_ok=True)
    table = cal.report_markdown(report)
    (report_dir / "report.md").write_text(table + "\n")
    (report_dir / "report.json").write_text(json.dumps(report, indent=1) + "\n")
    click.echo(table)
    click.echo(f"kernel model -> {kernel_path}; parameters {version} -> {path}; report in {report_dir}")


@devices.command("validate")
@_data_options
@click.option("--report", "report_dir", type=click.Path(file_okay=False, path_type=Path),
              default=Path("reports/validate"), show_default=True,
              help="Where report.md, iterations.csv, kernels.csv and the plots go.")
@click.option("--overwrite", is_flag=True, help="Let the report replace an earlier one in --report.")
def devices_validate(calibration_dir: Path | None, ets_dir: Path | None, cache: Path, report_dir: Path,
                     overwrite: bool) -> None:
    """The emulated GPUs against every real measurement, out of sample: kernels leave-one-GPU-out,
    iterations leave-one-model-out (the calibration refitted without each model)."""
    from predictor.devices import calibrate as cal
    from predictor.devices import kernels as kernel_model
    from predictor.devices import neusight_ops, validate
    from predictor.devices.measurements import NEUSIGHT_DIR, MeasurementError
    from predictor.devices.specs import SPEC_SHEETS

    calibration_dir, ets_dir, targets, skipped, host, kernels = _inputs(calibration_dir, ets_dir)
    _claim_outputs(overwrite, ("--report", report_dir / "report.md"))
    click.echo("kernels, leave-one-GPU-out ...")
    kernel_rows = kernel_model.leave_one_gpu_out(kernels, SPEC_SHEETS)
    model = kernel_model.fit(kernels, SPEC_SHEETS)
    sequences = _op_sequences(targets, cache)
    click.echo("iterations, leave-one-model-out ...")
    _, report = cal.calibrate(targets, sequences, host, lomo=True, model=model)
    rows = validate.iteration_rows(report["lomo_errors"])
    try:
        labelled = neusight_ops.class_times(neusight_ops.load_neusight_ops(calibration_dir / NEUSIGHT_DIR))
    except MeasurementError as exc:
        raise click.ClickException(str(exc)) from None
    op_classes = validate.class_rows(labelled, report["lomo_classes"])
    notes = [f"{len(rows)} iteration targets on {rows['device'].nunique() if len(rows) else 0} GPUs; "
             f"skipped: {', '.join(skipped) or 'none'}.",
             f"kernels: {len(kernel_rows):,} uncensored rows; {int(kernels['censored'].sum()):,} NeuSight rows on the "
             f"call floor and {kernels.attrs.get('implausible', 0)} implausible ETS rows excluded.",
             f"nsys host factor (ETS traces vs plain runs, fitted): {report['nsys_host_factor']:.2f}.",
             "per op class: NeuSight's per-op labels (fx nodes, CUDA-event timed one at a time) against the kernel "
             "time of the same op class in our trace, priced by the calibration refitted without the model and "
             "the kernel model (whose microbenchmark kernels do not include these runs); kernel-free nodes "
             "(shapes, views) and our loss are left out."]
    sets = validate.write_report(report_dir, rows, kernel_rows, notes, op_classes)
    click.echo((report_dir / "report.md").read_text())
    click.echo(f"report in {report_dir}")
    if len(sets):
        click.echo(f"{int(sets['target'].sum())} of {len(sets)} sets within the 12 % target")

"""``ets``: execution-trace datasets for the ETS predictor (collect, import, inspect) and emulated GPUs.

Why a thin layer: the logic lives in :mod:`predictor.capture` and :mod:`predictor.trace_table`;
this module turns options into calls and user errors into one-line messages.
"""

from __future__ import annotations

import json
from datetime import date
from pathlib import Path

import click

from predictor.capture.importers import IMPORTERS, import_traces
from predictor.trace_table import TraceFormatError, dataset_info, read_dataset, write_traces


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
def main() -> None:
    """Execution traces (one row per operator: kernel time and the framework overhead after it)."""


@main.command("import", help="Import traces of another tool into a dataset directory. KIND: "
              + "; ".join(f"{k}: {v[1]}" for k, v in IMPORTERS.items()) + ".")
@click.argument("kind", type=click.Choice(list(IMPORTERS)))
@click.argument("path", type=click.Path(path_type=Path))
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), required=True,
              help="Dataset directory (one Parquet file per device; configs already there are replaced).")
@click.option("--device", help="Device name to record [default: from the files].")
def import_(kind: str, path: Path, out: Path, device: str | None) -> None:
    try:
        traces = import_traces(kind, path, device)
    except TraceFormatError as exc:
        raise click.ClickException(str(exc)) from None
    files = write_traces(out, traces)
    n = traces.groupby(["device", "config_id"]).ngroups
    click.echo(f"imported {n} iteration(s), {len(traces):,} ops into {', '.join(map(str, files))}")


@main.command("collect")
@click.option("--zoo", "zoo", type=click.Choice(["hpo", "randwire", "nlp", "all"]), default="hpo", show_default=True,
              help="hpo: the 18 torchvision families on the ETS batch x image-size grid; randwire: random-graph "
                   "networks; nlp: transformer and LSTM models; all: everything.")
@click.option("--device", default="meta", show_default=True,
              help="meta: the op sequence (no compute); cpu: real profiling on this machine; cuda: real "
                   "profiling on this machine's GPU, kernels grouped per op (recorded as cuda:<GPU name>); "
                   "emulated:<GPU>: the op sequence timed by a calibrated emulated GPU (`ets devices list`).")
@click.option("--limit", type=click.IntRange(1), help="At most N configs (sampled deterministically, every family kept).")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--max-batch", type=click.IntRange(1), help="Only configs with batch <= N (CPU profiling of small configs).")
@click.option("--max-size", type=click.IntRange(1), help="Only configs with input size (image side, sequence length) <= N.")
@click.option("--workers", type=click.IntRange(1), default=None,
              help="Worker processes [default: 2 for meta, 1 for cpu, whose timings contention would distort].")
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), required=True,
              help="Dataset directory; configs already there are skipped (resumable).")
def collect_cmd(zoo: str, device: str, limit: int | None, seed: int, max_batch: int | None,
                max_size: int | None, workers: int | None, out: Path) -> None:
    """Capture execution traces of zoo configs into a dataset directory (one Parquet per device)."""
    from predictor.collect import collect
    from predictor.devices.specs import DeviceParamsError, device_key
    from predictor.zoo.registry import zoo_configs

    if device not in ("meta", "cpu", "cuda"):
        if not device.startswith("emulated:"):
            raise click.BadParameter(f"{device!r}: use meta, cpu, cuda or emulated:<GPU>", param_hint="--device")
        try:
            device_key(device)
        except DeviceParamsError as exc:
            raise click.BadParameter(str(exc), param_hint="--device") from None

    configs = [c for c in zoo_configs(zoo, seed=seed)  # round-robin over families: prefixes stay stratified
               if (max_batch is None or c.batch <= max_batch) and (max_size is None or c.input_size <= max_size)]
    configs = configs[:limit] if limit else configs
    counts = collect(configs, device, out, workers=workers or (2 if device == "meta" else 1))
    click.echo(f"{counts['captured']} captured, {counts['skipped']} already there, {counts['failed']} failed"
               + (f" (see {out / 'failures.jsonl'})" if counts["failed"] else "") + f"; dataset in {out}")


@main.group()
def dataset() -> None:
    """Inspect execution-trace datasets."""


@dataset.command("info")
@click.argument("directory", type=click.Path(file_okay=False, path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def info(directory: Path, as_json: bool) -> None:
    """Counts per device and family, op-count histogram, overhead-share distribution."""
    try:
        summary = dataset_info(read_dataset(directory))
    except TraceFormatError as exc:
        raise click.ClickException(str(exc)) from None
    if as_json:
        click.echo(json.dumps(summary, indent=2))
        return
    click.echo(f"{summary['iterations']:,} iterations, {summary['rows']:,} ops; "
               f"median iteration {summary['iteration_ms_median']:.2f} ms")
    click.echo("per device: " + ", ".join(f"{k} {v}" for k, v in summary["per_device"].items()))
    click.echo("per family: " + ", ".join(f"{k} {v}" for k, v in summary["per_family"].items()))
    click.echo(f"ops per iteration: {summary['ops_min']}–{summary['ops_max']}; histogram "
               + ", ".join(f"{k}: {v}" for k, v in summary["op_count_histogram"].items()))
    share = summary["overhead_share"]
    click.echo("framework-overhead share (gap / iteration): "
               + ", ".join(f"{k} {v:.1%}" for k, v in share.items()))


@main.group()
def devices() -> None:
    """Emulated GPUs: list them, calibrate them on measured data."""


@devices.command("list")
def devices_list() -> None:
    """Every emulated device with its spec-sheet rates and fitted parameters."""
    from predictor.devices.specs import FITTED_FIELDS, load_params

    params = load_params()
    click.echo(f"parameters {params.version} ({params.source})")
    for name, spec in params.devices.items():
        fitted = ", ".join(f"{f} {getattr(spec, f):.3g}" for f in FITTED_FIELDS)
        click.echo(f"{spec.emulated_name}: FP32 {spec.fp32_tflops} / TF32 {spec.tf32_tflops} / FP16 "
                   f"{spec.fp16_tflops} TFLOP/s, {spec.mem_gbs} GB/s ({spec.spec}); {fitted}; fitted on: {spec.fitted}")


@devices.command("calibrate")
@click.option("--calibration", "calibration_dir", type=click.Path(file_okay=False, path_type=Path),
              help="Gavel/Sia measurements [default: $ETS_CALIBRATION, else ../shared/calibration].")
@click.option("--ets", "ets_dir", type=click.Path(file_okay=False, path_type=Path),
              help="Real ETS traces with T4/ and 2080Ti/ [default: $ETS_SHARED/ets_traces, else ../shared/ets_traces].")
@click.option("--cache", type=click.Path(dir_okay=False, path_type=Path),
              default=Path("reports/calibration/op_sequences.parquet"), show_default=True,
              help="Op sequences of the calibration configs (captured once, reused).")
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Parameter file to write [default: the package's predictor/devices/params.json].")
@click.option("--report", "report_dir", type=click.Path(file_okay=False, path_type=Path),
              default=Path("reports/calibration"), show_default=True, help="Where report.md / report.json go.")
@click.option("--no-lomo", is_flag=True, help="Skip the leave-one-model-out refits (faster).")
def devices_calibrate(calibration_dir: Path | None, ets_dir: Path | None, cache: Path, out: Path | None,
                      report_dir: Path, no_lomo: bool) -> None:
    """Fit every emulated GPU to measured iteration times and real ETS traces; write the
    parameter file and the error report."""
    from predictor.devices import calibrate as cal
    from predictor.devices.measurements import MeasurementError, default_calibration_dir
    from predictor.devices.specs import PARAMS_FILE, save_params

    calibration_dir = calibration_dir or default_calibration_dir()
    ets_dir = ets_dir or calibration_dir.parent / "ets_traces"
    try:
        targets = cal.measured_targets(calibration_dir)
        real = {dev: import_traces("ets-csv", ets_dir / sub) for sub, dev in cal.ETS_DEVICES.items()}
    except (MeasurementError, TraceFormatError, FileNotFoundError) as exc:
        raise click.ClickException(str(exc)) from None
    skipped: list[str] = []
    for dev, table in real.items():
        more, skip = cal.ets_targets(table, dev)
        targets += more
        skipped += skip
    host = cal.host_table(real["T4"])
    sequences = cal.op_sequences([t.config for t in targets], cache)
    version = "v1-" + date.today().isoformat()
    params, report = cal.calibrate(targets, sequences, host, lomo=not no_lomo, version=version)
    report["skipped"] = skipped
    report["inputs"] = {"calibration": str(calibration_dir), "ets": str(ets_dir)}
    path = save_params(params, out or PARAMS_FILE, report)
    report_dir.mkdir(parents=True, exist_ok=True)
    table = cal.report_markdown(report)
    (report_dir / "report.md").write_text(table + "\n")
    (report_dir / "report.json").write_text(json.dumps(report, indent=1) + "\n")
    click.echo(table)
    click.echo(f"parameters {version} -> {path}; report in {report_dir}")


from predictor.model_cli import evaluate_cmd, predict_cmd, train_cmd  # noqa: E402  (commands live there)

main.add_command(train_cmd)
main.add_command(evaluate_cmd)
main.add_command(predict_cmd)

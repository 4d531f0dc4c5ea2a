"""``ets``: execution-trace datasets for the ETS predictor (collect, import, inspect) and emulated GPUs.

Why a thin layer: the logic lives in :mod:`predictor.emulator.capture` and :mod:`predictor.common.op_trace`;
this module turns options into calls and user errors into one-line messages. Every command line
of ``ets`` is in this package: datasets here, models in :mod:`.model`, emulated GPUs in
:mod:`.devices`, checkpoint files in :mod:`.checkpoint`; :mod:`.errors` is the one-line error
handling ``simrun`` shares.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import click

from predictor.common.errors import UserErrorGroup
from predictor.common.gpus import names_help
from predictor.common.inputs import InputError, printable
from predictor.common.op_trace import OpTraceFormatError, dataset_info, read_dataset, write_traces
from predictor.common.outputs import OutputError, locked_folder, remove_if_empty
from predictor.emulator import peaks
from predictor.emulator.capture.importers import IMPORTERS, import_onto_zoo, import_traces


@click.group(cls=UserErrorGroup, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
def main() -> None:
    """Execution traces (one row per operator: kernel time and the framework overhead after it)."""


@contextmanager
def holding(directory: Path, option: str = "--out") -> Iterator[Path]:
    """``directory`` held for one command that reads, changes and rewrites a dataset in it
    (``ets import``, ``ets collect``, ``ets dataset peaks``): a second such command on the same
    dataset is refused at once, in one line naming the first's PID (:func:`predictor.common.outputs.locked_folder`,
    as ``simrun --out``), instead of both reading the old file and the last rename silently
    dropping the other's data. Refused, not queued: the lock is taken before any work, so the
    refused run lost nothing and is simply run again. A folder this command created and left
    empty (it failed) is removed."""
    existed = directory.exists()
    try:
        with locked_folder(directory, option):
            yield directory
    except OutputError as exc:
        raise click.ClickException(str(exc)) from None
    finally:
        if not existed:
            remove_if_empty(directory)


@main.command("import", help="Import traces of another tool into a dataset directory. KIND: "
              + "; ".join(f"{k}: {v[1]}" for k, v in IMPORTERS.items()) + ".")
@click.argument("kind", type=click.Choice(list(IMPORTERS)))
@click.argument("path", type=click.Path(path_type=Path))
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), required=True,
              help="Dataset directory (one Parquet file per device).")
@click.option("--overwrite", is_flag=True, help="Let the import replace configs the dataset already holds.")
@click.option("--device", help="Device name to record [default: from the files].")
@click.option("--features", type=click.Choice(["zoo", "recorded"]), default=None,
              help="ets-csv only. zoo [default]: each iteration carried onto `ets collect`'s capture of the "
                   "same zoo config (our op names, params and FLOPs; the file's timings), so a model trained "
                   "on collected traces meets the same features; iterations the zoo cannot build (fp64, other "
                   "models) are listed and not imported. recorded: the files' own columns.")
def import_(kind: str, path: Path, out: Path, overwrite: bool, device: str | None, features: str | None) -> None:
    features = features or ("zoo" if kind == "ets-csv" else "recorded")
    if features == "zoo" and kind != "ets-csv":
        raise click.UsageError(f"--features zoo aligns ets-csv imports only; {kind} traces keep their features")
    with holding(out):
        _import(kind, path, out, overwrite, device, features)


def _import(kind: str, path: Path, out: Path, overwrite: bool, device: str | None, features: str) -> None:
    try:
        if features == "zoo":
            traces, report, skipped = import_onto_zoo(path, device, progress=True)
        else:
            traces, report, skipped = import_traces(kind, path, device), None, []
    except OpTraceFormatError as exc:
        raise click.ClickException(str(exc)) from None
    for s in skipped:
        click.echo(f"not imported: {printable(s.reason)} (--features recorded imports it as recorded)", err=True)
    if traces.empty:
        raise click.ClickException(f"{path}: no iteration could be aligned onto a zoo config")
    try:
        if not overwrite:
            refuse_replacing(out, traces)
        files = write_traces(out, traces)
    except (OpTraceFormatError, OutputError) as exc:  # a broken dataset file in --out, a full disk
        raise click.ClickException(str(exc)) from None
    n = traces.groupby(["device", "config_id"]).ngroups
    click.echo(f"imported {n} iteration(s), {len(traces):,} ops into {printable(', '.join(map(str, files)))}")
    if report is not None:
        click.echo(f"aligned onto zoo captures: {report['matched'].sum():,} of {report['real_rows'].sum():,} "
                   f"imported rows matched ({report['matched'].sum() / report['real_rows'].sum():.1%}); "
                   f"{report['matched_time_share'].min():.1%} of the time on matched rows in the worst iteration")


def refuse_replacing(directory: Path, traces) -> None:
    """OpTraceFormatError when the dataset already holds one of ``traces``' iterations (the same
    device and config): an import replaces data only with --overwrite."""
    from predictor.common.op_trace import device_file, read_trace_file

    for device, rows in traces.groupby("device", sort=True):
        path = device_file(directory, str(device))
        if not path.exists():
            continue
        held = sorted(set(read_trace_file(path)["config_id"]) & set(rows["config_id"]))
        if held:
            raise OpTraceFormatError(path, f"already holds {len(held):,} of the imported iteration(s) (e.g. "
                                         f"{held[0]}); pass --overwrite to replace them, or import into another --out")


@main.command("collect")
@click.option("--zoo", "zoo", type=click.Choice(["hpo", "randwire", "nlp", "llm", "all", "timm", "hf", "wide"]),
              default="hpo", show_default=True,
              help="hpo: the 18 torchvision families on the ETS batch x image-size grid; randwire: random-graph "
                   "networks; nlp: transformer and LSTM models; llm: GPT-2/GPT-3/OPT/BERT-large; all: hpo, "
                   "randwire and nlp; timm: PyTorch Image Models families; hf: Hugging Face transformers "
                   "families (scaled-down presets); wide: all, timm and hf. `ets zoo list` shows the families.")
@click.option("--family", "families", multiple=True, metavar="NAME",
              help="Only this family of the zoo (repeatable). A reserved family is captured only when named here.")
@click.option("--device", default="meta", show_default=True,
              help="meta: the op sequence (no compute); cpu: real profiling on this machine; cuda: real "
                   "profiling on this machine's GPU, kernels grouped per op (recorded as cuda:<GPU name>); "
                   "emulated:<GPU>: the op sequence timed by an emulated GPU (`ets devices list`); "
                   + names_help() + ".")
@click.option("--limit", type=click.IntRange(1),
              help="At most N configs (sampled deterministically, every family kept).")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--max-batch", type=click.IntRange(1),
              help="Only configs with batch <= N (CPU profiling of small configs).")
@click.option("--max-size", type=click.IntRange(1),
              help="Only configs with input size (image side, sequence length) <= N.")
@click.option("--workers", type=click.IntRange(1), default=None,
              help="Worker processes [default: 2 for meta, 1 for cpu, whose timings contention would distort].")
@click.option("--regime", type=click.Choice(["plain", "nsys"]), default="plain", show_default=True,
              help="Emulated devices: host times of a plain run (the simulator's truth) or under Nsight Systems "
                   "with per-op NVTX ranges (like the real ETS traces).")
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), required=True,
              help="Dataset directory; configs already there are skipped (resumable).")
@click.option("--model-file", "model_files", multiple=True, metavar="FILE|DIR",
              help="Instead of the zoo: a Python file defining Model, get_inputs() and optionally get_init_inputs() "
                   "(KernelBench's convention), captured on the meta device (--device meta or emulated:<GPU>) as "
                   "config file:<stem>; repeatable; a directory means every *.py in it, sorted. Runs the file's "
                   "code, as `python FILE` would, in a child process within ETS_SIM_MAX_MODEL_SECONDS per file "
                   "(default 600) and ETS_SIM_MAX_MODEL_BYTES of memory (default 16 GiB).")
@click.option("--inference", is_flag=True, help="--model-file: capture the forward alone under torch.no_grad().")
@click.option("--dtype", type=click.Choice(["float32", "float16", "bfloat16", "amp"]),
              help="--model-file: cast the model and its floating inputs [default: float32].")
@click.pass_context
def collect_cmd(ctx: click.Context, zoo: str, families: tuple[str, ...], device: str, limit: int | None, seed: int,
                max_batch: int | None, max_size: int | None, workers: int | None, regime: str, out: Path,
                model_files: tuple[str, ...], inference: bool, dtype: str | None) -> None:
    """Capture execution traces of zoo configs into a dataset directory (one Parquet per device);
    or, with --model-file, of the models in the user's own files (a file that fails is named in
    one line on stderr and in failures.jsonl, the others go on, and the exit status is 1)."""
    from predictor.emulator.devices.specs import DeviceParamsError, device_key

    if not model_files:
        if inference or dtype:
            raise click.UsageError("--inference and --dtype apply to --model-file (the zoo's grid sets its dtypes)")
    else:
        zoo_only = [f"--{name.replace('_', '-')}"
                    for name in ("zoo", "families", "limit", "seed", "max_batch", "max_size", "workers")
                    if ctx.get_parameter_source(name) is not click.core.ParameterSource.DEFAULT]
        if zoo_only:
            raise click.UsageError(f"{', '.join(zoo_only)}: zoo options; they do not apply to --model-file")
        if device not in ("meta",) and not device.startswith("emulated:"):
            raise click.BadParameter(f"{device!r}: model files are captured on the meta device; use meta or "
                                     "emulated:<GPU>", param_hint="--device")

    if device not in ("meta", "cpu", "cuda"):
        if not device.startswith("emulated:"):
            raise click.BadParameter(f"{device!r}: use meta, cpu, cuda or emulated:<GPU>", param_hint="--device")
        try:
            device_key(device)
        except DeviceParamsError as exc:
            raise click.BadParameter(str(exc), param_hint="--device") from None

    if regime != "plain" and not device.startswith("emulated:"):
        raise click.BadParameter("a regime applies to emulated devices only", param_hint="--regime")
    with holding(out):
        _collect(model_files, zoo, families, device, limit, seed, max_batch, max_size, workers, regime, out,
                 inference, dtype)


def _collect(model_files: tuple[str, ...], zoo: str, families: tuple[str, ...], device: str, limit: int | None,
             seed: int, max_batch: int | None, max_size: int | None, workers: int | None, regime: str, out: Path,
             inference: bool, dtype: str | None) -> None:
    from predictor.emulator.collect import collect
    from predictor.emulator.zoo.registry import zoo_configs

    if model_files:
        _collect_model_files(model_files, device, out, inference, dtype or "float32", regime)
        return
    try:
        zoo_order = zoo_configs(zoo, seed=seed, families=families or None)
    except ValueError as exc:  # an unknown family
        raise click.BadParameter(str(exc), param_hint="--family") from None
    configs = [c for c in zoo_order  # round-robin over families: prefixes stay stratified
               if (max_batch is None or c.batch <= max_batch) and (max_size is None or c.input_size <= max_size)]
    configs = configs[:limit] if limit else configs
    try:
        counts = collect(configs, device, out, workers=workers or (2 if device == "meta" else 1), regime=regime)
    except (InputError, OutputError) as exc:  # OpTraceFormatError included
        raise click.ClickException(str(exc)) from None
    click.echo(f"{counts['captured']} captured, {counts['skipped']} already there, {counts['failed']} failed"
               + (f" (see {out / 'failures.jsonl'})" if counts["failed"] else "") + f"; dataset in {out}")


def _collect_model_files(model_files: tuple[str, ...], device: str, out: Path, inference: bool, dtype: str,
                         regime: str) -> None:
    from predictor.emulator.capture.model_file import expand
    from predictor.emulator.collect import collect_model_files

    try:
        counts = collect_model_files(expand(model_files), device, out, inference=inference, dtype=dtype, regime=regime,
                                     report=lambda line: click.echo(printable(line), err=True))
    except (InputError, OutputError) as exc:  # OpTraceFormatError and KernelModelError included
        raise click.ClickException(str(exc)) from None
    click.echo(f"{counts['captured']} model file(s) captured, {counts['skipped']} already there, {counts['failed']} "
               "failed" + (f" (see {out / 'failures.jsonl'})" if counts["failed"] else "") + f"; dataset in {out}")
    if counts["failed"]:
        raise SystemExit(1)


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
    except OpTraceFormatError as exc:
        raise click.ClickException(str(exc)) from None
    if as_json:
        click.echo(json.dumps(summary, indent=2))
        return
    click.echo(f"{summary['iterations']:,} iterations, {summary['rows']:,} ops; "
               f"median iteration {summary['iteration_ms_median']:.2f} ms")
    # device and family names come from the dataset's files: escaped (a stranger's may hold ESC)
    click.echo("per device: " + printable(", ".join(f"{k} {v}" for k, v in summary["per_device"].items())))
    click.echo("per family: " + printable(", ".join(f"{k} {v}" for k, v in summary["per_family"].items())))
    click.echo(f"ops per iteration: {summary['ops_min']}–{summary['ops_max']}; histogram "
               + ", ".join(f"{k}: {v}" for k, v in summary["op_count_histogram"].items()))
    share = summary["overhead_share"]
    click.echo("framework-overhead share (gap / iteration): "
               + ", ".join(f"{k} {v:.1%}" for k, v in share.items()))


@dataset.command("peaks")
@click.argument("directory", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--overwrite", is_flag=True, help="Replace peaks recorded for this CPU before.")
def peaks_cmd(directory: Path, overwrite: bool) -> None:
    """Measure this machine's CPU peaks (a float32 GEMM and a large copy, a few seconds) and
    record them in DIRECTORY/peaks.json, for the CPU traces collected here."""
    with holding(directory, "DIRECTORY"):
        _record_peaks(directory, overwrite)


def _record_peaks(directory: Path, overwrite: bool) -> None:
    try:
        if peaks.recorded(directory, "cpu") is not None and not overwrite:
            raise click.ClickException(f"{directory / peaks.PEAKS_FILE} already records this dataset's cpu "
                                       "peaks; --overwrite replaces them")
        measured = peaks.measure_cpu()
        path = peaks.record(directory, measured)
    except InputError as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(f"{path}: cpu {measured.gemm_flops['float32'] / 1e9:,.1f} GFLOP/s float32 GEMM, "
               f"{measured.bytes_per_s / 1e9:,.1f} GB/s ({measured.origin})")


from predictor.cli.checkpoint import checkpoint  # noqa: E402  (commands live there)
from predictor.cli.devices import devices  # noqa: E402
from predictor.cli.model import calibrate_cmd, evaluate_cmd, finetune_cmd, predict_cmd, train_cmd  # noqa: E402
from predictor.cli.zoo import zoo  # noqa: E402

main.add_command(devices)
main.add_command(checkpoint)
main.add_command(train_cmd)
main.add_command(finetune_cmd)
main.add_command(evaluate_cmd)
main.add_command(calibrate_cmd)
main.add_command(predict_cmd)
main.add_command(zoo)

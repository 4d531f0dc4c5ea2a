"""``ets devices``: emulated GPUs — list, time one training step, calibrate, validate.

Why a module of its own: the ``devices`` group is the user's door to the emulated GPUs, whose
logic lives in :mod:`predictor.emulator.devices`; this layer turns options into calls and user errors into
one-line messages.
"""

from __future__ import annotations

import json
from datetime import date
from pathlib import Path

import click

from predictor.common.gpus import names_help
from predictor.common.inputs import InputError, printable


@click.group()
def devices() -> None:
    """Emulated GPUs: list them, time a training step on one, calibrate and validate them on real
    measurements."""


@devices.command("list")
@click.option("--aliases", is_flag=True, help="Also every other name each GPU goes by (data sets' device names).")
def devices_list(aliases: bool) -> None:
    """Every GPU of the catalogue (predictor/common/gpu_catalog/*.toml, one file per GPU) as an emulated
    device: its silicon (architecture, SMs, clock, L2, memory), spec-sheet rates, relative speed
    (measured or spec-derived), where its kernel times come from (measured-kernels: real kernels
    of that GPU trained the kernel model; spec-derived: from its spec sheet only) and its fitted
    host parameters."""
    from predictor.common.gpus import catalog
    from predictor.emulator.devices.kernels import kernel_source
    from predictor.emulator.devices.specs import FITTED_FIELDS, load_params

    params = load_params()
    model = _kernel_model()
    gpus = catalog()
    trained = f"kernel model trained on {', '.join(model.devices)}" if model is not None else "no kernel model"
    click.echo(f"{len(gpus)} GPUs; parameters {params.version} ({params.source}); {trained}")
    width = max(len(s.emulated_name) for s in params.devices.values()) + 1
    for key, spec in params.devices.items():
        gpu = gpus[key]
        fitted = ", ".join(f"{f} {getattr(spec, f):.3g}" for f in FITTED_FIELDS)
        rates = " / ".join(f"{name} {rate:g}" if rate else f"{name} -" for name, rate in (
            ("FP32", gpu.fp32_tflops), ("TF32", gpu.tf32_tflops), ("FP16", gpu.fp16_tflops),
            ("BF16", gpu.bf16_tflops), ("FP8", gpu.fp8_tflops)))
        click.echo(f"{spec.emulated_name + ':':<{width}} {gpu.architecture} {gpu.compute_capability}, {gpu.sms} SMs "
                   f"{gpu.boost_clock_mhz:.0f} MHz, L2 {gpu.l2_mb:g} MB, {gpu.memory_gb:g} GB {gpu.memory_gbs:g} GB/s, "
                   f"{rates} TFLOP/s; kernels: {kernel_source(key, model)}")
        click.echo(f"{'':<{width}} relative time {gpu.speed.relative_time:g} (V100 = 1; {gpu.speed.source}); "
                   f"fitted on {spec.fitted}: {fitted}")
        click.echo(f"{'':<{width}} spec: {gpu.source} ({gpu.file.name})")
        if gpu.interconnect is not None:
            link = gpu.interconnect
            nvlink = (f"NVLink {link.nvlink_gbs:g} GB/s per direction ({link.nvlink_topology})" if link.nvlink_gbs
                      else "no NVLink")
            click.echo(f"{'':<{width}} links: {nvlink}, PCIe Gen{link.pcie_generation} x{link.pcie_lanes}"
                       f"{'' if link.pcie_p2p else ' without peer-to-peer'}")
        if aliases and gpu.aliases:
            click.echo(f"{'':<{width}} also: {', '.join(gpu.aliases)}")


def _kernel_model():
    from predictor.emulator.devices.kernels import KernelModelError, load

    try:
        return load()
    except KernelModelError as exc:
        raise click.ClickException(str(exc)) from None


MODEL_FILE_HELP = ("A Python file defining Model, get_inputs() and optionally get_init_inputs() (KernelBench's "
                   "convention), captured on the meta device instead of a zoo MODEL; repeatable; a directory means "
                   "every *.py in it, sorted. Runs the file's code, as `python FILE` would, in a child process: "
                   "each file within ETS_SIM_MAX_MODEL_SECONDS (default 600 s), the process within "
                   "ETS_SIM_MAX_MODEL_BYTES of memory (default 16 GiB).")
INFERENCE_HELP = "--model-file: time the forward alone under torch.no_grad() (what KernelBench measures)."


@devices.command("time")
@click.argument("model", required=False)
@click.option("--model-file", "model_files", multiple=True, metavar="FILE|DIR", help=MODEL_FILE_HELP)
@click.option("--inference", is_flag=True, help=INFERENCE_HELP)
@click.option("--device", required=True, help="emulated:<GPU> (`ets devices list`), e.g. emulated:T4; "
              + names_help() + ".")
@click.option("--batch", type=click.IntRange(1), help="Batch size [default: 32; 8 for LLMs].")
@click.option("--size", "--seq", "size", type=click.IntRange(1),
              help="Image size (px), or sequence length (--seq) for sequence models [default: 224 px; "
                   "128 tokens; 400 speech frames; 512 for LLMs].")
@click.option("--dtype", type=click.Choice(["float32", "float16", "bfloat16", "amp"]),
              help="amp: automatic mixed precision (autocast's float16 GEMMs and convolutions, float32 norms, "
                   "softmax and losses, float32 master weights) [default: float32].")
@click.option("--allow-tf32", is_flag=True,
              help="float32 matmuls in TF32 on GPUs that have it (torch.backends.cuda.matmul.allow_tf32; NGC "
                   "containers' default). float32 convolutions use TF32 there anyway (cuDNN's default).")
@click.option("--optimizer", type=click.Choice(["sgd", "adam"]), help="[default: sgd; adam for LLMs]")
@click.option("--regime", type=click.Choice(["plain", "nsys"]), default="plain", show_default=True,
              help="Host times of a plain run, or under Nsight Systems with per-op NVTX ranges.")
@click.option("--gpus", type=int, default=1, show_default=True,
              help="Data-parallel (DDP) step on N GPUs at this per-GPU batch: adds compute, all-reduce, exposed "
                   "communication, total and scaling efficiency (communication spec-derived; docs/gpus.md).")
@click.option("--per-node", type=int, help="GPUs per node (K, dividing N) [default: all N on one node up to a "
              "server's 8 GPUs; 8 per node beyond].")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object (one line per model file).")
def devices_time(model: str | None, model_files: tuple[str, ...], inference: bool, device: str, batch: int | None,
                 size: int | None, dtype: str | None, allow_tf32: bool, optimizer: str | None, regime: str,
                 gpus: int, per_node: int | None, as_json: bool) -> None:
    """How long one training step of MODEL takes on an emulated GPU: the config's op sequence
    (meta device) timed by the emulator without noise, split into forward, backward and update.
    MODEL: a zoo model name (resnet50, mobilenet_v2, transformer_encoder[_tiny|_base...], lstm_lm,
    gpt2_medium, ...) or a zoo config id. Or, instead of MODEL, --model-file FILE|DIR: each file's
    model (its training step, or its forward with --inference); a file that fails is named in one
    line on stderr, the others are still timed, and the exit status is 1. --gpus N > 1 adds the
    data-parallel step on N GPUs, K per node (--per-node): the gradient all-reduces of the
    config's own gradients in DDP's buckets, the part backward does not hide, and the scaling
    efficiency (single-GPU step ÷ N-GPU step at the same per-GPU batch)."""
    from predictor.cli.data_parallel import print_data_parallel
    from predictor.emulator.devices.kernels import KernelModelError
    from predictor.emulator.devices.specs import DeviceParamsError, load_params
    from predictor.emulator.devices.step_time import resolve_config, step_time
    from predictor.emulator.zoo.config import ModelBuildError

    check_model_or_files(model, model_files, "MODEL", inference)
    if model_files and (batch is not None or size is not None):
        raise click.UsageError("--batch and --size apply to a zoo MODEL; a model file sets its sizes in get_inputs()")
    per_node = check_placement(gpus, per_node)
    if model_files and gpus > 1:
        raise click.UsageError("--gpus applies to a zoo MODEL; --model-file is timed on one GPU")
    try:
        params = load_params()
        params.device(device)
    except DeviceParamsError as exc:
        if device.endswith(".json"):  # the spec file is at fault, not the option: one line naming it
            raise click.ClickException(f"--device: {exc}") from None
        raise click.BadParameter(str(exc), param_hint="--device") from None
    if model_files:
        _time_model_files(model_files, device, params, regime, inference=inference, dtype=dtype or "float32",
                          optimizer=optimizer or "sgd", as_json=as_json, allow_tf32=allow_tf32)
        return
    try:
        config = resolve_config(model, batch, size, dtype, optimizer)
    except InputError as exc:  # an unknown model, or ModelBuildError
        raise click.UsageError(str(exc)) from None
    try:
        if gpus == 1:
            result = step_time(config, device, params, regime, allow_tf32=allow_tf32)
        else:
            result = _data_parallel_time(config, device, params, regime, allow_tf32, gpus, per_node)
    except ModelBuildError as exc:
        raise click.UsageError(str(exc)) from None
    except KernelModelError as exc:  # a broken kernel-model file: one line, not a traceback
        raise click.ClickException(str(exc)) from None
    if as_json:
        click.echo(json.dumps(result))
        return
    if gpus == 1:
        _print_step_time(result)
        return
    _print_step_time(result | {"total_ms": result["compute_ms"]})  # the single-GPU step, then the N-GPU one
    print_data_parallel(result)


def check_placement(gpus: int, per_node: int | None) -> int:
    """GPUs per node for --gpus N / --per-node K (K defaults to all N on one node up to a server's
    8 GPUs, 8 per node beyond); a bad value is one line naming it."""
    from predictor.emulator.devices.collectives import default_per_node

    if gpus < 1:
        raise click.BadParameter(f"{gpus} must be ≥ 1 (the GPUs taking part)", param_hint="--gpus")
    if per_node is not None and (per_node < 1 or per_node > gpus or gpus % per_node):
        raise click.BadParameter(f"{per_node} must divide --gpus {gpus} (GPUs per node × nodes = GPUs)",
                                 param_hint="--per-node")
    if per_node is None and gpus % default_per_node(gpus):
        raise click.BadParameter(f"{gpus} GPUs do not fill 8-GPU nodes: give --per-node", param_hint="--gpus")
    return per_node or default_per_node(gpus)


def _data_parallel_time(config, device: str, params, regime: str, allow_tf32: bool, gpus: int,
                        per_node: int) -> dict:
    """The single-GPU step of ``config`` (as `ets devices time` prints it) plus its data-parallel
    step on ``gpus`` GPUs, ``per_node`` per node: backward = the backward phase, other = forward +
    update; ``total_ms`` becomes the N-GPU step, ``compute_ms`` the single-GPU one."""
    from predictor.cli.data_parallel import data_parallel_fields
    from predictor.emulator.capture.quiet import capture_quietly
    from predictor.emulator.devices.collectives import CollectiveError
    from predictor.emulator.devices.data_parallel import data_parallel_step, gradient_buckets
    from predictor.emulator.devices.specs import DeviceParamsError, regime_host_factor
    from predictor.emulator.devices.step_time import step_time_of_trace

    regime_host_factor(params, regime)
    trace = capture_quietly(config)
    result = step_time_of_trace(trace, device, params, regime, allow_tf32)
    try:
        step = data_parallel_step(result["backward_ms"] / 1e3, (result["forward_ms"] + result["update_ms"]) / 1e3,
                                  gradient_buckets(trace), gpus, per_node, device)
    except (CollectiveError, DeviceParamsError) as exc:
        raise click.ClickException(f"--gpus {gpus}: {exc}") from None
    # compute_ms: the single-GPU step as printed (the phases' sum, equal to step's up to rounding)
    return result | data_parallel_fields(step, result["total_ms"])


_BYTE_UNITS = {"": 1, "B": 1, "KB": 1e3, "MB": 1e6, "GB": 1e9, "KIB": 2**10, "MIB": 2**20, "GIB": 2**30}


def parse_bytes(text: str) -> float:
    """'100000000', '1e8', '25MB', '25 MiB' -> bytes; anything else (negative, not a number, an
    unknown unit) is one line naming the value."""
    raw = str(text).strip()
    number = raw.rstrip("BbKkMmGgIi ")
    unit = raw[len(number):].strip().upper()
    try:
        value = float(number) * _BYTE_UNITS[unit]
    except (ValueError, KeyError):
        raise click.BadParameter(f"{printable(raw)!r} is not a number of bytes (e.g. 1e8, 25MB, 25MiB)",
                                 param_hint="--bytes") from None
    if not value >= 0 or value == float("inf"):
        raise click.BadParameter(f"{printable(raw)!r} must be a finite number ≥ 0", param_hint="--bytes")
    return value


@devices.command("comm")
@click.option("--bytes", "nbytes", required=True, metavar="B",
              help="Message size in bytes (1e8, or with a unit: 25MB, 25MiB), e.g. a gradient bucket.")
@click.option("--gpus", required=True, type=int, help="GPUs taking part (N).")
@click.option("--per-node", type=int, help="GPUs per node (K, dividing N) [default: all N on one node up to a "
              "server's 8 GPUs; 8 per node beyond].")
@click.option("--device", required=True, help="emulated:<GPU> (`ets devices list`), e.g. emulated:A100-SXM4; "
              + names_help() + ".")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object (ms, gpus, per_node, nodes, link, label).")
def devices_comm(nbytes: str, gpus: int, per_node: int | None, device: str, as_json: bool) -> None:
    """How long one NCCL ring all-reduce of B bytes takes on N GPUs of a type, K per node: the
    communication model (docs/gpus.md) over the slowest link the placement uses (NVLink, PCIe,
    the network), with link parameters fitted on real collectives (Vidur, DeepBench). Spec-derived:
    the GPU's links come from its catalogue entry."""
    from predictor.common.gpus import entry
    from predictor.emulator.devices.collectives import CollectiveError, Placement, allreduce, shipped_params
    from predictor.emulator.devices.specs import DeviceParamsError, device_key

    size = parse_bytes(nbytes)
    per_node = check_placement(gpus, per_node)
    try:
        gpu = entry(device_key(device))
    except DeviceParamsError as exc:
        raise click.BadParameter(str(exc), param_hint="--device") from None
    try:
        result = allreduce(size, Placement(gpus, per_node), gpu, shipped_params())
    except CollectiveError as exc:
        raise click.ClickException(str(exc)) from None
    out = {"ms": result["seconds"] * 1e3, "gpus": result["gpus"], "per_node": result["per_node"],
           "nodes": result["nodes"], "link": result["link"], "bytes": size, "device": f"emulated:{gpu.name}",
           "label": result["label"]}
    if as_json:
        click.echo(json.dumps(out))
        return
    click.echo(f"all-reduce of {size:,.0f} bytes on {gpus} × {gpu.name} ({out['nodes']} node(s) × {out['per_node']} "
               f"GPU(s)): {out['ms']:.3f} ms, bottleneck {out['link']} ({out['label']}: the GPU's catalogue links, "
               "link parameters fitted on real all-reduces)")


def check_model_or_files(target: str | None, model_files: tuple[str, ...], name: str, inference: bool) -> None:
    """A usage error unless exactly one of the positional ``name`` and --model-file is given;
    --inference needs --model-file (the zoo captures training steps)."""
    if target is not None and model_files:
        raise click.UsageError(f"give either {name} or --model-file, not both")
    if target is None and not model_files:
        raise click.UsageError(f"missing {name} (or --model-file FILE|DIR)")
    if inference and not model_files:
        raise click.UsageError("--inference applies to --model-file (zoo configs are captured as training steps)")


class ModelFileRun:
    """The model files that --model-file values name (a directory: its *.py files, sorted),
    captured one at a time: iterating yields (path as given, trace) for each that captures; each
    failure is one line on stderr (:meth:`fail`) and the others go on; :meth:`finish` exits with
    status 1 when any failed. Shared by `ets devices time` and `ets predict` (`ets collect` records
    failures in failures.jsonl as well: :func:`predictor.emulator.collect.collect_model_files`)."""

    def __init__(self, model_files: tuple[str, ...], *, inference: bool, dtype: str, optimizer: str = "sgd") -> None:
        from predictor.emulator.capture.model_file import expand

        self.paths = expand(model_files)
        self.options = {"inference": inference, "dtype": dtype, "optimizer": optimizer}
        self.failed = 0

    def __iter__(self):
        """Each file captured in one child process, under the model-file time and memory limits
        (:mod:`predictor.emulator.capture.model_process`): a file that hangs or allocates without end fails
        in one line and the others go on."""
        from predictor.emulator.capture.model_file import ModelFileError
        from predictor.emulator.capture.model_process import capture_files

        for path, trace in capture_files(self.paths, **self.options):  # a bad limit: InputError, one line
            if isinstance(trace, ModelFileError):
                self.fail(str(trace))
                continue
            yield path, trace

    def fail(self, line: str) -> None:
        click.echo(printable(" ".join(line.split())[:1000]), err=True)
        self.failed += 1

    def finish(self) -> None:
        if self.failed:
            click.echo(f"{self.failed} of {len(self.paths)} model file(s) failed", err=True)
            raise SystemExit(1)


def _time_model_files(model_files: tuple[str, ...], device: str, params, regime: str, *, inference: bool,
                      dtype: str, optimizer: str, as_json: bool, allow_tf32: bool = False) -> None:
    from predictor.emulator.devices.kernels import KernelModelError
    from predictor.emulator.devices.step_time import step_time_of_trace

    run = ModelFileRun(model_files, inference=inference, dtype=dtype, optimizer=optimizer)
    for path, trace in run:
        try:
            result = {"model_file": path, **step_time_of_trace(trace, device, params, regime, allow_tf32=allow_tf32)}
        except KernelModelError as exc:
            raise click.ClickException(str(exc)) from None
        except Exception as exc:  # an op the emulator cannot price: this file fails, the others go on
            run.fail(f"{path}: cannot be timed on {device}: {type(exc).__name__}: {exc}")
            continue
        if as_json:
            click.echo(json.dumps(result))
        else:
            _print_step_time(result)
    run.finish()


def _print_step_time(r: dict) -> None:
    what = printable(f"{r['config_id']} (model file {r['model_file']})" if "model_file" in r else r["config_id"])
    click.echo(f"{what} on {r['device']} (emulated GPU; kernel times {r['source']}, "
               f"{r['regime']} regime, params {r['params_version']})")
    for phase in ("forward", "backward", "update"):
        click.echo(f"  {phase:<9} {r[f'{phase}_ms']:>10.3f} ms   kernels {r[f'{phase}_kernel_ms']:.3f} ms")
    click.echo(f"  total     {r['total_ms']:>10.3f} ms   kernels {r['kernel_ms']:.3f} ms, "
               f"overhead {r['overhead_share']:.1%}, {r['ops']:,} ops")
    math_ = ", ".join(f"{cls} {m}" for cls, m in r.get("kernel_math", {}).items()) or "no GEMM-like kernels"
    click.echo(f"  precision {r['config_id'].split(':')[3] if r['config_id'].count(':') >= 5 else ''}"
               f"{' ' if r['config_id'].count(':') >= 5 else ''}({math_}; float32 matmuls in TF32: "
               f"{'yes' if r.get('allow_tf32') else 'no'})")
    click.echo(f"  host      {r['host']}")


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


def _data_dirs(calibration_dir: Path | None, ets_dir: Path | None) -> tuple[Path, Path]:
    """The measurement folders (defaults resolved), a missing --calibration named at once: before
    the outputs are claimed and before minutes of loading."""
    from predictor.emulator.devices.measurements import default_calibration_dir

    calibration_dir = calibration_dir or default_calibration_dir()
    if not calibration_dir.is_dir():
        raise click.ClickException(f"--calibration {calibration_dir}: no such folder (the real measurements; pass "
                                   "--calibration DIR or set $ETS_CALIBRATION)")
    return calibration_dir, ets_dir or calibration_dir.parent / "ets_traces"


def _inputs(calibration_dir: Path, ets_dir: Path, cache: Path):
    """Targets, skipped files, host table and real kernels; user errors as one line."""
    from predictor.emulator.devices import calibrate as cal
    from predictor.emulator.devices import kernel_corpus

    try:
        targets, skipped, host = cal.load_targets(calibration_dir, ets_dir)
        kernels = kernel_corpus.load_all(calibration_dir, ets_dir, kernelbench_cache=cache.parent / KERNELBENCH_CACHE,
                                         progress=True)
    except (InputError, FileNotFoundError) as exc:  # MeasurementError and OpTraceFormatError included
        raise click.ClickException(str(exc)) from None
    return targets, skipped, host, kernels


KERNELBENCH_CACHE = "kernelbench_sequences.parquet"  # beside --cache: KernelBench problems on the meta device


def _op_sequences(targets, cache: Path):
    """The targets' op sequences (:func:`predictor.emulator.devices.calibrate.op_sequences`); a broken
    --cache file is one line naming it, not a traceback."""
    from predictor.common.op_trace import OpTraceFormatError
    from predictor.emulator.devices import calibrate as cal

    try:
        return cal.op_sequences([t.config for t in targets], cache)
    except OpTraceFormatError as exc:
        raise click.ClickException(f"--cache {exc} (delete it to capture the op sequences again)") from None


def _claim_outputs(overwrite: bool, *outputs: tuple[str, Path]) -> None:
    """Every file the command will write, checked before the minutes of fitting: an existing one
    only with --overwrite."""
    from predictor.common.outputs import OutputError, claim_file

    try:
        for option, path in outputs:
            claim_file(path, overwrite, option=option)
    except OutputError as exc:
        raise click.ClickException(str(exc)) from None


@devices.command("calibrate")
@_data_options
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Parameter file to write [default: the package's predictor/emulator/devices/params.json].")
@click.option("--kernel-model", "kernel_out", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Kernel-model file to write [default: the package's predictor/emulator/devices/kernel_model.json].")
@click.option("--inference-host", "inference_out", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Inference host-cost file to write [default: the package's "
                   "predictor/emulator/devices/inference_host.json].")
@click.option("--report", "report_dir", type=click.Path(file_okay=False, path_type=Path),
              default=Path("reports/calibration"), show_default=True, help="Where report.md / report.json go.")
@click.option("--overwrite", is_flag=True,
              help="Let the parameter file, the kernel model, the inference host costs and the report replace "
                   "existing ones (the defaults are the package's own files: refitting them needs --overwrite).")
def devices_calibrate(calibration_dir: Path | None, ets_dir: Path | None, cache: Path, out: Path | None,
                      kernel_out: Path | None, inference_out: Path | None, report_dir: Path, overwrite: bool) -> None:
    """Fit the kernel model on every real kernel (NeuSight, ETS, DeepBench, Vidur, KernelBench level 1),
    an inference call's host cost per kernel on KernelBench level 1, then every emulated GPU's host
    side to the measured iterations; write the three files and the in-sample report (out-of-sample
    figures: `ets devices validate`)."""
    from predictor.emulator.devices import calibrate as cal
    from predictor.emulator.devices import inference_host
    from predictor.emulator.devices import kernels as kernel_model
    from predictor.emulator.devices.specs import PARAMS_FILE, save_params, spec_sheets

    calibration_dir, ets_dir = _data_dirs(calibration_dir, ets_dir)
    _claim_outputs(overwrite, ("--out", out or PARAMS_FILE), ("--kernel-model", kernel_out or kernel_model.MODEL_FILE),
                   ("--inference-host", inference_out or inference_host.FILE),
                   ("--report", report_dir / "report.md"), ("--report", report_dir / "report.json"))
    targets, skipped, host, kernels = _inputs(calibration_dir, ets_dir, cache)
    inference = _inference_host(calibration_dir)
    click.echo(f"kernel model: fitting on {int((~kernels['censored']).sum()):,} real kernels ...")
    model = kernel_model.fit(kernels, spec_sheets())
    kernel_path = model.save(kernel_out or kernel_model.MODEL_FILE)
    inference_path = inference_host.save(inference, inference_out or inference_host.FILE)
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
    click.echo(f"kernel model -> {kernel_path}; inference host -> {inference_path}; parameters {version} -> {path}; "
               f"report in {report_dir}")


def _host_agreement_notes(calibration_dir: Path) -> list[str]:
    """One note per pair of KernelBench machines that timed the same problems on the same GPU type
    (:func:`predictor.emulator.devices.kernelbench.host_agreement`)."""
    from predictor.emulator.devices import kernelbench

    agreement = kernelbench.host_agreement(kernelbench.load_timings(calibration_dir / "kernelbench"))
    return [f"KernelBench {r.level} on {r.device} ({r.problem_set}), the same problems timed on two machines: "
            f"{r.host_a} / {r.host_b}, {r.n} problems, median |ratio − 1| {r.median_abs:.1%} (median ratio "
            f"{r.median_ratio:.2f}) — the error floor of an emulator that knows the GPU but not the machine."
            for r in agreement.itertuples()]


def _inference_host(calibration_dir: Path):
    """The inference host costs (:mod:`predictor.emulator.devices.inference_host`) from KernelBench level 1."""
    from predictor.emulator.devices import inference_host, kernelbench

    root = calibration_dir / "kernelbench"
    try:
        level1 = kernelbench.load_timings(root, ("level1",))
        return inference_host.fit(level1, source=f"calibration/kernelbench/{kernelbench.TIMINGS} (level 1, eager rows)")
    except InputError as exc:
        raise click.ClickException(str(exc)) from None


@devices.command("validate")
@_data_options
@click.option("--report", "report_dir", type=click.Path(file_okay=False, path_type=Path),
              default=Path("reports/validate"), show_default=True,
              help="Where report.md, iterations.csv, kernels.csv and the plots go.")
@click.option("--overwrite", is_flag=True, help="Let the report replace an earlier one in --report.")
@click.option("--multi-gpu-only", is_flag=True,
              help="Only the multi-GPU data-parallel sets (Sia placements, Lambda, Gavel, NeuSight dp; about a "
                   "minute once their op sequences are in --cache): multi_gpu.md, multi_gpu.csv and the plot.")
def devices_validate(calibration_dir: Path | None, ets_dir: Path | None, cache: Path, report_dir: Path,
                     overwrite: bool, multi_gpu_only: bool) -> None:
    """The emulated GPUs against every real measurement, out of sample: kernels leave-one-GPU-out,
    iterations leave-one-model-out (the calibration refitted without each model), whole forward
    passes and training steps (KernelBench level 3, Lambda, pytorch-gpu-benchmark) with the kernel
    model fitted without their GPU; and data-parallel steps on several GPUs (Sia placements,
    Lambda 2-8 GPUs, Gavel consolidated / unconsolidated, NeuSight dp4) from the set's own 1-GPU
    times plus spec-derived communication."""
    from predictor.emulator.devices import calibrate as cal
    from predictor.emulator.devices import endtoend, neusight_ops, validate
    from predictor.emulator.devices import kernels as kernel_model
    from predictor.emulator.devices.measurements import NEUSIGHT_DIR, MeasurementError
    from predictor.emulator.devices.specs import load_params, spec_sheets

    calibration_dir, ets_dir = _data_dirs(calibration_dir, ets_dir)
    if multi_gpu_only:
        _claim_outputs(overwrite, ("--report", report_dir / "multi_gpu.md"))
        _validate_multi_gpu(calibration_dir, cache, report_dir, echo=True)
        click.echo(f"report in {report_dir}")
        return
    _claim_outputs(overwrite, ("--report", report_dir / "report.md"), ("--report", report_dir / "multi_gpu.md"))
    targets, skipped, host, kernels = _inputs(calibration_dir, ets_dir, cache)
    click.echo("kernels, leave-one-GPU-out ...")
    held_out_models: dict = {}
    kernel_rows = kernel_model.leave_one_gpu_out(kernels, spec_sheets(), progress=True, models=held_out_models)
    model = kernel_model.fit(kernels, spec_sheets())
    sequences = _op_sequences(targets, cache)
    click.echo("iterations, leave-one-model-out ...")
    _, report = cal.calibrate(targets, sequences, host, lomo=True, model=model)
    rows = validate.iteration_rows(report["lomo_errors"])
    try:
        labelled = neusight_ops.class_times(neusight_ops.load_neusight_ops(calibration_dir / NEUSIGHT_DIR))
    except MeasurementError as exc:
        raise click.ClickException(str(exc)) from None
    op_classes = validate.class_rows(labelled, report["lomo_classes"])
    click.echo("end-to-end sets (KernelBench level 3, Lambda, pytorch-gpu-benchmark) ...")
    try:
        whole = endtoend.all_rows(calibration_dir, load_params(), held_out_models, model, cache.parent)
    except InputError as exc:  # MeasurementError included
        raise click.ClickException(str(exc)) from None
    notes = [f"{len(rows)} iteration targets on {rows['device'].nunique() if len(rows) else 0} GPUs; "
             f"skipped: {', '.join(skipped) or 'none'}.",
             f"kernels: {len(kernel_rows):,} uncensored rows; {int(kernels['censored'].sum()):,} NeuSight rows on the "
             f"call floor and {kernels.attrs.get('implausible', 0)} implausible ETS rows excluded.",
             f"nsys host factor (ETS traces vs plain runs, fitted): {report['nsys_host_factor']:.2f}.",
             "per op class: NeuSight's per-op labels (fx nodes, CUDA-event timed one at a time) against the kernel "
             "time of the same op class in our trace, priced by the calibration refitted without the model and "
             "the kernel model (whose microbenchmark kernels do not include these runs); kernel-free nodes "
             "(shapes, views) and our loss are left out.",
             *_host_agreement_notes(calibration_dir)]
    sets = validate.write_report(report_dir, rows, kernel_rows, notes, op_classes, whole)
    multi_gpu = _validate_multi_gpu(calibration_dir, cache, report_dir, echo=False)
    with (report_dir / "report.md").open("a") as report:
        report.write("\n" + multi_gpu)
    click.echo((report_dir / "report.md").read_text())
    click.echo(f"report in {report_dir}")
    if len(sets):
        click.echo(f"{int(sets['target'].sum())} of {len(sets)} sets within the 12 % target")


def _validate_multi_gpu(calibration_dir: Path, cache: Path, report_dir: Path, echo: bool) -> str:
    """The multi-GPU sets (:mod:`predictor.emulator.devices.placement_validation`): writes multi_gpu.md,
    .csv and the plot into ``report_dir``; returns the Markdown section (printed with ``echo``)."""
    from predictor.emulator.devices import placement_validation
    from predictor.emulator.devices.measurements import MeasurementError

    click.echo("multi-GPU sets (Sia placements and scalability, Lambda, Gavel, NeuSight dp) ...")
    try:
        result = placement_validation.run(calibration_dir, cache, progress=True)
    except MeasurementError as exc:
        raise click.ClickException(str(exc)) from None
    table, text = placement_validation.write_report(report_dir, result)
    if echo:
        click.echo(text)
        targeted = table["met"].dropna()
        click.echo(f"{int(targeted.astype(bool).sum())} of {len(targeted)} multi-GPU targets met")
    return text

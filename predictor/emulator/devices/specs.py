"""Emulated GPU parameters: spec-sheet rates plus the fitted efficiency, latency and host terms.

Why: there are no GPUs on our machines, so each emulated device is a small, named parameter set
that :mod:`predictor.emulator.devices.timing` turns into kernel times and an asynchronous host/GPU
timeline. The spec-sheet numbers (peak rates, bandwidth) come from the GPU catalogue
(:mod:`predictor.common.gpus`: one TOML file per GPU in ``predictor/common/gpu_catalog/``); the rest starts from the
priors below and is fitted by ``ets devices calibrate`` (:mod:`predictor.emulator.devices.calibrate`),
which writes ``params.json`` beside this file. That file is versioned: its ``format`` must match
:data:`FORMAT_VERSION` and every device entry must carry every field, or loading fails with a
message naming the file and the field.

Fields of a device (rates in TFLOP/s and GB/s; the dense, non-sparse tensor-core numbers):

* ``fp32_tflops``, ``tf32_tflops`` (0: no TF32), ``fp16_tflops`` (tensor cores where present,
  else the FP16/FP32 vector rate), ``bf16_tflops``, ``memory_gbs``, ``memory_gb``, ``sms``,
  ``boost_clock_mhz``, ``l2_mb`` — the spec record's (``gpu``: the catalogue entry, whose
  ``source`` names the vendor's spec sheet), read through, never copied.
* ``compute_eff`` — fraction of peak a large GEMM/convolution reaches, counted in our FLOPs (above 1
  where cuDNN computes fewer, e.g. Winograd convolutions); ``compute_half_mflop`` —
  the kernel size (MFLOP) at which it reaches half of that: small kernels cannot fill the GPU.
* ``tensor_eff`` — the fraction of the tensor-core (FP16, TF32) peak that eager PyTorch kernels
  reach relative to the FP32 path (NCHW layouts, non-multiple-of-8 channels keep it well
  below 1).
* ``memory_eff``, ``memory_half_kb`` — the same for memory-bound kernels and bandwidth.
* ``kernel_latency_us`` — fixed cost per kernel on the GPU (launch to retire, tail effects).
* ``host_scale`` — host time per op relative to the measured host durations of the real ETS T4
  ops (``host_us`` in the file, by phase and op class), which cover the op's own range but not
  the Python between ops; the prior of 3 says so, the fit decides.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from predictor.common.documents import document_bytes, parse_document, read_document
from predictor.common.gpus import (
    EMULATED_PREFIX,
    GpuEntry,
    UnknownGpuTypeError,
    canonical_gpu_type,
    catalog,
    spec_only_entry,
)
from predictor.common.inputs import InputError, short

FORMAT_VERSION = 2  # 2: no per-device GEMM scales (precision is modelled: TF32, FP16, AMP)
PARAMS_FILE = Path(__file__).with_name("params.json")
UNCALIBRATED = "no measured iterations"  # how a device's ``fitted`` starts when it had no targets
FITTED_FIELDS = ("compute_eff", "compute_half_mflop", "tensor_eff", "memory_eff", "memory_half_kb", "kernel_latency_us",
                 "host_scale")


class DeviceParamsError(InputError):
    """A device name or parameter file that cannot be used; the message names file and field."""


def _fact(field: str) -> property:
    return property(lambda self: getattr(self.gpu, field), doc=f"The spec record's ``{field}``.")


@dataclass(frozen=True)
class DeviceSpec:
    """An emulated GPU: its spec record (``gpu``: the catalogue entry, or a GPU a spec file
    describes, :func:`spec_from_file`) and the fitted terms. The spec facts are the record's, read
    under its names; only the fitted fields are this class's own."""

    gpu: GpuEntry
    compute_eff: float = 0.55
    compute_half_mflop: float = 20.0
    tensor_eff: float = 0.35
    memory_eff: float = 0.75
    memory_half_kb: float = 256.0
    kernel_latency_us: float = 4.0
    host_scale: float = 3.0
    fitted: str = "prior"  # what the fitted fields were fitted on, or "prior"

    name = _fact("name")
    fp32_tflops = _fact("fp32_tflops")
    tf32_tflops = _fact("tf32_tflops")  # 0: no TF32
    fp16_tflops = _fact("fp16_tflops")
    bf16_tflops = _fact("bf16_tflops")  # 0: no BF16 tensor cores (bfloat16 then runs at the FP32 rate)
    memory_gbs = _fact("memory_gbs")
    memory_gb = _fact("memory_gb")
    sms = _fact("sms")  # streaming multiprocessors
    boost_clock_mhz = _fact("boost_clock_mhz")
    l2_mb = _fact("l2_mb")

    @property
    def emulated_name(self) -> str:
        return EMULATED_PREFIX + self.name

    def with_fitted(self, values: dict[str, float], fitted: str) -> DeviceSpec:
        return replace(self, **{k: float(v) for k, v in values.items()}, fitted=fitted)


def spec_sheets() -> dict[str, DeviceSpec]:
    """Every catalogue GPU as a device spec, fitted fields at their priors (:mod:`predictor.common.gpus`:
    one TOML file per GPU)."""
    return {name: DeviceSpec(gpu) for name, gpu in catalog().items()}


# Host cost per op (µs) by phase and op class, before fitting: the medians of the real ETS T4
# traces' host-side op durations are written here by calibration; these are placeholders of the
# right order for eager PyTorch.
DEFAULT_HOST_US: dict[str, dict[str, float]] = {
    "forward": {"default": 20.0}, "backward": {"default": 30.0}, "update": {"default": 10.0},
}


@dataclass(frozen=True)
class DeviceParams:
    """Everything the emulator needs: host costs and every device's spec."""

    devices: dict[str, DeviceSpec]
    host_us: dict[str, dict[str, float]]
    version: str = "prior"
    source: str = "spec sheets and priors"
    # host time under Nsight Systems with per-op NVTX ranges (the ETS traces' regime) relative to
    # a plain, unprofiled run; fitted on the GPUs measured both ways (T4, RTX 2080 Ti)
    nsys_host_factor: float = 1.0

    def device(self, name: str) -> DeviceSpec:
        """A named device, or a GPU known only by a spec file (``emulated:path/to/gpu.json``,
        :func:`spec_from_file`), whose fitted fields are the medians of the calibrated devices."""
        if name.removeprefix(EMULATED_PREFIX).endswith(".json"):
            spec = spec_from_file(name.removeprefix(EMULATED_PREFIX))
            calibrated = [d for d in self.devices.values() if d.fitted != "prior"] or list(self.devices.values())
            typical = {f: float(np.median([getattr(d, f) for d in calibrated])) for f in FITTED_FIELDS}
            return spec.with_fitted(typical, f"median of {len(calibrated)} calibrated devices (spec file only)")
        key = device_key(name)
        if key not in self.devices:
            raise DeviceParamsError(f"no emulated device {short(name)}; known: "
                                    + ", ".join(EMULATED_PREFIX + k for k in sorted(self.devices)))
        return self.devices[key]


def device_key(name: str) -> str:
    """'emulated:V100', 'V100', 'v100', 'Tesla V100-PCIE-32GB' -> 'V100' (the catalogue name):
    :func:`predictor.common.gpus.canonical_gpu_type` with the ``emulated:`` prefix, its error
    raised as this module's."""
    try:
        return canonical_gpu_type(name, emulated=True)
    except UnknownGpuTypeError as exc:
        raise DeviceParamsError(f"{exc} (for emulation: emulated:<name>)") from None


# A user's GPU as NeuSight's device_configs describe one (one JSON object; GB, GB/s, MHz, GFLOP/s,
# MB); ``HalfFLOPs`` (GFLOP/s of FP16 tensor cores) is ours and optional (default: the FP32 rate).
SPEC_FILE_FIELDS = {"Device": str, "Dev_Mem": float, "Mem_Bw": float, "Num_Sm": int, "Freq": float,
                    "SingleFLOPs": float, "L2Cache": float}


def _finite(value: float) -> bool:
    """Whether a number is finite as a float (``1e400`` reads as inf; a 4,000-digit int overflows)."""
    try:
        return bool(np.isfinite(float(value)))
    except OverflowError:
        return False


def spec_from_file(path: str | Path) -> DeviceSpec:
    """A spec-only GPU from a NeuSight-style device file; errors name the file and the field."""
    path = Path(path)
    body = read_document(path, "spec file", DeviceParamsError, kind="json")
    if not isinstance(body, dict):
        raise DeviceParamsError(f"{path}: a spec file is one JSON object with fields {', '.join(SPEC_FILE_FIELDS)}")
    values = {}
    for key, kind in (SPEC_FILE_FIELDS | {"HalfFLOPs": float}).items():
        if key not in body:
            if key == "HalfFLOPs":
                continue
            raise DeviceParamsError(f"{path}: spec file lacks field {key!r} (needs {', '.join(SPEC_FILE_FIELDS)})")
        try:
            if kind is not str and (isinstance(body[key], bool) or not isinstance(body[key], (int, float, str))):
                raise TypeError
            values[key] = kind(body[key])
        except (TypeError, ValueError, OverflowError):
            raise DeviceParamsError(f"{path}: field {key!r} must be {kind.__name__}, got {short(body[key])}") from None
        if kind is not str and not (values[key] > 0 and _finite(values[key])):
            raise DeviceParamsError(f"{path}: field {key!r} must be a positive finite number, got {short(body[key])}")
    return DeviceSpec(spec_only_entry(
        path.stem, f"spec file {path} ({values['Device'][:80]})", path, sms=values["Num_Sm"],
        boost_clock_mhz=values["Freq"], fp32_tflops=values["SingleFLOPs"] / 1e3,
        fp16_tflops=values.get("HalfFLOPs", values["SingleFLOPs"]) / 1e3, memory_gb=values["Dev_Mem"],
        memory_gbs=values["Mem_Bw"], l2_mb=values["L2Cache"]))


REGIMES = ("plain", "nsys")


def regime_host_factor(params: DeviceParams, regime: str) -> float:
    """Host-time multiplier of a measurement regime: ``plain`` (no profiler: the simulator's
    truth) or ``nsys`` (Nsight Systems with per-op NVTX ranges, as the ETS traces were taken)."""
    if regime not in REGIMES:
        raise DeviceParamsError(f"unknown regime {short(regime)}; known: {', '.join(REGIMES)}")
    return params.nsys_host_factor if regime == "nsys" else 1.0


def prior_params() -> DeviceParams:
    return DeviceParams(spec_sheets(), {p: dict(v) for p, v in DEFAULT_HOST_US.items()})


def save_params(params: DeviceParams, path: str | Path = PARAMS_FILE, report: dict | None = None) -> Path:
    path = Path(path)
    body = {"format": FORMAT_VERSION, "version": params.version, "source": params.source,
            "host_us": params.host_us, "nsys_host_factor": params.nsys_host_factor,
            "devices": {k: {f: getattr(s, f) for f in FITTED_FIELDS + ("fitted",)} for k, s in params.devices.items()}}
    if report is not None:
        body["report"] = report
    path.write_text(json.dumps(body, indent=1, sort_keys=True) + "\n")
    return path


def load_params(path: str | Path | None = None) -> DeviceParams:
    """The fitted parameters (``params.json`` in the package), or the priors when none were fitted.
    Parsed once a process for the same bytes and catalogue: callers share the object (read-only)."""
    path = Path(path) if path is not None else PARAMS_FILE
    if not path.exists():
        if path == PARAMS_FILE:
            return prior_params()
        raise DeviceParamsError(f"{path}: no such device-parameter file")
    data = document_bytes(path, "device-parameter file", DeviceParamsError)
    gpus = catalog()  # one object per catalogue folder and process
    key = (path.resolve(), hashlib.sha256(data).digest())
    if _LAST_PARAMS and _LAST_PARAMS[0] == key and _LAST_PARAMS[1] is gpus:
        return _LAST_PARAMS[2]  # the same bytes against the same catalogue: parsed and checked once a run
    params = _params_of(parse_document(data, path, "device-parameter file", DeviceParamsError, kind="json"), path,
                        spec_sheets())
    _LAST_PARAMS[:] = [key, gpus, params]
    return params


_LAST_PARAMS: list = []  # [(path, SHA-256 of its bytes), the GPU catalogue it was checked against, the params]


def _params_of(body, path: Path, sheets: dict[str, DeviceSpec]) -> DeviceParams:
    """The device parameters a parsed ``params.json`` body holds, every field checked."""
    if not isinstance(body, dict):
        raise DeviceParamsError(f"{path}: a device-parameter file is one JSON object "
                                "(refit with `ets devices calibrate`)")
    if body.get("format") != FORMAT_VERSION:
        raise DeviceParamsError(f"{path}: field 'format' is {short(body.get('format'))}; this version reads "
                                f"{FORMAT_VERSION} (refit with `ets devices calibrate`)")
    names = FITTED_FIELDS + ("fitted",)
    devices = dict(sheets)  # spec-sheet values come from the catalogue; the file holds what was fitted
    entries = body.get("devices") or {}
    if not isinstance(entries, dict):
        raise DeviceParamsError(f"{path}: field 'devices' must map device names to fitted fields")
    for key, entry in entries.items():
        if key not in sheets:
            raise DeviceParamsError(f"{path}: device {short(key)} is not in the GPU catalogue; "
                                    f"known: {', '.join(sheets)}")
        missing = [n for n in names if not isinstance(entry, dict) or n not in entry]
        if missing:
            raise DeviceParamsError(f"{path}: device {key!r} lacks field(s) {', '.join(missing)}")
        devices[key] = sheets[key].with_fitted({n: entry[n] for n in FITTED_FIELDS}, str(entry["fitted"]))
    calibrated = [devices[k] for k in entries if not devices[k].fitted.startswith(UNCALIBRATED)]
    if calibrated:  # a catalogue GPU added after the fit: the calibrated devices' medians, as calibrate gives
        typical = {f: float(np.median([getattr(d, f) for d in calibrated])) for f in FITTED_FIELDS}
        for key in set(sheets) - set(entries):
            devices[key] = sheets[key].with_fitted(typical,
                                                   f"{UNCALIBRATED}: median of {len(calibrated)} calibrated devices")
    host = body.get("host_us")
    if not isinstance(host, dict) or not all(isinstance(host.get(p), dict) for p in ("forward", "backward", "update")):
        raise DeviceParamsError(f"{path}: field 'host_us' must map forward/backward/update to op-class costs")
    nsys = body.get("nsys_host_factor", 1.0)
    if not isinstance(nsys, (int, float)) or not nsys > 0:
        raise DeviceParamsError(f"{path}: field 'nsys_host_factor' must be a positive number, got {short(nsys)}")
    return DeviceParams(devices, host, str(body.get("version", "?")), str(body.get("source", "?")), float(nsys))

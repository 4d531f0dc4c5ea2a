"""Emulated GPU parameters: spec-sheet rates plus the fitted efficiency, latency and host terms.

Why: there are no GPUs on our machines, so each emulated device is a small, named parameter set
that :mod:`predictor.devices.timing` turns into kernel times and an asynchronous host/GPU
timeline. The spec-sheet numbers (peak rates, bandwidth) are fixed; the rest starts from the
priors below and is fitted by ``ets devices calibrate`` (:mod:`predictor.devices.calibrate`),
which writes ``params.json`` beside this file. That file is versioned: its ``format`` must match
:data:`FORMAT_VERSION` and every device entry must carry every field, or loading fails with a
message naming the file and the field.

Fields of a device (rates in TFLOP/s and GB/s; the dense, non-sparse tensor-core numbers):

* ``fp32_tflops``, ``tf32_tflops`` (0: no TF32), ``fp16_tflops`` (tensor cores where present,
  else the FP16/FP32 vector rate), ``mem_gbs`` — from the vendor's spec sheet (``spec``).
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

import json
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path

from simulator.gpus import UnknownGpuTypeError, canonical_gpu_type

FORMAT_VERSION = 1
PARAMS_FILE = Path(__file__).with_name("params.json")
EMULATED_PREFIX = "emulated:"
FITTED_FIELDS = ("compute_eff", "compute_half_mflop", "tensor_eff", "memory_eff", "memory_half_kb", "kernel_latency_us",
                 "host_scale")


class DeviceParamsError(ValueError):
    """A device name or parameter file that cannot be used; the message names file and field."""


@dataclass(frozen=True)
class DeviceSpec:
    name: str
    fp32_tflops: float
    tf32_tflops: float
    fp16_tflops: float
    mem_gbs: float
    spec: str
    compute_eff: float = 0.55
    compute_half_mflop: float = 20.0
    tensor_eff: float = 0.35
    memory_eff: float = 0.75
    memory_half_kb: float = 256.0
    kernel_latency_us: float = 4.0
    host_scale: float = 3.0
    fitted: str = "prior"  # what the fitted fields were fitted on, or "prior"

    @property
    def emulated_name(self) -> str:
        return EMULATED_PREFIX + self.name

    def with_fitted(self, values: dict[str, float], fitted: str) -> "DeviceSpec":
        return replace(self, **{k: float(v) for k, v in values.items()}, fitted=fitted)


# Vendor spec sheets (boost clocks, dense rates). K80: one of the board's two GK210 dies, as a
# cluster scheduler sees it. P100: SXM2. V100: SXM2 16 GB. RTX2080Ti / RTX6000: FP16 tensor rate
# with FP16 accumulate. A100: 40 GB SXM4. H100: SXM5.
SPEC_SHEETS: dict[str, DeviceSpec] = {s.name: s for s in (
    DeviceSpec("K80", 4.37, 0.0, 4.37, 240.0, "NVIDIA Tesla K80 datasheet (per GK210 die)"),
    DeviceSpec("P100", 10.6, 0.0, 21.2, 732.0, "NVIDIA Tesla P100 SXM2 datasheet"),
    DeviceSpec("P40", 11.76, 0.0, 11.76, 346.0, "NVIDIA Tesla P40 datasheet"),
    DeviceSpec("T4", 8.1, 0.0, 65.0, 320.0, "NVIDIA T4 datasheet"),
    DeviceSpec("V100", 15.7, 0.0, 125.0, 900.0, "NVIDIA V100 SXM2 datasheet"),
    DeviceSpec("RTX2080Ti", 13.4, 0.0, 107.6, 616.0, "NVIDIA Turing architecture whitepaper (RTX 2080 Ti)"),
    DeviceSpec("RTX6000", 16.3, 0.0, 130.5, 672.0, "NVIDIA Quadro RTX 6000 datasheet"),
    DeviceSpec("RTX3080Ti", 34.1, 34.1, 136.0, 912.0, "NVIDIA Ampere GA102 whitepaper (RTX 3080 Ti)"),
    DeviceSpec("A100", 19.5, 156.0, 312.0, 1555.0, "NVIDIA A100 40GB SXM datasheet"),
    DeviceSpec("H100", 67.0, 494.7, 989.4, 3350.0, "NVIDIA H100 SXM5 datasheet"),
)}

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
    class_eff: dict[str, float] = field(default_factory=dict)  # op class -> efficiency factor (1: roofline)
    version: str = "prior"
    source: str = "spec sheets and priors"

    def device(self, name: str) -> DeviceSpec:
        key = device_key(name)
        if key not in self.devices:
            raise DeviceParamsError(f"no emulated device {name!r}; known: "
                                    + ", ".join(EMULATED_PREFIX + k for k in sorted(self.devices)))
        return self.devices[key]


def device_key(name: str) -> str:
    """'emulated:V100', 'V100', 'v100', 'Tesla V100' -> 'V100' (the spec-sheet key)."""
    raw = name.removeprefix(EMULATED_PREFIX)
    if raw in SPEC_SHEETS:
        return raw
    try:
        key = canonical_gpu_type(raw)
    except UnknownGpuTypeError:
        key = raw
    if key not in SPEC_SHEETS:
        raise DeviceParamsError(f"unknown GPU type {name!r} for emulation; known: "
                                + ", ".join(EMULATED_PREFIX + k for k in SPEC_SHEETS))
    return key


def prior_params() -> DeviceParams:
    return DeviceParams(dict(SPEC_SHEETS), {p: dict(v) for p, v in DEFAULT_HOST_US.items()})


def save_params(params: DeviceParams, path: str | Path = PARAMS_FILE, report: dict | None = None) -> Path:
    path = Path(path)
    body = {"format": FORMAT_VERSION, "version": params.version, "source": params.source,
            "host_us": params.host_us, "class_eff": params.class_eff,
            "devices": {k: {f: v for f, v in asdict(s).items() if f != "name"} for k, s in params.devices.items()}}
    if report is not None:
        body["report"] = report
    path.write_text(json.dumps(body, indent=1, sort_keys=True) + "\n")
    return path


def load_params(path: str | Path | None = None) -> DeviceParams:
    """The fitted parameters (``params.json`` in the package), or the priors when none were fitted."""
    path = Path(path) if path is not None else PARAMS_FILE
    if not path.exists():
        if path == PARAMS_FILE:
            return prior_params()
        raise DeviceParamsError(f"{path}: no such device-parameter file")
    try:
        body = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise DeviceParamsError(f"{path}: not JSON ({exc.msg} at line {exc.lineno})") from None
    if body.get("format") != FORMAT_VERSION:
        raise DeviceParamsError(f"{path}: field 'format' is {body.get('format')!r}; this version reads "
                                f"{FORMAT_VERSION} (refit with `ets devices calibrate`)")
    names = [f.name for f in fields(DeviceSpec) if f.name != "name"]
    devices = {}
    for key, entry in (body.get("devices") or {}).items():
        missing = [n for n in names if n not in entry]
        if missing:
            raise DeviceParamsError(f"{path}: device {key!r} lacks field(s) {', '.join(missing)}")
        devices[key] = DeviceSpec(name=key, **{n: entry[n] for n in names})
    host = body.get("host_us")
    if not isinstance(host, dict) or not all(isinstance(host.get(p), dict) for p in ("forward", "backward", "update")):
        raise DeviceParamsError(f"{path}: field 'host_us' must map forward/backward/update to op-class costs")
    class_eff = body.get("class_eff", {})
    if not isinstance(class_eff, dict) or not all(isinstance(v, (int, float)) and v > 0 for v in class_eff.values()):
        raise DeviceParamsError(f"{path}: field 'class_eff' must map op classes to positive numbers")
    return DeviceParams(devices, host, dict(class_eff), str(body.get("version", "?")), str(body.get("source", "?")))

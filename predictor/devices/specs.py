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
* ``gemm_scale``, ``half_gemm_scale`` — multipliers of the learned kernel model's convolution and
  matmul times in fp32 and in half precision on this device, fitted on its measured iterations:
  the kernels real training runs chose (TF32 on Ampere, AMP's casts and fp32 master weights) are
  not the ones NeuSight timed; 1 for a GPU without measured iterations.
* ``host_scale`` — host time per op relative to the measured host durations of the real ETS T4
  ops (``host_us`` in the file, by phase and op class), which cover the op's own range but not
  the Python between ops; the prior of 3 says so, the fit decides.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from predictor.gpus import UnknownGpuTypeError, canonical_gpu_type
from predictor.inputs import InputError, load_json, read_bytes, short

FORMAT_VERSION = 1
PARAMS_FILE = Path(__file__).with_name("params.json")
EMULATED_PREFIX = "emulated:"
FITTED_FIELDS = ("compute_eff", "compute_half_mflop", "tensor_eff", "memory_eff", "memory_half_kb", "kernel_latency_us",
                 "host_scale", "gemm_scale", "half_gemm_scale")


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
    sms: int = 0  # streaming multiprocessors
    clock_mhz: float = 0.0  # boost clock
    l2_mb: float = 0.0
    mem_gb: float = 0.0
    compute_eff: float = 0.55
    compute_half_mflop: float = 20.0
    tensor_eff: float = 0.35
    memory_eff: float = 0.75
    memory_half_kb: float = 256.0
    kernel_latency_us: float = 4.0
    host_scale: float = 3.0
    gemm_scale: float = 1.0
    half_gemm_scale: float = 1.0
    fitted: str = "prior"  # what the fitted fields were fitted on, or "prior"

    @property
    def emulated_name(self) -> str:
        return EMULATED_PREFIX + self.name

    def with_fitted(self, values: dict[str, float], fitted: str) -> "DeviceSpec":
        return replace(self, **{k: float(v) for k, v in values.items()}, fitted=fitted)


SPEC_FIELDS = ("fp32_tflops", "tf32_tflops", "fp16_tflops", "mem_gbs", "spec", "sms", "clock_mhz", "l2_mb", "mem_gb")

# Spec sheets (boost clocks, dense rates). Where NeuSight measured kernels on a board
# (calibration/neusight/device_configs/<board>.json: SMs, MHz, FP32 GFLOP/s, GB/s, L2 MB, GB),
# the entry is that board, so the kernel model learns from the part that was timed:
# P100 = P100-PCIE-16GB, V100 = V100-PCIE-32GB, A100 = A100-PCIE-40GB, A100-80GB = A100 80GB PCIe,
# T4, P4 (NeuSight counts 40 SMs of 64 lanes; GP104 has 20 SMs of 128, used here), H100 = H100 80GB
# HBM3 (SXM5) and L4 (spec files only: no kernels measured). Tensor rates (FP16 with FP32
# accumulate, TF32) from the vendors' datasheets; parts without fast FP16 repeat the FP32 rate.
# K80: one of the board's two GK210 dies, as a cluster scheduler sees it. RTX2080Ti / RTX6000 /
# RTX3080Ti: the architecture whitepapers (FP16 tensor rate with FP16 accumulate).
SPEC_SHEETS: dict[str, DeviceSpec] = {s.name: s for s in (
    DeviceSpec("K80", 4.37, 0.0, 4.37, 240.0, "NVIDIA Tesla K80 datasheet (per GK210 die)", 13, 875.0, 0.75, 12.0),
    DeviceSpec("P4", 5.7, 0.0, 5.7, 192.0, "NeuSight device_configs/Tesla_P4.json; NVIDIA Tesla P4 datasheet",
               20, 1113.0, 2.0, 8.0),
    DeviceSpec("P100", 9.52, 0.0, 19.0, 732.0, "NeuSight device_configs/Tesla_P100-PCIE-16GB.json; "
               "NVIDIA Tesla P100 PCIe datasheet (boost 1329 MHz; the NeuSight file lists 1380)", 56, 1329.0, 4.0, 16.0),
    DeviceSpec("P40", 11.76, 0.0, 11.76, 346.0, "NVIDIA Tesla P40 datasheet", 30, 1531.0, 3.0, 24.0),
    DeviceSpec("T4", 8.14, 0.0, 65.0, 320.0, "NeuSight device_configs/Tesla_T4.json; NVIDIA T4 datasheet (16 GB)",
               40, 1590.0, 4.0, 16.0),
    DeviceSpec("V100", 14.03, 0.0, 112.0, 900.0, "NeuSight device_configs/Tesla_V100-PCIE-32GB.json; "
               "NVIDIA V100 PCIe datasheet", 80, 1370.0, 6.0, 32.0),
    DeviceSpec("RTX2080Ti", 13.4, 0.0, 107.6, 616.0, "NVIDIA Turing architecture whitepaper (RTX 2080 Ti)",
               68, 1545.0, 5.5, 11.0),
    DeviceSpec("RTX6000", 16.3, 0.0, 130.5, 672.0, "NVIDIA Quadro RTX 6000 datasheet", 72, 1770.0, 6.0, 24.0),
    DeviceSpec("RTX3080Ti", 34.1, 34.1, 136.0, 912.0, "NVIDIA Ampere GA102 whitepaper (RTX 3080 Ti)",
               80, 1665.0, 6.0, 12.0),
    DeviceSpec("A100", 19.49, 156.0, 312.0, 1555.0, "NeuSight device_configs/NVIDIA_A100-PCIE-40GB.json; "
               "NVIDIA A100 datasheet", 108, 1410.0, 40.0, 40.0),
    DeviceSpec("A100-80GB", 19.49, 156.0, 312.0, 1935.0, "NeuSight device_configs/NVIDIA_A100_80GB_PCIe.json; "
               "NVIDIA A100 datasheet", 108, 1410.0, 40.0, 80.0),
    DeviceSpec("L4", 31.33, 120.0, 121.0, 300.0, "NeuSight device_configs/NVIDIA_L4.json; NVIDIA L4 datasheet",
               60, 2040.0, 48.0, 24.0),
    DeviceSpec("H100", 66.91, 494.7, 989.4, 3430.0, "NeuSight device_configs/NVIDIA_H100_80GB_HBM3.json; "
               "NVIDIA H100 SXM5 datasheet", 132, 1980.0, 50.0, 80.0),
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
    """'emulated:V100', 'V100', 'v100', 'Tesla V100' -> 'V100' (the spec-sheet key)."""
    raw = name.removeprefix(EMULATED_PREFIX)
    by_upper = {k.upper(): k for k in SPEC_SHEETS}
    if raw.strip().upper() in by_upper:
        return by_upper[raw.strip().upper()]
    try:
        key = canonical_gpu_type(raw)
    except UnknownGpuTypeError:
        key = raw
    if key not in SPEC_SHEETS:
        raise DeviceParamsError(f"unknown GPU type {short(name)} for emulation; known: "
                                + ", ".join(EMULATED_PREFIX + k for k in SPEC_SHEETS))
    return key


# A user's GPU as NeuSight's device_configs describe one (one JSON object; GB, GB/s, MHz, GFLOP/s,
# MB); ``HalfFLOPs`` (GFLOP/s of FP16 tensor cores) is ours and optional (default: the FP32 rate).
SPEC_FILE_FIELDS = {"Device": str, "Dev_Mem": float, "Mem_Bw": float, "Num_Sm": int, "Freq": float,
                    "SingleFLOPs": float, "L2Cache": float}


def _json_file(path: Path, what: str):
    """A JSON document from ``path``, read within the input limits (:mod:`predictor.inputs`: a FIFO,
    a device, an over-size file or nesting past the depth limit refused); errors name the file."""
    try:
        return load_json(read_bytes(path, what), path)
    except InputError as exc:
        raise DeviceParamsError(str(exc)) from None
    except OSError as exc:
        raise DeviceParamsError(f"{path}: cannot read the {what} ({exc.strerror or type(exc).__name__})") from None
    except UnicodeDecodeError as exc:
        raise DeviceParamsError(f"{path}: not UTF-8 JSON text ({exc.reason} at byte {exc.start:,})") from None
    except json.JSONDecodeError as exc:
        raise DeviceParamsError(f"{path}: not JSON ({exc.msg} at line {exc.lineno})") from None


def _finite(value: float) -> bool:
    """Whether a number is finite as a float (``1e400`` reads as inf; a 4,000-digit int overflows)."""
    try:
        return bool(np.isfinite(float(value)))
    except OverflowError:
        return False


def spec_from_file(path: str | Path) -> DeviceSpec:
    """A spec-only GPU from a NeuSight-style device file; errors name the file and the field."""
    path = Path(path)
    body = _json_file(path, "spec file")
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
    fp32 = values["SingleFLOPs"] / 1e3
    return DeviceSpec(path.stem, fp32, 0.0, values.get("HalfFLOPs", values["SingleFLOPs"]) / 1e3, values["Mem_Bw"],
                      f"spec file {path} ({values['Device'][:80]})", values["Num_Sm"], values["Freq"], values["L2Cache"],
                      values["Dev_Mem"])


REGIMES = ("plain", "nsys")


def regime_host_factor(params: DeviceParams, regime: str) -> float:
    """Host-time multiplier of a measurement regime: ``plain`` (no profiler: the simulator's
    truth) or ``nsys`` (Nsight Systems with per-op NVTX ranges, as the ETS traces were taken)."""
    if regime not in REGIMES:
        raise DeviceParamsError(f"unknown regime {short(regime)}; known: {', '.join(REGIMES)}")
    return params.nsys_host_factor if regime == "nsys" else 1.0


def prior_params() -> DeviceParams:
    return DeviceParams(dict(SPEC_SHEETS), {p: dict(v) for p, v in DEFAULT_HOST_US.items()})


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
    """The fitted parameters (``params.json`` in the package), or the priors when none were fitted."""
    path = Path(path) if path is not None else PARAMS_FILE
    if not path.exists():
        if path == PARAMS_FILE:
            return prior_params()
        raise DeviceParamsError(f"{path}: no such device-parameter file")
    body = _json_file(path, "device-parameter file")
    if not isinstance(body, dict):
        raise DeviceParamsError(f"{path}: a device-parameter file is one JSON object (refit with `ets devices calibrate`)")
    if body.get("format") != FORMAT_VERSION:
        raise DeviceParamsError(f"{path}: field 'format' is {short(body.get('format'))}; this version reads "
                                f"{FORMAT_VERSION} (refit with `ets devices calibrate`)")
    names = FITTED_FIELDS + ("fitted",)
    devices = dict(SPEC_SHEETS)  # spec-sheet values live in code; the file holds what was fitted
    entries = body.get("devices") or {}
    if not isinstance(entries, dict):
        raise DeviceParamsError(f"{path}: field 'devices' must map device names to fitted fields")
    for key, entry in entries.items():
        if key not in SPEC_SHEETS:
            raise DeviceParamsError(f"{path}: device {short(key)} has no spec sheet; known: {', '.join(SPEC_SHEETS)}")
        missing = [n for n in names if not isinstance(entry, dict) or n not in entry]
        if missing:
            raise DeviceParamsError(f"{path}: device {key!r} lacks field(s) {', '.join(missing)}")
        devices[key] = SPEC_SHEETS[key].with_fitted({n: entry[n] for n in FITTED_FIELDS}, str(entry["fitted"]))
    host = body.get("host_us")
    if not isinstance(host, dict) or not all(isinstance(host.get(p), dict) for p in ("forward", "backward", "update")):
        raise DeviceParamsError(f"{path}: field 'host_us' must map forward/backward/update to op-class costs")
    nsys = body.get("nsys_host_factor", 1.0)
    if not isinstance(nsys, (int, float)) or not nsys > 0:
        raise DeviceParamsError(f"{path}: field 'nsys_host_factor' must be a positive number, got {short(nsys)}")
    return DeviceParams(devices, host, str(body.get("version", "?")), str(body.get("source", "?")), float(nsys))

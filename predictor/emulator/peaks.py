"""Peak compute rate and memory bandwidth of a device, and the analytical op time they imply.

Why: a prediction has to carry to ops larger than any seen in training and to devices never
trained on. A bounded efficiency of an analytical estimate carries there; a raw or log time does
not (NeuSight's insight; research/predictors.md). The estimate of an op is

    time = max(FLOPs / peak FLOP/s of its precision and op class, bytes / peak bandwidth)

(0 for an op that launches no kernel: a view moves no bytes, whatever its shapes would copy),
and no op runs faster than it, so a model that predicts time = estimate / efficiency with an
efficiency in (0, 1] can never predict an op faster than its roofline.

Where the peaks come from, and what they are:
* a GPU: its catalogue entry (``predictor/common/gpu_catalog``; **spec-derived**). GEMM-like ops (conv,
  matmul, recurrent) run at the fastest unit their dtype may use: float32 at max(FP32, TF32)
  (cuDNN's default for convolutions), float16 / bfloat16 at the tensor-core rate; other ops at
  the FP32 rate, twice that for half types (paired half arithmetic); float64 at the FP32 rate (an
  upper bound, so the estimate stays a lower bound).
* a CPU: no spec sheet says what one machine's cores sustain, so it is **measured** once on the
  machine (:func:`measure_cpu`: a float32 GEMM and a large copy, best of a few repeats) and
  recorded with the dataset (``peaks.json`` beside its Parquet files: ``ets dataset peaks``). A dataset
  whose CPU has no recorded peaks is refused with the command that records them.
"""

from __future__ import annotations

import json
import math
import platform
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from predictor.common.documents import read_document
from predictor.common.gpus import UnknownGpuTypeError, entry
from predictor.common.inputs import InputError, short
from predictor.common.outputs import write_text
from predictor.emulator.capture.costs import GEMM_CLASSES, kernel_free, op_class

PEAKS_FILE = "peaks.json"
RECORD_COMMAND = "ets dataset peaks DATASET_DIR"


@dataclass(frozen=True)
class Peaks:
    """A device's ceilings: FLOP/s of GEMM-like ops and of the others per dtype, bytes/s."""

    device: str
    gemm_flops: dict[str, float]  # dtype -> FLOP/s of conv / matmul / recurrent ops
    other_flops: dict[str, float]  # dtype -> FLOP/s of every other op
    bytes_per_s: float
    origin: str  # "spec-derived: ..." or "measured: ..."

    def estimate_us(self, ops: list[str] | np.ndarray, flops: np.ndarray, nbytes: np.ndarray,
                    dtypes: list[str] | np.ndarray) -> np.ndarray:
        """The analytical time (µs) of each op: max(FLOPs / rate, bytes / bandwidth); 0 for an op
        with neither FLOPs nor bytes (nothing to anchor it to) and for one that launches no kernel
        (a view: its truth is no time on a GPU, and a bound at its would-be copy was no bound)."""
        flops, nbytes = np.asarray(flops, dtype=float), np.asarray(nbytes, dtype=float)
        pairs = pd.MultiIndex.from_arrays([pd.Index(ops, dtype=object).astype(str),
                                           pd.Index(dtypes, dtype=object).astype(str)])
        codes, unique = pairs.factorize()  # a dataset has millions of ops but few (op, dtype) pairs
        rate = np.array([self.rate(o, d) for o, d in unique], dtype=float)[codes]
        moves = np.array([not kernel_free(o) for o, _ in unique], dtype=bool)[codes]
        return np.maximum(flops / rate, nbytes / self.bytes_per_s) * 1e6 * moves

    def rate(self, op: str, dtype: str) -> float:
        """FLOP/s of ``op`` in ``dtype`` (float32's rate for a dtype the device has no entry for)."""
        table = self.gemm_flops if op_class(op) in GEMM_CLASSES else self.other_flops
        return table.get(dtype, table["float32"])

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, body: object, where: str) -> Peaks:
        """Peaks from their JSON form; every field checked, a bad one named with ``where``."""
        if not isinstance(body, dict):
            raise InputError(f"{where}: expected an object, got {type(body).__name__}")
        for key, kind in (("device", str), ("origin", str), ("gemm_flops", dict), ("other_flops", dict)):
            if not isinstance(body.get(key), kind):
                raise InputError(f"{where}: field {key!r} missing or not a {kind.__name__}")
        rates = {}
        for key in ("gemm_flops", "other_flops"):
            if "float32" not in body[key]:
                raise InputError(f"{where}: field {key!r} lacks 'float32'")
            rates[key] = {str(d): _positive(v, f"{where}: field {key}.{d}") for d, v in body[key].items()}
        return cls(body["device"], rates["gemm_flops"], rates["other_flops"],
                   _positive(body.get("bytes_per_s"), f"{where}: field 'bytes_per_s'"), body["origin"])


def _positive(value: object, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise InputError(f"{where}: expected a positive number, got {short(repr(value))}")
    return float(value)


def gpu_peaks(gpu: str) -> Peaks:
    """A GPU's peaks from its catalogue entry (any of its names, ``emulated:`` allowed)."""
    spec = entry(gpu.removeprefix("emulated:"))
    fp32 = spec.fp32_tflops * 1e12
    gemm = {"float32": max(fp32, spec.tf32_tflops * 1e12), "float64": fp32,
            "float16": max(fp32, spec.fp16_tflops * 1e12),
            "bfloat16": max(fp32, spec.bf16_tflops * 1e12)}
    other = {"float32": fp32, "float64": fp32, "float16": 2 * fp32, "bfloat16": 2 * fp32}
    return Peaks(spec.name, gemm, other, spec.memory_gbs * 1e9,
                 f"spec-derived: catalogue entry {spec.name} ({spec.source})")


def measure_cpu(repeats: int = 5, gemm_size: int = 1024, copy_mb: int = 256) -> Peaks:
    """This machine's CPU peaks with torch's current thread count: the best of ``repeats`` float32
    GEMMs of ``gemm_size``² (2·n³ FLOPs) and copies of ``copy_mb`` MB (read + write counted)."""
    import torch

    a = torch.randn(gemm_size, gemm_size)
    b = torch.randn(gemm_size, gemm_size)
    torch.mm(a, b)  # warm-up: thread pool, caches
    gemm = max(2.0 * gemm_size ** 3 / _best(lambda: torch.mm(a, b), repeats), 1.0)
    src = torch.empty(copy_mb * 2 ** 20 // 4, dtype=torch.float32).fill_(1.0)
    dst = torch.empty_like(src)
    dst.copy_(src)
    bandwidth = 2.0 * src.numel() * 4 / _best(lambda: dst.copy_(src), repeats)
    rates = {"float32": gemm}
    what = (f"measured: {platform.processor() or platform.machine()}, {torch.get_num_threads()} threads, "
            f"{time.strftime('%Y-%m-%d')}: float32 GEMM {gemm_size}², copy {copy_mb} MB, best of {repeats}")
    return Peaks("cpu", dict(rates), dict(rates), bandwidth, what)


def _best(call, repeats: int) -> float:
    best = math.inf
    for _ in range(max(1, repeats)):
        start = time.perf_counter()
        call()
        best = min(best, time.perf_counter() - start)
    return max(best, 1e-9)


def record(directory: str | Path, peaks: Peaks) -> Path:
    """Record ``peaks`` in a dataset directory's ``peaks.json`` (other devices' entries kept)."""
    path = Path(directory) / PEAKS_FILE
    table = _read(path) if path.exists() else {}
    table[peaks.device] = peaks.to_json()
    return write_text(path, json.dumps(table, indent=1, sort_keys=True) + "\n")  # never through a planted link


def _read(path: Path) -> dict:
    table = read_document(path, "peaks file", InputError, kind="json")  # bounded depth: a stranger's file
    if not isinstance(table, dict):
        raise InputError(f"{path}: expected an object of devices, got {type(table).__name__}")
    return table


def recorded(directory: str | Path, device: str) -> Peaks | None:
    """The peaks ``directory``'s ``peaks.json`` records for ``device``, None when it has none."""
    path = Path(directory) / PEAKS_FILE
    if not path.exists():
        return None
    table = _read(path)
    return Peaks.from_json(table[device], f"{path}: device {device!r}") if device in table else None


def for_device(device: str, directory: str | Path | None = None) -> Peaks:
    """The peaks of a dataset's ``device``: recorded in ``directory``'s ``peaks.json`` when they
    are there, else the catalogue's for a GPU (``emulated:T4``, ``cuda:Tesla T4``, ``T4``); a
    CPU without a record is refused with the command that records it."""
    found = recorded(directory, device) if directory is not None else None
    if found is not None:
        return found
    name = device.removeprefix("cuda:")
    if device == "cpu" or device.startswith("cpu:"):
        where = f"dataset {directory}" if directory is not None else "this dataset"
        raise InputError(f"{where}: device {device!r} has no recorded peaks; on the machine that measured "
                         f"it run `{RECORD_COMMAND}` (a GEMM and a copy, a few seconds), "
                         f"or train with --target-transform log")
    try:
        return gpu_peaks(name)
    except UnknownGpuTypeError as exc:
        raise InputError(f"device {device!r}: no peaks: {exc.brief}; add the GPU to the catalogue "
                         f"(predictor/common/gpu_catalog/) or train with --target-transform log") from None

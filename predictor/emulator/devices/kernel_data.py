"""Real kernel measurements as one table of kernel *problems*, for the learned kernel-time model.

Why: the kernel model (:mod:`predictor.emulator.devices.kernels`) must learn from every real kernel time
we hold and predict GPUs it never saw, so each measurement is reduced to the same device-free
description of the work — op class, FLOPs, bytes, output elements, reduction length, batch count,
precision — that :mod:`predictor.emulator.devices.problems` derives from our own op sequences.

Sources:

* NeuSight (``calibration/neusight/kernels/<GPU>/<op>.csv``): one fp32 forward op timed alone with
  CUDA events (``latency_ms``). Those times include a per-call floor of host dispatch and event
  overhead (the fastest rows of every file sit on it whatever their size; docs/gpus.md), so rows below
  ``FLOOR_FACTOR`` × the file's 1st-percentile latency are marked ``censored`` and kept out of
  fitting and of the error figures: their kernel time is unknown, only bounded.
* ETS traces (``ets_traces/<GPU>/*.csv``): Nsight Systems kernel times (``kduration``) of real
  training iterations on T4 and RTX 2080 Ti, fp32 and fp16: forward and backward convolutions
  and forward linear layers (the rows whose ``params`` hold the full dimensions). No floor: these
  are kernel times, not call times. Backward convolutions are kept apart (``phase`` backward) to
  check the backward mapping out of sample.

Columns: ``device`` (spec-sheet key), ``dataset`` (neusight | ets), ``op`` (the measured op),
``cls``, ``phase``, ``flops``, ``bytes``, ``out``, ``red``, ``batches``, ``in_elems`` and ``w_elems``
(input and weight elements of GEMM-like ops, for the backward mapping; 0 elsewhere), ``half`` (bool),
``training`` (bool: a kernel of a training iteration, timed by Nsight Systems — the ETS rows;
NeuSight's are single forward calls timed with CUDA events, whose kernels and clocks differ:
docs/gpus.md compares them on the same T4), ``measured_us``,
``censored`` (bool), ``origin`` (file:line). FLOPs and bytes follow
:mod:`predictor.emulator.capture.costs` (a multiply-add is 2 FLOPs; compulsory traffic).
"""

from __future__ import annotations

import io
import math
from pathlib import Path

import numpy as np
import pandas as pd

from predictor.common.inputs import InputError, check_width, read_bytes, short
from predictor.emulator.capture.costs import _ELEMENTWISE_COST
from predictor.emulator.capture.ets_csv import ETS_DEVICES

FLOOR_FACTOR = 2.0
NEUSIGHT_DEVICES = {"Tesla_T4": "T4", "Tesla_P4": "P4", "Tesla_P100-PCIE-16GB": "P100",
                    "Tesla_V100-PCIE-32GB": "V100", "NVIDIA_A100-PCIE-40GB": "A100",
                    "NVIDIA_A100_80GB_PCIe": "A100-80GB"}
BINARY = ("add", "mul", "div", "pow")
SCALAR = ("addu", "mulu", "divu", "powu")
UNARY = ("relu", "gelu", "tanh")
COLUMNS = ("device", "dataset", "op", "cls", "phase", "kernel", "math", "flops", "bytes", "out", "red", "batches",
           "in_elems", "w_elems", "half", "training", "measured_us", "censored", "origin")
# An ETS row faster than its roofline by more than this (cuDNN's Winograd 3x3 convolutions beat
# the direct FLOP count by up to 2.25x) did not run its own GEMM: the trace attributed the kernel
# to a neighbouring row (seen on linear rows: the same layer at 4 µs and 63 µs, 35 TFLOP/s on a
# 8 TFLOP/s T4). Such rows are excluded and counted in ``attrs["implausible"]``.
MAX_ROOFLINE_SPEEDUP = 2.5
_SIZE_COLUMNS = {"conv": ("B", "Input_Channel", "Output_Channel", "Kernel_Szie", "Input_Size", "Stride", "Padding"),
                 "linear": ("B", "M", "N", "K"), "bmm": ("B", "M", "N", "K")}


def read_table(path: Path, columns: tuple[str, ...], what: str = "kernel-measurement file",
               dtype: type | None = None) -> pd.DataFrame:
    """A CSV file read within the input limits (a FIFO, a device, an over-size file or line refused),
    its header checked for ``columns``; every failure an InputError naming the file."""
    try:
        data = read_bytes(path, what)
        end = data.find(b"\n")
        check_width((data if end < 0 else data[:end]).count(b",") + 1, f"{path}: line 1")
        raw = pd.read_csv(io.BytesIO(data), dtype=dtype)
    except (OSError, pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as exc:
        raise InputError(f"{path}: cannot read ({str(exc)[:200]})") from None
    missing = [c for c in columns if c not in raw.columns]
    if missing:
        raise InputError(f"{path}: line 1: header lacks column(s) {', '.join(missing)}")
    return raw


def _read_csv(path: Path, columns: tuple[str, ...]) -> pd.DataFrame:
    raw = read_table(path, columns)
    out = raw[list(columns)].apply(pd.to_numeric, errors="coerce")
    bad = ~np.isfinite(out.to_numpy(dtype=float)) | (out.to_numpy(dtype=float) <= 0)
    if "Padding" in columns:  # padding 0 is valid
        bad[:, columns.index("Padding")] = ~np.isfinite(out["Padding"].to_numpy(dtype=float)) | (out["Padding"] < 0)
    if bad.any():
        row, col = map(int, np.argwhere(bad)[0])
        raise InputError(f"{path}: line {row + 2}: column {columns[col]!r}: expected a positive number, "
                         f"got {short(raw[columns[col]].iloc[row])}")
    out["origin"] = [f"{path}:{i + 2}" for i in range(len(out))]
    return out


def _neusight_problems(op: str, d: pd.DataFrame) -> pd.DataFrame:
    """NeuSight size columns -> problem columns (fp32, forward)."""
    e = 4.0
    if op == "conv":
        b, ci, co, k, s, st, pad = (d[c].to_numpy(dtype=float) for c in _SIZE_COLUMNS["conv"])
        p = np.floor((s + 2 * pad - k) / st) + 1
        out = b * co * p * p
        red = ci * k * k
        return pd.DataFrame({"cls": "conv", "flops": 2 * out * red,
                             "bytes": e * (b * ci * s * s + co * ci * k * k + out),
                             "out": out, "red": red, "batches": 1.0, "in_elems": b * ci * s * s, "w_elems": co * red})
    if op in ("linear", "bmm"):
        b, m, n, k = (d[c].to_numpy(dtype=float) for c in _SIZE_COLUMNS[op])
        out = b * m * k
        if op == "linear":  # (B, M, N) x W(K, N)^T + bias
            return pd.DataFrame({"cls": "matmul", "flops": 2 * out * n + out,
                                 "bytes": e * (b * m * n + k * n + k + out),
                                 "out": out, "red": n, "batches": 1.0, "in_elems": b * m * n, "w_elems": k * n})
        return pd.DataFrame({"cls": "matmul", "flops": 2 * out * n, "bytes": e * (b * m * n + b * n * k + out),
                             "out": out, "red": n, "batches": b, "in_elems": b * m * n, "w_elems": b * n * k})
    b, h = d["B"].to_numpy(dtype=float), d["H"].to_numpy(dtype=float)
    n = b * h
    zero = np.zeros(len(n))
    if op == "ln":
        return pd.DataFrame({"cls": "norm", "flops": 5 * n, "bytes": e * (2 * n + 2 * h), "out": n, "red": h,
                             "batches": 1.0, "in_elems": zero, "w_elems": zero})
    if op == "softmax":
        return pd.DataFrame({"cls": "softmax", "flops": 5 * n, "bytes": e * 2 * n, "out": n, "red": h, "batches": 1.0,
                             "in_elems": zero, "w_elems": zero})
    base = op.removesuffix("u")
    operands = 3 if op in BINARY else 2
    return pd.DataFrame({"cls": "elementwise", "flops": float(_ELEMENTWISE_COST.get(base, 1)) * n,
                         "bytes": e * operands * n, "out": n, "red": 1.0, "batches": 1.0, "in_elems": zero,
                         "w_elems": zero})


def load_neusight(root: str | Path) -> pd.DataFrame:
    """Every NeuSight kernel file under ``root`` (the ``kernels`` folder) as problem rows."""
    root = Path(root)
    if not root.is_dir():
        raise InputError(f"{root}: no such folder (expected calibration/neusight/kernels)")
    frames = []
    for folder in sorted(p for p in root.iterdir() if p.is_dir()):
        if folder.name not in NEUSIGHT_DEVICES:
            raise InputError(f"{folder}: unknown GPU folder; known: {', '.join(NEUSIGHT_DEVICES)}")
        for path in sorted(folder.glob("*.csv")):
            op = path.stem
            sizes = _SIZE_COLUMNS.get(op, ("B", "H"))
            d = _read_csv(path, ("latency_ms",) + sizes)
            probs = _neusight_problems(op, d)
            us = d["latency_ms"].to_numpy(dtype=float) * 1e3
            floor = float(np.percentile(us, 1))
            probs = probs.assign(device=NEUSIGHT_DEVICES[folder.name], dataset="neusight", op=op, phase="forward",
                                 kernel="forward", math="fp32", half=False, training=False, measured_us=us,
                                 censored=us < FLOOR_FACTOR * floor, origin=d["origin"].to_numpy())
            frames.append(probs)
    if not frames:
        raise InputError(f"{root}: no kernel CSV files")
    return pd.concat(frames, ignore_index=True)[list(COLUMNS)]


def _ets_conv(p: list[int]) -> dict | None:
    if len(p) < 17 or min(p[:9]) <= 0:
        return None
    n, c, h, w, k, pp, q, r, s = p[:9]
    groups, eb = max(p[15], 1), p[16]
    out = n * k * pp * q
    red = c // groups * r * s
    return {"cls": "conv", "flops": 2.0 * out * red, "bytes": float(eb) * (n * c * h * w + k * red + out),
            "out": float(out), "red": float(red), "batches": 1.0, "in_elems": float(n * c * h * w),
            "w_elems": float(k * red), "eb": eb}


def _ets_linear(p: list[int]) -> dict | None:
    if len(p) < 30:
        return None
    x, wt = [v for v in p[1:10] if v > 0], [v for v in p[11:20] if v > 0]
    if len(wt) != 2 or not x or x[-1] != wt[1]:
        return None
    eb = p[0]
    rows = math.prod(x[:-1])
    out = rows * wt[0]
    return {"cls": "matmul", "flops": 2.0 * out * wt[1] + out,
            "bytes": float(eb) * (rows * wt[1] + wt[0] * wt[1] + out),
            "out": float(out), "red": float(wt[1]), "batches": 1.0, "in_elems": float(rows * wt[1]),
            "w_elems": float(wt[0] * wt[1]), "eb": eb}


def load_ets(root: str | Path) -> pd.DataFrame:
    """Convolution and linear rows of the real ETS traces under ``root`` (``T4/``, ``2080Ti/``)."""
    from predictor.emulator.capture import ets_csv

    root = Path(root)
    rows = []
    for folder, device in ETS_DEVICES.items():
        if not (root / folder).is_dir():
            continue
        trace = ets_csv.load_many(root / folder)
        for r in trace.itertuples():
            if r.dtype not in ("float32", "float16") or r.duration_us <= 0:
                continue
            prob = _ets_conv(list(r.params)) if r.op == "conv2d" else (
                _ets_linear(list(r.params)) if r.op == "linear" and r.phase == "forward" else None)
            if prob is None or prob["eb"] != (2 if r.dtype == "float16" else 4):
                continue
            del prob["eb"]
            rows.append(prob | {"device": device, "dataset": "ets", "op": r.op, "phase": r.phase,
                                # a backward row is grad-input + grad-weight: checked, not fitted
                                "kernel": "forward" if r.phase == "forward" else "backward",
                                "math": "fp16" if r.dtype == "float16" else "fp32", "half": r.dtype == "float16",
                                "training": True, "measured_us": r.duration_us,
                                "censored": False, "origin": r.source})
    if not rows:
        raise InputError(f"{root}: no ETS convolution or linear rows (expected T4/ and 2080Ti/ folders of CSVs)")
    return pd.DataFrame(rows)[list(COLUMNS)]


def drop_implausible(rows: pd.DataFrame, specs: dict) -> pd.DataFrame:
    """Rows no faster than ``MAX_ROOFLINE_SPEEDUP`` x their roofline; the count removed in attrs."""
    from predictor.emulator.devices.kernels import roofline_us

    keep = np.ones(len(rows), dtype=bool)
    for device, idx in rows.groupby("device").indices.items():
        part = rows.iloc[idx]
        keep[idx] = part["measured_us"].to_numpy() * MAX_ROOFLINE_SPEEDUP >= roofline_us(part, specs[device])
    out = rows[keep].reset_index(drop=True)
    out.attrs["implausible"] = int((~keep).sum())
    return out

"""Kernel time learned from real kernels: the achieved fraction of the roofline, from the
problem's shape and the device's spec sheet.

Why: a hand-set roofline efficiency per device was 32 % off the real T4 kernels and cannot speak
for a GPU nobody measured. Following NeuSight (ASPLOS'25), the model predicts a *bounded*
quantity — how far a kernel stays from its roofline, log(t / t_roofline) — from features that
exist for any GPU with a spec sheet (SMs, clock, bandwidth, peak FLOP/s, L2), so a GPU known
only by its spec sheet still gets a prediction (labelled ``spec-derived``), and a measured one is
checked leave-one-GPU-out.

Problems (rows of :mod:`predictor.devices.kernel_data` at fit time, of
:mod:`predictor.devices.problems` at emulation time): ``cls``, ``flops``, ``bytes``, ``out``
(output elements), ``red`` (reduction length), ``batches``, ``half``, ``training``.

Roofline: t_roof = max(flops / peak, bytes / bandwidth); peak is the FP16 tensor rate for
half-precision GEMMs and convolutions, else FP32 (NeuSight's A100 convolutions ran FP32 SIMT
kernels — sgemm, scudnn, Winograd — not TF32 ones, so the TF32 rate is not their roofline).

``training`` tells the two measurement regimes apart (see :mod:`predictor.devices.kernel_data`);
emulation asks for training-iteration kernels (1).

Features (all logs base 10): t_roof, flops, bytes, out, red, batches; arithmetic intensity over
the device's ridge point; GEMM tiles (128 × 128 output blocks) per SM and the last wave's fill;
memory-bound thread blocks per SM; the working set over L2; SMs, clock, bandwidth, peak, L2;
half precision; the op class (within a group). One gradient-boosted tree ensemble (LightGBM) per
group — ``gemm`` (conv, matmul) and ``memory`` (elementwise, norm, softmax, pool) — chosen over a
small MLP by leave-one-GPU-out error (``experiments/kernel_model.py`` measures both). Trees cannot
leave the range of fractions seen in training, which is the safe failure for a spec-only GPU.

The fitted model is saved as LightGBM's own text format inside one JSON file
(``kernel_model.json`` beside this module), with the GPUs it was trained on.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np
import pandas as pd

from predictor.devices.specs import DeviceSpec
from predictor.inputs import InputError, load_json, read_bytes, short

MODEL_FILE = Path(__file__).with_name("kernel_model.json")
FORMAT = 1
GROUPS: dict[str, tuple[str, ...]] = {"gemm": ("conv", "matmul"), "memory": ("elementwise", "norm", "softmax", "pool")}
TILE = 128 * 128
MEMORY_BLOCK = 256 * 4  # elements per thread block of a vectorised element-wise kernel
FEATURES = ("log_roof", "log_flops", "log_bytes", "log_out", "log_red", "log_batches", "log_intensity_ridge",
            "log_tiles_per_sm", "last_wave_fill", "log_blocks_per_sm", "log_bytes_l2", "log_sms", "log_clock",
            "log_bw", "log_peak", "log_l2", "half", "training", "cls_code")
PARAMS = {"objective": "l2", "learning_rate": 0.1, "num_leaves": 63, "min_data_in_leaf": 20,
          "feature_fraction": 0.9, "bagging_fraction": 0.8, "bagging_freq": 1, "lambda_l2": 1.0,
          "verbose": -1, "seed": 0, "deterministic": True, "num_threads": 2}
ROUNDS = 600


class KernelModelError(ValueError):
    """A kernel-model file that cannot be used; the message names the file and the field."""


def group_of(cls: str) -> str | None:
    for group, classes in GROUPS.items():
        if cls in classes:
            return group
    return None


def peak_tflops(spec: DeviceSpec, cls: np.ndarray, half: np.ndarray) -> np.ndarray:
    return np.where(np.isin(cls, GROUPS["gemm"]) & half, spec.fp16_tflops, spec.fp32_tflops)


def roofline_us(problems: pd.DataFrame, spec: DeviceSpec) -> np.ndarray:
    cls = problems["cls"].to_numpy()
    peak = peak_tflops(spec, cls, problems["half"].to_numpy(bool))
    compute = problems["flops"].to_numpy(float) / (peak * 1e6)
    memory = problems["bytes"].to_numpy(float) / (spec.mem_gbs * 1e3)
    return np.maximum(np.maximum(compute, memory), 1e-3)


def features(problems: pd.DataFrame, spec: DeviceSpec) -> np.ndarray:
    """The feature matrix (columns :data:`FEATURES`) of problems on one device."""
    cls = problems["cls"].to_numpy()
    half = problems["half"].to_numpy(bool)
    peak = peak_tflops(spec, cls, half)
    flops = problems["flops"].to_numpy(float)
    nbytes = problems["bytes"].to_numpy(float)
    out = np.maximum(problems["out"].to_numpy(float), 1.0)
    sms = max(spec.sms, 1)
    tiles = np.maximum(np.ceil(out / TILE), 1.0)
    waves = np.ceil(tiles / sms)
    blocks = np.maximum(np.ceil(out / MEMORY_BLOCK), 1.0)
    ridge = peak * 1e12 / (spec.mem_gbs * 1e9)
    lg = np.log10
    order = {c: i for i, c in enumerate(GROUPS["gemm"] + GROUPS["memory"])}
    return np.column_stack([
        lg(roofline_us(problems, spec)), lg(flops + 1), lg(nbytes + 1), lg(out),
        lg(np.maximum(problems["red"].to_numpy(float), 1.0)), lg(np.maximum(problems["batches"].to_numpy(float), 1.0)),
        lg((flops + 1) / (nbytes + 1) / ridge), lg(tiles / sms), tiles / (waves * sms), lg(blocks / sms),
        lg((nbytes + 1) / (max(spec.l2_mb, 0.1) * 2**20)),
        np.full(len(cls), math.log10(sms)), np.full(len(cls), math.log10(max(spec.clock_mhz, 1.0))),
        np.full(len(cls), math.log10(spec.mem_gbs)), lg(peak), np.full(len(cls), math.log10(max(spec.l2_mb, 0.1))),
        half.astype(float), problems["training"].to_numpy(float), np.array([order.get(c, -1) for c in cls], dtype=float)])


@dataclass
class KernelModel:
    """Per group, a LightGBM booster of log10(t / t_roofline); the GPUs and rows it learned from."""

    boosters: dict  # group -> lightgbm.Booster
    devices: tuple[str, ...]  # GPUs with measured kernels in the training data
    rows: dict[str, int]

    def covers(self, cls: str) -> bool:
        return group_of(cls) in self.boosters

    def predict_us(self, problems: pd.DataFrame, spec: DeviceSpec) -> np.ndarray:
        """Kernel time (µs) per problem; NaN where no group model covers the class."""
        out = np.full(len(problems), np.nan)
        if not len(problems):
            return out
        x = features(problems, spec)
        roof = 10 ** x[:, 0]
        groups = np.array([group_of(c) for c in problems["cls"]], dtype=object)
        for group, booster in self.boosters.items():
            mask = groups == group
            if mask.any():
                out[mask] = roof[mask] * 10 ** np.maximum(booster.predict(x[mask]), 0.0)
        return out

    def save(self, path: str | Path = MODEL_FILE, report: dict | None = None) -> Path:
        path = Path(path)
        body = {"format": FORMAT, "features": list(FEATURES), "devices": list(self.devices), "rows": self.rows,
                "boosters": {g: b.model_to_string() for g, b in self.boosters.items()}}
        if report is not None:
            body["report"] = report
        path.write_text(json.dumps(body, indent=1) + "\n")
        return path


def load(path: str | Path | None = None) -> KernelModel | None:
    """The saved model, or None when the package ships none (then every class keeps the roofline)."""
    import lightgbm as lgb

    path = Path(path) if path is not None else MODEL_FILE
    if not path.exists():
        if path == MODEL_FILE:
            return None
        raise KernelModelError(f"{path}: no such kernel-model file")
    try:
        body = load_json(read_bytes(path, "kernel-model file"), path)
    except InputError as exc:  # a FIFO, an over-size file, nesting past the depth limit
        raise KernelModelError(str(exc)) from None
    except OSError as exc:
        raise KernelModelError(f"{path}: cannot read the kernel-model file ({exc.strerror or type(exc).__name__})") from None
    except UnicodeDecodeError as exc:
        raise KernelModelError(f"{path}: not UTF-8 JSON text ({exc.reason} at byte {exc.start:,})") from None
    except json.JSONDecodeError as exc:
        raise KernelModelError(f"{path}: not JSON ({exc.msg} at line {exc.lineno})") from None
    if not isinstance(body, dict):
        raise KernelModelError(f"{path}: a kernel-model file is one JSON object (refit with `ets devices calibrate`)")
    if body.get("format") != FORMAT:
        raise KernelModelError(f"{path}: field 'format' is {short(body.get('format'))}; this version reads {FORMAT} "
                               "(refit with `ets devices calibrate`)")
    if body.get("features") != list(FEATURES):
        raise KernelModelError(f"{path}: field 'features' does not match this code's feature list (refit)")
    for key in ("devices", "rows", "boosters"):
        if key not in body:
            raise KernelModelError(f"{path}: lacks field {key!r}")
    if not isinstance(body["boosters"], dict) or not all(isinstance(t, str) for t in body["boosters"].values()):
        raise KernelModelError(f"{path}: field 'boosters' must map op classes to LightGBM model texts")
    try:
        boosters = {g: lgb.Booster(model_str=text) for g, text in body["boosters"].items()}
        return KernelModel(boosters, tuple(body["devices"]), dict(body["rows"]))
    except lgb.basic.LightGBMError as exc:
        raise KernelModelError(f"{path}: field 'boosters' is not a LightGBM model ({str(exc)[:200]})") from None
    except (TypeError, ValueError) as exc:  # 'devices' or 'rows' of the wrong shape
        raise KernelModelError(f"{path}: fields 'devices' and 'rows' must be a list and an object "
                               f"({type(exc).__name__}: {short(str(exc), 120)})") from None


@lru_cache(maxsize=1)
def shipped() -> KernelModel | None:
    """The package's model, loaded once per process (None when none ships)."""
    return load(MODEL_FILE)


def fit(data: pd.DataFrame, specs: dict[str, DeviceSpec], rounds: int = ROUNDS) -> KernelModel:
    """Fit one booster per group on the uncensored forward rows of ``data`` (kernel_data table)."""
    import lightgbm as lgb

    usable = data[~data["censored"] & (data["phase"] == "forward")]
    boosters, rows = {}, {}
    for group, classes in GROUPS.items():
        part = usable[usable["cls"].isin(classes)]
        if part.empty:
            continue
        x, y = design(part, specs)
        boosters[group] = lgb.train(PARAMS, lgb.Dataset(x, y, free_raw_data=False), num_boost_round=rounds)
        rows[group] = int(len(part))
    return KernelModel(boosters, tuple(sorted(usable["device"].unique())), rows)


def design(part: pd.DataFrame, specs: dict[str, DeviceSpec]) -> tuple[np.ndarray, np.ndarray]:
    """Features and targets log10(measured / roofline) of measured problems, device by device."""
    xs, ys = [], []
    for device, rows in part.groupby("device", sort=True):
        x = features(rows, specs[device])
        xs.append(x)
        ys.append(np.log10(rows["measured_us"].to_numpy(float)) - x[:, 0])
    return np.vstack(xs), np.concatenate(ys)


def leave_one_gpu_out(data: pd.DataFrame, specs: dict[str, DeviceSpec], rounds: int = ROUNDS) -> pd.DataFrame:
    """Every uncensored row predicted by a model fitted without its GPU: ``predicted_us`` and
    ``rel_error`` (|pred − measured| / measured) added. Backward convolutions are predicted as
    their two mapped kernels (:func:`predictor.devices.problems.conv_backward`)."""
    from predictor.devices.problems import backward_conv_problems

    rows = data[~data["censored"]].copy()
    rows["predicted_us"] = np.nan
    for device in sorted(rows["device"].unique()):
        model = fit(data[data["device"] != device], specs, rounds)
        mine = rows["device"] == device
        fwd = mine & (rows["phase"] == "forward")
        rows.loc[fwd, "predicted_us"] = model.predict_us(rows[fwd], specs[device])
        bwd = mine & (rows["phase"] == "backward")
        if bwd.any():
            parts = backward_conv_problems(rows[bwd])
            pred = model.predict_us(parts, specs[device])
            rows.loc[bwd, "predicted_us"] = pd.Series(pred).groupby(parts["row"].to_numpy()).sum().to_numpy()
    rows["rel_error"] = (rows["predicted_us"] - rows["measured_us"]).abs() / rows["measured_us"]
    return rows


def kernel_source(device: str, model: KernelModel | None) -> str:
    """How a device's kernel times are known: ``measured-kernels`` when real kernels of that GPU
    trained the model, else ``spec-derived`` (the model, or the roofline, from its spec sheet)."""
    return "measured-kernels" if model is not None and device in model.devices else "spec-derived"

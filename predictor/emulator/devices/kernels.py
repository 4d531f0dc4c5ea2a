"""Kernel time learned from real kernels: the achieved fraction of the roofline, from the
problem's shape and the device's spec sheet.

Why: a hand-set roofline efficiency per device was 32 % off the real T4 kernels and cannot speak
for a GPU nobody measured. Following NeuSight (ASPLOS'25), the model predicts a *bounded*
quantity — how far a kernel stays from its roofline, log(t / t_roofline) — from features that
exist for any GPU with a spec sheet (SMs, clock, bandwidth, peak FLOP/s, L2), so a GPU known
only by its spec sheet still gets a prediction (labelled ``spec-derived``), and a measured one is
checked leave-one-GPU-out.

Problems (rows of :mod:`predictor.emulator.devices.kernel_corpus` at fit time, of
:mod:`predictor.emulator.devices.problems` at emulation time): ``cls``, ``flops``, ``bytes``, ``out``
(output elements), ``red`` (reduction length), ``batches``; ``kernel`` (forward, grad_input,
grad_weight); the arithmetic: a ``math`` column (measured kernels) or the op's ``dtype``, which
:func:`math_of` turns into what PyTorch runs on the GPU (TF32 for float32 convolutions on Ampere
and later, for float32 matmuls with ``allow_tf32``; FP16 / BF16 for half ops).

Roofline: t_roof = max(flops / peak, bytes / bandwidth), peak the rate of the kernel's
arithmetic (:func:`peak_tflops`).

Sources and harnesses: each measurement source times kernels its own way (NeuSight and
KernelBench: single calls with launch overhead; DeepBench: old CUDA stacks; Vidur: inside the
profiler; ETS: Nsight kernel durations of training iterations), so one log offset per source and
group is fitted (:func:`source_offsets`) and the trees learn the group's reference harness
(:data:`REFERENCE`), which emulation predicts.

Features (all logs base 10): t_roof, flops, bytes, out, red, batches; arithmetic intensity over
the device's ridge point; GEMM tiles (128 × 128 output blocks) per SM and the last wave's fill;
memory-bound thread blocks per SM; the working set over L2; the kernel's peak; the arithmetic,
the kernel and the op class (within a group). The GPU enters only through these — its SMs, L2,
bandwidth and peaks normalise the problem — never as an identity (SM count, clock, compute
capability as features of their own): with those, the trees learned each measured GPU's level
and gave a new GPU the level of its nearest measured neighbour (leave-one-GPU-out: A40's fp16
GEMMs 107 % off with them, 32 % without; P100's DeepBench convolutions 59 % against 29 %).
One gradient-boosted tree ensemble (LightGBM) per group — ``gemm`` (conv, matmul) and
``memory`` (elementwise, norm, softmax, pool) — chosen over a small MLP by leave-one-GPU-out error
(``experiments/kernel_model.py`` measures both). Trees cannot leave the range of fractions seen in
training, which is the safe failure for a spec-only GPU.

The fitted model is saved as LightGBM's own text format inside one JSON file
(``kernel_model.json`` beside this module), with the GPUs it was trained on.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np
import pandas as pd

from predictor.common.documents import read_document
from predictor.common.inputs import InputError, short
from predictor.emulator.devices.specs import DeviceSpec

MODEL_FILE = Path(__file__).with_name("kernel_model.json")
FORMAT = 2
GROUPS: dict[str, tuple[str, ...]] = {"gemm": ("conv", "matmul"), "memory": ("elementwise", "norm", "softmax", "pool")}
TILE = 128 * 128
MEMORY_BLOCK = 256 * 4  # elements per thread block of a vectorised element-wise kernel
KERNELS = ("forward", "grad_input", "grad_weight")  # which kernel of a GEMM-like op
# Harness of each kernel source (a per-source offset is fitted, see fit): emulation predicts the
# reference harness of each group — DeepBench's cuBLAS/cuDNN kernel times (8 GPUs, forward and both
# backward kernels) for GEMMs, NeuSight's single-op timings above the call floor for the
# memory-bound classes. (The ETS training kernels, on T4 and 2080 Ti only, were a worse anchor: with
# the T4 held out the reference rested on 138 RTX 2080 Ti rows.)
REFERENCE = {"gemm": "deepbench", "memory": "neusight"}
FEATURES = ("log_roof", "log_flops", "log_bytes", "log_out", "log_red", "log_batches", "log_intensity_ridge",
            "log_tiles_per_sm", "last_wave_fill", "log_blocks_per_sm", "log_bytes_l2", "log_peak", "tensor_core",
            "kernel_code", "cls_code")
# One tensor-core branch for TF32, FP16 and BF16 (the peak tells them apart): TF32 data are few
# (KernelBench's forward convolutions), and with a code of their own the trees priced TF32 kernels
# far below their FP16 cousins (emulated A100 ResNet-50 553 images/s in TF32 against 805 real,
# 1,818 in AMP against 1,312; one branch: 645 and 1,400).
TENSOR_MATH = ("tf32", "fp16", "bf16")
PARAMS = {"objective": "l2", "learning_rate": 0.1, "num_leaves": 63, "min_data_in_leaf": 20,
          "feature_fraction": 0.9, "bagging_fraction": 0.8, "bagging_freq": 1, "lambda_l2": 1.0,
          "verbose": -1, "seed": 0, "deterministic": True, "num_threads": 2}
ROUNDS = 400
OFFSET_ROUNDS = 100
MAX_GROUP_ROWS = 4000  # the first pass, whose residuals estimate the per-source offsets


class KernelModelError(InputError):
    """A kernel-model file that cannot be used; the message names the file and the field."""


def group_of(cls: str) -> str | None:
    for group, classes in GROUPS.items():
        if cls in classes:
            return group
    return None


def math_of(problems: pd.DataFrame, spec: DeviceSpec, allow_tf32: bool = False) -> np.ndarray:
    """The arithmetic each problem runs in on ``spec``, as PyTorch picks it: a ``math`` column
    when the problems carry one (measured kernels); else from ``dtype`` — float16 / bfloat16 in
    their own precision, float32 convolutions in TF32 on GPUs that have it (cuDNN's default),
    float32 matmuls in TF32 only when ``allow_tf32`` (``torch.backends.cuda.matmul.allow_tf32``,
    off by default, on in NGC containers); everything else FP32."""
    if "math" in problems.columns:
        return problems["math"].to_numpy(dtype=object)
    dtype = problems["dtype"].to_numpy(dtype=object) if "dtype" in problems.columns else np.where(
        problems["half"].to_numpy(bool), "float16", "float32")
    cls = problems["cls"].to_numpy(dtype=object)
    tf32 = (spec.tf32_tflops > 0) & ((cls == "conv") | ((cls == "matmul") & bool(allow_tf32)))
    return np.select([dtype == "float16", dtype == "bfloat16", tf32], ["fp16", "bf16", "tf32"], "fp32").astype(object)


def peak_tflops(spec: DeviceSpec, cls: np.ndarray, math_: np.ndarray) -> np.ndarray:
    """The peak of each problem's arithmetic: tensor-core rates for GEMM-like classes (BF16 at the
    FP32 rate on GPUs without BF16 units), FP32 for everything else."""
    gemm = np.isin(cls, GROUPS["gemm"])
    bf16 = spec.bf16_tflops if spec.bf16_tflops > 0 else spec.fp32_tflops
    tf32 = spec.tf32_tflops if spec.tf32_tflops > 0 else spec.fp32_tflops
    rate = np.select([math_ == "fp16", math_ == "bf16", math_ == "tf32"], [spec.fp16_tflops, bf16, tf32],
                     spec.fp32_tflops)
    return np.where(gemm, rate, spec.fp32_tflops)


def roofline_us(problems: pd.DataFrame, spec: DeviceSpec, allow_tf32: bool = False) -> np.ndarray:
    cls = problems["cls"].to_numpy()
    peak = peak_tflops(spec, cls, math_of(problems, spec, allow_tf32))
    compute = problems["flops"].to_numpy(float) / (peak * 1e6)
    memory = problems["bytes"].to_numpy(float) / (spec.memory_gbs * 1e3)
    return np.maximum(np.maximum(compute, memory), 1e-3)


def features(problems: pd.DataFrame, spec: DeviceSpec, allow_tf32: bool = False) -> np.ndarray:
    """The feature matrix (columns :data:`FEATURES`) of problems on one device."""
    cls = problems["cls"].to_numpy()
    math_ = math_of(problems, spec, allow_tf32)
    peak = peak_tflops(spec, cls, math_)
    flops = problems["flops"].to_numpy(float)
    nbytes = problems["bytes"].to_numpy(float)
    out = np.maximum(problems["out"].to_numpy(float), 1.0)
    sms = max(spec.sms, 1)
    tiles = np.maximum(np.ceil(out / TILE), 1.0)
    waves = np.ceil(tiles / sms)
    blocks = np.maximum(np.ceil(out / MEMORY_BLOCK), 1.0)
    ridge = peak * 1e12 / (spec.memory_gbs * 1e9)
    kernel = problems["kernel"].to_numpy(dtype=object) if "kernel" in problems.columns else np.full(len(cls), "forward")
    lg = np.log10
    order = {c: i for i, c in enumerate(GROUPS["gemm"] + GROUPS["memory"])}
    return np.column_stack([
        lg(np.maximum(np.maximum(flops / (peak * 1e6), nbytes / (spec.memory_gbs * 1e3)), 1e-3)), lg(flops + 1),
        lg(nbytes + 1), lg(out),
        lg(np.maximum(problems["red"].to_numpy(float), 1.0)), lg(np.maximum(problems["batches"].to_numpy(float), 1.0)),
        lg((flops + 1) / (nbytes + 1) / ridge), lg(tiles / sms), tiles / (waves * sms), lg(blocks / sms),
        lg((nbytes + 1) / (max(spec.l2_mb, 0.1) * 2**20)), lg(peak),
        np.isin(math_, TENSOR_MATH).astype(float),
        np.array([KERNELS.index(k) if k in KERNELS else 0 for k in kernel], dtype=float),
        np.array([order.get(c, -1) for c in cls], dtype=float)])


@dataclass
class KernelModel:
    """Per group, a LightGBM booster of log10(t / t_roofline) in the group's reference harness;
    the per-source offsets (log10) fitted beside it; the GPUs and rows it learned from."""

    boosters: dict  # group -> lightgbm.Booster
    devices: tuple[str, ...]  # GPUs with measured kernels in the training data
    rows: dict[str, int]
    offsets: dict[str, dict[str, float]]  # group -> dataset -> log10 offset of that harness

    def covers(self, cls: str) -> bool:
        return group_of(cls) in self.boosters

    def predict_us(self, problems: pd.DataFrame, spec: DeviceSpec, allow_tf32: bool = False,
                   dataset: str | None = None) -> np.ndarray:
        """Kernel time (µs) per problem in the reference harness (``dataset``: in that source's
        harness instead); NaN where no group model covers the class."""
        out = np.full(len(problems), np.nan)
        if not len(problems):
            return out
        x = features(problems, spec, allow_tf32)
        roof = 10 ** x[:, 0]
        groups = np.array([group_of(c) for c in problems["cls"]], dtype=object)
        for group, booster in self.boosters.items():
            mask = groups == group
            if mask.any():
                shift = self.offsets.get(group, {}).get(dataset, 0.0) if dataset else 0.0
                out[mask] = roof[mask] * 10 ** (np.maximum(booster.predict(x[mask]), 0.0) + shift)
        return out

    def save(self, path: str | Path = MODEL_FILE, report: dict | None = None) -> Path:
        path = Path(path)
        body = {"format": FORMAT, "features": list(FEATURES), "devices": list(self.devices), "rows": self.rows,
                "offsets": self.offsets, "boosters": {g: b.model_to_string() for g, b in self.boosters.items()}}
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
    body = read_document(path, "kernel-model file", KernelModelError, kind="json")
    if not isinstance(body, dict):
        raise KernelModelError(f"{path}: a kernel-model file is one JSON object (refit with `ets devices calibrate`)")
    if body.get("format") != FORMAT:
        raise KernelModelError(f"{path}: field 'format' is {short(body.get('format'))}; this version reads {FORMAT} "
                               "(refit with `ets devices calibrate`)")
    if body.get("features") != list(FEATURES):
        raise KernelModelError(f"{path}: field 'features' does not match this code's feature list (refit)")
    for key in ("devices", "rows", "boosters", "offsets"):
        if key not in body:
            raise KernelModelError(f"{path}: lacks field {key!r}")
    if not isinstance(body["boosters"], dict) or not all(isinstance(t, str) for t in body["boosters"].values()):
        raise KernelModelError(f"{path}: field 'boosters' must map op classes to LightGBM model texts")
    try:
        boosters = {g: lgb.Booster(model_str=text) for g, text in body["boosters"].items()}
        offsets = {str(g): {str(d): float(v) for d, v in o.items()} for g, o in body["offsets"].items()}
        return KernelModel(boosters, tuple(body["devices"]), dict(body["rows"]), offsets)
    except lgb.basic.LightGBMError as exc:
        raise KernelModelError(f"{path}: field 'boosters' is not a LightGBM model ({str(exc)[:200]})") from None
    except (TypeError, ValueError, AttributeError) as exc:  # 'devices', 'rows' or 'offsets' of the wrong shape
        raise KernelModelError(f"{path}: fields 'devices', 'rows' and 'offsets' must be a list and two objects "
                               f"({type(exc).__name__}: {short(str(exc), 120)})") from None


@lru_cache(maxsize=1)
def shipped() -> KernelModel | None:
    """The package's model, loaded once per process (None when none ships)."""
    return load(MODEL_FILE)


def fittable(data: pd.DataFrame) -> pd.DataFrame:
    """The rows a model learns from: uncensored single kernels (ETS backward rows hold two kernels
    each — grad-input and grad-weight summed — and only check the backward mapping)."""
    kernel = data["kernel"] if "kernel" in data.columns else pd.Series("forward", index=data.index)
    return data[~data["censored"] & kernel.isin(KERNELS)]


def _thinned(part: pd.DataFrame) -> pd.DataFrame:
    """At most ``MAX_GROUP_ROWS`` rows per (dataset, GPU, op class), drawn with a fixed seed:
    NeuSight and Vidur hold 10,000-50,000 rows per GPU and class, which slow the fit without
    adding shapes the model has not seen."""
    keep = []
    for _, idx in part.groupby(["dataset", "device", "cls"], sort=True).indices.items():
        if len(idx) > MAX_GROUP_ROWS:
            idx = np.sort(np.random.default_rng(0).choice(idx, MAX_GROUP_ROWS, replace=False))
        keep.append(idx)
    return part.iloc[np.sort(np.concatenate(keep))]


def _weights(part: pd.DataFrame) -> np.ndarray:
    """Each (dataset, GPU) group weighs √rows in total: NeuSight's rows on six GPUs must not drown
    the few hundred DeepBench or KernelBench kernels of each other GPU."""
    sizes = part.groupby(["dataset", "device"])["cls"].transform("size").to_numpy(float)
    return 1.0 / np.sqrt(sizes)


def source_offsets(part: pd.DataFrame, x: np.ndarray, y: np.ndarray, w: np.ndarray, reference: str,
                   rounds: int) -> dict[str, float]:
    """Log offset of each source's harness relative to ``reference``, from comparisons *within*
    a GPU: a first pass (shape features only, as the final model, so it cannot absorb a source
    into the GPUs it measured) leaves residuals r ≈ a_GPU + b_source; b is solved by
    weighted least squares over the (GPU, source) median residuals with b_reference = 0. A
    source that shares no GPU with the others gets the median of its residuals against the
    reference's (its offset is then not identifiable from the GPU effect)."""
    import lightgbm as lgb

    first = lgb.train(PARAMS, lgb.Dataset(x, y, weight=w), num_boost_round=rounds)
    resid = y - first.predict(x)
    cells = (pd.DataFrame({"device": part["device"].to_numpy(), "dataset": part["dataset"].to_numpy(), "r": resid})
             .groupby(["device", "dataset"])["r"].agg(["median", "size"]).reset_index())
    devices = sorted(cells["device"].unique())
    datasets = [d for d in sorted(cells["dataset"].unique()) if d != reference]
    if not datasets:
        return {reference: 0.0} if reference in set(cells["dataset"]) else {}
    a = np.zeros((len(cells), len(devices) + len(datasets)))
    for i, r in enumerate(cells.itertuples()):
        a[i, devices.index(r.device)] = 1.0
        if r.dataset != reference:
            a[i, len(devices) + datasets.index(r.dataset)] = 1.0
    sw = np.sqrt(cells["size"].to_numpy(float))
    coef, *_ = np.linalg.lstsq(a * sw[:, None], cells["median"].to_numpy() * sw, rcond=None)
    out = {reference: 0.0} if reference in set(cells["dataset"]) else {}
    ref_median = float(np.median(resid[part["dataset"].to_numpy() == reference])) if reference in out else 0.0
    for j, d in enumerate(datasets):
        shared = set(cells.loc[cells["dataset"] == d, "device"]) & set(cells.loc[cells["dataset"] != d, "device"])
        if shared:
            out[d] = round(float(coef[len(devices) + j]), 4)
        else:
            out[d] = round(float(np.median(resid[part["dataset"].to_numpy() == d])) - ref_median, 4)
    return out


def fit(data: pd.DataFrame, specs: dict[str, DeviceSpec], rounds: int = ROUNDS) -> KernelModel:
    """One booster per group on the fittable rows of ``data`` (kernel_data table), with one log
    offset per source (:func:`source_offsets`) taken out of the targets first, so the trees learn
    the reference harness. A source with no rows in a group gets no offset there."""
    import lightgbm as lgb

    usable = fittable(data)
    boosters, rows, offsets = {}, {}, {}
    for group, classes in GROUPS.items():
        part = _thinned(usable[usable["cls"].isin(classes)])
        if part.empty:
            continue
        x, y = design(part, specs)
        w = _weights(part)
        offsets[group] = source_offsets(part, x, y, w, REFERENCE[group], min(OFFSET_ROUNDS, rounds))
        shift = np.array([offsets[group].get(d, 0.0) for d in part["dataset"]])
        boosters[group] = lgb.train(PARAMS, lgb.Dataset(x, y - shift, weight=w), num_boost_round=rounds)
        rows[group] = int(len(part))
    return KernelModel(boosters, tuple(sorted(usable["device"].unique())), rows, offsets)


def design(part: pd.DataFrame, specs: dict[str, DeviceSpec]) -> tuple[np.ndarray, np.ndarray]:
    """Features and targets log10(measured / roofline) of measured problems, device by device
    (rows keep their order)."""
    x = np.empty((len(part), len(FEATURES)))
    y = np.empty(len(part))
    for device, idx in part.groupby("device", sort=True).indices.items():
        rows = part.iloc[idx]
        x[idx] = features(rows, specs[device])
        y[idx] = np.log10(rows["measured_us"].to_numpy(float)) - x[idx, 0]
    return x, y


def predict_measured(model: KernelModel, rows: pd.DataFrame, spec: DeviceSpec) -> np.ndarray:
    """Predictions of measured rows of one GPU in their own source's harness; an ETS backward row
    (two kernels summed) as the sum of its mapped grad-input and grad-weight kernels."""
    from predictor.emulator.devices.problems import backward_conv_problems

    out = np.full(len(rows), np.nan)
    kernel = rows["kernel"].to_numpy(dtype=object) if "kernel" in rows.columns else np.full(len(rows), "forward")
    for dataset in rows["dataset"].unique():
        mine = (rows["dataset"] == dataset).to_numpy()
        single = mine & np.isin(kernel, KERNELS)
        if single.any():
            out[single] = model.predict_us(rows[single], spec, dataset=dataset)
        pair = mine & ~np.isin(kernel, KERNELS)
        if pair.any():
            parts = backward_conv_problems(rows[pair])
            if "math" in rows.columns:
                parts["math"] = np.repeat(rows.loc[pair, "math"].to_numpy(dtype=object), 2)
            pred = model.predict_us(parts, spec, dataset=dataset)
            out[pair] = pd.Series(pred).groupby(parts["row"].to_numpy()).sum().to_numpy()
    return out


def leave_one_gpu_out(data: pd.DataFrame, specs: dict[str, DeviceSpec], rounds: int = ROUNDS,
                      progress: bool = False, models: dict | None = None) -> pd.DataFrame:
    """Every uncensored row predicted by a model fitted without its GPU (in its own source's
    harness): ``predicted_us`` and ``rel_error`` (|pred − measured| / measured) added. ``models``,
    when given, receives each held-out GPU's model (for end-to-end checks of the same GPU)."""
    from tqdm import tqdm

    rows = data[~data["censored"]].copy()
    rows["predicted_us"] = np.nan
    devices = sorted(rows["device"].unique())
    for device in tqdm(devices, desc="leave-one-GPU-out", unit="GPU", disable=not progress):
        model = fit(data[data["device"] != device], specs, rounds)
        if models is not None:
            models[device] = model
        mine = (rows["device"] == device).to_numpy()
        rows.loc[mine, "predicted_us"] = predict_measured(model, rows[mine], specs[device])
    rows["rel_error"] = (rows["predicted_us"] - rows["measured_us"]).abs() / rows["measured_us"]
    return rows


def kernel_source(device: str, model: KernelModel | None) -> str:
    """How a device's kernel times are known: ``measured-kernels`` when real kernels of that GPU
    trained the model, else ``spec-derived`` (the model, or the roofline, from its spec sheet)."""
    return "measured-kernels" if model is not None and device in model.devices else "spec-derived"

"""Habitat-style cross-device prediction ("habitat"): the iteration time on a target GPU from a
trace measured on a source GPU.

Why: Habitat (Yu et al., USENIX ATC'21; predictors.md §2) is the best-known runtime-based
predictor and the ETS paper's cross-device comparison. It scales each measured op from the
source to the target GPU and carries the framework overhead over unchanged — exactly the
assumption ETS questions, since the overhead left visible depends on how fast the kernels run.

Per op of the source trace (gap and kernel time recorded separately, as our trace table does):

* **Kernel-varying ops** (GEMM-like: conv, linear, bmm, lstm; :func:`kernel_group`): Habitat's
  ratio scaling, T_source × MLP(op, target) / MLP(op, source). **One MLP with a group one-hot**
  instead of Habitat's four, because our groups have very unequal row counts and a shared trunk
  lets the rare ones borrow how GEMM-like kernels scale; 256 × 4 by default (``hidden``/``layers``)
  instead of Habitat's 1024 × 8, for our 2-CPU machines.
* **Kernel-alike ops** (everything else): Habitat's roofline wave scaling, from our per-op FLOP and
  byte counts instead of CUPTI metrics (no per-kernel times or block counts, so no sub-wave
  branch). ``small_kernel_us`` (Habitat's keep-small-kernels fallback) defaults to 0: scaling
  every op was more accurate (measured figures: docs/predictor.md, Baselines).
* **Framework overhead is carried over unchanged**: an op's predicted gap is the source trace's
  ``gap_us``, exactly.

GPU names resolve through :func:`predictor.common.gpus.canonical_gpu_type`, so a model trained on
emulated traces predicts real ones. Features, formulas, training and limits: docs/predictor.md,
'Baselines' (Habitat-style, "The method in full").
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import ClassVar

import numpy as np
import pandas as pd
import torch

from predictor.checkpoint_file import CheckpointError
from predictor.common.gpus import GpuEntry, UnknownGpuTypeError, canonical_gpu_type, catalog
from predictor.common.inputs import short
from predictor.common.op_trace import DTYPES, MAX_PARAMS, PHASES
from predictor.emulator.capture.costs import op_class
from predictor.methods.base import (
    MAX_MINUTES,
    TrainedPredictor,
    build_weights,
    checked_config,
    checked_model_size,
    field_checker,
    stored_fields,
    summarize,
)
from predictor.methods.checks import cut
from predictor.methods.training import (
    EarlyStopping,
    clock,
    fingerprint,
    mlp,
    mre,
    run_mlp,
    shuffled_rows,
    sorted_traces,
)

METHOD = "habitat"
GROUPS = ("conv2d", "linear", "bmm", "lstm")
N_ONEHOT = len(GROUPS) + len(PHASES) + len(DTYPES)
N_CONTINUOUS = 3 + MAX_PARAMS + 4  # batch, flops, bytes, params, 4 device features
N_FEATURES = N_ONEHOT + N_CONTINUOUS

def ridge(gpu: GpuEntry) -> float:
    """Ridge point of the FP32 roofline, FLOP per byte."""
    return gpu.fp32_tflops * 1e12 / (gpu.memory_gbs * 1e9)


def features(gpu: GpuEntry) -> list[float]:
    """Habitat's MLP device features: memory GB, bandwidth GB/s, SMs, FP32 TFLOPS."""
    return [gpu.memory_gb, gpu.memory_gbs, float(gpu.sms), gpu.fp32_tflops]


def _key(name: str) -> str:
    """The catalogue name of a device name, vendor words and part suffixes tolerated ("Tesla T4",
    "NVIDIA H100 80GB HBM3"): :func:`predictor.common.gpus.canonical_gpu_type` with ``loose``."""
    try:
        return canonical_gpu_type(name, loose=True)
    except UnknownGpuTypeError:
        raise ValueError(f"unknown GPU {name!r} for Habitat; known: {', '.join(catalog())} "
                         "(optionally prefixed 'emulated:')") from None


def gpu(name: str) -> GpuEntry:
    """The catalogue entry of a GPU name (its spec facts are Habitat's device constants);
    ValueError naming it and the known ones when unknown."""
    return catalog()[_key(name)]


def kernel_group(op: str) -> str | None:
    """Habitat's kernel-varying group of an op name, None for kernel-alike ops."""
    cls = op_class(op)
    if cls == "conv":
        return "conv2d"
    if cls == "lstm":
        return "lstm"
    if cls == "matmul":
        return "bmm" if re.search(r"bmm|matmul|scaled_dot_product|scaleddotproduct", op.lower()) else "linear"
    return None


# --- kernel-alike ops: roofline wave scaling -------------------------------------------------

def roofline_gamma(flops: np.ndarray, nbytes: np.ndarray, ridge: float) -> np.ndarray:
    """Habitat's γ (1: memory-bound, 0: compute-bound) from the arithmetic intensity."""
    flops, nbytes = np.asarray(flops, dtype=np.float64), np.asarray(nbytes, dtype=np.float64)
    intensity = np.divide(flops, nbytes, out=np.full(flops.shape, np.inf), where=nbytes > 0)
    gamma = np.where(intensity <= ridge, 1.0 - 0.5 * intensity / ridge,
                     0.5 * ridge / np.maximum(intensity, 1e-300))
    gamma = np.where(nbytes <= 0, 0.0, gamma)
    return np.where(flops < 1.0, 1.0, gamma)


def wave_scale(duration_us: np.ndarray, flops: np.ndarray, nbytes: np.ndarray, source: GpuEntry, target: GpuEntry,
               small_kernel_us: float = 0.0) -> np.ndarray:
    """Kernel-alike op times on ``target`` from their times on ``source`` (µs); ops faster than
    ``small_kernel_us`` on the source are kept unchanged."""
    duration = np.asarray(duration_us, dtype=np.float64)
    gamma = roofline_gamma(flops, nbytes, ridge(target))
    factor = ((source.memory_gbs / target.memory_gbs) ** gamma
              * (source.boost_clock_mhz / target.boost_clock_mhz) ** (1 - gamma)
              * (source.sms / target.sms) ** (1 - gamma))
    return np.where(duration < small_kernel_us, duration, duration * factor)


# --- kernel-varying ops: the MLP ----------------------------------------------------------------

def _onehot(values: pd.Series, names: tuple[str, ...], what: str) -> np.ndarray:
    position = {n: i for i, n in enumerate(names)}
    index = np.array([position.get(v, -1) for v in values], dtype=np.int64)
    if (index < 0).any():
        bad = values.iloc[int(np.flatnonzero(index < 0)[0])]
        raise ValueError(f"{what} {bad!r} not encodable; known: {', '.join(names)}")
    out = np.zeros((len(values), len(names)), dtype=np.float64)
    out[np.arange(len(values)), index] = 1
    return out


def raw_features(ops: pd.DataFrame, groups: pd.Series, device: GpuEntry | list[GpuEntry]) -> np.ndarray:
    """[rows, N_FEATURES] unscaled MLP inputs: one-hots, then the continuous columns (log1p of
    batch, FLOPs, bytes and params; the 4 device features). ``device``: one GPU for all rows or
    one per row."""
    params = np.zeros((len(ops), MAX_PARAMS))
    for i, p in enumerate(ops["params"]):
        values = np.asarray(p, dtype=np.float64)[:MAX_PARAMS]
        params[i, :len(values)] = np.log1p(np.maximum(values, 0))
    gpus = device if isinstance(device, list) else [device] * len(ops)
    scalars = np.log1p(np.maximum(ops[["batch", "flops", "bytes"]].to_numpy(np.float64), 0))
    return np.hstack([_onehot(groups, GROUPS, "kernel group"), _onehot(ops["phase"], PHASES, "phase"),
                      _onehot(ops["dtype"], DTYPES, "dtype"), scalars, params,
                      np.array([features(g) for g in gpus], dtype=np.float64).reshape(len(ops), 4)])


@dataclass
class Scaler:
    """z-score of the continuous MLP inputs (the one-hots pass through)."""

    mean: list[float]
    std: list[float]

    @classmethod
    def fit(cls, raw: np.ndarray) -> Scaler:
        cont = raw[:, N_ONEHOT:]
        std = cont.std(axis=0)
        return cls(cont.mean(axis=0).tolist(), np.where(std > 1e-9, std, 1.0).tolist())

    def __call__(self, raw: np.ndarray) -> np.ndarray:
        out = raw.copy()
        out[:, N_ONEHOT:] = (raw[:, N_ONEHOT:] - np.asarray(self.mean)) / np.asarray(self.std)
        return out.astype(np.float32)


@dataclass
class HabitatConfig:
    source_device: str = ""  # the GPU the traces to predict were measured on (required)
    hidden: int = 256  # Habitat: 1024
    layers: int = 4  # Habitat: 8 hidden layers
    lr: float = 5e-4
    batch_size: int = 512
    max_epochs: int = 80
    patience: int = 8
    max_minutes: float = MAX_MINUTES
    seed: int = 0
    small_kernel_us: float = 0.0  # kernel-alike ops faster than this (µs) keep their source time

    RANGES: ClassVar[dict[str, tuple]] = {"small_kernel_us": (0, None)}


@dataclass
class _Prepared:
    """Source ops of some configs with everything but the MLP's output precomputed."""

    ops: pd.DataFrame  # source rows, sorted by config and idx
    varying: np.ndarray  # bool: kernel-varying op with a positive source time
    x_source: np.ndarray  # scaled MLP inputs of the varying ops on the source GPU
    x_target: np.ndarray  # ... and on the target GPU
    alike_us: np.ndarray  # wave-scaled times (valid where not varying)


class HabitatPredictor(TrainedPredictor):
    """Wave scaling + the kernel-varying MLP; predicts ``device`` from ``config.source_device`` traces."""

    method = METHOD

    def __init__(self, config: HabitatConfig, model: torch.nn.Module, scaler: Scaler, device: str,
                 fingerprint: str = "", history: list[dict] | None = None, split: dict | None = None) -> None:
        super().__init__(config, model, device, fingerprint, history, split)
        self.scaler = scaler
        self.source, self.target = gpu(config.source_device), gpu(device)

    # --- inference ---------------------------------------------------------------------------

    def _prepare(self, source_ops: pd.DataFrame) -> _Prepared:
        groups = source_ops["op"].map(kernel_group)
        duration = source_ops["duration_us"].to_numpy(np.float64)
        varying = groups.notna().to_numpy() & (duration > 0)
        rows, row_groups = source_ops[varying], groups[varying]
        alike = wave_scale(duration, source_ops["flops"].to_numpy(np.float64), source_ops["bytes"].to_numpy(np.float64),
                           self.source, self.target, self.config.small_kernel_us)
        return _Prepared(source_ops, varying, self.scaler(raw_features(rows, row_groups, self.source)),
                         self.scaler(raw_features(rows, row_groups, self.target)), alike)

    def _durations(self, prepared: _Prepared) -> np.ndarray:
        out = prepared.alike_us.copy()
        if prepared.varying.any():
            log_ratio = run_mlp(self.model, prepared.x_target) - run_mlp(self.model, prepared.x_source)
            source_us = prepared.ops["duration_us"].to_numpy(np.float64)[prepared.varying]
            out[prepared.varying] = source_us * np.exp(np.clip(log_ratio, -30.0, 30.0))
        return out

    def source_rows(self, traces: pd.DataFrame) -> pd.DataFrame:
        """The rows of ``traces`` measured on the source GPU (what this model scales)."""
        return self._split_devices(traces)[0]

    def _split_devices(self, traces: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
        """The source-device and target-device rows of ``traces`` (device names compared by GPU)."""
        keys = {}
        for name in traces["device"].unique():
            try:
                keys[name] = _key(str(name))
            except ValueError:
                keys[name] = None  # not a GPU we know: neither source nor target
        parts = []
        for role, gpu_key in (("source", self.source.name), ("target", self.target.name)):
            names = sorted(n for n, k in keys.items() if k == gpu_key)
            if len(names) > 1:
                raise ValueError(f"traces hold several devices that are the {role} GPU {gpu_key} "
                                 f"({', '.join(names)}): pass one of them")
            parts.append(traces[traces["device"].isin(names)])
        return parts[0], parts[1]

    def predict_ops(self, traces: pd.DataFrame) -> pd.DataFrame:
        """One row per source op (sorted by config and idx) with device = the target, the
        predicted duration and gap (= the source's gap), the source's times (source_duration_us,
        source_gap_us), and duration_us/gap_us = the target's truth where the target trace aligns
        op for op with the source one (same length and op names), NaN otherwise."""
        source, target = self._split_devices(traces)
        if source.empty:
            raise ValueError(f"no traces of the source device {self.config.source_device!r} to predict "
                             f"{self.device!r} from; devices present: "
                             f"{', '.join(map(str, traces['device'].unique()))}; "
                             f"a Habitat-style model scales measured op times: add the same configs' "
                             f"{self.config.source_device} rows to the data (`ets collect --device "
                             f"{self.config.source_device}` for an emulated GPU, `ets import` for a real one)")
        missing = sorted(set(target["config_id"]) - set(source["config_id"]))
        if missing and self.source.name != self.target.name:
            raise ValueError(f"{len(missing)} config(s) have {self.device!r} rows but no source "
                             f"({self.config.source_device!r}) trace: {', '.join(missing[:5])}"
                             + (" ..." if len(missing) > 5 else ""))
        ordered = pd.concat(sorted_traces(source), ignore_index=True)
        duration = self._durations(self._prepare(ordered))
        out = ordered.assign(device=self.device, source_duration_us=ordered["duration_us"],
                             source_gap_us=ordered["gap_us"], pred_duration_us=duration,
                             pred_gap_us=ordered["gap_us"].to_numpy(np.float64))
        out["duration_us"], out["gap_us"] = _aligned_truth(ordered, target)
        return out

    def iteration_times(self, traces: pd.DataFrame) -> pd.DataFrame:
        return summarize(self.predict_ops(traces))

    # --- persistence -------------------------------------------------------------------------

    def checkpoint_fields(self) -> dict:
        return {"scaler": asdict(self.scaler), "n_features": N_FEATURES}

    @classmethod
    def from_checkpoint(cls, body: dict, path: str | Path) -> HabitatPredictor:
        if body.get("n_features") != N_FEATURES:
            raise CheckpointError(f"{path}: the model reads {short(body.get('n_features'))} features but this "
                                  f"version builds {N_FEATURES}: the checkpoint was written by an incompatible version")
        config = checked_config(HabitatConfig, body.get("config"), path)
        common = stored_fields(body, path)
        check = field_checker(path)
        for field, name in (("config.source_device", config.source_device), ("device", common["device"])):
            try:
                gpu(name)
            except ValueError as exc:
                raise check.fail(field, cut(str(exc))) from None
        stored = check.mapping(body.get("scaler"), "scaler")
        scaler = Scaler(check.numbers(stored.get("mean"), "scaler.mean", N_CONTINUOUS),
                        check.numbers(stored.get("std"), "scaler.std", N_CONTINUOUS, positive=True))
        model = build_weights(path, lambda: mlp(N_FEATURES, config.hidden, config.layers), body.get("state_dict"))
        return cls(config, model, scaler, **common)


def _aligned_truth(source: pd.DataFrame, target: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """Per source row (``source`` sorted by config and idx): the target trace's duration and gap
    where that config's target trace has the same op sequence, else NaN."""
    duration = np.full(len(source), np.nan)
    gap = np.full(len(source), np.nan)
    truth = {t["config_id"].iloc[0]: t for t in sorted_traces(target)} if len(target) else {}
    start = 0
    for config_id, n in source.groupby("config_id", sort=True).size().items():
        t = truth.get(config_id)
        if t is not None and len(t) == n and (t["op"].to_numpy() == source["op"].to_numpy()[start:start + n]).all():
            duration[start:start + n] = t["duration_us"].to_numpy(np.float64)
            gap[start:start + n] = t["gap_us"].to_numpy(np.float64)
        start += n
    return duration, gap


load = HabitatPredictor.load  # what predictor.methods.load dispatches to


# --- training ----------------------------------------------------------------------------------

def _training_rows(traces: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """Unscaled MLP inputs and log(duration) of every kernel-varying op with a positive time,
    on every device of ``traces``."""
    groups = traces["op"].map(kernel_group)
    keep = groups.notna().to_numpy() & (traces["duration_us"].to_numpy(np.float64) > 0)
    rows = traces[keep]
    gpus = {name: gpu(str(name)) for name in rows["device"].unique()}
    raw = raw_features(rows, groups[keep], [gpus[d] for d in rows["device"]])
    return raw, np.log(rows["duration_us"].to_numpy(np.float64))


def _check_devices(train_traces: pd.DataFrame, val_traces: pd.DataFrame, source: GpuEntry, target: GpuEntry,
                   config: HabitatConfig, device: str) -> None:
    if train_traces.empty or val_traces.empty:
        raise ValueError("training and validation splits must both hold traces")
    present = {name: _key(str(name)) for name in train_traces["device"].unique()}  # unknown GPUs: ValueError
    for role, name, g in (("source", config.source_device, source), ("target", device, target)):
        if g.name not in present.values():
            raise ValueError(f"the training traces hold no rows of the {role} device {name!r} "
                             f"(present: {', '.join(sorted(map(str, present)))})")


def train(train_traces: pd.DataFrame, val_traces: pd.DataFrame, config: HabitatConfig | None = None, *,
          device: str | None = None, split: dict | None = None, progress: bool = True,
          log: Callable[[dict], None] | None = None) -> HabitatPredictor:
    """Fit the kernel-varying MLP on every device's rows of ``train_traces`` and return a predictor
    of ``device`` (the target, required) from ``config.source_device`` traces; early stopping on
    the iteration MRE of the target predicted from the validation configs' source traces."""
    started = clock()  # the time budget covers features and model construction too
    config = config or HabitatConfig()
    if not config.source_device:
        raise ValueError("HabitatConfig.source_device must name the GPU the traces were measured on")
    if device is None:
        raise ValueError("habitat predicts one target device from another: pass device=<target GPU>")
    source, target = gpu(config.source_device), gpu(device)
    _check_devices(train_traces, val_traces, source, target, config, device)
    torch.manual_seed(config.seed)
    rng = np.random.default_rng(config.seed)
    raw, log_us = _training_rows(train_traces)
    if len(raw) == 0:
        raise ValueError(f"the training traces hold no kernel-varying ops ({', '.join(GROUPS)}) with a kernel time")
    scaler = Scaler.fit(raw)
    x, y = torch.from_numpy(scaler(raw)), torch.from_numpy(log_us.astype(np.float32))
    checked_model_size(lambda: mlp(N_FEATURES, config.hidden, config.layers),
                       "the habitat options (--layers, --hidden)")
    model = mlp(N_FEATURES, config.hidden, config.layers)
    predictor = HabitatPredictor(config, model, scaler, device, fingerprint(pd.concat([train_traces, val_traces])),
                                 [], split)
    val_source, val_target = predictor._split_devices(val_traces)
    both = sorted(set(val_source["config_id"]) & set(val_target["config_id"]))
    if not both:
        raise ValueError(f"the validation split needs configs measured on both the source {config.source_device!r} "
                         f"and the target {device!r}")
    val_ops = pd.concat(sorted_traces(val_source[val_source["config_id"].isin(both)]), ignore_index=True)
    prepared = predictor._prepare(val_ops)
    codes = pd.factorize(val_ops["config_id"])[0]
    val_gap = np.bincount(codes, val_ops["gap_us"].to_numpy(np.float64))
    truth_rows = val_target[val_target["config_id"].isin(both)]
    val_truth = ((truth_rows["duration_us"] + truth_rows["gap_us"]).groupby(truth_rows["config_id"]).sum()
                 .loc[both].to_numpy())
    optimizer = torch.optim.Adam(model.parameters(), lr=config.lr)
    stop = EarlyStopping(model, predictor.history, config, "train habitat", optimizer=optimizer, progress=progress,
                         log=log, started=started)
    stop.fit(model, optimizer, lambda: shuffled_rows(rng, len(x), config.batch_size),
             lambda rows: (model(x[rows]).squeeze(1) - y[rows]).abs().mean(),
             lambda: mre(np.bincount(codes, predictor._durations(prepared)) + val_gap, val_truth))
    stop.restore()
    return predictor

"""Two more sets of real single-GPU iteration times, for out-of-sample validation of the emulated GPUs.

Why: the emulated GPUs are fitted to Gavel and Sia (:mod:`predictor.emulator.devices.measurements`); a fit
is only trustworthy when it also predicts times it was not fitted to, on other GPUs, models and
precisions. These two public benchmarks (``/work/shared/calibration/<set>/README.md``) supply such
times; this module reads them into tables shaped like ``measurements``' (``source, device,
workload, batch, seconds, origin`` plus columns of their own), maps every kept row to the zoo
config that rebuilds it (:func:`configs`) and to the phases its time covers (``phases`` column).

Design decisions: **Lambda** (:func:`load_lambda`; training throughput, all three phases) and
**pytorch-gpu-benchmark** (:func:`load_pytorch_gpu_benchmark`; forward + backward, no optimizer
step) record different phases, hence the ``phases`` column. Doubtful rows are kept and flagged
rather than guessed away (``batch_source``, ``config_version``, ``precision_in_config``,
``duplicate``; :func:`saturated` keeps the largest-batch runs, where a wrong batch matters least),
and rows without a faithful zoo model are excluded and listed in ``attrs["excluded"]``. Bad input
raises ``MeasurementError`` naming the file, the line and the field.

Row selection, precision mapping and per-system evidence: docs/gpus.md, 'Out-of-sample sets:
Lambda and pytorch-gpu-benchmark'.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from pathlib import Path

import pandas as pd

from predictor.common.families import family_of
from predictor.common.gpus import catalog
from predictor.common.inputs import short
from predictor.common.op_trace import PHASES
from predictor.emulator.devices.measurements import (
    COLUMNS,
    MeasurementError,
    csv_rows,
    workload_config,
)
from predictor.emulator.zoo.config import ModelConfig

# --- Lambda --------------------------------------------------------------------------------------

LAMBDA_FILE = "lambda_runs.csv"
LAMBDA_SOURCE = "lambda"
# Lambda's system folder -> GPU catalogue name (one GPU per system: single-GPU runs only)
LAMBDA_SYSTEMS: dict[str, str] = {
    "1080Ti": "GTX1080Ti",
    "2070MaxQ": "RTX2070MaxQ", "2080MaxQ": "RTX2080MaxQ", "2080SuperMaxQ": "RTX2080SuperMaxQ",  # laptops
    "3080Max-Q": "RTX3080MaxQ",  # laptop
    "2080Ti": "RTX2080Ti", "3070": "RTX3070", "3080": "RTX3080",
    "3090": "RTX3090", "3090_v1": "RTX3090", "3090_sonantic_v1": "RTX3090", "4090_v1": "RTX4090",
    "A100_PCIe": "A100", "LambdaCloud_A100_40GB_PCIe_v1": "A100",
    "A100_SXM4": "A100-SXM4", "A100_p4": "A100-SXM4", "A100_40GB_SXM4_v1": "A100-SXM4",  # p4 = AWS p4d
    "A100_80GB_PCIe": "A100-80GB", "A100_80GB_PCIe_v1": "A100-80GB",
    "A100_80GB_SXM4": "A100-SXM4-80GB", "A100_80GB_SXM4_v1": "A100-SXM4-80GB",
    "A10": "A10", "LambdaCloud_A10_v1": "A10", "A40": "A40",
    "A4000": "RTXA4000", "A4500": "RTXA4500", "A5000": "RTXA5000", "A5500": "RTXA5500",
    "A6000": "RTXA6000", "A6000_v1": "RTXA6000", "A6000_sonantic_v1": "RTXA6000", "LambdaCloud_A6000": "RTXA6000",
    "AdaA6000_v1": "RTX6000Ada",
    "QuadroRTX5000": "RTX5000", "QuadroRTX6000": "RTX6000", "LambdaCloud_1xQuadroRTX6000": "RTX6000",
    "QuadroRTX8000": "RTX8000", "QuadroRTX8000_v1": "RTX8000", "TitanRTX": "TitanRTX",
    # AWS p3.2xlarge and Lambda Cloud's 1x V100 are V100-SXM2 16 GB; the 2020 "V100" box ran batch
    # sizes only a 32 GB card holds (module docstring)
    "p3.2xlarge": "V100-SXM2", "LambdaCloud_V100_16GB_v1": "V100-SXM2", "V100": "V100M32",
    "H100_80GB_SXM5_v1": "H100", "H100_80GB_PCIe5_v1": "H100-PCIe", "H100_80GB_PCIe_v1": "H100-PCIe",
    "LambdaCloud_H100_80GB_PCIe5_v1": "H100-PCIe",
}
# single-GPU systems we cannot place on one catalogue entry
LAMBDA_UNPLACED: dict[str, str] = {"A100_sonantic_v1": "an A100 of unrecorded form factor and memory"}
# task -> zoo workload (configs: _lambda_config)
LAMBDA_TASKS: dict[str, str] = {"resnet50": "resnet50_imagenet", "bert_base_squad": "bert_base_squad",
                                "bert_large_squad": "bert_large_squad"}
# tasks without a faithful zoo model: detection (SSD300, Mask R-CNN), GNMT (LSTM encoder-decoder
# with attention), NCF (embedding-dominated recommender), Transformer-XL (segment recurrence,
# relative positions), Tacotron2 / WaveGlow (speech synthesis)
LAMBDA_SKIPPED = ("ssd", "maskrcnn", "gnmt", "ncf", "transformerxlbase", "transformerxllarge", "tacotron2",
                  "waveglow")
LAMBDA_PRECISIONS = {"FP32": "fp32", "FP16": "fp16", "AMP": "amp"}
BERT_SEQ = 384  # run_squad.sh: --max_seq_length=384
LAMBDA_COLUMNS = COLUMNS + ("task", "precision", "tf32", "throughput", "system", "config_version", "batch_source",
                            "precision_in_config", "duplicate", "phases")
_LAMBDA_FIELDS = ("results_dir", "system", "task", "precision_dir", "run_file", "throughput", "path", "config_file",
                  "num_gpu_config", "batch_size_config", "batch_source", "params_tokens")
# the argument of the recipe's command line that selects each precision (zoo tasks only)
_PRECISION_FLAGS = {"resnet50": {"fp32": (), "fp16": ("--fp16",), "amp": ("--amp",)},
                    "bert": {"fp32": ("fp32",), "fp16": ("fp16",)}}
_CONFIG_VERSION = re.compile(r"config_(v\d+)/")
# Lambda's V100s, the reference of lambda_relative_time (same GV100 chip and clocks; one box 32 GB)
LAMBDA_REFERENCE = ("V100-SXM2", "V100M32")

# --- pytorch-gpu-benchmark -----------------------------------------------------------------------

PGB_FILE = "summary.csv"
PGB_SOURCE = "pytorch_gpu_benchmark"
PGB_DEVICES: dict[str, str] = {
    "A100-SXM4-40GB": "A100-SXM4", "TITAN RTX": "TitanRTX", "TITAN Xp": "TitanXp", "TITAN V": "TitanV",
    "GeForce RTX 2080 Ti": "RTX2080Ti", "GeForce GTX 1080 Ti": "GTX1080Ti",
}
PGB_PRECISIONS = {"float32": "fp32", "float16": "fp16"}
PGB_SKIPPED_PRECISIONS = ("float64",)
PGB_MODES = {"train": ("forward", "backward"), "inference": ("forward",)}
# torchvision models of the benchmark that the zoo (predictor.emulator.zoo.vision.VARIANTS) does not list
PGB_UNMAPPED = ("resnext50_32x4d", "resnext101_32x8d")
PGB_IMAGE, PGB_CLASSES = 224, 1000
PGB_COLUMNS = COLUMNS + ("mode", "precision", "tf32", "model", "gpu", "duplicate", "phases")
_PGB_FIELDS = ("source_file", "device", "num_gpus", "precision", "mode", "model", "median_ms", "batch_per_gpu")

_DTYPES = {"fp32": "float32", "fp16": "float16", "amp": "float32"}  # amp: an fp32 model under autocast

# --- compute capability --------------------------------------------------------------------------

def _tf32(device: str, precision: str) -> bool:
    """FP32 on Ampere and later ran TF32 (the NGC containers' default), from the GPU catalogue."""
    return precision == "fp32" and catalog()[device].cc_major >= 8


# --- field parsing -------------------------------------------------------------------------------


def _positive_int(path: Path, line: int, field: str, text: str | None) -> int:
    raw = (text or "").strip()
    try:
        value = float(raw)
    except ValueError:
        raise MeasurementError(path, f"not a number: {short(text)}", where=f"line {line}", field=field) from None
    if not math.isfinite(value) or value != int(value) or value < 1:
        raise MeasurementError(path, f"must be a whole number >= 1, got {short(text)}", where=f"line {line}",
                               field=field)
    return int(value)


def _positive_float(path: Path, line: int, field: str, text: str | None) -> float:
    raw = (text or "").strip()
    try:
        value = float(raw)
    except ValueError:
        raise MeasurementError(path, f"not a number: {short(text)}", where=f"line {line}", field=field) from None
    if not math.isfinite(value) or value <= 0:
        raise MeasurementError(path, f"must be finite and > 0, got {short(text)}", where=f"line {line}", field=field)
    return value


def _check_file(path: Path) -> None:
    if not path.exists():  # a FIFO or device is refused by name when read, not called missing
        raise MeasurementError(path, "file not found")


def _precision_in_config(task: str, precision: str, params: str) -> bool:
    """Whether the config's argument list selects the run's precision (True for tasks not checked):
    ResNet-50 ``--fp16`` / ``--amp`` / neither for fp32; BERT the ``fp16`` / ``fp32`` argument."""
    flags = _PRECISION_FLAGS.get("bert" if task.startswith("bert") else task)
    if flags is None:
        return True
    tokens = set(params.split())
    wanted = flags.get(precision, ())
    others = {f for p, fs in flags.items() if p != precision for f in fs}
    return all(f in tokens for f in wanted) and not (tokens & others)


def _frame(rows: list[dict], columns: tuple[str, ...], types: dict[str, str], excluded: list[str],
           counts: Counter, duplicate_keys: tuple[str, ...]) -> pd.DataFrame:
    df = pd.DataFrame(rows, columns=list(columns))
    df = df.astype(types)
    if len(df):
        df["duplicate"] = df.duplicated(list(duplicate_keys), keep="first")
    df["duplicate"] = df["duplicate"].astype(bool)
    df.attrs["excluded"] = list(excluded)
    df.attrs["excluded_counts"] = dict(sorted(counts.items()))
    return df


# --- Lambda --------------------------------------------------------------------------------------


def load_lambda(root: str | Path, *, all_tasks: bool = False) -> pd.DataFrame:
    """Lambda's single-GPU training runs (``<root>/lambda_runs.csv``) as a table (module docstring).

    Columns ``COLUMNS`` (``source`` "lambda", ``device`` a catalogue name, ``workload`` the zoo
    workload of ``LAMBDA_TASKS`` or None, ``batch`` = ``batch_size_config``, ``seconds`` = batch /
    throughput, ``origin`` = ``<root name>/lambda_runs.csv:<line> <log path>``) plus ``task``,
    ``precision`` (fp32 | fp16 | amp), ``tf32``, ``throughput`` (the task's unit per second),
    ``system``, ``config_version`` (v0 | v1 | v2), ``batch_source``, ``precision_in_config``,
    ``duplicate`` and ``phases``.

    ``all_tasks``: keep the tasks without a zoo model too (``workload`` None), for
    :func:`lambda_relative_time`; by default they are excluded and listed.
    """
    path = Path(root) / LAMBDA_FILE
    _check_file(path)
    origin_name = f"{Path(root).name}/{LAMBDA_FILE}"
    rows: list[dict] = []
    excluded: list[str] = []
    counts: Counter = Counter()
    for line, cell, _ in csv_rows(path, _LAMBDA_FIELDS):
        gpus = _positive_int(path, line, "num_gpu_config", cell["num_gpu_config"])
        if gpus != 1:
            counts["multi-GPU run"] += 1
            continue
        origin = f"{origin_name}:{line} {cell['path'] or ''}"
        system, task, precision_dir = cell["system"] or "", cell["task"] or "", cell["precision_dir"] or ""
        if precision_dir not in LAMBDA_PRECISIONS:
            raise MeasurementError(path, f"unknown precision {short(precision_dir)} (known: "
                                   f"{', '.join(LAMBDA_PRECISIONS)})", where=f"line {line}", field="precision_dir")
        if task not in LAMBDA_TASKS and task not in LAMBDA_SKIPPED:
            raise MeasurementError(path, f"unknown task {short(task)} (zoo tasks: {', '.join(LAMBDA_TASKS)}; "
                                   f"skipped: {', '.join(LAMBDA_SKIPPED)})", where=f"line {line}", field="task")
        if system in LAMBDA_UNPLACED:
            excluded.append(origin)
            counts[f"system {system}: {LAMBDA_UNPLACED[system]}"] += 1
            continue
        if system not in LAMBDA_SYSTEMS:
            raise MeasurementError(path, f"unknown single-GPU system {short(system)} (add it to LAMBDA_SYSTEMS or "
                                   "LAMBDA_UNPLACED)", where=f"line {line}", field="system")
        if task in LAMBDA_SKIPPED and not all_tasks:
            excluded.append(origin)
            counts[f"task {task}: no zoo model"] += 1
            continue
        if not (cell["throughput"] or "").strip():
            excluded.append(origin)
            counts["no parsed throughput"] += 1
            continue
        throughput = _positive_float(path, line, "throughput", cell["throughput"])
        batch = _positive_int(path, line, "batch_size_config", cell["batch_size_config"])
        version = _CONFIG_VERSION.search(cell["config_file"] or "")
        if version is None:
            raise MeasurementError(path, f"no config_vN/ folder in {short(cell['config_file'])}",
                                   where=f"line {line}", field="config_file")
        device, precision = LAMBDA_SYSTEMS[system], LAMBDA_PRECISIONS[precision_dir]
        rows.append({
            "source": LAMBDA_SOURCE, "device": device, "workload": LAMBDA_TASKS.get(task), "batch": batch,
            "seconds": batch / throughput, "origin": origin, "task": task, "precision": precision,
            "tf32": _tf32(device, precision), "throughput": throughput, "system": system,
            "config_version": version[1], "batch_source": cell["batch_source"] or "",
            "precision_in_config": _precision_in_config(task, precision, cell["params_tokens"] or ""),
            "duplicate": False, "phases": PHASES})
    types = {"source": str, "device": str, "workload": object, "batch": "int64", "seconds": "float64", "origin": str,
             "task": str, "precision": str, "tf32": bool, "throughput": "float64", "system": str,
             "config_version": str, "batch_source": str, "precision_in_config": bool, "duplicate": bool,
             "phases": object}
    df = _frame(rows, LAMBDA_COLUMNS, types, excluded, counts,
                ("device", "task", "precision", "batch", "throughput"))
    df["workload"] = pd.Series([w if isinstance(w, str) else None for w in df["workload"]], index=df.index,
                               dtype=object)  # None, not NaN, for the tasks without a zoo model
    df.attrs["all_tasks"] = all_tasks
    return df


# --- pytorch-gpu-benchmark -----------------------------------------------------------------------


def load_pytorch_gpu_benchmark(root: str | Path) -> pd.DataFrame:
    """pytorch-gpu-benchmark's single-GPU iteration times (``<root>/summary.csv``, module docstring).

    Columns ``COLUMNS`` (``source`` "pytorch_gpu_benchmark", ``device`` a catalogue name,
    ``workload`` the zoo model name, ``batch`` = ``batch_per_gpu``, ``seconds`` = ``median_ms`` /
    1000, ``origin`` = ``<root name>/summary.csv:<line> <source_file>``) plus ``mode`` (train |
    inference), ``precision`` (fp32 | fp16), ``tf32``, ``model`` (as in the file), ``gpu`` (the
    file's device name), ``duplicate`` and ``phases``.
    """
    path = Path(root) / PGB_FILE
    _check_file(path)
    origin_name = f"{Path(root).name}/{PGB_FILE}"
    from predictor.emulator.zoo.vision import MODELS as ZOO_VISION

    rows: list[dict] = []
    excluded: list[str] = []
    counts: Counter = Counter()
    for line, cell, _ in csv_rows(path, _PGB_FIELDS):
        gpus = _positive_int(path, line, "num_gpus", cell["num_gpus"])
        if gpus != 1:
            counts["multi-GPU run"] += 1
            continue
        precision_name = cell["precision"] or ""
        if precision_name in PGB_SKIPPED_PRECISIONS:
            counts[f"precision {precision_name}"] += 1
            continue
        if precision_name not in PGB_PRECISIONS:
            raise MeasurementError(path, f"unknown precision {short(precision_name)} (known: "
                                   f"{', '.join((*PGB_PRECISIONS, *PGB_SKIPPED_PRECISIONS))})", where=f"line {line}",
                                   field="precision")
        mode = cell["mode"] or ""
        if mode not in PGB_MODES:
            raise MeasurementError(path, f"unknown mode {short(mode)} (known: {', '.join(PGB_MODES)})",
                                   where=f"line {line}", field="mode")
        gpu = cell["device"] or ""
        if gpu not in PGB_DEVICES:
            raise MeasurementError(path, f"unknown device {short(gpu)} (known: {', '.join(PGB_DEVICES)})",
                                   where=f"line {line}", field="device")
        model = cell["model"] or ""
        origin = f"{origin_name}:{line} {cell['source_file'] or ''}"
        if model in PGB_UNMAPPED:
            excluded.append(origin)
            counts[f"model {model}: no zoo model"] += 1
            continue
        if model not in ZOO_VISION:
            raise MeasurementError(path, f"unknown model {short(model)} (not a zoo vision model; unmapped: "
                                   f"{', '.join(PGB_UNMAPPED)})", where=f"line {line}", field="model")
        if not (cell["batch_per_gpu"] or "").strip():
            excluded.append(origin)
            counts["batch not recorded"] += 1
            continue
        batch = _positive_int(path, line, "batch_per_gpu", cell["batch_per_gpu"])
        ms = _positive_float(path, line, "median_ms", cell["median_ms"])
        device, precision = PGB_DEVICES[gpu], PGB_PRECISIONS[precision_name]
        rows.append({
            "source": PGB_SOURCE, "device": device, "workload": model, "batch": batch, "seconds": ms / 1000.0,
            "origin": origin, "mode": mode, "precision": precision, "tf32": _tf32(device, precision),
            "model": model, "gpu": gpu, "duplicate": False, "phases": PGB_MODES[mode]})
    types = {"source": str, "device": str, "workload": str, "batch": "int64", "seconds": "float64", "origin": str,
             "mode": str, "precision": str, "tf32": bool, "model": str, "gpu": str, "duplicate": bool,
             "phases": object}
    return _frame(rows, PGB_COLUMNS, types, excluded, counts, ("device", "workload", "mode", "precision", "batch",
                                                                "seconds"))


# --- zoo configs ---------------------------------------------------------------------------------


def _lambda_config(workload: str, batch: int, dtype: str) -> ModelConfig:
    """``resnet50_imagenet`` / ``bert_base_squad``: ``measurements.workload_config`` (torchvision
    ResNet-50 at 224 px, SGD; ``transformer_encoder`` base at 384 tokens with the 2-wide span head,
    Adam). ``bert_large_squad``: ``llm`` BERT-large at 384 tokens, Adam, with a 2-entry
    "vocabulary", so that its output layer is the 2-wide span head (start / end logits) of SQuAD
    fine-tuning instead of the 30522-wide MLM decoder. Approximations: the token embedding has 2
    rows instead of 30522 (a lookup costs the same; its gradient and Adam update, 9% of the
    parameters, are left out), and the MLM transform (dense 1024x1024, GELU, LayerNorm) stays in
    front of the head (~0.3% of the FLOPs)."""
    from predictor.emulator.zoo import llm

    if workload == "bert_large_squad":
        return llm.config_for("bert_large", batch, BERT_SEQ, dtype=dtype, optimizer="adam", vocab=2)
    config = workload_config(workload, batch)
    return config if config.dtype == dtype else config.replace(dtype=dtype)


def _pgb_config(model: str, batch: int, dtype: str) -> ModelConfig:
    return ModelConfig("vision", family_of(model), model, batch, PGB_IMAGE, dtype=dtype, optimizer="sgd",
                       num_classes=PGB_CLASSES)


def configs(df: pd.DataFrame) -> pd.Series:
    """The zoo ``ModelConfig`` of every row (None for a Lambda row without a zoo model), indexed as
    ``df``: dtype float32 for fp32 and amp rows (AMP keeps an fp32 model; the ``precision``
    column says "amp" and the emulator applies it), float16 for fp16 rows.

    Lambda: ResNet-50 at the run's batch, BERT base / large at 384 tokens (:func:`_lambda_config`);
    pytorch-gpu-benchmark: the torchvision model at 224x224, 1000 classes, the row's batch, SGD
    (its times have no optimizer step: ``phases``)."""
    out = []
    for row in df.itertuples(index=False):
        dtype = _DTYPES[row.precision]
        if row.source == LAMBDA_SOURCE:
            out.append(None if row.workload is None or pd.isna(row.workload)
                       else _lambda_config(row.workload, int(row.batch), dtype))
        elif row.source == PGB_SOURCE:
            out.append(_pgb_config(row.workload, int(row.batch), dtype))
        else:
            raise ValueError(f"configs: unknown source {short(row.source)} (known: {LAMBDA_SOURCE}, {PGB_SOURCE})")
    return pd.Series(out, index=df.index, dtype=object, name="config")


# --- saturation and relative times ---------------------------------------------------------------


def _group_keys(df: pd.DataFrame) -> list[str]:
    return [c for c in ("source", "device", "task", "workload", "precision", "mode") if c in df.columns]


def saturated(df: pd.DataFrame) -> pd.DataFrame:
    """The runs at the largest recorded batch of each (device, task, precision) — with ``source``,
    ``workload`` and ``mode`` also part of the key where the table has them — every run of that
    batch kept, in the table's order; ``attrs`` are kept.

    Why: per-sample throughput rises with the batch until the GPU is busy and then stays flat, so
    the largest batch is the point least sensitive to the batch itself — and Lambda's recorded batch
    is uncertain (the 2020 logs may have run an older config). Compare throughputs (or seconds per
    sample) there; the recorded batch still sizes the zoo config."""
    if df.empty:
        return df.copy()
    keys = _group_keys(df)
    largest = df.groupby(keys, dropna=False, sort=False)["batch"].transform("max")
    out = df[df["batch"] == largest].copy()
    out.attrs = dict(df.attrs)
    return out


def _geomean(values: list[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values))


def _task_ratio(gpu: pd.DataFrame, ref: pd.DataFrame) -> tuple[float, int, str] | None:
    """thr_ref / thr_gpu of one task over the config versions both ran, and how many ratios it
    took: within a version, the geometric mean over equal batches (median throughput per batch)
    when there are any, else the ratio of the medians at each side's largest batch (saturation)."""
    ratios: list[float] = []
    methods: set[str] = set()
    for version, g in gpu.groupby("config_version"):
        r = ref[ref["config_version"] == version]
        if r.empty:
            continue
        g_thr = g.groupby("batch")["throughput"].median()
        r_thr = r.groupby("batch")["throughput"].median()
        shared = sorted(set(g_thr.index) & set(r_thr.index))
        if shared:
            ratios += [r_thr[b] / g_thr[b] for b in shared]
            methods.add("same batch")
        else:
            ratios.append(r_thr[r_thr.index.max()] / g_thr[g_thr.index.max()])
            methods.add("largest batch")
    if not ratios:
        return None
    return _geomean(ratios), len(ratios), "+".join(sorted(methods))


def lambda_relative_time_table(df: pd.DataFrame, reference: tuple[str, ...] = LAMBDA_REFERENCE,
                               tasks: tuple[str, ...] | None = None) -> pd.DataFrame:
    """Per catalogue GPU of a Lambda table, its training iteration time relative to Lambda's V100
    (``reference``; 1 = as fast, larger = slower), at FP32, single GPU, the way
    ``predictor.common.gpus.derive_relative_iteration_time`` derives Gavel's: per task measured on both,
    the geometric mean of thr_V100 / thr_GPU (see below), then the geometric mean over the tasks.

    Pass ``load_lambda(root, all_tasks=True)``: every task counts (a throughput ratio needs no zoo
    config). Matching: throughputs are compared within one config version (``v0`` / ``v1``: the
    software differs) — at equal recorded batches when the two share any (the mean over them), else
    at each side's largest batch, where throughput saturates (``saturated``); the geometric mean
    over versions when both ran the task in several. The reference V100s: ``V100-SXM2`` (AWS
    p3.2xlarge, Lambda Cloud) and ``V100M32`` (Lambda's 2020 box), pooled: the same GV100 chip at
    the same clocks. Their own rows are 1 by definition. FP32 on Ampere and later ran TF32.

    Columns: ``relative_time`` (rounded to 3 digits), ``tasks`` (tasks compared), ``comparisons``
    (throughput ratios behind them: one per shared batch or per largest-batch pair), ``methods``
    ("same batch" / "largest batch" per task), ``per_task`` ({task: ratio, 3 digits}); indexed by
    device, sorted by relative time. ``tasks``: only these tasks (default: every task of ``df``).

    Caveat: a task whose throughput keeps rising with the batch (Tacotron2, WaveGlow,
    Transformer-XL, BERT-large at batch 1-4) makes a small-memory GPU, which runs a smaller largest
    batch, look slower than it is; ``per_task`` shows each task's ratio."""
    fp32 = df[(df["precision"] == "fp32")]
    if tasks is not None:
        fp32 = fp32[fp32["task"].isin(tasks)]
    ref = fp32[fp32["device"].isin(reference)]
    records = []
    for device in sorted(set(fp32["device"]) - set(reference)):
        gpu = fp32[fp32["device"] == device]
        per_task: dict[str, float] = {}
        comparisons = 0
        methods: dict[str, str] = {}
        for task, g in gpu.groupby("task"):
            found = _task_ratio(g, ref[ref["task"] == task])
            if found is not None:
                per_task[task], n, methods[task] = found
                comparisons += n
        if per_task:
            records.append({"device": device, "relative_time": round(_geomean(list(per_task.values())), 3),
                            "tasks": len(per_task), "comparisons": comparisons, "methods": methods,
                            "per_task": {t: round(v, 3) for t, v in sorted(per_task.items())}})
    for device in reference:
        if device in set(ref["device"]):
            tasks = sorted(set(ref.loc[ref["device"] == device, "task"]))
            records.append({"device": device, "relative_time": 1.0, "tasks": len(tasks), "comparisons": 0,
                            "methods": {}, "per_task": {}})
    table = pd.DataFrame(records, columns=["device", "relative_time", "tasks", "comparisons", "methods", "per_task"])
    return table.set_index("device").sort_values("relative_time", kind="stable")


def lambda_relative_time(df: pd.DataFrame, reference: tuple[str, ...] = LAMBDA_REFERENCE,
                         tasks: tuple[str, ...] | None = None) -> dict[str, float]:
    """Catalogue name -> iteration time relative to Lambda's V100 (``lambda_relative_time_table``'s
    ``relative_time``; its ``tasks`` / ``comparisons`` columns give the counts behind each value)."""
    return lambda_relative_time_table(df, reference, tasks)["relative_time"].to_dict()

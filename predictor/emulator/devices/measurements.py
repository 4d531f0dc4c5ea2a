"""Measured single-GPU iteration times that the emulated GPUs are fitted to, as one table.

Why: an emulated GPU (a device spec plus a timing model) is only as good as its fit to real
iteration times. Two published systems measured such times on real GPUs, for workloads our zoo
can rebuild; this module reads their files (``/work/shared/calibration``, see its README.md) into
one table and maps each measured workload to the zoo config that rebuilds it, so the emulated
time of ``build(workload_config(w, b))`` can be compared with the measured seconds.

Design decisions: the default sources are Gavel and Sia (single-GPU runs only), which the
emulated GPUs are fitted to; NeuSight and SPREAD are read only when asked for
(``load_measurements(dir, sources=...)``). All four are kept as published: wall-clock times include
what an execution trace lacks (input pipeline, loss read-out; NeuSight has no optimizer step), and
Sia's slowdown factors are not applied, so the comparison decides how to treat each. Entries that
are not measurements (a throughput of 0.0) or have no zoo model are excluded and listed in
``df.attrs["excluded"]``; malformed values raise ``MeasurementError`` naming file, row or key, and
field.

Sources, what their numbers include, and the table's columns: docs/gpus.md, 'Measured iteration
times: sources and formats'.
"""

from __future__ import annotations

import ast
import csv
import json
import math
import os
import re
from collections.abc import Iterator
from pathlib import Path

import pandas as pd

from predictor.common.families import family_of
from predictor.common.inputs import (
    InputError,
    check_width,
    limit,
    load_json,
    names,
    read_bytes,
    regular_file,
    short,
)
from predictor.common.sia_clusters import sia_speed_gpus
from predictor.emulator.zoo.config import ModelConfig

COLUMNS = ("source", "device", "workload", "batch", "seconds", "origin")
WORKLOADS = ("resnet18_cifar", "resnet50_imagenet", "resnet50_imagenet_amp", "transformer_multi30k", "lstm_wikitext2",
             "bert_base_squad")

GAVEL_FILE = "gavel_physical_cluster_throughputs.json"
GAVEL_DEVICES = {"k80": "K80", "p100": "P100", "v100": "V100"}
GAVEL_JOBS = {"ResNet-18": "resnet18_cifar", "ResNet-50": "resnet50_imagenet",
              "Transformer": "transformer_multi30k", "LM": "lstm_wikitext2"}
# No zoo model rebuilds these faithfully: A3C (Pong: a small conv policy net driven by CPU
# environment simulation), Recommendation (autoencoder on ML-20M: sparse inputs, time dominated
# by data handling) and CycleGAN (two generators + two discriminators, several optimizers).
GAVEL_SKIPPED = ("A3C", "Recommendation", "CycleGAN")
_GAVEL_JOB = re.compile(r"^(?P<name>.*\S) \(batch size (?P<batch>\d+)\)$")

SIA_DIR = "sia_placements"
# Pollux's ImageNet benchmark (adaptdl/benchmark/models/imagenet) trains with apex AMP, so its
# convolutions and GEMMs run in half precision: a workload of its own
SIA_MODELS = {"cifar10": "resnet18_cifar", "imagenet": "resnet50_imagenet_amp", "bert": "bert_base_squad"}
# cluster -> the emulated device its rows calibrate (dgx-ext: A100, azure: V100; the record and its reasons:
# predictor.common.sia_clusters)
SIA_DEVICES = sia_speed_gpus()
SIA_COLUMNS = ("placement", "local_bsz", "step_time")

SOURCES = ("gavel", "sia", "neusight", "spread")
DEFAULT_SOURCES = ("gavel", "sia")

NEUSIGHT_DIR = "neusight"
NEUSIGHT_COLUMNS = COLUMNS + ("forward_s", "backward_s", "seq")
NEUSIGHT_DEVICES = {"NVIDIA_A100_80GB_PCIe": "A100-80GB", "Tesla_V100-PCIE-32GB": "V100"}
NEUSIGHT_SKIPPED = ("switchxl4",)  # Switch-XL, 4 experts: a mixture-of-experts encoder-decoder
NEUSIGHT_FIELDS = {"e2e_latency": "seconds", "fw_latency": "forward_s", "bwall_latency": "backward_s"}  # ms
NEUSIGHT_WORKLOADS = ("bert_large", "gpt2_large", "gpt3_xl", "gpt3_2.7b", "opt_1.3b")  # zoo names (llm.py)
_NEUSIGHT_FILE = re.compile(r"^(?P<model>[A-Za-z0-9_.]+)-train-(?P<seq>\d+)-(?P<batch>\d+)"
                            r"(?:-(?P<parallel>[A-Za-z0-9_]+))?\.(?P<ext>json|csv)$")

SPREAD_FILE = "spread/iterations.csv"
SPREAD_COLUMNS = ("model", "gpu", "world_size", "batch", "computation_proportion", "iter_ms_median")
SPREAD_DEVICES = {"Tesla_T4": "T4", "RTX_2080Ti": "RTX2080Ti"}
SPREAD_MODELS = {"ResNet18": "spread_resnet18", "ResNet50": "spread_resnet50", "VGG16": "spread_vgg16",
                 "InceptionV3": "spread_inception_v3", "MobileNet": "spread_mobilenet_v2",
                 "EfficientNet": "spread_efficientnet_b0", "BertBase": "spread_bert_base", "LSTM": "spread_lstm"}
SPREAD_SKIPPED = ("YoloV5S",)  # a YOLOv5-s detector (CSP backbone, PAN neck, detection loss): no zoo model
# SPREAD records neither input sizes nor model variants; these are OUR ASSUMPTIONS (zoo model,
# input size = image side or sequence length, optimizer), all fp32:
# * ImageNet sizes, not CIFAR: ResNet-18 takes 0.55x the time of ResNet-50 at equal batch on both
#   GPUs, close to their FLOP ratio at equal image size (0.44); the CIFAR ResNet-18 would be ~0.14x.
# * InceptionV3 at 299 px (its native size); EfficientNet = B0 and MobileNet = V2 at 224 px
#   (torchvision-style models, per the data's README; torchvision has no MobileNet V1).
# * BertBase: BERT-base encoder with the MLM head, 128 tokens (fits batch 128 on the 11 GB 2080 Ti).
# * LSTM: its batch sizes (5-80, 160) are Gavel's LM job's, so the same PyTorch word-language-model
#   (2x200 LSTM, 35-token bptt, WikiText-2 vocabulary 33278) as ``lstm_wikitext2``.
SPREAD_CONFIGS: dict[str, tuple[str, int, str]] = {  # workload -> (zoo model, input size, optimizer)
    "spread_resnet18": ("resnet18", 224, "sgd"), "spread_resnet50": ("resnet50", 224, "sgd"),
    "spread_vgg16": ("vgg16", 224, "sgd"), "spread_inception_v3": ("inception_v3", 299, "sgd"),
    "spread_mobilenet_v2": ("mobilenet_v2", 224, "sgd"), "spread_efficientnet_b0": ("efficientnet_b0", 224, "sgd"),
    "spread_bert_base": ("transformer_encoder", 128, "adam"), "spread_lstm": ("lstm_lm", 35, "sgd"),
}
SPREAD_WORKLOADS = tuple(SPREAD_CONFIGS)

_REPO = Path(__file__).resolve().parents[3]


class MeasurementError(InputError):
    """A calibration file that is missing or malformed; the message names the file, the row or
    key (``where``) and the field."""

    def __init__(self, file: str | Path, problem: str, *, where: str | None = None, field: str | None = None):
        self.file, self.problem, self.where, self.field = str(file), problem, where, field
        parts = [self.file]
        if where:
            parts.append(where)
        if field:
            parts.append(f"field {short(field)}")
        super().__init__(": ".join(parts) + f": {problem}")


_TYPES = {"source": str, "device": str, "workload": str, "batch": "int64", "seconds": "float64", "origin": str,
          "forward_s": "float64", "backward_s": "float64", "seq": "Int64"}


def _frame(rows: list[dict], excluded: list[str], columns: tuple[str, ...] = COLUMNS) -> pd.DataFrame:
    df = pd.DataFrame(rows, columns=list(columns))
    df = df.astype({c: _TYPES[c] for c in columns})
    df.attrs["excluded"] = list(excluded)
    return df


# --- Gavel ---------------------------------------------------------------------------------------


def gavel_key(path: Path, section: str, key: object) -> tuple[str, int]:
    where = f"section {section!r} key {short(key)}"
    try:
        parsed = ast.literal_eval(key) if isinstance(key, str) else None
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        parsed = None
    if (not isinstance(parsed, tuple) or len(parsed) != 2 or not isinstance(parsed[0], str)
            or isinstance(parsed[1], bool) or not isinstance(parsed[1], int) or parsed[1] < 1):
        raise MeasurementError(path, "not a \"('<job type>', <scale factor>)\" tuple", where=where, field="job key")
    return parsed


def gavel_throughput(path: Path, where: str, entry: object) -> float:
    if not isinstance(entry, dict) or "null" not in entry:
        raise MeasurementError(path, "no isolated-throughput entry", where=where, field="null")
    value = entry["null"]
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise MeasurementError(path, f"not a number: {short(value)}", where=where, field="null")
    if not math.isfinite(value) or value < 0:
        raise MeasurementError(path, f"throughput must be finite and >= 0, got {short(value)}", where=where,
                               field="null")
    return float(value)


def load_gavel(path: str | Path) -> pd.DataFrame:
    """Gavel's 1-GPU iteration times on K80 / P100 / V100 (sections ``k80``, ``p100``, ``v100``).

    Kept: scale factor 1, job types ResNet-18 (CIFAR-10), ResNet-50 (ImageNet), Transformer
    (Multi30k) and LM (LSTM on WikiText-2). Skipped by design: A3C, Recommendation and CycleGAN —
    no zoo model rebuilds them faithfully (A3C is an RL policy net whose steps are dominated by
    CPU environment simulation; Recommendation an autoencoder on sparse ML-20M ratings dominated
    by data handling; CycleGAN two generators and two discriminators with their own optimizers).
    The ``*_unconsolidated`` sections are not read (equal at 1 GPU).

    ``seconds`` = 1 / the ``"null"`` (job alone) throughput in steps/s. A 0.0 throughput means
    not measured: the entry is excluded and its origin listed in ``df.attrs["excluded"]``. Any
    other malformed value (unparsable key, non-numeric or negative throughput, missing section)
    raises ``MeasurementError``.
    """
    path = Path(path)
    if not path.exists():  # a FIFO or device is refused by name when read, not called missing
        raise MeasurementError(path, "file not found")
    data = json_document(path)[1]
    if not isinstance(data, dict):
        raise MeasurementError(path, f"top level is a {type(data).__name__}, not an object")
    rows: list[dict] = []
    excluded: list[str] = []
    for section, device in GAVEL_DEVICES.items():
        if section not in data:
            raise MeasurementError(path, "section missing", where=f"section {section!r}", field=section)
        jobs = data[section]
        if not isinstance(jobs, dict):
            raise MeasurementError(path, "section is not an object", where=f"section {section!r}", field=section)
        for key, entry in jobs.items():
            job_type, scale = gavel_key(path, section, key)
            if scale != 1:
                continue
            where = f"section {section!r} key {short(key)}"
            match = _GAVEL_JOB.match(job_type)
            name = match["name"] if match else job_type
            if name in GAVEL_SKIPPED:
                continue
            if name not in GAVEL_JOBS or match is None:
                raise MeasurementError(
                    path, f"unknown job type {short(job_type)} (expected '<name> (batch size <n>)' with name in "
                    f"{', '.join(GAVEL_JOBS)}; skipped: {', '.join(GAVEL_SKIPPED)})", where=where, field="job type")
            batch = int(match["batch"])
            if batch < 1:
                raise MeasurementError(path, f"batch size must be >= 1, got {batch}", where=where, field="job type")
            throughput = gavel_throughput(path, where, entry)
            origin = f"{path.name}:{section}:{key}"
            if throughput == 0.0:
                excluded.append(origin)
                continue
            rows.append({"source": "gavel", "device": device, "workload": GAVEL_JOBS[name], "batch": batch,
                         "seconds": 1.0 / throughput, "origin": origin})
    return _frame(rows, excluded)


# --- Sia -----------------------------------------------------------------------------------------


def _sia_int(path: Path, line: int, field: str, text: str | None) -> int:
    value = (text or "").strip()
    if not value.isdigit() or not value.isascii():
        raise MeasurementError(path, f"not a non-negative integer: {short(text)}", where=f"line {line}", field=field)
    return int(value)


def _sia_seconds(path: Path, line: int, field: str, text: str | None) -> float:
    try:
        value = float((text or "").strip())
    except ValueError:
        raise MeasurementError(path, f"not a number: {short(text)}", where=f"line {line}", field=field) from None
    if not math.isfinite(value) or value <= 0:
        raise MeasurementError(path, f"must be finite and > 0, got {short(text)}", where=f"line {line}", field=field)
    return value


def csv_rows(path: Path, columns: tuple[str, ...], *, complete: bool = False
             ) -> Iterator[tuple[int, dict[str, str | None], list[str]]]:
    """(line, {column: stripped cell or None when the row is short}, raw row) for every non-blank
    row of a CSV file with a header holding ``columns`` (read by name: column order differs
    between files). ``complete``: a row shorter than the header is an error naming its first
    missing column. Errors name the file, the line and the column."""
    try:
        regular_file(path, "CSV file")  # a FIFO would block the open, /dev/zero never ends
    except InputError as exc:
        raise MeasurementError(path, _problem(exc, path)) from None
    with path.open(newline="") as handle:
        reader = csv.reader(handle)
        try:
            yield from _csv_records(path, reader, columns, complete)
        except csv.Error as exc:  # a field past csv's size limit, a NUL byte
            raise MeasurementError(path, f"malformed CSV: {exc}", where=f"line {reader.line_num}") from None


def _csv_records(path: Path, reader, columns: tuple[str, ...], complete: bool
                 ) -> Iterator[tuple[int, dict[str, str | None], list[str]]]:
    """The records of :func:`csv_rows`, each line's width checked before it is used."""
    header = next(reader, None)
    if header is None:
        raise MeasurementError(path, "empty file (no header)", where="line 1")
    _check_width(path, len(header), 1)
    header_names = [name.strip() for name in header]
    for column in columns:
        if column not in header_names:
            raise MeasurementError(path, f"column missing (header: {names(header_names, 30)})", where="line 1",
                                   field=column)
    index = {column: header_names.index(column) for column in columns}
    width = limit("columns")
    for row in reader:
        if len(row) > width:
            _check_width(path, len(row), reader.line_num)
        if not row or all(not field.strip() for field in row):
            continue  # blank line: no measurement
        if complete and len(row) < len(header_names):
            raise MeasurementError(path, f"{len(row)} cells, the header has {len(header_names)}",
                                   where=f"line {reader.line_num}", field=header_names[len(row)])
        yield reader.line_num, {c: (row[i].strip() if i < len(row) else None) for c, i in index.items()}, row


def _check_width(path: Path, count: int, line: int) -> None:
    try:
        check_width(count, "this line")
    except InputError as exc:
        raise MeasurementError(path, str(exc), where=f"line {line}") from None


def _problem(exc: InputError, path: Path) -> str:
    """An input-limit message without its leading file name (MeasurementError adds it)."""
    text = str(exc)
    return text.removeprefix(f"{path}: ")


def json_document(path: Path) -> tuple[str, object]:
    """(text, document) of a JSON file, read within the input limits (:mod:`predictor.common.inputs`)."""
    try:
        text = read_bytes(path, "JSON file").decode("utf-8")
        return text, load_json(text, path)
    except InputError as exc:
        raise MeasurementError(path, _problem(exc, path)) from None
    except OSError as exc:
        raise MeasurementError(path, f"cannot read: {exc.strerror or type(exc).__name__}") from None
    except UnicodeDecodeError as exc:
        raise MeasurementError(path, f"not valid JSON: not UTF-8 text ({exc.reason} at byte {exc.start:,})") from None
    except json.JSONDecodeError as exc:
        raise MeasurementError(path, f"not valid JSON: {exc.msg}", where=f"line {exc.lineno}") from None


def _load_sia_file(path: Path, origin_name: str, device: str, workload: str) -> list[dict]:
    rows: list[dict] = []
    for line, cell, _ in csv_rows(path, SIA_COLUMNS):
        placement = _sia_int(path, line, "placement", cell["placement"])
        if placement != 1:
            continue
        batch = _sia_int(path, line, "local_bsz", cell["local_bsz"])
        if batch < 1:
            raise MeasurementError(path, f"must be >= 1, got {batch}", where=f"line {line}", field="local_bsz")
        seconds = _sia_seconds(path, line, "step_time", cell["step_time"])
        rows.append({"source": "sia", "device": device, "workload": workload, "batch": batch,
                     "seconds": seconds, "origin": f"{origin_name}:{line}"})
    return rows


def load_sia(directory: str | Path) -> pd.DataFrame:
    """Sia's 1-GPU step times: ``<directory>/<model>/placements-<cluster>.csv`` rows with
    ``placement == 1``, models cifar10 / imagenet / bert, clusters aws (T4), azure (V100),
    dgx-ext (A100), quad (RTX6000) and rtx (RTX2080Ti). ``dgx`` is skipped (same A100 hardware as
    dgx-ext, fewer batch sizes); deepspeech2, ncf, yolov3 and gpt_pmp are not read (no zoo model;
    gpt_pmp is synthetic and has no 1-GPU rows).

    Columns are found by header name; ``batch`` = ``local_bsz``, ``seconds`` = ``step_time``;
    ``origin`` = ``<directory name>/<model>/<file>:<1-based line>``. ``df.attrs["excluded"]`` is
    empty (every kept row is a measurement).

    Expected files that do not exist are not an error here (a partial profile directory can be
    read) but are listed in ``df.attrs["missing"]`` as ``<model>/<file>``; ``load_measurements``
    requires all of them. A directory with none of them raises ``MeasurementError``.
    """
    directory = Path(directory)
    if not directory.is_dir():
        raise MeasurementError(directory, "directory not found")
    rows: list[dict] = []
    missing: list[str] = []
    for model, workload in SIA_MODELS.items():
        for cluster, device in SIA_DEVICES.items():
            name = f"{model}/placements-{cluster}.csv"
            if not (directory / name).is_file():
                missing.append(name)
                continue
            rows += _load_sia_file(directory / name, f"{directory.name}/{name}", device, workload)
    if len(missing) == len(SIA_MODELS) * len(SIA_DEVICES):
        raise MeasurementError(directory, f"none of the expected <model>/placements-<cluster>.csv files "
                               f"(models {', '.join(SIA_MODELS)}; clusters {', '.join(SIA_DEVICES)})")
    df = _frame(rows, [])
    df.attrs["missing"] = missing
    return df


# --- NeuSight ------------------------------------------------------------------------------------


def neusight_label(path: Path) -> tuple[str, int, int, str | None]:
    """(model as in the file name, seq, batch, parallel suffix or None) of a NeuSight label file."""
    match = _NEUSIGHT_FILE.match(path.name)
    if match is None:
        raise MeasurementError(path, "not a '<model>-train-<seq>-<batch>[-<parallel>].json|csv' label",
                               field="file name")
    seq, batch = int(match["seq"]), int(match["batch"])
    if seq < 1 or batch < 1:
        raise MeasurementError(path, f"sequence {seq} and batch {batch} must be >= 1", field="file name")
    return match["model"], seq, batch, match["parallel"]


def neusight_device_and_workload(path: Path) -> tuple[str, str]:
    """The device name of the file's GPU folder and the zoo model of its file name."""
    from predictor.emulator.zoo.config import ModelBuildError
    from predictor.emulator.zoo.llm import canonical_model

    gpu = path.parent.name
    if gpu not in NEUSIGHT_DEVICES:
        raise MeasurementError(path, f"unknown GPU folder {short(gpu)} for a single-GPU label (known: "
                               f"{', '.join(NEUSIGHT_DEVICES)})", field="GPU")
    try:
        return NEUSIGHT_DEVICES[gpu], canonical_model(neusight_label(path)[0])
    except ModelBuildError as exc:
        raise MeasurementError(path, str(exc), field="model") from None


def _json_line(text: str, key: str) -> int:
    """1-based line of ``"key"`` in a JSON text (1 when absent)."""
    at = text.find(f'"{key}"')
    return text.count("\n", 0, at) + 1 if at >= 0 else 1


def _neusight_ms(path: Path, text: str, data: dict, key: str) -> float:
    line = _json_line(text, key)
    if key not in data:
        raise MeasurementError(path, "missing", where=f"line {line}", field=key)
    value = data[key]
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise MeasurementError(path, f"must be a finite number > 0 (ms), got {short(value)}", where=f"line {line}",
                               field=key)
    return float(value)


def neusight_files(directory: Path, ext: str) -> tuple[list[tuple[Path, str]], list[str]]:
    """(kept (path, origin) pairs, excluded origins) of ``<directory>/labels/*/*.<ext>``, sorted."""
    labels = directory / "labels"
    if not labels.is_dir():
        raise MeasurementError(labels, "directory not found")
    kept: list[tuple[Path, str]] = []
    excluded: list[str] = []
    for path in sorted(labels.glob(f"*/*.{ext}")):
        origin = f"{directory.name}/labels/{path.parent.name}/{path.name}"
        model, _, _, parallel = neusight_label(path)
        if parallel is not None or model in NEUSIGHT_SKIPPED:
            excluded.append(origin)  # multi-GPU run, or Switch-XL
        else:
            kept.append((path, origin))
    return kept, excluded


def load_neusight(directory: str | Path) -> pd.DataFrame:
    """NeuSight's single-GPU training iterations (``<directory>/labels/<GPU>/*.json``).

    ``seconds`` = ``e2e_latency`` / 1000 (forward + backward, **no optimizer step**),
    ``forward_s`` = ``fw_latency`` / 1000, ``backward_s`` = ``bwall_latency`` / 1000, ``seq`` and
    ``batch`` from the file name, ``workload`` = the zoo model (``gpt3_27`` -> ``gpt3_2.7b``);
    ``origin`` = ``<directory name>/labels/<GPU>/<file>``. Excluded and listed in
    ``attrs["excluded"]``: ``-dp4`` / ``-tp4`` / ``-pp4_1`` (4-GPU) runs and Switch-XL. A label of
    an unknown GPU folder or model, a missing or non-positive latency, or invalid JSON raise
    ``MeasurementError``.
    """
    directory = Path(directory)
    kept, excluded = neusight_files(directory, "json")
    rows: list[dict] = []
    for path, origin in kept:
        device, workload = neusight_device_and_workload(path)
        _, seq, batch, _ = neusight_label(path)
        text, data = json_document(path)
        if not isinstance(data, dict):
            raise MeasurementError(path, f"top level is a {type(data).__name__}, not an object", where="line 1")
        row = {"source": "neusight", "device": device, "workload": workload, "batch": batch, "origin": origin,
               "seq": seq}
        row.update({column: _neusight_ms(path, text, data, key) / 1000.0 for key, column in NEUSIGHT_FIELDS.items()})
        rows.append(row)
    return _frame(rows, excluded, NEUSIGHT_COLUMNS)


# --- SPREAD --------------------------------------------------------------------------------------


def load_spread(path: str | Path) -> pd.DataFrame:
    """SPREAD's single-GPU, whole-GPU iterations (``world_size`` 1, ``computation_proportion`` 100).

    Columns found by header name; ``seconds`` = ``iter_ms_median`` / 1000; ``workload`` =
    ``SPREAD_MODELS[model]``; ``origin`` = ``<folder>/<file>:<1-based line>``. YoloV5S rows are
    excluded and listed in ``attrs["excluded"]``. ``world_size`` and ``computation_proportion`` are
    checked on every row, the other fields on the kept rows; an unknown model or GPU, a
    non-numeric or non-positive value, or a missing column raise ``MeasurementError``.
    """
    path = Path(path)
    if not path.exists():  # a FIFO or device is refused by name when read, not called missing
        raise MeasurementError(path, "file not found")
    origin_name = f"{path.parent.name}/{path.name}"
    rows: list[dict] = []
    excluded: list[str] = []
    for line, cell, _ in csv_rows(path, SPREAD_COLUMNS):
        world = _sia_int(path, line, "world_size", cell["world_size"])
        share = _sia_int(path, line, "computation_proportion", cell["computation_proportion"])
        if world != 1 or share != 100:
            continue
        origin = f"{origin_name}:{line}"
        if cell["model"] in SPREAD_SKIPPED:
            excluded.append(origin)
            continue
        if cell["model"] not in SPREAD_MODELS:
            raise MeasurementError(path, f"unknown model {short(cell['model'])} (known: {', '.join(SPREAD_MODELS)}; "
                                   f"skipped: {', '.join(SPREAD_SKIPPED)})", where=f"line {line}", field="model")
        if cell["gpu"] not in SPREAD_DEVICES:
            raise MeasurementError(path, f"unknown GPU {short(cell['gpu'])} (known: {', '.join(SPREAD_DEVICES)})",
                                   where=f"line {line}", field="gpu")
        batch = _sia_int(path, line, "batch", cell["batch"])
        if batch < 1:
            raise MeasurementError(path, f"must be >= 1, got {batch}", where=f"line {line}", field="batch")
        ms = _sia_seconds(path, line, "iter_ms_median", cell["iter_ms_median"])
        rows.append({"source": "spread", "device": SPREAD_DEVICES[cell["gpu"]],
                     "workload": SPREAD_MODELS[cell["model"]], "batch": batch, "seconds": ms / 1000.0,
                     "origin": origin})
    return _frame(rows, excluded)


# --- all -----------------------------------------------------------------------------------------


def _gavel_and_sia(calibration_dir: Path, source: str) -> pd.DataFrame:
    if source == "gavel":
        return load_gavel(calibration_dir / GAVEL_FILE)
    sia_dir = calibration_dir / SIA_DIR
    if not sia_dir.is_dir():
        raise MeasurementError(sia_dir, "directory not found")
    for model in SIA_MODELS:
        for cluster in SIA_DEVICES:
            if not (sia_dir / model / f"placements-{cluster}.csv").is_file():
                raise MeasurementError(sia_dir / model / f"placements-{cluster}.csv", "file not found")
    return load_sia(sia_dir)


def load_measurements(calibration_dir: str | Path, sources: tuple[str, ...] = DEFAULT_SOURCES) -> pd.DataFrame:
    """The rows of ``sources`` (in that order; default Gavel then Sia) in one table;
    ``attrs["excluded"]`` lists the excluded origins of all of them.

    Every expected file must exist (``MeasurementError`` naming the first missing one). With
    ``"neusight"`` among the sources the table also has NeuSight's ``forward_s``, ``backward_s``
    and ``seq`` columns (missing / <NA> on the other sources' rows)."""
    sources = tuple(sources)
    unknown = [s for s in sources if s not in SOURCES]
    if unknown or len(set(sources)) != len(sources) or not sources:
        raise ValueError(f"sources must be distinct names among {', '.join(SOURCES)}, got {short(sources)}")
    calibration_dir = Path(calibration_dir)
    if not calibration_dir.is_dir():
        raise MeasurementError(calibration_dir, "calibration directory not found "
                               "(set $ETS_CALIBRATION or $ETS_SHARED)")
    frames = []
    for source in sources:
        if source in ("gavel", "sia"):
            frames.append(_gavel_and_sia(calibration_dir, source))
        elif source == "neusight":
            frames.append(load_neusight(calibration_dir / NEUSIGHT_DIR))
        else:
            frames.append(load_spread(calibration_dir / SPREAD_FILE))
    columns = NEUSIGHT_COLUMNS if "neusight" in sources else COLUMNS
    df = pd.concat([f.reindex(columns=list(columns)) for f in frames], ignore_index=True)
    df = df.astype({c: _TYPES[c] for c in columns})
    df.attrs = {"excluded": [origin for f in frames for origin in f.attrs["excluded"]]}
    return df


def default_calibration_dir() -> Path:
    """``$ETS_CALIBRATION``, else ``$ETS_SHARED/calibration``, else ``<repo>/../shared/calibration``
    (the ``shared_dir`` rule of tests/conftest.py; an empty variable counts as unset)."""
    if os.environ.get("ETS_CALIBRATION"):
        return Path(os.environ["ETS_CALIBRATION"])
    if os.environ.get("ETS_SHARED"):
        return Path(os.environ["ETS_SHARED"]) / "calibration"
    return _REPO.parent / "shared" / "calibration"


# --- zoo configs ---------------------------------------------------------------------------------


def workload_config(workload: str, batch: int, input_size: int | None = None) -> ModelConfig:
    """The zoo config that rebuilds ``workload`` at per-GPU ``batch`` (fp32; approximations noted).

    ``input_size`` (image side or sequence length) replaces the workload's default: the LLMs'
    default is NeuSight's measured sequence (512 BERT-large, 1024 GPT-2, 2048 GPT-3 / OPT; the
    model's maximum for the unmeasured GPT-2 medium / XL); SPREAD's are ``SPREAD_CONFIGS``'.

    * ``resnet18_cifar``: CIFAR-10 ResNet-18 as Gavel and Pollux/Sia train it (kuangliu/pytorch-
      cifar: 3x3 stride-1 stem, no max-pool, stages 64/128/256/512), 32x32, 10 classes; SGD.
    * ``resnet50_imagenet``: torchvision resnet50, 224x224, 1000 classes; SGD.
    * ``resnet50_imagenet_amp``: the same with automatic mixed precision
      (:mod:`predictor.emulator.capture.amp`: float16 convolutions and GEMMs, float32 master weights, loss
      scaling), for Pollux/Sia's ImageNet benchmark, which trains with apex AMP.
    * ``transformer_multi30k``: ``transformer_seq2seq`` base (6+6 layers, d 512, 8 heads, ff
      2048) as in Gavel's attention-is-all-you-need job; Adam. Approximations: Multi30k sentences
      are short and vary in length, taken as a fixed 32 tokens for source and target; one shared
      vocabulary of 10000 (Multi30k's source and target vocabularies are each of that order);
      no weight sharing between embedding and projection.
    * ``lstm_wikitext2``: ``lstm_lm`` small (2x200, the PyTorch word_language_model defaults
      Gavel ran), 35 tokens (bptt), vocabulary 33278 (WikiText-2); SGD. Approximations: no
      dropout, no hidden state carried between steps, momentum SGD instead of plain SGD.
    * ``bert_base_squad``: ``transformer_encoder`` base (12 layers, d 768), 384 tokens, BERT's
      30522-token vocabulary, 2 outputs per token (the QA span head's start/end logits, a single
      linear layer, instead of the MLM head); Adam (fine-tuning uses AdamW). Approximations: no
      token-type embeddings; loss over 2 classes per token instead of over positions.
    * NeuSight's LLMs (``NEUSIGHT_WORKLOADS``, or any ``predictor.emulator.zoo.llm`` model / NeuSight name):
      ``llm.config_for(model, batch, seq)``, fp32, Adam (NeuSight's times have no optimizer step).
    * SPREAD's (``SPREAD_WORKLOADS``): ``SPREAD_CONFIGS`` (assumed sizes, see there); vision models
      with 1000 classes, ``spread_bert_base`` = ``transformer_encoder`` base with the MLM head,
      ``spread_lstm`` = ``lstm_wikitext2``'s model.
    """
    config = _workload_config(workload, batch)
    if input_size is not None and input_size != config.input_size:
        config = config.replace(input_size=input_size)
    return config


def _workload_config(workload: str, batch: int) -> ModelConfig:
    from predictor.emulator.zoo import llm, nlp

    if workload in SPREAD_CONFIGS:
        model, size, optimizer = SPREAD_CONFIGS[workload]
        if model == "transformer_encoder":
            return nlp.config_for(model, "base", batch, size, optimizer=optimizer)
        if model == "lstm_lm":
            return nlp.config_for(model, "small", batch, size, optimizer=optimizer, vocab=33278)
        return ModelConfig("vision", family_of(model), model, batch, size, optimizer=optimizer, num_classes=1000)
    if workload in llm.SPECS or workload in llm.ALIASES:
        model = llm.canonical_model(workload)
        seq = llm.LABEL_POINTS.get(model, (llm.SPECS[model].positions,))[0]
        return llm.config_for(model, batch, seq)
    if workload == "resnet18_cifar":
        return ModelConfig("vision", "resnet", "resnet18_cifar", batch, 32, num_classes=10)
    if workload == "resnet50_imagenet":
        return ModelConfig("vision", "resnet", "resnet50", batch, 224, num_classes=1000)
    if workload == "resnet50_imagenet_amp":
        return ModelConfig("vision", "resnet", "resnet50", batch, 224, dtype="amp", num_classes=1000)
    if workload == "transformer_multi30k":
        return nlp.config_for("transformer_seq2seq", "base", batch, 32, optimizer="adam", vocab=10000)
    if workload == "lstm_wikitext2":
        return nlp.config_for("lstm_lm", "small", batch, 35, vocab=33278)
    if workload == "bert_base_squad":
        return nlp.config_for("transformer_encoder", "base", batch, 384, optimizer="adam", num_classes=2)
    known = (*WORKLOADS, *SPREAD_WORKLOADS, *NEUSIGHT_WORKLOADS)
    raise ValueError(f"unknown workload {short(workload)}; known workloads: {', '.join(known)} "
                     f"(and the other predictor.emulator.zoo.llm models)")

"""Measured single-GPU iteration times that the emulated GPUs are fitted to, as one table.

Why: an emulated GPU (a device spec plus a timing model) is only as good as its fit to real
iteration times. Two published systems measured such times on real GPUs, for workloads our zoo
can rebuild; this module reads their files (``/work/shared/calibration``, see its README.md) into
one table and maps each measured workload to the zoo config that rebuilds it, so the emulated
time of ``build(workload_config(w, b))`` can be compared with the measured seconds.

Sources (1 GPU only; scale factor / placement 1):

* **Gavel** (OSDI'20), ``gavel_physical_cluster_throughputs.json``: training steps per second of
  each job running alone on K80, P100 and V100 (the ``k80`` / ``p100`` / ``v100`` sections;
  ``*_unconsolidated`` only differ for multi-server jobs). Seconds per iteration = 1 / steps per
  second. A throughput of 0.0 means "not measured / did not fit" (K80 ResNet-50 batch 128): such
  entries are excluded and listed in ``df.attrs["excluded"]``.
* **Sia** (SOSP'23; the ``aws`` profiles are Pollux's, OSDI'21),
  ``sia_placements/<model>/placements-<cluster>.csv``: ``step_time`` (seconds per iteration) at
  ``placement == 1`` per local batch size, on T4 (aws), V100 (azure), A100 (dgx-ext), Quadro RTX
  6000 (quad) and RTX 2080 Ti (rtx). ``dgx`` is skipped: the same A100 hardware as ``dgx-ext``
  with fewer batch sizes.

What the numbers include: both are wall-clock times of a training loop, so a step also pays the
input pipeline (data loading, host-to-device copies) and the loss read-out / logging that a GPU
execution trace of forward + backward + optimizer does not contain; at small batches this fixed
overhead dominates (see the README's cross-checks). Sia's simulator additionally divides goodput
by per-model slowdown factors "fitted to real-world data" (1.2-1.8), which we do not apply.

Table columns: ``source`` ("gavel" | "sia"), ``device`` ("K80", "P100", "V100", "T4", "A100",
"RTX6000", "RTX2080Ti"), ``workload`` (one of ``WORKLOADS``), ``batch`` (int, per GPU),
``seconds`` (float > 0, per iteration), ``origin`` (file and key / 1-based line it came from).
Malformed values raise ``MeasurementError`` naming the file, the row or key, and the field.
"""

from __future__ import annotations

import ast
import csv
import json
import math
import os
import re
from pathlib import Path

import pandas as pd

from predictor.zoo.config import ModelConfig

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
SIA_DEVICES = {"aws": "T4", "azure": "V100", "dgx-ext": "A100", "quad": "RTX6000", "rtx": "RTX2080Ti"}
SIA_COLUMNS = ("placement", "local_bsz", "step_time")

_REPO = Path(__file__).resolve().parents[2]


class MeasurementError(ValueError):
    """A calibration file that is missing or malformed; the message names the file, the row or
    key (``where``) and the field."""

    def __init__(self, file: str | Path, problem: str, *, where: str | None = None, field: str | None = None):
        self.file, self.problem, self.where, self.field = str(file), problem, where, field
        parts = [self.file]
        if where:
            parts.append(where)
        if field:
            parts.append(f"field {field!r}")
        super().__init__(": ".join(parts) + f": {problem}")


def _frame(rows: list[dict], excluded: list[str]) -> pd.DataFrame:
    df = pd.DataFrame(rows, columns=list(COLUMNS))
    df = df.astype({"source": str, "device": str, "workload": str, "batch": "int64", "seconds": "float64",
                    "origin": str})
    df.attrs["excluded"] = list(excluded)
    return df


# --- Gavel ---------------------------------------------------------------------------------------


def _gavel_key(path: Path, section: str, key: object) -> tuple[str, int]:
    where = f"section {section!r} key {key!r}"
    try:
        parsed = ast.literal_eval(key) if isinstance(key, str) else None
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        parsed = None
    if (not isinstance(parsed, tuple) or len(parsed) != 2 or not isinstance(parsed[0], str)
            or isinstance(parsed[1], bool) or not isinstance(parsed[1], int) or parsed[1] < 1):
        raise MeasurementError(path, "not a \"('<job type>', <scale factor>)\" tuple", where=where, field="job key")
    return parsed


def _gavel_throughput(path: Path, where: str, entry: object) -> float:
    if not isinstance(entry, dict) or "null" not in entry:
        raise MeasurementError(path, "no isolated-throughput entry", where=where, field="null")
    value = entry["null"]
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise MeasurementError(path, f"not a number: {value!r}", where=where, field="null")
    if not math.isfinite(value) or value < 0:
        raise MeasurementError(path, f"throughput must be finite and >= 0, got {value!r}", where=where, field="null")
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
    if not path.is_file():
        raise MeasurementError(path, "file not found")
    try:
        data = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise MeasurementError(path, f"not valid JSON: {exc}") from exc
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
            job_type, scale = _gavel_key(path, section, key)
            if scale != 1:
                continue
            where = f"section {section!r} key {key!r}"
            match = _GAVEL_JOB.match(job_type)
            name = match["name"] if match else job_type
            if name in GAVEL_SKIPPED:
                continue
            if name not in GAVEL_JOBS or match is None:
                raise MeasurementError(
                    path, f"unknown job type {job_type!r} (expected '<name> (batch size <n>)' with name in "
                    f"{', '.join(GAVEL_JOBS)}; skipped: {', '.join(GAVEL_SKIPPED)})", where=where, field="job type")
            batch = int(match["batch"])
            if batch < 1:
                raise MeasurementError(path, f"batch size must be >= 1, got {batch}", where=where, field="job type")
            throughput = _gavel_throughput(path, where, entry)
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
        raise MeasurementError(path, f"not a non-negative integer: {text!r}", where=f"line {line}", field=field)
    return int(value)


def _sia_seconds(path: Path, line: int, field: str, text: str | None) -> float:
    try:
        value = float((text or "").strip())
    except ValueError:
        raise MeasurementError(path, f"not a number: {text!r}", where=f"line {line}", field=field) from None
    if not math.isfinite(value) or value <= 0:
        raise MeasurementError(path, f"must be finite and > 0, got {text!r}", where=f"line {line}", field=field)
    return value


def _load_sia_file(path: Path, origin_name: str, device: str, workload: str) -> list[dict]:
    rows: list[dict] = []
    with path.open(newline="") as handle:
        reader = csv.reader(handle)
        header = next(reader, None)
        if header is None:
            raise MeasurementError(path, "empty file (no header)", where="line 1")
        names = [name.strip() for name in header]
        index = {}
        for column in SIA_COLUMNS:
            if column not in names:
                raise MeasurementError(path, f"column missing (header: {', '.join(names)})", where="line 1",
                                       field=column)
            index[column] = names.index(column)

        def cell(row: list[str], column: str) -> str | None:
            i = index[column]
            return row[i] if i < len(row) else None

        for row in reader:
            if not row or all(not field.strip() for field in row):
                continue  # blank line: no measurement
            line = reader.line_num
            placement = _sia_int(path, line, "placement", cell(row, "placement"))
            if placement != 1:
                continue
            batch = _sia_int(path, line, "local_bsz", cell(row, "local_bsz"))
            if batch < 1:
                raise MeasurementError(path, f"must be >= 1, got {batch}", where=f"line {line}", field="local_bsz")
            seconds = _sia_seconds(path, line, "step_time", cell(row, "step_time"))
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


# --- both ----------------------------------------------------------------------------------------


def load_measurements(calibration_dir: str | Path) -> pd.DataFrame:
    """Gavel then Sia rows in one table; ``attrs["excluded"]`` lists the excluded origins of both.

    Every expected file must exist (``MeasurementError`` naming the first missing one)."""
    calibration_dir = Path(calibration_dir)
    if not calibration_dir.is_dir():
        raise MeasurementError(calibration_dir, "calibration directory not found "
                               "(set $ETS_CALIBRATION or $ETS_SHARED)")
    gavel = load_gavel(calibration_dir / GAVEL_FILE)
    sia_dir = calibration_dir / SIA_DIR
    if not sia_dir.is_dir():
        raise MeasurementError(sia_dir, "directory not found")
    for model in SIA_MODELS:
        for cluster in SIA_DEVICES:
            if not (sia_dir / model / f"placements-{cluster}.csv").is_file():
                raise MeasurementError(sia_dir / model / f"placements-{cluster}.csv", "file not found")
    sia = load_sia(sia_dir)
    df = pd.concat([gavel, sia], ignore_index=True)
    df.attrs = {"excluded": gavel.attrs["excluded"] + sia.attrs["excluded"]}
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


def workload_config(workload: str, batch: int) -> ModelConfig:
    """The zoo config that rebuilds ``workload`` at per-GPU ``batch`` (fp32; approximations noted).

    * ``resnet18_cifar``: CIFAR-10 ResNet-18 as Gavel and Pollux/Sia train it (kuangliu/pytorch-
      cifar: 3x3 stride-1 stem, no max-pool, stages 64/128/256/512), 32x32, 10 classes; SGD.
    * ``resnet50_imagenet``: torchvision resnet50, 224x224, 1000 classes; SGD.
    * ``resnet50_imagenet_amp``: the same in float16, for Pollux/Sia's ImageNet benchmark, which
      trains with apex AMP (half-precision convolutions and GEMMs; AMP's float32 master weights
      and loss scaling are not modelled).
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
    """
    from predictor.zoo import nlp

    if workload == "resnet18_cifar":
        return ModelConfig("vision", "resnet", "resnet18_cifar", batch, 32, num_classes=10)
    if workload == "resnet50_imagenet":
        return ModelConfig("vision", "resnet", "resnet50", batch, 224, num_classes=1000)
    if workload == "resnet50_imagenet_amp":
        return ModelConfig("vision", "resnet", "resnet50", batch, 224, dtype="float16", num_classes=1000)
    if workload == "transformer_multi30k":
        return nlp.config_for("transformer_seq2seq", "base", batch, 32, optimizer="adam", vocab=10000)
    if workload == "lstm_wikitext2":
        return nlp.config_for("lstm_lm", "small", batch, 35, vocab=33278)
    if workload == "bert_base_squad":
        return nlp.config_for("transformer_encoder", "base", batch, 384, optimizer="adam", num_classes=2)
    raise ValueError(f"unknown workload {workload!r}; known workloads: {', '.join(WORKLOADS)}")

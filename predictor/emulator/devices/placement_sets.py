"""Real multi-GPU measurements, read into tables for the data-parallel validation.

Why: the communication model (:mod:`predictor.emulator.devices.collectives`) and the data-parallel step
(:mod:`predictor.emulator.devices.data_parallel`) are spec-derived; only real multi-GPU step times say how
far they are from hardware. Four public sets hold such times (``../shared/calibration``, each
folder's README); this module only parses them, the predictions are in
:mod:`predictor.emulator.devices.placement_validation`.

* **Sia / Pollux placements** (``sia_placements/<model>/placements-<cluster>.csv``,
  :func:`load_sia_placements`): ``step_time`` and ``sync_time`` (seconds per iteration and of it
  waiting for the gradient all-reduce after backward: AdaptDL's ``_final_callback``) per
  (placement, local batch); the placement's digits are the GPUs on each node (``13`` = 1 + 3 on
  two nodes). ``scalability-<cluster>.csv`` (:func:`load_sia_scalability`) has only node and
  replica counts: the replicas are taken as spread as evenly as the nodes allow (not recorded).
* **Lambda** (``lambda/lambda_runs.csv``, :func:`load_lambda_multi`): throughput of 2–16-GPU
  runs of one server (NVIDIA's recipes under DDP); ``seconds`` = per-GPU batch × GPUs /
  throughput. The ``…NVlink_trt`` / ``…_trt`` systems are twins: the same server with and
  without NVLink bridges (``twin``).
* **Gavel** (``gavel_physical_cluster_throughputs.json``, :func:`load_gavel_placements`): steps/s
  of 2/4/8-GPU jobs consolidated (one server) and unconsolidated (spread over servers).
* **NeuSight** (``neusight/labels/<GPU>/<model>-train-<seq>-<batch>-dp<N>.json``,
  :func:`load_neusight_dp`): forward + backward (DDP's all-reduce included, no optimizer step) of
  a data-parallel run; ``batch`` is the global batch (NeuSight's ``collect_label_distributed.py``
  divides it by the data-parallel degree).

Malformed values raise :class:`predictor.emulator.devices.measurements.MeasurementError` naming the file,
the line (or JSON key) and the field.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from pathlib import Path

import pandas as pd

from predictor.common.inputs import short
from predictor.common.sia_clusters import SIA_CLUSTERS
from predictor.emulator.devices.measurements import (
    GAVEL_DEVICES,
    GAVEL_JOBS,
    GAVEL_SKIPPED,
    SIA_DIR,
    SIA_MODELS,
    MeasurementError,
    csv_rows,
)

# --- Sia -----------------------------------------------------------------------------------------


# The clusters' hardware (exact boards, GPUs per node, network): one record, predictor.common.sia_clusters
# Sia models without a model of ours (no zoo model and none in torchvision / timm / transformers):
# their rows are counted, not predicted. gpt_pmp is synthetic (step_time = 0.099 x batch).
SIA_UNMODELLED = ("deepspeech2", "ncf", "yolov3", "gpt_pmp")
SIA_PLACEMENT_COLUMNS = ("placement", "local_bsz", "step_time", "sync_time")
SIA_SCALABILITY_COLUMNS = ("num_nodes", "num_replicas", "local_bsz", "step_time", "sync_time")
SIA_ROW_COLUMNS = ("model", "workload", "cluster", "device", "placement", "counts", "gpus", "nodes", "local_bsz",
                   "step_time", "sync_time", "origin")


def _int(path: Path, line: int, field: str, text: str | None, low: int = 1) -> int:
    raw = (text or "").strip()
    try:
        value = float(raw)
    except ValueError:
        raise MeasurementError(path, f"not a number: {short(text)}", where=f"line {line}", field=field) from None
    if not math.isfinite(value) or value != int(value) or value < low:
        raise MeasurementError(path, f"must be a whole number >= {low}, got {short(text)}", where=f"line {line}",
                               field=field)
    return int(value)


def _seconds(path: Path, line: int, field: str, text: str | None, *, zero: bool = False) -> float:
    raw = (text or "").strip()
    try:
        value = float(raw)
    except ValueError:
        raise MeasurementError(path, f"not a number: {short(text)}", where=f"line {line}", field=field) from None
    if not math.isfinite(value) or value < 0 or (value == 0 and not zero):
        raise MeasurementError(path, f"must be finite and {'>=' if zero else '>'} 0, got {short(text)}",
                               where=f"line {line}", field=field)
    return value


def parse_placement(path: Path, line: int, text: str | None) -> tuple[int, ...]:
    """GPUs per node of a Sia placement (``'13'`` -> (1, 3)); digits 1–9 only."""
    raw = (text or "").strip()
    if not raw or not raw.isascii() or not raw.isdigit() or "0" in raw:
        raise MeasurementError(path, f"not a placement (one digit 1-9 per node): {short(text)}",
                               where=f"line {line}", field="placement")
    return tuple(int(c) for c in raw)


def even_counts(nodes: int, replicas: int) -> tuple[int, ...]:
    """Replicas spread as evenly as possible over nodes (largest first): (3, 2) for 5 over 2."""
    base, extra = divmod(replicas, nodes)
    return tuple(base + 1 if i < extra else base for i in range(nodes))


def _sia_files(directory: Path, kind: str, models, clusters) -> list[tuple[str, str, Path]]:
    if not directory.is_dir():
        raise MeasurementError(directory, "directory not found")
    out = []
    for model in models:
        for cluster in clusters:
            path = directory / model / f"{kind}-{cluster}.csv"
            if path.is_file():
                out.append((model, cluster, path))
    return out


def _check_names(models, clusters) -> None:
    bad = [m for m in models if m not in SIA_MODELS and m not in SIA_UNMODELLED]
    bad += [c for c in clusters if c not in SIA_CLUSTERS]
    if bad:
        raise ValueError(f"unknown Sia model or cluster {short(bad)} (models: {', '.join(SIA_MODELS)}, "
                         f"{', '.join(SIA_UNMODELLED)}; clusters: {', '.join(SIA_CLUSTERS)})")


def _sia_frame(rows: list[dict], counted: Counter, missing: list[str]) -> pd.DataFrame:
    df = pd.DataFrame(rows, columns=list(SIA_ROW_COLUMNS))
    df = df.astype({"gpus": "int64", "nodes": "int64", "local_bsz": "int64", "step_time": "float64",
                    "sync_time": "float64"})
    df.attrs["unmodelled"] = dict(counted)  # model -> rows without a model of ours
    df.attrs["missing"] = missing
    return df


def _sia_inputs(directory: str | Path, kind: str, models: tuple[str, ...] | None,
                clusters: tuple[str, ...] | None) -> tuple[Path, tuple[str, ...], tuple[str, ...], list]:
    """The directory, the models and clusters asked (default: all, checked) and the
    ``<model>/<kind>-<cluster>.csv`` files present; none of them raises."""
    directory = Path(directory)
    models = tuple(models or (*SIA_MODELS, *SIA_UNMODELLED))
    clusters = tuple(clusters or SIA_CLUSTERS)
    _check_names(models, clusters)
    files = _sia_files(directory, kind, models, clusters)
    if not files:
        raise MeasurementError(directory, f"none of the <model>/{kind}-<cluster>.csv files "
                               f"(models {', '.join(models)}; clusters {', '.join(clusters)})")
    return directory, models, clusters, files


def _sia_row(model: str, cluster: str, path: Path, line: int, placement: str, counts: tuple[int, ...],
             batch: int, step: float, sync: float) -> dict:
    """One kept Sia row in :data:`SIA_ROW_COLUMNS` (GPUs and nodes from ``counts``)."""
    return {"model": model, "workload": SIA_MODELS[model], "cluster": cluster, "device": SIA_CLUSTERS[cluster].gpu,
            "placement": placement, "counts": counts, "gpus": sum(counts), "nodes": len(counts), "local_bsz": batch,
            "step_time": step, "sync_time": sync, "origin": f"{model}/{path.name}:{line}"}


def load_sia_placements(directory: str | Path, models: tuple[str, ...] | None = None,
                        clusters: tuple[str, ...] | None = None) -> pd.DataFrame:
    """Every (placement, local batch) row of ``<directory>/<model>/placements-<cluster>.csv``.

    Columns ``SIA_ROW_COLUMNS``: ``workload`` is the zoo workload (:data:`measurements.SIA_MODELS`);
    rows of ``SIA_UNMODELLED`` models are not kept but counted in ``attrs["unmodelled"]``;
    ``counts`` the GPUs per node, ``origin`` ``<model>/<file>:<line>``. Files not present are
    listed in ``attrs["missing"]``; a directory with none of them raises."""
    directory, models, clusters, files = _sia_inputs(directory, "placements", models, clusters)
    have = {(m, c) for m, c, _ in files}
    missing = [f"{m}/placements-{c}.csv" for m in models for c in clusters if (m, c) not in have]
    rows, counted = [], Counter()
    for model, cluster, path in files:
        for line, cell, _ in csv_rows(path, SIA_PLACEMENT_COLUMNS):
            counts = parse_placement(path, line, cell["placement"])
            batch = _int(path, line, "local_bsz", cell["local_bsz"])
            step = _seconds(path, line, "step_time", cell["step_time"])
            sync = _seconds(path, line, "sync_time", cell["sync_time"], zero=True)
            if model not in SIA_MODELS:
                counted[model] += 1
                continue
            rows.append(_sia_row(model, cluster, path, line, cell["placement"].strip(), counts, batch, step, sync))
    return _sia_frame(rows, counted, missing)


def load_sia_scalability(directory: str | Path, models: tuple[str, ...] | None = None,
                         clusters: tuple[str, ...] | None = None) -> pd.DataFrame:
    """``scalability-<cluster>.csv`` rows as :func:`load_sia_placements`' columns; ``counts`` =
    :func:`even_counts` (the files record only nodes and replicas), ``placement`` the counts'
    digits joined with ``+`` where one exceeds 9. A row with more nodes than replicas raises."""
    directory, models, clusters, files = _sia_inputs(directory, "scalability", models, clusters)
    rows, counted = [], Counter()
    for model, cluster, path in files:
        for line, cell, _ in csv_rows(path, SIA_SCALABILITY_COLUMNS):
            nodes = _int(path, line, "num_nodes", cell["num_nodes"])
            replicas = _int(path, line, "num_replicas", cell["num_replicas"])
            if replicas < nodes:
                raise MeasurementError(path, f"{replicas} replicas on {nodes} nodes: a node without a GPU",
                                       where=f"line {line}", field="num_replicas")
            batch = _int(path, line, "local_bsz", cell["local_bsz"])
            step = _seconds(path, line, "step_time", cell["step_time"])
            sync = _seconds(path, line, "sync_time", cell["sync_time"], zero=True)
            if model not in SIA_MODELS:
                counted[model] += 1
                continue
            counts = even_counts(nodes, replicas)
            sep = "+" if max(counts) > 9 else ""
            rows.append(_sia_row(model, cluster, path, line, sep.join(map(str, counts)), counts, batch, step, sync))
    return _sia_frame(rows, counted, [])


# --- Lambda --------------------------------------------------------------------------------------

LAMBDA_MULTI_COLUMNS = ("system", "device", "gpus", "twin", "twin_key", "provider", "task", "workload", "precision",
                        "batch", "throughput", "seconds", "config_version", "origin")
_LAMBDA_MULTI = re.compile(r"^(?:(?P<provider>LambdaCloud|Linode)_)?(?P<gpus>\d+)x(?P<base>[A-Za-z0-9_.]+?)"
                           r"(?P<nvlink>NVlink)?(?P<trt>_trt2?)?$")
# multi-GPU system bases that are not a single-GPU system's name -> catalogue GPU
_LAMBDA_BASES = {"V10016G": "V100-SXM2", "V100_16GB_v1": "V100-SXM2"}
_AWS_P3 = {"p3.8xlarge": 4, "p3.16xlarge": 8}  # 4 / 8 V100 SXM2 on NVLink (the single-GPU p3.2xlarge's GPU)
_LAMBDA_FIELDS = ("system", "task", "precision_dir", "throughput", "path", "config_file", "num_gpu_config",
                  "batch_size_config")


def lambda_system(system: str) -> dict | None:
    """(catalogue GPU, GPUs, twin, twin key, provider) of a multi-GPU Lambda system folder; None
    when it names no GPU we know. ``twin``: ``nvlink`` / ``pcie`` for the ``…NVlink_trt`` /
    ``…_trt`` systems (the same server with and without bridges), else None; ``twin_key`` pairs
    them (``2080Ti_trt2``)."""
    from predictor.emulator.devices.throughput_sets import LAMBDA_SYSTEMS

    if system in _AWS_P3:
        return {"device": LAMBDA_SYSTEMS["p3.2xlarge"], "gpus": _AWS_P3[system], "twin": None, "twin_key": None,
                "provider": "aws"}
    match = _LAMBDA_MULTI.match(system)
    if match is None:
        return None
    base, provider = match["base"], match["provider"] or ""
    names = [f"{provider}_{base}", f"{provider}_1x{base}"] if provider else []
    device = next((LAMBDA_SYSTEMS[n] for n in [*names, base] if n in LAMBDA_SYSTEMS), _LAMBDA_BASES.get(base))
    if device is None:
        return None
    twin = ("nvlink" if match["nvlink"] else "pcie") if match["trt"] else None
    return {"device": device, "gpus": int(match["gpus"]), "twin": twin,
            "twin_key": f"{base}{match['trt']}" if twin else None, "provider": provider}


def load_lambda_multi(root: str | Path) -> pd.DataFrame:
    """Lambda's multi-GPU runs of the zoo's tasks (``throughput_sets.LAMBDA_TASKS``) with a parsed
    throughput: columns ``LAMBDA_MULTI_COLUMNS`` (``batch`` per GPU, ``seconds`` per step).
    ``attrs["excluded_counts"]``: runs left out by reason (other tasks, failed runs, unknown
    systems)."""
    from predictor.emulator.devices.throughput_sets import LAMBDA_FILE, LAMBDA_PRECISIONS, LAMBDA_SKIPPED, LAMBDA_TASKS

    path = Path(root) / LAMBDA_FILE
    if not path.exists():
        raise MeasurementError(path, "file not found")
    rows, counts = [], Counter()
    for line, cell, _ in csv_rows(path, _LAMBDA_FIELDS):
        gpus = _int(path, line, "num_gpu_config", cell["num_gpu_config"])
        if gpus == 1:
            continue
        task, system = cell["task"] or "", cell["system"] or ""
        if task not in LAMBDA_TASKS:
            if task not in LAMBDA_SKIPPED:
                raise MeasurementError(path, f"unknown task {short(task)}", where=f"line {line}", field="task")
            counts[f"task {task}: no zoo model"] += 1
            continue
        precision = LAMBDA_PRECISIONS.get(cell["precision_dir"] or "")
        if precision is None:
            raise MeasurementError(path, f"unknown precision {short(cell['precision_dir'])} (known: "
                                   f"{', '.join(LAMBDA_PRECISIONS)})", where=f"line {line}", field="precision_dir")
        if not (cell["throughput"] or "").strip():
            counts["no parsed throughput"] += 1
            continue
        info = lambda_system(system)
        if info is None:
            counts[f"system {system}: GPU not in the catalogue"] += 1
            continue
        if info["gpus"] != gpus:
            raise MeasurementError(path, f"system {short(system)} names {info['gpus']} GPUs, the run {gpus}",
                                   where=f"line {line}", field="num_gpu_config")
        throughput = _seconds(path, line, "throughput", cell["throughput"])
        batch = _int(path, line, "batch_size_config", cell["batch_size_config"])
        version = re.search(r"config_(v\d+)/", cell["config_file"] or "")
        if version is None:
            raise MeasurementError(path, f"no config_vN/ folder in {short(cell['config_file'])}",
                                   where=f"line {line}", field="config_file")
        rows.append({"system": system, **info, "task": task, "workload": LAMBDA_TASKS[task], "precision": precision,
                     "batch": batch, "throughput": throughput, "seconds": batch * gpus / throughput,
                     "config_version": version[1], "origin": f"{Path(root).name}/{LAMBDA_FILE}:{line}"})
    df = pd.DataFrame(rows, columns=list(LAMBDA_MULTI_COLUMNS))
    df = df.astype({"gpus": "int64", "batch": "int64", "throughput": "float64", "seconds": "float64"})
    df.attrs["excluded_counts"] = dict(counts)
    return df


# --- Gavel ---------------------------------------------------------------------------------------

GAVEL_PLACEMENT_COLUMNS = ("device", "job", "workload", "batch", "gpus", "single_steps_s", "consolidated_steps_s",
                           "unconsolidated_steps_s", "origin")
_GAVEL_JOB = re.compile(r"^(?P<name>.*\S) \(batch size (?P<batch>\d+)\)$")


def load_gavel_placements(path: str | Path) -> pd.DataFrame:
    """Gavel's multi-GPU jobs with both placements measured: one row per (GPU, job type, GPUs) of
    the ``k80``/``p100``/``v100`` sections whose ``*_unconsolidated`` twin and 1-GPU entry have a
    throughput > 0 (steps/s of the job alone, ``"null"``). Jobs in ``GAVEL_SKIPPED`` and pairs
    missing a side are counted in ``attrs["excluded_counts"]``."""
    from predictor.emulator.devices.measurements import gavel_key, gavel_throughput, json_document

    path = Path(path)
    if not path.exists():
        raise MeasurementError(path, "file not found")
    data = json_document(path)[1]
    if not isinstance(data, dict):
        raise MeasurementError(path, f"top level is a {type(data).__name__}, not an object")
    rows, counts = [], Counter()
    for section, device in GAVEL_DEVICES.items():
        spread = f"{section}_unconsolidated"
        for name in (section, spread):
            if not isinstance(data.get(name), dict):
                raise MeasurementError(path, "section missing or not an object", where=f"section {name!r}",
                                       field=name)
        single = {}
        for key, entry in data[section].items():
            job, scale = gavel_key(path, section, key)
            if scale == 1:
                single[job] = gavel_throughput(path, f"section {section!r} key {short(key)}", entry)
        for key, entry in data[section].items():
            job, scale = gavel_key(path, section, key)
            if scale == 1:
                continue
            where = f"section {section!r} key {short(key)}"
            match = _GAVEL_JOB.match(job)
            name = match["name"] if match else job
            if name in GAVEL_SKIPPED:
                counts[f"job {name}: no zoo model"] += 1
                continue
            if name not in GAVEL_JOBS or match is None:
                raise MeasurementError(path, f"unknown job type {short(job)}", where=where, field="job type")
            consolidated = gavel_throughput(path, where, entry)
            other = data[spread].get(key)
            unconsolidated = (gavel_throughput(path, f"section {spread!r} key {short(key)}", other)
                              if other is not None else 0.0)
            if min(consolidated, unconsolidated, single.get(job, 0.0)) <= 0:
                counts["a side not measured (throughput 0 or missing)"] += 1
                continue
            rows.append({"device": device, "job": job, "workload": GAVEL_JOBS[name], "batch": int(match["batch"]),
                         "gpus": scale, "single_steps_s": single[job], "consolidated_steps_s": consolidated,
                         "unconsolidated_steps_s": unconsolidated, "origin": f"{path.name}:{section}:{key}"})
    df = pd.DataFrame(rows, columns=list(GAVEL_PLACEMENT_COLUMNS))
    df.attrs["excluded_counts"] = dict(counts)
    return df


# --- NeuSight ------------------------------------------------------------------------------------

NEUSIGHT_DP_DEVICES = {"NVIDIA_A100-SXM4-40GB": "A100-SXM4"}  # an HGX/DGX board: 4 GPUs on NVSwitch
NEUSIGHT_DP_COLUMNS = ("device", "model", "workload", "seq", "batch", "gpus", "per_gpu_batch", "measured_s", "origin")
_DP = re.compile(r"^dp(?P<n>\d+)$")


def load_neusight_dp(labels: str | Path) -> pd.DataFrame:
    """NeuSight's data-parallel labels (``<labels>/<GPU>/*-dp<N>.json``): ``measured_s`` =
    ``e2e_latency`` / 1000 (forward + backward with DDP's all-reduce), ``batch`` global,
    ``per_gpu_batch`` = batch / N (which must divide)."""
    from predictor.emulator.devices.measurements import json_document, neusight_label
    from predictor.emulator.zoo.config import ModelBuildError
    from predictor.emulator.zoo.llm import canonical_model

    labels = Path(labels)
    if not labels.is_dir():
        raise MeasurementError(labels, "directory not found")
    rows = []
    for folder, device in NEUSIGHT_DP_DEVICES.items():
        for path in sorted((labels / folder).glob("*-dp*.json")):
            model, seq, batch, parallel = neusight_label(path)
            match = _DP.match(parallel or "")
            if match is None:
                continue
            gpus = int(match["n"])
            if gpus < 2 or batch % gpus:
                raise MeasurementError(path, f"global batch {batch} over {gpus} GPUs", field="file name")
            body = json_document(path)[1]
            value = body.get("e2e_latency") if isinstance(body, dict) else None
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
                    or value <= 0:
                raise MeasurementError(path, f"must be a number > 0, got {short(value)}", field="e2e_latency")
            try:
                workload = canonical_model(model)
            except ModelBuildError as exc:
                raise MeasurementError(path, str(exc), field="model") from None
            rows.append({"device": device, "model": model, "workload": workload, "seq": seq, "batch": batch,
                         "gpus": gpus, "per_gpu_batch": batch // gpus, "measured_s": float(value) / 1e3,
                         "origin": f"{folder}/{path.name}"})
    return pd.DataFrame(rows, columns=list(NEUSIGHT_DP_COLUMNS))


def sia_dir(calibration_dir: Path) -> Path:
    return Path(calibration_dir) / SIA_DIR

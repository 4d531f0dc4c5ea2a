"""Alibaba's 2023 GPU pod list (``--trace alibaba2023:PATH``; cluster-trace-gpu-v2023, FGD, ATC'23).

Why: the one public trace with per-job GPU-type constraints (``gpu_spec``), and a production
workload of 2023 beside the 2017-2021 ones; its pods come in as they are, the constraint as
"cannot run on any other type".

Files: ``openb_pod_list_default.csv`` (no ``gpu_spec``) and ``openb_pod_list_gpuspec33.csv`` (the
same pods, a type constraint on about a third of the GPU pods), columns ``name, cpu_milli,
memory_mib, num_gpu, gpu_milli, gpu_spec, qos, pod_phase, creation_time, deletion_time,
scheduled_time`` (seconds from the start of collection; ../shared/traces/SOURCES.md). Each pod:

* ``job_id`` = ``name``; ``submit_s`` = ``creation_time``; ``num_gpus`` = ``num_gpu``;
* ``duration_s`` = ``deletion_time`` - ``scheduled_time``: the time it held its GPUs (creation to
  scheduling was its wait in Alibaba's own queue, which the simulator models itself). Pods still
  ``Running`` when collection stopped were deleted then: their durations are cut at the trace's
  end. ``Failed`` pods ran until they failed and are kept, as the other traces keep failed jobs;
* ``gpu_milli`` (thousandths of a GPU each, 1-1000) is checked and **taken as whole GPUs** until
  the simulator shares GPUs: a pod of 460 milli-GPUs holds one GPU (``meta`` counts them);
* ``gpu_spec`` (``|``-separated models, e.g. ``V100M16|V100M32``; empty = any) becomes
  ``allowed_gpus``: every other type is "cannot run" for the pod. Models are mapped to the GPU
  catalogue (V100M16 is V100); Alibaba's anonymised models ``G2`` and ``G3``, which no catalogue
  type is, are kept as they are, so a pod that may run only on them runs on no cluster of ours
  and is rejected with that reason;
* the observed GPU type is not in the pod list: ``gpu_type`` is "" (the reference type).

Left out and counted (``excluded``): CPU-only pods (``num_gpu`` 0, ``gpu_milli`` 0) and pods never
scheduled (``Pending``, no ``scheduled_time``). ``cpu_milli``, ``memory_mib`` and ``qos`` are not
used. The trace states nothing of deadlines: like PAI's, a seeded share of its jobs gets one by
default (``--deadline-fraction``).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from predictor.common.gpus import UnknownGpuTypeError, canonical_gpu_type
from predictor.common.inputs import LocatedError, short
from traces.schema import (
    ALLOWED_GPUS,
    ALLOWED_SEPARATOR,
    JobTrace,
    finalize,
    gpu_counts,
    identifiers,
    numeric,
    read_csv_rows,
)

REQUIRED = ["name", "num_gpu", "gpu_milli", "gpu_spec", "pod_phase", "creation_time", "deletion_time",
            "scheduled_time"]
PHASES = ("Running", "Succeeded", "Failed", "Pending")
ANONYMISED_MODELS = ("G2", "G3")  # Alibaba's names for two GPU models it does not disclose
MILLI = 1000  # gpu_milli of a whole GPU

# Reasons (JobTrace.excluded keys).
CPU_ONLY = "CPU-only pods (num_gpu 0)"
NEVER_SCHEDULED = "pods never scheduled (Pending, no scheduled_time)"


def load(path: str | Path) -> JobTrace:
    """Load an Alibaba 2023 pod list (see the module docstring)."""
    rows, _ = read_csv_rows(path, required=REQUIRED)
    lines = rows["line"].to_numpy()
    identifiers(rows["name"], path, lines, "name", unique=True)
    gpus = gpu_counts(numeric(rows["num_gpu"], path, lines, "num_gpu", min_value=0.0), path, lines, "num_gpu",
                      minimum=0)
    milli = numeric(rows["gpu_milli"], path, lines, "gpu_milli", min_value=0.0, max_value=float(MILLI),
                    why="thousandths of one GPU")
    _check_milli(milli, gpus, path, lines)
    phase = rows["pod_phase"].str.strip()
    unknown = (~phase.isin(PHASES)).to_numpy()
    if unknown.any():
        i = int(np.argmax(unknown))
        raise LocatedError(path, f"unknown pod phase {short(phase.iloc[i])}; expected one of {', '.join(PHASES)}",
                           line=int(lines[i]), field="pod_phase")
    created = numeric(rows["creation_time"], path, lines, "creation_time", min_value=0.0)
    scheduled = numeric(rows["scheduled_time"], path, lines, "scheduled_time", allow_nan=True, min_value=0.0)
    ran = ~np.isnan(scheduled)
    odd = ~ran & (phase != "Pending").to_numpy()
    if odd.any():
        i = int(np.argmax(odd))
        raise LocatedError(path, f"pod phase {phase.iloc[i]} but no scheduled_time", line=int(lines[i]),
                           field="scheduled_time")
    gpu_pod = gpus > 0
    excluded = {reason: int(count) for reason, count in ((CPU_ONLY, (~gpu_pod).sum()),
                                                         (NEVER_SCHEDULED, (gpu_pod & ~ran).sum())) if count}
    keep = gpu_pod & ran
    if not keep.any():
        raise LocatedError(path, f"no usable pods: all {len(rows)} were left out ({excluded})")
    rows, lines = rows[keep].reset_index(drop=True), lines[keep]
    created, scheduled, gpus, milli = created[keep], scheduled[keep], gpus[keep], milli[keep]
    deleted = numeric(rows["deletion_time"], path, lines, "deletion_time", min_value=0.0)
    for bad, field, what in ((scheduled < created, "scheduled_time", "before its creation_time"),
                             (deleted < scheduled, "deletion_time", "before its scheduled_time")):
        if bad.any():
            i = int(np.argmax(bad))
            raise LocatedError(path, f"lies {what}", line=int(lines[i]), field=field)
    df = pd.DataFrame({
        "job_id": rows["name"].str.strip().to_numpy(),
        "submit_s": created,
        "num_gpus": gpus,
        "duration_s": deleted - scheduled,
        "gpu_type": "",
        "deadline_s": np.nan,
        "user": "",
        "workload": "",
        "line": lines,
        ALLOWED_GPUS: _allowed(rows["gpu_spec"], path, lines),
    })
    fractional = int((milli < MILLI).sum())
    meta = {"fractional_gpu_pods_taken_as_whole_gpus": fractional,
            "gpu_spec_constrained_pods": int((df[ALLOWED_GPUS] != "").sum())}
    return finalize(df, path, "alibaba2023", excluded, meta=meta)


def _check_milli(milli: np.ndarray, gpus: np.ndarray, path: str | Path, lines: np.ndarray) -> None:
    """gpu_milli must agree with num_gpu: 0 for a CPU-only pod, a whole number 1-1000 otherwise."""
    for bad, what in (((gpus == 0) & (milli > 0), "a share of a GPU for a pod of num_gpu 0"),
                      ((gpus > 0) & (milli == 0), "no share of a GPU for a pod of num_gpu >= 1"),
                      (milli != np.floor(milli), "not a whole number of thousandths")):
        if bad.any():
            i = int(np.argmax(bad))
            raise LocatedError(path, f"{milli[i]:g}: {what}", line=int(lines[i]), field="gpu_milli")


def _allowed(spec: pd.Series, path: str | Path, lines: np.ndarray) -> np.ndarray:
    """``gpu_spec`` as ``allowed_gpus``: catalogue names, Alibaba's anonymised models kept as they
    are, duplicates dropped; each distinct spec mapped once."""
    texts = spec.fillna("").astype(str).str.strip()
    mapped: dict[str, str] = {"": ""}
    for text in texts.unique().tolist():
        if text in mapped:
            continue
        names = []
        for part in text.split(ALLOWED_SEPARATOR):
            part = part.strip()
            if part in ANONYMISED_MODELS:
                names.append(part)
                continue
            try:
                names.append(canonical_gpu_type(part))
            except UnknownGpuTypeError as exc:
                i = int(np.argmax((texts == text).to_numpy()))
                raise LocatedError(path, f"{exc.brief} (Alibaba's anonymised models {', '.join(ANONYMISED_MODELS)} are "
                                   "kept as they are)", line=int(lines[i]), field="gpu_spec") from None
        mapped[text] = ALLOWED_SEPARATOR.join(dict.fromkeys(names))
    return texts.map(mapped).to_numpy(dtype=object)

"""Bind a cluster trace's jobs to model configs, so that predictors can predict their run times.

Why: cluster traces (Philly, PAI) record how long a job ran, not which model it trained; a
predictor needs the model. Each job gets:

* a **job class**: from its ``workload`` tag when the trace has one (the tag's model family:
  transformers and LSTM language models → language, LSTM speech models → speech, anything else
  → image); otherwise a seeded draw with the shares :data:`CLASS_SHARES` (image 60 %,
  language 30 %, speech 10 %: our assumption, stated in the run manifest — the public traces do
  not say);
* a **model config**: a seeded draw among the catalog's configs of that class — the held-out
  (test-split) configs of the shipped checkpoints, so no predictor has seen the model;
* an **iteration count**: the observed duration divided by the config's true iteration time on
  the GPU type the job was observed on (for traces without types, the reference type), so the
  job's true run time on that type is exactly its observed duration;
* **measured per-type run times** ``runtime_s:<GPU>`` = iterations × true seconds per iteration
  on every GPU type of the cluster: the simulator's ground truth;
* its **checkpoint bytes** (the config's parameters and optimizer state,
  :func:`traces.catalog.checkpoint_bytes`): what a preemptive policy's resume reads back.

Every draw hashes (seed, job id), so a job's binding does not depend on the other jobs.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from predictor.families import JOB_CLASSES, family_of, job_class
from predictor.tables import IterationTimeTable
from traces.schema import CHECKPOINT_BYTES, RUNTIME_PREFIX, JobTrace
from traces.seeding import hashed_uniform

CLASS_SHARES = {"image": 0.6, "language": 0.3, "speech": 0.1}


class BindingError(ValueError):
    """A workload that cannot be bound (empty catalog class, missing truth); the message says why."""


def job_classes(jobs: pd.DataFrame, seed: int) -> np.ndarray:
    """Each job's class: from its workload tag, else a seeded draw with CLASS_SHARES."""
    u = hashed_uniform([f"{seed}|class|{j}" for j in jobs["job_id"].astype(str)])
    edges = np.cumsum([CLASS_SHARES[c] for c in JOB_CLASSES])
    drawn = np.array(JOB_CLASSES)[np.minimum(np.searchsorted(edges, u, side="right"), len(JOB_CLASSES) - 1)]
    tags = jobs["workload"].fillna("").astype(str).str.strip().to_numpy()
    tagged = np.array([job_class(family_of(t), t.lower()) if t else "" for t in tags], dtype=object)
    return np.where(tags != "", tagged, drawn).astype(str)


def assign_configs(jobs: pd.DataFrame, configs: pd.DataFrame, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Each job's (class, config_id): a seeded draw among the catalog configs of its class."""
    classes = job_classes(jobs, seed)
    u = hashed_uniform([f"{seed}|config|{j}" for j in jobs["job_id"].astype(str)])
    chosen = np.empty(len(jobs), dtype=object)
    for c in sorted(set(classes)):
        pool = configs.loc[configs["job_class"] == c, "config_id"].sort_values().to_numpy()
        if len(pool) == 0:
            raise BindingError(f"the workload catalog has no {c} configs to bind {int((classes == c).sum())} jobs to")
        rows = np.flatnonzero(classes == c)
        chosen[rows] = pool[np.minimum((u[rows] * len(pool)).astype(int), len(pool) - 1)]
    return classes, chosen


def bind_workload(trace: JobTrace, configs: pd.DataFrame, truth: IterationTimeTable, gpu_types: list[str],
                  reference_type: str, *, seed: int = 0) -> JobTrace:
    """``trace`` with config_id, family, model, job_class, iterations and runtime_s:<GPU> columns.

    ``configs``: one row per catalog config (config_id, family, model, job_class), see
    :func:`traces.catalog.catalog_configs`; ``truth`` must cover the configs
    :func:`assign_configs` picks on every GPU type of the cluster and every observed type."""
    jobs = trace.jobs.copy()
    classes, chosen = assign_configs(jobs, configs, seed)
    info = configs.set_index("config_id")
    observed = jobs["gpu_type"].astype(str).replace("", reference_type).to_numpy()
    try:
        per_iteration = np.array([truth.seconds(c, g) for c, g in zip(chosen, observed)])
        per_type = truth.matrix(chosen, list(gpu_types))
    except KeyError as exc:
        raise BindingError(str(exc.args[0])) from None
    jobs["config_id"] = chosen
    jobs["family"] = info.loc[chosen, "family"].to_numpy()
    jobs["model"] = info.loc[chosen, "model"].to_numpy()
    jobs["job_class"] = classes
    jobs["iterations"] = jobs["duration_s"].to_numpy(dtype="float64") / per_iteration
    if CHECKPOINT_BYTES in info:  # what resuming the job reads back (a preemptive policy's restart)
        jobs[CHECKPOINT_BYTES] = info.loc[chosen, CHECKPOINT_BYTES].to_numpy(dtype="float64")
    for k, gpu in enumerate(gpu_types):
        jobs[RUNTIME_PREFIX + gpu] = jobs["iterations"].to_numpy() * per_type[:, k]
    return JobTrace(jobs, trace.source, trace.kind, dict(trace.excluded))

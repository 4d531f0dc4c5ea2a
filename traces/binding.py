"""Bind a cluster trace's jobs to model configs, so that predictors can predict their run times.

Why: cluster traces (Philly, PAI) record how long a job ran, not which model it trained; a
predictor needs the model. Each job gets:

* a **job class**: from its ``workload`` tag when the trace has one (the tag's model family:
  transformers and LSTM language models → language, LSTM speech models → speech, anything else
  → image); otherwise a seeded draw with the shares :data:`CLASS_SHARES` (image 60 %,
  language 30 %, speech 10 %: our assumption, stated in the run manifest — the public traces do
  not say);
* a **model config**: a seeded draw among the workload set's configs of that class — the held-out
  (test-split) configs of the shipped checkpoints, so no predictor has seen the model; or, for a
  trace that names the job's model (``model``, optionally ``batch``, ``input_size``, ``dtype``:
  a generic ``csv:`` trace) and a model the workload set has, that model's config nearest to the
  named one (:func:`named_configs`; a model the workload set lacks: its class's seeded draw, with the
  class from the model name);
* an **iteration count**: the observed duration divided by the config's true iteration time on
  the GPU type the job was observed on (for traces without types, the reference type), so the
  job's true run time on that type is exactly its observed duration;
* **measured per-type run times** ``runtime_s:<GPU>`` = iterations × true seconds per iteration
  on every GPU type of the cluster: the simulator's ground truth; a type the trace says the job
  cannot run on (+inf, or outside its ``allowed_gpus``) stays so;
* its **checkpoint bytes** (the config's parameters and optimizer state,
  :func:`traces.workloads.checkpoint_bytes`): what a preemptive policy's resume reads back.

Every draw hashes (seed, job id), so a job's binding does not depend on the other jobs.
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from predictor.common.families import JOB_CLASSES, family_of, job_class
from predictor.common.inputs import InputError
from predictor.tables import IterationTimeTable
from traces.schema import CHECKPOINT_BYTES, RUNTIME_PREFIX, JobTrace
from traces.seeding import hashed_uniform

CLASS_SHARES = {"image": 0.6, "language": 0.3, "speech": 0.1}


def job_classes(jobs: pd.DataFrame, seed: int) -> np.ndarray:
    """Each job's class: from its workload tag, else a seeded draw with CLASS_SHARES."""
    u = hashed_uniform([f"{seed}|class|{j}" for j in jobs["job_id"].astype(str)])
    edges = np.cumsum([CLASS_SHARES[c] for c in JOB_CLASSES])
    drawn = np.array(JOB_CLASSES)[np.minimum(np.searchsorted(edges, u, side="right"), len(JOB_CLASSES) - 1)]
    tags = jobs["workload"].fillna("").astype(str).str.strip().to_numpy()
    tagged = np.array([job_class(family_of(t), t.lower()) if t else "" for t in tags], dtype=object)
    return np.where(tags != "", tagged, drawn).astype(str)


def model_key(name: str) -> str:
    """A model name as matched against the workload set: lower case, letters, digits and dots only
    ("ResNet-50", "resnet_50" and "resnet50" are one model)."""
    return re.sub(r"[^a-z0-9.]", "", str(name).lower())


_CONFIG_ID = re.compile(r"^[^:]+:b(\d+):s(\d+):([^:]+):")  # model:b<batch>:s<size>:<dtype>:... (predictor.emulator.zoo)


def named_configs(jobs: pd.DataFrame, configs: pd.DataFrame) -> np.ndarray:
    """Per job, the workload set config of the model the trace names for it ("" where it names none,
    or one the workload set lacks): among that model's configs, those of the named ``dtype`` if any,
    then the nearest ``batch``, then the nearest ``input_size`` (in ratio), then config id."""
    out = np.full(len(jobs), "", dtype=object)
    if "model" not in jobs.columns:
        return out
    parsed = configs["config_id"].astype(str).str.extract(_CONFIG_ID)
    table = pd.DataFrame({"config_id": configs["config_id"].astype(str).to_numpy(),
                          "key": [model_key(m) for m in configs["model"]],
                          "batch": pd.to_numeric(parsed[0], errors="coerce").to_numpy(),
                          "size": pd.to_numeric(parsed[1], errors="coerce").to_numpy(),
                          "dtype": parsed[2].fillna("").to_numpy()})
    pools = {key: group for key, group in table.groupby("key", sort=False)}
    wanted = pd.DataFrame({"key": [model_key(m) if isinstance(m, str) and m else "" for m in jobs["model"]],
                           "batch": _column(jobs, "batch"), "size": _column(jobs, "input_size"),
                           "dtype": jobs["dtype"].fillna("").astype(str) if "dtype" in jobs else ""})
    picks: dict[tuple, str] = {}
    for i, row in enumerate(wanted.itertuples(index=False)):
        pool = pools.get(row.key) if row.key else None
        if pool is None:
            continue
        ask = (row.key, row.batch, row.size, row.dtype)
        if ask not in picks:
            same = pool[pool["dtype"] == row.dtype] if row.dtype else pool
            same = same if len(same) else pool
            by_batch, by_size = (_ratio_distance(same[c].to_numpy(float), want)
                                 for c, want in (("batch", row.batch), ("size", row.size)))
            order = np.lexsort((same["config_id"].to_numpy(), by_size, by_batch))
            picks[ask] = same["config_id"].to_numpy()[order[0]]
        out[i] = picks[ask]
    return out


def _ratio_distance(values: np.ndarray, want: float) -> np.ndarray:
    """|log(value / want)| per config (0 for all when nothing is wanted; inf where unknown)."""
    if np.isnan(want):
        return np.zeros(len(values))
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.nan_to_num(np.abs(np.log(values / want)), nan=np.inf)


def _column(jobs: pd.DataFrame, name: str) -> np.ndarray:
    """A nullable integer column as floats (NaN: not given), or all NaN where absent."""
    if name not in jobs.columns:
        return np.full(len(jobs), np.nan)
    return pd.to_numeric(jobs[name], errors="coerce").to_numpy(dtype="float64", na_value=np.nan)


def assign_configs(jobs: pd.DataFrame, configs: pd.DataFrame, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Each job's (class, config_id): the config of the model the trace names for it where the
    workload set has that model (:func:`named_configs`), else a seeded draw among the workload configs
    of its class."""
    classes = job_classes(jobs, seed)
    u = hashed_uniform([f"{seed}|config|{j}" for j in jobs["job_id"].astype(str)])
    chosen = np.empty(len(jobs), dtype=object)
    for c in sorted(set(classes)):
        pool = configs.loc[configs["job_class"] == c, "config_id"].sort_values().to_numpy()
        if len(pool) == 0:
            raise InputError(f"the workload set has no {c} configs to bind {int((classes == c).sum())} jobs to")
        rows = np.flatnonzero(classes == c)
        chosen[rows] = pool[np.minimum((u[rows] * len(pool)).astype(int), len(pool) - 1)]
    named = named_configs(jobs, configs)
    by_name = named != ""
    if by_name.any():
        chosen[by_name] = named[by_name]
        classes = classes.astype(object)
        classes[by_name] = configs.set_index("config_id").loc[named[by_name], "job_class"].to_numpy()
        classes = classes.astype(str)
    return classes, chosen


def bind_workload(trace: JobTrace, configs: pd.DataFrame, truth: IterationTimeTable, gpu_types: list[str],
                  reference_type: str, *, seed: int = 0) -> JobTrace:
    """``trace`` with config_id, family, model, job_class, iterations and runtime_s:<GPU> columns.

    ``configs``: one row per workload config (config_id, family, model, job_class), see
    :func:`traces.workloads.workload_configs`; ``truth`` must cover the configs
    :func:`assign_configs` picks on every GPU type of the cluster and every observed type."""
    jobs = trace.jobs.copy()
    classes, chosen = assign_configs(jobs, configs, seed)
    info = configs.set_index("config_id")
    observed = jobs["gpu_type"].astype(str).replace("", reference_type).to_numpy()
    try:
        per_iteration = np.array([truth.seconds(c, g) for c, g in zip(chosen, observed)])
        per_type = truth.matrix(chosen, list(gpu_types))
    except KeyError as exc:
        raise InputError(str(exc.args[0])) from None
    jobs["config_id"] = chosen
    jobs["family"] = info.loc[chosen, "family"].to_numpy()
    jobs["model"] = info.loc[chosen, "model"].to_numpy()
    jobs["job_class"] = classes
    jobs["iterations"] = jobs["duration_s"].to_numpy(dtype="float64") / per_iteration
    if CHECKPOINT_BYTES in info:  # what resuming the job reads back (a preemptive policy's restart)
        jobs[CHECKPOINT_BYTES] = info.loc[chosen, CHECKPOINT_BYTES].to_numpy(dtype="float64")
    for k, gpu in enumerate(gpu_types):
        column = RUNTIME_PREFIX + gpu
        seconds = jobs["iterations"].to_numpy() * per_type[:, k]
        if column in jobs.columns:  # "cannot run on this type" is the trace's to say, not the config's
            seconds = np.where(np.isposinf(jobs[column].to_numpy(dtype="float64")), np.inf, seconds)
        jobs[column] = seconds
    return trace.with_jobs(jobs)

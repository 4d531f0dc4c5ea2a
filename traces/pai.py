"""Alibaba PAI 2020 (Weng et al., NSDI'22): the official job/task tables, CedTrain's task sample,
and the machine spec.

Why: PAI is the trace with real GPU types. The official tables (headerless CSVs; schemas in
``cluster-trace-gpu-v2020/data/*.header``) are not in ../shared but can be downloaded, so
:func:`load` is written against their layout; :func:`load_sample` reads the 10,000 real task rows
that are at hand; :func:`load_machine_spec` gives the real cluster composition.

Whole GPUs: ``plan_gpu`` is a percentage of one GPU (50 = half). The simulator hands out whole
GPUs only, so a task instance asking for a fraction occupies a whole GPU:
GPUs per instance = ceil(plan_gpu / 100).
"""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

import numpy as np
import pandas as pd

from predictor.common.inputs import LocatedError, short
from traces.schema import (
    INT64_LIMIT,
    JobTrace,
    canonical_types,
    finalize,
    gpu_counts,
    identifiers,
    numeric,
    read_csv_rows,
)

# Column layouts of the headerless official tables, as in the .header files (a test checks them).
JOB_TABLE_COLUMNS = ["job_name", "inst_id", "user", "status", "start_time", "end_time"]
TASK_TABLE_COLUMNS = ["job_name", "task_name", "inst_num", "status", "start_time", "end_time",
                      "plan_cpu", "plan_mem", "plan_gpu", "gpu_type"]
MACHINE_SPEC_COLUMNS = ["machine", "gpu_type", "cap_cpu", "cap_mem", "cap_gpu"]
JOB_TABLE_USED = ["job_name", "user", "status", "start_time"]
TASK_TABLE_USED = ["job_name", "inst_num", "status", "start_time", "end_time", "plan_gpu", "gpu_type"]
JOB_TABLE_FILE = "pai_job_table.csv"
TASK_TABLE_FILE = "pai_task_table.csv"
# CedTrain's sample: an unnamed index column, the task-table columns, then runtime columns.
SAMPLE_REQUIRED = ["job_name", "inst_num", "status", "start_time", "end_time", "plan_gpu", "gpu_type"]
UNFINISHED_STATUS = ("Running", "Waiting")
# Null spellings a CSV export may use for a missing value in the official tables; read as empty.
NULL_TOKENS = ("NaN", "nan", "NULL", "null", "None", "\\N")
CPU_TYPES = ("", "CPU")

# Reasons (JobTrace.excluded keys).
NO_TASKS = "jobs with no task rows"
CPU_ONLY = "CPU-only jobs (no task with plan_gpu > 0)"
UNFINISHED = "unfinished jobs (Running/Waiting, or no task with a start and end time)"
ORPHAN_TASKS = "task rows whose job is not in the job table"
UNFINISHED_TASKS = "unfinished tasks (Running/Waiting, or no start/end time)"


def _resolve_tables(path: str | Path) -> tuple[Path, Path]:
    p = Path(path)
    if p.is_dir():
        job, task = p / JOB_TABLE_FILE, p / TASK_TABLE_FILE
    else:
        job, task = p, p.parent / TASK_TABLE_FILE
    for f in (job, task):
        if not f.exists():
            hint = " (extract it from the .tar.gz first)" if f.with_name(f.name + ".tar.gz").exists() else ""
            raise LocatedError(f, f"file not found{hint}; load() needs {JOB_TABLE_FILE} and {TASK_TABLE_FILE} "
                               "side by side")
    return job, task


def _drop_header_row(rows: pd.DataFrame, path: Path | str) -> pd.DataFrame:
    """Tolerate a copy of a table that got a header line although the official ones have none."""
    cols = [c for c in rows.columns if c != "line"]
    if [str(rows[c].iloc[0]).strip() for c in cols] != cols:
        return rows
    if len(rows) == 1:
        raise LocatedError(path, "no data rows after the header", line=1)
    return rows.iloc[1:].reset_index(drop=True)


def _nulls_blank(values: pd.Series) -> pd.Series:
    """Map the null spellings of :data:`NULL_TOKENS` to "" so that they read as missing values."""
    null = values.isin(NULL_TOKENS).to_numpy()
    return values.mask(null, "") if null.any() else values


def _gpus_per_instance(plan_gpu: np.ndarray) -> np.ndarray:
    """Whole GPUs one instance occupies: a fractional request takes a whole GPU."""
    return np.ceil(np.nan_to_num(plan_gpu, nan=0.0) / 100.0)


def _finished(status: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """A task that ran and ended: not Running/Waiting, with start and end times > 0."""
    live = pd.Series(status, dtype=object).isin(UNFINISHED_STATUS).to_numpy()
    return ~live & (start > 0) & (end > 0)


def _whole_instances(inst: np.ndarray, path: Path, lines: np.ndarray, rows: np.ndarray) -> None:
    bad = rows & ~((inst >= 1) & (inst == np.floor(inst)))
    if bad.any():
        i = int(np.argmax(bad))
        raise LocatedError(path, f"instance count must be a whole number >= 1, got {inst[i]:g}",
                           line=int(lines[i]), field="inst_num")
    huge = rows & (inst >= INT64_LIMIT)  # else the job's GPU count would overflow under 'num_gpus'
    if huge.any():
        i = int(np.argmax(huge))
        raise LocatedError(path, f"instance count {inst[i]:g} is too large (it overflows a 64-bit integer)",
                           line=int(lines[i]), field="inst_num")


class _Tasks(NamedTuple):
    """The task table's values per row, checked; ``code`` is the index of the row's job."""

    lines: np.ndarray
    code: np.ndarray
    known: np.ndarray  # the row's job is in the job table
    is_gpu: np.ndarray  # known, with plan_gpu > 0
    gpus: np.ndarray  # GPUs the row holds (0 unless is_gpu)
    start: np.ndarray
    end: np.ndarray
    finished: np.ndarray  # known, and ran and ended (see _finished)
    running: np.ndarray  # known, with status Running


def _read_table(path: Path, columns: list[str], used: list[str]) -> pd.DataFrame:
    """The used columns of a headerless official table, as text, with their line numbers."""
    rows, _ = read_csv_rows(path, names=columns, usecols=used)
    return _drop_header_row(rows, path)


def _job_codes(job_name: pd.Series, task_job: pd.Series) -> np.ndarray:
    """Each task's integer job code, so that aggregates per job are bincounts: job names come first
    and are unique, so job i gets code i, and a task's code is below the number of jobs exactly
    when its job is in the job table."""
    names = np.concatenate([job_name.to_numpy(dtype=object), task_job.to_numpy(dtype=object)])
    return pd.factorize(names)[0][len(job_name):]


def _read_tasks(tasks: pd.DataFrame, task_path: Path, job_name: pd.Series) -> _Tasks:
    """The task rows' values and job codes; GPU tasks need whole instance counts, and finished
    tasks must not end before they start."""
    tl = tasks["line"].to_numpy()
    task_job = identifiers(tasks["job_name"], task_path, tl, "job_name")
    inst, start, end, plan_gpu = (
        numeric(_nulls_blank(tasks[c]), task_path, tl, c, allow_nan=True, min_value=m)
        for c, m in (("inst_num", None), ("start_time", None), ("end_time", None), ("plan_gpu", 0.0)))
    code = _job_codes(job_name, task_job)
    known = code < len(job_name)
    is_gpu = known & (plan_gpu > 0)
    _whole_instances(inst, task_path, tl, is_gpu)
    status = tasks["status"].to_numpy(dtype=object)
    finished = known & _finished(status, start, end)
    backwards = finished & (end < start)
    if backwards.any():
        i = int(np.argmax(backwards))
        raise LocatedError(task_path, f"task ends ({end[i]:g}) before it starts ({start[i]:g})",
                           line=int(tl[i]), field="end_time")
    gpus = np.where(is_gpu, np.nan_to_num(inst) * _gpus_per_instance(plan_gpu), 0.0)
    return _Tasks(tl, code, known, is_gpu, gpus, start, end, finished, known & (status == "Running"))


def _per_job(t: _Tasks, n: int) -> pd.DataFrame:
    """Per job (index = job code): task rows, GPUs, whether a task finished / is running, and the
    span from the earliest finished-task start to the latest finished-task end."""
    first_start = np.full(n, np.inf)
    np.minimum.at(first_start, t.code[t.finished], t.start[t.finished])
    last_end = np.full(n, -np.inf)
    np.maximum.at(last_end, t.code[t.finished], t.end[t.finished])
    return pd.DataFrame({
        "tasks": np.bincount(t.code[t.known], minlength=n),
        "gpus": np.bincount(t.code[t.known], weights=t.gpus[t.known], minlength=n),
        "finished": np.bincount(t.code[t.finished], minlength=n) > 0,
        "running": np.bincount(t.code[t.running], minlength=n) > 0,
        "start": first_start,
        "end": last_end,
    })


def _job_gpu_types(tasks: pd.DataFrame, task_path: Path, t: _Tasks, n: int) -> np.ndarray:
    """Per job code, the GPU type of its task with the most GPUs (the first such task on a tie;
    "" without GPU tasks). Every GPU task's type is checked, not only the chosen ones."""
    g = np.flatnonzero(t.is_gpu)
    task_type = canonical_types(_nulls_blank(tasks["gpu_type"].iloc[g]), task_path, t.lines[g],
                                "gpu_type").to_numpy()
    order = np.lexsort((g, -t.gpus[g], t.code[g]))
    top = order[np.unique(t.code[g][order], return_index=True)[1]]
    job_type = np.full(n, "", dtype=object)
    job_type[t.code[g][top]] = task_type[top]
    return job_type


def _usable(per_job: pd.DataFrame, job_status: np.ndarray) -> tuple[np.ndarray, dict[str, int]]:
    """Which jobs are kept, and how many are left out for each reason (JobTrace.excluded)."""
    no_tasks = per_job["tasks"].to_numpy() == 0
    cpu_only = ~no_tasks & (per_job["gpus"].to_numpy() == 0)
    live = pd.Series(job_status).isin(UNFINISHED_STATUS).to_numpy()
    finished, running = per_job["finished"].to_numpy(), per_job["running"].to_numpy()
    unfinished = ~no_tasks & ~cpu_only & (live | ~finished | running)
    masks = {NO_TASKS: no_tasks, CPU_ONLY: cpu_only, UNFINISHED: unfinished}
    excluded = {reason: int(mask.sum()) for reason, mask in masks.items() if mask.any()}
    return ~(no_tasks | cpu_only | unfinished), excluded


def _job_frame(jobs: pd.DataFrame, job_name: pd.Series, submit: np.ndarray, per_job: pd.DataFrame,
               keep: np.ndarray, job_path: Path) -> pd.DataFrame:
    """The kept jobs in the trace schema; a kept job without a submission time raises."""
    lines = jobs["line"].to_numpy()[keep]
    kept = per_job[keep]
    return pd.DataFrame({
        "job_id": job_name.to_numpy()[keep],
        "submit_s": numeric(pd.Series(submit[keep]), job_path, lines, "start_time"),
        "num_gpus": kept["gpus"].to_numpy(),
        "duration_s": (kept["end"] - kept["start"]).to_numpy(),
        "gpu_type": kept["gpu_type"].to_numpy(),
        "deadline_s": np.nan,
        "user": jobs["user"].to_numpy(dtype=object)[keep],
        "workload": "",
        "line": lines,
    })


def load(path: str | Path) -> JobTrace:
    """Join the official ``pai_job_table.csv`` and ``pai_task_table.csv`` into one row per job.

    ``path`` is a directory holding both files, or the job table with the task table beside it.
    Per job: ``submit_s`` = job start_time (PAI's job start is the submission time);
    ``duration_s`` = earliest finished-task start → latest finished-task end; ``num_gpus`` = sum
    over its GPU tasks (plan_gpu > 0) of inst_num × ceil(plan_gpu / 100); ``gpu_type`` = the type
    of its GPU task with the most GPUs (the first such task on a tie); ``user`` from the job table;
    ``workload`` "" (the group-tag table is not joined). Left out and counted: jobs with no task
    rows, CPU-only jobs, unfinished jobs (job status Running/Waiting, a task still Running, or no
    task with start and end > 0), and task rows whose job is missing from the job table.
    Empty fields and the null spellings in :data:`NULL_TOKENS` are missing values; anything else
    that is not a number raises LocatedError. ``line`` is the job's line in the job table; errors
    in task values name the task table.
    """
    job_path, task_path = _resolve_tables(path)
    jobs = _read_table(job_path, JOB_TABLE_COLUMNS, JOB_TABLE_USED)
    tasks = _read_table(task_path, TASK_TABLE_COLUMNS, TASK_TABLE_USED)
    jl = jobs["line"].to_numpy()
    job_name = identifiers(jobs["job_name"], job_path, jl, "job_name", unique=True)
    submit = numeric(_nulls_blank(jobs["start_time"]), job_path, jl, "start_time", allow_nan=True)
    t = _read_tasks(tasks, task_path, job_name)
    per_job = _per_job(t, len(jobs))
    per_job["gpu_type"] = _job_gpu_types(tasks, task_path, t, len(jobs))
    keep, left_out = _usable(per_job, jobs["status"].to_numpy(dtype=object))
    orphans = int((~t.known).sum())
    excluded = {**({ORPHAN_TASKS: orphans} if orphans else {}), **left_out}
    if not keep.any():
        raise LocatedError(job_path, f"no usable jobs: all were left out ({excluded})")
    return finalize(_job_frame(jobs, job_name, submit, per_job, keep, job_path), job_path, "pai", excluded)


def load_sample(path: str | Path) -> JobTrace:
    """Load CedTrain's ``case_random_10000_tasks.csv``: real PAI task rows, one task per job.

    ``submit_s`` = the task's start_time: the sample has no submission time, so queueing in a
    replay is relative to the observed task start. ``num_gpus`` = inst_num × ceil(plan_gpu / 100);
    ``duration_s`` = end_time − start_time; ``gpu_type`` as recorded. ``task_name`` is a random
    model name CedTrain wrote over the real one, so ``workload`` is ""; the ``runtime_<GPU>``
    columns are CedTrain's fixed-ratio copies of ``runtime`` and are ignored. Left out and
    counted: CPU-only rows (plan_gpu 0/empty) and unfinished rows (Running/Waiting, no start/end).
    """
    rows, _ = read_csv_rows(path, required=SAMPLE_REQUIRED)
    lines = rows["line"].to_numpy()
    inst = numeric(rows["inst_num"], path, lines, "inst_num", allow_nan=True)
    plan_gpu = numeric(rows["plan_gpu"], path, lines, "plan_gpu", allow_nan=True, min_value=0.0)
    start = numeric(rows["start_time"], path, lines, "start_time", allow_nan=True)
    end = numeric(rows["end_time"], path, lines, "end_time", allow_nan=True)
    excluded: dict[str, int] = {}
    is_gpu = plan_gpu > 0
    finished = _finished(rows["status"].to_numpy(dtype=object), start, end)
    if (~is_gpu).any():
        excluded[CPU_ONLY] = int((~is_gpu).sum())
    if (is_gpu & ~finished).any():
        excluded[UNFINISHED_TASKS] = int((is_gpu & ~finished).sum())
    keep = is_gpu & finished
    if not keep.any():
        raise LocatedError(path, f"no usable rows: all were left out ({excluded})")
    rows, lines, inst = rows[keep], lines[keep], inst[keep]
    plan_gpu, start, end = plan_gpu[keep], start[keep], end[keep]
    _whole_instances(inst, Path(path), lines, np.ones(len(inst), dtype=bool))
    duration = end - start
    if (duration < 0).any():
        i = int(np.argmax(duration < 0))
        raise LocatedError(path, f"task ends ({end[i]:g}) before it starts ({start[i]:g})",
                           line=int(lines[i]), field="end_time")
    df = pd.DataFrame({
        "job_id": identifiers(rows["job_name"], path, lines, "job_name", unique=True).to_numpy(),
        "submit_s": start,
        "num_gpus": inst * _gpus_per_instance(plan_gpu),
        "duration_s": duration,
        "gpu_type": canonical_types(rows["gpu_type"], path, lines, "gpu_type").to_numpy(),
        "deadline_s": np.nan,
        "user": "",
        "workload": "",
        "line": lines,
    })
    return finalize(df, path, "pai-sample", excluded)


def load_machine_spec(path: str | Path) -> pd.DataFrame:
    """Load the headerless ``pai_machine_spec.csv`` as a node table ``node, gpu_type, num_gpus``.

    CPU-only machines (cap_gpu 0, or gpu_type "CPU"/empty) are skipped (count in
    ``.attrs["excluded"]``); an unknown GPU type raises LocatedError.
    """
    rows, _ = read_csv_rows(path, names=MACHINE_SPEC_COLUMNS)
    rows = _drop_header_row(rows, path)
    lines = rows["line"].to_numpy()
    node = identifiers(rows["machine"], path, lines, "machine", unique=True)
    gpus = numeric(rows["cap_gpu"], path, lines, "cap_gpu", min_value=0.0)
    gpus = gpu_counts(gpus, path, lines, "cap_gpu", minimum=0)
    kind = rows["gpu_type"].str.strip()
    cpu_kind = kind.str.upper().isin(CPU_TYPES).to_numpy()
    mismatch = cpu_kind & (gpus > 0)
    if mismatch.any():
        i = int(np.argmax(mismatch))
        raise LocatedError(path, f"gpu_type {short(kind.iloc[i])} but cap_gpu {gpus[i]:g}", line=int(lines[i]),
                           field="gpu_type")
    keep = ~cpu_kind & (gpus > 0)
    if not keep.any():
        raise LocatedError(path, "no machine has GPUs")
    out = pd.DataFrame({
        "node": node[keep].to_numpy(),
        "gpu_type": canonical_types(kind[keep], path, lines[keep], "gpu_type").to_numpy(),
        "num_gpus": gpus[keep].astype("int64"),
    }).astype({"node": "string", "gpu_type": "string"})
    skipped = int((~keep).sum())
    out.attrs["excluded"] = {"machines without GPUs": skipped} if skipped else {}
    return out

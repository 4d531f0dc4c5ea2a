"""Microsoft Philly (Jeon et al., ATC'19): the per-job CSV, the raw JSON job log, the machine list.

Why three readers: the full Philly job list available to us is RFold's derived per-job CSV
(arrival, #GPUs, duration; no status, VC or user); the upstream raw format is the
``cluster_job_log`` JSON (status, user, attempts), of which only a subset is at hand but whose
layout the full log shares; and the machine list is the only source of GPU types for Philly.
Philly records no GPU type per job, so every job's ``gpu_type`` is "".

All job times share one clock: seconds since :data:`PHILLY_EPOCH`, the instant the CSV calls 0
(established by matching raw job ids against the CSV; ../shared/research/traces.md §3.1).
Raw timestamps are naive Philly local time and are subtracted as such, as the CSV was built.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import pandas as pd

from predictor.inputs import InputError, short
from predictor.inputs import load_json as load_json_text
from traces.schema import (
    JobTrace,
    TraceError,
    finalize,
    gpu_counts,
    identifiers,
    numeric,
    read_csv_rows,
    read_trace_bytes,
)

PHILLY_EPOCH = pd.Timestamp("2017-08-14 23:27:00")
TIME_FORMAT = "%Y-%m-%d %H:%M:%S"
# RFold's header is "#job id, arrival time (sec), topology, shape, size, duration (sec)";
# topology (always CLOS) is not used; shape (per-server split such as "8+8", sums to size) is kept:
# a multi-GPU job's work is counted at the placement it had (simulator.communication).
CSV_REQUIRED = ["job id", "arrival time (sec)", "size", "duration (sec)"]
MACHINE_COLUMNS = ["machineId", "number of GPUs", "single GPU mem"]
# Philly lists only GPU memory. The common assumption (used by Helios, Hu et al. 2024 and others)
# is that the 12 GB parts are P100 and the 24 GB parts are P40; no other size occurs.
MEMORY_GB_TO_TYPE: dict[float, str] = {12.0: "P100", 24.0: "P40"}
_MISSING_TIMES = {"", "None", "none", "null", "NULL"}

# Reasons (JobTrace.excluded keys) for jobs load_json leaves out on purpose.
NO_ATTEMPTS = "never started (no attempts)"
NO_START = "never started (first attempt has no start_time)"
NO_END = "unfinished (last attempt has no end_time)"
BEFORE_EPOCH = "submitted before the epoch"


def load(path: str | Path) -> JobTrace:
    """Load RFold's derived per-job Philly CSV (``rfold_philly_trace.csv``).

    ``submit_s`` = arrival, ``num_gpus`` = size, ``duration_s`` = duration (first attempt start →
    last attempt end). Zero durations (10 jobs in the real file) are valid and kept.
    """
    rows, _ = read_csv_rows(path, required=CSV_REQUIRED)
    lines = rows["line"].to_numpy()
    df = pd.DataFrame({
        "job_id": identifiers(rows["job id"], path, lines, "job id", unique=True),
        "submit_s": numeric(rows["arrival time (sec)"], path, lines, "arrival time (sec)", min_value=0.0),
        "num_gpus": gpu_counts(numeric(rows["size"], path, lines, "size"), path, lines, "size"),
        "duration_s": numeric(rows["duration (sec)"], path, lines, "duration (sec)", min_value=0.0),
        "gpu_type": "",
        "deadline_s": np.nan,
        "user": "",
        "workload": "",
        "line": lines,
    })
    if "shape" in rows.columns:
        df["shape"] = rows["shape"].fillna("").astype(str).to_numpy()
    return finalize(df, path, "philly")


def _time_text(value: Any) -> str | None:
    """A raw time value as text, or None for the log's "no time" markers (null, "", "None")."""
    if value is None:
        return None
    text = str(value).strip()
    return None if text in _MISSING_TIMES else text


def _detail_gpus(attempt: dict, path: str | Path, rec_no: int) -> int:
    """GPUs held by an attempt of the original log: the sum of its per-machine ``gpus`` lists."""
    detail = attempt.get("detail")
    if not isinstance(detail, list):
        raise TraceError(path, "no num_gpus in the record and no per-machine detail list in its first "
                         "attempt to count GPUs from", line=rec_no, field="attempts[0].detail")
    total = 0
    for m, machine in enumerate(detail):
        gpus = machine.get("gpus") if isinstance(machine, dict) else None
        if not isinstance(gpus, list):
            raise TraceError(path, "expected an object with a 'gpus' list", line=rec_no,
                             field=f"attempts[0].detail[{m}].gpus")
        total += len(gpus)
    return total


class _Job(NamedTuple):
    """A kept record of the JSON log; its times stay text until all jobs' are parsed at once."""

    rec_no: int
    job_id: str
    id_key: str  # "id" or "jobid": the field a duplicate-id error names
    user: str
    num_gpus: Any  # checked with the other jobs' values by numeric() and gpu_counts()
    # (field, text): submitted_time, then every attempt's start and end time that is present, so
    # [1] is the first attempt's start and [-1] the last attempt's end (both present when kept)
    times: list[tuple[str, str]]


def _read_records(path: str | Path) -> list:
    """The file's JSON list of job records: TraceError for a missing, undecodable or empty file."""
    raw = read_trace_bytes(path)
    try:
        data = load_json_text(raw.decode("utf-8-sig"), path)  # nesting checked before parsing
    except UnicodeDecodeError as exc:
        raise TraceError(path, f"not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    except json.JSONDecodeError as exc:
        raise TraceError(path, f"invalid JSON: {exc.msg} (text line {exc.lineno}, column {exc.colno})",
                         line=exc.lineno) from None
    except InputError:
        raise
    except ValueError as exc:  # e.g. an integer of more than 4,300 digits, which Python will not parse
        raise TraceError(path, f"invalid JSON: {str(exc).split(';')[0][:160]}") from None
    if not isinstance(data, list):
        raise TraceError(path, f"expected a JSON list of job objects, got a {type(data).__name__}")
    if not data:
        raise TraceError(path, "the file holds no job records", line=1)
    return data


def _job_id(rec: Any, path: str | Path, rec_no: int) -> tuple[str, str]:
    """The record's id key ("id" in the marwage subset, "jobid" in the original log) and its id."""
    if not isinstance(rec, dict):
        raise TraceError(path, f"expected a job object, got a {type(rec).__name__}", line=rec_no)
    key = "id" if "id" in rec else "jobid"
    job_id = rec.get(key)
    if job_id is None or str(job_id).strip() == "":
        raise TraceError(path, "job id is missing (need 'id' or 'jobid')", line=rec_no, field=key)
    return key, str(job_id).strip()


def _attempts(rec: dict, path: str | Path, rec_no: int) -> list[dict]:
    """The record's attempt objects ([] for a null or empty list, a job that never started)."""
    if "attempts" not in rec:
        raise TraceError(path, "key is missing", line=rec_no, field="attempts")
    attempts = rec["attempts"]
    if attempts is None or attempts == []:
        return []
    if not isinstance(attempts, list):
        raise TraceError(path, f"expected a list, got a {type(attempts).__name__}", line=rec_no,
                         field="attempts")
    for k, att in enumerate(attempts):
        if not isinstance(att, dict):
            raise TraceError(path, f"expected an attempt object, got a {type(att).__name__}",
                             line=rec_no, field=f"attempts[{k}]")
    return attempts


def _left_out(attempts: list[dict]) -> str | None:
    """Why a job with these attempts is left out (a JobTrace.excluded key), or None to keep it."""
    if not attempts:
        return NO_ATTEMPTS
    if _time_text(attempts[0].get("start_time")) is None:
        return NO_START
    if _time_text(attempts[-1].get("end_time")) is None:
        return NO_END
    return None


def _time_texts(rec: dict, attempts: list[dict], path: str | Path, rec_no: int) -> list[tuple[str, str]]:
    """(field, text) of the submission time and of every attempt's times, to check all of them."""
    submitted = _time_text(rec.get("submitted_time"))
    if submitted is None:
        raise TraceError(path, "submission time is missing", line=rec_no, field="submitted_time")
    times = [("submitted_time", submitted)]
    for k, att in enumerate(attempts):
        for name in ("start_time", "end_time"):
            text = _time_text(att.get(name))
            if text is not None:
                times.append((f"attempts[{k}].{name}", text))
    return times


def _read_record(rec: Any, path: str | Path, rec_no: int) -> _Job | str:
    """One record checked: its job, or the reason (a JobTrace.excluded key) it is left out."""
    key, job_id = _job_id(rec, path, rec_no)
    attempts = _attempts(rec, path, rec_no)
    reason = _left_out(attempts)
    if reason is not None:
        return reason
    gpus = rec.get("num_gpus")
    if gpus is None:
        gpus = _detail_gpus(attempts[0], path, rec_no)
    times = _time_texts(rec, attempts, path, rec_no)
    user = rec.get("user")
    return _Job(rec_no, job_id, key, "" if user is None else str(user), gpus, times)


def _read_jobs(records: list, path: str | Path) -> tuple[list[_Job], Counter[str]]:
    """The kept jobs, and how many records are left out for each reason; TraceError if none is kept."""
    excluded: Counter[str] = Counter()
    jobs: list[_Job] = []
    for rec_no, rec in enumerate(records, start=1):
        job = _read_record(rec, path, rec_no)
        if isinstance(job, str):
            excluded[job] += 1
        else:
            jobs.append(job)
    if not jobs:
        raise TraceError(path, f"no usable jobs: all {len(records)} records were left out ({dict(excluded)})")
    return jobs, excluded


def _job_times(jobs: list[_Job], path: str | Path) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Submission, first start and last end (s on the CSV's clock) per job, all texts parsed at
    once (one vectorised to_datetime); the first malformed one raises, naming record and field."""
    stamps = [(job.rec_no, field, text) for job in jobs for field, text in job.times]
    times = pd.to_datetime(pd.Series([s[2] for s in stamps], dtype=object), format=TIME_FORMAT,
                           errors="coerce")
    bad = times.isna().to_numpy()
    if bad.any():
        rec_no, name, text = stamps[int(np.argmax(bad))]
        raise TraceError(path, f"malformed time {short(text)} (expected YYYY-MM-DD HH:MM:SS)",
                         line=rec_no, field=name)
    secs = (times - PHILLY_EPOCH).dt.total_seconds().to_numpy()
    counts = np.array([len(job.times) for job in jobs])
    first = np.cumsum(counts) - counts  # index of each job's submission time in secs
    return secs[first], secs[first + 1], secs[first + counts - 1]


def _check_unique_ids(jobs: list[_Job], ids: pd.Series, lines: np.ndarray, path: str | Path) -> None:
    dup = ids.duplicated().to_numpy()
    if dup.any():
        i = int(np.argmax(dup))
        first = int(lines[int(np.argmax((ids == ids.iloc[i]).to_numpy()))])
        raise TraceError(path, f"duplicate job id {short(ids.iloc[i])} (first seen in record {first})",
                         line=int(lines[i]), field=jobs[i].id_key)


def _durations(jobs: list[_Job], start: np.ndarray, end: np.ndarray, lines: np.ndarray,
               path: str | Path) -> np.ndarray:
    """First attempt's start -> last attempt's end per job; a negative one raises."""
    duration = end - start
    neg = duration < 0
    if neg.any():
        i = int(np.argmax(neg))
        raise TraceError(path, "last attempt ends before the first attempt starts",
                         line=int(lines[i]), field=jobs[i].times[-1][0])
    return duration


def load_json(path: str | Path, *, epoch: str | pd.Timestamp | None = PHILLY_EPOCH) -> JobTrace:
    """Load a Philly job log in the raw ``cluster_job_log`` JSON layout (a list of job objects).

    Two layouts are accepted: the marwage subset (``id, num_gpus, runtime, attempts,
    submitted_time``) and the original log (``jobid, user, vc, status, submitted_time, attempts``
    whose attempts carry ``detail`` lists of ``{ip, gpus}``; #GPUs is then counted from the first
    attempt). ``duration_s`` = first attempt's start → last attempt's end, which includes retries
    and the gaps between them: the CSV's definition. ``submit_s`` counts from ``epoch`` (the CSV's
    clock; ``None`` = the earliest kept submission). Left out and counted: jobs that never started
    (no attempts, or no start time) and jobs still running (no end time); with a fixed epoch, jobs
    submitted before it. Unused fields (``runtime``, ``vc``, ``status``) are not read.
    ``line`` is the 1-based record number. Malformed values raise TraceError naming the record
    and field.
    """
    jobs, excluded = _read_jobs(_read_records(path), path)
    submit, start, end = _job_times(jobs, path)
    lines = np.array([job.rec_no for job in jobs], dtype="int64")
    ids = pd.Series([job.job_id for job in jobs], dtype=object)
    _check_unique_ids(jobs, ids, lines, path)
    duration = _durations(jobs, start, end, lines, path)
    num_gpus = numeric(pd.Series([job.num_gpus for job in jobs], dtype=object), path, lines, "num_gpus")
    num_gpus = gpu_counts(num_gpus, path, lines, "num_gpus")
    origin = float(submit.min()) if epoch is None else (pd.Timestamp(epoch) - PHILLY_EPOCH).total_seconds()
    early = submit < origin  # none when epoch is None
    if early.any():
        excluded[BEFORE_EPOCH] += int(early.sum())
    df = pd.DataFrame({
        "job_id": ids,
        "submit_s": submit - origin,
        "num_gpus": num_gpus,
        "duration_s": duration,
        "gpu_type": "",
        "deadline_s": np.nan,
        "user": [job.user for job in jobs],
        "workload": "",
        "line": lines,
    })[submit >= origin].reset_index(drop=True)
    return finalize(df, path, "philly-json", dict(excluded))


def load_machine_list(path: str | Path) -> pd.DataFrame:
    """Load Philly's ``cluster_machine_list.csv`` as a node table ``node, gpu_type, num_gpus``.

    GPU type from the per-GPU memory (12 GB → P100, 24 GB → P40: the common assumption, see
    :data:`MEMORY_GB_TO_TYPE`); any other size raises TraceError. Machines with 0 GPUs are
    skipped (the simulator wants GPU nodes only); their count is in ``.attrs["excluded"]``.
    """
    rows, _ = read_csv_rows(path, required=MACHINE_COLUMNS)
    lines = rows["line"].to_numpy()
    node = identifiers(rows["machineId"], path, lines, "machineId", unique=True)
    gpus = numeric(rows["number of GPUs"], path, lines, "number of GPUs", min_value=0.0)
    gpus = gpu_counts(gpus, path, lines, "number of GPUs", minimum=0)
    keep = gpus > 0
    if not keep.any():
        raise TraceError(path, "no machine has GPUs")
    mem_text = rows["single GPU mem"].str.strip()[keep]
    kept_lines = lines[keep]
    mem = pd.to_numeric(mem_text.str.extract(r"^(\d+(?:\.\d+)?)\s*[Gg][Bb]?$", expand=False),
                        errors="coerce").to_numpy()
    gpu_type = pd.Series(mem).map(MEMORY_GB_TO_TYPE)
    unknown = gpu_type.isna().to_numpy()
    if unknown.any():
        i = int(np.argmax(unknown))
        raise TraceError(path, f"GPU memory {short(mem_text.iloc[i])} maps to no GPU type (known: "
                         f"{', '.join(f'{m:g}GB → {t}' for m, t in MEMORY_GB_TO_TYPE.items())})",
                         line=int(kept_lines[i]), field="single GPU mem")
    out = pd.DataFrame({"node": node[keep].to_numpy(), "gpu_type": gpu_type.to_numpy(),
                        "num_gpus": gpus[keep].astype("int64")})
    out = out.astype({"node": "string", "gpu_type": "string"})
    skipped = int((~keep).sum())
    out.attrs["excluded"] = {"machines with 0 GPUs": skipped} if skipped else {}
    return out

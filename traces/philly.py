"""Microsoft Philly (Jeon et al., ATC'19): the per-job CSV, the raw JSON job log, the machine list.

Why three readers: the full Philly job list available to us is RFold's derived per-job CSV
(arrival, #GPUs, duration; no status, VC or user); the upstream raw format is the
``cluster_job_log`` JSON (status, user, attempts), of which only a subset is at hand but whose
layout the full log shares; and the machine list is the only source of GPU types for Philly.
Philly records no GPU type per job, so every job's ``gpu_type`` is "".

All job times share one clock: seconds since :data:`PHILLY_EPOCH`, the instant the CSV calls 0
(established by matching raw job ids against the CSV; ../shared/research/traces.md §3.1).
Raw timestamps are naive Philly local time and are subtracted as such, as the CSV was built.

The JSON log records every attempt of a job (Philly retried failed jobs), so :func:`load_json`
keeps them in the ``attempts`` column and the original log's ``status`` in ``outcome``
(:mod:`traces.schema`): what ``--failures replay`` replays.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import pandas as pd

from predictor.common.inputs import InputError, LocatedError, short
from predictor.common.inputs import load_json as load_json_text
from traces.schema import (
    ATTEMPTS,
    OUTCOME,
    JobTrace,
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
# The original log's job status -> the trace's outcome of the last attempt (traces.schema.OUTCOMES).
STATUS_OUTCOME = {"Pass": "completed", "Killed": "cancelled", "Failed": "failed"}


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
        raise LocatedError(path, "no num_gpus in the record and no per-machine detail list in its first "
                           "attempt to count GPUs from", line=rec_no, field="attempts[0].detail")
    total = 0
    for m, machine in enumerate(detail):
        gpus = machine.get("gpus") if isinstance(machine, dict) else None
        if not isinstance(gpus, list):
            raise LocatedError(path, "expected an object with a 'gpus' list", line=rec_no,
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
    # submitted_time, then each attempt's start and end time (all present when kept; their
    # fields: :func:`_time_field`), so [1] is the first attempt's start and [-1] the last's end
    times: list[str]
    outcome: str  # the last attempt's outcome from the record's status ("" when it has none)


def _read_records(path: str | Path) -> list:
    """The file's JSON list of job records: LocatedError for a missing, undecodable or empty file."""
    raw = read_trace_bytes(path)
    try:
        data = load_json_text(raw.decode("utf-8-sig"), path)  # nesting checked before parsing
    except UnicodeDecodeError as exc:
        raise LocatedError(path, f"not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    except json.JSONDecodeError as exc:
        raise LocatedError(path, f"invalid JSON: {exc.msg} (text line {exc.lineno}, column {exc.colno})",
                           line=exc.lineno) from None
    except InputError:
        raise
    except ValueError as exc:  # e.g. an integer of more than 4,300 digits, which Python will not parse
        raise LocatedError(path, f"invalid JSON: {str(exc).split(';')[0][:160]}") from None
    if not isinstance(data, list):
        raise LocatedError(path, f"expected a JSON list of job objects, got a {type(data).__name__}")
    if not data:
        raise LocatedError(path, "the file holds no job records", line=1)
    return data


def _job_id(rec: Any, path: str | Path, rec_no: int) -> tuple[str, str]:
    """The record's id key ("id" in the marwage subset, "jobid" in the original log) and its id."""
    if not isinstance(rec, dict):
        raise LocatedError(path, f"expected a job object, got a {type(rec).__name__}", line=rec_no)
    key = "id" if "id" in rec else "jobid"
    job_id = rec.get(key)
    if job_id is None or str(job_id).strip() == "":
        raise LocatedError(path, "job id is missing (need 'id' or 'jobid')", line=rec_no, field=key)
    return key, str(job_id).strip()


def _attempts(rec: dict, path: str | Path, rec_no: int) -> list[dict]:
    """The record's attempt objects ([] for a null or empty list, a job that never started)."""
    if "attempts" not in rec:
        raise LocatedError(path, "key is missing", line=rec_no, field="attempts")
    attempts = rec["attempts"]
    if attempts is None or attempts == []:
        return []
    if not isinstance(attempts, list):
        raise LocatedError(path, f"expected a list, got a {type(attempts).__name__}", line=rec_no,
                           field="attempts")
    for k, att in enumerate(attempts):
        if not isinstance(att, dict):
            raise LocatedError(path, f"expected an attempt object, got a {type(att).__name__}",
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


def _time_field(position: int) -> str:
    """The field of a record's ``position``-th time in :attr:`_Job.times`."""
    if position == 0:
        return "submitted_time"
    k, end = divmod(position - 1, 2)
    return f"attempts[{k}].{'end_time' if end else 'start_time'}"


def _time_texts(rec: dict, attempts: list[dict], path: str | Path, rec_no: int) -> list[str]:
    """The texts of the submission time and of every attempt's times, to check all of them.
    Every time must be there: a retried attempt without its start or end has no length to record
    (the first start and the last end were checked by :func:`_left_out`)."""
    times = [_time_text(rec.get("submitted_time"))]
    for att in attempts:
        times += (_time_text(att.get("start_time")), _time_text(att.get("end_time")))
    if None in times:
        i = times.index(None)
        what = ("submission time is missing" if i == 0 else
                "time is missing (an attempt between the first and the last needs its start and end time)")
        raise LocatedError(path, what, line=rec_no, field=_time_field(i))
    return times


def _outcome(rec: dict, path: str | Path, rec_no: int) -> str:
    """The last attempt's outcome from the original log's ``status`` ("" when the record has none)."""
    if "status" not in rec or rec["status"] is None:
        return ""
    status = rec["status"]
    if not isinstance(status, str) or status.strip() not in STATUS_OUTCOME:
        raise LocatedError(path, f"unknown status {short(status)} for a finished job; expected "
                           f"{', '.join(STATUS_OUTCOME)}", line=rec_no, field="status")
    return STATUS_OUTCOME[status.strip()]


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
    return _Job(rec_no, job_id, key, "" if user is None else str(user), gpus, times, _outcome(rec, path, rec_no))


def _read_jobs(records: list, path: str | Path) -> tuple[list[_Job], Counter[str]]:
    """The kept jobs, and how many records are left out for each reason; LocatedError if none is kept."""
    excluded: Counter[str] = Counter()
    jobs: list[_Job] = []
    for rec_no, rec in enumerate(records, start=1):
        job = _read_record(rec, path, rec_no)
        if isinstance(job, str):
            excluded[job] += 1
        else:
            jobs.append(job)
    if not jobs:
        raise LocatedError(path, f"no usable jobs: all {len(records)} records were left out ({dict(excluded)})")
    return jobs, excluded


def _job_times(jobs: list[_Job], path: str | Path) -> tuple[np.ndarray, np.ndarray]:
    """Every job's times (s on the CSV's clock; the layout of :attr:`_Job.times`, jobs one after
    the other) and where each job's begin, all texts parsed at once (one vectorised to_datetime);
    the first malformed one raises, naming record and field."""
    texts = [text for job in jobs for text in job.times]
    times = pd.to_datetime(pd.Series(texts, dtype=object), format=TIME_FORMAT, errors="coerce")
    counts = np.array([len(job.times) for job in jobs])
    first = np.cumsum(counts) - counts  # index of each job's submission time in secs
    bad = times.isna().to_numpy()
    if bad.any():
        i = int(np.argmax(bad))
        j = int(np.searchsorted(first, i, side="right")) - 1
        raise LocatedError(path, f"malformed time {short(texts[i])} (expected YYYY-MM-DD HH:MM:SS)",
                           line=jobs[j].rec_no, field=_time_field(i - int(first[j])))
    return (times - PHILLY_EPOCH).dt.total_seconds().to_numpy(), first


def _seconds(values: np.ndarray) -> np.ndarray:
    """Seconds as the ``attempts`` column writes them: whole ones without a decimal point."""
    whole = values == np.floor(values)
    out = values.astype("int64").astype(str).astype(object)
    out[~whole] = [repr(float(v)) for v in values[~whole]]
    return out


def _attempts_column(jobs: list[_Job], secs: np.ndarray, first: np.ndarray, lines: np.ndarray,
                     path: str | Path) -> np.ndarray:
    """Each job's failed attempts as ``LENGTH/GAP;...`` (traces.schema ``attempts``; "" for a job
    run once). An attempt that ends before it starts, or starts before the previous one ended, is
    refused naming the record and field. Vectorised over all attempts of all jobs."""
    n_attempts = (np.array([len(job.times) for job in jobs]) - 1) // 2
    job_of = np.repeat(np.arange(len(jobs)), n_attempts)  # the job of each attempt, in record order
    k = np.arange(len(job_of)) - np.repeat(np.cumsum(n_attempts) - n_attempts, n_attempts)  # its index
    start = secs[first[job_of] + 1 + 2 * k]
    end = secs[first[job_of] + 2 + 2 * k]
    backwards = end < start
    overlap = np.zeros(len(k), dtype=bool)
    overlap[1:] = (k[1:] > 0) & (start[1:] < end[:-1])
    bad = backwards | overlap
    if bad.any():
        i = int(np.argmax(bad))
        job, name = jobs[job_of[i]], ("start_time" if overlap[i] else "end_time")
        what = ("starts before the previous attempt ended" if overlap[i] else "ends before it starts")
        raise LocatedError(path, f"attempt {int(k[i])} {what}", line=int(lines[job_of[i]]),
                           field=f"attempts[{int(k[i])}].{name}")
    out = np.full(len(jobs), "", dtype=object)
    failed = np.flatnonzero(k[1:] > 0)  # attempt i failed: attempt i + 1 is of the same job
    pairs = (_seconds(end[failed] - start[failed]) + "/" + _seconds(start[failed + 1] - end[failed])).tolist()
    owner = job_of[failed]  # in record order, so each job's pairs are adjacent
    cuts = np.flatnonzero(np.diff(owner)) + 1
    for job, lo, hi in zip(owner[np.r_[0, cuts]] if len(owner) else [], np.r_[0, cuts], np.r_[cuts, len(owner)]):
        out[job] = ";".join(pairs[lo:hi])
    return out


def _check_unique_ids(jobs: list[_Job], ids: pd.Series, lines: np.ndarray, path: str | Path) -> None:
    dup = ids.duplicated().to_numpy()
    if dup.any():
        i = int(np.argmax(dup))
        first = int(lines[int(np.argmax((ids == ids.iloc[i]).to_numpy()))])
        raise LocatedError(path, f"duplicate job id {short(ids.iloc[i])} (first seen in record {first})",
                           line=int(lines[i]), field=jobs[i].id_key)


def load_json(path: str | Path, *, epoch: str | pd.Timestamp | None = PHILLY_EPOCH) -> JobTrace:
    """Load a Philly job log in the raw ``cluster_job_log`` JSON layout (a list of job objects).

    Two layouts are accepted: the marwage subset (``id, num_gpus, runtime, attempts,
    submitted_time``) and the original log (``jobid, user, vc, status, submitted_time, attempts``
    whose attempts carry ``detail`` lists of ``{ip, gpus}``; #GPUs is then counted from the first
    attempt). ``duration_s`` = first attempt's start → last attempt's end, which includes retries
    and the gaps between them: the CSV's definition. ``attempts`` records each attempt before the
    last as ``LENGTH/GAP`` (its end − its start, then the next start − its end); ``outcome`` maps
    the original log's ``status`` (:data:`STATUS_OUTCOME`; "" when the record has none, as in the
    marwage subset). An attempt that ends before it starts, or starts before the previous one
    ended, is refused. ``submit_s`` counts from ``epoch`` (the CSV's clock; ``None`` = the
    earliest kept submission). Left out and counted: jobs that never started (no attempts, or no
    start time) and jobs still running (no end time); with a fixed epoch, jobs submitted before
    it. Unused fields (``runtime``, ``vc``) are not read. ``line`` is the 1-based record number.
    Malformed values raise LocatedError naming the record and field.
    """
    jobs, excluded = _read_jobs(_read_records(path), path)
    secs, first = _job_times(jobs, path)
    lines = np.array([job.rec_no for job in jobs], dtype="int64")
    ids = pd.Series([job.job_id for job in jobs], dtype=object)
    _check_unique_ids(jobs, ids, lines, path)
    attempts = _attempts_column(jobs, secs, first, lines, path)
    last = np.append(first[1:], len(secs)) - 1  # each job's last attempt's end
    submit, duration = secs[first], secs[last] - secs[first + 1]
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
        ATTEMPTS: attempts,
        OUTCOME: [job.outcome for job in jobs],
    })[submit >= origin].reset_index(drop=True)
    return finalize(df, path, "philly-json", dict(excluded))


def load_machine_list(path: str | Path) -> pd.DataFrame:
    """Load Philly's ``cluster_machine_list.csv`` as a node table ``node, gpu_type, num_gpus``.

    GPU type from the per-GPU memory (12 GB → P100, 24 GB → P40: the common assumption, see
    :data:`MEMORY_GB_TO_TYPE`); any other size raises LocatedError. Machines with 0 GPUs are
    skipped (the simulator wants GPU nodes only); their count is in ``.attrs["excluded"]``.
    """
    rows, _ = read_csv_rows(path, required=MACHINE_COLUMNS)
    lines = rows["line"].to_numpy()
    node = identifiers(rows["machineId"], path, lines, "machineId", unique=True)
    gpus = numeric(rows["number of GPUs"], path, lines, "number of GPUs", min_value=0.0)
    gpus = gpu_counts(gpus, path, lines, "number of GPUs", minimum=0)
    keep = gpus > 0
    if not keep.any():
        raise LocatedError(path, "no machine has GPUs")
    mem_text = rows["single GPU mem"].str.strip()[keep]
    kept_lines = lines[keep]
    mem = pd.to_numeric(mem_text.str.extract(r"^(\d+(?:\.\d+)?)\s*[Gg][Bb]?$", expand=False),
                        errors="coerce").to_numpy()
    gpu_type = pd.Series(mem).map(MEMORY_GB_TO_TYPE)
    unknown = gpu_type.isna().to_numpy()
    if unknown.any():
        i = int(np.argmax(unknown))
        raise LocatedError(path, f"GPU memory {short(mem_text.iloc[i])} maps to no GPU type (known: "
                           f"{', '.join(f'{m:g}GB → {t}' for m, t in MEMORY_GB_TO_TYPE.items())})",
                           line=int(kept_lines[i]), field="single GPU mem")
    out = pd.DataFrame({"node": node[keep].to_numpy(), "gpu_type": gpu_type.to_numpy(),
                        "num_gpus": gpus[keep].astype("int64")})
    out = out.astype({"node": "string", "gpu_type": "string"})
    skipped = int((~keep).sum())
    out.attrs["excluded"] = {"machines with 0 GPUs": skipped} if skipped else {}
    return out

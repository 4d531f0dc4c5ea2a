"""The job-trace table (DESIGN §3) and the checks every loader runs on it.

Why one module: every loader (Philly, PAI, ITP, Hydra cases, synthetic) must produce exactly the
same columns and units, and every bad input must fail with a message naming file, line and field.

Design decisions: one row per job, times in seconds on the trace's own clock; optional columns
(per-type run times ``runtime_s:<GPU>``, where +inf means "cannot run" and NaN "not known";
``allowed_gpus``, ``attempts``, ``shape``, Gavel's ``steps``, ...) are added only by loaders whose
format has them, and :func:`finalize` checks and keeps them. A trace that *states* its deadlines
(:attr:`JobTrace.deadlines_stated`) gets none synthesised unless a run asks. Values are bounded
(:data:`TIME_LIMIT_S`, :data:`MAX_CHECKPOINT_BYTES`, :data:`MAX_TEXT`, printable job ids) because a
file from a stranger must not make a run's numbers silently wrong or its memory grow.

Columns, optional columns and bounds: docs/data.md, 'The job-trace table'.
"""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from predictor.common.gpus import UnknownGpuTypeError, canonical_gpu_type
from predictor.common.inputs import LocatedError, check_width, limit, names, read_bytes, short

JOB_COLUMNS: dict[str, str] = {
    "job_id": "string",
    "submit_s": "float64",
    "num_gpus": "int64",
    "duration_s": "float64",
    "gpu_type": "string",
    "deadline_s": "float64",
    "user": "string",
    "workload": "string",
    "line": "int64",
}
RUNTIME_PREFIX = "runtime_s:"
THROUGHPUT_PREFIX = "throughput:"  # Gavel's steps per second on a type (0: cannot run there)
CHECKPOINT_BYTES = "checkpoint_bytes"  # optional: what resuming the job reads back (preemptive policies)
ALLOWED_GPUS = "allowed_gpus"  # optional: "|"-separated types the job may run on ("" = any)
ALLOWED_SEPARATOR = "|"
SHAPE = "shape"  # optional: GPUs per server of the recorded run, "8+8" ("" = not recorded)
ATTEMPTS = "attempts"  # optional: failed attempts before the last, "LENGTH/GAP;..." in seconds ("" = none)
OUTCOME = "outcome"  # optional: how the last attempt ended ("" = not recorded)
OUTCOMES = ("completed", "failed", "cancelled")
# The most failed attempts one job may record: a cell of a stranger's file must not expand into
# millions of tuples (Philly's subset records at most 4).
MAX_ATTEMPTS = 1000
# Optional columns besides the prefixed ones, with their dtypes (see the module docstring).
OPTIONAL_COLUMNS: dict[str, str] = {
    CHECKPOINT_BYTES: "float64",
    ALLOWED_GPUS: "string",
    "vc": "string",
    "model": "string",
    "batch": "Int64",
    "input_size": "Int64",
    "dtype": "string",
    "steps": "float64",
    "priority_weight": "float64",
    SHAPE: "string",
    ATTEMPTS: "string",
    OUTCOME: "string",
}
OPTIONAL_PREFIXES = (RUNTIME_PREFIX, THROUGHPUT_PREFIX)

# The latest submit time or deadline, and the longest duration, a trace may hold (about 31,700
# years; the same horizon as simulator.run.HORIZON_S, the furthest --load-scale may stretch a
# trace). Why: the clock is float64 seconds, whose steps are 2^-12 s below 2^41 s (2.2e12), so a
# submit time plus a run time stays exact to the millisecond; at 1e300, adding 100 s changed nothing.
TIME_LIMIT_S = 1e12
# The largest checkpoint a job may read back on a resume (1 PB: a trillion-parameter model with
# Adam's states is ~16 TB); at the slowest storage a preemptive policy takes (1 MB/s) it costs
# 1e9 s, which keeps a run's clock finite and exact.
MAX_CHECKPOINT_BYTES = 1e15
# The longest job id, user or workload tag (real ones: ~40 characters); a 10 MB id would be
# copied into every record, plot and message.
MAX_TEXT = 200
_TIME = "times are float seconds, exact to the millisecond up to 1e12 s, about 31,700 years"


@dataclass
class JobTrace:
    """A validated job table plus where it came from and what a documented filter left out."""

    jobs: pd.DataFrame
    source: str
    kind: str
    excluded: dict[str, int] = field(default_factory=dict)
    # The trace states its deadlines (NaN: that job has none): none are synthesised unless a run
    # asks for them explicitly (module docstring).
    deadlines_stated: bool = False
    # What the loader states about how it read the file (e.g. the throughputs a Gavel trace was
    # timed with): recorded in a run's manifest.
    meta: dict[str, object] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.jobs)

    def runtime_types(self) -> list[str]:
        """GPU types for which the trace carries measured per-type run times."""
        return [c[len(RUNTIME_PREFIX):] for c in self.jobs.columns if c.startswith(RUNTIME_PREFIX)]

    def with_jobs(self, jobs: pd.DataFrame) -> JobTrace:
        """This trace (source, kind, what was left out, what it states) with another job table."""
        return JobTrace(jobs, self.source, self.kind, dict(self.excluded), self.deadlines_stated, dict(self.meta))

    def head(self, n: int) -> JobTrace:
        """The first n jobs in submit order (the table is kept sorted by submit time)."""
        return self.with_jobs(self.jobs.iloc[:n].reset_index(drop=True))

    def scaled_load(self, factor: float) -> JobTrace:
        """Arrivals ``factor`` times as dense (offsets from the first submit divided by it); each
        deadline keeps its slack after its job's submit time."""
        jobs = self.jobs.copy()
        start = jobs["submit_s"].min() if len(jobs) else 0.0
        submit = start + (jobs["submit_s"] - start) / factor
        jobs["deadline_s"] = submit + (jobs["deadline_s"] - jobs["submit_s"])
        jobs["submit_s"] = submit
        return self.with_jobs(jobs)


def require_columns(df: pd.DataFrame, needed: list[str], path: str | Path) -> None:
    missing = [c for c in needed if c not in df.columns]
    if missing:
        raise LocatedError(path, f"missing column(s) {missing}; found [{list_names(list(df.columns))}]", line=1)


def numeric(values: pd.Series, path: str | Path, lines: pd.Series | np.ndarray, name: str,
            *, allow_nan: bool = False, allow_inf: bool = False, min_value: float | None = None,
            max_value: float | None = None, why: str = "") -> np.ndarray:
    """Parse a column as float; the first bad row raises LocatedError naming its line and field.
    ``max_value`` bounds the finite values (``why``: the reason, quoted in the message)."""
    raw = values
    parsed = pd.to_numeric(raw, errors="coerce").to_numpy(dtype="float64")
    lines = np.asarray(lines)
    blank = np.zeros(len(parsed), dtype=bool)  # only rows that did not parse need the string check
    nan_at = np.flatnonzero(np.isnan(parsed))
    if len(nan_at):
        sub = raw.iloc[nan_at]
        blank[nan_at] = sub.isna().to_numpy() | (sub.astype("string").str.strip() == "").fillna(True).to_numpy()
    unparsable = np.isnan(parsed) & ~blank
    if unparsable.any():
        i = int(np.argmax(unparsable))
        raise LocatedError(path, f"not a number: {short(raw.iloc[i])}", line=int(lines[i]), field=name)
    if not allow_nan and np.isnan(parsed).any():
        i = int(np.argmax(np.isnan(parsed)))
        raise LocatedError(path, "value is missing (NaN/empty)", line=int(lines[i]), field=name)
    if not allow_inf and np.isinf(parsed).any():
        i = int(np.argmax(np.isinf(parsed)))
        raise LocatedError(path, f"value is infinite: {short(raw.iloc[i])}", line=int(lines[i]), field=name)
    if min_value is not None:
        bad = parsed < min_value
        if bad.any():
            i = int(np.argmax(bad))
            raise LocatedError(path, f"value {parsed[i]:g} is below the minimum {min_value:g}",
                               line=int(lines[i]), field=name)
    if max_value is not None:
        bad = np.isfinite(parsed) & (parsed > max_value)
        if bad.any():
            i = int(np.argmax(bad))
            raise LocatedError(path, f"value {parsed[i]:g} is above the maximum {max_value:g}"
                               + (f" ({why})" if why else ""), line=int(lines[i]), field=name)
    return parsed


def text_fields(values: pd.Series, path: str | Path, lines: np.ndarray, name: str, *, printable: bool) -> pd.Series:
    """``values`` as strings of at most :data:`MAX_TEXT` characters, and with ``printable`` free of
    control and format characters (``str.isprintable``); the first bad row raises LocatedError
    naming its line and field, the value quoted cut short and escaped."""
    text = values.fillna("").astype(str)
    long = (text.str.len() > MAX_TEXT).to_numpy()
    if long.any():
        i = int(np.argmax(long))
        raise LocatedError(path, f"{len(text.iloc[i]):,} characters, at most {MAX_TEXT} ({short(text.iloc[i])})",
                           line=int(lines[i]), field=name)
    if printable:
        odd = np.flatnonzero(text.str.contains("[^ -~]", regex=True).to_numpy(dtype=bool))  # not printable ASCII
        bad = np.zeros(len(text), dtype=bool)
        bad[odd] = ~text.iloc[odd].map(str.isprintable).to_numpy(dtype=bool)
        if bad.any():
            i = int(np.argmax(bad))
            raise LocatedError(path, f"holds a control or format character: {short(text.iloc[i])}",
                               line=int(lines[i]), field=name)
    return text


INT64_LIMIT = 2.0 ** 63  # the first float that no longer fits an int64 (it would wrap to a negative)


def gpu_counts(values: np.ndarray, path: str | Path, lines: np.ndarray, name: str, *, minimum: int = 1) -> np.ndarray:
    """Whole GPU counts >= ``minimum`` (1 for jobs; 0 for machine lists, where CPU-only nodes occur).
    A count too large for a 64-bit integer is refused here, under the file's own field name,
    instead of wrapping to a negative number."""
    bad = (values < minimum) | (values != np.floor(values))
    if bad.any():
        i = int(np.argmax(bad))
        raise LocatedError(path, f"GPU count must be a whole number >= {minimum}, got {values[i]:g}",
                           line=int(lines[i]), field=name)
    huge = values >= INT64_LIMIT
    if huge.any():
        i = int(np.argmax(huge))
        raise LocatedError(path, f"GPU count {values[i]:g} is too large (it overflows a 64-bit integer)",
                           line=int(lines[i]), field=name)
    return values.astype("int64")


def canonical_types(values: pd.Series, path: str | Path, lines: np.ndarray, name: str) -> pd.Series:
    """Map GPU-type spellings to canonical names ("" stays ""); unknown names raise LocatedError."""
    values = values.fillna("").astype(str).str.strip()
    mapping: dict[str, str] = {"": ""}
    for value in values.unique():
        if value in mapping:
            continue
        try:
            mapping[value] = canonical_gpu_type(value)
        except UnknownGpuTypeError as exc:
            i = int(np.argmax((values == value).to_numpy()))
            raise LocatedError(path, exc.brief, line=int(lines[i]), field=name) from None
    return values.map(mapping)


def whole_numbers(values: np.ndarray, path: str | Path, lines: np.ndarray, name: str, *,
                  minimum: int = 1) -> pd.api.extensions.ExtensionArray:
    """Nullable whole numbers >= ``minimum`` (NaN: not given) as an Int64 column; the first
    fraction, or value below the minimum, raises LocatedError naming its line and field."""
    given = ~np.isnan(values)
    bad = given & ((values < minimum) | (values != np.floor(values)) | (values >= INT64_LIMIT))
    if bad.any():
        i = int(np.argmax(bad))
        raise LocatedError(path, f"must be a whole number >= {minimum}, got {values[i]:g}", line=int(lines[i]),
                           field=name)
    out = pd.array(np.where(given, values, 0).astype("int64"), dtype="Int64")
    out[~given] = pd.NA
    return out


def check_type_column(column: str, prefix: str, path: str | Path) -> str:
    """The canonical GPU type a ``runtime_s:``/``throughput:`` column names; LocatedError (line 1,
    the column) for an unknown type or a spelling other than the canonical one."""
    name = column[len(prefix):]
    try:
        canon = canonical_gpu_type(name)
    except UnknownGpuTypeError as exc:
        raise LocatedError(path, f"column names no known GPU type: {exc.brief}", line=1, field=column) from None
    if canon != name:
        raise LocatedError(path, f"write the canonical GPU name: {prefix}{canon}", line=1, field=column)
    return canon


def parse_shape(text: str) -> tuple[int, ...]:
    """GPUs per server of a ``shape`` such as ``8+8`` (ValueError naming the text if malformed)."""
    parts = str(text).split("+")
    if not all(p.strip().isdigit() and int(p) > 0 for p in parts):
        raise ValueError(f"shape {short(text)} is not GPUs per server joined by '+' (e.g. 8+8)")
    return tuple(int(p) for p in parts)


def _check_shapes(df: pd.DataFrame, path: str, lines: np.ndarray) -> None:
    """Each non-empty ``shape`` parses and adds up to the job's ``num_gpus``."""
    shapes = df[SHAPE].fillna("").astype(str).str.strip()
    df[SHAPE] = shapes
    gpus = df["num_gpus"].to_numpy()
    for i in np.flatnonzero((shapes != "").to_numpy()):
        try:
            total = sum(parse_shape(shapes.iloc[i]))
        except ValueError as exc:
            raise LocatedError(path, str(exc), line=int(lines[i]), field=SHAPE) from None
        if total != gpus[i]:
            raise LocatedError(path, f"shape {short(shapes.iloc[i])} adds up to {total} GPUs, but the job asks for "
                               f"{int(gpus[i])}", line=int(lines[i]), field=SHAPE)


def parse_attempts(text: str) -> tuple[tuple[float, float], ...]:
    """The (length, gap) pairs of an ``attempts`` cell ("" = none); ValueError naming the attempt
    and what is wrong (not a pair, not a number, not finite, negative, too many)."""
    text = str(text).strip()
    if not text:
        return ()
    parts = text.split(";")
    if len(parts) > MAX_ATTEMPTS:
        raise ValueError(f"{len(parts):,} attempts, at most {MAX_ATTEMPTS:,}")
    pairs = []
    for k, part in enumerate(parts, start=1):
        fields = part.split("/")
        if len(fields) != 2:
            raise ValueError(f"attempt {k} ({short(part.strip())}) is not LENGTH/GAP in seconds (e.g. 14033/186; "
                             "attempts are separated by ';')")
        pair = []
        for name, field_text in zip(("length", "gap"), fields):
            field_text = field_text.strip()
            try:
                if "_" in field_text:  # float() reads "1_000"; a trace's number does not
                    raise ValueError(field_text)
                value = float(field_text)
            except ValueError:
                raise ValueError(f"attempt {k}: {name} {short(field_text)} is not a number") from None
            if not np.isfinite(value):
                raise ValueError(f"attempt {k}: {name} {short(field_text)} is not finite")
            if value < 0:
                raise ValueError(f"attempt {k}: {name} {value:g} is negative")
            pair.append(value)
        pairs.append((pair[0], pair[1]))
    return tuple(pairs)


def _attempt_totals(cells: pd.Series) -> np.ndarray | None:
    """Each cell's sum of lengths and gaps, parsed in one vectorised pass; None when any cell is
    not plainly well-formed (the caller then parses cell by cell, for the message)."""
    parts = cells.str.split(";").explode()
    pairs = parts.str.split("/", expand=True)
    if pairs.shape[1] != 2 or pairs.isna().any().any():
        return None
    values = np.column_stack([pd.to_numeric(pairs[c], errors="coerce").to_numpy(dtype="float64")
                              for c in pairs.columns])
    counts = parts.groupby(level=0).size().to_numpy()
    if not np.isfinite(values).all() or (values < 0).any() or (counts > MAX_ATTEMPTS).any():
        return None
    return pd.Series(values.sum(axis=1)).groupby(parts.index.to_numpy()).sum().to_numpy()


def _check_attempts(df: pd.DataFrame, path: str, lines: np.ndarray) -> None:
    """Each non-empty ``attempts`` cell parses, and its lengths and gaps fit in the job's duration."""
    cells = df[ATTEMPTS].fillna("").astype(str).str.strip()
    df[ATTEMPTS] = cells
    rows = np.flatnonzero((cells != "").to_numpy())
    if not len(rows):
        return
    given = pd.Series(cells.to_numpy(dtype=object)[rows], index=np.arange(len(rows)), dtype=object)
    totals = _attempt_totals(given)
    if totals is None:
        totals = np.zeros(len(rows))
        for j, text in enumerate(given.tolist()):
            try:
                totals[j] = sum(length + gap for length, gap in parse_attempts(text))
            except ValueError as exc:
                raise LocatedError(path, str(exc), line=int(lines[rows[j]]), field=ATTEMPTS) from None
    duration = df["duration_s"].to_numpy(dtype="float64")[rows]
    over = totals > duration * (1 + 1e-12) + 1e-9
    if over.any():
        j = int(np.argmax(over))
        raise LocatedError(path, f"the failed attempts and gaps add up to {totals[j]:g} s, more than the job's "
                           f"duration_s of {duration[j]:g} s (first start to last end)", line=int(lines[rows[j]]),
                           field=ATTEMPTS)


def _check_outcomes(df: pd.DataFrame, path: str, lines: np.ndarray) -> None:
    """Each ``outcome`` is one of :data:`OUTCOMES` or ""."""
    outcome = df[OUTCOME].fillna("").astype(str).str.strip()
    df[OUTCOME] = outcome
    bad = (~outcome.isin(("", *OUTCOMES))).to_numpy()
    if bad.any():
        i = int(np.argmax(bad))
        raise LocatedError(path, f"unknown outcome {short(outcome.iloc[i])}; expected {', '.join(OUTCOMES)} or empty "
                           "(not recorded)", line=int(lines[i]), field=OUTCOME)


def _optional_columns(df: pd.DataFrame, path: str, lines: np.ndarray) -> list[str]:
    """Check the optional columns present in ``df`` (in place); returns their names in table order."""
    clock = dict(min_value=0.0, max_value=TIME_LIMIT_S, why=_TIME)
    extra = []
    for col in df.columns:
        if col.startswith(RUNTIME_PREFIX):  # +inf: cannot run on that type; NaN: not known
            check_type_column(col, RUNTIME_PREFIX, path)
            df[col] = numeric(df[col], path, lines, col, allow_nan=True, allow_inf=True, **clock)
        elif col.startswith(THROUGHPUT_PREFIX):  # 0: cannot run on that type
            check_type_column(col, THROUGHPUT_PREFIX, path)
            df[col] = numeric(df[col], path, lines, col, allow_nan=True, min_value=0.0)
        elif col == CHECKPOINT_BYTES:
            df[col] = numeric(df[col], path, lines, col, min_value=0.0, max_value=MAX_CHECKPOINT_BYTES, why="1 PB")
        elif col in ("steps", "priority_weight"):
            df[col] = numeric(df[col], path, lines, col, min_value=0.0)
        elif col in ("batch", "input_size"):
            df[col] = whole_numbers(numeric(df[col], path, lines, col, allow_nan=True), path, lines, col)
        elif col in (ALLOWED_GPUS, "vc", "model", "dtype", SHAPE, OUTCOME):
            df[col] = text_fields(df[col], path, lines, col, printable=False)
        elif col == ATTEMPTS:  # no MAX_TEXT: a job may record many attempts (MAX_ATTEMPTS bounds them)
            df[col] = df[col].fillna("").astype(str)
        else:
            continue
        extra.append(col)
    if SHAPE in df.columns:
        _check_shapes(df, path, lines)
    if ATTEMPTS in df.columns:
        _check_attempts(df, path, lines)
    if OUTCOME in df.columns:
        _check_outcomes(df, path, lines)
    if ALLOWED_GPUS in df.columns:
        parts = df[ALLOWED_GPUS].str.split(ALLOWED_SEPARATOR, regex=False)
        empty = ((df[ALLOWED_GPUS] != "") & parts.map(lambda names: any(not n.strip() for n in names))).to_numpy()
        if empty.any():
            i = int(np.argmax(empty))
            raise LocatedError(path, f"an empty GPU type name in {short(df[ALLOWED_GPUS].iloc[i])} "
                               f"(types are separated by {ALLOWED_SEPARATOR!r})", line=int(lines[i]),
                               field=ALLOWED_GPUS)
    return extra


def finalize(df: pd.DataFrame, path: str | Path, kind: str, excluded: dict[str, int] | None = None, *,
             deadlines_stated: bool = False, meta: dict[str, object] | None = None) -> JobTrace:
    """Check the assembled table (columns, ids, values), sort by submit time, and wrap it.

    Loaders call this last; it is also the check applied to tables built in code. The optional
    columns of the module docstring are checked and kept; any other column is dropped.
    ``deadlines_stated`` and ``meta``: see :class:`JobTrace`.
    """
    path = str(path)
    require_columns(df, list(JOB_COLUMNS), path)
    if len(df) == 0:
        raise LocatedError(path, "the trace holds no jobs")
    df = df.copy()
    lines = df["line"].to_numpy()
    clock = dict(min_value=0.0, max_value=TIME_LIMIT_S, why=_TIME)
    df["submit_s"] = numeric(df["submit_s"], path, lines, "submit_s", **clock)
    df["duration_s"] = numeric(df["duration_s"], path, lines, "duration_s", **clock)
    df["deadline_s"] = numeric(df["deadline_s"], path, lines, "deadline_s", allow_nan=True, allow_inf=True,
                               max_value=TIME_LIMIT_S, why=_TIME)
    df.loc[np.isinf(df["deadline_s"].to_numpy()), "deadline_s"] = np.nan
    early = df["deadline_s"].to_numpy() < df["submit_s"].to_numpy()
    if early.any():
        i = int(np.argmax(early))
        raise LocatedError(path, "deadline lies before the submit time", line=int(lines[i]), field="deadline_s")
    df["num_gpus"] = gpu_counts(numeric(df["num_gpus"], path, lines, "num_gpus"), path, lines, "num_gpus")
    df["gpu_type"] = canonical_types(df["gpu_type"], path, lines, "gpu_type")
    extra = _optional_columns(df, path, lines)
    df["job_id"] = text_fields(df["job_id"].astype(str), path, lines, "job_id", printable=True)
    dup = df["job_id"].duplicated()
    if dup.any():
        i = int(np.argmax(dup.to_numpy()))
        first = int(lines[int(np.argmax((df["job_id"] == df["job_id"].iloc[i]).to_numpy()))])
        raise LocatedError(path, f"duplicate job id {short(df['job_id'].iloc[i])} (first seen on line {first})",
                           line=int(lines[i]), field="job_id")
    for col in ("user", "workload"):
        df[col] = text_fields(df[col], path, lines, col, printable=False)
    df = df[list(JOB_COLUMNS) + extra].astype({k: v for k, v in JOB_COLUMNS.items()}
                                              | {k: v for k, v in OPTIONAL_COLUMNS.items() if k in extra})
    df = df.sort_values(["submit_s", "line"], kind="stable").reset_index(drop=True)
    return JobTrace(df, path, kind, dict(excluded or {}), deadlines_stated, dict(meta or {}))


def read_trace_bytes(path: str | Path) -> bytes:
    """The bytes of a trace file: LocatedError for a missing file or a directory (as always), and
    :class:`~predictor.common.inputs.InputError` (one line naming the file) for a FIFO, a device such as
    ``/dev/zero`` or a file over the size limit, refused by ``stat`` before it is opened."""
    p = Path(path)
    try:
        if not p.exists():
            raise LocatedError(path, "file not found")
        if p.is_dir():
            raise LocatedError(path, "is a directory, expected a file")
        return read_bytes(p, "trace file")
    except FileNotFoundError:
        raise LocatedError(path, "file not found") from None
    except OSError as exc:
        raise LocatedError(path, f"cannot read the file: {exc.strerror or exc}") from None


def list_names(items: list[str]) -> str:
    """Column names for a message, the first few only (a header may hold thousands)."""
    return names(items, shown=8)


def _first_repeat(items: list[str]) -> str:
    """The first item seen twice (in one pass: a header may hold 10,000 names)."""
    seen: set[str] = set()
    for item in items:
        if item in seen:
            return item
        seen.add(item)
    raise ValueError("no repeated item")


def csv_fields(text: str, path: str | Path, line: int) -> list[str]:
    """The fields of one CSV line; a field past the csv module's size limit (128 KiB) is a
    LocatedError naming the line, not a traceback."""
    try:
        return next(csv.reader([text]))
    except csv.Error as exc:
        raise LocatedError(path, f"cannot split the line into CSV fields ({exc})", line=line) from None


def read_csv_rows(path: str | Path, *, names: list[str] | None = None,
                  required: list[str] | tuple[str, ...] = (),
                  usecols: list[str] | None = None) -> tuple[pd.DataFrame, list[str]]:
    """Read a comma-separated file as strings, one row per non-blank line, plus its ``line`` number.

    Why here: every CSV loader needs the same guarantees before it converts values — the file
    exists and decodes, every line has the same number of fields (pandas would silently pad a
    short line with NaN), and each row keeps its 1-based line number for error messages.
    With ``names=None`` line 1 is the header and its fields name the columns (stripped of spaces
    and of a leading ``#``); the ``required`` ones must be there. Otherwise the file is headerless
    and ``names`` are the columns. ``usecols`` limits the columns parsed (all lines are still
    checked). Values are strings ("" when empty; leading spaces after a comma dropped). A file
    without data rows is an error. Returns (rows, all column names).
    """
    data = read_trace_bytes(path)
    if data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]
    # Line and field layout, vectorised over the raw bytes (no per-line Python work).
    buf = np.frombuffer(data, dtype=np.uint8)
    ends = np.flatnonzero(buf == 10)
    if len(data) and data[-1:] != b"\n":
        ends = np.append(ends, len(data))
    starts = np.concatenate(([0], ends[:-1] + 1)).astype("int64") if len(ends) else np.zeros(0, "int64")
    lengths = ends - starts
    lengths -= (lengths > 0) & (buf[np.maximum(ends - 1, 0)] == 13) if len(ends) else 0
    nonblank = lengths > 0
    has_header = names is None

    def line_text(i: int) -> str:
        try:
            return data[starts[i]:starts[i] + lengths[i]].decode("utf-8")
        except UnicodeDecodeError as exc:
            raise LocatedError(path, f"not UTF-8 text ({exc.reason})", line=i + 1) from None

    if has_header:
        if not len(ends) or not nonblank[0]:
            raise LocatedError(path, "no header line (the file is empty or starts with a blank line)", line=1)
        header = data[starts[0]:starts[0] + lengths[0]]
        check_width(header.count(b",") + 1, f"{path}:1 (the header)")  # before its names are listed
        names = [c.strip() for c in csv_fields(line_text(0), path, 1)]
        if names and names[0].startswith("#"):
            names[0] = names[0][1:].strip()
        missing = [c for c in required if c not in names]
        if missing:
            raise LocatedError(path, f"missing column(s) {missing} in the header; found [{list_names(names)}]",
                               line=1, field=missing[0])
        if len(set(names)) != len(names):
            dup = _first_repeat(names)
            raise LocatedError(path, f"duplicate column name {short(dup)} in the header", line=1, field=dup)
        nonblank[0] = False
    assert names is not None
    idx = np.flatnonzero(nonblank)
    lines = idx + 1
    commas = np.flatnonzero(buf == 44)
    counts = (np.searchsorted(commas, starts[idx] + lengths[idx]) - np.searchsorted(commas, starts[idx])) + 1
    wide = counts > limit("columns")  # even where quotes hide some commas, the csv module must not split it
    if wide.any():
        i = int(np.argmax(wide))
        check_width(int(counts[i]), f"{path}:{int(lines[i])}")
    if b'"' in data:  # quoted fields may hide commas: count fields with the csv module (slow, rare)
        counts = np.array([len(csv_fields(line_text(i), path, i + 1)) for i in idx], dtype="int64")
    bad = counts != len(names)
    if bad.any():
        i = int(np.argmax(bad))
        n = int(counts[i])
        if n < len(names):
            raise LocatedError(path, f"line has {n} field(s), expected {len(names)} ({list_names(names)}); "
                               "this and later fields are missing", line=int(lines[i]), field=names[n])
        raise LocatedError(path, f"line has {n} fields, expected {len(names)} ({list_names(names)}); "
                           "unexpected extra value(s) after this field", line=int(lines[i]), field=names[-1])
    if len(lines) == 0:
        raise LocatedError(path, "no data rows after the header" if has_header else "the file holds no rows",
                           line=1)
    wanted = list(names) if usecols is None else [c for c in names if c in usecols]
    try:
        rows = pd.read_csv(io.BytesIO(data), header=None, names=list(range(len(names))), dtype=object,
                           usecols=[names.index(c) for c in wanted], encoding="utf-8",
                           keep_default_na=False, na_filter=False, skipinitialspace=True,
                           skiprows=1 if has_header else 0, skip_blank_lines=True, engine="c")
    except UnicodeDecodeError as exc:
        raise LocatedError(path, f"not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    if len(rows) != len(lines):  # e.g. a quoted field spanning lines: numbering would be off
        raise LocatedError(path, f"parsed {len(rows)} rows from {len(lines)} non-blank lines "
                           "(quoted line breaks are not supported)")
    rows.columns = wanted
    rows["line"] = lines.astype("int64")
    return rows, names


def identifiers(values: pd.Series, path: str | Path, lines: pd.Series | np.ndarray, name: str,
                *, unique: bool = False) -> pd.Series:
    """Strip id strings; an empty one (or with ``unique``, a repeated one) raises LocatedError."""
    ids = values.fillna("").astype(str).str.strip()
    lines = np.asarray(lines)
    blank = (ids == "").to_numpy()
    if blank.any():
        i = int(np.argmax(blank))
        raise LocatedError(path, "identifier is empty", line=int(lines[i]), field=name)
    if unique:
        dup = ids.duplicated().to_numpy()
        if dup.any():
            i = int(np.argmax(dup))
            first = int(lines[int(np.argmax((ids == ids.iloc[i]).to_numpy()))])
            raise LocatedError(path, f"duplicate id {short(ids.iloc[i])} (first seen on line {first})",
                               line=int(lines[i]), field=name)
    return ids

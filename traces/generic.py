"""A generic job trace (``--trace csv:PATH``): any peer's jobs, as a CSV or a Parquet file.

Why: a peer's trace (a paper's, another simulator's) should come in as it is, without an adapter
of our own per source: one documented table of named columns, each checked with an error naming
file, row and field, is enough to carry GPU counts, per-type run times, "cannot run here",
deadlines and the model each job trains.

Columns (names exactly so, in any order): required ``job_id``, ``submit_s``, ``num_gpus``; optional
``duration_s``, ``gpu_type``, ``runtime_s:<GPU>``, ``allowed_gpus``, ``deadline_s``, ``model``,
``batch``, ``size``, ``dtype``, ``checkpoint_bytes``, ``user``, ``vc``, ``shape``, ``attempts``,
``outcome``.

Design decisions: any unknown column is refused (a misspelt ``runtime_s:V10O`` or ``deadline``
must not be dropped in silence); "cannot run" is written :data:`NEVER` in a CSV, where ``inf`` is
refused, so that it is never an accident of a number's spelling (Parquet: +inf or ``never``); a
missing ``duration_s`` is taken from the job's own ``runtime_s`` column, and one that contradicts
it is refused. Parquet is read through :func:`predictor.common.inputs.read_parquet` (decoded size
bounded first). The trace states its deadlines
(:attr:`traces.schema.JobTrace.deadlines_stated`): a job without one has none.

Columns and rules: docs/simrun.md, 'Peers' traces'.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from predictor.common.gpus import UnknownGpuTypeError, canonical_gpu_type
from predictor.common.inputs import InputError, LocatedError, read_parquet, short
from predictor.common.op_trace import DTYPES
from traces.schema import (
    ALLOWED_GPUS,
    ALLOWED_SEPARATOR,
    ATTEMPTS,
    CHECKPOINT_BYTES,
    OUTCOME,
    RUNTIME_PREFIX,
    SHAPE,
    TIME_LIMIT_S,
    JobTrace,
    canonical_types,
    finalize,
    gpu_counts,
    identifiers,
    list_names,
    numeric,
    read_csv_rows,
    whole_numbers,
)

KIND = "csv"
NEVER = "never"  # a runtime_s cell: the job cannot run on that type
REQUIRED = ("job_id", "submit_s", "num_gpus")
OPTIONAL = ("duration_s", "gpu_type", "deadline_s", ALLOWED_GPUS, "model", "batch", "size", "dtype",
            CHECKPOINT_BYTES, "user", "vc", SHAPE, ATTEMPTS, OUTCOME)
KNOWN = (*REQUIRED, *OPTIONAL, f"{RUNTIME_PREFIX}<GPU>")
PARQUET_SUFFIXES = (".parquet", ".pq")
# The dtypes a config trains in (predictor.emulator.zoo.config.CONFIG_DTYPES, without importing torch) and
# the common short spellings.
CONFIG_DTYPES = (*(d for d in DTYPES if d != "float64"), "amp")
DTYPE_ALIASES = {"fp32": "float32", "fp16": "float16", "half": "float16", "bf16": "bfloat16"}


def load(path: str | Path) -> JobTrace:
    """Load a generic job trace, a CSV or (by its suffix) a Parquet file; see the module docstring."""
    parquet = Path(path).suffix.lower() in PARQUET_SUFFIXES
    rows, names = _read_parquet(path) if parquet else read_csv_rows(path, required=REQUIRED)
    runtime_columns = _check_header(names, path)
    lines = rows["line"].to_numpy()
    num_gpus = numeric(rows["num_gpus"], path, lines, "num_gpus")
    runtimes = {gpu: _runtime_cells(rows[col], path, lines, col, parquet=parquet)
                for col, gpu in runtime_columns.items()}
    gpu_type = (canonical_types(_text(rows, "gpu_type"), path, lines, "gpu_type") if "gpu_type" in rows
                else pd.Series([""] * len(rows)))
    allowed = _allowed(rows, path, lines, gpu_type)
    duration, gpu_type = _durations(rows, path, lines, runtimes, gpu_type)
    model = _text(rows, "model").str.strip()
    df = pd.DataFrame({
        "job_id": identifiers(rows["job_id"], path, lines, "job_id", unique=True),
        "submit_s": numeric(rows["submit_s"], path, lines, "submit_s", min_value=0.0),
        "num_gpus": gpu_counts(num_gpus, path, lines, "num_gpus"),
        "duration_s": duration,
        "gpu_type": gpu_type.to_numpy(),
        "deadline_s": (numeric(rows["deadline_s"], path, lines, "deadline_s", allow_nan=True, allow_inf=True,
                               min_value=0.0) if "deadline_s" in rows else np.nan),
        "user": _text(rows, "user").to_numpy(),
        "workload": model.to_numpy(),  # the model name tags the job's class for binding
        "line": lines,
    })
    for gpu, seconds in runtimes.items():
        df[RUNTIME_PREFIX + gpu] = seconds
    if allowed is not None:
        df[ALLOWED_GPUS] = allowed
    for name in ("vc", CHECKPOINT_BYTES, SHAPE, ATTEMPTS, OUTCOME):  # checked by finalize (traces.schema)
        if name in rows:
            df[name] = rows[name].to_numpy() if name == CHECKPOINT_BYTES else _text(rows, name).to_numpy()
    if "model" in rows:
        df["model"] = model.to_numpy()
    for name, column in (("batch", "batch"), ("size", "input_size")):
        if name in rows:
            df[column] = whole_numbers(numeric(rows[name], path, lines, name, allow_nan=True), path, lines, name)
    if "dtype" in rows:
        df["dtype"] = _dtypes(rows, path, lines)
    return finalize(df, path, KIND, deadlines_stated=True, meta={"format": "parquet" if parquet else "csv"})


def _read_parquet(path: str | Path) -> tuple[pd.DataFrame, list[str]]:
    """The Parquet file's rows (a ``line`` column: the 1-based row) and its column names."""
    try:
        rows = read_parquet(path, "trace file")
    except InputError:  # LocatedError included
        raise
    except FileNotFoundError:
        raise LocatedError(path, "file not found") from None
    except IsADirectoryError:
        raise LocatedError(path, "is a directory, expected a file") from None
    except Exception as exc:  # pyarrow's errors for a file that is not Parquet (ArrowInvalid, OSError)
        raise LocatedError(path, f"not a readable Parquet file: {short(str(exc), 160)}") from None
    names = [str(c) for c in rows.columns]
    missing = [c for c in REQUIRED if c not in names]
    if missing:
        raise LocatedError(path, f"missing column(s) {missing}; found [{list_names(names)}]", field=missing[0])
    rows.columns = names
    rows = rows.reset_index(drop=True)
    rows["line"] = np.arange(1, len(rows) + 1, dtype="int64")
    return rows, names


def _check_header(names: list[str], path: str | Path) -> dict[str, str]:
    """Refuse an unknown column (naming it and the known ones); returns each ``runtime_s:``
    column's canonical GPU type, a type named twice refused."""
    runtime: dict[str, str] = {}
    for name in names:
        if name.startswith(RUNTIME_PREFIX):
            try:
                gpu = canonical_gpu_type(name[len(RUNTIME_PREFIX):])
            except UnknownGpuTypeError as exc:
                raise LocatedError(path, f"names no known GPU type: {exc.brief}", line=1, field=name) from None
            if gpu in runtime.values():
                first = next(c for c, g in runtime.items() if g == gpu)
                raise LocatedError(path, f"names the same GPU type ({gpu}) as column {short(first)}", line=1,
                                   field=name)
            runtime[name] = gpu
        elif name not in REQUIRED and name not in OPTIONAL:
            raise LocatedError(path, f"unknown column; the known ones are {', '.join(KNOWN)}", line=1, field=name)
    return runtime


def _text(rows: pd.DataFrame, name: str) -> pd.Series:
    """A text column ("" where absent or empty)."""
    if name not in rows:
        return pd.Series([""] * len(rows), dtype=object)
    return rows[name].fillna("").astype(str)


def _runtime_cells(values: pd.Series, path: str | Path, lines: np.ndarray, name: str, *, parquet: bool) -> np.ndarray:
    """Seconds per job on one type: +inf where the cell says :data:`NEVER` (or, in Parquet, +inf),
    NaN where empty (not known); anything else a number in [0, TIME_LIMIT_S]."""
    never = (values.astype("string").str.strip().str.lower() == NEVER).fillna(False).to_numpy(dtype=bool)
    seconds = numeric(values.mask(never), path, lines, name, allow_nan=True, allow_inf=True, min_value=0.0,
                      max_value=TIME_LIMIT_S).copy()
    infinite = np.isinf(seconds)
    if infinite.any() and not parquet:
        i = int(np.argmax(infinite))
        raise LocatedError(path, f"an infinite run time ({short(values.iloc[i])}): write {NEVER!r} for a type the job "
                           "cannot run on", line=int(lines[i]), field=name)
    seconds[never] = np.inf
    return seconds


def _allowed(rows: pd.DataFrame, path: str | Path, lines: np.ndarray, gpu_type: pd.Series) -> np.ndarray | None:
    """The ``allowed_gpus`` lists with canonical names ("" = any), None where the column is absent;
    an unknown name, or a ``gpu_type`` outside its job's list, is refused."""
    if ALLOWED_GPUS not in rows:
        return None
    texts = _text(rows, ALLOWED_GPUS).str.strip()
    canon: dict[str, str] = {"": ""}
    out = np.empty(len(texts), dtype=object)
    for i, text in enumerate(texts.tolist()):
        if text not in canon:
            parts = []
            for part in text.split(ALLOWED_SEPARATOR):
                try:
                    parts.append(canonical_gpu_type(part.strip()))
                except UnknownGpuTypeError as exc:
                    raise LocatedError(path, exc.brief, line=int(lines[i]), field=ALLOWED_GPUS) from None
            canon[text] = ALLOWED_SEPARATOR.join(dict.fromkeys(parts))
        out[i] = canon[text]
        observed = gpu_type.iloc[i]
        if observed and out[i] and observed not in out[i].split(ALLOWED_SEPARATOR):
            raise LocatedError(path, f"its gpu_type {observed} is not among the types it may run on ({out[i]})",
                               line=int(lines[i]), field=ALLOWED_GPUS)
    return out


def _durations(rows: pd.DataFrame, path: str | Path, lines: np.ndarray, runtimes: dict[str, np.ndarray],
               gpu_type: pd.Series) -> tuple[np.ndarray, pd.Series]:
    """Each job's duration_s and gpu_type, completed from its run times where duration_s is empty
    (see the module docstring); a job without any run time, or whose run times contradict its
    duration_s or gpu_type, is refused."""
    n = len(rows)
    given = "duration_s" in rows
    duration = (numeric(rows["duration_s"], path, lines, "duration_s", allow_nan=True, min_value=0.0,
                        max_value=TIME_LIMIT_S).copy() if given else np.full(n, np.nan))
    gpu_type = gpu_type.reset_index(drop=True).copy()
    own = np.full(n, np.nan)  # the run time on the job's own gpu_type, where the trace has it
    for gpu, seconds in runtimes.items():
        mine = (gpu_type == gpu).to_numpy()
        own[mine] = seconds[mine]
    barred = np.isposinf(own)
    if barred.any():
        i = int(np.argmax(barred))
        raise LocatedError(path, f"the job was observed on {gpu_type.iloc[i]}, which its {RUNTIME_PREFIX}"
                           f"{gpu_type.iloc[i]} says it cannot run on", line=int(lines[i]), field="gpu_type")
    both = ~np.isnan(duration) & ~np.isnan(own)
    differ = both & ~np.isclose(duration, own, rtol=1e-9, atol=1e-9)
    if differ.any():
        i = int(np.argmax(differ))
        raise LocatedError(path, f"{duration[i]:g} s differs from its {RUNTIME_PREFIX}{gpu_type.iloc[i]} of "
                           f"{own[i]:g} s (duration_s is the run time on gpu_type)", line=int(lines[i]),
                           field="duration_s")
    missing = np.isnan(duration)
    duration[missing] = own[missing]
    for gpu, seconds in runtimes.items():  # header order: the first type the job has a run time on
        take = np.isnan(duration) & (gpu_type == "").to_numpy() & np.isfinite(seconds)
        duration[take] = seconds[take]
        gpu_type[take] = gpu
    if np.isnan(duration).any():
        i = int(np.argmax(np.isnan(duration)))
        if not gpu_type.iloc[i] and runtimes and all(np.isposinf(s[i]) for s in runtimes.values()):
            raise LocatedError(path, f"no GPU type can run this job: every {RUNTIME_PREFIX}<GPU> value is "
                               f"{NEVER!r}, and without duration_s no other type can be timed", line=int(lines[i]),
                               field="duration_s")
        where = f"its gpu_type {gpu_type.iloc[i]}" if gpu_type.iloc[i] else "a type it can run on"
        raise LocatedError(path, f"no run time: give duration_s, or a {RUNTIME_PREFIX}<GPU> value for {where}",
                           line=int(lines[i]), field="duration_s")
    return duration, gpu_type


def _dtypes(rows: pd.DataFrame, path: str | Path, lines: np.ndarray) -> np.ndarray:
    """The dtype column in the zoo's names ("" = not given); any other value is refused."""
    text = _text(rows, "dtype").str.strip().str.lower()
    text = text.map(lambda v: DTYPE_ALIASES.get(v, v))
    bad = (~text.isin(("", *CONFIG_DTYPES))).to_numpy()
    if bad.any():
        i = int(np.argmax(bad))
        raise LocatedError(path, f"unknown dtype {short(rows['dtype'].iloc[i])}; expected one of "
                           f"{', '.join(CONFIG_DTYPES)} (or {', '.join(DTYPE_ALIASES)})", line=int(lines[i]),
                           field="dtype")
    return text.to_numpy()

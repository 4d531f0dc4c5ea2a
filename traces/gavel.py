"""Gavel's own job traces (``--trace gavel:PATH``), timed with Gavel's measured throughputs.

Why: to put our Gavel beside Gavel's simulator (stanford-futuredata/gavel, ``scheduler/``), both
must run the same jobs; a trace of Gavel's must come in as Gavel reads it, not through an
adapter written by hand for each comparison.

Format (Gavel at commit c4fa40097339e9608ab71fd64c8bdea96a5e4a4c, ``scheduler/utils.py``,
``parse_trace``; written by ``Job.__str__`` plus the arrival time, as
``scheduler/scripts/utils/generate_trace.py`` writes it): one job per line, 10 tab-separated
fields :data:`FIELDS` — job type (e.g. ``ResNet-18 (batch size 64)``), command, working
directory, num_steps_arg, needs_data_dir (0/1), total_steps (a whole number), scale_factor (GPUs,
a whole number >= 1), priority_weight, SLO, arrival time (s). Gavel's older ``traces/msr/``
traces have 7 fields, :data:`MSR_FIELDS` (job type, command, num_steps_arg, needs_data_dir,
total_steps, arrival time, scale_factor), which its current parser no longer reads; they are read
here directly, as Gavel's parser of that time read them (commit ebfc393^: a line of scale factor
0 is skipped, counted in the trace's ``excluded``; priority weight 1, no SLO), and
:func:`convert_msr` writes them in the current format for Gavel's own simulator. The first line
decides the format; every line must have its number of fields (a one-line error names the line
and the count otherwise). A trailing newline ends the file; any other empty line is an error, as
in Gavel. Arrival times need not be sorted (Gavel requires it; the table is sorted stably).

Each job: ``job_id`` its 0-based position among the file's jobs (Gavel's job id for a trace in
arrival order), ``submit_s`` its arrival time, ``num_gpus`` its scale factor, ``workload`` its
job type, ``steps`` its total steps, ``priority_weight`` Gavel's weight; per worker type of the
throughputs file (``k80``, ``p100``, ``v100`` → K80, P100, V100; the ``*_unconsolidated``
entries, which only placement-sensitive runs of Gavel read, are not used)
``throughput:<GPU>`` = Gavel's steps per second for (job type, scale factor) there and
``runtime_s:<GPU>`` = total steps / that throughput, +inf (cannot run) where the throughput is 0
(e.g. ResNet-50 at batch 128 on 2, 4 or 8 K80s). ``gpu_type`` is V100 (Gavel's reference worker
type, from which its trace generator derives steps) and ``duration_s`` the run time there (the
first worker type the job can run on where it cannot run on V100). A GPU type of the cluster that
Gavel did not measure gets, as in any trace, the V100 run time scaled by the simulator's relative
speeds. The command, working directory, num_steps_arg, needs_data_dir and SLO are checked and
not used (Gavel's simulator reads SLOs only for jobs it generates itself).

Throughputs: ``simulation_throughputs.json`` of the same Gavel commit, read at run time from
``load(..., throughputs=PATH)``, else ``$ETS_GAVEL_THROUGHPUTS``, else
``gavel_simulation_throughputs.json`` in the calibration directory (``$ETS_CALIBRATION``, else
``$ETS_SHARED/calibration``, else ``../shared/calibration`` beside the checkout). It is never
copied into the repository; a run's manifest names the file used.

Deadlines: Gavel's traces have none, and the trace says so (:attr:`JobTrace.deadlines_stated`):
a run makes none up unless ``--deadline-fraction`` is given.
"""

from __future__ import annotations

import math
import os
import re
from pathlib import Path

import numpy as np
import pandas as pd

from predictor.common.documents import read_document
from predictor.common.gpus import UnknownGpuTypeError, canonical_gpu_type
from predictor.common.inputs import LocatedError, short
from traces.schema import (
    RUNTIME_PREFIX,
    THROUGHPUT_PREFIX,
    JobTrace,
    finalize,
    gpu_counts,
    numeric,
    read_trace_bytes,
    text_fields,
)

FIELDS = ("job_type", "command", "working_directory", "num_steps_arg", "needs_data_dir", "total_steps",
          "scale_factor", "priority_weight", "SLO", "arrival_time")
MSR_FIELDS = ("job_type", "command", "num_steps_arg", "needs_data_dir", "total_steps", "arrival_time",
              "scale_factor")
THROUGHPUTS_VARIABLE = "ETS_GAVEL_THROUGHPUTS"
THROUGHPUTS_FILE = "gavel_simulation_throughputs.json"
REFERENCE_WORKER = "V100"  # Gavel's generate_job: steps = duration x throughput on v100
GAVEL_COMMIT = "c4fa40097339e9608ab71fd64c8bdea96a5e4a4c"
SKIPPED_SCALE_0 = "scale factor 0 (msr format: Gavel's parser of that time skipped these lines)"
_KEY = re.compile(r"\('(.*)', (\d+)\)")  # Gavel's parse_job_type_tuple: "('ResNet-18 (batch size 64)', 1)"
_MSR_CD = re.compile(r"^cd \S*?workloads/pytorch/(\S+) && (.*)$")  # msr commands begin "cd <dir> && "


def default_throughputs() -> Path:
    """``$ETS_GAVEL_THROUGHPUTS``, else :data:`THROUGHPUTS_FILE` in the calibration directory
    (``$ETS_CALIBRATION``, ``$ETS_SHARED/calibration``, ``<repo>/../shared/calibration``: the rule
    of :func:`predictor.emulator.devices.measurements.default_calibration_dir`, not imported: it loads torch)."""
    if os.environ.get(THROUGHPUTS_VARIABLE):
        return Path(os.environ[THROUGHPUTS_VARIABLE])
    if os.environ.get("ETS_CALIBRATION"):
        return Path(os.environ["ETS_CALIBRATION"]) / THROUGHPUTS_FILE
    if os.environ.get("ETS_SHARED"):
        return Path(os.environ["ETS_SHARED"]) / "calibration" / THROUGHPUTS_FILE
    return Path(__file__).resolve().parents[1].parent / "shared" / "calibration" / THROUGHPUTS_FILE


def read_throughputs(path: str | Path) -> dict[str, dict[tuple[str, int], float]]:
    """Gavel's throughputs file as {canonical GPU type: {(job type, scale factor): steps per
    second}} (the ``null`` entry: the job alone on the worker), in the file's worker order; a
    malformed entry is a LocatedError naming the file and the entry."""
    if not Path(path).exists():
        raise LocatedError(path, f"file not found (Gavel's throughputs: give another with ${THROUGHPUTS_VARIABLE} "
                           "or load(..., throughputs=PATH))")
    raw = read_document(path, "Gavel throughputs file", lambda m: LocatedError(path, m.removeprefix(f"{path}: ")),
                        kind="json")
    if not isinstance(raw, dict):
        raise LocatedError(path, "expected a JSON object of worker types")
    out: dict[str, dict[tuple[str, int], float]] = {}
    for worker, entries in raw.items():
        if "unconsolidated" in str(worker):
            continue
        try:
            gpu = canonical_gpu_type(str(worker))
        except UnknownGpuTypeError as exc:
            raise LocatedError(path, f"worker type names no known GPU type: {exc.brief}", field=str(worker)) from None
        if gpu in out:
            raise LocatedError(path, f"a second worker type for {gpu}", field=str(worker))
        if not isinstance(entries, dict):
            raise LocatedError(path, "expected an object of job types", field=str(worker))
        table: dict[tuple[str, int], float] = {}
        for key, entry in entries.items():
            match = _KEY.fullmatch(str(key))
            where = f"{worker}.{key}"
            if match is None:
                raise LocatedError(path, "not a Gavel job-type key such as \"('ResNet-18 (batch size 64)', 1)\"",
                                   field=where)
            value = entry.get("null") if isinstance(entry, dict) else None
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not (0 <= value < math.inf):
                raise LocatedError(path, f"the 'null' throughput must be a number >= 0, got {short(value)}",
                                   field=where)
            table[(match.group(1), int(match.group(2)))] = float(value)
        out[gpu] = table
    if not out:
        raise LocatedError(path, "no worker type (only *_unconsolidated ones, or none)")
    return out


def read_lines(path: str | Path) -> tuple[tuple[str, ...], pd.DataFrame]:
    """The file's fields per line, as strings, with a ``line`` column; the field names tell the
    format (:data:`FIELDS` or :data:`MSR_FIELDS`). A line of another field count is refused."""
    data = read_trace_bytes(path)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise LocatedError(path, f"not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()  # the newline that ends the last line
    if not lines:
        raise LocatedError(path, "the trace holds no jobs", line=1)
    rows = [line.removesuffix("\r").split("\t") for line in lines]
    first = len(rows[0])
    if first not in (len(FIELDS), len(MSR_FIELDS)):
        raise LocatedError(path, f"line has {first} tab-separated field(s); Gavel's trace format has {len(FIELDS)} "
                           f"({', '.join(FIELDS)}), its older msr format {len(MSR_FIELDS)}", line=1)
    names = FIELDS if first == len(FIELDS) else MSR_FIELDS
    for i, fields in enumerate(rows):
        if len(fields) != len(names):
            n = len(fields)
            raise LocatedError(path, f"line has {n} tab-separated field(s), expected {len(names)} like line 1 "
                               f"({', '.join(names)})", line=i + 1, field=names[min(n, len(names) - 1)])
    table = pd.DataFrame(rows, columns=list(names), dtype=object)
    table["line"] = np.arange(1, len(rows) + 1, dtype="int64")
    return names, table


def _whole(values: pd.Series, path: str | Path, lines: np.ndarray, name: str, minimum: int) -> np.ndarray:
    """A field Gavel reads with ``int()``: a whole number >= ``minimum``."""
    numbers = numeric(values.str.strip(), path, lines, name, min_value=float(minimum))
    fraction = numbers != np.floor(numbers)
    if fraction.any():
        i = int(np.argmax(fraction))
        raise LocatedError(path, f"not a whole number: {short(values.iloc[i])}", line=int(lines[i]), field=name)
    return numbers


def load(path: str | Path, *, throughputs: str | Path | None = None) -> JobTrace:
    """Load a Gavel trace (either format), timed with Gavel's throughputs (the module docstring
    says where they are read from)."""
    names, rows = read_lines(path)
    msr = names == MSR_FIELDS
    lines = rows["line"].to_numpy()
    excluded: dict[str, int] = {}
    scale = _whole(rows["scale_factor"], path, lines, "scale_factor", 0 if msr else 1)
    if msr and (scale == 0).any():
        excluded[SKIPPED_SCALE_0] = int((scale == 0).sum())
        rows, scale = rows[scale > 0].reset_index(drop=True), scale[scale > 0]
        lines = rows["line"].to_numpy()
        if not len(rows):
            raise LocatedError(path, f"no usable jobs: every line has {SKIPPED_SCALE_0}")
    job_type = text_fields(rows["job_type"], path, lines, "job_type", printable=False)
    if (job_type.str.strip() == "").any():
        i = int(np.argmax((job_type.str.strip() == "").to_numpy()))
        raise LocatedError(path, "the job type is empty", line=int(lines[i]), field="job_type")
    _whole(rows["needs_data_dir"], path, lines, "needs_data_dir", 0)
    steps = _whole(rows["total_steps"], path, lines, "total_steps", 0)
    arrival = numeric(rows["arrival_time"].str.strip(), path, lines, "arrival_time", min_value=0.0)
    weight = (np.ones(len(rows)) if msr else
              numeric(rows["priority_weight"].str.strip(), path, lines, "priority_weight", min_value=0.0))
    if not msr:
        numeric(rows["SLO"].str.strip(), path, lines, "SLO")  # checked; Gavel reads it for generated jobs only
    source = Path(throughputs) if throughputs is not None else default_throughputs()
    table = read_throughputs(source)
    gpus = list(table)
    thr = np.empty((len(rows), len(gpus)))
    for k, gpu in enumerate(gpus):
        for i, key in enumerate(zip(job_type.tolist(), scale.astype(int).tolist())):
            value = table[gpu].get(key)
            if value is None:
                scales = sorted(s for t, s in table[gpu] if t == key[0])
                known = (f"it has this job type at scale factor(s) {', '.join(map(str, scales))} only" if scales
                         else "it has no such job type")
                raise LocatedError(path, f"no throughput for {key!r} on {gpu} in {source} ({known}; Gavel's "
                                   "simulator cannot run this line either)", line=int(lines[i]), field="job_type")
            thr[i, k] = value
    with np.errstate(divide="ignore", invalid="ignore"):
        runtime = np.where(thr > 0, steps[:, None] / thr, np.inf)
    can = np.isfinite(runtime)
    nowhere = ~can.any(axis=1)
    if nowhere.any():
        i = int(np.argmax(nowhere))
        raise LocatedError(path, f"Gavel's throughput for {(job_type.iloc[i], int(scale[i]))!r} is 0 on every worker "
                           f"type in {source}: no GPU type can run it", line=int(lines[i]), field="job_type")
    order = ([gpus.index(REFERENCE_WORKER)] if REFERENCE_WORKER in gpus else []) + list(range(len(gpus)))
    first = np.array([next(k for k in order if can[i, k]) for i in range(len(rows))])
    df = pd.DataFrame({
        "job_id": [str(i) for i in range(len(rows))],
        "submit_s": arrival,
        "num_gpus": gpu_counts(scale, path, lines, "scale_factor"),
        "duration_s": runtime[np.arange(len(rows)), first],
        "gpu_type": np.asarray(gpus, dtype=object)[first],
        "deadline_s": np.nan,
        "user": "",
        "workload": job_type.to_numpy(),
        "line": lines,
        "steps": steps,
        "priority_weight": weight,
    })
    for k, gpu in enumerate(gpus):
        df[RUNTIME_PREFIX + gpu] = runtime[:, k]
        df[THROUGHPUT_PREFIX + gpu] = thr[:, k]
    meta = {"format": "gavel-msr (7 fields)" if msr else "gavel (10 fields)", "throughputs": str(source),
            "gavel_commit": GAVEL_COMMIT}
    return finalize(df, path, "gavel", excluded, deadlines_stated=True, meta=meta)


def msr_to_current(fields: list[str]) -> str:
    """One msr line's fields (:data:`MSR_FIELDS`) as the line Gavel's current parser reads: the
    working directory from the command's ``cd .../workloads/pytorch/<dir> && `` prefix (the command
    keeps the rest), priority weight 1 and SLO -1 as ``Job.__str__`` writes them, the arrival time
    a whole number when it is one (``generate_trace.py`` writes ``%d``), else as given."""
    job_type, command, num_steps_arg, needs_data_dir, total_steps, arrival, scale = fields
    match = _MSR_CD.match(command)
    directory, command = (match.group(1), match.group(2)) if match else ("", command)
    arrival_s = float(arrival)
    when = f"{int(arrival_s)}" if arrival_s == int(arrival_s) else arrival.strip()
    return "\t".join([job_type, command, directory, num_steps_arg, f"{int(needs_data_dir)}",
                      f"{int(total_steps)}", f"{int(scale)}", "1", f"{-1.0:f}", when])


def convert_msr(source: str | Path, target: str | Path) -> int:
    """Write Gavel's older 7-field ``msr/`` trace ``source`` in its current 10-field format to
    ``target`` (lines of scale factor 0 left out, as Gavel's parser of that time skipped them), so
    that Gavel's own simulator can run it; every line is checked as :func:`load` checks it.
    Returns the number of jobs written."""
    names, rows = read_lines(source)
    if names != MSR_FIELDS:
        raise LocatedError(source, f"not an msr trace: its lines have {len(names)} fields, not {len(MSR_FIELDS)}",
                           line=1)
    lines = rows["line"].to_numpy()
    scale = _whole(rows["scale_factor"], source, lines, "scale_factor", 0)
    for name in ("needs_data_dir", "total_steps"):
        _whole(rows[name], source, lines, name, 0)
    numeric(rows["arrival_time"].str.strip(), source, lines, "arrival_time", min_value=0.0)
    kept = [msr_to_current(list(r)) for r, s in zip(rows[list(MSR_FIELDS)].itertuples(index=False), scale) if s > 0]
    Path(target).write_text("".join(line + "\n" for line in kept), encoding="utf-8")
    return len(kept)

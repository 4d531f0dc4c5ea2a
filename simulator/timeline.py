"""The schedule of one run as Chrome-trace JSON (Perfetto, chrome://tracing).

Why: a per-GPU timeline shows at a glance what a policy did — fragmentation, idle GPUs while
jobs queue, late jobs — which the summary numbers hide.

Layout: one process per node (named "<node> (<GPU type>)"; per GPU type when the cluster is
unknown), one thread per global GPU id ("GPU <id>"), one complete ("X") event per job per GPU it
held (ts/dur in µs of simulated time), and a "queue" process with a counter of waiting jobs.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd

from predictor.common.inputs import InputError, printable, short
from predictor.common.outputs import claim_file, inside, write_text
from simulator.cluster import Cluster
from simulator.sweep.points import read_json, read_table

US = 1e6
ENDED = ("completed", "failed", "cancelled")  # the statuses of jobs that held GPUs
FAILED_STRETCHES = ("failed", "node failure")  # a segment's ``ended`` values drawn as failures
OUTAGE_COLUMNS = ("node", "failed_at", "repaired_at")


REQUIRED = ("job_id", "submit", "start", "end", "gpu_type", "num_gpus", "gpu_ids")


def _num(x) -> float | None:
    """JSON-safe number (NaN/None -> None)."""
    if x is None or x is pd.NA:
        return None
    x = float(x)
    return None if math.isnan(x) else x


def _us(seconds: float) -> float:
    return round(float(seconds) * US, 3)


def _gpu_ids(text) -> list[int]:
    """The GPU ids of a records row ("3,4"); InputError for anything else."""
    if text is None or text is pd.NA or (isinstance(text, float) and math.isnan(text)):
        return []
    try:
        return [int(g) for g in str(text).split(",") if g.strip()]
    except ValueError:
        raise InputError(f"field 'gpu_ids': {short(text)} is not a comma list of GPU ids") from None


def _bars(placed: pd.DataFrame, segments: pd.DataFrame | None) -> pd.DataFrame:
    """What is drawn: each job from start to end on its GPUs, or with ``segments`` (a preemptive
    run) each stretch it held GPUs; ``job_start``/``job_end`` keep the job's own."""
    jobs = placed.assign(job_start=placed["start"], job_end=placed["end"])
    if segments is None:
        return jobs
    stretches = segments[[*SEGMENT_COLUMNS, *(["ended"] if "ended" in segments else [])]]
    info = jobs.drop(columns=["gpu_type", "gpu_ids", "start", "end"]).reset_index(drop=False)
    # a segment's job is its row in the records (both in the trace's order)
    return stretches.merge(info, left_on="job", right_on="index", how="inner")


def chrome_trace(jobs: pd.DataFrame, cluster: Cluster | None = None, *, queue_counter: bool = True,
                 segments: pd.DataFrame | None = None, outages: pd.DataFrame | None = None) -> dict:
    """The Chrome-trace document of a per-job records table (simulator output).

    With ``cluster`` (GPU ids are global, contiguous per node in node order) a process is a node;
    without, a process is a GPU type. Rejected or never-started jobs produce no event.
    """
    missing = [c for c in REQUIRED if c not in jobs]
    if missing:
        raise InputError(f"jobs table lacks column(s) {missing}")
    placed = jobs[jobs["start"].notna() & jobs["end"].notna()]
    if "status" in placed:  # a job that ended failed or cancelled held its GPUs too
        placed = placed[placed["status"].isin(ENDED)]

    bars = _bars(placed, segments)
    # GPU id -> (pid, process name)
    owner: dict[int, tuple[int, str]] = {}
    processes: dict[int, str] = {}
    if cluster is not None:
        gid = 0
        for pid, node in enumerate(cluster.nodes, start=1):
            processes[pid] = f"{node.name} ({node.gpu_type})"
            for _ in range(node.num_gpus):
                owner[gid] = (pid, processes[pid])
                gid += 1
    used = sorted({g for ids in bars["gpu_ids"] for g in _gpu_ids(ids)})
    if cluster is None or any(g not in owner for g in used):
        owner, processes = {}, {}
        types = sorted({str(t) for t in bars["gpu_type"]})
        pid_of = {t: i for i, t in enumerate(types, start=1)}
        for t in types:
            processes[pid_of[t]] = t
        for _, row in bars.iterrows():
            for g in _gpu_ids(row["gpu_ids"]):
                owner.setdefault(g, (pid_of[str(row["gpu_type"])], str(row["gpu_type"])))
    tracks = sorted(owner)

    events: list[dict] = []
    for pid, name in sorted(processes.items()):
        events.append({"name": "process_name", "ph": "M", "pid": pid, "tid": 0, "args": {"name": name}})
        events.append({"name": "process_sort_index", "ph": "M", "pid": pid, "tid": 0, "args": {"sort_index": pid}})
    for g in tracks:
        events.append({"name": "thread_name", "ph": "M", "pid": owner[g][0], "tid": g, "args": {"name": f"GPU {g}"}})

    for row in bars.sort_values(["start", "end"], kind="stable").itertuples(index=False):
        deadline = _num(getattr(row, "deadline", None))
        args = {
            "job_id": str(row.job_id),
            "num_gpus": int(row.num_gpus),
            "gpu_type": str(row.gpu_type),
            "submit_s": _num(row.submit),
            "queueing_delay_s": _num(row.job_start - row.submit),
            "runtime_s": _num(row.job_end - row.job_start),
            "deadline_s": deadline,
            "tardiness_s": _num(getattr(row, "tardiness", None)) if deadline is not None else None,
            "predicted_runtime_s": _num(getattr(row, "predicted_runtime", None)),
        }
        name, extra = f"job {row.job_id}", {}
        if segments is not None:  # one of the job's stretches on GPUs
            args.update(stretch_restart_s=_num(row.restart_s), stretch_work_s=_num(row.work_s))
            ended = getattr(row, "ended", None)
            if isinstance(ended, str):  # a run with failures: why the stretch ended; failed ones in red
                args["stretch_ended"] = ended
                if ended in FAILED_STRETCHES:
                    name, extra = f"job {row.job_id} ({ended})", {"cname": "terrible"}
        ts, dur = _us(row.start), _us(row.end) - _us(row.start)
        for g in _gpu_ids(row.gpu_ids):
            events.append({"name": name, "cat": "job", "ph": "X", "ts": ts, "dur": dur,
                           "pid": owner[g][0], "tid": g, "args": args, **extra})
    if outages is not None and cluster is not None and len(outages):  # failed nodes, on their GPUs, in grey
        first = np.concatenate([[0], np.cumsum([node.num_gpus for node in cluster.nodes])])
        index = {node.name: i for i, node in enumerate(cluster.nodes)}
        for row in outages.itertuples(index=False):
            i = index.get(str(row.node))
            if i is None:
                continue
            ts, dur = _us(row.failed_at), _us(row.repaired_at) - _us(row.failed_at)
            for g in range(int(first[i]), int(first[i + 1])):
                if g in owner:
                    events.append({"name": "node down", "cat": "outage", "ph": "X", "ts": ts, "dur": dur,
                                   "pid": owner[g][0], "tid": g, "cname": "grey",
                                   "args": {"node": str(row.node), "repaired_at_s": _num(row.repaired_at)}})

    if queue_counter and len(jobs):
        qpid = max(processes, default=0) + 1
        events.append({"name": "process_name", "ph": "M", "pid": qpid, "tid": 0, "args": {"name": "queue"}})
        events.append({"name": "process_sort_index", "ph": "M", "pid": qpid, "tid": 0, "args": {"sort_index": -1}})
        resumed = bars.loc[bars["end"] < bars["job_end"], "end"]  # a suspension: the job waits again
        changes = pd.concat([
            pd.DataFrame({"t": placed["submit"].to_numpy(float), "d": 1}),
            pd.DataFrame({"t": bars["start"].to_numpy(float), "d": -1}),
            pd.DataFrame({"t": resumed.to_numpy(float), "d": 1}),
        ]).groupby("t", sort=True)["d"].sum()
        waiting = changes.cumsum()
        for t, n in waiting.items():
            events.append({"name": "waiting jobs", "ph": "C", "ts": _us(t), "pid": qpid, "tid": 0,
                           "args": {"waiting": int(n)}})
    return {"traceEvents": events, "displayTimeUnit": "ms"}


def _cluster_of(run: Path, warn: Callable[[str], None] | None = None) -> Cluster | None:
    """The run's cluster from its manifest (read within the limits of a run's JSON, its cluster
    built by :func:`simulator.cluster.resolve`, which bounds it), or None: a process per GPU type
    then. A manifest that names no cluster, or one that cannot be built now (a file that moved,
    or past a limit), falls back with a line through ``warn``; an unreadable manifest is refused."""
    manifest = run / "manifest.json"
    if not manifest.exists() and not manifest.is_symlink():
        return None
    config = read_json(manifest, InputError).get("config")
    spec = config.get("cluster") if isinstance(config, dict) else None
    if not isinstance(spec, str) or not spec:
        _say(warn, f"{manifest}: field 'config.cluster': {short(spec)} is not a cluster; one process per GPU type")
        return None
    from simulator.cluster import resolve

    try:
        return resolve(spec)
    except (ValueError, OSError) as exc:  # InputError included
        _say(warn, f"{manifest}: its cluster {short(spec)} cannot be built ({printable(exc)}); one process "
                   "per GPU type")
        return None


def _say(warn: Callable[[str], None] | None, line: str) -> None:
    if warn is not None:
        warn(line)


# Largest |time| in seconds a timeline can show: its events are in µs, and JSON has no infinity.
MAX_TIME_S = 1e300


def checked_records(jobs: pd.DataFrame, source: str | Path) -> pd.DataFrame:
    """The records table with its needed columns present and its times finite numbers (a blank
    start/end stays NaN: a job that never ran); InputError naming the file, row and field."""
    missing = [c for c in REQUIRED if c not in jobs]
    if missing:
        raise InputError(f"{source}: jobs table lacks column(s) {missing}")
    jobs = jobs.copy()
    for col in ("submit", "start", "end", "num_gpus"):
        values = pd.to_numeric(jobs[col], errors="coerce").astype(float)
        bad = (values.isna() & jobs[col].notna()) | ~(values.abs() <= MAX_TIME_S) & values.notna()
        if col in ("submit", "num_gpus"):
            bad |= values.isna()
        if bad.any():
            i = int(np.argmax(bad.to_numpy()))
            shown = f"{values.iloc[i]:g}" if pd.notna(values.iloc[i]) else short(jobs[col].iloc[i])
            raise InputError(f"{source}: row {i + 1} (job {short(jobs['job_id'].iloc[i])}) field {col!r}: "
                             f"{shown} is not a finite number of at most {MAX_TIME_S:g}")
        jobs[col] = values
    _check_gpu_ids(jobs, source, lambda i: f"row {i + 1} (job {short(jobs['job_id'].iloc[i])})")
    return jobs


def _check_gpu_ids(table: pd.DataFrame, source: str | Path, row: Callable[[int], str]) -> None:
    """Every ``gpu_ids`` of ``table`` a comma list of ids; else an error naming ``row(i)``."""
    for i, ids in enumerate(table["gpu_ids"]):
        try:
            _gpu_ids(ids)
        except InputError as exc:
            raise InputError(f"{source}: {row(i)} {exc}") from None


def _jobs_file(run: Path) -> Path:
    path = run / "jobs.parquet"
    if not path.exists() and not path.is_symlink():
        raise InputError(f"{run}: no jobs.parquet here (expected a `simrun --out` directory or "
                         "a sweep's runs/<key>)")
    return path


SEGMENT_COLUMNS = ("job", "gpu_type", "gpu_ids", "start", "end", "restart_s", "work_s")


def checked_segments(segments: pd.DataFrame, jobs: int, source: str | Path) -> pd.DataFrame:
    """A preemptive run's segments.parquet with its columns present, each ``job`` a row of the
    run's records (``jobs`` rows), and its times finite; InputError naming file, row, field."""
    missing = [c for c in SEGMENT_COLUMNS if c not in segments]
    if missing:
        raise InputError(f"{source}: segments table lacks column(s) {missing}")
    segments = segments.copy()
    for col, low, high in (("job", 0, jobs - 1), ("start", -MAX_TIME_S, MAX_TIME_S), ("end", -MAX_TIME_S, MAX_TIME_S),
                           ("restart_s", 0, MAX_TIME_S), ("work_s", 0, MAX_TIME_S)):
        values = pd.to_numeric(segments[col], errors="coerce").astype(float)
        bad = ~((values >= low) & (values <= high))
        if col == "job":
            bad |= values != values.round()
        if bad.any():
            i = int(np.argmax(bad.to_numpy()))
            what = "a row of the run's jobs.parquet" if col == "job" else "a number of seconds"
            shown = f"{values.iloc[i]:g}" if pd.notna(values.iloc[i]) else short(segments[col].iloc[i])
            raise InputError(f"{source}: row {i + 1} field {col!r}: {shown} is not "
                             f"{what} in [{low:g}, {high:g}]")
        segments[col] = values.astype("int64") if col == "job" else values
    _check_gpu_ids(segments, source, lambda i: f"row {i + 1}")
    return segments


def checked_outages(outages: pd.DataFrame, source: str | Path) -> pd.DataFrame:
    """A run's outages.parquet (node failures) with its columns present and its times numbers."""
    missing = [c for c in OUTAGE_COLUMNS if c not in outages]
    if missing:
        raise InputError(f"{source}: outages table lacks column(s) {missing}")
    outages = outages.copy()
    for col in ("failed_at", "repaired_at"):
        values = pd.to_numeric(outages[col], errors="coerce").astype(float)
        bad = ~((values >= -MAX_TIME_S) & (values <= MAX_TIME_S))
        if bad.any():
            i = int(np.argmax(bad.to_numpy()))
            raise InputError(f"{source}: row {i + 1} field {col!r}: {short(outages[col].iloc[i])} is not "
                             f"a number of seconds in [{-MAX_TIME_S:g}, {MAX_TIME_S:g}]")
        outages[col] = values
    return outages


def run_timeline(run_dir: str | Path, warn: Callable[[str], None] | None = None) -> dict:
    """The Chrome trace of a run directory (``simrun --out`` or a sweep's runs/<key>); a
    preemptive run's (with segments.parquet) draws each stretch a job held GPUs. ``warn`` gets a
    line when the manifest's cluster cannot be used."""
    run = Path(run_dir)
    path = _jobs_file(run)
    jobs = checked_records(read_table(path, InputError), path)
    segments_path = run / "segments.parquet"
    segments = None
    if segments_path.exists() or segments_path.is_symlink():
        segments = checked_segments(read_table(segments_path, InputError), len(jobs), segments_path)
    outages_path = run / "outages.parquet"
    outages = None
    if outages_path.exists() or outages_path.is_symlink():
        outages = checked_outages(read_table(outages_path, InputError), outages_path)
    return chrome_trace(jobs, _cluster_of(run, warn), segments=segments, outages=outages)


def write_timeline(run_dir: str | Path, out: str | Path | None = None, overwrite: bool = False,
                   warn: Callable[[str], None] | None = None) -> Path:
    """Write the trace (default RUN_DIR/timeline.json) and return its path.

    ``out`` is checked before the trace is built (an existing file is replaced only with
    ``overwrite``), and the file is written atomically: an
    unwritable place or a full disk raises a one-line :class:`~predictor.common.outputs.OutputError`
    and leaves no empty or truncated file (an old one stays)."""
    _jobs_file(Path(run_dir))  # a wrong RUN_DIR is reported first, and creates nothing
    out = Path(out) if out is not None else inside(Path(run_dir), "timeline.json")  # not a planted link
    claim_file(out, overwrite)
    doc = run_timeline(run_dir, warn)
    return write_text(out, json.dumps(doc, separators=(",", ":")))


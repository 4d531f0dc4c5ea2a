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
from pathlib import Path

import pandas as pd

from predictor.outputs import check_writable, write_text
from simulator.cluster import Cluster

US = 1e6


class TimelineInputError(ValueError):
    """A directory without jobs.parquet, or a jobs table missing a needed column."""


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
    if text is None or (isinstance(text, float) and math.isnan(text)):
        return []
    return [int(g) for g in str(text).split(",") if g.strip()]


def chrome_trace(jobs: pd.DataFrame, cluster: Cluster | None = None, *, queue_counter: bool = True) -> dict:
    """The Chrome-trace document of a per-job records table (simulator output).

    With ``cluster`` (GPU ids are global, contiguous per node in node order) a process is a node;
    without, a process is a GPU type. Rejected or never-started jobs produce no event.
    """
    missing = [c for c in REQUIRED if c not in jobs]
    if missing:
        raise TimelineInputError(f"jobs table lacks column(s) {missing}")
    placed = jobs[jobs["start"].notna() & jobs["end"].notna()]
    if "status" in placed:
        placed = placed[placed["status"] == "completed"]

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
    used = sorted({g for ids in placed["gpu_ids"] for g in _gpu_ids(ids)})
    if cluster is None or any(g not in owner for g in used):
        owner, processes = {}, {}
        types = sorted({str(t) for t in placed["gpu_type"]})
        pid_of = {t: i for i, t in enumerate(types, start=1)}
        for t in types:
            processes[pid_of[t]] = t
        for _, row in placed.iterrows():
            for g in _gpu_ids(row["gpu_ids"]):
                owner.setdefault(g, (pid_of[str(row["gpu_type"])], str(row["gpu_type"])))
    tracks = sorted(owner)

    events: list[dict] = []
    for pid, name in sorted(processes.items()):
        events.append({"name": "process_name", "ph": "M", "pid": pid, "tid": 0, "args": {"name": name}})
        events.append({"name": "process_sort_index", "ph": "M", "pid": pid, "tid": 0, "args": {"sort_index": pid}})
    for g in tracks:
        events.append({"name": "thread_name", "ph": "M", "pid": owner[g][0], "tid": g, "args": {"name": f"GPU {g}"}})

    for row in placed.sort_values(["start", "end"], kind="stable").itertuples(index=False):
        deadline = _num(getattr(row, "deadline", None))
        args = {
            "job_id": str(row.job_id),
            "num_gpus": int(row.num_gpus),
            "gpu_type": str(row.gpu_type),
            "submit_s": _num(row.submit),
            "queueing_delay_s": _num(row.start - row.submit),
            "runtime_s": _num(row.end - row.start),
            "deadline_s": deadline,
            "tardiness_s": _num(getattr(row, "tardiness", None)) if deadline is not None else None,
            "predicted_runtime_s": _num(getattr(row, "predicted_runtime", None)),
        }
        ts, dur = _us(row.start), _us(row.end) - _us(row.start)
        for g in _gpu_ids(row.gpu_ids):
            events.append({"name": f"job {row.job_id}", "cat": "job", "ph": "X", "ts": ts, "dur": dur,
                           "pid": owner[g][0], "tid": g, "args": args})

    if queue_counter and len(jobs):
        qpid = max(processes, default=0) + 1
        events.append({"name": "process_name", "ph": "M", "pid": qpid, "tid": 0, "args": {"name": "queue"}})
        events.append({"name": "process_sort_index", "ph": "M", "pid": qpid, "tid": 0, "args": {"sort_index": -1}})
        changes = pd.concat([
            pd.DataFrame({"t": placed["submit"].to_numpy(float), "d": 1}),
            pd.DataFrame({"t": placed["start"].to_numpy(float), "d": -1}),
        ]).groupby("t", sort=True)["d"].sum()
        waiting = changes.cumsum()
        for t, n in waiting.items():
            events.append({"name": "waiting jobs", "ph": "C", "ts": _us(t), "pid": qpid, "tid": 0,
                           "args": {"waiting": int(n)}})
    return {"traceEvents": events, "displayTimeUnit": "ms"}


def _cluster_of(run: Path) -> Cluster | None:
    manifest = run / "manifest.json"
    if not manifest.exists():
        return None
    spec = json.loads(manifest.read_text()).get("config", {}).get("cluster")
    if not spec:
        return None
    from simulator.cluster import resolve

    try:
        return resolve(spec)
    except Exception:  # a cluster file that moved: fall back to one process per GPU type
        return None


def _jobs_file(run: Path) -> Path:
    path = run / "jobs.parquet"
    if not path.is_file():
        raise TimelineInputError(f"{run}: no jobs.parquet here (expected a `simrun --out` directory or "
                                 "a sweep's runs/<key>)")
    return path


def run_timeline(run_dir: str | Path) -> dict:
    """The Chrome trace of a run directory (``simrun --out`` or a sweep's runs/<key>)."""
    run = Path(run_dir)
    return chrome_trace(pd.read_parquet(_jobs_file(run)), _cluster_of(run))


def write_timeline(run_dir: str | Path, out: str | Path | None = None) -> Path:
    """Write the trace (default RUN_DIR/timeline.json) and return its path.

    The folder of ``out`` is checked before the trace is built, and the file is written
    atomically: an unwritable place or a full disk raises a one-line
    :class:`~predictor.outputs.OutputError` and leaves no empty or truncated file (an old one stays)."""
    out = Path(out) if out is not None else Path(run_dir) / "timeline.json"
    _jobs_file(Path(run_dir))  # a wrong RUN_DIR is reported first, and creates nothing
    check_writable(out.parent)
    doc = run_timeline(run_dir)
    return write_text(out, json.dumps(doc, separators=(",", ":")))

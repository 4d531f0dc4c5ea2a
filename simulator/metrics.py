"""Summary metrics of a run: the stable ``summary.json`` that scripts rely on.

Why one function: every command (simrun, sweeps, the paper reproduction) must compute JCT,
tardiness and utilisation the same way. All times are in seconds.

Keys (stable; new keys may be added, none renamed):
  jobs               admitted jobs (without failures all of them complete; the JCT, queueing and
                     tardiness keys are over the completed ones)
  rejected           jobs no placement could ever hold (reported, never started)
  jct_mean/p50/p95/p99   job completion time = end - submit
  queue_mean, queue_p50, queue_p95   queueing delay = start - submit
  makespan           last end - first submit
  tardiness_total    sum over all jobs of max(0, end - deadline) (0 for jobs without deadline)
  tardiness_mean     tardiness_total / jobs (over ALL admitted jobs)
  late_jobs          jobs that ended past their deadline
  late_tardiness_mean  mean tardiness of the late jobs only (0 when none)
  jobs_with_deadline
  utilization        busy GPU-seconds / (cluster GPUs x makespan) (preemptive runs: every
                     segment's GPU-seconds held, restarts included, on the type it ran on)
  utilization_by_type  the same per GPU type
  preemptions        suspensions of running jobs in all (0 for a non-preemptive policy)
  preemptions_per_job_mean, preemptions_per_job_p95
  restart_overhead_seconds   seconds jobs spent resuming (restoring checkpoints), summed over jobs
  gpu_seconds_lost   GPU-seconds held while resuming: restart seconds x the job's GPUs
  policy_seconds, policy_calls   wall time spent inside the policy, and how often it was called
  wall_seconds, events, events_per_second   the whole simulation
  rounds             preemptive runs only: the round boundaries the policy was called at

With failures (``--failures``; simulator.failures) also:
  jobs_failed, jobs_cancelled   jobs whose last attempt failed (not retried) / that were cancelled
  failed_attempts    attempts that failed, all jobs (node failures included)
  attempts_mean      attempts per admitted job
  gpu_seconds_total  every GPU-second jobs held (all attempts, restarts and checkpoint writes)
  failed_gpu_seconds the GPU-seconds of the jobs that ended failed (AcmeTrace's failed GPU-time)
  gpu_seconds_lost   extended: restarts + work done again after failures + checkpoint writes
  goodput            the share of gpu_seconds_total that went into completed jobs' work, once
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from simulator.cluster import Cluster


def summarize(records: pd.DataFrame, cluster: Cluster, *, policy_seconds: float, policy_calls: int,
              wall_seconds: float, events: int, busy_by_type: dict[str, float] | None = None,
              rounds: int | None = None) -> dict:
    """The summary of a run's records; ``busy_by_type``: GPU-seconds held per type where jobs
    moved between types (a preemptive run), else each job's run time on its type counts."""
    done = records[records["status"] == "completed"]
    failures = "failed_attempts" in records  # a run with failures: jobs may also end failed or cancelled
    ended = records[records["status"] != "rejected"] if failures else done
    n = len(done)
    jct = done["jct"].to_numpy()
    queue = done["queueing_delay"].to_numpy()
    tard = done["tardiness"].to_numpy()
    late = done["end"].to_numpy() > done["deadline"].to_numpy()  # NaN deadline -> False

    def pct(x: np.ndarray, q: float) -> float:
        return float(np.percentile(x, q)) if len(x) else 0.0

    makespan = float(ended["end"].max() - ended["submit"].min()) if len(ended) else 0.0
    busy = done["num_gpus"].to_numpy() * done["true_runtime"].to_numpy()
    total_busy = float(busy.sum()) if busy_by_type is None else float(sum(busy_by_type.values()))
    by_type = {}
    for gpu in cluster.gpu_types:
        held = busy[(done["gpu_type"] == gpu).to_numpy()].sum() if busy_by_type is None else busy_by_type.get(gpu, 0.0)
        cap = cluster.gpus_of_type(gpu) * makespan
        by_type[gpu] = float(held / cap) if cap > 0 else 0.0
    preempted = done["preemptions"].to_numpy() if "preemptions" in done else np.zeros(n)
    restart = done["restart_overhead_s"].to_numpy() if "restart_overhead_s" in done else np.zeros(n)
    cap = cluster.total_gpus * makespan
    return {
        "jobs": len(ended),
        "rejected": int((records["status"] == "rejected").sum()),
        "jct_mean": float(jct.mean()) if n else 0.0,
        "jct_p50": pct(jct, 50),
        "jct_p95": pct(jct, 95),
        "jct_p99": pct(jct, 99),
        "queue_mean": float(queue.mean()) if n else 0.0,
        "queue_p50": pct(queue, 50),
        "queue_p95": pct(queue, 95),
        "makespan": makespan,
        "tardiness_total": float(tard.sum()),
        "tardiness_mean": float(tard.mean()) if n else 0.0,
        "late_jobs": int(late.sum()),
        "late_tardiness_mean": float(tard[late].mean()) if late.any() else 0.0,
        "jobs_with_deadline": int(done["deadline"].notna().sum()),
        "utilization": total_busy / cap if cap > 0 else 0.0,
        "utilization_by_type": by_type,
        "preemptions": int(preempted.sum()),
        "preemptions_per_job_mean": float(preempted.mean()) if n else 0.0,
        "preemptions_per_job_p95": pct(preempted, 95),
        "restart_overhead_seconds": float(restart.sum()),
        "gpu_seconds_lost": float((restart * done["num_gpus"].to_numpy()).sum()),
        "policy_seconds": float(policy_seconds),
        "policy_calls": int(policy_calls),
        "wall_seconds": float(wall_seconds),
        "events": int(events),
        "events_per_second": float(events / wall_seconds) if wall_seconds > 0 else 0.0,
        **({} if rounds is None else {"rounds": int(rounds)}),
        **(communication(done, total_busy) if "communication_s" in done else {}),
        **(failure_metrics(ended) if failures else {}),
    }


def failure_metrics(ended: pd.DataFrame) -> dict:
    """The keys of a run with failures (see the module docstring), over the admitted jobs."""
    status = ended["status"].to_numpy()
    gpus = ended["num_gpus"].to_numpy(dtype="float64")
    held = ended["gpu_seconds"].to_numpy(dtype="float64")
    lost = (ended["restart_overhead_s"] + ended["lost_work_s"] + ended["checkpoint_s"]).to_numpy() * gpus
    total = float(held.sum())
    completed = status == "completed"
    return {
        "jobs_failed": int((status == "failed").sum()),
        "jobs_cancelled": int((status == "cancelled").sum()),
        "failed_attempts": int(ended["failed_attempts"].sum()),
        "attempts_mean": float(ended["attempts"].mean()) if len(ended) else 0.0,
        "gpu_seconds_total": total,
        "failed_gpu_seconds": float(held[status == "failed"].sum()),
        "gpu_seconds_lost": float(lost.sum()),
        "goodput": float((held - lost)[completed].sum() / total) if total > 0 else 0.0,
    }


def communication(done: pd.DataFrame, total_busy: float) -> dict:
    """GPU-seconds multi-GPU jobs spent on exposed gradient communication (a bound run with its
    communication model), and their share of all GPU-seconds held."""
    spent = float((done["communication_s"].fillna(0.0) * done["num_gpus"]).sum())
    return {"communication_gpu_seconds": spent, "communication_share": spent / total_busy if total_busy > 0 else 0.0}

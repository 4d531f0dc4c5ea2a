"""Gavel (stanford-futuredata/gavel, scheduler/): the reference for our ``gavel`` policy.

Gavel (``stanford-futuredata/gavel`` at ``GAVEL_COMMIT``): ``gavel_reference(trace, cluster)``

1. clones the pinned commit (from a local mirror given by ``repo=`` or ``$ETS_PEER_GAVEL_REPO``,
   else from GitHub) into ``<scratch>/gavel-<commit>``, checking out ``scheduler/`` only (a file
   whose blob a mirror lacks, e.g. the large ``traces/msr/seed=*/philly.trace``, is left out and
   listed in the result);
2. builds, once, a venv ``<scratch>/gavel-venv-<hash>`` with ``GAVEL_REQUIREMENTS`` from PyPI
   (wheels only) and Gavel's gRPC stubs (``make rpc_stubs``'s commands: ``scheduler.py`` imports
   them even in simulation);
3. converts the trace if it is in Gavel's older 7-column ``traces/msr/`` format (see
   ``convert_msr_trace``), runs ``scheduler/scripts/drivers/simulate_scheduler_with_trace.py``
   (policy ``max_min_fairness_perf``, ``--time_per_iteration 360``, ``--solver ECOS``,
   ``--seed 0``: the driver needs one, ``seed + 1`` fails on its default ``None``; everything else,
   ``minimum_time_between_allocation_resets=1920`` included, at Gavel's defaults), and
4. parses its log (``parse_gavel_log``): average JCT, makespan, per-job arrival/completion/JCT,
   rounds, the per-round schedule (job → worker type and worker ids) and preemptions.

Gavel does not count preemptions. Here a preemption is a job that ran in round r, did not finish
in it, and in round r+1 either did not run (``paused``) or ran on another worker type
(``type_changes``); one that kept its type but got other worker ids is a ``same_type_migration``
(not a preemption). Check against Gavel's own lease count: at each round Gavel counts the
previous round's still-active jobs (``opportunities``) and those given exactly the same worker
ids (``extensions``); ``opportunities - extensions == preemptions + same_type_migrations``
(``summary.lease_check``).

    python -m experiments.peers gavel --trace traces/physical_cluster/medium_test.trace --cluster v100:4,p100:4,k80:4
    python -m experiments.peers gavel --trace traces/msr/seed=0/51b7ef.trace --cluster v100:8,p100:8,k80:8 --out x.json
    python -m experiments.peers gavel-refs    # re-measure experiments/data/peers/gavel/*.json
    python -m experiments.peers table         # ours (gavel:restart=0) beside the stored runs (gavel_table)

``--trace`` is a file here, or a path inside Gavel's ``scheduler/`` (or the repo root). The
``gavel`` command exits 75 (and prints the reason) when the peer is unavailable. Environment:
``ETS_PEER_GAVEL_REPO`` (a local clone or bare mirror), ``ETS_PEER_SCRATCH`` (default
``$TMPDIR/ets-peers``).
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

from experiments.peers.common import (
    DATA,
    PeerFailed,
    PeerUnavailable,
    _git,
    _locked,
    _sha256,
    clone_at,
    scratch_dir,
)

GAVEL_URL = "https://github.com/stanford-futuredata/gavel"
GAVEL_COMMIT = "c4fa40097339e9608ab71fd64c8bdea96a5e4a4c"
GAVEL_DRIVER = "scripts/drivers/simulate_scheduler_with_trace.py"
GAVEL_POLICY = "max_min_fairness_perf"
GAVEL_WORKER_TYPES = ("v100", "p100", "k80")  # the driver's -c order: #v100:#p100:#k80
# What scheduler/ imports to simulate (scheduler.py, utils.py, policies/, throughput_estimator.py,
# runtime/rpc), pinned. Gavel's requirements.txt pins none of these (only torch 1.4, which the
# simulator does not import); it was tested on Python 3.8. On 3.11: cvxpy 1.3 is the oldest line
# with CPython 3.11 wheels (1.2.x has none), its wheels need numpy < 2; ECOS stays the solver
# (the driver's default, passed explicitly). matrix-completion imports scikit-learn.
GAVEL_REQUIREMENTS = (
    "numpy==1.24.4",
    "scipy==1.10.1",
    "cvxpy==1.3.4",
    "ecos==2.0.10",
    "osqp==0.6.7.post3",
    "scs==3.2.4.post1",
    "scikit-learn==1.2.2",
    "joblib==1.3.2",
    "threadpoolctl==3.2.0",
    "matrix-completion==0.0.2",
    "psutil==5.9.8",
    "grpcio==1.51.3",
    "grpcio-tools==1.51.3",
    "protobuf==4.21.12",
    "setuptools==69.5.1",
)
PROTOS = ("iterator_to_scheduler", "scheduler_to_worker", "worker_to_scheduler", "common", "enums")


# --------------------------------------------------------------------------------------------
# Checkout, environment
# --------------------------------------------------------------------------------------------

def gavel_checkout(repo: str | os.PathLike | None = None, scratch: str | os.PathLike | None = None,
                   commit: str = GAVEL_COMMIT) -> Path:
    """Gavel's work tree at ``commit`` (``scheduler/`` only), cloned once into the scratch dir."""
    source = str(repo or os.environ.get("ETS_PEER_GAVEL_REPO") or GAVEL_URL)
    root = scratch_dir(scratch)
    dest = root / f"gavel-{commit[:12]}"
    with _locked(root / "gavel-checkout.lock"):
        if (dest / ".ets-ready").exists():
            return dest
        clone_at(source, dest, commit, "Gavel", "ETS_PEER_GAVEL_REPO")
        # A mirror may lack some blobs (the snapshot we were given lacks files of 4 MiB and more):
        # leave those paths out of a sparse checkout rather than fail the whole checkout.
        listing = _git("ls-tree", "-r", commit, "scheduler", cwd=dest).stdout.splitlines()
        blobs = [(line.split()[2], line.split("\t", 1)[1]) for line in listing if " blob " in line]
        check = subprocess.run(["git", "cat-file", "--batch-check"], cwd=dest, capture_output=True, text=True,
                               input="".join(f"{sha}\n" for sha, _ in blobs))
        missing = [path for (sha, path), out in zip(blobs, check.stdout.splitlines()) if out.endswith("missing")]
        if not blobs:
            raise PeerUnavailable(f"{source} at {commit} has no scheduler/ directory")
        _git("config", "core.sparseCheckout", "true", cwd=dest)
        patterns = ["/scheduler/", *(f"!/{path}" for path in missing)]
        (dest / ".git" / "info").mkdir(parents=True, exist_ok=True)
        (dest / ".git" / "info" / "sparse-checkout").write_text("\n".join(patterns) + "\n")
        done = _git("checkout", "--quiet", "--detach", commit, cwd=dest)
        head = _git("rev-parse", "HEAD", cwd=dest).stdout.strip()
        if head != commit or not (dest / "scheduler" / GAVEL_DRIVER).exists():
            raise PeerUnavailable(f"checkout of {commit} failed: {done.stderr.strip()[-400:]}")
        (dest / ".ets-missing").write_text("".join(f"{p}\n" for p in missing))
        (dest / ".ets-source").write_text(source + "\n")
        (dest / ".ets-ready").write_text(commit + "\n")
    return dest


def _requirements_key(python: str) -> str:
    version = subprocess.run([python, "-c", "import sys; print(sys.version)"], capture_output=True, text=True).stdout
    return hashlib.sha256((version + "\n".join(GAVEL_REQUIREMENTS)).encode()).hexdigest()[:12]


def gavel_venv(scratch: str | os.PathLike | None = None, python: str | None = None) -> Path:
    """A venv with ``GAVEL_REQUIREMENTS`` (built once per Python and pin set); its python."""
    python = python or sys.executable
    root = scratch_dir(scratch)
    venv = root / f"gavel-venv-{_requirements_key(python)}"
    with _locked(root / "gavel-venv.lock"):
        if not (venv / ".ets-ready").exists():
            shutil.rmtree(venv, ignore_errors=True)
            made = subprocess.run([python, "-m", "venv", str(venv)], capture_output=True, text=True)
            if made.returncode != 0:
                raise PeerUnavailable(f"cannot make a venv with {python}: {made.stderr.strip()[-300:]}")
            try:
                pip = subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet",
                                      "--only-binary=:all:", *GAVEL_REQUIREMENTS],
                                     capture_output=True, text=True, timeout=1800)
            except subprocess.TimeoutExpired as err:
                raise PeerUnavailable("pip install of Gavel's packages timed out") from err
            if pip.returncode != 0:
                raise PeerUnavailable("cannot install Gavel's packages: " + (pip.stderr or pip.stdout).strip()[-600:])
            freeze = subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "freeze"], capture_output=True,
                                    text=True).stdout
            (venv / ".ets-freeze").write_text(freeze)
            (venv / ".ets-ready").write_text("\n".join(GAVEL_REQUIREMENTS) + "\n")
    return venv / "bin" / "python"


def _rpc_stubs(checkout: Path, python: Path) -> None:
    """``make rpc_stubs`` (scheduler/Makefile), once per checkout."""
    scheduler = checkout / "scheduler"
    if all((scheduler / "runtime" / "rpc_stubs" / f"{p}_pb2_grpc.py").exists() for p in PROTOS):
        return
    for proto in PROTOS:
        done = subprocess.run([str(python), "-m", "grpc_tools.protoc", "-Iruntime/protobuf",
                               "--python_out=runtime/rpc_stubs", "--grpc_python_out=runtime/rpc_stubs",
                               f"runtime/protobuf/{proto}.proto"], cwd=scheduler, capture_output=True, text=True)
        if done.returncode != 0:
            raise PeerUnavailable(f"cannot generate Gavel's gRPC stubs: {done.stderr.strip()[-400:]}")


# --------------------------------------------------------------------------------------------
# Inputs: cluster, throughputs, traces
# --------------------------------------------------------------------------------------------

def parse_cluster(cluster: str | dict) -> dict[str, int]:
    """``v100:4,p100:4,k80:4`` (any order, missing types are 0), Gavel's ``4:4:4``, or a dict."""
    if isinstance(cluster, dict):
        spec = {str(k).lower(): int(v) for k, v in cluster.items()}
    elif re.fullmatch(r"\d+:\d+:\d+", cluster.strip()):
        spec = dict(zip(GAVEL_WORKER_TYPES, map(int, cluster.strip().split(":"))))
    else:
        spec = {}
        for part in filter(None, (p.strip() for p in cluster.split(","))):
            name, _, count = part.partition(":")
            if not count.strip().isdigit():
                raise ValueError(f"cluster {cluster!r}: {part!r} is not TYPE:COUNT")
            spec[name.strip().lower()] = int(count)
    unknown = sorted(set(spec) - set(GAVEL_WORKER_TYPES))
    if unknown:
        raise ValueError(f"cluster {cluster!r}: Gavel's driver knows only {', '.join(GAVEL_WORKER_TYPES)}, "
                         f"not {', '.join(unknown)}")
    spec = {t: spec.get(t, 0) for t in GAVEL_WORKER_TYPES}
    if any(v < 0 for v in spec.values()) or not any(spec.values()):
        raise ValueError(f"cluster {cluster!r}: counts must be >= 0 and not all 0")
    return spec


def read_throughputs(path: Path) -> dict[str, dict[tuple[str, int], float]]:
    """Gavel's throughputs file as {worker_type: {(model, scale_factor): isolated steps/s}}."""
    raw = json.loads(Path(path).read_text())
    out: dict[str, dict[tuple[str, int], float]] = {}
    for worker_type, table in raw.items():
        out[worker_type] = {}
        for key, value in table.items():
            match = re.match(r"\('(.*)', (\d+)\)", key)
            if match:
                out[worker_type][(match.group(1), int(match.group(2)))] = float(value["null"])
    return out


def read_gavel_trace(path: Path) -> list[dict]:
    """Gavel's current 10-column trace (utils.parse_trace): one dict per job, in file order."""
    jobs = []
    for row, line in enumerate(Path(path).read_text().splitlines(), start=1):
        if not line.strip():
            continue
        fields = line.split("\t")
        if len(fields) != 10:
            raise ValueError(f"{path}: row {row}: {len(fields)} tab-separated fields, Gavel's trace has 10 "
                             "(job_type, command, working_directory, num_steps_arg, needs_data_dir, total_steps, "
                             "scale_factor, priority_weight, SLO, arrival_time)")
        jobs.append({"model": fields[0], "total_steps": int(fields[5]), "num_gpus": int(fields[6]),
                     "priority_weight": float(fields[7]), "arrival_s": float(fields[9])})
    return jobs


def _job_templates(checkout: Path, python: Path) -> dict[str, dict]:
    """Gavel's JobTable (scheduler/job_table.py) read by Gavel's own Python."""
    code = ("import json, sys; sys.path.insert(0, '.'); from job_table import JobTable; "
            "print(json.dumps({t.model: [t.command, t.working_directory, t.num_steps_arg, bool(t.needs_data_dir), "
            "bool(t.distributed)] for t in JobTable}))")
    done = subprocess.run([str(python), "-c", code], cwd=checkout / "scheduler", capture_output=True, text=True)
    if done.returncode != 0:
        raise PeerFailed(f"cannot read Gavel's JobTable: {done.stderr.strip()[-400:]}")
    return {model: dict(zip(("command", "working_directory", "num_steps_arg", "needs_data_dir", "distributed"), v))
            for model, v in json.loads(done.stdout).items()}


def convert_msr_trace(src: Path, dst: Path, templates: dict[str, dict],
                      throughputs: dict[str, dict[tuple[str, int], float]] | None = None) -> dict:
    """Gavel's older 7-column ``traces/msr/`` trace, written as ``scripts/utils/generate_trace.py``
    writes the current 10-column one (``'%s\\t%d\\n' % (str(job), arrival_time)``, ``Job.__str__``).

    Old columns (``utils.parse_trace`` at Gavel 6fb30f9, the commit that last wrote these traces):
    ``job_type, command, num_steps_arg, needs_data_dir, total_steps, arrival_time, scale_factor``.
    Mapping, per row:

    * ``job_type``, ``num_steps_arg``, ``needs_data_dir``, ``total_steps``: kept;
    * ``command``, ``working_directory``: the JobTable template of ``job_type`` (the old command
      has a ``cd %s/gpusched/... &&`` prefix; neither is read by the simulator);
    * ``scale_factor``: kept, except for a model whose template is not ``distributed``
      (Recommendation, A3C, CycleGAN), which gets 1, as ``utils.generate_job`` gives it; a row
      with scale factor 0 is dropped, as the old parser dropped it; a (model, scale factor) that
      Gavel's throughputs file lacks (16, 32, ... GPUs) is an error naming the row;
    * ``priority_weight`` 1, ``SLO`` -1 (none), ``arrival_time`` as ``%d`` (the old values are
      whole seconds written as ``%f``; nothing is lost).
    """
    out, notes = [], {"rows": 0, "dropped_scale_factor_0": 0, "set_to_1_gpu_not_distributed": 0}
    for row, line in enumerate(Path(src).read_text().splitlines(), start=1):
        if not line.strip():
            continue
        fields = line.split("\t")
        if len(fields) != 7:
            raise ValueError(f"{src}: row {row}: {len(fields)} fields, the old msr format has 7 (job_type, command, "
                             "num_steps_arg, needs_data_dir, total_steps, arrival_time, scale_factor)")
        job_type, _command, num_steps_arg, needs_data_dir, total_steps, arrival, scale_factor = fields
        notes["rows"] += 1
        scale_factor = int(scale_factor)
        if scale_factor == 0:
            notes["dropped_scale_factor_0"] += 1
            continue
        if job_type not in templates:
            raise ValueError(f"{src}: row {row}: job_type {job_type!r} is not in Gavel's JobTable")
        template = templates[job_type]
        if scale_factor > 1 and not template["distributed"]:
            scale_factor = 1
            notes["set_to_1_gpu_not_distributed"] += 1
        if throughputs is not None:
            for worker_type in GAVEL_WORKER_TYPES:
                if (job_type, scale_factor) not in throughputs.get(worker_type, {}):
                    raise ValueError(f"{src}: row {row}: scale_factor {scale_factor}: Gavel's throughputs have no "
                                     f"({job_type!r}, {scale_factor}) on {worker_type}")
        # Gavel's own format strings (Job.__str__, then generate_trace.py's '%s\t%d\n'), kept verbatim.
        out.append("%s\t%s\t%s\t%s\t%d\t%d\t%d\t%d\t%f\t%d\n" % (  # noqa: UP031
            job_type, template["command"], template["working_directory"], num_steps_arg, int(needs_data_dir),
            int(total_steps), scale_factor, 1, -1, float(arrival)))
    Path(dst).write_text("".join(out))
    notes["jobs"] = len(out)
    return notes


def _resolve_trace(trace: str | os.PathLike, checkout: Path) -> tuple[Path, str]:
    text = str(trace).removeprefix("gavel:")
    for candidate, label in ((Path(text), None), (checkout / "scheduler" / text, f"gavel:scheduler/{text}"),
                             (checkout / text, f"gavel:{text}")):
        if candidate.is_file():
            return candidate.resolve(), label or str(candidate)
    raise ValueError(f"trace {trace}: not a file here nor in Gavel's scheduler/ or repository root")


# --------------------------------------------------------------------------------------------
# Reading Gavel's log
# --------------------------------------------------------------------------------------------

_STAMP = r"scheduler:\w+ \[(?P<t>[^\]]+)\] "
_SCHEDULED = re.compile(_STAMP + r"\[Micro-task scheduled\]\tJob ID: (?P<job>\d+)\tWorker type: (?P<wt>\w+)\t"
                        r"Worker ID\(s\): (?P<wids>[\d,]+)\tPriority: (?P<prio>\S+)\tDeficit: (?P<deficit>\S+)\t"
                        r"Allocation: (?P<alloc>.*)$")
_SUCCEEDED = re.compile(_STAMP + r"\[Micro-task succeeded\]\tJob ID: (?P<job>\d+)\t")
_FAILED = re.compile(_STAMP + r"\[(?:Micro-task|Job) failed\]")
_JOB_DONE = re.compile(_STAMP + r"\[Job succeeded\]\tJob ID: (?P<job>\d+)\tStart timestamp: (?P<start>\S+)\t"
                       r"End timestamp: (?P<end>\S+)\tDuration: (?P<dur>\S+)")
_RESET = re.compile(_STAMP + r"Resetting time run so far")
_UNUSED = re.compile(_STAMP + r"(?P<n>\d+) GPUs of type (?P<wt>\w+) left unused")
_JCT = re.compile(r"^Job (?P<job>\d+)(?: \(high priority\))?: (?P<jct>[-\d.]+)$")
_AVG = re.compile(r"^Average job completion time: (?P<avg>[-\d.]+) seconds")
_TOTAL = re.compile(r"^Total duration: (?P<t>[-\d.]+) seconds")
_UTIL = re.compile(r"^Cluster utilization: (?P<u>[-\d.]+)")
_LEASES = re.compile(r"^Extended leases [\d.]+% of the time \((?P<ext>\d+)/(?P<opp>\d+)\)")


def parse_gavel_log(text: str, jobs: list[dict]) -> dict:
    """Gavel's simulator output (stdout and stderr together) read into numbers.

    ``jobs``: the trace's jobs in file order (Gavel numbers them 0, 1, ... in that order).
    A round is one pass of ``Scheduler.simulate``'s loop that placed at least one job: its start is
    the timestamp of its ``[Micro-task scheduled]`` lines, its end that of its
    ``[Micro-task succeeded]`` lines (the latest micro-task's finish; the next round starts there).
    """
    rounds: list[dict] = []
    current: dict | None = None
    finished_at: dict[int, float] = {}
    end_stamp: dict[int, float] = {}
    resets, failures, not_optimal = [], 0, 0
    unused: dict[str, int] = {}
    jct: dict[int, float] = {}
    avg = total = util = None
    leases = None
    for line in text.splitlines():
        if m := _SCHEDULED.match(line):
            t = float(m["t"])
            if current is None or current["start"] != t:
                current = {"start": t, "end": None, "tasks": []}
                rounds.append(current)
            current["tasks"].append((int(m["job"]), m["wt"], [int(w) for w in m["wids"].split(",")]))
        elif m := _SUCCEEDED.match(line):
            if current is not None and current["end"] is None:
                current["end"] = float(m["t"])
        elif m := _JOB_DONE.match(line):
            finished_at[int(m["job"])] = float(m["t"])
            end_stamp[int(m["job"])] = float(m["end"])
        elif _RESET.match(line):
            resets.append(float(_RESET.match(line)["t"]))
        elif m := _UNUSED.match(line):
            unused[m["wt"]] = unused.get(m["wt"], 0) + int(m["n"])
        elif _FAILED.match(line):
            failures += 1
        elif "Allocation returned by policy not optimal" in line:
            not_optimal += 1
        elif m := _JCT.match(line):
            jct[int(m["job"])] = float(m["jct"])
        elif m := _AVG.match(line):
            avg = float(m["avg"])
        elif m := _TOTAL.match(line):
            total = float(m["t"])
        elif m := _UTIL.match(line):
            util = float(m["u"])
        elif m := _LEASES.match(line):
            leases = (int(m["ext"]), int(m["opp"]))
    if avg is None or total is None or not rounds:
        raise PeerFailed("Gavel's output has no average JCT, total duration or scheduled round")
    if any(r["end"] is None for r in rounds):
        raise PeerFailed("a round of Gavel's output has no micro-task completion")

    # Preemptions, from the per-round schedule.
    per_job = {i: {"rounds_run": 0, "preemptions": 0, "type_changes": 0, "paused": 0, "same_type_migrations": 0,
                   "first_run_s": None, "types": {}} for i in range(len(jobs))}
    paused = type_changes = migrations = 0
    for index, rnd in enumerate(rounds):
        for job, worker_type, _ in rnd["tasks"]:
            record = per_job[job]
            record["rounds_run"] += 1
            record["types"][worker_type] = record["types"].get(worker_type, 0) + 1
            if record["first_run_s"] is None:
                record["first_run_s"] = rnd["start"]
        if index + 1 == len(rounds):
            break
        after = {job: (wt, wids) for job, wt, wids in rounds[index + 1]["tasks"]}
        for job, worker_type, wids in rnd["tasks"]:
            if finished_at.get(job) == rnd["end"]:
                continue  # finished in this round
            if job not in after:
                paused += 1
                per_job[job]["paused"] += 1
                per_job[job]["preemptions"] += 1
            elif after[job][0] != worker_type:
                type_changes += 1
                per_job[job]["type_changes"] += 1
                per_job[job]["preemptions"] += 1
            elif sorted(after[job][1]) != sorted(wids):
                migrations += 1
                per_job[job]["same_type_migrations"] += 1

    job_rows = {}
    for i, job in enumerate(jobs):
        row = {"arrival_s": job["arrival_s"], "num_gpus": job["num_gpus"], "model": job["model"]}
        if i in jct:
            row |= {"jct_s": jct[i], "completion_s": round(job["arrival_s"] + jct[i], 3),
                    "round_end_s": finished_at.get(i)}
        else:
            row |= {"jct_s": None, "completion_s": None, "round_end_s": None}
        stats = per_job[i]
        row |= {k: stats[k] for k in ("first_run_s", "rounds_run", "preemptions", "type_changes", "paused",
                                      "same_type_migrations", "types")}
        job_rows[str(i)] = row
    mean_from_jobs = sum(jct.values()) / len(jct) if jct else None
    first_arrival = min(j["arrival_s"] for j in jobs)
    gpu_seconds = {}
    for rnd in rounds:
        for _, worker_type, wids in rnd["tasks"]:
            gpu_seconds[worker_type] = gpu_seconds.get(worker_type, 0.0) + len(wids) * (rnd["end"] - rnd["start"])
    summary = {
        "jobs": len(jobs),
        "completed_jobs": len(jct),
        "avg_jct_s": avg,
        "avg_jct_from_jobs_s": round(mean_from_jobs, 3) if mean_from_jobs is not None else None,
        "makespan_s": total,
        "makespan_from_first_arrival_s": round(total - first_arrival, 3),
        "first_arrival_s": first_arrival,
        "first_round_s": rounds[0]["start"],
        "rounds": len(rounds),
        "preemptions": paused + type_changes,
        "preemptions_paused": paused,
        "preemptions_type_changes": type_changes,
        "same_type_migrations": migrations,
        "lease_extensions": leases[0] if leases else None,
        "lease_extension_opportunities": leases[1] if leases else None,
        "lease_check": (leases is not None and leases[1] - leases[0] == paused + type_changes + migrations),
        "allocation_resets": len(resets),
        "micro_tasks": sum(len(r["tasks"]) for r in rounds),
        "held_gpu_seconds": {k: round(v, 3) for k, v in sorted(gpu_seconds.items())},
        "gpu_rounds_left_unused": unused,
        "cluster_utilization": util,
        "failures": failures,
        "lp_not_optimal": not_optimal,
        "max_end_stamp_gap_s": round(max((abs(end_stamp[j] - (jobs[j]["arrival_s"] + jct[j])) for j in jct),
                                         default=0.0), 3),
    }
    return {
        "summary": summary,
        "jobs": job_rows,
        "allocation_resets_s": resets,
        "rounds_format": "[start_s, end_s, [[job_id, worker_type, [worker_ids]], ...]]",
        "rounds": [[r["start"], r["end"], [list(t) for t in r["tasks"]]] for r in rounds],
    }


# --------------------------------------------------------------------------------------------
# The run
# --------------------------------------------------------------------------------------------

def gavel_reference(trace: str | os.PathLike, cluster: str | dict, *, repo: str | os.PathLike | None = None,
                    scratch: str | os.PathLike | None = None, policy: str = GAVEL_POLICY,
                    time_per_iteration: int = 360, seed: int = 0, solver: str = "ECOS",
                    num_gpus_per_server: str = "1:1:1", throughputs_file: str | None = None,
                    python: str | None = None, timeout: float = 3600, log: str | os.PathLike | None = None) -> dict:
    """Gavel's own simulator on ``trace`` and ``cluster``: its numbers, per job and per round.

    Raises ``PeerUnavailable`` when it cannot be run here, ``PeerFailed`` when it ran and failed,
    ``ValueError`` for a bad cluster or trace (a row Gavel could not simulate).
    """
    spec = parse_cluster(cluster)
    if shutil.which("git") is None:
        raise PeerUnavailable("git is not installed")
    checkout = gavel_checkout(repo, scratch)
    venv_python = gavel_venv(scratch, python)
    _rpc_stubs(checkout, venv_python)
    scheduler = checkout / "scheduler"
    source, label = _resolve_trace(trace, checkout)
    throughputs_path = (Path(throughputs_file).resolve() if throughputs_file
                        else scheduler / "simulation_throughputs.json")
    throughputs = read_throughputs(throughputs_path)

    first = next((line for line in source.read_text().splitlines() if line.strip()), "")
    runs = scratch_dir(scratch) / "gavel-runs"
    runs.mkdir(exist_ok=True)
    trace_info = {"name": source.stem, "source": label, "sha256": _sha256(source)}
    if len(first.split("\t")) == 7:
        converted = runs / f"{source.stem}-{trace_info['sha256'][:12]}.trace"
        notes = convert_msr_trace(source, converted, _job_templates(checkout, venv_python), throughputs)
        trace_info |= {"format": "gavel-msr-7col, converted to the 10-column format (convert_msr_trace)",
                       "conversion": notes, "converted_sha256": _sha256(converted)}
        run_trace = converted
    else:
        trace_info["format"] = "gavel-10col"
        run_trace = source
    jobs = read_gavel_trace(run_trace)
    if not jobs:
        raise ValueError(f"trace {trace}: no jobs")
    for i, job in enumerate(jobs):
        for worker_type in GAVEL_WORKER_TYPES:
            if (job["model"], job["num_gpus"]) not in throughputs.get(worker_type, {}):
                raise ValueError(f"{run_trace}: row {i + 1}: Gavel's throughputs have no "
                                 f"({job['model']!r}, {job['num_gpus']}) on {worker_type}")
        if not any(throughputs[t][(job["model"], job["num_gpus"])] > 0 and spec[t] >= job["num_gpus"]
                   for t in GAVEL_WORKER_TYPES):
            raise ValueError(f"{run_trace}: row {i + 1}: no worker type of {spec} can run a "
                             f"{job['num_gpus']}-GPU {job['model']!r} (Gavel would loop forever)")
    trace_info["jobs"] = len(jobs)

    shown_trace = (str(run_trace.relative_to(scheduler)) if run_trace.is_relative_to(scheduler)
                   else f"<scratch>/gavel-runs/{run_trace.name}" if run_trace.parent == runs else str(run_trace))
    command = [str(venv_python), "-u", GAVEL_DRIVER, "-t", str(run_trace), "-p", policy,
               "-c", ":".join(str(spec[t]) for t in GAVEL_WORKER_TYPES), "--num_gpus_per_server", num_gpus_per_server,
               "--seed", str(seed), "--solver", solver, "--time_per_iteration", str(time_per_iteration)]
    if throughputs_file:
        command += ["--throughputs_file", str(throughputs_path)]
    log_path = Path(log) if log else runs / f"{source.stem}-{'-'.join(f'{t}x{n}' for t, n in spec.items())}.log"
    began = time.perf_counter()
    try:
        with open(log_path, "w") as out:
            done = subprocess.run(command, cwd=scheduler, stdout=out, stderr=subprocess.STDOUT, timeout=timeout,
                                  env={**os.environ, "PYTHONHASHSEED": "0"})
    except subprocess.TimeoutExpired as err:
        raise PeerFailed(f"Gavel's simulator ran past {timeout:.0f} s (log: {log_path})") from err
    wall = time.perf_counter() - began
    text = log_path.read_text()
    if done.returncode != 0:
        raise PeerFailed(f"Gavel's simulator exited {done.returncode} (log: {log_path}): {text.strip()[-800:]}")
    parsed = parse_gavel_log(text, jobs)
    parsed["summary"]["wall_s"] = round(wall, 2)
    freeze = (venv_python.parent.parent / ".ets-freeze").read_text().split()
    version = subprocess.run([str(venv_python), "-c", "import platform; print(platform.python_version())"],
                             capture_output=True, text=True).stdout.strip()
    missing = (checkout / ".ets-missing").read_text().split("\n")
    return {
        "peer": "gavel",
        "repository": GAVEL_URL,
        "commit": GAVEL_COMMIT,
        "driver": f"scheduler/{GAVEL_DRIVER}",
        "policy": policy,
        "trace": trace_info,
        "cluster": spec,
        "options": {"time_per_iteration": time_per_iteration, "seed": seed, "solver": solver,
                    "num_gpus_per_server": num_gpus_per_server,
                    "throughputs_file": (f"scheduler/{throughputs_path.relative_to(scheduler)}"
                                         if throughputs_path.is_relative_to(scheduler) else str(throughputs_path)),
                    "minimum_time_between_allocation_resets": "Gavel's default (1920 s)"},
        "command": " ".join(["cd scheduler && python", *command[1:]]).replace(str(run_trace), shown_trace),
        "environment": {"python": version, "packages": freeze},
        "checkout_missing_blobs": [p for p in missing if p],
        "measured": _dt.date.today().isoformat(),
        "detail": "full: summary, per-job and per-round",
        **parsed,
    }


def format_summary(result: dict) -> str:
    s = result["summary"]
    cluster = ", ".join(f"{n} {t.upper()}" for t, n in result["cluster"].items() if n)
    return "\n".join([
        f"gavel {result['commit'][:10]} {result['policy']}  trace {result['trace']['source']}  cluster {cluster}",
        f"  jobs {s['jobs']} (completed {s['completed_jobs']})  avg JCT {s['avg_jct_s']:.3f} s  "
        f"makespan {s['makespan_s']:.3f} s",
        f"  rounds {s['rounds']}  preemptions {s['preemptions']} (paused {s['preemptions_paused']}, "
        f"type changes {s['preemptions_type_changes']}; same-type migrations {s['same_type_migrations']})",
        f"  lease extensions {s['lease_extensions']}/{s['lease_extension_opportunities']} "
        f"(check {'ok' if s['lease_check'] else 'MISMATCH'})  allocation resets {s['allocation_resets']}  "
        f"first round at {s['first_round_s']:.3f} s  wall {s['wall_s']:.1f} s",
    ])


# Our side is added beside this, not inside it: ``simrun --trace gavel:PATH --policy gavel ...`` on
# the same trace (the same file: ``result["trace"]`` names it and its sha256; Gavel's job ids are the
# 0-based rows of the 10-column file) and cluster, then compared with ``result["summary"]``
# (avg_jct_s, makespan_s, rounds, preemptions), ``result["jobs"][id]["jct_s"]`` and, round by round,
# ``result["rounds"]``. Everything above only runs and reads the peer.

# The reference runs kept in experiments/data/peers/gavel/ (README there says how they were made).
# (file name, trace inside Gavel's scheduler/, cluster, keep the per-round schedule)
REFERENCE_CASES = (
    ("medium_test", "traces/physical_cluster/medium_test.trace", "v100:4,p100:4,k80:4", True),
    ("max_min_fairness", "traces/physical_cluster/max_min_fairness.trace", "v100:8,p100:16,k80:24", True),
    ("msr_seed0_51b7ef", "traces/msr/seed=0/51b7ef.trace", "v100:8,p100:8,k80:8", True),
    ("msr_seed0_23dbec", "traces/msr/seed=0/23dbec.trace", "v100:8,p100:8,k80:8", True),
    ("msr_seed0_ed69ec", "traces/msr/seed=0/ed69ec.trace", "v100:8,p100:8,k80:8", False),  # 7 MB with rounds
)


# -- our side, beside the peer's ------------------------------------------------------------------

GAVEL_INPUTS = DATA / "gavel" / "inputs"  # the traces Gavel ran (README there): ours runs the same files
OUR_GAVEL = "gavel:restart=0"  # Gavel's simulator charges no restart cost; everything else our defaults


def ours_gavel(name: str, *, policy: str = OUR_GAVEL, throughputs: str | os.PathLike | None = None) -> dict:
    """Our ``policy`` on the reference case ``name`` (its trace in ``GAVEL_INPUTS``, its cluster
    one GPU per server as Gavel's driver sets it up), run times from Gavel's throughputs (the
    truth predictor). PeerUnavailable when the throughputs file is missing."""
    from policies.registry import make_policy
    from simulator.cluster import homogeneous_groups
    from simulator.metrics import summarize
    from simulator.preemption import make_simulation
    from simulator.timing import make_predictor
    from traces import gavel as gavel_trace

    reference = json.loads((DATA / "gavel" / f"{name}.json").read_text())
    path = Path(throughputs) if throughputs else gavel_trace.default_throughputs()
    if not path.is_file():
        raise PeerUnavailable(f"Gavel's throughputs file {path} is missing (set {gavel_trace.THROUGHPUTS_VARIABLE})")
    trace = gavel_trace.load(GAVEL_INPUTS / f"{name}.trace", throughputs=path)
    spec = parse_cluster(reference["cluster"])
    cluster = homogeneous_groups([(t.upper(), 1, n) for t, n in spec.items() if n], f"gavel-{name}")
    sim = make_simulation(trace, cluster, make_policy(policy), make_predictor("truth"))
    result = sim.run()
    summary = summarize(result.records, cluster, policy_seconds=result.policy_seconds,
                        policy_calls=result.policy_calls, wall_seconds=result.wall_seconds, events=result.events,
                        busy_by_type=result.busy_by_type, rounds=result.rounds)
    return {"avg_jct_s": summary["jct_mean"], "makespan_s": summary["makespan"],
            "preemptions": summary["preemptions"], "rounds": summary["rounds"], "wall_s": result.wall_seconds,
            "policy": policy, "records": result.records}


def gavel_table(names: tuple[str, ...] | None = None, *, policy: str = OUR_GAVEL,
                throughputs: str | os.PathLike | None = None) -> list[dict]:
    """One row per reference case: Gavel's numbers (the stored run), ours, and ours ÷ Gavel's."""
    rows = []
    for name in names or tuple(case[0] for case in REFERENCE_CASES):
        theirs = json.loads((DATA / "gavel" / f"{name}.json").read_text())["summary"]
        ours = ours_gavel(name, policy=policy, throughputs=throughputs)
        rows.append({
            "peer": f"gavel@{GAVEL_COMMIT[:7]}", "trace": name, "jobs": theirs["jobs"],
            "cluster": "/".join(str(v) for v in parse_cluster(
                json.loads((DATA / "gavel" / f"{name}.json").read_text())["cluster"]).values()),
            **{f"{key}_peer": theirs[key] for key in ("avg_jct_s", "makespan_s", "preemptions", "rounds")},
            **{f"{key}_ours": ours[key] for key in ("avg_jct_s", "makespan_s", "preemptions", "rounds")},
            **{f"{key}_ratio": ours[key] / theirs[key] if theirs[key] else float("nan")
               for key in ("avg_jct_s", "makespan_s", "preemptions")},
        })
    return rows


def table_markdown(rows: list[dict]) -> str:
    """The peer table as docs/scheduling.md shows it."""
    lines = ["| peer | trace | cluster V100/P100/K80 | jobs | avg JCT peer / ours (s) | ratio "
             "| makespan peer / ours (s) | ratio | preemptions peer / ours | ratio | rounds peer / ours |",
             "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(
            f"| {r['peer']} | {r['trace']} | {r['cluster']} | {r['jobs']} | {r['avg_jct_s_peer']:,.0f} / "
            f"{r['avg_jct_s_ours']:,.0f} | {r['avg_jct_s_ratio']:.4f} | {r['makespan_s_peer']:,.0f} / "
            f"{r['makespan_s_ours']:,.0f} | {r['makespan_s_ratio']:.4f} | {r['preemptions_peer']:,} / "
            f"{r['preemptions_ours']:,} | {r['preemptions_ratio']:.3f} | {r['rounds_peer']:,} / {r['rounds_ours']:,} |")
    return "\n".join(lines)

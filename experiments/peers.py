"""Peer simulators run as their authors run them: the reference our reimplementations must match.

Why (issue 51): a reimplemented policy is trusted only if it gives what the original gives on the
original's inputs. This module runs a peer's *own* simulator, unmodified, at a pinned commit, in a
scratch directory with its own virtual environment, and reads its output into plain numbers that
our side (``simrun``) can be put beside, job by job and round by round.

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

Anything missing for that (git, the network or mirror, the packages) raises ``PeerUnavailable``
with the reason: a harness skips on it. A peer that ran and failed raises ``PeerFailed``.

    python -m experiments.peers gavel --trace traces/physical_cluster/medium_test.trace --cluster v100:4,p100:4,k80:4
    python -m experiments.peers gavel --trace traces/msr/seed=0/51b7ef.trace --cluster v100:8,p100:8,k80:8 --out x.json
    python -m experiments.peers gavel-refs    # re-measure experiments/data/peers/gavel/*.json

``--trace`` is a file here, or a path inside Gavel's ``scheduler/`` (or the repo root). The
``gavel`` command exits 75 (and prints the reason) when the peer is unavailable. Environment:
``ETS_PEER_GAVEL_REPO`` (a local clone or bare mirror), ``ETS_PEER_SCRATCH`` (default
``$TMPDIR/ets-peers``).

Tiresias (``SymbioticLab/Tiresias`` at ``TIRESIAS_COMMIT``): ``tiresias_reference(trace,
cluster_options)`` clones the pinned commit (``$ETS_PEER_TIRESIAS_REPO`` or GitHub), finds a
CPython 2.7 (``find_python27``: ``$ETS_PEER_PYTHON27``, PATH, pyenv, uv), builds a virtualenv
with numpy 1.16.6 once, runs ``simulator/run_sim.py --schedule=dlas-gpu --scheme=count``
unmodified and reads its ``job.csv``, ``cluster.csv`` and demotion lines (per job: GPUs, submit,
start, end, JCT, pending, preemptions, demotions; avg JCT overall and per job size, makespan).
``demotion_timer="paper"`` runs a copy with one documented hunk (``paper_timer.patch``) that
sets the queue-jump timer at the threshold crossing. Stored runs, their inputs (Tiresias' CSVs,
the same jobs as our ``csv:`` trace, the mirror cluster files) and a README are in
``experiments/data/peers/tiresias/``.

    python -m experiments.peers tiresias --trace 60_job.csv --cluster 1:1:8
    python -m experiments.peers tiresias-refs     # re-make inputs/ and experiments/data/peers/tiresias/*.json
    python -m experiments.peers tiresias-table    # ours (tiresias:restart=0) beside the stored runs
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import fcntl
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import click

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
DATA = Path(__file__).resolve().parent / "data" / "peers"
EXIT_UNAVAILABLE = 75  # EX_TEMPFAIL: the peer could not be run here; nothing is wrong with ours


class PeerUnavailable(RuntimeError):
    """The peer cannot be run here (no git, no network or mirror, packages not installable)."""


class PeerFailed(RuntimeError):
    """The peer ran and failed (a non-zero exit, or output this module cannot read)."""


# --------------------------------------------------------------------------------------------
# Scratch, checkout, environment
# --------------------------------------------------------------------------------------------

def scratch_dir(scratch: str | os.PathLike | None = None) -> Path:
    path = Path(scratch or os.environ.get("ETS_PEER_SCRATCH") or Path(os.environ.get("TMPDIR", "/tmp")) / "ets-peers")
    path.mkdir(parents=True, exist_ok=True)
    return path


@contextlib.contextmanager
def _locked(path: Path):
    with open(path, "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _git(*args: str, cwd: Path | None = None, timeout: float = 600) -> subprocess.CompletedProcess:
    env = {**os.environ, "GIT_TERMINAL_PROMPT": "0", "GIT_ASKPASS": "true"}
    try:
        return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, timeout=timeout, env=env)
    except FileNotFoundError as err:
        raise PeerUnavailable("git is not installed") from err
    except subprocess.TimeoutExpired as err:
        raise PeerUnavailable(f"git {args[0]} timed out after {timeout:.0f} s") from err


def gavel_checkout(repo: str | os.PathLike | None = None, scratch: str | os.PathLike | None = None,
                   commit: str = GAVEL_COMMIT) -> Path:
    """Gavel's work tree at ``commit`` (``scheduler/`` only), cloned once into the scratch dir."""
    source = str(repo or os.environ.get("ETS_PEER_GAVEL_REPO") or GAVEL_URL)
    root = scratch_dir(scratch)
    dest = root / f"gavel-{commit[:12]}"
    with _locked(root / "gavel-checkout.lock"):
        if (dest / ".ets-ready").exists():
            return dest
        shutil.rmtree(dest, ignore_errors=True)
        if "://" not in source and not Path(source).exists():
            raise PeerUnavailable(f"no Gavel repository at {source} (ETS_PEER_GAVEL_REPO / --repo)")
        done = _git("clone", "--quiet", "--no-checkout", source, str(dest))
        if done.returncode != 0:
            raise PeerUnavailable(f"cannot clone {source}: {done.stderr.strip()[-400:]}")
        if _git("cat-file", "-e", f"{commit}^{{commit}}", cwd=dest).returncode != 0:
            done = _git("fetch", "--quiet", "origin", commit, cwd=dest)
            if done.returncode != 0:
                raise PeerUnavailable(f"commit {commit} is not in {source}: {done.stderr.strip()[-300:]}")
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


def _sha256(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


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


COMPACT_JOB_KEYS = ("arrival_s", "num_gpus", "jct_s", "completion_s", "rounds_run", "preemptions")


def without_rounds(result: dict) -> dict:
    """``result`` without the per-round schedule, per-job rows cut to ``COMPACT_JOB_KEYS``: for a
    run whose full record is too big to keep (``detail`` says which it is)."""
    out = {k: v for k, v in result.items() if k not in ("rounds", "rounds_format")}
    out["jobs"] = {job: {k: row[k] for k in COMPACT_JOB_KEYS} for job, row in result["jobs"].items()}
    out["detail"] = "summary and per-job only (no per-round schedule: too big to keep)"
    return out


def write_json(result: dict, path: Path, rounds: bool = True) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    record = result if rounds else without_rounds(result)
    path.write_text(json.dumps(record, separators=(",", ":")) + "\n")


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


@click.group()
def main() -> None:
    """Peer simulators' own runs (issue 51)."""


def _common(func):
    func = click.option("--repo", default=None, help="Gavel clone or bare mirror (default $ETS_PEER_GAVEL_REPO, "
                        "else GitHub).")(func)
    func = click.option("--scratch", type=click.Path(file_okay=False, path_type=Path), default=None,
                        help="Scratch dir for the checkout, venv and logs (default $ETS_PEER_SCRATCH).")(func)
    return func


@main.command()
@click.option("--trace", required=True, help="Gavel trace: a file, or a path inside Gavel's scheduler/.")
@click.option("--cluster", required=True, help="e.g. v100:4,p100:4,k80:4 (or Gavel's 4:4:4).")
@click.option("--policy", default=GAVEL_POLICY, show_default=True)
@click.option("--time-per-iteration", default=360, show_default=True, help="Round length, s.")
@click.option("--seed", default=0, show_default=True)
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), default=None, help="Write the JSON here.")
@click.option("--log", type=click.Path(dir_okay=False, path_type=Path), default=None, help="Keep Gavel's log here.")
@click.option("--rounds/--no-rounds", default=True, show_default=True,
              help="Keep the per-round schedule in the JSON (--no-rounds: summary and per-job only).")
@_common
def gavel(trace, cluster, policy, time_per_iteration, seed, out, log, rounds, repo, scratch) -> None:
    """Run Gavel's simulator; print its numbers and write them as JSON."""
    try:
        result = gavel_reference(trace, cluster, repo=repo, scratch=scratch, policy=policy,
                                 time_per_iteration=time_per_iteration, seed=seed, log=log)
    except PeerUnavailable as err:
        click.echo(f"gavel: unavailable: {err}", err=True)
        sys.exit(EXIT_UNAVAILABLE)
    click.echo(format_summary(result))
    if out:
        write_json(result, out, rounds)
        click.echo(f"wrote {out}")


@main.command("gavel-refs")
@click.option("--out-dir", type=click.Path(file_okay=False, path_type=Path), default=DATA / "gavel",
              show_default=True)
@_common
def gavel_refs(out_dir, repo, scratch) -> None:
    """Re-measure the Gavel reference runs kept under experiments/data/peers/gavel/."""
    out_dir.mkdir(parents=True, exist_ok=True)
    rows = []
    for name, trace, cluster, rounds in REFERENCE_CASES:
        try:
            result = gavel_reference(trace, cluster, repo=repo, scratch=scratch)
        except PeerUnavailable as err:
            click.echo(f"gavel: unavailable: {err}", err=True)
            sys.exit(EXIT_UNAVAILABLE)
        write_json(result, out_dir / f"{name}.json", rounds)
        click.echo(format_summary(result))
        s = result["summary"]
        rows.append(f"| {name} | {cluster} | {s['jobs']} | {s['avg_jct_s']:.3f} | {s['makespan_s']:.3f} | "
                    f"{s['rounds']} | {s['preemptions']} | {s['wall_s']:.1f} |")
    click.echo("| trace | cluster | jobs | avg JCT (s) | makespan (s) | rounds | preemptions | wall (s) |")
    click.echo("|---|---|---|---|---|---|---|---|")
    click.echo("\n".join(rows))


@main.command("table")
@click.option("--policy", default=OUR_GAVEL, show_default=True, help="Our policy spec to put beside Gavel's.")
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Write peers.md and peers.json here.")
def table(policy, out) -> None:
    """Our Gavel beside Gavel's own simulator on the stored reference cases (experiments/data/peers)."""
    try:
        rows = gavel_table(policy=policy)
    except PeerUnavailable as err:
        click.echo(f"peers: unavailable: {err}", err=True)
        sys.exit(EXIT_UNAVAILABLE)
    text = table_markdown(rows)
    click.echo(text)
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        (out / "peers.md").write_text(text + "\n")
        (out / "peers.json").write_text(json.dumps(rows, indent=1) + "\n")


# ================================================================================================
# Tiresias (SymbioticLab/Tiresias, simulator/): the reference for our ``tiresias`` policy
# ================================================================================================
#
# Tiresias' simulator is Python 2 code (print is a function there, but run_sim.py has no
# ``from __future__ import division``, so ``/`` between ints floors, and it uses ``sys.maxint``).
# It runs unmodified under CPython 2.7 with numpy: ``tiresias_reference`` finds a Python 2.7
# (``find_python27``), builds a virtualenv with it once (``tiresias_venv``; Python 2.7 has no
# ``venv`` module, so ``virtualenv`` is installed from PyPI into a small Python 3 venv first, at
# the last release that still creates Python 2 environments), checks the pinned commit out, runs
# ``simulator/run_sim.py`` and reads its ``job.csv``, ``cluster.csv`` and stdout.

TIRESIAS_URL = "https://github.com/SymbioticLab/Tiresias"
TIRESIAS_COMMIT = "959f9b08f44fa1b4f2b3aed79b01e4d439264a94"  # "add Apache license", 2020-05-06 (HEAD)
TIRESIAS_DRIVER = "run_sim.py"  # in simulator/
TIRESIAS_SCHEDULE = "dlas-gpu"  # discretised 2D-LAS, queues by attained GPU-seconds
# run_sim.py's --scheme default is "yarn", but dlas_sim_jobs never calls a placement scheme: it
# counts free GPUs over the whole cluster (CLUSTER.free_gpu), so every scheme gives the same job
# records (checked: yarn and count give byte-identical job.csv columns). "count" (as the authors'
# sim_runs.sh runs it) is the only scheme whose job.csv has the `resume` column (starts) and whose
# cluster.csv counts busy GPUs; the others also write cpu/gpu/network/memory.csv, all unused here.
TIRESIAS_SCHEME = "count"
# run_sim.py's flag defaults, the cluster when neither flags nor --cluster_spec are given.
TIRESIAS_DEFAULT_CLUSTER = {"num_switch": 1, "num_node_p_switch": 32, "num_gpu_p_node": 8}
TIRESIAS_CLUSTER_KEYS = ("num_switch", "num_node_p_switch", "num_gpu_p_node")
# numpy 1.16.6: the last numpy with CPython 2.7 wheels (jobs.py imports it). virtualenv 20.21.1:
# the last virtualenv that creates Python 2 environments (20.22 dropped them).
TIRESIAS_REQUIREMENTS = ("numpy==1.16.6",)
TIRESIAS_VIRTUALENV = "virtualenv==20.21.1"
TIRESIAS_DATA = DATA / "tiresias"
TIRESIAS_INPUTS = TIRESIAS_DATA / "inputs"
# demotion_timer="paper": this one-hunk patch of run_sim.py (its header says why), applied to a copy
TIRESIAS_PAPER_TIMER_PATCH = TIRESIAS_DATA / "paper_timer.patch"
TIRESIAS_DEMOTION_TIMERS = ("simulator", "paper")
# The one GPU type of our mirror clusters; duration_s is on it, so the run time is Tiresias' duration.
TIRESIAS_GPU_TYPE = "V100"
_TIRESIAS_COLUMNS = ("job_id", "num_gpu", "submit_time", "duration")  # what dlas-gpu reads


def find_python27(python27: str | None = None) -> tuple[str, str]:
    """A CPython 2.7 here: ``python27`` if given, else ``$ETS_PEER_PYTHON27``, ``python2.7`` /
    ``python2`` on PATH, pyenv's ``versions/2.7*``, ``uv python find 2.7``, /usr/bin/python2.7.
    Returns (path, version); PeerUnavailable when there is none."""
    candidates: list[str] = []
    if python27:
        candidates.append(str(python27))
    else:
        if os.environ.get("ETS_PEER_PYTHON27"):
            candidates.append(os.environ["ETS_PEER_PYTHON27"])
        candidates += [p for p in (shutil.which("python2.7"), shutil.which("python2")) if p]
        for root in filter(None, (os.environ.get("PYENV_ROOT"), str(Path.home() / ".pyenv"))):
            candidates += sorted((str(p) for p in Path(root).glob("versions/2.7*/bin/python2.7")), reverse=True)
        if shutil.which("uv"):
            with contextlib.suppress(OSError, subprocess.TimeoutExpired):
                found = subprocess.run(["uv", "python", "find", "2.7"], capture_output=True, text=True, timeout=60)
                if found.returncode == 0 and found.stdout.strip():
                    candidates.append(found.stdout.strip())
        candidates += ["/usr/bin/python2.7", "/usr/local/bin/python2.7"]
    tried = []
    for candidate in dict.fromkeys(candidates):
        try:
            done = subprocess.run([candidate, "-c", "import sys; sys.stdout.write('%d.%d.%d' % sys.version_info[:3])"],
                                  capture_output=True, text=True, timeout=60)
        except (OSError, subprocess.TimeoutExpired):
            tried.append(candidate)
            continue
        if done.returncode == 0 and done.stdout.startswith("2.7."):
            return candidate, done.stdout
        tried.append(candidate)
    raise PeerUnavailable("no Python 2.7 here (Tiresias' simulator needs one; tried: "
                          f"{', '.join(tried) or 'nothing found'}): install one, e.g. `pyenv install 2.7.18`, "
                          "and point ETS_PEER_PYTHON27 at it")


def tiresias_checkout(repo: str | os.PathLike | None = None, scratch: str | os.PathLike | None = None,
                      commit: str = TIRESIAS_COMMIT) -> Path:
    """Tiresias' work tree at ``commit``, cloned once into the scratch dir (the whole repository:
    it is small). Runs write no .pyc into it (PYTHONDONTWRITEBYTECODE) and log elsewhere."""
    source = str(repo or os.environ.get("ETS_PEER_TIRESIAS_REPO") or TIRESIAS_URL)
    root = scratch_dir(scratch)
    dest = root / f"tiresias-{commit[:12]}"
    with _locked(root / "tiresias-checkout.lock"):
        if (dest / ".ets-ready").exists():
            return dest
        shutil.rmtree(dest, ignore_errors=True)
        if "://" not in source and not Path(source).exists():
            raise PeerUnavailable(f"no Tiresias repository at {source} (ETS_PEER_TIRESIAS_REPO / --repo)")
        done = _git("clone", "--quiet", "--no-checkout", source, str(dest))
        if done.returncode != 0:
            raise PeerUnavailable(f"cannot clone {source}: {done.stderr.strip()[-400:]}")
        if _git("cat-file", "-e", f"{commit}^{{commit}}", cwd=dest).returncode != 0:
            done = _git("fetch", "--quiet", "origin", commit, cwd=dest)
            if done.returncode != 0:
                raise PeerUnavailable(f"commit {commit} is not in {source}: {done.stderr.strip()[-300:]}")
        done = _git("checkout", "--quiet", "--detach", commit, cwd=dest)
        head = _git("rev-parse", "HEAD", cwd=dest).stdout.strip()
        if head != commit or not (dest / "simulator" / TIRESIAS_DRIVER).exists():
            raise PeerUnavailable(f"checkout of {commit} failed: {done.stderr.strip()[-400:]}")
        (dest / ".git" / "info").mkdir(parents=True, exist_ok=True)
        with open(dest / ".git" / "info" / "exclude", "a") as exclude:
            exclude.write(".ets-*\n")
        (dest / ".ets-source").write_text(source + "\n")
        (dest / ".ets-ready").write_text(commit + "\n")
    return dest


def tiresias_venv(scratch: str | os.PathLike | None = None, python27: str | None = None) -> tuple[Path, str]:
    """A Python 2.7 virtualenv with ``TIRESIAS_REQUIREMENTS`` (built once per interpreter and pin
    set); its python and the interpreter's version."""
    base, version = find_python27(python27)
    root = scratch_dir(scratch)
    key = hashlib.sha256("\n".join((base, version, TIRESIAS_VIRTUALENV, *TIRESIAS_REQUIREMENTS)).encode()).hexdigest()
    venv = root / f"tiresias-py27-{key[:12]}"
    with _locked(root / "tiresias-venv.lock"):
        if (venv / ".ets-ready").exists():
            return venv / "bin" / "python", version
        shutil.rmtree(venv, ignore_errors=True)
        tool = root / f"virtualenv-tool-{hashlib.sha256((sys.version + TIRESIAS_VIRTUALENV).encode()).hexdigest()[:12]}"
        if not (tool / ".ets-ready").exists():
            shutil.rmtree(tool, ignore_errors=True)
            made = subprocess.run([sys.executable, "-m", "venv", str(tool)], capture_output=True, text=True)
            if made.returncode != 0:
                raise PeerUnavailable(f"cannot make a venv with {sys.executable}: {made.stderr.strip()[-300:]}")
            try:
                pip = subprocess.run([str(tool / "bin" / "python"), "-m", "pip", "install", "--quiet",
                                      "--disable-pip-version-check", "--only-binary=:all:", TIRESIAS_VIRTUALENV],
                                     capture_output=True, text=True, timeout=900)
            except subprocess.TimeoutExpired as err:
                raise PeerUnavailable(f"pip install {TIRESIAS_VIRTUALENV} timed out") from err
            if pip.returncode != 0:
                raise PeerUnavailable(f"cannot install {TIRESIAS_VIRTUALENV}: "
                                      f"{(pip.stderr or pip.stdout).strip()[-600:]}")
            (tool / ".ets-ready").write_text(TIRESIAS_VIRTUALENV + "\n")
        made = subprocess.run([str(tool / "bin" / "virtualenv"), "--quiet", "--no-periodic-update", "-p", base,
                               str(venv)], capture_output=True, text=True, timeout=600)
        if made.returncode != 0:
            raise PeerUnavailable(f"cannot make a Python 2.7 virtualenv with {base}: "
                                  f"{(made.stderr or made.stdout).strip()[-400:]}")
        python = venv / "bin" / "python"
        try:
            pip = subprocess.run([str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
                                  "--no-python-version-warning", "--only-binary=:all:", *TIRESIAS_REQUIREMENTS],
                                 capture_output=True, text=True, timeout=1800)
        except subprocess.TimeoutExpired as err:
            raise PeerUnavailable("pip install of Tiresias' packages timed out") from err
        if pip.returncode != 0:
            raise PeerUnavailable("cannot install Tiresias' packages: " + (pip.stderr or pip.stdout).strip()[-600:])
        freeze = subprocess.run([str(python), "-m", "pip", "freeze", "--disable-pip-version-check",
                                 "--no-python-version-warning"], capture_output=True, text=True).stdout
        # pip freeze also echoes a pip.conf find-links as "-f DIR": keep the packages only
        (venv / ".ets-freeze").write_text("".join(f"{line}\n" for line in freeze.splitlines()
                                                  if line.strip() and not line.startswith("-")))
        (venv / ".ets-ready").write_text("\n".join((base, version, *TIRESIAS_REQUIREMENTS)) + "\n")
    return python, version


def parse_tiresias_cluster(cluster: str | dict | None) -> dict[str, int] | None:
    """Tiresias' cluster: None (run_sim.py's defaults: no flags given), a dict of its flags
    (``num_switch``, ``num_node_p_switch``, ``num_gpu_p_node``; missing ones at their defaults),
    ``S:N:G`` (switches : nodes per switch : GPUs per node) or ``nNgG`` (one switch)."""
    if cluster is None or cluster == "default":
        return None
    if isinstance(cluster, dict):
        unknown = sorted(set(cluster) - set(TIRESIAS_CLUSTER_KEYS))
        if unknown:
            raise ValueError(f"cluster {cluster!r}: unknown keys {', '.join(unknown)} "
                             f"(Tiresias' flags: {', '.join(TIRESIAS_CLUSTER_KEYS)})")
        spec = {**TIRESIAS_DEFAULT_CLUSTER, **{k: int(v) for k, v in cluster.items()}}
    elif m := re.fullmatch(r"\s*(\d+):(\d+):(\d+)\s*", cluster):
        spec = dict(zip(TIRESIAS_CLUSTER_KEYS, map(int, m.groups())))
    elif m := re.fullmatch(r"\s*n(\d+)g(\d+)\s*", cluster):
        spec = {"num_switch": 1, "num_node_p_switch": int(m[1]), "num_gpu_p_node": int(m[2])}
    else:
        raise ValueError(f"cluster {cluster!r}: expected SWITCHES:NODES_PER_SWITCH:GPUS_PER_NODE (e.g. 1:2:8), "
                         "nNODESgGPUS (e.g. n2g8) or default")
    if any(v < 1 for v in spec.values()):
        raise ValueError(f"cluster {cluster!r}: every count must be >= 1")
    return spec


def read_tiresias_trace(path: str | os.PathLike) -> list[dict]:
    """A Tiresias job trace (``job_id,num_gpu,submit_time,iterations,model_name,duration,interval``)
    as dlas-gpu reads it: one dict per row, in file order (Tiresias' ``job_idx`` is the 0-based
    row). Values Tiresias would misread are refused (it keeps a field that is not all digits as a
    string, and Python 2 then compares it with numbers without complaint)."""
    import csv

    with open(path, newline="") as handle:
        reader = csv.DictReader(handle)
        missing = [c for c in _TIRESIAS_COLUMNS if c not in (reader.fieldnames or [])]
        if missing:
            raise ValueError(f"{path}: no {', '.join(missing)} column (Tiresias reads {', '.join(_TIRESIAS_COLUMNS)})")
        jobs, seen = [], set()
        for row_number, row in enumerate(reader, start=2):
            for field in ("num_gpu", "submit_time"):
                if not (row[field] or "").isdigit():
                    raise ValueError(f"{path}: line {row_number}: {field} {row[field]!r} is not a whole number")
            try:
                duration = int(float(row["duration"]))  # jobs.py add_job: int(float(duration))
            except (TypeError, ValueError):
                raise ValueError(f"{path}: line {row_number}: duration {row['duration']!r} is not a number") from None
            if int(row["num_gpu"]) < 1 or duration < 0:
                raise ValueError(f"{path}: line {row_number}: num_gpu must be >= 1 and duration >= 0")
            if row["job_id"] in seen:
                raise ValueError(f"{path}: line {row_number}: job_id {row['job_id']!r} repeats")
            seen.add(row["job_id"])
            jobs.append({"job_id": row["job_id"], "num_gpus": int(row["num_gpu"]), "submit_s": int(row["submit_time"]),
                         "duration_s": duration, "model": row.get("model_name")})
    if not jobs:
        raise ValueError(f"{path}: no jobs")
    return jobs


_DEMOTE = re.compile(r"^job (?P<job>\d+) demote to Q(?P<q>\d+)$")


def parse_tiresias_output(log_dir: Path, stdout: str, jobs: list[dict]) -> dict:
    """Tiresias' ``job.csv`` (one row per completed job), ``cluster.csv`` (one row per event:
    busy/idle GPUs, pending/running jobs) and stdout (``job N demote to QK``, N = row index)."""
    import csv

    with open(log_dir / "job.csv", newline="") as handle:
        done = list(csv.DictReader(handle))
    with open(log_dir / "cluster.csv", newline="") as handle:
        events = list(csv.DictReader(handle))
    if "This cluster is not large enough to run the job" in stdout:
        raise PeerFailed("Tiresias stopped: 'This cluster is not large enough to run the job'")
    demotions: dict[int, list[int]] = {}
    for line in stdout.splitlines():
        if m := _DEMOTE.match(line.strip()):
            demotions.setdefault(int(m["job"]), []).append(int(m["q"]))
    index = {job["job_id"]: i for i, job in enumerate(jobs)}
    rows = {}
    for rec in done:
        i = index.get(rec["job_id"])
        if i is None:
            raise PeerFailed(f"Tiresias' job.csv names job {rec['job_id']!r}, which the trace lacks")
        job = jobs[i]
        rows[job["job_id"]] = {
            "num_gpus": int(rec["num_gpu"]), "submit_s": int(rec["submit_time"]), "start_s": int(rec["start_time"]),
            "end_s": int(rec["end_time"]), "jct_s": int(rec["JCT"]), "duration_s": int(rec["duration"]),
            "pending_s": int(rec["pending_time"]), "preemptions": int(rec["preempt"]),
            "starts": int(rec["resume"]) if "resume" in rec else None,
            "demotions": len(demotions.get(i, [])), "final_queue": max(demotions.get(i, [0])),
            "model": job["model"]}
    missing = [job["job_id"] for job in jobs if job["job_id"] not in rows]
    if missing:
        raise PeerFailed(f"Tiresias' job.csv lacks {len(missing)} job(s), e.g. {missing[:5]}")
    ordered = {job["job_id"]: rows[job["job_id"]] for job in jobs}
    by_gpus: dict[int, list[int]] = {}
    for row in ordered.values():
        by_gpus.setdefault(row["num_gpus"], []).append(row["jct_s"])
    times = [int(e["time"]) for e in events]
    busy = sum(int(a["busy_gpu"]) * (t1 - t0) for a, t0, t1 in zip(events, times, times[1:]))
    work = sum(r["num_gpus"] * r["duration_s"] for r in ordered.values())
    first = min(r["submit_s"] for r in ordered.values())
    makespan = max(r["end_s"] for r in ordered.values())
    jcts = [r["jct_s"] for r in ordered.values()]
    summary = {
        "jobs": len(jobs), "completed_jobs": len(done),
        "avg_jct_s": round(sum(jcts) / len(jcts), 3),
        "avg_jct_by_gpus_s": {str(g): round(sum(v) / len(v), 3) for g, v in sorted(by_gpus.items())},
        "jobs_by_gpus": {str(g): len(v) for g, v in sorted(by_gpus.items())},
        "makespan_s": makespan, "first_submit_s": first, "makespan_from_first_submit_s": makespan - first,
        "avg_pending_s": round(sum(r["pending_s"] for r in ordered.values()) / len(ordered), 3),
        "preemptions": sum(r["preemptions"] for r in ordered.values()),
        "jobs_preempted": sum(1 for r in ordered.values() if r["preemptions"]),
        "demotions": sum(len(v) for v in demotions.values()),
        "demotions_to_queue": {str(q): sum(v.count(q) for v in demotions.values())
                               for q in sorted({q for v in demotions.values() for q in v})},
        "jobs_demoted": len(demotions),
        "events": len(events),
        "busy_gpu_seconds": busy, "work_gpu_seconds": work,
        # Tiresias charges nothing for a preemption: held GPU-time = work, and JCT = run + pending
        "work_check": busy == work and all(r["jct_s"] == r["duration_s"] + r["pending_s"] for r in ordered.values()),
    }
    return {"summary": summary, "jobs": ordered}


def _tiresias_queue_settings(python: Path, simulator: Path) -> dict:
    """num_queue and queue_limit as jobs.py sets them (read by Tiresias' own Python, not copied)."""
    code = ("import sys, json; sys.argv = ['x']; import jobs; "
            "print(json.dumps({'num_queue': jobs.JOBS.num_queue, 'queue_limit': jobs.JOBS.queue_limit}))")
    done = subprocess.run([str(python), "-c", code], cwd=simulator, capture_output=True, text=True,
                          env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"})
    if done.returncode != 0:
        raise PeerFailed(f"cannot read Tiresias' queue settings: {done.stderr.strip()[-400:]}")
    settings = json.loads(done.stdout.strip().splitlines()[-1])
    settings["thresholds_used_gpu_s"] = settings["queue_limit"][: settings["num_queue"] - 1]
    return settings


def _tiresias_simulator(checkout: Path, demotion_timer: str,
                        scratch: str | os.PathLike | None) -> tuple[Path, dict | None]:
    """The simulator/ to run: the checkout's (``simulator``: unmodified) or a copy with
    ``TIRESIAS_PAPER_TIMER_PATCH`` applied (``paper``); and the patch applied, if any."""
    if demotion_timer not in TIRESIAS_DEMOTION_TIMERS:
        raise ValueError(f"demotion_timer {demotion_timer!r}: one of {', '.join(TIRESIAS_DEMOTION_TIMERS)}")
    if demotion_timer == "simulator":
        return checkout / "simulator", None
    patch = TIRESIAS_PAPER_TIMER_PATCH
    digest = _sha256(patch)
    root = scratch_dir(scratch)
    dest = root / f"tiresias-{TIRESIAS_COMMIT[:12]}-paper-timer-{digest[:8]}"
    with _locked(root / "tiresias-checkout.lock"):
        if not (dest / ".ets-ready").exists():
            shutil.rmtree(dest, ignore_errors=True)
            shutil.copytree(checkout / "simulator", dest / "simulator")
            done = _git("apply", "--whitespace=nowarn", str(patch), cwd=dest)
            if done.returncode != 0:
                raise PeerFailed(f"cannot apply {patch.name} to Tiresias' simulator/: {done.stderr.strip()[-400:]}")
            (dest / ".ets-ready").write_text(digest + "\n")
    return dest / "simulator", {"file": f"experiments/data/peers/tiresias/{patch.name}", "sha256": digest,
                                "why": "the demotion timer at the crossing (the paper's rule); see the file"}


def _resolve_tiresias_trace(trace: str | os.PathLike, checkout: Path) -> tuple[Path, str]:
    text = str(trace).removeprefix("tiresias:")
    for candidate, label in ((Path(text), None), (checkout / "simulator" / text, f"tiresias:simulator/{text}"),
                             (checkout / text, f"tiresias:{text}")):
        if candidate.is_file():
            return candidate.resolve(), label or str(candidate)
    raise ValueError(f"trace {trace}: not a file here nor in Tiresias' simulator/ or repository root")


def tiresias_reference(trace: str | os.PathLike, cluster_options: str | dict | None = None, *,
                       repo: str | os.PathLike | None = None, scratch: str | os.PathLike | None = None,
                       schedule: str = TIRESIAS_SCHEDULE, scheme: str = TIRESIAS_SCHEME, python27: str | None = None,
                       demotion_timer: str = "simulator", timeout: float = 1800,
                       log: str | os.PathLike | None = None) -> dict:
    """Tiresias' own simulator (``simulator/run_sim.py``, unmodified, under Python 2.7) on
    ``trace`` and ``cluster_options`` (see ``parse_tiresias_cluster``; None: its defaults): its
    numbers, per job and per job-size class.

    Raises ``PeerUnavailable`` when it cannot be run here (no git, mirror or network, no Python
    2.7, packages not installable), ``PeerFailed`` when it ran and failed, ``ValueError`` for a bad
    cluster or trace (a job larger than the cluster: Tiresias would drop it and every later one).

    ``demotion_timer``: ``simulator`` runs run_sim.py as it is (the reference); ``paper`` runs a
    copy with ``TIRESIAS_PAPER_TIMER_PATCH`` (the queue-jump timer at the threshold crossing).
    """
    spec = parse_tiresias_cluster(cluster_options)
    if shutil.which("git") is None:
        raise PeerUnavailable("git is not installed")
    checkout = tiresias_checkout(repo, scratch)
    python, version = tiresias_venv(scratch, python27)
    simulator, patch = _tiresias_simulator(checkout, demotion_timer, scratch)
    source, label = _resolve_tiresias_trace(trace, checkout)
    jobs = read_tiresias_trace(source)
    shape = spec or TIRESIAS_DEFAULT_CLUSTER
    total = shape["num_switch"] * shape["num_node_p_switch"] * shape["num_gpu_p_node"]
    too_big = [j for j in jobs if j["num_gpus"] > total]
    if too_big:
        raise ValueError(f"{source}: job {too_big[0]['job_id']} needs {too_big[0]['num_gpus']} GPUs, the cluster has "
                         f"{total} (Tiresias would stop there: 'This cluster is not large enough to run the job')")
    runs = scratch_dir(scratch) / "tiresias-runs"
    runs.mkdir(exist_ok=True)
    shape_text = "x".join(str(shape[k]) for k in TIRESIAS_CLUSTER_KEYS)
    out_dir = runs / f"{source.stem}-{_sha256(source)[:8]}-{shape_text}-{schedule}-{scheme}-{demotion_timer}"
    shutil.rmtree(out_dir, ignore_errors=True)
    args = [f"--trace_file={source}", f"--schedule={schedule}", f"--scheme={scheme}", "--print",
            f"--log_path={out_dir}"]
    if spec is not None:
        args += [f"--{k}={spec[k]}" for k in TIRESIAS_CLUSTER_KEYS]
    command = [str(python), TIRESIAS_DRIVER, *args]
    log_path = Path(log) if log else runs / f"{out_dir.name}.log"
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1", "PYTHONHASHSEED": "0"}
    began = time.perf_counter()
    try:
        with open(log_path, "w") as out:
            done = subprocess.run(command, cwd=simulator, stdout=out, stderr=subprocess.STDOUT, timeout=timeout,
                                  env=env)
    except subprocess.TimeoutExpired as err:
        raise PeerFailed(f"Tiresias' simulator ran past {timeout:.0f} s (log: {log_path})") from err
    wall = time.perf_counter() - began
    text = log_path.read_text()
    if done.returncode != 0:
        raise PeerFailed(f"Tiresias' simulator exited {done.returncode} (log: {log_path}): {text.strip()[-800:]}")
    if not (out_dir / "job.csv").is_file():
        raise PeerFailed(f"Tiresias wrote no job.csv (log: {log_path})")
    parsed = parse_tiresias_output(out_dir, text, jobs)
    parsed["summary"]["wall_s"] = round(wall, 2)
    freeze = (python.parent.parent / ".ets-freeze").read_text().split()
    # the trace as the command names it from simulator/: its name there, else the path given
    shown_trace = source.name if source.parent == (checkout / "simulator").resolve() else str(source)
    shown = ["cd simulator && python2.7", TIRESIAS_DRIVER,
             *(a.replace(str(source), shown_trace).replace(str(out_dir), "<out>") for a in args)]
    return {
        "peer": "tiresias",
        "repository": TIRESIAS_URL,
        "commit": TIRESIAS_COMMIT,
        "driver": f"simulator/{TIRESIAS_DRIVER}",
        "schedule": schedule,
        "scheme": scheme,
        "demotion_timer": demotion_timer,
        "trace": {"name": source.stem, "source": label, "sha256": _sha256(source), "jobs": len(jobs)},
        "cluster": {**shape, "gpus": total, "flags_given": spec is not None},
        "queues": _tiresias_queue_settings(python, simulator),
        "command": " ".join(shown),
        "environment": {"python": version, "packages": freeze, "virtualenv": TIRESIAS_VIRTUALENV,
                        "patch": patch},  # None: run unmodified (no port, no patch)
        "measured": _dt.date.today().isoformat(),
        **parsed,
    }


def format_tiresias_summary(result: dict) -> str:
    s, c = result["summary"], result["cluster"]
    classes = "  ".join(f"{g} GPU: {v:,.1f} s ({s['jobs_by_gpus'][g]})" for g, v in s["avg_jct_by_gpus_s"].items())
    return "\n".join([
        f"tiresias {result['commit'][:10]} {result['schedule']} ({result['scheme']}, "
        f"{result['demotion_timer']}'s demotion timer)  "
        f"trace {result['trace']['source']}  "
        f"cluster {c['num_switch']}x{c['num_node_p_switch']}x{c['num_gpu_p_node']} = {c['gpus']} GPUs",
        f"  jobs {s['jobs']} (completed {s['completed_jobs']})  avg JCT {s['avg_jct_s']:.3f} s  "
        f"makespan {s['makespan_s']} s  avg pending {s['avg_pending_s']:.1f} s",
        f"  avg JCT by job size: {classes}",
        f"  preemptions {s['preemptions']} ({s['jobs_preempted']} jobs)  demotions {s['demotions']} "
        f"{s['demotions_to_queue']}  events {s['events']}  work check {'ok' if s['work_check'] else 'MISMATCH'}  "
        f"wall {s['wall_s']:.1f} s",
    ])


# -- inputs: the harder cases, and the same jobs for our simulator ---------------------------------

def scale_tiresias_trace(src: str | os.PathLike, dst: str | os.PathLike, factor: int) -> dict:
    """``src`` with each job's ``duration`` (and ``iterations``, which dlas-gpu does not read)
    multiplied by the whole number ``factor``; everything else as it is, line ends included
    (60_job.csv's are CRLF)."""
    import csv

    with open(src, newline="") as handle:
        ending = "\r\n" if handle.readline().endswith("\r\n") else "\n"
        handle.seek(0)
        reader = csv.DictReader(handle)
        fields, rows = reader.fieldnames, list(reader)
    for row in rows:
        row["duration"] = str(int(float(row["duration"])) * factor)
        if row.get("iterations", "").isdigit():
            row["iterations"] = str(int(row["iterations"]) * factor)
    with open(dst, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=fields, lineterminator=ending)
        writer.writeheader()
        writer.writerows(rows)
    return {"from": Path(src).name, "duration_factor": factor, "jobs": len(rows)}


def tiresias_generic_trace(src: str | os.PathLike, dst: str | os.PathLike, gpu_type: str = TIRESIAS_GPU_TYPE) -> None:
    """The same jobs as our ``csv:`` trace: ``job_id, submit_s, num_gpus, duration_s, gpu_type``
    (duration as Tiresias reads it, on ``gpu_type``, the one type of the mirror cluster)."""
    lines = ["job_id,submit_s,num_gpus,duration_s,gpu_type"]
    lines += [f"{j['job_id']},{j['submit_s']},{j['num_gpus']},{j['duration_s']},{gpu_type}"
              for j in read_tiresias_trace(src)]
    Path(dst).write_text("\n".join(lines) + "\n")


def tiresias_cluster_yaml(cluster_options: str | dict | None, name: str, gpu_type: str = TIRESIAS_GPU_TYPE) -> str:
    """Our cluster file mirroring Tiresias' (switches × nodes per switch nodes of GPUs per node)."""
    shape = parse_tiresias_cluster(cluster_options) or TIRESIAS_DEFAULT_CLUSTER
    nodes = shape["num_switch"] * shape["num_node_p_switch"]
    return (f"# Tiresias' cluster {shape['num_switch']} switch(es) x {shape['num_node_p_switch']} nodes x "
            f"{shape['num_gpu_p_node']} GPUs (dlas-gpu counts GPUs cluster-wide; so does ours across nodes)\n"
            f"name: {name}\nnodes:\n"
            f"  - {{gpu_type: {gpu_type}, num_gpus: {shape['num_gpu_p_node']}, count: {nodes}}}\n")


# The reference runs kept in experiments/data/peers/tiresias/ (README there):
# (name, Tiresias trace in inputs/, cluster (None: run_sim.py's defaults), how the trace is made)
TIRESIAS_CASES = (
    ("60_job_default", "60_job.csv", None, "Tiresias' simulator/60_job.csv as it is"),
    ("60_job_n1g8", "60_job.csv", "1:1:8", "Tiresias' simulator/60_job.csv as it is"),
    ("60_job_x4_n2g8", "60_job_x4.csv", "1:2:8", "60_job.csv with every duration x4"),
    ("60_job_x8_n4g8", "60_job_x8.csv", "1:4:8", "60_job.csv with every duration x8"),
)
TIRESIAS_TRACES = {"60_job.csv": None, "60_job_x4.csv": 4, "60_job_x8.csv": 8}  # input -> duration factor
# Each case is also run with demotion_timer="paper" (NAME.paper_timer.json): the paper's rule.
OUR_TIRESIAS = "tiresias:restart=0"  # Tiresias charges no restart cost; everything else our defaults


def tiresias_inputs(checkout: Path, inputs: Path = TIRESIAS_INPUTS) -> dict[str, dict]:
    """Write inputs/: Tiresias' traces (60_job.csv copied from the checkout, 60_job_x4.csv and
    60_job_x8.csv made from it), each as our generic trace (NAME.generic.csv), each case's cluster
    file, and Tiresias' LICENSE (TIRESIAS_LICENSE)."""
    inputs.mkdir(parents=True, exist_ok=True)
    notes = {}
    # Tiresias is under the Apache License 2.0, which asks that a copy go with its files (60_job.csv
    # verbatim, 60_job_x4/x8.csv derived from it: the README says what changed)
    shutil.copyfile(checkout / "LICENSE", inputs / "TIRESIAS_LICENSE")
    original = checkout / "simulator" / "60_job.csv"
    for name, factor in TIRESIAS_TRACES.items():
        if factor is None:
            shutil.copyfile(original, inputs / name)
            notes[name] = {"from": f"simulator/60_job.csv at {TIRESIAS_COMMIT[:12]}", "duration_factor": 1}
        else:
            notes[name] = scale_tiresias_trace(original, inputs / name, factor)
        tiresias_generic_trace(inputs / name, inputs / f"{Path(name).stem}.generic.csv")
    for case, _, cluster, _ in TIRESIAS_CASES:
        (inputs / f"{case}.cluster.yaml").write_text(tiresias_cluster_yaml(cluster, f"tiresias-{case}"))
    return notes


def _tiresias_stored(name: str, timer: str = "simulator") -> dict:
    suffix = "" if timer == "simulator" else f".{timer}_timer"
    return json.loads((TIRESIAS_DATA / f"{name}{suffix}.json").read_text())


def ours_tiresias(name: str, *, policy: str = OUR_TIRESIAS) -> dict:
    """Our ``policy`` on the stored case ``name``: its generic trace and mirror cluster in
    ``TIRESIAS_INPUTS``, the truth predictor; avg JCT overall and per job size beside Tiresias'."""
    from policies.registry import make_policy
    from simulator.cluster import load_file
    from simulator.metrics import summarize
    from simulator.preemption import make_simulation
    from simulator.timing import make_predictor
    from traces import generic

    reference = _tiresias_stored(name)
    trace_file = TIRESIAS_INPUTS / f"{Path(reference['trace']['input']).stem}.generic.csv"
    cluster = load_file(TIRESIAS_INPUTS / f"{name}.cluster.yaml")
    sim = make_simulation(generic.load(trace_file), cluster, make_policy(policy), make_predictor("truth"))
    result = sim.run()
    summary = summarize(result.records, cluster, policy_seconds=result.policy_seconds,
                        policy_calls=result.policy_calls, wall_seconds=result.wall_seconds, events=result.events,
                        busy_by_type=result.busy_by_type, rounds=result.rounds)
    records = result.records
    by_gpus = records.groupby("num_gpus")["jct"].mean()
    return {"avg_jct_s": summary["jct_mean"], "makespan_s": summary["makespan"],
            "avg_jct_by_gpus_s": {str(int(g)): float(v) for g, v in by_gpus.items()},
            "preemptions": summary["preemptions"], "rounds": summary["rounds"], "policy": policy, "records": records}


def tiresias_table(names: tuple[str, ...] | None = None, *, policy: str = OUR_TIRESIAS,
                   timer: str = "simulator") -> list[dict]:
    """One row per stored case: Tiresias' numbers (the stored run with ``timer``'s demotion
    timer: ``simulator`` unmodified, ``paper`` patched) and ours, overall and per job size."""
    rows = []
    for name in names or tuple(case[0] for case in TIRESIAS_CASES):
        theirs = _tiresias_stored(name, timer)
        ours = ours_tiresias(name, policy=policy)
        s = theirs["summary"]
        rows.append({
            "peer": f"tiresias@{TIRESIAS_COMMIT[:7]}" + ("" if timer == "simulator" else f" ({timer} timer)"),
            "trace": name, "jobs": s["jobs"],
            "gpus": theirs["cluster"]["gpus"],
            "avg_jct_s_peer": s["avg_jct_s"], "avg_jct_s_ours": ours["avg_jct_s"],
            "avg_jct_s_ratio": ours["avg_jct_s"] / s["avg_jct_s"],
            "makespan_s_peer": s["makespan_s"], "makespan_s_ours": ours["makespan_s"],
            "preemptions_peer": s["preemptions"], "preemptions_ours": ours["preemptions"],
            "by_gpus": {g: {"peer": v, "ours": ours["avg_jct_by_gpus_s"].get(g),
                            "ratio": ours["avg_jct_by_gpus_s"][g] / v if v and g in ours["avg_jct_by_gpus_s"] else None}
                        for g, v in s["avg_jct_by_gpus_s"].items()},
        })
    return rows


def tiresias_table_markdown(rows: list[dict]) -> str:
    classes = sorted({g for r in rows for g in r["by_gpus"]}, key=int)
    head = ("| peer | case | GPUs | jobs | avg JCT peer / ours (s) | ratio | "
            + " | ".join(f"{g}-GPU peer / ours (ratio)" for g in classes)
            + " | makespan peer / ours (s) | preemptions peer / ours |")
    lines = [head, "|" + "---|" * (8 + len(classes))]
    for r in rows:
        cells = []
        for g in classes:
            c = r["by_gpus"].get(g)
            cells.append("" if c is None else f"{c['peer']:,.0f} / {c['ours']:,.0f} ({c['ratio']:.3f})")
        lines.append(f"| {r['peer']} | {r['trace']} | {r['gpus']} | {r['jobs']} | {r['avg_jct_s_peer']:,.0f} / "
                     f"{r['avg_jct_s_ours']:,.0f} | {r['avg_jct_s_ratio']:.3f} | " + " | ".join(cells)
                     + f" | {r['makespan_s_peer']:,.0f} / {r['makespan_s_ours']:,.0f} | "
                     f"{r['preemptions_peer']} / {r['preemptions_ours']} |")
    return "\n".join(lines)


def _tiresias_common(func):
    func = click.option("--repo", default=None, help="Tiresias clone or bare mirror (default "
                        "$ETS_PEER_TIRESIAS_REPO, else GitHub).")(func)
    func = click.option("--scratch", type=click.Path(file_okay=False, path_type=Path), default=None,
                        help="Scratch dir for the checkout, Python 2.7 virtualenv and logs "
                        "(default $ETS_PEER_SCRATCH).")(func)
    func = click.option("--python27", default=None, help="A CPython 2.7 (default $ETS_PEER_PYTHON27, else one "
                        "found on PATH or in pyenv).")(func)
    return func


@main.command("tiresias")
@click.option("--trace", required=True, help="Tiresias trace: a file, or a path inside Tiresias' simulator/ "
              "(e.g. 60_job.csv).")
@click.option("--cluster", default="default", show_default=True,
              help="SWITCHES:NODES_PER_SWITCH:GPUS_PER_NODE (e.g. 1:2:8), nNgG, or default (run_sim.py's 1:32:8).")
@click.option("--schedule", default=TIRESIAS_SCHEDULE, show_default=True)
@click.option("--scheme", default=TIRESIAS_SCHEME, show_default=True,
              help="Placement scheme flag (dlas-gpu ignores it for placement: it counts GPUs).")
@click.option("--demotion-timer", type=click.Choice(TIRESIAS_DEMOTION_TIMERS), default="simulator",
              show_default=True, help="simulator: run_sim.py unmodified; paper: with paper_timer.patch.")
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), default=None, help="Write the JSON here.")
@click.option("--log", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Keep Tiresias' stdout here.")
@_tiresias_common
def tiresias(trace, cluster, schedule, scheme, demotion_timer, out, log, repo, scratch, python27) -> None:
    """Run Tiresias' simulator; print its numbers and write them as JSON."""
    try:
        result = tiresias_reference(trace, cluster, repo=repo, scratch=scratch, schedule=schedule, scheme=scheme,
                                    python27=python27, demotion_timer=demotion_timer, log=log)
    except PeerUnavailable as err:
        click.echo(f"tiresias: unavailable: {err}", err=True)
        sys.exit(EXIT_UNAVAILABLE)
    except ValueError as err:
        raise click.UsageError(str(err)) from None
    click.echo(format_tiresias_summary(result))
    if out:
        write_json(result, out)
        click.echo(f"wrote {out}")


@main.command("tiresias-refs")
@click.option("--out-dir", type=click.Path(file_okay=False, path_type=Path), default=TIRESIAS_DATA, show_default=True)
@_tiresias_common
def tiresias_refs(out_dir, repo, scratch, python27) -> None:
    """Re-make inputs/ and re-measure the Tiresias reference runs kept under experiments/data/peers/tiresias/."""
    try:
        checkout = tiresias_checkout(repo, scratch)
    except PeerUnavailable as err:
        click.echo(f"tiresias: unavailable: {err}", err=True)
        sys.exit(EXIT_UNAVAILABLE)
    inputs = out_dir / "inputs"
    notes = tiresias_inputs(checkout, inputs)
    rows = []
    for (name, trace, cluster, made), timer in ((case, timer) for case in TIRESIAS_CASES
                                                for timer in TIRESIAS_DEMOTION_TIMERS):
        try:
            result = tiresias_reference(inputs / trace, cluster, repo=repo, scratch=scratch, python27=python27,
                                        demotion_timer=timer)
        except PeerUnavailable as err:
            click.echo(f"tiresias: unavailable: {err}", err=True)
            sys.exit(EXIT_UNAVAILABLE)
        result["trace"] |= {"source": f"inputs/{trace}", "input": f"inputs/{trace}", "made": made,
                            "derivation": notes[trace], "generic": f"inputs/{Path(trace).stem}.generic.csv",
                            "generic_gpu_type": TIRESIAS_GPU_TYPE}
        result["our_cluster"] = f"inputs/{name}.cluster.yaml"
        result["command"] = result["command"].replace(str((inputs / trace).resolve()),
                                                      f"experiments/data/peers/tiresias/inputs/{trace}")
        stored = f"{name}.json" if timer == "simulator" else f"{name}.{timer}_timer.json"
        write_json(result, out_dir / stored)
        click.echo(format_tiresias_summary(result))
        s, c = result["summary"], result["cluster"]
        by = " / ".join(f"{s['avg_jct_by_gpus_s'][g]:,.1f}" for g in s["avg_jct_by_gpus_s"])
        rows.append(f"| {stored} | {c['num_switch']}x{c['num_node_p_switch']}x{c['num_gpu_p_node']} ({c['gpus']}) | "
                    f"{s['jobs']} | {s['avg_jct_s']:,.3f} | {by} | {s['makespan_s']:,} | {s['preemptions']} | "
                    f"{s['demotions']} |")
    click.echo("| file | cluster (GPUs) | jobs | avg JCT (s) | by size 1/2/4/8 GPUs (s) | makespan (s) | "
               "preemptions | demotions |")
    click.echo("|---|---|---|---|---|---|---|---|")
    click.echo("\n".join(rows))


@main.command("tiresias-table")
@click.option("--policy", default=OUR_TIRESIAS, show_default=True, help="Our policy spec to put beside Tiresias'.")
@click.option("--timer", type=click.Choice(TIRESIAS_DEMOTION_TIMERS), default="simulator", show_default=True,
              help="Which stored Tiresias runs: simulator (unmodified) or paper (paper_timer.patch).")
def tiresias_table_command(policy, timer) -> None:
    """Our tiresias beside Tiresias' own simulator on the stored cases, per job-size class."""
    click.echo(tiresias_table_markdown(tiresias_table(policy=policy, timer=timer)))



if __name__ == "__main__":
    main()

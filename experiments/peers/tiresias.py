"""Tiresias (SymbioticLab/Tiresias, simulator/): the reference for our ``tiresias`` policy.

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

Tiresias' simulator is Python 2 code (print is a function there, but run_sim.py has no
``from __future__ import division``, so ``/`` between ints floors, and it uses ``sys.maxint``).
It runs unmodified under CPython 2.7 with numpy: ``tiresias_reference`` finds a Python 2.7
(``find_python27``), builds a virtualenv with it once (``tiresias_venv``; Python 2.7 has no
``venv`` module, so ``virtualenv`` is installed from PyPI into a small Python 3 venv first, at
the last release that still creates Python 2 environments), checks the pinned commit out, runs
``simulator/run_sim.py`` and reads its ``job.csv``, ``cluster.csv`` and stdout.

    python -m experiments.peers tiresias --trace 60_job.csv --cluster 1:1:8
    python -m experiments.peers tiresias-refs     # re-make inputs/ and experiments/data/peers/tiresias/*.json
    python -m experiments.peers tiresias-table    # ours (tiresias:restart=0) beside the stored runs
"""

from __future__ import annotations

import contextlib
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
        clone_at(source, dest, commit, "Tiresias", "ETS_PEER_TIRESIAS_REPO")
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

"""What both peers share: the scratch directory, locking, git, the two errors, a run as JSON.

Anything missing to run a peer (git, the network or mirror, the packages) raises
``PeerUnavailable`` with the reason: a harness skips on it (the commands exit
``EXIT_UNAVAILABLE``). A peer that ran and failed raises ``PeerFailed``. Checkouts, environments
and runs go under ``scratch_dir()``: ``$ETS_PEER_SCRATCH`` (default ``$TMPDIR/ets-peers``), each
built once under a lock. ``DATA`` is experiments/data/peers/, where the stored runs are kept.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import subprocess
from pathlib import Path

DATA = Path(__file__).resolve().parent.parent / "data" / "peers"
EXIT_UNAVAILABLE = 75  # EX_TEMPFAIL: the peer could not be run here; nothing is wrong with ours


class PeerUnavailable(RuntimeError):
    """The peer cannot be run here (no git, no network or mirror, packages not installable)."""


class PeerFailed(RuntimeError):
    """The peer ran and failed (a non-zero exit, or output this module cannot read)."""


# --------------------------------------------------------------------------------------------
# Scratch, locking, git
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


def clone_at(source: str, dest: Path, commit: str, peer: str, variable: str) -> None:
    """A fresh clone of ``source`` into ``dest`` (no checkout) holding ``commit`` (fetched if the
    clone lacks it); PeerUnavailable naming ``peer`` and ``variable`` when it cannot be had."""
    shutil.rmtree(dest, ignore_errors=True)
    if "://" not in source and not Path(source).exists():
        raise PeerUnavailable(f"no {peer} repository at {source} ({variable} / --repo)")
    done = _git("clone", "--quiet", "--no-checkout", source, str(dest))
    if done.returncode != 0:
        raise PeerUnavailable(f"cannot clone {source}: {done.stderr.strip()[-400:]}")
    if _git("cat-file", "-e", f"{commit}^{{commit}}", cwd=dest).returncode != 0:
        done = _git("fetch", "--quiet", "origin", commit, cwd=dest)
        if done.returncode != 0:
            raise PeerUnavailable(f"commit {commit} is not in {source}: {done.stderr.strip()[-300:]}")


def _sha256(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


# --------------------------------------------------------------------------------------------
# A run as JSON
# --------------------------------------------------------------------------------------------

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

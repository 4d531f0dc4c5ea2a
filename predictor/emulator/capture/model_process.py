"""Capture model files in a child process, under a time limit and a memory limit.

Why: ``--model-file`` runs the file's code (:mod:`predictor.emulator.capture.model_file`), as it must; but a
file that loops at import (``while True``) would hang the command forever, and one that allocates
without end would take the machine down with it. So every command that takes ``--model-file``
(``ets devices time``, ``ets collect``, ``ets predict``) captures through :func:`capture_files`:
one child Python process for all the files of a run (one torch import), the files in
order, each within the ``model_seconds`` limit (its import, its model's construction and its capture), the
whole child within the ``model_bytes`` limit of address space (``RLIMIT_AS``, soft and hard: the file's code
cannot raise it). The parent gets data back, never objects: per file a JSON header and the trace
table as Parquet bytes (no pickle), which it validates again (:func:`predictor.common.op_trace.validate`);
nothing of the file runs in the parent.

* A file over the time limit: the child (and anything it started: it leads its own session) is
  killed, that file fails in one line naming the limit and how to raise it, and a new child
  captures the files after it.
* Over the memory limit: Python's ``MemoryError`` or torch's "can't allocate memory" inside the
  file's code fails that file in one line naming the limit (the child goes on); a child that dies
  instead (a C extension that aborts or crashes when ``malloc`` fails, or ``os._exit``) fails the
  file it was capturing, with its exit status and the limit named, and a new child goes on.
* Limits (one pair for every command; environment variables, so no command grows new flags):
  ``ETS_SIM_MAX_MODEL_SECONDS`` (default 600 s per file) and ``ETS_SIM_MAX_MODEL_BYTES``
  (default 16 GiB of address space), both far above the slowest and largest captures measured
  (docs/benchmarks.md, model-file capture): address space counts what torch maps, not what it
  uses, and threads map stacks and, capped here at 4, malloc arenas on top, so the margin is for
  many-core machines. What the file prints goes to stderr, as before.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pandas as pd

from predictor.common.inputs import LIMITS, limit, short
from predictor.emulator.capture.model_file import ModelFileError

MAX_HEADER = 64 * 1024  # bytes of one JSON header from the child
STARTUP_GRACE = 120.0  # seconds the child may take to start (its torch import) before the first file's clock


def time_note(seconds: float) -> str:
    return f"the model-file time limit of {seconds:,.0f} s; raise it with {LIMITS['model_seconds'].variable}=N"


def address_cap(nbytes: int) -> int:
    """The child's address-space limit: ``nbytes``, never above a hard limit the user's shell set
    already (asking for more is refused by the kernel, and the child would die before any file)."""
    import resource

    _, hard = resource.getrlimit(resource.RLIMIT_AS)
    return nbytes if hard == resource.RLIM_INFINITY else min(nbytes, hard)


def memory_note(nbytes: int) -> str:
    """The limit a failed file ran under, and how to raise it."""
    cap = address_cap(nbytes)
    if cap < nbytes:
        return (f"the shell's address-space limit of {cap / 2**30:,.1f} GiB ({cap:,.0f} bytes, ulimit -v), "
                f"below {LIMITS['model_bytes'].variable}; raise it in the shell")
    return (f"the model-file memory limit of {nbytes / 2**30:,.1f} GiB ({nbytes:,.0f} bytes); "
            f"raise it with {LIMITS['model_bytes'].variable}=N")


# ---------------------------------------------------------------------------------------------
# the parent


def capture_files(paths: list[str], *, inference: bool = False, dtype: str = "float32",
                  optimizer: str = "sgd") -> Iterator[tuple[str, pd.DataFrame | ModelFileError]]:
    """(path, trace) or (path, ModelFileError) for each of ``paths``, in order, captured in a
    child process (module docstring). InputError for a bad limit variable, before any child."""
    seconds, nbytes = limit("model_seconds"), limit("model_bytes")
    options = {"inference": inference, "dtype": dtype, "optimizer": optimizer}
    rest = list(paths)
    while rest:
        with _Child(nbytes) as child:
            child.send({"paths": rest, "options": options})
            while rest:
                outcome = child.next_result(rest[0], seconds)
                yield rest.pop(0), outcome
                if child.dead:  # killed or crashed: the files after it get a new child
                    break


class _Child:
    """One capture process: a request on its stdin, framed results on its stdout."""

    def __init__(self, nbytes: float) -> None:
        env = {**os.environ, "MALLOC_ARENA_MAX": os.environ.get("MALLOC_ARENA_MAX", "4")}
        root = str(Path(__file__).resolve().parents[3])  # this very package, not one of the current folder
        code = f"import sys; sys.path.insert(0, {root!r}); from {__name__} import _serve; _serve({int(nbytes)})"
        self.nbytes = nbytes
        self.process = subprocess.Popen(  # -P: the current folder is not on sys.path (its torch.py is not torch)
            [sys.executable, "-P", "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env,
            start_new_session=True)
        self.buffer = b""
        self.dead = False
        self.started = False

    def __enter__(self) -> _Child:
        return self

    def __exit__(self, *exc) -> None:
        self.kill()

    def send(self, request: dict) -> None:
        with contextlib.suppress(OSError):  # a child dead at once is reported by next_result
            self.process.stdin.write(json.dumps(request).encode() + b"\n")
            self.process.stdin.close()

    def kill(self) -> None:
        """The child and whatever it started (its session), at once; then reaped (until then its
        PID, the group's id, cannot be reused)."""
        with contextlib.suppress(OSError):
            os.killpg(self.process.pid, signal.SIGKILL)
        with contextlib.suppress(OSError):
            self.process.stdout.close()
        self.process.wait()
        self.dead = True

    def next_result(self, path: str, seconds: float) -> pd.DataFrame | ModelFileError:
        """The outcome of ``path``, the next file: its trace, or the one-line error."""
        deadline = time.monotonic() + (seconds if self.started else max(seconds, STARTUP_GRACE))  # to "start"
        while True:
            header = self._line(deadline)
            if header is None:
                return self._lost(path, deadline, seconds)
            kind = header.get("kind")
            if kind == "start":  # the file's clock starts now
                self.started = True
                deadline = time.monotonic() + seconds
            elif kind == "error":
                return ModelFileError(path, str(header.get("message", "failed")).removeprefix(f"{path}: "))
            elif kind == "trace":
                data = self._exactly(int(header.get("bytes", -1)), deadline)
                if data is None:
                    return self._lost(path, deadline, seconds)
                return _table(path, data)
            else:
                self.kill()
                return ModelFileError(path, f"the capture process sent {short(header)}; it was stopped")

    def _lost(self, path: str, deadline: float, seconds: float) -> ModelFileError:
        timed_out = time.monotonic() >= deadline
        self.kill()
        if timed_out and not self.started:
            return ModelFileError(path, f"the capture process did not start (import Python and torch) within "
                                        f"{max(seconds, STARTUP_GRACE):,.0f} s; is the machine overloaded?")
        if timed_out:
            return ModelFileError(path, f"did not finish within {seconds:,.0f} s ({time_note(seconds)})")
        code = self.process.returncode
        how = (f"killed by {signal.Signals(-code).name}" if code is not None and code < 0
               and -code in signal.valid_signals() else f"exit status {code}")
        return ModelFileError(path, f"the capture process ended ({how}) while capturing it; if it ran out of "
                                    f"memory: {memory_note(self.nbytes)}")

    def _fill(self, deadline: float) -> bool:
        """Read what the child wrote, waiting until ``deadline``; False at its end or the deadline."""
        fd = self.process.stdout.fileno()
        wait = max(0.0, deadline - time.monotonic())
        ready, _, _ = select.select([fd], [], [], wait)
        if not ready:
            return False
        chunk = os.read(fd, 1 << 20)
        self.buffer += chunk
        return bool(chunk)

    def _line(self, deadline: float) -> dict | None:
        while b"\n" not in self.buffer[:MAX_HEADER]:
            if len(self.buffer) > MAX_HEADER or not self._fill(deadline):
                return None
        line, self.buffer = self.buffer.split(b"\n", 1)
        try:
            header = json.loads(line)
        except ValueError:
            return None
        return header if isinstance(header, dict) else None

    def _exactly(self, n: int, deadline: float) -> bytes | None:
        from predictor.common.inputs import limit

        if not 0 <= n <= limit("file_bytes"):
            return None
        while len(self.buffer) < n:
            if not self._fill(deadline):
                return None
        data, self.buffer = self.buffer[:n], self.buffer[n:]
        return data


def _table(path: str, data: bytes) -> pd.DataFrame | ModelFileError:
    """The child's Parquet bytes as a validated trace table."""
    from predictor.common.op_trace import OpTraceFormatError, validate

    try:
        return validate(pd.read_parquet(io.BytesIO(data)), path)
    except (OpTraceFormatError, ValueError, OSError) as exc:
        return ModelFileError(path, f"its capture gave an unreadable table ({' '.join(str(exc).split())})")


# ---------------------------------------------------------------------------------------------
# the child


def _serve(nbytes: int) -> None:
    """Capture the requested files in order, writing a header (and Parquet bytes) per file."""
    import resource

    out = os.fdopen(os.dup(1), "wb")  # the results; fd 1 itself goes to stderr, like the file's prints
    os.dup2(2, 1)
    cap = address_cap(nbytes)
    resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
    request = json.loads(sys.stdin.readline())
    from predictor.emulator.capture import model_file
    from predictor.emulator.capture.quiet import quiet_profiler

    model_file.MEMORY_NOTE = memory_note(nbytes)

    for path in request["paths"]:
        _send(out, {"kind": "start"})
        try:
            with quiet_profiler():
                table = model_file.capture_model_file(path, **request["options"])
            buffer = io.BytesIO()
            table.to_parquet(buffer, index=False)
        except ModelFileError as exc:
            _send(out, {"kind": "error", "message": str(exc)})
            continue
        except MemoryError:
            _send(out, {"kind": "error", "message": f"{path}: ran out of memory ({model_file.MEMORY_NOTE})"})
            continue
        _send(out, {"kind": "trace", "bytes": buffer.getbuffer().nbytes}, buffer.getvalue())


def _send(out, header: dict, payload: bytes = b"") -> None:
    out.write(json.dumps(header).encode() + b"\n" + payload)
    out.flush()

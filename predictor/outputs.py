"""Writing results so that they are never half-written, and refusing an unusable output folder
before any work starts.

Why: a run that fails to write at the end (read-only folder, full disk) must not leave a
truncated file that looks like a result, nor replace a good old file with a broken one; and a
user should learn that ``--out`` is unusable in one line at the start, not from a traceback
after an hour of simulation. Every writer of a result file in the package goes through here.
It sits in the lowest layer (``predictor``) so that every package may use it.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from pathlib import Path
from typing import Iterator

import pandas as pd


class OutputError(Exception):
    """An output location that cannot be written (the message names it and says why)."""


def _temporary_name(path: Path) -> Path:
    return path.with_name(f".{path.name}.tmp-{os.getpid()}")


def _reason(exc: OSError) -> str:
    return exc.strerror or type(exc).__name__


@contextlib.contextmanager
def atomic_file(path: str | Path) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; on success rename it onto ``path``, on any error
    delete it (the old ``path``, if any, stays as it was) and raise :class:`OutputError` for
    OS errors."""
    path = Path(path)
    tmp = _temporary_name(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        yield tmp
        os.replace(tmp, path)
    except OSError as exc:
        raise OutputError(f"cannot write {path}: {_reason(exc)}") from None
    finally:
        with contextlib.suppress(OSError):
            tmp.unlink()


@contextlib.contextmanager
def atomic_dir(path: str | Path) -> Iterator[Path]:
    """Yield an empty temporary folder beside ``path``; on success it replaces ``path`` (an old
    folder of that name is removed only after the new one is complete)."""
    path = Path(path)
    tmp = _temporary_name(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        if tmp.exists():
            shutil.rmtree(tmp)
        tmp.mkdir()
        yield tmp
        if path.exists():
            old = path.with_name(f".{path.name}.old-{os.getpid()}")
            os.replace(path, old)
            os.replace(tmp, path)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, path)
    except OSError as exc:
        raise OutputError(f"cannot write {path}: {_reason(exc)}") from None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def write_text(path: str | Path, text: str) -> Path:
    with atomic_file(path) as tmp:
        tmp.write_text(text)
    return Path(path)


def write_parquet(path: str | Path, frame: pd.DataFrame) -> Path:
    with atomic_file(path) as tmp:
        frame.to_parquet(tmp, index=False)
    return Path(path)


def check_writable(folder: str | Path) -> Path:
    """Create ``folder`` if needed and prove that a file can be written in it; else one-line
    :class:`OutputError`. Call it before the work whose results go there."""
    folder = Path(folder)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".write-check-"):
            pass
    except OSError as exc:
        raise OutputError(f"cannot write to {folder}: {_reason(exc)}") from None
    return folder


def claim_folder(folder: str | Path, option: str = "--out") -> Path:
    """``folder`` as a writable folder for one new run: new or empty. A folder that already
    holds files is refused: another run's files kept beside the new ones would mix two runs."""
    folder = Path(folder)
    if folder.exists() and not folder.is_dir():
        raise OutputError(f"{option} {folder} is a file, not a folder")
    if folder.is_dir() and any(folder.iterdir()):
        raise OutputError(f"{option} {folder} already holds files of another run; choose a new folder, "
                          f"or pass --overwrite to replace that run")
    return check_writable(folder)

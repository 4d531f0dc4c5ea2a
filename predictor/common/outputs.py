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
import errno
import os
import shutil
import stat
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pandas as pd

from predictor.common.inputs import OutputError


def _reason(exc: OSError) -> str:
    return exc.strerror or type(exc).__name__


def _umask() -> int:
    """This process's umask, read without setting it (``os.umask`` sets it for every thread a
    moment); 0o022 where /proc does not say."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    return 0o022


def _open_mode(fd: int, mode: int) -> None:
    """Give the temporary file or folder open on ``fd`` the mode a plain create would (mkstemp
    and mkdtemp make them private), by its descriptor: a path could be swapped meanwhile."""
    os.fchmod(fd, mode & ~_umask())


def _temporary_file(path: Path) -> Path:
    """A new empty file beside ``path`` under an unpredictable name, created exclusively
    (``O_EXCL``: a planted file or symbolic link of that name is never opened, another name is
    drawn). The ``.NAME.tmp-`` prefix marks an interrupted write's leftover for the cleaners."""
    fd, name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.tmp-")
    try:
        _open_mode(fd, 0o666)
    finally:
        os.close(fd)
    return Path(name)


def _temporary_dir(path: Path, kind: str = "tmp") -> Path:
    """A new empty folder beside ``path`` under an unpredictable name (``mkdtemp``: never an
    existing entry)."""
    tmp = Path(tempfile.mkdtemp(dir=path.parent, prefix=f".{path.name}.{kind}-"))
    fd = os.open(tmp, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    try:
        _open_mode(fd, 0o777)
    finally:
        os.close(fd)
    return tmp


@contextlib.contextmanager
def atomic_file(path: str | Path) -> Iterator[Path]:
    """Yield a new temporary file beside ``path`` (:func:`_temporary_file`); on success rename it
    onto ``path``, on any error delete it (the old ``path``, if any, stays as it was) and raise
    :class:`OutputError` for OS errors. A ``path`` that is a symbolic link is replaced by the
    rename, never written through."""
    path = Path(path)
    tmp: Path | None = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = _temporary_file(path)
        yield tmp
        os.replace(tmp, path)
    except OSError as exc:
        raise OutputError(f"cannot write {path}: {_reason(exc)}") from None
    finally:
        if tmp is not None:
            with contextlib.suppress(OSError):
                tmp.unlink()


@contextlib.contextmanager
def atomic_dir(path: str | Path) -> Iterator[Path]:
    """Yield an empty temporary folder beside ``path`` (:func:`_temporary_dir`); on success it
    replaces ``path`` (an old folder of that name is moved aside and removed only after the new
    one is in place; a symbolic link of that name is replaced, its target left alone)."""
    path = Path(path)
    tmp = aside = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = _temporary_dir(path)
        yield tmp
        if os.path.lexists(path):
            aside = _temporary_dir(path, "old")
            os.replace(path, aside / path.name)
            try:
                os.replace(tmp, path)
            except OSError:
                os.replace(aside / path.name, path)  # the old folder back in place
                raise
        else:
            os.replace(tmp, path)
    except OSError as exc:
        raise OutputError(f"cannot write {path}: {_reason(exc)}") from None
    finally:  # rmtree never follows a link; the old folder goes only once it is not the one copy
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
        if aside is not None and (os.path.lexists(path) or not os.path.lexists(aside / path.name)):
            shutil.rmtree(aside, ignore_errors=True)


def inside(root: str | Path, *parts: str) -> Path:
    """The path of entry ``parts`` under the output folder ``root``, refused (one-line
    :class:`OutputError` naming it) when an existing component below ``root`` is a symbolic link.

    Why: a run, sweep or figures folder may be shared, or handed over; a link planted in it
    (``truth/``, ``runs/``, ``plots/``, a file) would send our writes, and our removals of an
    earlier run's files, into the folder it names. ``root`` itself is taken as the user gave it
    (it may be a link). Every file and folder written or replaced below an output root is named
    through here."""
    path = Path(root)
    for part in Path(*parts).parts if parts else ():
        if part in ("", ".", "..") or os.sep in part:
            raise ValueError(f"not an entry name: {part!r}")
        path = path / part
        try:
            is_link = stat.S_ISLNK(os.lstat(path).st_mode)
        except FileNotFoundError:
            break  # nothing below a missing entry exists yet
        except OSError as exc:
            raise OutputError(f"cannot write {path}: {_reason(exc)}") from None
        if is_link:
            raise OutputError(f"{path} is a symbolic link; refusing to write through it (it may have been "
                              f"planted to redirect our files): remove it, or choose another folder")
    return Path(root).joinpath(*parts)


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
    if folder.is_dir() and any(entry.name != LOCK_NAME for entry in folder.iterdir()):
        raise OutputError(f"{option} {folder} already holds files of another run; choose a new folder, "
                          f"or pass --overwrite to replace that run")
    return check_writable(folder)


def claim_file(path: str | Path, overwrite: bool, *, option: str = "--out",
               is_ours: Callable[[Path], bool] | None = None) -> Path:
    """``path`` as the destination of one file, checked before the work that produces it: an
    existing file is replaced only with ``overwrite``, and then only a regular file that
    ``is_ours`` recognises (a mistyped path must not replace an unrelated file); its folder must
    be writable. One-line :class:`OutputError` otherwise."""
    path = Path(path)
    if path.is_dir():
        raise OutputError(f"{option} {path} is a folder, not a file")
    if path.exists() or path.is_symlink():
        if not path.is_file():
            raise OutputError(f"{option} {path} exists and is not a regular file; choose another path")
        if not overwrite:
            raise OutputError(f"{option} {path} already exists; pass --overwrite to replace it, or choose another path")
        if is_ours is not None and not is_ours(path):
            raise OutputError(f"{option} {path} exists and is not a file this command writes; "
                              "--overwrite replaces only those: choose another path")
    try:
        check_writable(path.parent)
    except OutputError as exc:
        raise OutputError(f"{option} {path}: {exc}") from None
    return path


LOCK_NAME = ".lock"  # held by the run writing into a folder; holds its PID


@contextlib.contextmanager
def locked_folder(folder: str | Path, option: str = "--out") -> Iterator[Path]:
    """Hold ``folder`` (created if needed) for one run: a second run into it is refused at once with
    one line naming the first's PID, instead of both running and one's results vanishing. The
    lock is an ``flock`` on ``folder/.lock``: the kernel releases it when the holder dies, even by
    SIGKILL, so a stale lock never blocks; the file is removed when the run ends."""
    import fcntl

    folder = Path(folder)
    if folder.exists() and not folder.is_dir():
        raise OutputError(f"{option} {folder} is a file, not a folder")
    lock = folder / LOCK_NAME
    for _ in range(10):  # retried only if the file is replaced between open and flock
        try:
            folder.mkdir(parents=True, exist_ok=True)
            # O_NOFOLLOW: a link planted as .lock must not have its target truncated to our PID
            fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise OutputError(f"{option} {folder}: its lock file {lock} is a symbolic link; refusing to "
                                  "write through it: remove it, or choose another folder") from None
            raise OutputError(f"cannot write to {folder}: {_reason(exc)}") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            holder = os.read(fd, 32).decode("ascii", "replace").strip() or "unknown"
            os.close(fd)
            raise OutputError(f"{option} {folder} is in use by another run (PID {holder}); wait for it to "
                              "end, or choose another folder") from None
        try:
            same = os.fstat(fd).st_ino == os.lstat(lock).st_ino
        except FileNotFoundError:
            same = False
        if same:
            break
        os.close(fd)  # the holder removed the file as we opened it: lock the new one
    else:
        raise OutputError(f"{option} {folder}: cannot take its lock file {lock} (replaced repeatedly)")
    try:
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        yield folder
    finally:
        with contextlib.suppress(OSError):
            lock.unlink()
        os.close(fd)


def remove_if_empty(folder: str | Path) -> None:
    """Remove ``folder`` if nothing is in it (a failed run's own new folder must not be left)."""
    with contextlib.suppress(OSError):
        Path(folder).rmdir()

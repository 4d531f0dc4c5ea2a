"""Iteration-time tables: seconds per training iteration of every catalog config on every GPU type,
true and as each predictor sees them, cached on disk — the one concept every model-based
predictor reduces to (:class:`IterationTimeTable`), and its one home.

Why: the simulator never runs a model; a job bound to a config runs ``iterations × seconds`` on a
GPU type. The truth is the config's execution trace on the (emulated) device; a predictor's table
is what its pretrained checkpoint predicts for the same op sequence — ETS, the operator-based MLP
and DNNPerf-style from the sequence alone, Habitat-style from the trace measured on its source
device (the checkpoint names it). Tables are cached as Parquet under ``$ETS_SIM_CACHE`` (default
``~/.cache/ets-sim/tables``), keyed by the method, the checkpoint files' hashes, the configs, the
devices and the emulator parameters, so a change of any of them recomputes.

A cache shared between users is a file from a stranger, and a content hash proves nothing to it
(whoever edits a table recomputes it). So each cache table carries an HMAC-SHA256 of its content
and its cache key under the cache's own secret (``tables/.key``: 32 random bytes, created with
the cache, mode 0600, refused unless it is a private regular file of this user): a table edited,
forged, truncated, moved to another key or written by an older version is rebuilt with a
warning, never used. A table saved outside the cache (:meth:`IterationTimeTable.save`) carries
the plain content hash, which catches corruption, not forgery.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
import stat
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd
from tqdm import tqdm

from predictor.common.inputs import InputError, printable, read_parquet_arrow, short
from predictor.methods import METHODS, info

if TYPE_CHECKING:
    from predictor.checkpoints import Pretrained


class IterationTimeTable:
    """Seconds per training iteration for (config_id, device): what every model-based predictor emits."""

    COLUMNS = ("config_id", "device", "seconds")

    def __init__(self, table: pd.DataFrame, source: str = "<table>"):
        missing = [c for c in self.COLUMNS if c not in table.columns]
        if missing:
            raise ValueError(f"{source}: iteration-time table lacks column(s) {missing}")
        seconds = pd.to_numeric(table["seconds"], errors="coerce").to_numpy(dtype="float64")
        bad = ~(np.isfinite(seconds) & (seconds > 0))  # text, NaN, inf or <= 0
        if bad.any():
            row = table.iloc[int(np.argmax(bad))]
            raise ValueError(f"{source}: non-positive seconds for config {short(row.config_id)} on {short(row.device)} "
                             f"(got {short(row.seconds)})")
        self.source = source
        self.warnings: list[str] = []  # what happened to it on the way (a cache table rebuilt)
        self._index = {(str(c), str(d)): float(s) for c, d, s in
                       zip(table["config_id"], table["device"], seconds)}
        if len(self._index) < len(table):
            twice = (table["config_id"].astype(str) + "\0" + table["device"].astype(str)).duplicated().to_numpy()
            row = table.iloc[int(np.argmax(twice))]
            raise ValueError(f"{source}: config {short(row.config_id)} on {short(row.device)} appears more than once "
                             f"({int(twice.sum()):,} repeated row(s)); a table has one time per config and device")

    def __len__(self) -> int:
        return len(self._index)

    def seconds(self, config_id: str, device: str) -> float:
        try:
            return self._index[(str(config_id), str(device))]
        except KeyError:
            raise KeyError(f"{self.source}: no iteration time for config {short(str(config_id))} on device "
                           f"{short(str(device))}") from None

    def matrix(self, config_ids, devices: list[str]) -> np.ndarray:
        return np.array([[self.seconds(c, d) for d in devices] for c in config_ids], dtype="float64")

    def to_frame(self) -> pd.DataFrame:
        return pd.DataFrame([(c, d, s) for (c, d), s in self._index.items()], columns=list(self.COLUMNS))

    def save(self, path: str | Path) -> None:
        """Write the table as Parquet with its content hash (:func:`write_table`)."""
        write_table(self.to_frame(), path)

    @classmethod
    def load(cls, path: str | Path) -> IterationTimeTable:
        """A table file (any Parquet with the three columns), checked before it is trusted: a
        FIFO, an over-size or unreadable file, or a recorded content hash that does not match is
        refused in one line (ValueError). A file without a hash (made by hand) is taken as is."""
        frame, problem = read_table(path)
        if problem is not None and problem != NO_HASH:
            raise ValueError(f"{path}: iteration-time table refused: {problem}")
        return cls(frame, str(path))


# -- table files: content-hashed Parquet ------------------------------------------------------------

HASH_KEY = b"ets_sim.content_sha256"  # Parquet key-value metadata: the SHA-256 of content_hash's text
MAC_KEY = b"ets_sim.hmac_sha256"  # a cache table's HMAC of (its cache key, its content hash) under the cache's secret
NO_HASH = "no content hash recorded (written by an older version, or by hand)"


def content_hash(table: pd.DataFrame) -> str:
    """SHA-256 of a table's canonical content: its rows sorted by (config_id, device), each as
    ``config_id, device, repr(seconds)`` (exact for floats), so the same numbers hash the same
    whatever the row order, the Parquet encoding or the pandas version."""
    rows = sorted(zip(table["config_id"].astype(str), table["device"].astype(str),
                      (repr(float(x)) for x in table["seconds"])))
    h = hashlib.sha256()
    for config, device, seconds in rows:
        h.update(f"{config}\t{device}\t{seconds}\n".encode("utf-8", "surrogatepass"))
    return h.hexdigest()


def table_mac(secret: bytes, name: str, digest: str) -> str:
    """HMAC-SHA256 (hex) of a cache table's key ``name`` and its :func:`content_hash` ``digest``
    under the cache's ``secret``: the name is signed too, so a valid table copied under another
    key (other configs, other GPUs) fails."""
    return hmac.new(secret, f"{name}\n{digest}".encode("utf-8", "surrogatepass"), hashlib.sha256).hexdigest()


def write_table(table: pd.DataFrame, path: str | Path, *, signed: tuple[bytes, str] | None = None) -> None:
    """``table``'s three columns as Parquet, its :func:`content_hash` in the file's metadata, and
    with ``signed`` = (the cache's secret, the table's cache key) its :func:`table_mac`."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    frame = table[list(IterationTimeTable.COLUMNS)].reset_index(drop=True)
    arrow = pa.Table.from_pandas(frame, preserve_index=False)
    digest = content_hash(frame)
    metadata = {**(arrow.schema.metadata or {}), HASH_KEY: digest.encode()}
    if signed is not None:
        metadata[MAC_KEY] = table_mac(*signed, digest).encode()
    pq.write_table(arrow.replace_schema_metadata(metadata), path)


def read_table(path: str | Path, *, signed: tuple[bytes, str] | None = None) -> tuple[pd.DataFrame | None, str | None]:
    """(the table, None) when ``path`` holds a table whose content matches its recorded hash and,
    with ``signed`` = (the cache's secret, the table's cache key), its HMAC; else (the table or
    None, what is wrong: no hash (:data:`NO_HASH`), a different hash or HMAC, a truncated or
    unreadable file). Only FileNotFoundError escapes."""
    import pyarrow as pa

    try:
        arrow = read_parquet_arrow(path, "iteration-time table")
        frame = arrow.to_pandas()
    except FileNotFoundError:
        raise
    except InputError as exc:  # a FIFO, a device, an over-size file
        return None, str(exc)
    except (pa.ArrowException, OSError, ValueError) as exc:
        first = (str(exc).splitlines() or [type(exc).__name__])[0]
        return None, f"unreadable: truncated, or not Parquet ({type(exc).__name__}: {short(first, 200)})"
    missing = [c for c in IterationTimeTable.COLUMNS if c not in frame.columns]
    if missing:
        return None, f"lacks column(s) {missing}"
    recorded = (arrow.schema.metadata or {}).get(HASH_KEY)
    if recorded is None:
        return frame, NO_HASH
    try:
        actual = content_hash(frame)
    except (TypeError, ValueError) as exc:  # seconds that are not numbers
        return None, f"content unreadable ({type(exc).__name__})"
    if recorded != actual.encode():
        text = recorded.decode("ascii", "replace")
        shown = (f"{text[:12]}…" if len(text) == 64 and all(c in "0123456789abcdef" for c in text)
                 else "a malformed hash")
        return None, f"content hash {actual[:12]}… differs from the recorded {shown}"
    if signed is not None:
        mac = (arrow.schema.metadata or {}).get(MAC_KEY)
        if mac is None:
            return None, "no HMAC recorded (written by an older version, or not by this cache)"
        if not hmac.compare_digest(mac, table_mac(*signed, actual).encode()):
            return None, ("its HMAC does not match this cache's key (edited with its hash recomputed, written "
                          "under another cache key, or copied from another cache)")
    return frame, None


def cache_dir() -> Path:
    """Where cache tables live: ``$ETS_SIM_CACHE/tables`` (default ``~/.cache/ets-sim/tables``).
    InputError for a variable set to nothing (it would put the cache in ``./tables``)."""
    root = os.environ.get("ETS_SIM_CACHE")
    if root is None:
        return Path.home() / ".cache" / "ets-sim" / "tables"
    if not root.strip():
        raise InputError("ETS_SIM_CACHE is set but empty: name a folder for the table cache, or unset it "
                         "for ~/.cache/ets-sim")
    return Path(root) / "tables"


KEY_FILE = ".key"  # the cache's secret, beside its tables
KEY_BYTES = 32


def open_cache() -> tuple[Path, bytes]:
    """The cache folder, proved a writable directory, and its secret (created with the cache):
    checked before any table is built, so an unusable cache fails in one line at the start, not
    after minutes of work. InputError naming the folder or key file and what to do."""
    from predictor.common.outputs import OutputError, check_writable

    folder = cache_dir()
    if folder.is_symlink():  # a link planted in a shared cache would send our writes elsewhere
        raise InputError(f"table cache {printable(folder)} is a symbolic link; remove it (a new cache is made) "
                         "or set ETS_SIM_CACHE to the folder it names")
    try:
        check_writable(folder)
    except OutputError as exc:
        raise InputError(f"table cache (ETS_SIM_CACHE): {exc}; set ETS_SIM_CACHE to a writable folder") from None
    return folder, _cache_secret(folder / KEY_FILE)


def _cache_secret(path: Path) -> bytes:
    """The cache's secret at ``path``: read if there, else created atomically (written in full
    under a private temporary name, then hard-linked into place, so a concurrent run reads a
    whole key or makes its own and loses the race cleanly). Only a private regular file of this
    user is a secret: a link, another user's file, or one that others may read is refused."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except FileNotFoundError:
        fd = None
    except OSError as exc:  # ELOOP: a symbolic link
        raise InputError(f"table cache key {printable(path)}: cannot be opened as a private file "
                         f"({exc.strerror}); remove it: a new key is made and every table rebuilt") from None
    if fd is None:
        import tempfile

        made, tmp = tempfile.mkstemp(dir=path.parent, prefix=".key-")  # mode 0600
        try:
            os.write(made, secrets.token_bytes(KEY_BYTES))
            os.fsync(made)
            os.close(made)
            try:
                os.link(tmp, path)
            except FileExistsError:  # another run made it first: use theirs
                pass
        finally:
            os.unlink(tmp)
        return _cache_secret(path)
    try:
        info = os.fstat(fd)
        problem = ("not a regular file" if not stat.S_ISREG(info.st_mode)
                   else f"owned by user {info.st_uid}, not by you" if info.st_uid != os.geteuid()
                   else f"readable or writable by others (mode {stat.S_IMODE(info.st_mode):o})"
                   if info.st_mode & 0o077 else None)
        secret = os.read(fd, KEY_BYTES + 1) if problem is None else b""
    finally:
        os.close(fd)
    if problem is None and len(secret) != KEY_BYTES:
        problem = f"{len(secret)} bytes, not {KEY_BYTES}"
    if problem is not None:
        raise InputError(f"table cache key {printable(path)} is {problem}: tables in this cache cannot be "
                         "authenticated; remove the key (a new one is made and every table rebuilt) or set "
                         "ETS_SIM_CACHE to a private folder")
    return secret


TRUTH_PHASES = ("iteration", "backward")


def _digest(*parts: object) -> str:
    h = hashlib.sha1()
    for part in parts:
        h.update(part if isinstance(part, bytes) else repr(part).encode())
    return h.hexdigest()[:16]


def emulated_traces(sequences: pd.DataFrame, gpus: Sequence[str], params,
                    bar: tqdm | None = None) -> dict[str, pd.DataFrame]:
    """Each config's trace on each emulated GPU of ``gpus``, by GPU; a config's op arrays are built
    once for all of them; ``bar`` advances by one per config and GPU."""
    from predictor.emulator.devices.timing import OpArrays, emulate_arrays

    parts: dict[str, list[pd.DataFrame]] = {gpu: [] for gpu in gpus}
    for _, seq in sequences.groupby("config_id", sort=True):
        seq = seq.sort_values("idx").reset_index(drop=True)
        ops = OpArrays.from_trace(seq)
        for gpu in parts:
            parts[gpu].append(emulate_arrays(seq, ops, gpu, params, seed=0))
            if bar is not None:
                bar.update(1)
    return {gpu: pd.concat(frames, ignore_index=True) for gpu, frames in parts.items()}


def _bar(total: int, desc: str, unit: str, progress: bool) -> tqdm:
    """A progress bar on stderr with an ETA for a table that is being built (minutes, once)."""
    return tqdm(total=total, desc=desc, unit=unit, file=sys.stderr, disable=not progress, leave=False)


def _seconds(summary: pd.DataFrame, gpu: str, column: str) -> pd.DataFrame:
    return pd.DataFrame({"config_id": summary["config_id"], "device": gpu, "seconds": summary[column] / 1e6})


def _cached(key: str, build, source: str, warn: Callable[[str], None] | None = None) -> IterationTimeTable:
    """The table under ``key`` in the cache, trusted only when its content matches the hash
    written with it; else (no hash, another hash, a truncated or unreadable file, a table that
    fails its checks) ``warn`` gets one line and the table is rebuilt and rewritten. ``warn``
    defaults to a ``warning:`` line on stderr; the table's ``warnings`` keep the line too."""
    folder, secret = open_cache()
    path = folder / f"{key}.parquet"
    problem = None
    if path.exists() or path.is_symlink():
        frame, problem = read_table(path, signed=(secret, key))
        if problem is None:
            try:
                return IterationTimeTable(frame, f"{source} (cache {path})")
            except ValueError as exc:  # signed, yet not a valid table: written by a broken version
                problem = short(str(exc), 200)
    table = build()
    _store(folder, secret, key, table)
    result = IterationTimeTable(table, source)
    if problem is not None:
        line = f"cache table {path} does not match its hash: rebuilt ({problem})"
        result.warnings.append(line)
        (warn or stderr_warning)(line)
    return result


def _store(folder: Path, secret: bytes, key: str, table: pd.DataFrame) -> None:
    """Write ``table`` into the cache under ``key``, signed."""
    from predictor.common.outputs import OutputError, atomic_file

    try:
        with atomic_file(folder / f"{key}.parquet") as tmp:  # the rename replaces a planted link
            write_table(table, tmp, signed=(secret, key))
    except OutputError as exc:
        raise InputError(f"table cache: {exc}") from None


def stderr_warning(line: str) -> None:
    """A warning as ``simrun`` prints its own: one ``warning:`` line on stderr."""
    print(f"warning: {line}", file=sys.stderr, flush=True)


def _gpu_key(gpu: str) -> str:
    from predictor.emulator.devices.specs import device_key

    return device_key(gpu)  # DeviceParamsError, an InputError, for a name the catalogue lacks


def truth_table(sequences: pd.DataFrame, gpu_types: list[str], *, progress: bool = False,
                warn: Callable[[str], None] | None = None, phase: str = "iteration") -> IterationTimeTable:
    """True seconds per iteration: each config's trace on each (emulated) GPU type; with
    ``phase="backward"``, the seconds of its backward ops alone (what a data-parallel step can
    overlap its gradient all-reduces with). One emulation builds both tables; each is cached.
    ``progress``: a bar on stderr while it is built (the cached table loads at once).
    ``warn``: gets the line saying a cache table was rebuilt (:func:`_cached`)."""
    from predictor.emulator.devices.specs import load_params
    from predictor.evaluate import iteration_truth

    if phase not in TRUTH_PHASES:
        raise InputError(f"unknown truth phase {short(phase)}; known: {', '.join(TRUTH_PHASES)}")
    params = load_params()
    types = sorted(set(gpu_types))
    keys = {g: _gpu_key(g) for g in types}
    configs = sorted(sequences["config_id"].unique())
    from predictor.emulator.devices.timing import emulator_fingerprint

    digest = _digest(configs, keys, emulator_fingerprint(params), len(sequences))
    names = {"iteration": f"truth-{digest}", "backward": f"backward-{digest}"}

    def build() -> pd.DataFrame:
        parts: dict[str, list[pd.DataFrame]] = {"iteration": [], "backward": []}
        with _bar(len(types) * len(configs), f"true iteration times on {', '.join(types)} (cached after)",
                  "config", progress) as bar:
            traces = emulated_traces(sequences, [keys[gpu] for gpu in types], params, bar)
            for gpu in types:
                trace = traces[keys[gpu]]
                parts["iteration"].append(_seconds(iteration_truth(trace), gpu, "true_us"))
                backward = trace[trace["phase"] == "backward"]
                sums = (backward["duration_us"] + backward["gap_us"]).groupby(backward["config_id"]).sum()
                parts["backward"].append(_seconds(pd.DataFrame({"config_id": configs,
                                                                "us": sums.reindex(configs).fillna(0.0).to_numpy()}),
                                                  gpu, "us"))
        frames = {name: pd.concat(frame, ignore_index=True) for name, frame in parts.items()}
        other = "backward" if phase == "iteration" else "iteration"
        _store(*open_cache(), names[other], frames[other])  # the sibling of the same emulation
        return frames[phase]

    what = "truth" if phase == "iteration" else "backward seconds of the truth"
    return _cached(names[phase], build, f"{what}: emulated {', '.join(types)} (params {params.version})", warn)


def method_table(method: str, sequences: pd.DataFrame, gpu_types: list[str],
                 checkpoint_dir: str | Path | None = None, *, progress: bool = False,
                 warn: Callable[[str], None] | None = None, pretrained: Pretrained | None = None) -> IterationTimeTable:
    """Seconds per iteration as the pretrained ``method`` checkpoints predict them.
    ``progress``: a bar on stderr while it is built, one step per GPU type (each predicts every
    config in one batch, so splitting it finer could change the numbers). ``warn``: gets the line
    saying a cache table was rebuilt (:func:`_cached`). ``pretrained``: the checkpoints already
    read (:class:`predictor.checkpoints.Pretrained`, e.g. kept for their intervals); read here
    otherwise."""
    from predictor.checkpoint_file import CheckpointError
    from predictor.checkpoints import CHECKPOINT_DIR, Pretrained
    from predictor.emulator.devices.specs import load_params

    if method not in METHODS:
        raise InputError(f"unknown predictor method {short(method)}; known: {', '.join(METHODS)}")
    directory = Path(checkpoint_dir or CHECKPOINT_DIR)
    types = sorted(set(gpu_types))
    keys = {g: _gpu_key(g) for g in types}
    try:  # each file read once: the bytes hashed into the cache key are the bytes the models are built from
        pretrained = pretrained or Pretrained(method, types, directory)
        files = [pretrained.data[gpu] for gpu in types]
    except CheckpointError as exc:  # names the GPUs that have one
        raise InputError(str(exc)) from None
    configs = sorted(sequences["config_id"].unique())
    params = load_params()

    def build() -> pd.DataFrame:
        parts = []
        with _bar(len(types), f"{method} predictions of {len(configs)} configs (cached after)", "GPU type",
                  progress) as bar:
            for gpu in types:
                bar.set_postfix_str(gpu)
                try:
                    model = pretrained.model(gpu)
                except CheckpointError as exc:
                    raise InputError(str(exc)) from None
                traces = sequences
                if info(method).reads_source_device:  # scales the trace measured on its source device
                    source = model.config.source_device
                    traces = emulated_traces(sequences, [source], params)[source]
                parts.append(_seconds(model.iteration_times(traces), gpu, "pred_us"))
                bar.update(1)
        return pd.concat(parts, ignore_index=True)

    from predictor.emulator.devices.timing import emulator_fingerprint

    return _cached(f"{method}-{_digest(*files, configs, keys, emulator_fingerprint(params), len(sequences))}", build,
                   f"{method}: pretrained checkpoints in {pretrained.directory}", warn)

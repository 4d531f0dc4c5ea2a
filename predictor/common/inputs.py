"""Reading what a stranger hands us — trace files, datasets, caches, option values — with every size
bounded before the work and every error message short.

Why one module: a file from the internet must never take the machine down or hang it. Each limit
is checked *before* memory or time is spent: the file's kind and size from ``stat`` (a FIFO, a
device such as ``/dev/zero`` or a directory is refused without opening it), a gzip stream while it
is inflated (a bomb stops at the limit, not after it), a JSON document's nesting before it is
parsed, a header's width before its names are listed. And a refusal must not become the attack:
a value quoted in a message is cut to a few dozen characters (``short``), however large the value
(a YAML alias "billion laughs" expands to gigabytes when ``repr``-ed whole).

Every limit is generous for real data and can be raised for one run with an environment variable
(``ETS_SIM_MAX_<NAME>``, e.g. ``ETS_SIM_MAX_FILE_BYTES=20e9``); :data:`LIMITS` is the one list, and
the "Limits" table of docs/security.md is written from it.
"""

from __future__ import annotations

import json
import math
import os
import re
import reprlib
import stat
import zlib
from collections.abc import Callable
from dataclasses import MISSING, dataclass
from pathlib import Path
from typing import Any

import numpy as np


class UserError(Exception):
    """An input the user can fix — a file, an option, a spec, a folder: both command lines print it
    as one line naming what is wrong, never a traceback. Every such error class derives from it,
    so a command line catches this one class, not a list typed by hand."""


class InputError(UserError, ValueError):
    """A file, a folder or a value we read is wrong: missing, malformed, too large, nested too deep,
    not a regular file, naming something unknown. The message names the file (row and field when
    known) or the option, and what is wrong; for a limit, the limit and how to raise it."""


class LocatedError(InputError):
    """Bad content of an input file, located: the message names the file, and the line (or row)
    and field when known — ``path:line: field 'x': what is wrong``. One class for job traces and
    execution traces (:class:`predictor.common.op_trace.OpTraceFormatError`), so every reader
    reports alike."""

    def __init__(self, path: str | Path, message: str, line: int | None = None, field: str | None = None):
        self.path, self.line, self.field = str(path), line, field
        where = self.path + (f":{line}" if line is not None else "")
        what = f" field {short(field)}:" if field else ""
        super().__init__(f"{where}:{what} {message}")


class SpecError(UserError, ValueError):
    """A command-line spec or option value that is wrong: an unknown or malformed policy,
    predictor, workload, trace, failure model, placement or sweep option; the message names it."""


class CheckpointError(UserError, ValueError):
    """A checkpoint that cannot be used with this code or this data; the message says why."""


class OutputError(UserError):
    """An output location that cannot be written (the message names it and says why)."""


class SimulationError(UserError, RuntimeError):
    """The run could not finish (e.g. a policy left jobs waiting on an idle cluster, a preemptive
    run past its rounds limit)."""


@dataclass(frozen=True)
class Limit:
    name: str
    default: float
    unit: str
    meaning: str

    @property
    def variable(self) -> str:
        return f"ETS_SIM_MAX_{self.name.upper()}"


# The one list of input limits (docs/security.md "Limits" lists the same, with what each protects).
LIMITS: dict[str, Limit] = {limit.name: limit for limit in (
    Limit("file_bytes", 4 * 2**30, "bytes", "size of one input file read whole (trace, dataset, checkpoint, cache)"),
    Limit("inflated_bytes", 4 * 2**30, "bytes", "bytes a gzip input may inflate to"),
    Limit("inflate_ratio", 200, "x", "inflated / compressed size of a gzip input (real Kineto traces: 10-30x)"),
    Limit("json_depth", 100, "levels", "nesting of a JSON or YAML document (real traces: at most 7)"),
    Limit("json_containers", 5_000_000, "objects and arrays",
          "JSON objects and arrays in one document (a 35 MB Kineto trace of 6 ResNet-50 steps: ~310,000)"),
    Limit("columns", 10_000, "columns", "fields in a CSV header or line"),
    Limit("jobs", 10_000_000, "jobs", "jobs in one simulated workload (the full Philly trace: 111,549)"),
    Limit("grid_points", 100_000, "points", "points of one sweep grid"),
    Limit("decoded_bytes", 2**30, "bytes",
          "bytes a Parquet input may decode to, counted from its metadata and dictionaries before its values "
          "are expanded"),
    Limit("row_groups", 1_000, "row groups", "row groups of one Parquet input (our writers: one per million rows)"),
    Limit("model_seconds", 600, "seconds",
          "time to capture one --model-file file: its import, model construction and capture (the slowest "
          "measured, a 2-layer LSTM on the CPU path: 33 s)"),
    Limit("model_bytes", 16 * 2**30, "bytes",
          "address space (RLIMIT_AS) of the child process that runs --model-file files (torch alone maps ~3 GB)"),
    Limit("model_parameters", 2**28, "parameters",
          "weights of a model built from a checkpoint's or a training run's config, counted on the meta device "
          "before any is allocated (4 bytes each; training holds ~4 copies; the shipped models: 35,000-160,000)"),
    Limit("rounds", 1_000_000, "rounds",
          "lease rounds of one preemptive run (the full Philly trace at the default 6-minute lease: ~60,000)"),
)}


def limit(name: str) -> float:
    """The limit ``name`` (:data:`LIMITS`), or its ``ETS_SIM_MAX_<NAME>`` override."""
    spec = LIMITS[name]
    raw = os.environ.get(spec.variable)
    if raw is None or not raw.strip():
        return spec.default
    try:
        value = float(raw)
    except ValueError:
        raise InputError(f"{spec.variable}={short(raw)}: not a number (the limit on {spec.meaning})") from None
    if not value > 0 or not np.isfinite(value):
        raise InputError(f"{spec.variable}={short(raw)}: must be a positive finite number")
    return value


def over_limit(name: str, what: str, amount: float) -> InputError:
    """The error for ``what`` exceeding limit ``name`` by ``amount``: names the limit and its variable."""
    spec = LIMITS[name]
    return InputError(f"{what}: {amount:,.0f} {spec.unit} exceeds the limit of {limit(name):,.0f} "
                      f"({spec.meaning}; raise it with {spec.variable}=N)")


# -- values in messages ---------------------------------------------------------------------------

_REPR = reprlib.Repr()  # Python 3.11's Repr takes its limits as attributes
_REPR.maxlevel, _REPR.maxstring, _REPR.maxother, _REPR.maxlong = 3, 60, 60, 40
_REPR.maxdict = _REPR.maxlist = _REPR.maxtuple = _REPR.maxset = _REPR.maxfrozenset = _REPR.maxdeque = 4
_REPR.maxarray = 4


def short(value: object, width: int = 80) -> str:
    """``repr(value)`` cut to about ``width`` characters without building the whole repr (reprlib
    stops at a few items per level), so a gigabyte-sized value quotes in microseconds."""
    text = _REPR.repr(value)
    return text if len(text) <= width else text[:width - 1] + "…"


# C0 and C1 control characters, DEL, and the Unicode format characters that reorder or hide text
# on a terminal (bidi embeddings, overrides and isolates; zero-width marks; the BOM)
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u200b-\u200f\u202a-\u202e\u2066-\u2069\ufeff]")


def printable(text: object) -> str:
    """``str(text)`` safe for a terminal: every control character shown escaped (``\\x1b``,
    ``\\n``, ``\\u202e``), never sent raw. A job id, a file name or a checkpoint's metadata comes
    from a stranger: raw, ``ESC[2J`` clears the screen and a newline forges a line of our own
    output. The one escaping function for every value we echo; a text without such characters is
    returned as it is."""
    text = text if isinstance(text, str) else str(text)
    if _CONTROL.search(text) is None:
        return text
    return _CONTROL.sub(_escape, text)


def _escape(match: re.Match) -> str:
    char = match.group()
    named = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}.get(char)
    return named or (f"\\x{ord(char):02x}" if ord(char) < 0x100 else f"\\u{ord(char):04x}")


def names(items: list | tuple, shown: int = 5) -> str:
    """Names for a message: the first ``shown``, each cut short, then how many more."""
    head = ", ".join(short(x, 40) for x in items[:shown])
    return head if len(items) <= shown else f"{head}, … ({len(items) - shown:,} more)"


# -- typed reads of untrusted values ----------------------------------------------------------------

class Checker:
    """Typed reads of untrusted values: each checks its value and, when wrong, raises ``error``
    with ``name(field)`` (the file and field, or the option) and what was expected."""

    def __init__(self, name: Callable[[str], str], error: type[ValueError]) -> None:
        self.name, self.error = name, error

    def fail(self, field: str, what: str, value: Any = MISSING) -> ValueError:
        got = ("" if value is MISSING else ", but it is missing (or null)" if value is None
               else f", got {short(value, 60)}")
        return self.error(f"{self.name(field)}: {what}{got}")

    def mapping(self, value: Any, field: str, *, optional: bool = False) -> dict:
        if optional and value is None:
            return {}
        if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
            raise self.fail(field, "must be an object", value)
        return value

    def sequence(self, value: Any, field: str, length: int | None = None) -> list:
        if not isinstance(value, list):
            raise self.fail(field, "must be a list", value)
        if length is not None and len(value) != length:
            raise self.fail(field, f"must hold {length} values, not {len(value)}")
        return value

    def text(self, value: Any, field: str, *, empty: bool = True, longest: int = 10_000) -> str:
        if not isinstance(value, str) or (not empty and not value) or len(value) > longest:
            raise self.fail(field, f"must be a{'' if empty else ' non-empty'} text of at most {longest:,} "
                                   "characters", value)
        return value

    def texts(self, value: Any, field: str, *, distinct: bool = False, longest: int | None = None) -> list[str]:
        items = self.sequence(value, field)
        if longest is not None and len(items) > longest:
            raise self.fail(field, f"must hold at most {longest:,} names, not {len(items):,}")
        for i, item in enumerate(items):
            self.text(item, f"{field}[{i}]")
        if distinct and len(set(items)) != len(items):
            raise self.fail(field, "must hold distinct names")
        return items

    def flag(self, value: Any, field: str) -> bool:
        if not isinstance(value, bool):
            raise self.fail(field, "must be true or false", value)
        return value

    def integer(self, value: Any, field: str, lo: int | None = None, hi: int | None = None) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or (lo is not None and value < lo) \
                or (hi is not None and value > hi):
            raise self.fail(field, "must be an integer" + _range(lo, hi), value)
        return value

    def number(self, value: Any, field: str, *, positive: bool = False, lo: float | None = None,
               hi: float | None = None, below: float | None = None) -> float:
        """A finite number (``positive``: > 0; ``lo``/``hi`` inclusive, ``below`` exclusive)."""
        ok = not isinstance(value, bool) and isinstance(value, (int, float)) and math.isfinite(value)
        if ok and ((positive and value <= 0) or (lo is not None and value < lo) or (hi is not None and value > hi)
                   or (below is not None and value >= below)):
            ok = False
        if not ok:
            extra = (" > 0" if positive else "") + _range(lo, hi) + (f" and below {below}" if below is not None else "")
            raise self.fail(field, "must be a finite number" + extra, value)
        return float(value)

    def numbers(self, value: Any, field: str, length: int | None = None, *, positive: bool = False,
                ascending: bool = False) -> list[float]:
        """A list of finite numbers (``ascending``: sorted, smallest first)."""
        items = self.sequence(value, field, length)
        out = [self.number(x, f"{field}[{i}]", positive=positive) for i, x in enumerate(items)]
        if ascending and any(b < a for a, b in zip(out, out[1:])):
            raise self.fail(field, "must be sorted in ascending order")
        return out

    def choice(self, value: Any, field: str, choices: tuple) -> Any:
        if not isinstance(value, str) or value not in choices:
            raise self.fail(field, f"must be one of {', '.join(map(str, choices))}", value)
        return value


def check_probability(value, name: str = "level") -> float:
    """``value`` as a float strictly between 0 and 1; ValueError naming ``name`` otherwise."""
    try:
        x = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a number strictly between 0 and 1 (e.g. 0.9), got {value!r}") from None
    if not 0.0 < x < 1.0:
        raise ValueError(f"{name} must lie strictly between 0 and 1 (e.g. 0.9), got {value!r}")
    return x


def _range(lo, hi) -> str:
    if lo is not None and hi is not None:
        return f" from {lo:,} to {hi:,}"
    return f" >= {lo:,}" if lo is not None else (f" <= {hi:,}" if hi is not None else "")


# -- files ----------------------------------------------------------------------------------------

def regular_file(path: str | Path, what: str = "input file") -> Path:
    """``path`` as an existing regular file within the size limit, checked by ``stat`` alone (a FIFO
    would block an ``open``; a device such as ``/dev/zero`` never ends). FileNotFoundError is left
    to the caller, who names the file as its format does."""
    path = Path(path)
    info = path.stat()  # follows symlinks: a link to a regular file is fine
    if not stat.S_ISREG(info.st_mode):
        kind = ("a directory" if stat.S_ISDIR(info.st_mode) else "a named pipe (FIFO)" if stat.S_ISFIFO(info.st_mode)
                else "a device" if stat.S_ISCHR(info.st_mode) or stat.S_ISBLK(info.st_mode)
                else "a socket" if stat.S_ISSOCK(info.st_mode) else "not a regular file")
        raise InputError(f"{path}: is {kind}, not a regular {what}")
    if info.st_size > limit("file_bytes"):
        raise over_limit("file_bytes", str(path), info.st_size)
    return path


def read_bytes(path: str | Path, what: str = "input file") -> bytes:
    """The bytes of a regular file within the size limit (a file growing while read stops there)."""
    path = regular_file(path, what)
    cap = int(limit("file_bytes"))
    with path.open("rb") as handle:
        expected = os.fstat(handle.fileno()).st_size
        parts = [handle.read(expected + 1)]  # the whole file, one allocation
        size = len(parts[0])
        while size > expected and parts[-1] and size <= cap:  # it grew while read: on, in chunks, to the limit
            parts.append(handle.read(min(cap + 1 - size, 64 * 2**20)))
            size += len(parts[-1])
    if size > cap:
        raise over_limit("file_bytes", str(path), size)
    return b"".join(parts) if len(parts) > 1 else parts[0]


def inflate(data: bytes, source: str | Path) -> bytes:
    """``data`` gunzipped (``data`` itself when it is not gzip), stopping as soon as the output
    passes the inflated-size limit or the ratio limit (from 64 MiB on): a 1 MB bomb costs at most
    the limit, never its full expansion."""
    if data[:2] != b"\x1f\x8b":
        return data
    by_ratio = max(64 * 2**20, limit("inflate_ratio") * len(data))
    cap = int(min(limit("inflated_bytes"), by_ratio))
    inflater = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
    parts, size, rest = [], 0, data
    try:
        while rest and not inflater.eof:
            part = inflater.decompress(rest, 16 * 2**20)
            parts.append(part)
            size += len(part)
            if size > cap:
                if cap < limit("inflated_bytes"):
                    raise over_limit("inflate_ratio", f"{source}: gzip data inflated past {size:,} bytes",
                                     size / len(data))
                raise over_limit("inflated_bytes", f"{source}: gzip data inflated past {size:,} bytes", size)
            rest = inflater.unconsumed_tail
    except zlib.error as exc:
        raise InputError(f"{source}: corrupt gzip data ({exc})") from None
    if not inflater.eof:
        raise InputError(f"{source}: truncated gzip data (the stream ends early)")
    return b"".join(parts)


# -- nested documents -----------------------------------------------------------------------------

_CHUNK = 8 * 2**20  # bytes scanned at a time: the scan's memory stays bounded for any input


def json_depth(data: bytes | str) -> int:
    """The deepest bracket nesting of a JSON text, brackets inside strings excluded; vectorised and
    chunked (a few ms per MB). Where a backslash stands outside a string (invalid JSON: the parser
    stops there) the count may differ from the parser's after it, never before."""
    raw = data.encode("utf-8", "surrogatepass") if isinstance(data, str) else data
    buf = np.frombuffer(raw, dtype=np.uint8)
    depth, deepest, in_string, slash_run = 0, 0, 0, 0
    for at in range(0, len(buf), _CHUNK):
        chunk = buf[at:at + _CHUNK]
        quotes = np.flatnonzero(chunk == ord('"'))
        if len(quotes):
            quotes = quotes[~_escaped(chunk, quotes, slash_run)]
        folded = chunk | 0x20  # "[" -> "{", "]" -> "}"
        opening = folded == ord("{")
        brackets = np.flatnonzero(opening | (folded == ord("}")))
        if len(brackets):
            outside = (np.searchsorted(quotes, brackets) + in_string) % 2 == 0
            steps = np.where(opening[brackets], 1, -1) * outside
            levels = np.cumsum(steps, dtype=np.int64) + depth
            deepest, depth = max(deepest, int(levels.max())), int(levels[-1])
        in_string = (len(quotes) + in_string) % 2
        tail = len(chunk) - 1 - int(np.flatnonzero(chunk != ord("\\")).max(initial=-1))
        slash_run = slash_run + tail if tail == len(chunk) else tail
    return deepest


def _escaped(chunk: np.ndarray, quotes: np.ndarray, carried: int) -> np.ndarray:
    """Whether each quote of ``chunk`` is escaped: preceded by an odd run of backslashes
    (``carried`` backslashes end the previous chunk)."""
    after_slash = np.zeros(len(quotes), dtype=bool)
    inner = quotes > 0
    after_slash[inner] = chunk[quotes[inner] - 1] == ord("\\")
    escaped = np.zeros(len(quotes), dtype=bool)
    escaped[~inner] = carried % 2 == 1
    if not after_slash.any():
        return escaped
    slashes = np.flatnonzero(chunk == ord("\\"))
    breaks = np.flatnonzero(np.diff(slashes) != 1)  # runs of consecutive backslashes
    first = np.concatenate(([0], breaks + 1))
    last = np.concatenate((breaks, [len(slashes) - 1]))
    run_end, run_len = slashes[last], last - first + 1
    if slashes[0] == 0:
        run_len[0] += carried
    candidates = quotes[after_slash]
    k = np.searchsorted(run_end, candidates - 1)  # the run ending right before each candidate
    escaped[after_slash] = run_len[k] % 2 == 1
    return escaped


def load_json(data: bytes | str, source: str | Path):
    """A JSON document, its nesting and its number of objects and arrays checked first (Python's
    parser recurses: 100,000 levels crash it; and each parsed object costs ~100 bytes).
    ValueError (``json.JSONDecodeError``) for bad JSON is left
    to the caller, who names its format."""
    opening = (b"{", b"[") if isinstance(data, bytes) else ("{", "[")
    containers = data.count(opening[0]) + data.count(opening[1])  # an upper bound: brackets in strings count too
    if containers > limit("json_depth"):  # else it cannot nest deeper: the scan is skipped (small documents)
        depth = json_depth(data)
        if depth > limit("json_depth"):
            raise over_limit("json_depth", f"{source}: JSON nested {depth:,} levels deep", depth)
    if containers > limit("json_containers"):  # each costs ~100 bytes parsed: 60 MB of "{}," is 2 GB
        raise over_limit("json_containers", str(source), containers)
    return json.loads(data)


def check_width(count: int, source: str | Path) -> None:
    """Refuse a header or line of more than the column limit before its names are listed."""
    if count > limit("columns"):
        raise over_limit("columns", f"{source}: {count:,} fields in one line", count)


# -- Parquet ----------------------------------------------------------------------------------------

# Bytes one decoded value takes in Arrow at least, by Parquet physical type; a text value its
# length and an 8-byte offset.
_VALUE_BYTES = {"BOOLEAN": 1, "INT32": 4, "INT64": 8, "INT96": 12, "FLOAT": 4, "DOUBLE": 8}
_OFFSET = 8


def read_parquet_arrow(path: str | Path, what: str = "Parquet file", columns: list[str] | None = None,
                       **options):
    """A Parquet file as an Arrow table, its decoded size bounded *before* any value is expanded.

    Why: a Parquet file's size says nothing of what it decodes to — run-length-encoded lists,
    dictionary pages of one long string referenced by every row, or thousands of row groups turn
    kilobytes into gigabytes. So, from the footer alone: the row groups are counted, every page's
    decompressed size summed (a compression bomb), and every column chunk's values times their
    width (long lists); text columns are then read as dictionaries (the distinct values once, an
    index per row) and their decoded length summed exactly from the dictionary before a string is
    materialised. Past :data:`LIMITS` ``decoded_bytes`` or ``row_groups``: one-line InputError.
    ``options`` go to ``pyarrow.parquet.ParquetFile`` (e.g. ``page_checksum_verification``).
    FileNotFoundError, and pyarrow's errors for a file that is not Parquet, are left to the caller."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    path = regular_file(path, what)
    with pq.ParquetFile(path, **options) as parquet:
        meta = parquet.metadata
        if meta.num_row_groups > limit("row_groups"):
            raise over_limit("row_groups", str(path), meta.num_row_groups)
        schema = parquet.schema_arrow
        wanted = set(schema.names if columns is None else columns)
        text = [name for name, kind in zip(schema.names, schema.types) if name in wanted and _is_text(kind)]
        estimate = _decoded_estimate(meta, wanted, set(text))
        cap = limit("decoded_bytes")
        if estimate > cap:
            raise over_limit("decoded_bytes", f"{path}: decodes to at least {estimate:,.0f} bytes", estimate)
    with pq.ParquetFile(path, read_dictionary=text, **options) as parquet:
        table = parquet.read(columns=columns)
    for name in text:
        column = table.column(name)
        decoded = sum(pc.sum(pc.take(pc.binary_length(chunk.dictionary), chunk.indices)).as_py() or 0
                      for chunk in column.chunks)
        estimate += decoded + _OFFSET * len(column)
        if estimate > cap:
            raise over_limit("decoded_bytes", f"{path}: column {short(name)} decodes to {decoded:,} bytes of text",
                             estimate)
        kind = schema.field(name).type
        if not pa.types.is_dictionary(kind):  # text as it was written, now that its size is known
            table = table.set_column(table.schema.get_field_index(name), schema.field(name), column.cast(kind))
    return table


def read_parquet(path: str | Path, what: str = "Parquet file", columns: list[str] | None = None,
                 **options):
    """A Parquet file as a pandas DataFrame through :func:`read_parquet_arrow` (bounded)."""
    return read_parquet_arrow(path, what, columns, **options).to_pandas()


def _is_text(kind) -> bool:
    import pyarrow as pa

    value = kind.value_type if pa.types.is_dictionary(kind) else kind
    return any(test(value) for test in (pa.types.is_string, pa.types.is_large_string, pa.types.is_binary,
                                        pa.types.is_large_binary))


def _decoded_estimate(meta, wanted: set[str], text: set[str]) -> float:
    """Bytes the wanted columns decode to at least, from the footer alone. A text column's pages
    decompressed (its dictionary, and an index per row: what reading it as a dictionary holds;
    its values are counted from the dictionary once read); any other column's values at their
    width, or its pages decompressed where that is more. A text leaf of a nested column (not
    read as a dictionary) counts its pages' size for each value, which bounds it from above."""
    total = 0.0
    for g in range(meta.num_row_groups):
        group = meta.row_group(g)
        for c in range(group.num_columns):
            chunk = group.column(c)
            top = chunk.path_in_schema.split(".")[0]
            if top not in wanted:
                continue
            pages = chunk.total_uncompressed_size
            if top in text:
                total += pages
                continue
            width = _VALUE_BYTES.get(chunk.physical_type)
            if width is None:  # BYTE_ARRAY inside a nested column, FIXED_LEN_BYTE_ARRAY
                width = _OFFSET + (pages if chunk.has_dictionary_page else 0)
            total += max(pages, chunk.num_values * width)
    return total

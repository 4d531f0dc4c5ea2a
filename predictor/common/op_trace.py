"""The execution-trace table (DESIGN §3): one row per operator of one training iteration.

Why one module: profilers, importers (ETS CSV, Kineto JSON, Nsight Systems SQLite) and emulated
devices must all produce exactly these columns and units, and the predictor reads only these.

Columns (times in microseconds):

==============  ==========  ==============================================================
column          dtype       meaning
==============  ==========  ==============================================================
config_id       str         the model configuration (one iteration = one config on one device)
device          str         where it was measured ("T4", "cpu", "emulated:V100", ...)
family          str         model family (splits are by family), see predictor.common.families
model           str         model name (e.g. "resnet18")
idx             int         0-based position of the op in execution order
op              str         operator name, aten style without the "aten::" prefix ("conv2d")
phase           str         forward | backward | update
input_shapes    str         JSON list of the op's input shapes ("[]" when unknown)
params          list[int]   up to 30 integers describing shapes / hyper-parameters
flops           float       floating-point operations of the op (0 when unknown)
bytes           float       bytes moved by the op (0 when unknown)
dtype           str         float32 | float16 | float64 | bfloat16
batch           int         batch size of the iteration
input_size      int         input image height (or sequence length); 0 when not applicable
cpu_us          float       host-side cost of dispatching the op; NaN when unknown
duration_us     float       kernel time of the op on the device (sum of its kernels on GPUs)
gap_us          float       device idle time until the next op starts (framework overhead);
                            may be negative when kernels overlap (ETS data); 0 on the last op
kernels         int         kernels the op launched (0 on CPU or when unknown)
source          str         file (and line/record) the row came from
==============  ==========  ==============================================================

Iteration time = sum(duration_us + gap_us) over the iteration's rows.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from functools import lru_cache
from pathlib import Path

import numpy as np
import pandas as pd

from predictor.common.inputs import InputError, LocatedError, read_parquet, regular_file, short
from predictor.common.outputs import atomic_file

# The one list of each (features one-hot encode in this order, so it is part of every checkpoint).
PHASES = ("forward", "backward", "update")
DTYPES = ("float32", "float16", "bfloat16", "float64")
MAX_PARAMS = 30

COLUMNS: dict[str, str] = {
    "config_id": "string", "device": "string", "family": "string", "model": "string",
    "idx": "int64", "op": "string", "phase": "string", "input_shapes": "string", "params": "object",
    "flops": "float64", "bytes": "float64", "dtype": "string", "batch": "int64", "input_size": "int64",
    "cpu_us": "float64", "duration_us": "float64", "gap_us": "float64", "kernels": "int64",
    "source": "string",
}


class OpTraceFormatError(LocatedError):
    """Bad execution-trace input: the file, and the row and field when known."""

    def __init__(self, path: str | Path, message: str, row: int | None = None, field: str | None = None):
        super().__init__(path, message, row, field)

    @property
    def row(self) -> int | None:
        return self.line


@contextmanager
def refusing(path: str | Path) -> Iterator[None]:
    """An input limit hit while reading ``path`` (too large, a FIFO, a gzip bomb, JSON nested too
    deep: :mod:`predictor.common.inputs`) as a OpTraceFormatError naming it, so a caller that handles bad
    trace files handles these too."""
    try:
        yield
    except InputError as exc:
        raise OpTraceFormatError(path, str(exc).removeprefix(f"{path}: ")) from None


# Bounds of a plausible op time (µs). Real ETS traces have gaps down to -6.3 ms (T4) where an
# op's kernels overlap the next op's (the trainer clamps those to 0); -1 s is no overlap but a
# broken file. No op of any dataset under reports/ takes more than 163 s (an LSTM that a meta
# capture runs on the CPU).
GAP_FLOOR_US = -1e6
OP_CEILING_US = 3.6e9  # an hour per op
VALUE_BOUNDS: dict[str, tuple[float, str, bool]] = {  # column: lowest value, that rule in words, capped?
    "duration_us": (0.0, ">= 0", True),
    "gap_us": (GAP_FLOOR_US, ">= -1e6 µs (-1 s; overlapping kernels make gaps a few ms below 0, not more)", True),
    "flops": (0.0, ">= 0", False),
    "bytes": (0.0, ">= 0", False),
}


def validate(df: pd.DataFrame, source: str | Path, *, ceiling_us: float = OP_CEILING_US) -> pd.DataFrame:
    """Check and normalise an execution-trace table; returns it with the canonical dtypes."""
    check(df, source, ceiling_us=ceiling_us)
    df = df[list(COLUMNS)].copy()
    df["params"] = [list(map(int, p))[:MAX_PARAMS] if p is not None else [] for p in df["params"]]
    return df.astype({k: v for k, v in COLUMNS.items() if k != "params"}).reset_index(drop=True)


def check(df: pd.DataFrame, source: str | Path, *, ceiling_us: float = OP_CEILING_US) -> None:
    """OpTraceFormatError naming ``source``, the row, the field and the config of the first bad
    value: missing columns, no rows, unknown phase or dtype, NaN or implausible times.
    ``ceiling_us``: the longest plausible op (the emulator, which times any config however
    absurd, passes infinity)."""
    missing = [c for c in COLUMNS if c not in df.columns]
    if missing:
        raise OpTraceFormatError(source, f"execution trace lacks column(s) {missing}; is it a dataset file of "
                                       "`ets collect` / `ets import`?", field=missing[0])
    if df.empty:
        raise OpTraceFormatError(source, "execution trace has no rows")
    for col, allowed in (("phase", PHASES), ("dtype", DTYPES)):
        bad = ~df[col].isin(allowed).to_numpy()
        if bad.any():
            _refuse(df, source, bad, col, f"{col} {short(df[col].iloc[int(np.argmax(bad))])} is not one of {allowed}")
    for col, (low, rule, capped) in VALUE_BOUNDS.items():
        high = ceiling_us if capped else np.inf
        values = pd.to_numeric(df[col], errors="coerce").to_numpy(dtype="float64")
        bad = ~np.isfinite(values) | (values < low) | (values > high)
        if bad.any():
            if np.isfinite(high):
                rule += f" and <= {high:.3g} µs" + (" (an hour per op)" if high == OP_CEILING_US else "")
            _refuse(df, source, bad, col,
                    f"must be a finite number {rule}, got {_shown(df[col].iloc[int(np.argmax(bad))])}")
    for col in NUMERIC_COLUMNS:
        _check_numbers(df, source, col)
    for col in ("config_id", "device"):
        bad = df[col].isna().to_numpy()
        if bad.any():
            _refuse(df, source, bad, col, "missing: every row names its config and device")
    _check_shapes(df, source)
    _check_unique_ops(df, source)


MAX_DIM = 10**12  # the largest tensor dimension an input_shapes entry may give (a terabyte at 1 byte each)
# The usual spelling (shapes_json's): a list of flat lists of dims below 10**12, without spaces;
# checked by one regex per distinct string (~5 µs), anything else is parsed (_shapes_problem)
_DIMS = r"\[(?:\d{1,12}(?:,\d{1,12})*)?\]"
_FLAT_SHAPES = rf"\[(?:{_DIMS}(?:,{_DIMS})*)?\]"


def _check_shapes(df: pd.DataFrame, source: str | Path) -> None:
    """Refuse an ``input_shapes`` that is not a JSON list of shapes (lists of whole dimensions
    from 0 to :data:`MAX_DIM`, nested where an input is a list of tensors): the graph methods
    and the emulator read op sizes from it, and a shape that does not parse was read as "no
    shapes", a negative one as a size, so a garbage dataset was scored silently (an MRE of 70 %
    instead of 17 %, or NaN). Each distinct string is checked once; a missing value is unknown
    shapes, like "[]"."""
    values = df["input_shapes"]
    codes, uniques = pd.factorize(values)
    if not len(uniques):
        return
    text = pd.Series(uniques, dtype=object)
    fine = np.array([isinstance(v, str) for v in text], dtype=bool)
    fine[fine] = text[fine].str.fullmatch(_FLAT_SHAPES).to_numpy(dtype=bool)
    for k in np.flatnonzero(~fine):  # nested lists, spaces, or garbage: parsed
        problem = _shapes_problem(text.iloc[k])
        if problem:
            _refuse(df, source, codes == k, "input_shapes", f"{problem}, in {short(text.iloc[k], 60)}")


def _shapes_problem(value: object) -> str | None:
    """What is wrong with one input_shapes value, or None."""
    from predictor.common.inputs import load_json

    if not isinstance(value, str):
        return f"must be a JSON list of shapes (text), got a {type(value).__name__}"
    try:
        shapes = load_json(value, "input_shapes")
    except InputError as exc:  # nested past the depth limit, or too many lists
        return str(exc)
    except ValueError:
        return "not JSON (a list of shapes such as [[8,3,224,224],[64,3,7,7]] is expected)"
    if not isinstance(shapes, list):
        return "not a list of shapes (such as [[8,3,224,224],[64,3,7,7]])"
    stack = list(shapes)
    while stack:
        item = stack.pop()
        if isinstance(item, list):
            stack.extend(item)
        elif isinstance(item, bool) or not isinstance(item, int):
            return f"dimension {short(item, 30)} is not a whole number"
        elif not 0 <= item <= MAX_DIM:
            return f"dimension {item:,} is outside 0 to {MAX_DIM:,}"
    return None


NUMERIC_COLUMNS = tuple(c for c, kind in COLUMNS.items() if kind in ("int64", "float64"))


def _check_numbers(df: pd.DataFrame, source: str | Path, col: str) -> None:
    """Refuse a numeric column held as text (``"1.5"``): sums would concatenate or raise later.
    By dtype alone, except for an object column, whose values are looked at."""
    values = df[col]
    if pd.api.types.is_numeric_dtype(values) and not pd.api.types.is_bool_dtype(values):
        return
    if values.dtype == object:
        bad = ~values.map(lambda v: isinstance(v, (int, float, np.number)) and not isinstance(v, (bool, np.bool_)))
        bad = bad.to_numpy(dtype=bool)
    else:
        bad = np.ones(len(values), dtype=bool)
    if bad.any():
        _refuse(df, source, bad, col, f"must be a number, got {short(values.iloc[int(np.argmax(bad))])} "
                                      f"(the column holds {values.dtype}; write it as numbers)")


def _codes(values: pd.Series) -> tuple[np.ndarray, pd.Index]:
    """``pd.factorize(values)``, at a third of the cost for the usual one-valued column (a dataset
    file holds one device)."""
    if len(values) and bool((values == values.iloc[0]).all()):
        return np.zeros(len(values), dtype=np.int64), pd.Index([values.iloc[0]])
    codes, uniques = pd.factorize(values, use_na_sentinel=False)  # a missing value is a value: no -1 codes
    return codes, pd.Index(uniques)


def _check_unique_ops(df: pd.DataFrame, source: str | Path) -> None:
    """Refuse an op that appears twice in one iteration (same device, config and idx): the
    iteration time is a sum over rows, so a file appended twice would double it unnoticed."""
    device = _codes(df["device"])[0].astype(np.int64)
    config = _codes(df["config_id"])[0]
    idx = pd.to_numeric(df["idx"], errors="coerce").to_numpy(dtype="float64")
    key = (device * (config.max() + 1) + config).astype("float64")  # exact below 2**53 pairs
    step, next_idx = np.diff(key), np.diff(idx)
    if np.all((step > 0) | ((step == 0) & (next_idx > 0))):
        return  # rows in (device, config) blocks with idx rising, as every writer stores them: no sort needed
    order = np.lexsort((idx, key))
    same = (key[order][1:] == key[order][:-1]) & (idx[order][1:] == idx[order][:-1])
    if not same.any():
        return
    first = int(np.argmax(same))
    was, again = sorted((int(order[first]), int(order[first + 1])))
    raise OpTraceFormatError(source, f"config {_plain(df['config_id'].iloc[again])} "
                                     f"idx {_number(df['idx'].iloc[again])} "
                                     f"on {_plain(df['device'].iloc[again])} is also row {was} ({int(same.sum()):,} "
                                     "duplicate row(s) in all): each op of an iteration must appear once; "
                                     "rows appended twice would double its time", row=again, field="idx")


def _shown(value) -> str:
    """A bad value as the user would write it (``nan``, ``-1000000000.0``), not numpy's repr."""
    return repr(float(value)) if isinstance(value, (int, float, np.number)) else short(value)


def _number(value) -> str:
    """An index as written (``3``, not ``3.0`` or ``np.int64(3)``)."""
    number = float(value)
    return str(int(number)) if number.is_integer() else repr(number)


def _plain(value, width: int = 80) -> str:
    """A name from the file, unquoted, cut to ``width`` characters."""
    text = str(value)
    return text if len(text) <= width else text[:width - 1] + "…"


def _refuse(df: pd.DataFrame, source: str | Path, bad: np.ndarray, field: str, message: str) -> None:
    """Raise for the first bad row, naming its config and op too (a file holds many iterations)."""
    i = int(np.argmax(bad))
    where = (f" (config {_plain(df['config_id'].iloc[i])}, op {_plain(df['op'].iloc[i])}; "
             f"{int(bad.sum()):,} bad row(s) in all)")
    raise OpTraceFormatError(source, message + where, row=i, field=field)


def shapes_json(shapes) -> str:
    return json.dumps(shapes, separators=(",", ":"))


# -- datasets: a directory with one Parquet file per device --------------------------------------

def device_file(directory: str | Path, device: str) -> Path:
    safe = device.replace(":", "_").replace("/", "_")
    return Path(directory) / f"{safe}.parquet"


def write_traces(directory: str | Path, traces: pd.DataFrame) -> list[Path]:
    """Add traces to a dataset directory (one Parquet per device); replaces configs already there.
    What :func:`read_trace_file` would refuse (an op twice, a config on two devices) is refused
    before anything is written, so no command leaves a dataset that the next one cannot read."""
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for device, rows in traces.groupby("device", sort=True):
        path = device_file(out, str(device))
        if path.exists():
            old = read_trace_file(path)
            old = old[~old["config_id"].isin(set(rows["config_id"]))]
            rows = pd.concat([old, rows], ignore_index=True)
        check(rows, path)
        _check_one_device_per_config(rows, path)
        with atomic_file(path) as tmp:  # a crash mid-write must not lose the old file
            # page checksums: flipped bytes are caught on read
            rows.to_parquet(tmp, index=False, compression="zstd", write_page_checksum=True)
        written.append(path)
    return written


def read_trace_file(path: str | Path) -> pd.DataFrame:
    """One dataset file, checked (:func:`check`): a file that is not Parquet, is no regular file
    (a FIFO would block pyarrow, ``/dev/zero`` never ends), stores a numeric column as text, lacks
    a column, holds NaN or implausible times, an op twice or a config on two devices is refused
    with one line naming it, not a pyarrow traceback (or, worse, accepted and averaged into a
    report)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    with refusing(path):
        try:
            regular_file(path, "dataset file")
        except FileNotFoundError:
            pass  # named by pyarrow's error below, as before
    try:  # pages written with a CRC (write_traces) are verified; older files have none to check
        _check_schema(path, pq.read_schema(path))
        with refusing(path):  # its decoded size bounded before it is expanded
            df = read_parquet(path, "dataset file", page_checksum_verification=True)
    except (pa.ArrowException, OSError, ValueError) as exc:
        if isinstance(exc, OpTraceFormatError):
            raise
        first = (str(exc).splitlines() or [type(exc).__name__])[0]
        raise OpTraceFormatError(path, f"not a readable Parquet file: corrupted, or another format "
                                     f"({type(exc).__name__}: {first})") from None
    check(df, path)
    _check_one_device_per_config(df, path)
    return df


def _check_schema(path: str | Path, schema) -> None:
    """Refuse, from the file's footer alone, a numeric column stored as text (or another
    non-number type) and ``params`` stored as anything but lists of integers."""
    import pyarrow as pa

    for col in NUMERIC_COLUMNS:
        if col in schema.names:
            kind = schema.field(col).type
            if not (pa.types.is_integer(kind) or pa.types.is_floating(kind) or pa.types.is_null(kind)):
                what = f"text ({kind})" if pa.types.is_string(kind) or pa.types.is_large_string(kind) else str(kind)
                raise OpTraceFormatError(path, f"stored as {what}, not numbers; write the column as numbers (is it a "
                                             "dataset file of `ets collect` / `ets import`?)", field=col)
    if "params" in schema.names:
        kind = schema.field("params").type
        ok = (pa.types.is_list(kind) or pa.types.is_large_list(kind)) and (
            pa.types.is_integer(kind.value_type) or pa.types.is_null(kind.value_type))
        if not ok and not pa.types.is_null(kind):
            raise OpTraceFormatError(path, f"stored as {kind}, not lists of integers; is it a dataset file of "
                                         "`ets collect` / `ets import`?", field="params")


def _check_one_device_per_config(df: pd.DataFrame, path: str | Path) -> None:
    """Refuse a config whose rows are split across two devices in one file: each part would be
    scored as a whole iteration."""
    device, devices = _codes(df["device"])
    if len(devices) < 2:
        return
    config = _codes(df["config_id"])[0]
    pairs = np.unique(config.astype(np.int64) * len(devices) + device)
    split = np.flatnonzero(np.diff(pairs // len(devices)) == 0)
    if len(split):
        c = int(pairs[split[0]] // len(devices))
        both = devices[[int(pairs[split[0]] % len(devices)), int(pairs[split[0] + 1] % len(devices))]]
        rows = np.flatnonzero(config == c)
        i = int(rows[np.flatnonzero(device[rows] == devices.get_loc(both[1]))[0]])
        raise OpTraceFormatError(path, f"config {_plain(df['config_id'].iloc[i])} has rows on two devices, "
                                     f"{_plain(both[0])} and {_plain(both[1])} ({len(split):,} split config(s) in "
                                     "all): one iteration is one config on one device; split the file by device",
                                 row=i, field="device")


def read_dataset(directory: str | Path) -> pd.DataFrame:
    """All traces of a dataset directory, each file checked by :func:`read_trace_file`; a config
    of one device in two files (its iteration would count twice) is refused too."""
    files = sorted(Path(directory).glob("*.parquet"))
    if not files:
        raise OpTraceFormatError(directory, "no execution-trace Parquet files in this directory")
    tables = [read_trace_file(f) for f in files]
    _check_files_disjoint(files, tables)
    return pd.concat(tables, ignore_index=True)


def _check_files_disjoint(files: list[Path], tables: list[pd.DataFrame]) -> None:
    """Refuse a (device, config) held by two files of one dataset (one file per device: only a
    file renamed or merged by hand does this). Configs are compared only for a device that two
    files share, so the usual dataset costs one pass over each file's device column."""
    holders: dict[str, list[int]] = {}
    for k, table in enumerate(tables):
        for device in _codes(table["device"])[1]:
            holders.setdefault(str(device), []).append(k)
    for device, ks in holders.items():
        if len(ks) < 2:
            continue
        seen: dict[str, Path] = {}
        for k in ks:
            rows = tables[k]
            for config in pd.unique(rows.loc[rows["device"].astype(str) == device, "config_id"].astype(str)):
                other = seen.setdefault(config, files[k])
                if other != files[k]:
                    raise OpTraceFormatError(files[k], f"config {_plain(config)} on {_plain(device)} is also in "
                                                     f"{other}: its iteration would count twice; keep one of "
                                                     "the two files", field="config_id")


OP_COUNT_BUCKETS = (0, 250, 550, 800, np.inf)  # the ETS paper's op-count buckets


def dataset_info(df: pd.DataFrame) -> dict:
    """Counts per device and family, op-count histogram, framework-overhead share distribution."""
    per_iter = df.groupby(["device", "config_id"]).agg(
        family=("family", "first"), ops=("idx", "size"), duration=("duration_us", "sum"),
        gap=("gap_us", "sum"))
    total = per_iter["duration"] + per_iter["gap"]
    share = (per_iter["gap"] / total).where(total > 0)
    labels = [f"{int(lo)}-{int(hi)}" if np.isfinite(hi) else f"{int(lo)}+"
              for lo, hi in zip(OP_COUNT_BUCKETS[:-1], OP_COUNT_BUCKETS[1:])]
    buckets = pd.cut(per_iter["ops"], OP_COUNT_BUCKETS, right=False, labels=labels)
    q = share.quantile([0.0, 0.1, 0.5, 0.9, 1.0]) if share.notna().any() else pd.Series(dtype=float)
    return {
        "iterations": int(len(per_iter)),
        "rows": int(len(df)),
        "per_device": per_iter.groupby(level="device").size().to_dict(),
        "per_family": per_iter.groupby("family").size().sort_values(ascending=False).to_dict(),
        "op_count_histogram": buckets.value_counts().reindex(labels).fillna(0).astype(int).to_dict(),
        "ops_min": int(per_iter["ops"].min()), "ops_max": int(per_iter["ops"].max()),
        "overhead_share": {f"p{int(k * 100)}": float(v) for k, v in q.items()},
        "iteration_ms_median": float(total.median() / 1000.0),
    }


# Bytes per element of the dtypes a trace row may name (gradients, activations, checkpoints).
ELEMENT_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2, "float64": 8}


def first_input_elements(shapes: str) -> int:
    """Elements of an op's first input tensor (0 when the capture recorded none or no JSON list);
    InputError for a field nested past the JSON limits (Python's parser would recurse and crash)."""
    if not isinstance(shapes, str):
        return 0
    return _first_input_elements(shapes)


@lru_cache(maxsize=1 << 16)
def _first_input_elements(shapes: str) -> int:
    """:func:`first_input_elements` of a string, kept: a sweep binds the same workload configs at
    every point, and each parse is a JSON decode (the same few thousand shapes each time)."""
    from predictor.common.inputs import load_json

    try:
        parsed = load_json(shapes, "input_shapes")
    except json.JSONDecodeError:
        return 0
    first = parsed[0] if isinstance(parsed, list) and parsed else None
    if not isinstance(first, list) or not all(isinstance(d, int) for d in first):
        return 0
    return int(np.prod(first, dtype=np.float64)) if first else 1

"""The execution-trace table (DESIGN §3): one row per operator of one training iteration.

Why one module: profilers, importers (ETS CSV, Kineto JSON, Nsight Systems SQLite) and emulated
devices must all produce exactly these columns and units, and the predictor reads only these.

Columns (times in microseconds):

==============  ==========  ==============================================================
column          dtype       meaning
==============  ==========  ==============================================================
config_id       str         the model configuration (one iteration = one config on one device)
device          str         where it was measured ("T4", "cpu", "emulated:V100", ...)
family          str         model family (splits are by family), see predictor.families
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
from pathlib import Path

import numpy as np
import pandas as pd

from predictor.outputs import atomic_file

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


class TraceFormatError(ValueError):
    """Bad execution-trace input; the message names the file and, when known, the row and field."""

    def __init__(self, path: str | Path, message: str, row: int | None = None, field: str | None = None):
        self.path, self.row, self.field = str(path), row, field
        where = self.path + (f":{row}" if row is not None else "")
        what = f" field {field!r}:" if field else ""
        super().__init__(f"{where}:{what} {message}")


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
    """TraceFormatError naming ``source``, the row, the field and the config of the first bad
    value: missing columns, no rows, unknown phase or dtype, NaN or implausible times.
    ``ceiling_us``: the longest plausible op (the emulator, which times any config however
    absurd, passes infinity)."""
    missing = [c for c in COLUMNS if c not in df.columns]
    if missing:
        raise TraceFormatError(source, f"execution trace lacks column(s) {missing}; is it a dataset file of "
                                       "`ets collect` / `ets import`?", field=missing[0])
    if df.empty:
        raise TraceFormatError(source, "execution trace has no rows")
    for col, allowed in (("phase", PHASES), ("dtype", DTYPES)):
        bad = ~df[col].isin(allowed).to_numpy()
        if bad.any():
            _refuse(df, source, bad, col, f"{col} {df[col].iloc[int(np.argmax(bad))]!r} is not one of {allowed}")
    for col, (low, rule, capped) in VALUE_BOUNDS.items():
        high = ceiling_us if capped else np.inf
        values = pd.to_numeric(df[col], errors="coerce").to_numpy(dtype="float64")
        bad = ~np.isfinite(values) | (values < low) | (values > high)
        if bad.any():
            if np.isfinite(high):
                rule += f" and <= {high:.3g} µs" + (" (an hour per op)" if high == OP_CEILING_US else "")
            _refuse(df, source, bad, col, f"must be a finite number {rule}, got {_shown(df[col].iloc[int(np.argmax(bad))])}")


def _shown(value) -> str:
    """A bad value as the user would write it (``nan``, ``-1000000000.0``), not numpy's repr."""
    return repr(float(value)) if isinstance(value, (int, float, np.number)) else repr(value)


def _refuse(df: pd.DataFrame, source: str | Path, bad: np.ndarray, field: str, message: str) -> None:
    """Raise for the first bad row, naming its config and op too (a file holds many iterations)."""
    i = int(np.argmax(bad))
    where = (f" (config {df['config_id'].iloc[i]}, op {df['op'].iloc[i]}; "
             f"{int(bad.sum()):,} bad row(s) in all)")
    raise TraceFormatError(source, message + where, row=i, field=field)


def shapes_json(shapes) -> str:
    return json.dumps(shapes, separators=(",", ":"))


# -- datasets: a directory with one Parquet file per device --------------------------------------

def device_file(directory: str | Path, device: str) -> Path:
    safe = device.replace(":", "_").replace("/", "_")
    return Path(directory) / f"{safe}.parquet"


def write_traces(directory: str | Path, traces: pd.DataFrame) -> list[Path]:
    """Add traces to a dataset directory (one Parquet per device); replaces configs already there."""
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for device, rows in traces.groupby("device", sort=True):
        path = device_file(out, str(device))
        if path.exists():
            old = read_trace_file(path)
            old = old[~old["config_id"].isin(set(rows["config_id"]))]
            rows = pd.concat([old, rows], ignore_index=True)
        with atomic_file(path) as tmp:  # a crash mid-write must not lose the old file
            rows.to_parquet(tmp, index=False, write_page_checksum=True)  # flipped bytes are caught on read
        written.append(path)
    return written


def read_trace_file(path: str | Path) -> pd.DataFrame:
    """One dataset file, checked (:func:`check`): a file that is not Parquet, lacks a column or
    holds NaN or implausible times is refused with one line naming it, not a pyarrow traceback
    (or, worse, accepted and averaged into a report)."""
    import pyarrow as pa

    try:  # pages written with a CRC (write_traces) are verified; older files have none to check
        df = pd.read_parquet(path, page_checksum_verification=True)
    except (pa.ArrowException, OSError, ValueError) as exc:
        first = (str(exc).splitlines() or [type(exc).__name__])[0]
        raise TraceFormatError(path, f"not a readable Parquet file: corrupted, or another format "
                                     f"({type(exc).__name__}: {first})") from None
    check(df, path)
    return df


def read_dataset(directory: str | Path) -> pd.DataFrame:
    """All traces of a dataset directory, each file checked by :func:`read_trace_file`."""
    files = sorted(Path(directory).glob("*.parquet"))
    if not files:
        raise TraceFormatError(directory, "no execution-trace Parquet files in this directory")
    return pd.concat([read_trace_file(f) for f in files], ignore_index=True)


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

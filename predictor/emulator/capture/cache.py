"""Parquet caches of captured op sequences, tied to the code that captured them.

Why: a capture's op list, FLOPs and bytes come from this package, the model zoo and torch. A
cache written by another version of any of them would give the same command another result
on a machine that happens to hold it (an older cache priced every GRU as one element-wise op).
Each cache file records a fingerprint of that code; a file without it, or with another one, is
captured again after one ``warning:`` line, never trusted.
"""

from __future__ import annotations

import functools
import hashlib
import sys
from pathlib import Path

import pandas as pd

FINGERPRINT_KEY = b"ets.capture_fingerprint"
_PACKAGE = Path(__file__).resolve().parents[2]  # predictor/
_SOURCES = ("emulator/capture", "emulator/zoo", "common/op_trace.py")  # what decides a captured op sequence


@functools.lru_cache(maxsize=1)
def fingerprint() -> str:
    """SHA-256 of the capture code's sources (``predictor/emulator/capture``, ``predictor/emulator/zoo``, the trace
    schema) and torch's version: equal exactly when a capture would give the same rows."""
    import torch

    h = hashlib.sha256(f"torch {torch.__version__}\n".encode())
    for name in _SOURCES:
        root = _PACKAGE / name
        files = sorted(root.rglob("*.py")) if root.is_dir() else [root]
        for path in files:
            h.update(f"{path.relative_to(_PACKAGE).as_posix()}\n".encode())
            h.update(path.read_bytes())
    return h.hexdigest()


def read(path: Path | None) -> pd.DataFrame | None:
    """The cached op sequences in ``path``, checked like any dataset file; None when there is no
    file, or when it was captured by other code (then a ``warning:`` line says it is redone)."""
    import pyarrow.parquet as pq

    from predictor.common.op_trace import read_trace_file

    if path is None or not Path(path).exists():
        return None
    table = read_trace_file(path)  # refuses a FIFO, a corrupt or malformed file in one line
    recorded = (pq.read_schema(path).metadata or {}).get(FINGERPRINT_KEY, b"").decode("ascii", "replace")
    if recorded != fingerprint():
        why = "no capture fingerprint recorded" if not recorded else f"fingerprint {recorded[:12]}…"
        print(f"warning: {path}: captured by another version of the capture code ({why}, this one "
              f"{fingerprint()[:12]}…): captured again", file=sys.stderr, flush=True)
        return None
    return table


def write(table: pd.DataFrame, path: Path) -> None:
    """``table`` as Parquet with this code's fingerprint, replacing ``path`` atomically."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from predictor.common.outputs import atomic_file

    arrow = pa.Table.from_pandas(table.reset_index(drop=True), preserve_index=False)
    arrow = arrow.replace_schema_metadata({**(arrow.schema.metadata or {}), FINGERPRINT_KEY: fingerprint().encode()})
    with atomic_file(path) as tmp:  # never written through a link planted at its name
        pq.write_table(arrow, tmp, write_page_checksum=True)

"""NeuSight's per-op training labels as a tidy table, for per-op comparisons with predictions.

Why: besides one iteration time per run, NeuSight timed every torch.fx node of one transformer
layer plus the embeddings and the head, forward and backward, on real GPUs
(``calibration/neusight/labels/<GPU>/<model>-train-<seq>-<batch>.csv``; the origin repeats the
layer ``num_layer`` times to get the iteration). Comparing a predicted trace op by op needs those
rows with their shapes, not the CSV's strings.

One row per fx node: ``device`` ("A100-80GB" | "V100"), ``workload`` (zoo model name,
``predictor.zoo.llm``), ``seq``, ``batch`` (from the file name), ``node`` (fx node name, e.g.
``transformer_h_0_attn_c_attn`` or ``matmul_1``), ``fx_op`` (placeholder | get_attr |
call_module | call_function | call_method | output), ``target`` (module path or function),
``input_shapes`` (list of shape lists), ``output_shape`` (list of ints), ``dtype`` ("" when the
CSV has none, e.g. for size/getitem nodes), ``latency_ms`` (NeuSight's ``latency``: the node's
forward and backward timed together — equal to fw + bw for most nodes, larger for 140 of the 1,215
real rows, mostly modules with weights), ``fw_ms``, ``bw_ms`` (ms, >= 0), ``origin``
(``neusight/labels/<GPU>/<file>:<1-based line>``). The same files as
:func:`predictor.devices.measurements.load_neusight` are kept and excluded (single GPU only; no
Switch-XL, whose CSVs are empty in the origin); malformed cells raise ``MeasurementError`` naming
file, line and column.
"""

from __future__ import annotations

import ast
import math
from pathlib import Path

import pandas as pd

from predictor.devices.measurements import (
    MeasurementError, csv_rows, neusight_device_and_workload, neusight_files, neusight_label,
)

CSV_COLUMNS = ("Name", "op", "target", "input_shapes", "output_shape", "dtype", "latency", "fw_latency", "bw_latency")
COLUMNS = ("device", "workload", "seq", "batch", "node", "fx_op", "target", "input_shapes", "output_shape", "dtype",
           "latency_ms", "fw_ms", "bw_ms", "origin")
_TIMES = {"latency": "latency_ms", "fw_latency": "fw_ms", "bw_latency": "bw_ms"}


def _shape(path: Path, line: int, field: str, text: str) -> list[int]:
    dims = text if isinstance(text, (list, tuple)) else _literal(path, line, field, text)
    if not isinstance(dims, (list, tuple)) or not all(isinstance(d, int) and not isinstance(d, bool) for d in dims):
        raise MeasurementError(path, f"not a shape (a list of ints): {text!r}", where=f"line {line}", field=field)
    return [int(d) for d in dims]


def _literal(path: Path, line: int, field: str, text: str) -> object:
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        raise MeasurementError(path, f"not a Python literal: {text!r}", where=f"line {line}", field=field) from None


def _ms(path: Path, line: int, field: str, text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise MeasurementError(path, f"not a number: {text!r}", where=f"line {line}", field=field) from None
    if not math.isfinite(value) or value < 0:
        raise MeasurementError(path, f"must be finite and >= 0 (ms), got {text!r}", where=f"line {line}", field=field)
    return value


def _load_file(path: Path, origin: str) -> list[dict]:
    device, workload = neusight_device_and_workload(path)
    _, seq, batch, _ = neusight_label(path)
    rows: list[dict] = []
    for line, cell, _ in csv_rows(path, CSV_COLUMNS, complete=True):
        shapes = _literal(path, line, "input_shapes", cell["input_shapes"])
        if not isinstance(shapes, (list, tuple)):
            raise MeasurementError(path, f"not a list of shapes: {cell['input_shapes']!r}", where=f"line {line}",
                                   field="input_shapes")
        out = {"device": device, "workload": workload, "seq": seq, "batch": batch, "node": cell["Name"],
               "fx_op": cell["op"], "target": cell["target"],
               "input_shapes": [_shape(path, line, "input_shapes", s) for s in shapes],
               "output_shape": _shape(path, line, "output_shape", cell["output_shape"]),
               "dtype": cell["dtype"], "origin": f"{origin}:{line}"}
        out.update({column: _ms(path, line, key, cell[key]) for key, column in _TIMES.items()})
        rows.append(out)
    if not rows:
        raise MeasurementError(path, "no rows")
    return rows


def load_neusight_ops(directory: str | Path) -> pd.DataFrame:
    """Every single-GPU per-op label CSV under ``<directory>/labels`` (``directory`` = the
    ``neusight`` folder), in file then line order; ``attrs["excluded"]`` lists the skipped files."""
    directory = Path(directory)
    kept, excluded = neusight_files(directory, "csv")
    rows = [row for path, origin in kept for row in _load_file(path, origin)]
    df = pd.DataFrame(rows, columns=list(COLUMNS))
    df = df.astype({"seq": "int64", "batch": "int64", "latency_ms": "float64", "fw_ms": "float64",
                    "bw_ms": "float64"})
    df.attrs["excluded"] = excluded
    return df

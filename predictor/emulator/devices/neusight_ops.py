"""NeuSight's per-op training labels as a tidy table, for per-op comparisons with predictions.

Why: besides one iteration time per run, NeuSight timed every torch.fx node of one transformer
layer plus the embeddings and the head, forward and backward, on real GPUs
(``calibration/neusight/labels/<GPU>/<model>-train-<seq>-<batch>.csv``; the origin repeats the
layer ``num_layer`` times to get the iteration). Comparing a predicted trace op by op needs those
rows with their shapes, not the CSV's strings.

One row per fx node: ``device`` ("A100-80GB" | "V100"), ``workload`` (zoo model name,
``predictor.emulator.zoo.llm``), ``seq``, ``batch`` (from the file name), ``node`` (fx node name, e.g.
``transformer_h_0_attn_c_attn`` or ``matmul_1``), ``fx_op`` (placeholder | get_attr |
call_module | call_function | call_method | output), ``target`` (module path or function),
``input_shapes`` (list of shape lists), ``output_shape`` (list of ints), ``dtype`` ("" when the
CSV has none, e.g. for size/getitem nodes), ``latency_ms`` (NeuSight's ``latency``: the node's
forward and backward timed together — equal to fw + bw for most nodes, larger for 140 of the 1,215
real rows, mostly modules with weights), ``fw_ms``, ``bw_ms`` (ms, >= 0), ``origin``
(``neusight/labels/<GPU>/<file>:<1-based line>``). The same files as
:func:`predictor.emulator.devices.measurements.load_neusight` are kept and excluded (single GPU only; no
Switch-XL, whose CSVs are empty in the origin); malformed cells raise ``MeasurementError`` naming
file, line and column.
"""

from __future__ import annotations

import ast
import math
import re
from pathlib import Path

import pandas as pd

from predictor.common.inputs import short
from predictor.emulator.capture.costs import op_class
from predictor.emulator.devices.measurements import (
    MeasurementError,
    csv_rows,
    neusight_device_and_workload,
    neusight_files,
    neusight_label,
)

CSV_COLUMNS = ("Name", "op", "target", "input_shapes", "output_shape", "dtype", "latency", "fw_latency", "bw_latency")
COLUMNS = ("device", "workload", "seq", "batch", "node", "fx_op", "target", "input_shapes", "output_shape", "dtype",
           "latency_ms", "fw_ms", "bw_ms", "origin")
_TIMES = {"latency": "latency_ms", "fw_latency": "fw_ms", "bw_latency": "bw_ms"}


def _shape(path: Path, line: int, field: str, text: str) -> list[int]:
    dims = text if isinstance(text, (list, tuple)) else _literal(path, line, field, text)
    if not isinstance(dims, (list, tuple)) or not all(isinstance(d, int) and not isinstance(d, bool) for d in dims):
        raise MeasurementError(path, f"not a shape (a list of ints): {short(text)}", where=f"line {line}", field=field)
    return [int(d) for d in dims]


def _literal(path: Path, line: int, field: str, text: str) -> object:
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        raise MeasurementError(path, f"not a Python literal: {short(text)}", where=f"line {line}",
                               field=field) from None


def _ms(path: Path, line: int, field: str, text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise MeasurementError(path, f"not a number: {short(text)}", where=f"line {line}", field=field) from None
    if not math.isfinite(value) or value < 0:
        raise MeasurementError(path, f"must be finite and >= 0 (ms), got {short(text)}", where=f"line {line}",
                               field=field)
    return value


def _load_file(path: Path, origin: str) -> list[dict]:
    device, workload = neusight_device_and_workload(path)
    _, seq, batch, _ = neusight_label(path)
    rows: list[dict] = []
    for line, cell, _ in csv_rows(path, CSV_COLUMNS, complete=True):
        shapes = _literal(path, line, "input_shapes", cell["input_shapes"])
        if not isinstance(shapes, (list, tuple)):
            raise MeasurementError(path, f"not a list of shapes: {short(cell['input_shapes'])}", where=f"line {line}",
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


# --- per op class, expanded to the iteration -----------------------------------------------------
#
# A node's kernel is named like the aten op our traces record, so that both sides fall into the same
# op class (:func:`predictor.emulator.capture.costs.op_class`). Modules are told apart by their attribute
# name (HF BERT / GPT-2 / OPT); GPT-2's Conv1D layers are traced through to ``addmm`` nodes.
# Nodes that launch no kernel (placeholders, Python ints from ``size``/``getitem``/``eq``, views)
# are dropped: NeuSight times them at the ~8 µs floor of its timer, not as GPU work.
LAYER_NODE = re.compile(r"_(layer|h|layers)_0_")  # a node of the first transformer layer
_MODULE_OPS = ((re.compile(r"layer_?norm|ln_|ln$"), "layer_norm"), (re.compile(r"drop"), "dropout"),
               (re.compile(r"embed|wte|wpe"), "embedding"), (re.compile(r"activation_fn|\.act$"), "gelu"),
               (re.compile(r"pooler\.activation"), "tanh"))
_FUNCTION = re.compile(r"^<(?:built-in (?:function|method)|function) (\w+)")
_RENAMED = {"truediv": "div", "contiguous": "clone", "getitem": "slice", "to": "_to_copy", "type": "_to_copy",
            "long": "_to_copy", "bool": "_to_copy", "type_as": "_to_copy"}
_VIEWS = {"view", "reshape", "permute", "transpose", "expand", "unsqueeze", "split", "slice", "size", "dim"}
# Ops of the loss and its gradient seed: NeuSight's labels stop at the logits, so a comparison
# leaves them out of our traces too.
LOSS_OPS = re.compile(r"^(cross_entropy_loss|ones_like|NllLossBackward\d*|LogSoftmaxBackward\d*)$")
CLASS_COLUMNS = ("device", "workload", "seq", "batch", "phase", "cls", "measured_s", "nodes", "origin")


def node_op(fx_op: str, target: str, dtype: str) -> str | None:
    """The aten-style op a NeuSight fx node runs, or None when it launches no GPU kernel."""
    if fx_op in ("placeholder", "get_attr", "output") or not dtype:
        return None  # no tensor out: shapes and Python scalars
    if fx_op == "call_module":
        for pattern, op in _MODULE_OPS:
            if pattern.search(target.lower()):
                return op
        return "linear"
    match = _FUNCTION.match(target)
    name = match.group(1) if match else target
    name = _RENAMED.get(name, name)
    return None if name in _VIEWS else name


def layer_block(nodes: pd.DataFrame) -> tuple[int, int]:
    """[start, stop) positions of the first transformer layer: from its first node to the first
    module after its last one (the final norm, pooler or head), so that the layer's trailing
    residual add belongs to it. Raises ValueError when no node names layer 0."""
    names = nodes["node"].tolist()
    inside = [i for i, n in enumerate(names) if LAYER_NODE.search(n)]
    if not inside:
        raise ValueError("no node of transformer layer 0 (names like ..._layer_0_..., ..._h_0_..., ..._layers_0_...)")
    modules = nodes["fx_op"].to_numpy() == "call_module"
    stop = next((i for i in range(inside[-1] + 1, len(names)) if modules[i]), len(names))
    return inside[0], stop


def class_times(ops: pd.DataFrame) -> pd.DataFrame:
    """Per label file, phase (forward, backward) and op class: the labelled kernel time of the
    iteration as NeuSight builds it — the nodes outside the first layer once, the layer's nodes
    ``layers`` times (the zoo model's depth). ``nodes``: labelled nodes with a kernel per pass."""
    from predictor.emulator.zoo.llm import SPECS

    out = []
    for (device, workload, seq, batch), g in ops.groupby(["device", "workload", "seq", "batch"], sort=True):
        g = g.reset_index(drop=True)
        origin = g["origin"].iloc[0].rsplit(":", 1)[0]
        try:
            start, stop = layer_block(g)
        except ValueError as exc:
            raise MeasurementError(Path(origin), str(exc), field="Name") from None
        repeat = pd.Series(1, index=g.index)
        repeat.iloc[start:stop] = SPECS[workload].layers
        classes = [None if op is None else op_class(op)
                   for op in (node_op(f, t, d) for f, t, d in zip(g["fx_op"], g["target"], g["dtype"]))]
        g = g.assign(cls=classes, repeat=repeat).dropna(subset=["cls"])
        for phase, column in (("forward", "fw_ms"), ("backward", "bw_ms")):
            for cls, c in g.groupby("cls", sort=True):
                seconds = float((c[column] * c["repeat"]).sum()) / 1e3
                if seconds > 0:
                    out.append({"device": device, "workload": workload, "seq": int(seq), "batch": int(batch),
                                "phase": phase, "cls": cls, "measured_s": seconds,
                                "nodes": int((c["repeat"] * (c[column] > 0)).sum()), "origin": origin})
    return pd.DataFrame(out, columns=list(CLASS_COLUMNS))

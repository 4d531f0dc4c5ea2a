"""Importer for the ETS authors' per-iteration CSV files (benchmark/datasets/<GPU>CPUALL/*.csv).

Why: these are the only real per-operator GPU traces we have (../shared/ets_traces, README there);
each file is one training iteration and becomes one execution trace (predictor.common.op_trace).

Mapping (one CSV row -> one trace row; research/predictors.md §1.2):

* ``op``        -> ``op_codes[op]`` (0-based line of ``op_codes.txt``: "conv2d", "__iadd__", "add_", ...),
  without an "aten::" prefix as op_trace requires ("aten::clone" -> "clone")
* ``dir``       -> phase: 1 forward, 2 backward, 3 update
* ``params``    -> the quoted JSON list (first 30 kept; some ``cat`` rows are longer)
* ``kduration`` -> ``duration_us`` (ns / 1000); ``space`` -> ``gap_us`` (ns / 1000, negatives kept:
  overlapping kernels, see the README); ``rduration`` -> ``cpu_us`` (ns / 1000)
* ``flops``, ``bytes``, ``kernels``, ``batch`` as given; ``h`` -> ``input_size``;
  ``input_type`` -> dtype (1 float32, 2 float16, 3 float64)
* ``input_shapes`` = "[]" (the CSV has none); model = file name before the first "."
* ``config_id`` = ``ets:{model}:b{batch}:{h}x{w}:{dtype}:{cfg}`` where cfg is the index in the file
  name ``<model>.<cfg>_7.csv`` (a per-model running index of successful runs, not a config code:
  the same cfg is a different configuration for another model or GPU, hence batch/size/dtype in the id)
* ``source`` = ``{path}:{line}`` (1-based CSV line; the header is line 1)

Errors are :class:`OpTraceFormatError` naming file, line and CSV field.
"""

from __future__ import annotations

import csv
import io
import json
import warnings
from pathlib import Path

import numpy as np
import pandas as pd

from predictor.common.families import family_of
from predictor.common.inputs import InputError, check_width, read_bytes, short
from predictor.common.op_trace import OpTraceFormatError, refusing, validate

OP_CODES_FILE = "op_codes.txt"
# The ETS authors' GPU folders (../shared/ets_traces/<folder>/) and the catalogue GPU each one is
ETS_DEVICES = {"T4": "T4", "2080Ti": "RTX2080Ti"}
ATEN = "aten::"  # two list names carry it (aten::index, aten::clone); trace tables use bare names

PHASE_OF_DIR = {1: "forward", 2: "backward", 3: "update"}
DTYPE_OF_INPUT_TYPE = {1: "float32", 2: "float16", 3: "float64"}

# CSV columns the importer reads (the files have 22; grid, block, r/kStart/EndTime,
# staticSharedMemory, space1 and seq are not needed and not required).
INT_FIELDS = ("op", "dir", "kernels", "batch", "h", "w", "input_type")
FLOAT_FIELDS = ("flops", "bytes", "rduration", "kduration", "space")
REQUIRED_FIELDS = ("op", "dir", "params") + INT_FIELDS[2:] + FLOAT_FIELDS
NON_NEGATIVE = ("flops", "bytes", "rduration", "kduration", "kernels")
POSITIVE = ("batch", "h", "w")
CONSTANT = ("batch", "h", "w", "input_type")  # one configuration per file

_HEADER_LINE = 1  # data row i (0-based) is CSV line i + 2


def load_op_codes(path: str | Path) -> list[str]:
    """Operator names of ``op_codes.txt``: line k (0-based) is the name of code k."""
    path = Path(path)
    try:
        with refusing(path):
            text = read_bytes(path, "op-code list").decode("utf-8")
    except OSError as e:
        raise OpTraceFormatError(path, f"cannot read op-code list: {e.strerror or e}") from e
    except UnicodeDecodeError as e:
        raise OpTraceFormatError(path, f"op-code list is not UTF-8 text: {e.reason} at byte {e.start:,}") from None
    names = [line.strip() for line in text.splitlines()]
    while names and not names[-1]:
        names.pop()
    if not names:
        raise OpTraceFormatError(path, "op-code list is empty")
    for i, name in enumerate(names):
        if not name:
            raise OpTraceFormatError(path, "empty operator name (would shift every later code)", row=i + 1)
    return names


def _find_op_codes(csv_path: Path) -> Path:
    here = csv_path.absolute().parent
    for folder in (here, here.parent):
        candidate = folder / OP_CODES_FILE
        if candidate.is_file():
            return candidate
    raise OpTraceFormatError(csv_path, f"no {OP_CODES_FILE} in {here} or {here.parent}; pass op_codes=")


def _resolve_op_codes(csv_path: Path, op_codes: list[str] | str | Path | None) -> list[str]:
    if op_codes is None:
        return load_op_codes(_find_op_codes(csv_path))
    if isinstance(op_codes, (str, Path)):
        return load_op_codes(op_codes)
    return list(op_codes)


def _name_parts(path: Path) -> tuple[str, str]:
    """(model, cfg) from ``<model>.<cfg>_<iterations>.csv``; cfg is "" when the name has none."""
    stem = path.name[:-4] if path.name.lower().endswith(".csv") else path.name
    model, _, rest = stem.partition(".")
    return model, rest.split("_")[0]


def _first(mask: np.ndarray) -> int:
    return int(np.argmax(mask))


def _numeric(path: Path, raw: pd.DataFrame, field: str, integer: bool) -> np.ndarray:
    text = raw[field]
    values = pd.to_numeric(text, errors="coerce").to_numpy(dtype="float64")
    bad = ~np.isfinite(values)
    if bad.any():
        i = _first(bad)
        raise OpTraceFormatError(path, f"expected a finite number, got {short(text.iloc[i])}",
                                 row=i + _HEADER_LINE + 1, field=field)
    if integer:
        bad = (values != np.round(values)) | (np.abs(values) > 2.0**53)
        if bad.any():
            i = _first(bad)
            raise OpTraceFormatError(path, f"expected an integer, got {short(text.iloc[i])}",
                                     row=i + _HEADER_LINE + 1, field=field)
        return values.astype("int64")
    return values


def _params(path: Path, column: pd.Series) -> list[list[int]]:
    out = []
    for i, text in enumerate(column):
        # A flat list of ints has one "[" and no "{": any other is refused unparsed (json.loads
        # recurses per level, and 100,000 levels crash it).
        try:
            value = json.loads(text) if text.count("[") <= 1 and "{" not in text else None
        except ValueError:
            value = None
        if not isinstance(value, list) or not all(isinstance(v, int) and not isinstance(v, bool) for v in value):
            raise OpTraceFormatError(path, f"expected a JSON list of integers, got {short(text)}",
                                     row=i + _HEADER_LINE + 1, field="params")
        out.append(value)
    return out


def _longest_row_line(data: bytes) -> int | None:
    """First line whose record has more fields than the header (pandas would drop or shift them)."""
    reader = csv.reader(io.StringIO(data.decode("utf-8", "replace"), newline=""))
    width = len(next(reader, []))
    start = reader.line_num + 1
    for row in reader:
        if len(row) > width:
            return start  # where the record begins (a stray quote can make it span lines)
        start = reader.line_num + 1
    return None


def _file_bytes(path: Path) -> bytes:
    """The file's bytes, checked first (:func:`predictor.common.inputs.read_bytes`: a FIFO, a device, an
    over-size file are refused) and its header's width before pandas lists its names."""
    try:
        with refusing(path):
            data = read_bytes(path, "ETS CSV file")
    except OSError as e:
        raise OpTraceFormatError(path, f"cannot read: {e.strerror or type(e).__name__}") from e
    end = data.find(b"\n")
    header = data if end < 0 else data[:end]
    try:
        check_width(header.count(b",") + 1, "header")
    except InputError as exc:
        raise OpTraceFormatError(path, str(exc), row=_HEADER_LINE) from None
    return data


def _read(path: Path) -> pd.DataFrame:
    data = _file_bytes(path)
    try:
        with warnings.catch_warnings():
            # index_col=False: a row with an extra field must not silently turn column 1 into an index
            warnings.simplefilter("error", pd.errors.ParserWarning)
            raw = pd.read_csv(io.BytesIO(data), dtype=str, keep_default_na=False, na_filter=False, index_col=False,
                              skip_blank_lines=False, encoding="utf-8")
    except pd.errors.EmptyDataError as e:
        raise OpTraceFormatError(path, "empty file (no header)") from e
    except (pd.errors.ParserError, pd.errors.ParserWarning) as e:
        raise OpTraceFormatError(path, "more fields than the header" if isinstance(e, pd.errors.ParserWarning)
                                 else f"malformed CSV: {str(e).strip()}", row=_longest_row_line(data)) from e
    except (OSError, UnicodeDecodeError) as e:
        raise OpTraceFormatError(path, f"cannot read: {e}") from e
    raw.columns = [str(c).strip() for c in raw.columns]
    missing = [c for c in REQUIRED_FIELDS if c not in raw.columns]
    if missing:
        raise OpTraceFormatError(path, f"header lacks column(s) {missing}", row=_HEADER_LINE, field=missing[0])
    raw = raw[list(REQUIRED_FIELDS)]
    blank = (raw == "").all(axis=1).to_numpy()
    n = len(raw)
    while n and blank[n - 1]:  # tolerate trailing blank lines
        n -= 1
    raw = raw.iloc[:n]
    if n == 0:
        raise OpTraceFormatError(path, "no data rows")
    if blank[:n].any():
        raise OpTraceFormatError(path, "blank line inside the data", row=_first(blank[:n]) + _HEADER_LINE + 1)
    return raw


def load(path: str | Path, *, device: str | None = None,
         op_codes: list[str] | str | Path | None = None) -> pd.DataFrame:
    """One ETS CSV file (one training iteration) -> one validated execution trace.

    device: default the name of the folder holding the file ("T4", "2080Ti").
    op_codes: names, or the path of op_codes.txt; default ``op_codes.txt`` beside the file or one
    folder up.
    """
    path = Path(path)
    codes = _resolve_op_codes(path, op_codes)
    raw = _read(path)
    lines = np.arange(len(raw)) + _HEADER_LINE + 1

    num = {f: _numeric(path, raw, f, integer=True) for f in INT_FIELDS}
    num.update({f: _numeric(path, raw, f, integer=False) for f in FLOAT_FIELDS})
    for field in NON_NEGATIVE:
        bad = num[field] < 0
        if bad.any():
            i = _first(bad)
            raise OpTraceFormatError(path, f"must be >= 0, got {short(raw[field].iloc[i])}", row=lines[i], field=field)
    for field in POSITIVE:
        bad = num[field] <= 0
        if bad.any():
            i = _first(bad)
            raise OpTraceFormatError(path, f"must be > 0, got {short(raw[field].iloc[i])}", row=lines[i], field=field)
    for field in CONSTANT:
        bad = num[field] != num[field][0]
        if bad.any():
            i = _first(bad)
            raise OpTraceFormatError(path, f"is {short(raw[field].iloc[i])} but {short(raw[field].iloc[0])} on line "
                                         f"{lines[0]}; a file must hold one configuration",
                                     row=lines[i], field=field)

    op = num["op"]
    bad = (op < 0) | (op >= len(codes))
    if bad.any():
        i = _first(bad)
        raise OpTraceFormatError(path, f"operator code {op[i]} not in the op-code list ({len(codes)} codes)",
                                 row=lines[i], field="op")
    direction = num["dir"]
    bad = ~np.isin(direction, list(PHASE_OF_DIR))
    if bad.any():
        i = _first(bad)
        raise OpTraceFormatError(path, f"pass {direction[i]} is not 1 (forward), 2 (backward) or 3 (update)",
                                 row=lines[i], field="dir")
    input_type = int(num["input_type"][0])
    if input_type not in DTYPE_OF_INPUT_TYPE:
        raise OpTraceFormatError(path, f"input type {input_type} is not 1 (float32), 2 (float16) or 3 (float64)",
                                 row=lines[0], field="input_type")
    params = _params(path, raw["params"])

    dtype = DTYPE_OF_INPUT_TYPE[input_type]
    batch, h, w = int(num["batch"][0]), int(num["h"][0]), int(num["w"][0])
    model, cfg = _name_parts(path)
    if device is None:
        device = path.absolute().parent.name
    names = np.asarray([name.removeprefix(ATEN) for name in codes], dtype=object)
    df = pd.DataFrame({
        "config_id": f"ets:{model}:b{batch}:{h}x{w}:{dtype}:{cfg}",
        "device": device,
        "family": family_of(model),
        "model": model,
        "idx": np.arange(len(raw), dtype="int64"),
        "op": names[op],
        "phase": [PHASE_OF_DIR[int(d)] for d in direction],
        "input_shapes": "[]",
        "params": params,
        "flops": num["flops"],
        "bytes": num["bytes"],
        "dtype": dtype,
        "batch": batch,
        "input_size": h,
        "cpu_us": num["rduration"] / 1000.0,
        "duration_us": num["kduration"] / 1000.0,
        "gap_us": num["space"] / 1000.0,
        "kernels": num["kernels"],
        "source": [f"{path}:{line}" for line in lines],
    })
    return validate(df, path)


def zoo_config(trace: pd.DataFrame):
    """The zoo config an ETS iteration ran: its model, batch, image size and dtype, and the classes
    of its loss (the authors drew ``num_classes`` at random per run). ``ValueError`` says why the
    zoo cannot build it (fp64 runs, models outside the zoo, non-square images)."""
    from dataclasses import replace

    from predictor.emulator.zoo.config import ZOO_DTYPES
    from predictor.emulator.zoo.vision import MODELS, config_for

    first = trace.iloc[0]
    where = str(first["source"]).rsplit(":", 1)[0]
    model, dtype = str(first["model"]), str(first["dtype"])
    if model not in MODELS:
        raise ValueError(f"{where}: model {short(model)} is not in the zoo")
    if dtype not in ZOO_DTYPES:
        raise ValueError(f"{where}: dtype {dtype} (the zoo builds {', '.join(ZOO_DTYPES)})")
    h, _, w = str(first["config_id"]).split(":")[3].partition("x")
    if h != w:
        raise ValueError(f"{where}: image {h}x{w} is not square (zoo configs are)")
    loss = trace[(trace["op"] == "cross_entropy") & (trace["phase"] == "forward")]
    if loss.empty or len(loss["params"].iloc[0]) < 3 or loss["params"].iloc[0][2] < 1:
        raise ValueError(f"{where}: no forward cross_entropy row giving the number of classes")
    config = config_for(model, int(first["batch"]), int(first["input_size"]), dtype)
    return replace(config, num_classes=int(loss["params"].iloc[0][2]))


def load_many(path_or_dir: str | Path, *, device: str | None = None,
              op_codes: list[str] | str | Path | None = None) -> pd.DataFrame:
    """A CSV file, or every ``*.csv`` under a directory (recursively, sorted), as one table.

    With the defaults, ``load_many(".../ets_traces")`` reads T4/ and 2080Ti/ with device = folder name
    and the op_codes.txt of the parent. Two files giving the same (device, config_id) are an error.
    """
    root = Path(path_or_dir)
    if not root.exists():
        raise OpTraceFormatError(root, "file or directory not found")
    if not root.is_dir():
        return load(root, device=device, op_codes=op_codes)
    files = sorted(p for p in root.rglob("*.csv") if not p.is_dir())  # a FIFO or link is refused, not skipped
    if not files:
        raise OpTraceFormatError(root, "no *.csv files in this directory")
    shared = None if op_codes is None else _resolve_op_codes(root, op_codes)
    by_folder: dict[Path, list[str]] = {}
    tables, seen = [], {}
    for f in files:
        codes = shared
        if codes is None:
            if f.parent not in by_folder:
                by_folder[f.parent] = load_op_codes(_find_op_codes(f))
            codes = by_folder[f.parent]
        table = load(f, device=device, op_codes=codes)
        key = (table["device"].iloc[0], table["config_id"].iloc[0])
        if key in seen:
            raise OpTraceFormatError(f, f"same device and config_id {short(key, 200)} as {seen[key]}")
        seen[key] = f
        tables.append(table)
    return pd.concat(tables, ignore_index=True)

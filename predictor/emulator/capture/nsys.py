"""Importer for the Nsight Systems SQLite export of a PyTorch training iteration under `emit_nvtx`.

Why: ETS collected its data exactly this way (``nsys`` + ``torch.autograd.profiler.emit_nvtx()``,
parsed by PyProf, predictors.md §1.1/§1.2/§6.3); this module turns such a file into one execution
trace (``predictor.common.op_trace``) without PyProf or torch.

Export a report with ``nsys export --type sqlite -o run.sqlite run.nsys-rep`` (times in ns).

Design decisions: the rules are PyProf's join and ETS's grouping, so an imported trace is the one
the authors trained on. Kernels join their runtime launch on ``correlationId`` *and* process id
(correlation ids are unique only within a process); an iteration is an ETS ``layer:...iter=<i>``
or ``ProfilerStep#<i>`` NVTX range; the outermost ``emit_nvtx`` op marker enclosing a launch is its
op (``aten::conv2d`` absorbs its ``aten::cudnn_convolution``); phase comes from ``Backward`` markers
and autograd threads, else from ``UPDATE_RANGE_PREFIXES``; gaps follow ETS's ``do_analyze.py``.
Memcpy/memset activity is not part of the trace (ETS counts kernels only).

Tables and columns read, and the rules step by step: docs/ets.md, 'Import rules: kineto and nsys'.
"""

from __future__ import annotations

import re
import sqlite3
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from predictor.common.families import family_of
from predictor.common.inputs import InputError, load_json, names, regular_file, short
from predictor.common.op_trace import MAX_PARAMS, OpTraceFormatError, refusing, shapes_json, validate

KERNEL_TABLE = "CUPTI_ACTIVITY_KIND_KERNEL"
RUNTIME_TABLE = "CUPTI_ACTIVITY_KIND_RUNTIME"
DRIVER_TABLE = "CUPTI_ACTIVITY_KIND_DRIVER"
NVTX_TABLE = "NVTX_EVENTS"
STRINGS_TABLE = "StringIds"
NVTX_PUSH_POP = 59  # eventType of NvtxPushPopRange
PID_DIV, PID_MOD = 0x1000000, 0x1000000
UPDATE_RANGE_PREFIXES = ("Optimizer.step", "Optimizer.zero_grad")
GPU_INFO_TABLES = (("TARGET_INFO_GPU", "id"), ("TARGET_INFO_CUDA_DEVICE", "cudaId"))
READ_TABLES = frozenset({KERNEL_TABLE, RUNTIME_TABLE, DRIVER_TABLE, NVTX_TABLE, STRINGS_TABLE}
                        | {table for table, _ in GPU_INFO_TABLES})

_SQLITE_MAGIC = b"SQLite format 3\x00"
_SEQ_MARKER = re.compile(r"^(?P<op>[^,]+?), seq = -?\d+(?P<rest>(?:, .*)?)$", re.S)
_NS_MARKER = re.compile(r"^(?P<op>[A-Za-z_]\w*(?:::\w+)+)(?P<rest>(?:, .*)?)$", re.S)
_ETS_ITER = re.compile(r"^layer:.*\biter\s*=\s*(\d+)", re.S)
_STEP_ITER = re.compile(r"^ProfilerStep#(\d+)\s*$")
_ETS_FIELD = re.compile(r"\b(model|batch|h|dtype)\s*=\s*([^,\s]+)")


@dataclass
class _Range:
    rowid: int
    start: int
    end: int
    tid: int
    text: str


@dataclass
class _Op:
    key: tuple
    name: str
    shapes: list | None
    source: str
    kstarts: list[int] = field(default_factory=list)
    kdurs: list[int] = field(default_factory=list)
    calls: dict[int, int] = field(default_factory=dict)  # runtime rowid -> duration (ns)
    backward: bool = False
    update: bool = False
    tid: int = 0


def load(path: str | Path, *, device: str | None = None, model: str | None = None,
         iteration: int | None = None) -> pd.DataFrame:
    """One execution trace (validated) from an nsys SQLite export; see the module docstring."""
    path = Path(path)
    con = _connect(path)
    try:
        return _load(con, path, device=device, model=model, iteration=iteration)
    except (sqlite3.DatabaseError, pd.errors.DatabaseError) as exc:
        raise OpTraceFormatError(path, f"cannot read the SQLite export: {exc}") from exc
    finally:
        con.close()


# -- reading ----------------------------------------------------------------------------------

def _connect(path: Path) -> sqlite3.Connection:
    """A read-only connection to ``path``, checked by ``stat`` first (a FIFO would block the
    magic read, ``/dev/zero`` is no file) and by its magic bytes."""
    try:
        with refusing(path):
            regular_file(path, "Nsight Systems SQLite export")
    except FileNotFoundError:
        raise OpTraceFormatError(path, "no such file") from None
    with path.open("rb") as fh:
        if fh.read(len(_SQLITE_MAGIC)) != _SQLITE_MAGIC:
            raise OpTraceFormatError(path, "not an SQLite file: export the report with "
                                         "`nsys export --type sqlite`")
    return sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)


def _plain_tables(path: Path, con: sqlite3.Connection) -> set[str]:
    """The names of the file's tables. A view or virtual table under a name this importer reads
    is refused: it runs a query of the file's choosing (a recursive view never ends), and
    ``nsys export`` writes plain tables only."""
    tables = set()
    for name, kind, sql in con.execute("SELECT name, type, sql FROM sqlite_master WHERE type IN ('table', 'view')"):
        plain = kind == "table" and not str(sql or "").lstrip().upper().startswith("CREATE VIRTUAL")
        if not plain and name in READ_TABLES:
            raise OpTraceFormatError(path, f"{name} is a {'view' if kind == 'view' else 'virtual table'}, not a "
                                         "plain table: an nsys export holds plain tables only", field=name)
        if plain:
            tables.add(name)
    return tables


def _columns(con: sqlite3.Connection, table: str) -> set[str]:
    return {row[1] for row in con.execute(f"PRAGMA table_info({table})")}


def _require(path: Path, table: str, have: set[str], needed: tuple[str, ...]) -> None:
    for col in needed:
        if col not in have:
            raise OpTraceFormatError(path, f"table {table} lacks column {col!r}",
                                     field=f"{table}.{col}")


def _load(con, path, *, device, model, iteration) -> pd.DataFrame:
    tables = _plain_tables(path, con)
    if KERNEL_TABLE not in tables:
        raise OpTraceFormatError(path, "file has no kernel table: was the profile captured with CUDA "
                                     "tracing?", field=KERNEL_TABLE)
    for table in (STRINGS_TABLE, RUNTIME_TABLE):
        if table not in tables:
            raise OpTraceFormatError(path, f"file has no {table} table", field=table)
    if NVTX_TABLE not in tables or con.execute(
            f"SELECT 1 FROM {NVTX_TABLE} WHERE eventType = ? LIMIT 1",
            (NVTX_PUSH_POP,)).fetchone() is None:
        raise OpTraceFormatError(path, "file has no NVTX push/pop ranges: profile under "
                                     "torch.autograd.profiler.emit_nvtx() with "
                                     "`nsys profile -t cuda,nvtx`", field=f"{NVTX_TABLE}.eventType")
    nvtx_cols = _columns(con, NVTX_TABLE)
    _require(path, NVTX_TABLE, nvtx_cols, ("start", "end", "eventType", "globalTid"))
    if not nvtx_cols & {"text", "textId"}:
        raise OpTraceFormatError(path, f"table {NVTX_TABLE} has neither 'text' nor 'textId'",
                                 field=f"{NVTX_TABLE}.text")
    _require(path, RUNTIME_TABLE, _columns(con, RUNTIME_TABLE),
             ("start", "end", "globalTid", "correlationId"))
    kcols = _columns(con, KERNEL_TABLE)
    _require(path, KERNEL_TABLE, kcols, ("start", "end", "correlationId", "globalPid"))
    name_col = "demangledName" if "demangledName" in kcols else "shortName"
    _require(path, KERNEL_TABLE, kcols, (name_col,))

    missing = con.execute(
        f"SELECT k.rowid, k.{name_col} FROM {KERNEL_TABLE} k LEFT JOIN {STRINGS_TABLE} s "
        f"ON s.id = k.{name_col} WHERE s.id IS NULL LIMIT 1").fetchone()
    if missing is not None:
        raise OpTraceFormatError(path, f"{KERNEL_TABLE} row {short(missing[0])}: kernel name id "
                                     f"{short(missing[1])} is not in {STRINGS_TABLE}", row=missing[0],
                                 field=f"{KERNEL_TABLE}.{name_col}")

    launches = _launches(con, tables, kcols, name_col)
    text_sql = _text_sql(nvtx_cols)
    iters = _iteration_ranges(con, text_sql)
    if iters:
        label, pid, it = _choose_iteration(path, iters, iteration)
        win, main_tid, iter_rowid, info = (it.start, it.end), it.tid, it.rowid, _ets_fields(it.text)
        launches = launches[(launches["pid"] == pid) & (launches["rstart"] >= win[0])
                            & (launches["rstart"] <= win[1])]
    else:
        if iteration is not None:
            raise OpTraceFormatError(path, f"iteration {iteration} requested but the file has no "
                                         "iteration ranges ('layer:...iter=N' or 'ProfilerStep#N')",
                                     field=f"{NVTX_TABLE}.text")
        label, win, info, iter_rowid = "all", None, {}, None
        if not launches.empty:
            pid = int(launches["pid"].value_counts().sort_index().idxmax())
            launches = launches[launches["pid"] == pid]
            main_tid = int(launches.sort_values("rstart")["tid"].iloc[0])
    if launches.empty:
        raise OpTraceFormatError(path, f"no kernels in the selected iteration ({label})",
                                 field=KERNEL_TABLE)

    ranges = _ranges(con, text_sql, pid, win)
    ops = _group(path, launches, ranges, main_tid, iter_rowid)
    return _table(path, ops, launches, con, tables, device=device, model=model, label=label,
                  info=info)


def _launches(con, tables, kcols, name_col) -> pd.DataFrame:
    """Kernels joined to their launching API call (correlationId + pid)."""
    dev = "k.deviceId" if "deviceId" in kcols else "0"
    kernels = pd.read_sql_query(
        f"SELECT k.rowid AS krow, k.start AS kstart, k.end AS kend, {dev} AS deviceId, "
        f"k.correlationId AS corr, k.globalPid / {PID_DIV} % {PID_MOD} AS pid, s.value AS kname "
        f"FROM {KERNEL_TABLE} k JOIN {STRINGS_TABLE} s ON s.id = k.{name_col}", con)
    api_tables = [RUNTIME_TABLE] + ([DRIVER_TABLE] if DRIVER_TABLE in tables else [])
    calls = []
    for i, table in enumerate(api_tables):
        calls.append(pd.read_sql_query(
            f"SELECT rowid * {len(api_tables)} + {i} AS rrow, start AS rstart, end AS rend, "
            f"globalTid AS tid, correlationId AS corr, globalTid / {PID_DIV} % {PID_MOD} AS pid "
            f"FROM {table}", con))
    runtime = pd.concat(calls, ignore_index=True)
    runtime = runtime[runtime["corr"].isin(set(kernels["corr"]))]
    out = kernels.merge(runtime, on=["pid", "corr"], how="inner")
    return out.sort_values(["kstart", "krow"], kind="stable").reset_index(drop=True)


def _text_sql(nvtx_cols: set[str]) -> tuple[str, str]:
    """(expression for a range's text, join clause) honouring textId -> StringIds."""
    join = f"LEFT JOIN {STRINGS_TABLE} s ON s.id = n.textId"
    if "textId" not in nvtx_cols:
        return "n.text", ""
    return ("COALESCE(n.text, s.value)" if "text" in nvtx_cols else "s.value"), join


def _iteration_ranges(con, text_sql) -> list[tuple[int, int, _Range]]:
    expr, join = text_sql
    rows = con.execute(
        f"SELECT * FROM (SELECT n.rowid, n.start, n.end, n.globalTid, {expr} AS t "
        f"FROM {NVTX_TABLE} n {join} WHERE n.eventType = ? AND n.end IS NOT NULL) "
        f"WHERE t LIKE 'layer:%' OR t LIKE 'ProfilerStep#%'", (NVTX_PUSH_POP,)).fetchall()
    out = []
    for rowid, start, end, tid, text in rows:
        m = _ETS_ITER.match(text) or _STEP_ITER.match(text)
        if m:
            pid = (tid // PID_DIV) % PID_MOD
            out.append((int(m.group(1)), pid, _Range(rowid, start, end, tid, text)))
    return out


def _choose_iteration(path, iters, iteration):
    numbers = sorted({n for n, _, _ in iters})
    want = numbers[-1] if iteration is None else int(iteration)
    cands = [it for it in iters if it[0] == want]
    if not cands:
        raise OpTraceFormatError(path, f"iteration {want} not found; the file has iterations "
                                     f"[{names(numbers)}]",
                                 field=f"{NVTX_TABLE}.text")
    return min(cands, key=lambda it: (it[1], it[2].start))


def _ets_fields(text: str) -> dict[str, str]:
    if not text.startswith("layer:"):
        return {}
    return dict(_ETS_FIELD.findall(text.split(":", 1)[1]))


def _ranges(con, text_sql, pid, win) -> dict[int, list[_Range]]:
    """Push/pop ranges of one process overlapping the window, per globalTid, by (start, -end)."""
    expr, join = text_sql
    sql = (f"SELECT n.rowid, n.start, n.end, n.globalTid, {expr} FROM {NVTX_TABLE} n {join} "
           f"WHERE n.eventType = ? AND n.end IS NOT NULL "
           f"AND n.globalTid / {PID_DIV} % {PID_MOD} = ?")
    args: list = [NVTX_PUSH_POP, pid]
    if win is not None:
        sql += " AND n.start <= ? AND n.end >= ?"
        args += [win[1], win[0]]
    per_tid: dict[int, list[_Range]] = {}
    for rowid, start, end, tid, text in con.execute(sql, args):
        per_tid.setdefault(tid, []).append(_Range(rowid, start, end, tid, text or ""))
    for rs in per_tid.values():
        rs.sort(key=lambda r: (r.start, -r.end, r.rowid))
    return per_tid


# -- grouping ---------------------------------------------------------------------------------

def _marker(text: str):
    """(op name, shapes or None) when the range is an emit_nvtx op marker, else None.
    InputError when its sizes are nested past the JSON depth limit."""
    m = _SEQ_MARKER.match(text) or _NS_MARKER.match(text)
    if not m:
        return None
    return m.group("op").strip(), _sizes(m.group("rest"))


def _markers(path: Path, enclosing: list[_Range]) -> list[tuple]:
    """(op name, shapes, range) of each op marker among the ranges enclosing a launch."""
    out = []
    for r in enclosing:
        try:
            found = _marker(r.text)
        except InputError as exc:
            raise OpTraceFormatError(path, str(exc), row=r.rowid, field=f"{NVTX_TABLE}.text") from None
        if found is not None:
            out.append(found + (r,))
    return out


def _sizes(rest: str):
    i = rest.find("sizes = [")
    if i < 0:
        return None
    j = i + len("sizes = ")
    depth = 0
    for k in range(j, len(rest)):
        depth += {"[": 1, "]": -1}.get(rest[k], 0)
        if depth == 0:
            try:
                shapes = load_json(rest[j:k + 1], "the op's sizes")
            except InputError:
                raise
            except ValueError:
                return None
            return shapes if isinstance(shapes, list) else None
    return None


def _is_backward_name(name: str) -> bool:
    return "Backward" in name or name.endswith("_backward")


def _strip(name: str) -> str:
    return name[len("aten::"):] if name.startswith("aten::") else name


def _kernel_base(name: str) -> str:
    """'void at::native::(anonymous namespace)::foo_kernel<float>(int)' -> 'foo_kernel'."""
    base = name.replace("(anonymous namespace)::", "").removeprefix("void ")
    base = re.split(r"[<(]", base, maxsplit=1)[0]
    return base.rsplit("::", 1)[-1].strip() or name


def _enclosing(ranges: list[_Range], launches: list[tuple]) -> list[list[_Range]]:
    """For one thread's launches (start, end), sorted by start: enclosing ranges, outer first."""
    out, stack, i = [], [], 0
    for s, e in launches:
        while i < len(ranges) and ranges[i].start <= s:
            r = ranges[i]
            while stack and stack[-1].end < r.start:
                stack.pop()
            stack.append(r)
            i += 1
        while stack and stack[-1].end < e:
            stack.pop()
        out.append([r for r in stack if r.start <= s and r.end >= e])
    return out


def _group(path: Path, launches: pd.DataFrame, ranges: dict[int, list[_Range]], main_tid: int,
           iter_rowid: int | None) -> list[_Op]:
    ops: dict[tuple, _Op] = {}
    src = str(path)
    for tid, rows in launches.groupby("tid", sort=True):
        rows = rows.sort_values(["rstart", "krow"], kind="stable")
        encl = _enclosing(ranges.get(tid, []), list(zip(rows["rstart"], rows["rend"])))
        for rec, enc in zip(rows.itertuples(index=False), encl):
            markers = _markers(path, enc)
            if markers:
                name, shapes, top = markers[0]
                key, source = ("nvtx", top.rowid), f"{src}#{NVTX_TABLE}:{top.rowid}"
            else:
                inner = [r for r in enc if r.rowid != iter_rowid]
                name = inner[-1].text if inner else _kernel_base(rec.kname)
                shapes, key = None, ("kernel", int(rec.krow))
                source = f"{src}#{KERNEL_TABLE}:{int(rec.krow)}"
            op = ops.get(key)
            if op is None:
                op = ops[key] = _Op(key, _strip(name), shapes, source, tid=int(tid))
            op.kstarts.append(int(rec.kstart))
            op.kdurs.append(int(rec.kend) - int(rec.kstart))
            op.calls[int(rec.rrow)] = int(rec.rend) - int(rec.rstart)
            op.backward |= any(_is_backward_name(m[0]) for m in markers)
            op.update |= any(r.text.startswith(UPDATE_RANGE_PREFIXES) for r in enc)
    autograd_tids = {op.tid for op in ops.values() if op.backward} - {main_tid}
    for op in ops.values():
        op.backward |= op.tid in autograd_tids
    return sorted(ops.values(), key=lambda o: (min(o.kstarts), o.key))


def _phase(op: _Op) -> str:
    return "backward" if op.backward else "update" if op.update else "forward"


# -- output -----------------------------------------------------------------------------------

_DTYPES = (("bfloat16", "bfloat16"), ("bf16", "bfloat16"), ("float16", "float16"),
           ("half", "float16"), ("fp16", "float16"), ("float64", "float64"), ("double", "float64"))


def _dtype(value: str | None) -> str:
    v = (value or "").lower()
    return next((d for key, d in _DTYPES if key in v), "float32")


def _flatten(shapes) -> list[int]:
    out: list[int] = []

    def walk(x):
        if len(out) >= MAX_PARAMS:
            return
        if isinstance(x, list):
            for y in x:
                walk(y)
        elif isinstance(x, (int, float)) and not isinstance(x, bool):
            out.append(int(x))
    walk(shapes or [])
    return out[:MAX_PARAMS]


def _int(value: str | None) -> int | None:
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None


def _gpu_name(con, tables, device_id: int) -> str | None:
    for table, id_col in GPU_INFO_TABLES:
        if table not in tables:
            continue
        cols = _columns(con, table)
        if "name" not in cols:
            continue
        row = None
        if id_col in cols:
            row = con.execute(f"SELECT name FROM {table} WHERE {id_col} = ? AND name IS NOT NULL "
                              f"AND name != '' LIMIT 1", (device_id,)).fetchone()
        row = row or con.execute(f"SELECT name FROM {table} WHERE name IS NOT NULL AND name != '' "
                                 f"ORDER BY rowid LIMIT 1").fetchone()
        if row:
            return str(row[0]).strip()
    return None


def _first_input(ops: list[_Op], phases: list[str]) -> list | None:
    """Shape of the first input of the first forward op that has one."""
    for op, phase in zip(ops, phases):
        if phase == "forward" and op.shapes and isinstance(op.shapes[0], list) and op.shapes[0]:
            return op.shapes[0]
    return None


def _table(path, ops: list[_Op], launches, con, tables, *, device, model, label,
           info) -> pd.DataFrame:
    model = model or info.get("model") or path.stem
    if device is None:
        device_id = Counter(launches["deviceId"]).most_common(1)[0][0]
        device = _gpu_name(con, tables, int(device_id)) or "cuda"
    phases = [_phase(op) for op in ops]
    first = _first_input(ops, phases)
    batch = _int(info.get("batch"))
    if batch is None:
        batch = int(first[0]) if first and isinstance(first[0], int) else 0
    input_size = _int(info.get("h"))
    if input_size is None:  # NCHW image input
        input_size = int(first[2]) if first and len(first) == 4 and isinstance(first[2], int) else 0
    starts = [min(op.kstarts) for op in ops]
    durs = [sum(op.kdurs) for op in ops]
    gaps = [(starts[i + 1] - (starts[i] + durs[i])) / 1000.0 for i in range(len(ops) - 1)] + [0.0]
    df = pd.DataFrame({
        "config_id": f"nsys:{model}:{label}",
        "device": device,
        "family": family_of(model),
        "model": model,
        "idx": range(len(ops)),
        "op": [op.name for op in ops],
        "phase": phases,
        "input_shapes": [shapes_json(op.shapes) if op.shapes is not None else "[]" for op in ops],
        "params": [_flatten(op.shapes) for op in ops],
        "flops": 0.0,
        "bytes": 0.0,
        "dtype": _dtype(info.get("dtype")),
        "batch": batch,
        "input_size": input_size,
        "cpu_us": [sum(op.calls.values()) / 1000.0 for op in ops],
        "duration_us": [d / 1000.0 for d in durs],
        "gap_us": gaps,
        "kernels": [len(op.kdurs) for op in ops],
        "source": [op.source for op in ops],
    })
    return validate(df, path)

"""Two more real kernel sources — DeepBench and Vidur — as rows of the kernel-problem table.

Why: the learned kernel model (:mod:`predictor.emulator.devices.kernels`) predicts GPUs it never saw from
their spec sheets, so every real kernel time we hold widens what it has seen: DeepBench adds eight
pre-Ampere GPUs (M40 to V100) and, unlike NeuSight, the two backward kernels of each convolution;
Vidur adds fp16 LLM layer kernels on A100 and A40. Each measurement becomes the same device-free
problem as :mod:`predictor.emulator.devices.kernel_data` builds (columns :data:`kernel_data.COLUMNS`) plus
``kernel`` (``forward``, ``grad_input`` or ``grad_weight``) and ``math`` (``fp32``, ``tf32``,
``fp16`` or ``bf16``), FLOPs and bytes counted as :mod:`predictor.emulator.capture.costs` counts them.

Design decisions: convolution backward rows are exactly the two problems
:func:`predictor.emulator.devices.problems.backward_pair` makes, so a model fitted on them prices our
emulated backward convolutions; DeepBench's host-clocked calls sit on a launch floor, so rows at or
under :data:`FLOOR_US` are ``censored``; Vidur's rows are inference kernels (``training`` False);
device strings map through :data:`DEEPBENCH_DEVICES` and an unknown one is an error. Errors
(:class:`InputError`) name the file, the line and the column.

Column formulas, device mapping and counts: docs/gpus.md, 'Kernel sources: DeepBench and Vidur rows'.
"""

from __future__ import annotations

import csv
import io
import re
from pathlib import Path

import numpy as np
import pandas as pd

from predictor.common.inputs import InputError, check_width, read_bytes, short
from predictor.emulator.devices.kernel_data import COLUMNS
from predictor.emulator.devices.problems import backward_pair

SOURCE_COLUMNS = COLUMNS + tuple(c for c in ("kernel", "math") if c not in COLUMNS)  # kernel_data may carry them
SOURCES = ("deepbench", "vidur")
FLOOR_US = 12.0  # DeepBench rows at or under this are on the host's launch floor: censored
ELEMENT_BYTES = {"fp32": 4, "tf32": 4, "fp16": 2, "bf16": 2}

# DeepBench device strings (NVIDIA training sheets) -> GPU catalogue names (see the docstring).
DEEPBENCH_DEVICES = {
    "NVIDIA V100": "V100-SXM2",
    "NVIDIA T4": "T4",
    "NVIDIA Tesla P100": "P100",
    "NVIDIA GTX 1080 Ti": "GTX1080Ti",
    "NVIDIA GTX TitanXp": "TitanXp",
    "Nvidia TitanX Pascal": "TitanXPascal",
    "Nvidia TitanX": "TitanXMaxwell",
    "Nvidia Tesla M40": "M40",
}
# DeepBench ``precision`` strings of the NVIDIA training sheets -> math.
DEEPBENCH_MATH = {
    "Float": "fp32",
    "16 bit inputs, 16 bit multiplication, 32 bit addition": "fp16",  # tensor cores (V100, T4)
    "16 bit inputs, 32 bit multiplication, 32 bit addition": "fp32",  # P100 "pseudo FP16": FP32 math
}
# Vidur GPU folders -> GPU catalogue names.
VIDUR_DEVICES = {"a100": "A100-SXM4-80GB", "a40": "A40"}

_TRAIN_SHEET = re.compile(r"(?:^|/)train/DeepBench_NV_[^/]*$")
_META = ("file", "device", "sheet", "precision")
_GEMM = ("M", "N", "K", "A Transpose", "B Transpose", "Time (msec)")
_CONV_SIZES = ("W", "H", "C", "N", "K", "S_filter_w", "R_filter_h", "stride_w", "stride_h")
_CONV_PADS = ("pad_w", "pad_h")
_CONV_TIMES = {"forward": "fwd_ms", "grad_input": "bwd_input_ms", "grad_weight": "bwd_param_ms"}
_CONV_OPS = {"forward": "conv", "grad_input": "conv_dgrad", "grad_weight": "conv_wgrad"}
_VIDUR_SHAPE = ("n_head", "n_kv_head", "n_embd", "n_expanded_embd", "num_tokens", "num_tensor_parallel_workers")
_VIDUR_GEMMS = ("attn_pre_proj", "attn_post_proj", "mlp_up_proj", "mlp_down_proj")
_VIDUR_REQUIRED = _VIDUR_GEMMS + ("input_layernorm", "mlp_act", "add")
_VIDUR_OPTIONAL = ("post_attention_layernorm", "attn_rope")  # absent in some models (phi-2: no post-attn norm)


# --- reading -------------------------------------------------------------------------------------

class _Table:
    """A CSV file as strings, each row with its line number in the file."""

    def __init__(self, path: Path, header: list[str], rows: list[list[str]], lines: list[int]):
        self.path, self.header, self.lines = path, header, np.asarray(lines, dtype=np.int64)
        self.frame = pd.DataFrame(rows or None, columns=header, dtype=object)

    def __len__(self) -> int:
        return len(self.lines)

    def origins(self) -> np.ndarray:
        """``file:line`` of every row."""
        if getattr(self, "_origins", None) is None:
            self._origins = np.array([f"{self.path}:{n}" for n in self.lines], dtype=object)
        return self._origins

    def require(self, columns: tuple[str, ...]) -> None:
        missing = [c for c in columns if c not in self.header]
        if missing:
            raise InputError(f"{self.path}: line 1: header lacks column(s) {', '.join(repr(c) for c in missing)}")

    def select(self, keep: np.ndarray) -> _Table:
        out = _Table.__new__(_Table)
        out.path, out.header, out.lines = self.path, self.header, self.lines[keep]
        out.frame = self.frame[keep].reset_index(drop=True)
        return out

    def error(self, row: int, column: str, message: str) -> InputError:
        return InputError(f"{self.path}: line {int(self.lines[row])}: column {column!r}: {message}")

    def text(self, column: str) -> np.ndarray:
        return np.array([str(v).strip() for v in self.frame[column]], dtype=object)

    def numbers(self, column: str, *, minimum: float = 0.0, whole: bool = False,
                missing_ok: bool = False) -> np.ndarray:
        """A numeric column; NaN where the cell is empty or "N/A…" and ``missing_ok``, else every
        cell must be a finite number above ``minimum`` (at least 0 when ``minimum`` is -1)."""
        raw = self.text(column)
        missing = np.array([v == "" or v.upper().startswith("N/A") for v in raw], dtype=bool)
        values = pd.to_numeric(pd.Series(raw, dtype=object), errors="coerce").to_numpy(dtype=float)
        ok = np.isfinite(values) & ((values > minimum) if minimum >= 0 else (values >= 0))
        if whole:
            ok &= np.floor(np.where(ok, values, 0.0)) == np.where(ok, values, 0.0)
        bad = ~ok & ~(missing & missing_ok)
        if bad.any():
            i = int(np.argmax(bad))
            kind = "a non-negative whole number" if minimum < 0 else (
                "a positive whole number" if whole else "a positive number")
            raise self.error(i, column, f"expected {kind}, got {short(raw[i])}")
        return np.where(missing & missing_ok, np.nan, values)


def _read(path: Path, columns: tuple[str, ...], what: str) -> _Table:
    """``path`` read within the input limits, its header checked for ``columns``."""
    try:
        data = read_bytes(path, what)
        end = data.find(b"\n")
        check_width((data if end < 0 else data[:end]).count(b",") + 1, f"{path}: line 1")
        text = data.decode("utf-8-sig")
    except FileNotFoundError:
        raise InputError(f"{path}: no such file (expected the {what})") from None
    except OSError as exc:
        raise InputError(f"{path}: cannot read ({exc.strerror or type(exc).__name__})") from None
    except UnicodeDecodeError as exc:
        raise InputError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start:,})") from None
    reader = csv.reader(io.StringIO(text, newline=""))
    rows, lines = [], []
    try:
        header = next(reader, None)
        if not header:
            raise InputError(f"{path}: line 1: empty file, no header")
        header = [h.strip() for h in header]
        width, last = len(header), reader.line_num
        for row in reader:
            start, last = last + 1, reader.line_num
            if not row or not any(cell.strip() for cell in row):
                continue
            if len(row) > width:
                raise InputError(f"{path}: line {start}: {len(row):,} fields, the header has {width:,}")
            rows.append(row + [""] * (width - len(row)))
            lines.append(start)
    except csv.Error as exc:
        raise InputError(f"{path}: line {reader.line_num}: not CSV ({str(exc)[:120]})") from None
    table = _Table(path, header, rows, lines)
    table.require(columns)
    return table


def _folder(path: Path, expected: str) -> Path:
    if not path.is_dir():
        raise InputError(f"{path}: no such folder (expected {expected})")
    return path


def _frame(table: _Table, keep: np.ndarray, problems: dict[str, np.ndarray], **fixed) -> pd.DataFrame:
    """Problem rows for the rows ``keep`` of ``table``: ``problems`` (arrays over all of the
    table's rows) and ``fixed`` columns (scalars or arrays over all rows)."""
    data = {k: np.asarray(v)[keep] for k, v in problems.items()}
    for k, v in fixed.items():
        data[k] = np.asarray(v, dtype=object)[keep] if isinstance(v, np.ndarray) else v
    data["origin"] = table.origins()[keep]
    return pd.DataFrame(data, index=pd.RangeIndex(int(np.count_nonzero(keep))))


def _finish(frames: list[pd.DataFrame]) -> pd.DataFrame:
    frames = [f for f in frames if len(f)]
    if not frames:
        return pd.DataFrame({c: pd.Series(dtype=object) for c in SOURCE_COLUMNS})
    out = pd.concat(frames, ignore_index=True)
    for col in ("flops", "bytes", "out", "red", "batches", "in_elems", "w_elems", "measured_us"):
        out[col] = out[col].astype(float)
    finite = np.isfinite(out[["flops", "bytes", "out", "red", "in_elems", "w_elems"]].to_numpy(float)).all(axis=1)
    if not finite.all():
        where = out["origin"].iloc[int(np.argmin(finite))]
        raise InputError(f"{where}: sizes so large that FLOPs or bytes overflow")
    for col in ("half", "training", "censored"):
        out[col] = out[col].astype(bool)
    return out[list(SOURCE_COLUMNS)]


def _count(counts: dict[str, int], key: str, n: int) -> None:
    if n:
        counts[key] = counts.get(key, 0) + int(n)


# --- DeepBench -----------------------------------------------------------------------------------

def _training_rows(table: _Table, name: str, left_out: dict[str, int]) -> tuple[_Table, np.ndarray, np.ndarray]:
    """The NVIDIA training-sheet rows of a DeepBench table, with their catalogue device and math."""
    files = table.text("file")
    train = np.array([bool(_TRAIN_SHEET.search(f.replace("\\", "/"))) for f in files], dtype=bool)
    _count(left_out, f"deepbench {name}: AMD, Intel, phone and inference sheets", int((~train).sum()))
    table = table.select(train)
    precision = table.text("precision")
    int8 = np.array(["int8" in p.lower() for p in precision], dtype=bool)
    _count(left_out, f"deepbench {name}: INT8 rows of training sheets", int(int8.sum()))
    table = table.select(~int8)
    devices, precision = table.text("device"), table.text("precision")
    for i, (d, p) in enumerate(zip(devices, precision)):
        if d not in DEEPBENCH_DEVICES:
            raise table.error(i, "device", f"unknown DeepBench GPU {short(d)} in an NVIDIA training sheet; "
                                           f"known: {', '.join(DEEPBENCH_DEVICES)}")
        if p not in DEEPBENCH_MATH:
            raise table.error(i, "precision", f"unknown DeepBench precision {short(p)}; known: "
                                              + "; ".join(repr(k) for k in DEEPBENCH_MATH))
    device = np.array([DEEPBENCH_DEVICES[d] for d in devices], dtype=object)
    math_ = np.array([DEEPBENCH_MATH[p] for p in precision], dtype=object)
    return table, device, math_


def _deepbench_gemm(path: Path, counts: dict) -> pd.DataFrame:
    table, device, math_ = _training_rows(_read(path, _META + _GEMM, "DeepBench GEMM file"), "gemm", counts["left_out"])
    m, n, k = (table.numbers(c, whole=True) for c in ("M", "N", "K"))
    for col in ("A Transpose", "B Transpose"):
        flags = table.text(col)
        bad = ~np.isin(flags, ["N", "T"])
        if bad.any():
            i = int(np.argmax(bad))
            raise table.error(i, col, f"expected N or T, got {short(flags[i])}")
    us = table.numbers("Time (msec)", missing_ok=True) * 1e3
    keep = np.isfinite(us)
    counts["skipped"] += int((~keep).sum())
    _count(counts["skipped_by"], "deepbench gemm: empty or N/A time", int((~keep).sum()))
    e = np.array([ELEMENT_BYTES[x] for x in math_], dtype=float)
    out = m * n
    probs = {"cls": np.full(len(m), "matmul", dtype=object), "flops": 2 * out * k, "bytes": e * (m * k + k * n + out),
             "out": out, "red": k, "batches": np.ones(len(m)), "in_elems": m * k, "w_elems": k * n,
             "half": np.isin(math_, ["fp16", "bf16"]), "measured_us": us, "censored": us <= FLOOR_US}
    return _frame(table, keep, probs, device=device, math=math_, dataset="deepbench", op="gemm", phase="forward",
                  training=True, kernel="forward")


def _deepbench_conv(path: Path, counts: dict) -> pd.DataFrame:
    columns = _META + _CONV_SIZES + _CONV_PADS + ("P_out_w", "Q_out_h") + tuple(_CONV_TIMES.values())
    table = _read(path, columns, "DeepBench convolution file")
    table, device, math_ = _training_rows(table, "conv", counts["left_out"])
    w, h, c, n, k, s, r, sw, sh = (table.numbers(col, whole=True) for col in _CONV_SIZES)
    pw, ph = (table.numbers(col, minimum=-1, whole=True) for col in _CONV_PADS)
    p = np.floor((w + 2 * pw - s) / sw) + 1  # output width
    q = np.floor((h + 2 * ph - r) / sh) + 1  # output height
    for size, col in ((p, "S_filter_w"), (q, "R_filter_h")):
        if (size < 1).any():
            i = int(np.argmax(size < 1))
            raise table.error(i, col, "the filter is larger than the padded input (no output)")
    given_p = pd.to_numeric(pd.Series(table.text("P_out_w")), errors="coerce").to_numpy(float)
    given_q = pd.to_numeric(pd.Series(table.text("Q_out_h")), errors="coerce").to_numpy(float)
    mismatch = (given_p != p) | (given_q != q)
    for d, cnt in pd.Series(device[mismatch]).value_counts().items():
        _count(counts["pq_mismatch"], str(d), int(cnt))
    e = np.array([ELEMENT_BYTES[x] for x in math_], dtype=float)
    half = np.isin(math_, ["fp16", "bf16"])
    in_elems, w_elems, out = n * c * h * w, k * c * r * s, n * k * p * q
    red = c * r * s
    flops = 2 * out * red
    nbytes = e * (in_elems + w_elems + out)
    frames = []
    for kernel, col in _CONV_TIMES.items():
        us = table.numbers(col, missing_ok=True) * 1e3
        keep = np.isfinite(us)
        counts["skipped"] += int((~keep).sum())
        _count(counts["skipped_by"], f"deepbench conv {col}: empty or N/A", int((~keep).sum()))
        if kernel == "forward":
            shape = {"out": out, "red": red}
        else:  # the very problems the emulator builds for a convolution backward
            pick = 0 if kernel == "grad_input" else 1
            pairs = [backward_pair(i, "conv", f, b, x, y)[pick] for i, (f, b, x, y)
                     in enumerate(zip(flops, nbytes, in_elems, w_elems))]
            shape = {"out": np.array([d["out"] for d in pairs], dtype=float),
                     "red": np.array([d["red"] for d in pairs], dtype=float)}
        probs = {"cls": np.full(len(us), "conv", dtype=object), "flops": flops, "bytes": nbytes, **shape,
                 "batches": np.ones(len(us)), "in_elems": in_elems, "w_elems": w_elems, "half": half,
                 "measured_us": us, "censored": us <= FLOOR_US}
        frames.append(_frame(table, keep, probs, device=device, math=math_, dataset="deepbench", op=_CONV_OPS[kernel],
                             phase="forward" if kernel == "forward" else "backward", training=True, kernel=kernel))
    return pd.concat(frames, ignore_index=True)


def _rnn_rows(path: Path, counts: dict) -> None:
    if not path.exists():
        return
    table = _read(path, ("file",), "DeepBench RNN file")
    train = np.array([bool(_TRAIN_SHEET.search(f.replace("\\", "/"))) for f in table.text("file")], dtype=bool)
    _count(counts["left_out"], "deepbench rnn: NVIDIA training rows (no RNN kernel class)", int(train.sum()))
    _count(counts["left_out"], "deepbench rnn: other sheets", int((~train).sum()))


def _counts() -> dict:
    return {"skipped": 0, "skipped_by": {}, "left_out": {}, "pq_mismatch": {}}


def load_deepbench(root: str | Path) -> pd.DataFrame:
    """DeepBench's NVIDIA training GEMM and convolution times under ``root``
    (``calibration/deepbench``) as problem rows (:data:`SOURCE_COLUMNS`); counts in ``attrs``."""
    root = _folder(Path(root), "calibration/deepbench")
    counts = _counts()
    frames = [_deepbench_gemm(root / "deepbench_gemm.csv", counts),
              _deepbench_conv(root / "deepbench_conv_normalized.csv", counts)]
    _rnn_rows(root / "deepbench_rnn.csv", counts)
    out = _finish(frames)
    out.attrs.update(counts)
    return out


# --- Vidur ---------------------------------------------------------------------------------------

def _vidur_file(path: Path, device: str, counts: dict) -> pd.DataFrame:
    table = _read(path, (), "Vidur mlp.csv")
    present = table.header
    optional = tuple(op for op in _VIDUR_OPTIONAL if f"time_stats.{op}.median" in present)
    ops = _VIDUR_REQUIRED + optional
    table.require(_VIDUR_SHAPE + ("use_gated_mlp",) + tuple(f"time_stats.{op}.median" for op in ops))
    nh, nkv, emb, ffn, tokens, tp = (table.numbers(c, whole=True) for c in _VIDUR_SHAPE)
    flags = table.text("use_gated_mlp")
    truth = {"true": True, "1": True, "false": False, "0": False}
    bad = np.array([f.lower() not in truth for f in flags], dtype=bool)
    if bad.any():
        i = int(np.argmax(bad))
        raise table.error(i, "use_gated_mlp", f"expected True or False, got {short(flags[i])}")
    gated = np.array([truth[f.lower()] for f in flags], dtype=bool)
    checks = ((emb % nh != 0, "n_head", "n_embd is not a multiple of n_head"),
              (nh % tp != 0, "num_tensor_parallel_workers", "n_head is not a multiple of it"),
              (nkv % tp != 0, "num_tensor_parallel_workers", "n_kv_head is not a multiple of it"),
              (emb % tp != 0, "num_tensor_parallel_workers", "n_embd is not a multiple of it"),
              (ffn % tp != 0, "num_tensor_parallel_workers", "n_expanded_embd is not a multiple of it"))
    for bad, col, message in checks:
        if bad.any():
            raise table.error(int(np.argmax(bad)), col, message)
    d = emb / nh
    t = tokens
    gemm_shapes = {  # op -> (K, N) of [T×K]·[K×N]
        "attn_pre_proj": (emb, (nh + 2 * nkv) * d / tp),
        "attn_post_proj": (emb / tp, emb),
        "mlp_up_proj": (emb, np.where(gated, 2, 1) * ffn / tp),
        "mlp_down_proj": (ffn / tp, emb),
    }
    n_el = t * emb
    act = t * ffn / tp
    rope = t * (nh + nkv) * d / tp
    parallel_block = "post_attention_layernorm" not in optional  # attn + mlp + residual: two adds
    adds = 2.0 if parallel_block else 1.0
    zero, one = np.zeros(len(t)), np.ones(len(t))
    memory = {  # op -> (cls, flops, bytes, out, red)
        "input_layernorm": ("norm", 5 * n_el, 2 * (2 * n_el + emb), n_el, emb),
        "post_attention_layernorm": ("norm", 5 * n_el, 2 * (2 * n_el + emb), n_el, emb),
        "mlp_act": ("elementwise", np.where(gated, 6.0, 8.0) * act, 2 * np.where(gated, 3.0, 2.0) * act, act, one),
        "attn_rope": ("elementwise", 3 * rope, 2 * 2 * rope, rope, one),
        "add": ("elementwise", adds * n_el, 2 * 3 * adds * n_el, n_el, one),
    }
    frames = []
    for op in ops:
        col = f"time_stats.{op}.median"
        us = table.numbers(col, missing_ok=True) * 1e3
        keep = np.isfinite(us)
        counts["skipped"] += int((~keep).sum())
        _count(counts["skipped_by"], f"vidur {op}: empty time", int((~keep).sum()))
        if op in gemm_shapes:
            k, n = gemm_shapes[op]
            out = t * n
            probs = {"cls": np.full(len(t), "matmul", dtype=object), "flops": 2 * out * k,
                     "bytes": 2 * (t * k + k * n + out), "out": out, "red": k, "in_elems": t * k, "w_elems": k * n}
        else:
            cls, flops, nbytes, out, red = memory[op]
            probs = {"cls": np.full(len(t), cls, dtype=object), "flops": flops, "bytes": nbytes, "out": out,
                     "red": red, "in_elems": zero, "w_elems": zero}
        probs |= {"batches": one, "measured_us": us, "censored": np.zeros(len(t), dtype=bool)}
        frames.append(_frame(table, keep, probs, device=device, math="fp16", half=True, dataset="vidur", op=op,
                             phase="forward", training=False, kernel="forward"))
    if "time_stats.emb.median" in present:
        _count(counts["left_out"], "vidur emb (embedding gather: no kernel class)", len(table))
    return pd.concat(frames, ignore_index=True)


def load_vidur(root: str | Path) -> pd.DataFrame:
    """Vidur's layer-op times under ``root`` (``calibration/vidur``: ``compute/<gpu>/<org>/<model>/
    mlp.csv``) as problem rows (:data:`SOURCE_COLUMNS`); counts in ``attrs``."""
    compute = _folder(Path(root) / "compute", "calibration/vidur/compute")
    counts = _counts()
    frames = []
    for folder in sorted(p for p in compute.iterdir() if p.is_dir()):
        if folder.name not in VIDUR_DEVICES:
            raise InputError(f"{folder}: unknown Vidur GPU folder; known: {', '.join(VIDUR_DEVICES)}")
        for path in sorted(folder.glob("*/*/mlp.csv")):
            frames.append(_vidur_file(path, VIDUR_DEVICES[folder.name], counts))
    if not frames:
        raise InputError(f"{compute}: no <gpu>/<org>/<model>/mlp.csv files")
    out = _finish(frames)
    out.attrs.update(counts)
    return out


# --- both ----------------------------------------------------------------------------------------

def load_sources(calibration_dir: str | Path, which: tuple[str, ...] = SOURCES) -> pd.DataFrame:
    """The rows of the sources in ``which`` (``deepbench``, ``vidur``) under ``calibration_dir``,
    one table; ``attrs`` holds their counts added together."""
    loaders = {"deepbench": load_deepbench, "vidur": load_vidur}
    unknown = [w for w in which if w not in loaders]
    if unknown:
        raise InputError(f"unknown kernel source(s) {', '.join(short(w) for w in unknown)}; "
                         f"known: {', '.join(SOURCES)}")
    counts = _counts()
    frames = []
    for name in dict.fromkeys(which):
        part = loaders[name](Path(calibration_dir) / name)
        counts["skipped"] += part.attrs["skipped"]
        for key in ("skipped_by", "left_out", "pq_mismatch"):
            for k, v in part.attrs[key].items():
                _count(counts[key], k, v)
        frames.append(part)
    out = _finish(frames)
    out.attrs.update(counts)
    return out

"""The checkpoint file: data, never code — JSON metadata and safetensors weights behind a SHA-256
line that is checked before anything in the file is parsed.

Why: researchers load each other's checkpoints. A pickled checkpoint (``torch.save``) runs any code
its author put in it the moment it is loaded, and a hash stored inside the pickle proves nothing
(whoever writes the file computes it). This format has no code path at all: the first line is
fixed text with the SHA-256 of the rest; the rest is a plain safetensors file (tensors by name,
parsed by the safetensors library, which reads numbers only) whose string metadata holds the body
as JSON, tensors replaced by ``{"$tensor": name}``. Layout::

    ETS-CHECKPOINT 2 sha256=<64 hex digits>\\n
    <safetensors bytes: 8-byte header size, JSON header with __metadata__["body"], tensor data>

``tail -c +90 FILE > weights.safetensors`` gives the safetensors part to any other tool.

Checkpoints written before this format are pickles; they are refused with the one command that
converts them (:func:`convert_legacy`, ``ets checkpoint convert --trust FILE``), which unpickles
with torch's weights-only loader, so even then nothing in the old file runs.
"""

from __future__ import annotations

import hashlib
import io
import json
from pathlib import Path
from typing import TYPE_CHECKING

from predictor.common.documents import document_bytes
from predictor.common.inputs import CheckpointError, InputError, load_json, short

MAGIC = b"ETS-CHECKPOINT 2 sha256="
HEADER_BYTES = len(MAGIC) + 64 + 1  # the first line, newline included
TENSOR = "$tensor"  # a JSON object {"$tensor": name} stands for the tensor of that name
if TYPE_CHECKING:
    import torch

CONVERT_HINT = "`ets checkpoint convert --trust FILE` converts a pickled checkpoint whose source you trust"


# -- writing --------------------------------------------------------------------------------------

def encode(body: dict) -> bytes:
    """The file's bytes for ``body`` (a dict of JSON-able values and tensors)."""
    import torch  # here, not at import: `ets` commands that read no checkpoint start without torch
    from safetensors.torch import save

    tensors: dict[str, torch.Tensor] = {}

    def strip(value, path: str):
        if isinstance(value, torch.Tensor):
            name = path or "tensor"
            tensors[name] = value.detach().cpu().contiguous().clone()  # own storage: shared views refused
            return {TENSOR: name}
        if isinstance(value, dict):
            if any(not isinstance(k, str) for k in value):
                raise TypeError(f"checkpoint body: non-string key under {path or 'the top'}")
            return {k: strip(v, f"{path}/{k}" if path else k) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [strip(v, f"{path}/{i}") for i, v in enumerate(value)]
        if hasattr(value, "item") and not isinstance(value, (str, bytes)):  # numpy scalars
            return value.item()
        return value

    metadata = json.dumps(strip(body, ""), separators=(",", ":"))
    content = save(tensors, metadata={"body": metadata})
    return MAGIC + hashlib.sha256(content).hexdigest().encode() + b"\n" + content


def write(path: str | Path, body: dict) -> Path:
    """``body`` as a checkpoint file, written atomically (an old file stays whole if this fails)."""
    return write_bytes(path, encode(body))


def write_bytes(path: str | Path, data: bytes) -> Path:
    from predictor.common.outputs import atomic_file

    with atomic_file(path) as tmp:
        tmp.write_bytes(data)
    return Path(path)


def looks_like_checkpoint(path: str | Path) -> bool:
    """Whether an existing regular file starts like a checkpoint, current or pickled (what
    ``--overwrite`` may replace: a mistyped ``--out`` naming another file is refused)."""
    with Path(path).open("rb") as handle:
        head = handle.read(len(MAGIC))
    return head.startswith(MAGIC) or is_pickle(head)


# -- reading --------------------------------------------------------------------------------------

def read(path: str | Path) -> dict:
    """The body of a checkpoint file, its SHA-256 checked before anything is parsed.
    CheckpointError (one line naming the file) for anything else: missing, not a regular file,
    over-size, a pickle of the old format, corrupted, or not a checkpoint at all."""
    path = Path(path)
    return decode(document_bytes(path, "checkpoint file", CheckpointError), path)


def decode(data: bytes, path: str | Path) -> dict:
    """The body of a checkpoint file's bytes (see :func:`read`)."""
    if not data.startswith(MAGIC):
        if is_pickle(data):
            raise CheckpointError(f"{path}: a pickled checkpoint (the format before 2026-12, which can run code "
                                  f"when loaded) is not read; {CONVERT_HINT}")
        raise CheckpointError(f"{path}: not a checkpoint of this tool (it does not start with "
                              f"{MAGIC.decode()!r}; starts with {short(data[:16])})")
    stored = data[len(MAGIC):HEADER_BYTES - 1]
    content = data[HEADER_BYTES:]
    if data[HEADER_BYTES - 1:HEADER_BYTES] != b"\n" or hashlib.sha256(content).hexdigest().encode() != stored:
        raise CheckpointError(f"{path}: corrupted checkpoint: its content does not match the SHA-256 on its first "
                              f"line ({short(stored.decode('ascii', 'replace'), 20)}); restore the file "
                              "(git checkout / a copy) or train it again")
    from safetensors import SafetensorError
    from safetensors.torch import load

    try:
        tensors = load(content)
        header_size = int.from_bytes(content[:8], "little")
        header = load_json(content[8:8 + header_size], path)
        body = load_json(header["__metadata__"]["body"], path)
    except (SafetensorError, InputError, ValueError, KeyError, TypeError) as exc:
        raise CheckpointError(f"{path}: unreadable checkpoint content ({type(exc).__name__}: "
                              f"{short(str(exc).splitlines()[0] if str(exc) else '', 120)})") from None
    return _restore(body, tensors, path)


def _restore(body, tensors: dict[str, torch.Tensor], path: str | Path) -> dict:
    """``body`` with each ``{"$tensor": name}`` replaced by its tensor; every tensor used once."""
    used: set[str] = set()

    def fill(value):
        if isinstance(value, dict):
            if set(value) == {TENSOR}:
                name = value[TENSOR]
                if not isinstance(name, str) or name not in tensors or name in used:
                    raise CheckpointError(f"{path}: corrupted checkpoint: a reference to tensor {short(name)} "
                                          "that is missing or used twice")
                used.add(name)
                return tensors[name]
            return {k: fill(v) for k, v in value.items()}
        if isinstance(value, list):
            return [fill(v) for v in value]
        return value

    restored = fill(body)
    if not isinstance(restored, dict):
        raise CheckpointError(f"{path}: checkpoint body is a {type(restored).__name__}, not an object")
    if len(used) != len(tensors):
        raise CheckpointError(f"{path}: corrupted checkpoint: {len(tensors) - len(used)} tensor(s) not "
                              "referenced by its metadata")
    return restored


def is_pickle(data: bytes) -> bool:
    """Whether ``data`` is a torch.save archive (zip) or a raw pickle: the formats that run code."""
    return data[:4] == b"PK\x03\x04" or data[:1] == b"\x80"


# -- the old format -------------------------------------------------------------------------------

LEGACY_ENVELOPE = "ets-checkpoint/sha256"  # the old outer dict: the body's torch.save bytes and their SHA-256


def convert_legacy(path: str | Path) -> dict:
    """The body of a pickled checkpoint of the old format, unpickled by torch's weights-only
    loader (plain containers, numbers, strings and tensors only: a pickle that asks for anything
    else — a ``__reduce__`` payload — is refused, never run). Its stored SHA-256 is checked."""
    import torch

    path = Path(path)
    data = document_bytes(path, "checkpoint file", CheckpointError)
    if data.startswith(MAGIC):
        raise CheckpointError(f"{path}: already in the current format; nothing to convert")
    if not is_pickle(data):
        raise CheckpointError(f"{path}: not a pickled checkpoint (starts with {short(data[:16])})")
    outer = _weights_only(io.BytesIO(data), path)
    if not (isinstance(outer, dict) and outer.get("envelope") == LEGACY_ENVELOPE):
        body = outer  # written before the hash
    else:
        stored, tensor = outer.get("sha256"), outer.get("payload")
        if not (isinstance(tensor, torch.Tensor) and tensor.dtype == torch.uint8):
            raise CheckpointError(f"{path}: corrupted checkpoint: no payload in its envelope")
        payload = tensor.numpy().tobytes()
        if hashlib.sha256(payload).hexdigest() != stored:
            raise CheckpointError(f"{path}: corrupted checkpoint: its content does not match the SHA-256 stored "
                                  "in it; restore the file or train it again")
        body = _weights_only(io.BytesIO(payload), path)
    if not isinstance(body, dict):
        raise CheckpointError(f"{path}: checkpoint body is a {type(body).__name__}, not a dict")
    return _plain(body, path)


def _weights_only(source, path: Path):
    import pickle
    import warnings

    import torch

    try:
        with warnings.catch_warnings():  # torch's notes on what it loads (sparse tensors checked ...): not for users
            warnings.simplefilter("ignore")
            return torch.load(source, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as exc:  # a global outside the allow-list: code it would have run
        import re

        found = re.search(r"GLOBAL ([\w.]+)", str(exc))
        what = found.group(1) if found else "a Python object"
        raise CheckpointError(f"{path}: the pickle asks for more than data (it calls {short(what, 80)}); "
                              "refused: it would run code when loaded") from None
    except Exception as exc:  # a truncated or foreign file
        first = (str(exc).splitlines() or [""])[0]
        raise CheckpointError(f"{path}: not a readable pickled checkpoint ({type(exc).__name__}: "
                              f"{short(first, 160)})") from None


def _plain(value, path: str | Path = "checkpoint"):
    """The old body as the new format stores it: OrderedDicts and tuples become dicts and lists.

    The unpickled body is a graph, not a tree: a pickle may reference one list a thousand times
    (its memo), and a 1.6 KB file of ``c = [[[0] * 1000] * 1000] * 1000`` expands to a billion
    items; a list may even contain itself. So it is measured first (:class:`_Measure`: the
    expanded size of each distinct object computed once, cycles refused) against the limits the
    converted file must meet to be read back — nesting (``json_depth``), objects and arrays
    (``json_containers``), bytes (``file_bytes``) — and only then expanded."""
    _Measure(path).total(value)
    return _expand(value)


def _expand(value):
    if isinstance(value, dict):
        return {str(k): _expand(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_expand(v) for v in value]
    return value


class _Measure:
    """The expanded size of an unpickled body, in containers and bytes (JSON text; tensor data),
    refused in one line when it is over a limit, nested too deep, cyclic, or holds a value the
    current format cannot store (bytes, sets, complex numbers, sparse or quantized tensors, ...)."""

    SCALAR_BYTES = 24  # a number's JSON text, at most

    def __init__(self, path: str | Path) -> None:
        from predictor.common.inputs import limit

        self.path = path
        self.depth_cap = int(limit("json_depth")) - 1  # a tensor becomes {"$tensor": name}: one level more
        self.containers_cap, self.bytes_cap = limit("json_containers"), limit("file_bytes")
        self.sizes: dict[int, tuple[int, int]] = {}  # id -> (containers, bytes) of an object measured
        self.open: set[int] = set()  # the containers being measured: meeting one again is a cycle
        self.keep: list = []  # the measured objects, alive while their ids are keys of ``sizes``

    def fail(self, where: str, what: str) -> CheckpointError:
        return CheckpointError(f"{self.path}: cannot convert: {self.name(where)} {what}")

    @staticmethod
    def name(where: str) -> str:
        return f"field {short(where.removeprefix('/'), 80)}" if where else "the body"

    def total(self, value) -> tuple[int, int]:
        return self.measure(value, "", 0)

    def measure(self, value, where: str, depth: int) -> tuple[int, int]:
        if isinstance(value, (dict, list, tuple)):
            known = self.sizes.get(id(value))
            if known is not None:
                return known
            if id(value) in self.open:
                raise self.fail(where, "contains itself (a cycle): it has no finite expansion")
            if depth > self.depth_cap:
                raise self.fail(where, f"is nested more than {self.depth_cap} levels deep (the limit on a "
                                       "checkpoint body's nesting; ETS_SIM_MAX_JSON_DEPTH raises it)")
            self.open.add(id(value))
            size = self.container(value, where, depth)
            self.open.discard(id(value))
            self.sizes[id(value)] = size
            self.keep.append(value)
            self.check(size, where)
            return size
        return 0, self.scalar(value, where)

    def container(self, value, where: str, depth: int) -> tuple[int, int]:
        containers, size = 1, 2
        if isinstance(value, dict):
            names: set[str] = set()
            items = []
            for key, item in value.items():
                name = self.key(key, where, names)
                size += len(name) + 4
                items.append((item, f"{where}/{name}"))
        else:
            items = [(item, f"{where}/{i}") for i, item in enumerate(value)]
        for item, at in items:
            c, b = self.measure(item, at, depth + 1)
            containers, size = containers + c, size + b + 1
            self.check((containers, size), where)  # stop as soon as the sum passes a limit
        return containers, size

    def key(self, key, where: str, names: set[str]) -> str:
        if isinstance(key, bool) or not isinstance(key, (str, int)):
            raise self.fail(where, f"has a key of type {type(key).__name__} ({short(key, 40)}): the current "
                                   "format stores text keys (and integers, as text) only")
        name = str(key)
        if name in names:
            raise self.fail(where, f"has two keys that both become {short(name, 40)} as text: converting would "
                                   "silently drop one")
        names.add(name)
        return name

    def scalar(self, value, where: str) -> int:
        import torch

        if value is None or isinstance(value, bool):
            return 5
        if isinstance(value, int):
            if not -2**63 <= value < 2**63:
                raise self.fail(where, "holds an integer outside the 64-bit range")
            return self.SCALAR_BYTES
        if isinstance(value, float):
            return self.SCALAR_BYTES
        if isinstance(value, str):
            return len(value) + 2 if value.isascii() else 6 * len(value) + 2  # \uXXXX escapes at most
        if isinstance(value, torch.Tensor):
            if value.layout != torch.strided or value.is_quantized or value.is_nested:
                raise self.fail(where, f"is a {str(value.layout).removeprefix('torch.')} tensor: the current "
                                       "format stores dense tensors only")
            if str(value.dtype).removeprefix("torch.") not in _DTYPES:
                raise self.fail(where, f"is a tensor of {value.dtype}: the current format stores floating-point, "
                                       "integer and bool tensors only")
            return value.numel() * value.element_size() + 40
        raise self.fail(where, f"holds a value of type {type(value).__name__} ({short(value, 40)}): the current "
                               "format stores dicts, lists, text, numbers, booleans, null and tensors only")

    def check(self, size: tuple[int, int], where: str) -> None:
        from predictor.common.inputs import over_limit

        containers, nbytes = size
        try:
            if containers > self.containers_cap:
                raise over_limit("json_containers", f"{self.path}: cannot convert: {self.name(where)} expands to "
                                 "more objects and arrays than a checkpoint may hold", containers)
            if nbytes > self.bytes_cap:
                raise over_limit("file_bytes", f"{self.path}: cannot convert: {self.name(where)} expands past the "
                                 "size of a checkpoint file", nbytes)
        except InputError as exc:
            raise CheckpointError(str(exc)) from None


# tensor types a converted body may hold (weights are floating point; int and bool: indices, masks)
_DTYPES = frozenset({"float16", "bfloat16", "float32", "float64", "int8", "int16", "int32", "int64", "uint8", "bool"})

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

from predictor.inputs import InputError, load_json, read_bytes, short

MAGIC = b"ETS-CHECKPOINT 2 sha256="
HEADER_BYTES = len(MAGIC) + 64 + 1  # the first line, newline included
TENSOR = "$tensor"  # a JSON object {"$tensor": name} stands for the tensor of that name
if TYPE_CHECKING:
    import torch

CONVERT_HINT = "`ets checkpoint convert --trust FILE` converts a pickled checkpoint whose source you trust"


class CheckpointError(ValueError):
    """A checkpoint that cannot be used with this code or this data; the message says why."""


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
    from predictor.outputs import atomic_file

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
    return decode(_file_bytes(path), path)


def _file_bytes(path: Path) -> bytes:
    """The bytes of a checkpoint file (bounded, regular files only), or one-line CheckpointError."""
    try:
        return read_bytes(path, "checkpoint file")
    except FileNotFoundError:
        raise CheckpointError(f"{path}: no such checkpoint") from None
    except InputError as exc:
        raise CheckpointError(str(exc)) from None
    except OSError as exc:
        raise CheckpointError(f"{path}: cannot read the checkpoint ({exc.strerror or exc})") from None


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
    data = _file_bytes(path)
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
    return _plain(body)


def _weights_only(source, path: Path):
    import pickle

    import torch

    try:
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


def _plain(value):
    """The old body as the new format stores it: OrderedDicts and tuples become dicts and lists."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value

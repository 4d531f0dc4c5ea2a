"""Checking what a model is built from — a checkpoint's fields, a config's options — before any
of it is used: types, ranges, and the size of the model the config asks for.

Why: a checkpoint is a stranger's file, sealed by a SHA-256 that whoever wrote it computed
(docs/security.md). One field could make the loader allocate gigabytes (``hidden: 40000``), hang
in construction (``layers: 100000``), crash on a wrong type, or print a nonsense number (NaN
weights, a negative scale). So every field is checked here, named in the error, before it is
used; the model's size is computed on PyTorch's ``meta`` device (shapes only, no memory) and
capped before a real tensor is allocated; the weights must match those shapes exactly, be
floating point and finite. ``ets train`` builds its model through the same checks.

The checks raise whatever error class the caller names: :class:`CheckpointError` (``"FILE:
field 'config.hidden': ..."``) for a checkpoint, ValueError (``"option 'layers': ..."``) for
options.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import fields
from typing import TYPE_CHECKING, Any

from predictor.common.inputs import LIMITS, Checker, limit, short

if TYPE_CHECKING:
    from torch import nn

# The largest model a config may ask for is predictor.common.inputs' "model_parameters" limit
# (ETS_SIM_MAX_MODEL_PARAMETERS): 2**28 parameters are 1 GiB of float32 weights.
MAX_LAYERS = 256  # construction time grows with the layer count even on the meta device
MAX_HIDDEN = 2**16
MAX_WIDTH = 1024  # ops per ETS window
ARCHS = ("lstm", "gru", "transformer", "mlp")  # ETS's window models (here: no torch to list them)
MAX_OPS = 4096  # op types with their own feature slot (a feature row holds one slot per op type)
MAX_EPOCHS = 10**6
MAX_BATCH = 2**24
MAX_SEED = 2**63 - 1

# The range of each fit option every method's config has (predictor.methods.base.FIT_FIELDS), and
# of the options several share; a config class adds its own in ``RANGES``.
COMMON_RANGES: dict[str, tuple] = {
    "lr": ("positive",), "batch_size": (1, MAX_BATCH), "max_epochs": (1, MAX_EPOCHS),
    "patience": (1, MAX_EPOCHS), "max_minutes": ("positive",), "seed": (0, MAX_SEED),
    "hidden": (1, MAX_HIDDEN), "layers": (1, MAX_LAYERS), "top_k": (0, MAX_OPS),
}


def cut(text: str, width: int = 200) -> str:
    """An exception's message for ours: its first line, at most ``width`` characters (unquoted,
    unlike :func:`predictor.common.inputs.short`, which quotes values)."""
    first = (text.splitlines() or [""])[0]
    return first if len(first) <= width else first[:width - 1] + "…"


# -- configs --------------------------------------------------------------------------------------

_KINDS = {"int": int, "float": float, "str": str, "bool": bool}


def checked_config(cls: type, data: Any, check: Checker):
    """``cls`` (a method's config dataclass) from ``data``: every key one of its fields, every
    value of the field's type and within its range (:data:`COMMON_RANGES` and ``cls.RANGES``:
    ``(lo, hi)`` for numbers, a tuple of words for a choice, ``("positive",)``,
    ``("fraction",)`` for 0 <= x < 1). Missing fields keep their defaults (older checkpoints)."""
    data = check.mapping(data, "")
    known = {f.name: f for f in fields(cls)}
    foreign = sorted(set(data) - set(known))
    if foreign:
        raise check.fail(foreign[0], f"is not an option of this method (its options: {', '.join(known)})")
    ranges = {**COMMON_RANGES, **getattr(cls, "RANGES", {})}
    for name, value in data.items():
        check_option(value, name, str(known[name].type), ranges.get(name), check)
    try:
        return cls(**data)
    except ValueError as exc:  # a rule across options (ETS: stride <= width)
        raise check.fail("", cut(str(exc))) from None


def check_option(value: Any, name: str, annotation: str, bounds: tuple | None, check: Checker) -> None:
    """One config value against its field's type annotation and ``bounds``."""
    optional = annotation.endswith("| None")
    if optional and value is None:
        return
    kind = _KINDS.get(annotation.removesuffix("| None").strip())
    if kind is None:
        raise TypeError(f"config field {name}: annotation {annotation!r} has no check")  # a programming error
    if kind is bool:
        check.flag(value, name)
    elif kind is str:
        if bounds and all(isinstance(b, str) for b in bounds):
            check.choice(value, name, bounds)
        else:
            check.text(value, name, longest=200)
    elif bounds == ("positive",):
        check.number(value, name, positive=True)
    elif bounds == ("fraction",):
        check.number(value, name, lo=0, below=1)
    elif kind is int:
        lo, hi = bounds if bounds else (None, None)
        check.integer(value, name, lo, hi)
    else:
        lo, hi = bounds if bounds else (None, None)
        check.number(value, name, lo=lo, hi=hi)


def check_fields(config, check: Checker) -> None:
    """An already built config (from options) checked as :func:`checked_config` checks stored ones."""
    checked_config(type(config), {f.name: getattr(config, f.name) for f in fields(config)}, check)


# -- the model's size and weights ----------------------------------------------------------------

def planned_shapes(build: Callable[[], nn.Module], check: Checker, field: str = "config") -> dict[str, tuple]:
    """The state-dict shapes of the model ``build`` makes, built on the meta device (no memory);
    refused when it would exceed the ``model_parameters`` limit or cannot be built from the config."""
    import torch

    try:
        with torch.device("meta"):
            model = build()
    except (ValueError, TypeError, RuntimeError, OverflowError) as exc:
        raise check.fail(field, f"cannot build the model ({cut(str(exc))})") from None
    shapes = {name: tuple(t.shape) for name, t in model.state_dict().items()}
    count = sum(math.prod(s) for s in shapes.values())
    cap = limit("model_parameters")
    if count > cap:
        raise check.fail(field, f"asks for a model of {count:,} parameters ({count * 4 / 2**30:,.1f} GiB of float32 "
                                f"weights), over the limit of {cap:,.0f} (raise it with "
                                f"{LIMITS['model_parameters'].variable}=N)")
    return shapes


def check_tensors(state_dict: Any, check: Checker, field: str = "state_dict") -> dict:
    """``state_dict`` as weights: names to dense floating-point tensors with finite values (what
    can be checked before the model's shapes are known, so a bad one costs no model build)."""
    import torch

    state_dict = check.mapping(state_dict, field)
    for name, tensor in state_dict.items():
        where = f"{field}.{name}"
        if not isinstance(tensor, torch.Tensor) or tensor.layout != torch.strided:
            raise check.fail(where, "must be a dense tensor", tensor)
        if not tensor.dtype.is_floating_point:
            raise check.fail(where, f"must hold floating-point weights, not {tensor.dtype}")
        bad = non_finite(tensor)
        if bad:
            raise check.fail(where, f"holds {bad:,} non-finite value(s) (NaN or inf)")
    return state_dict


def check_weights(state_dict: dict, shapes: Mapping[str, tuple], check: Checker, field: str = "state_dict") -> dict:
    """``state_dict`` (:func:`check_tensors`) as the model of ``shapes`` takes it: exactly its
    names, each of its shape."""
    missing, extra = sorted(set(shapes) - set(state_dict)), sorted(set(state_dict) - set(shapes))
    if missing or extra:
        raise check.fail(field, "weights do not match the stored feature spec / architecture ("
                         + "; ".join(part for part in (f"missing {short(missing, 120)}" if missing else "",
                                                       f"unexpected {short(extra, 120)}" if extra else "") if part)
                         + ")")
    for name, shape in shapes.items():
        tensor = state_dict[name]
        if tuple(tensor.shape) != shape:
            raise check.fail(f"{field}.{name}", f"weights do not match the stored feature spec / architecture "
                                                f"(shape {list(tensor.shape)}; the stored config builds {list(shape)})")
    return state_dict


def non_finite(tensor) -> int:
    """How many values of a floating-point tensor are NaN or infinite (via numpy: a torch
    reduction starts its thread pool, tens of ms per small tensor on a busy machine)."""
    import numpy as np
    import torch

    values = tensor.detach().cpu()
    if values.dtype not in (torch.float16, torch.float32, torch.float64):
        values = values.to(torch.float32)  # bfloat16 and the float8 types have no numpy twin
    return int(values.numel() - np.count_nonzero(np.isfinite(values.numpy())))

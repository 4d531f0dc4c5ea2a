"""Capture the training (or inference) iteration of a model in the user's own Python file.

Why: the zoo covers the models we chose; a user's question is usually about *their* model. The
KernelBench convention is the smallest contract that describes one: a file defines ``Model`` (a
``torch.nn.Module``), ``get_inputs()`` (the forward's arguments) and optionally
``get_init_inputs()`` (the constructor's), so the model is ``Model(*get_init_inputs())`` and one
call is ``model(*get_inputs())``. Such a file is captured like a zoo config and gives a normal
execution-trace table (:mod:`predictor.common.op_trace`) that the emulator and the predictors accept.

**It runs the file's code**, as ``python FILE`` would (except an ``if __name__ == "__main__"``
block: the module gets a unique name of its own): this is done only for a file the user names
on the command line (``--model-file``), i.e. the user's own code, with the user's rights. The
commands run it in a child process, under a time and a memory limit, and get back only the
table (:mod:`predictor.emulator.capture.model_process`); :func:`capture_model_file` itself runs it in
the calling process. What it prints goes to stderr (``--json`` output stays parseable).

Design decisions: everything runs on the meta device (no memory, no compute), falling back to the
CPU only where meta cannot work (a constructor that reads tensor values; RNN modules, which meta
unrolls per time step); a training step is the zoo's (scalar loss, backward, SGD or Adam after a
state-creating step), and a model without weights differentiates towards its inputs instead;
``config_id`` is ``file:<stem>`` plus suffixes (:func:`config_id_of`). Every failure is one line
(:class:`ModelFileError`) naming the file.

Device fallbacks, loss, batch and input size, errors: docs/gpus.md, 'Capture details of a model
file'.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import re
import sys
import traceback
import types
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import torch

from predictor.common.inputs import InputError

MAX_MESSAGE = 1000
DTYPES = ("float32", "float16", "bfloat16", "amp")  # amp: captured in float32, rewritten as autocast runs it
OPTIMIZERS = ("sgd", "adam")
CONVENTION = ("a model file defines class Model, get_inputs() and optionally get_init_inputs() "
              "(KernelBench's convention)")
_modules = itertools.count()
BACKWARD = "in the backward pass; --inference times the forward alone"
MEMORY_NOTE = ""  # set by the capture process (predictor.emulator.capture.model_process): its memory limit, named


class ModelFileError(InputError):
    """A model file that cannot be captured. ``str()`` is one line (≤ 1,000 characters) that
    starts with the file's path as given; ``path`` is that path."""

    def __init__(self, path: str | Path, message: str) -> None:
        self.path = str(path)
        super().__init__(_one_line(f"{self.path}: {message}"))


# ---------------------------------------------------------------------------------------------
# public helpers


def expand(paths: Iterable[str | Path]) -> list[str]:
    """The model files that ``--model-file`` values name, in order: a directory gives every
    ``*.py`` file in it (not recursive), sorted by name, each as the directory path joined with
    the file name; anything else is kept as given (a missing file fails when captured, naming it).
    A directory without ``*.py`` files is kept as itself, so its capture fails naming it."""
    out: list[str] = []
    for p in paths:
        p = str(p)
        if os.path.isdir(p):
            names = sorted(n for n in os.listdir(p) if n.endswith(".py") and os.path.isfile(os.path.join(p, n)))
            out.extend(os.path.join(p, n) for n in names) if names else out.append(p)
        else:
            out.append(p)
    return out


def config_id_of(path: str | Path, *, inference: bool = False, dtype: str = "float32", optimizer: str = "sgd") -> str:
    """``file:<stem>`` plus ``:<dtype>`` (unless float32), ``:adam`` (training with Adam) and
    ``:inference``: known before the file is read, so a resumed ``ets collect`` can skip it."""
    parts = [f"file:{Path(path).stem}"]
    if dtype != "float32":
        parts.append(dtype)
    if inference:
        parts.append("inference")
    elif optimizer != "sgd":
        parts.append(optimizer)
    return ":".join(parts)


def capture_model_file(path: str | Path, *, inference: bool = False, dtype: str = "float32",
                       optimizer: str = "sgd") -> pd.DataFrame:
    """The op sequence of one iteration of the model in ``path`` (module docstring) as a
    validated execution-trace table (device ``meta``; durations are host dispatch times). Runs
    the file's code. Raises :class:`ModelFileError` (one line naming ``path``) for every problem
    of the file or its model; ValueError for a bad ``dtype`` / ``optimizer`` argument. The
    profiler's own log lines reach stderr unless the caller wraps the call in
    :func:`predictor.emulator.capture.quiet.quiet_profiler` (the CLI does)."""
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {DTYPES}, got {dtype!r}")
    if optimizer not in OPTIMIZERS:
        raise ValueError(f"optimizer must be one of {OPTIMIZERS}, got {optimizer!r}")
    shown = str(path)
    source = _read(shown)
    with _user_code(shown):
        module = _load(shown, source)
        try:
            base = "float32" if dtype == "amp" else dtype
            trace = _capture(shown, module, inference=inference, dtype=base, optimizer=optimizer)
            if dtype != "amp":
                return trace
            from predictor.common.op_trace import validate
            from predictor.emulator.capture.amp import autocast_trace

            return validate(autocast_trace(trace).assign(config_id=config_id_of(path, inference=inference, dtype=dtype,
                                                                                 optimizer=optimizer)), shown)
        finally:
            sys.modules.pop(module.__name__, None)


# ---------------------------------------------------------------------------------------------
# loading


def _read(shown: str) -> bytes:
    from predictor.common.inputs import InputError, read_bytes

    try:
        return read_bytes(shown, "model file (a Python file)")
    except FileNotFoundError:
        raise ModelFileError(shown, "no such file") from None
    except InputError as exc:  # a directory, a FIFO, too large
        raise ModelFileError(shown, str(exc).removeprefix(f"{shown}: ")) from None
    except OSError as exc:
        raise ModelFileError(shown, f"cannot read it: {exc.strerror or exc}") from None


@contextlib.contextmanager
def _user_code(shown: str) -> Iterator[None]:
    """While the file's code runs: its directory first on sys.path, its prints on stderr."""
    folder = os.path.dirname(os.path.abspath(shown))
    sys.path.insert(0, folder)
    try:
        with contextlib.redirect_stdout(sys.stderr):
            yield
    finally:
        with contextlib.suppress(ValueError):
            sys.path.remove(folder)


def _load(shown: str, source: bytes) -> types.ModuleType:
    """Compile and run the file as a module of a unique name (no bytecode is written beside it)."""
    try:
        code = compile(source, shown, "exec", dont_inherit=True)
    except SyntaxError as exc:
        where = f" (at {exc.filename or shown}:{exc.lineno})" if exc.lineno else ""
        raise ModelFileError(shown, f"SyntaxError: {exc.msg}{where}") from None
    except ValueError as exc:  # e.g. null bytes, on older Pythons
        raise ModelFileError(shown, f"not valid Python: {exc}") from None
    stem = re.sub(r"\W", "_", Path(shown).stem)
    module = types.ModuleType(f"ets_model_file_{next(_modules)}_{stem}")
    module.__file__ = os.path.abspath(shown)
    sys.modules[module.__name__] = module  # dataclasses and typing look their module up there
    try:
        with torch.device("meta"):
            exec(code, module.__dict__)  # noqa: S102 -- the user's own file, named on the command line
    except (Exception, SystemExit) as exc:
        sys.modules.pop(module.__name__, None)
        raise _raised(shown, exc) from None
    return module


def _entry_points(shown: str, module: types.ModuleType) -> tuple[Any, Callable, Callable | None]:
    names = vars(module)
    missing = [n for n in ("Model", "get_inputs") if n not in names]
    if missing:
        raise ModelFileError(shown, f"defines no {' and no '.join(missing)} ({CONVENTION})")
    for name in ("Model", "get_inputs", "get_init_inputs"):
        if name in names and not callable(names[name]):
            raise ModelFileError(shown, f"{name} is {short(names[name])}, not a class or function ({CONVENTION})")
    return names["Model"], names["get_inputs"], names.get("get_init_inputs")


# ---------------------------------------------------------------------------------------------
# building and capturing


def _capture(shown: str, module: types.ModuleType, *, inference: bool, dtype: str, optimizer: str) -> pd.DataFrame:
    from predictor.common.op_trace import validate
    from predictor.emulator.capture.opseq import _create_optimizer_state, _rnn_flops, ops_table
    from predictor.emulator.capture.profile import extract_ops, median_timings, run_profiled
    from predictor.emulator.zoo.registry import ADAM_LR, SGD_LR, SGD_MOMENTUM

    config_id = config_id_of(shown, inference=inference, dtype=dtype, optimizer=optimizer)
    model_cls, get_inputs, get_init_inputs = _entry_points(shown, module)
    run_on = "meta"
    model, inputs = _build(shown, model_cls, get_inputs, get_init_inputs, run_on)
    if any(isinstance(m, torch.nn.RNNBase) for m in model.modules()):
        run_on = "cpu"  # as the zoo: the meta device decomposes RNNs per time step
        model, inputs = _build(shown, model_cls, get_inputs, get_init_inputs, run_on)
    model, inputs = _cast(model, inputs, dtype)
    params = [p for p in model.parameters() if p.requires_grad]
    opt = None
    if not inference:
        model.train()
        if params:
            opt = (torch.optim.SGD(params, lr=SGD_LR, momentum=SGD_MOMENTUM) if optimizer == "sgd"
                   else torch.optim.Adam(params, lr=ADAM_LR))
            _call(shown, lambda: _create_optimizer_state(opt), "creating the optimizer state")
        else:  # one op and no weights: the backward is the op's, towards its inputs
            inputs = [_requiring_grad(x) for x in inputs]
    leaves = [t for x in inputs for t in _tensors(x) if t.requires_grad]

    def step() -> None:
        if inference:
            with torch.no_grad():
                _call(shown, lambda: model(*inputs))
            return
        if opt is not None:
            opt.zero_grad(set_to_none=True)
        loss = _loss(shown, _call(shown, lambda: model(*inputs)))
        if opt is None:  # gradients of the inputs, returned, not accumulated into them (no AccumulateGrad ops)
            _call(shown, lambda: torch.autograd.grad(loss, leaves, allow_unused=True), BACKWARD)
        else:
            _call(shown, loss.backward, BACKWARD)
        if opt is not None:
            _call(shown, opt.step, "in the optimizer step")

    measured = [extract_ops(top, dtype) for top in run_profiled(step, 1)]
    if not measured or not measured[0]:
        raise ModelFileError(shown, "its iteration ran no PyTorch op (does forward compute anything?)")
    rows = median_timings(measured, config_id)
    _rnn_flops(rows, model)
    batch, input_size = _sizes(inputs)
    suffix = " (run on cpu: RNN)" if run_on != "meta" else ""
    return validate(ops_table(rows, config_id=config_id, device="meta", family=Path(shown).stem,
                              model=Path(shown).stem, dtype=dtype, batch=batch, input_size=input_size,
                              cpu_us=[d for _, d, _ in rows], kernels=0,
                              source=f"capture:meta of model file {Path(shown).name}{suffix}"), config_id)


def _build(shown: str, model_cls, get_inputs, get_init_inputs, device: str) -> tuple[torch.nn.Module, list]:
    """``Model(*get_init_inputs())`` and ``get_inputs()`` with tensors created on ``device``;
    tensors the file placed elsewhere are moved there. A constructor that reads tensor values
    (Swin's ``[x.item() for x in torch.linspace(...)]``) cannot run on meta: it is run again on
    the CPU, and the model moved to meta (its CPU error is the one reported if that fails too)."""
    with torch.device(device):
        init = _arguments(shown, "get_init_inputs()", _call(shown, get_init_inputs)) if get_init_inputs else []
        try:
            model = _call(shown, lambda: model_cls(*init))
        except ModelFileError:
            if device != "meta":
                raise
            with torch.device("cpu"):
                model = _call(shown, lambda: model_cls(*init))
        if not isinstance(model, torch.nn.Module):
            raise ModelFileError(shown, f"Model(*get_init_inputs()) returned {short(model)}, not a torch.nn.Module")
        inputs = _arguments(shown, "get_inputs()", _call(shown, get_inputs))
    try:
        model = model.to(device)
    except Exception as exc:
        raise _raised(shown, exc) from None
    return model, [_map_tensors(x, lambda t: t.to(device)) for x in inputs]


def _arguments(shown: str, what: str, value: Any) -> list:
    if isinstance(value, (list, tuple)):
        return list(value)
    if isinstance(value, torch.Tensor):  # a single tensor: one argument
        return [value]
    raise ModelFileError(shown, f"{what} returned {short(value)}; expected a list of arguments")


def _cast(model: torch.nn.Module, inputs: list, dtype: str) -> tuple[torch.nn.Module, list]:
    """The model and its floating inputs in ``dtype`` (pure half precision, as the zoo's fp16 and
    bf16 configs; a mixed-precision mode would be one more branch here)."""
    if dtype == "float32":
        return model, inputs
    target = getattr(torch, dtype)
    return model.to(target), [_map_tensors(x, lambda t: t.to(target) if t.is_floating_point() else t) for x in inputs]


def _map_tensors(value: Any, fn: Callable[[torch.Tensor], torch.Tensor]) -> Any:
    if isinstance(value, torch.Tensor):
        return fn(value)
    if isinstance(value, (list, tuple)) and not hasattr(value, "_fields"):
        return type(value)(_map_tensors(v, fn) for v in value)
    if isinstance(value, dict):
        return {k: _map_tensors(v, fn) for k, v in value.items()}
    return value


def _requiring_grad(value: Any) -> Any:
    return _map_tensors(value, lambda t: t.detach().requires_grad_(True) if t.is_floating_point() else t)


def _floating(value: Any) -> list[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        return [value] if value.is_floating_point() else []
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in _floating(v)]
    if isinstance(value, dict):
        return [t for v in value.values() for t in _floating(v)]
    return []


def _loss(shown: str, output: Any) -> torch.Tensor:
    """Σ t.float().mean() over the output's floating tensors; one line naming what is wrong."""
    tensors = _floating(output)
    if not tensors:
        raise ModelFileError(shown, f"the forward output has no floating-point tensor to take a loss of "
                                    f"(got {_describe(output)}); use --inference to time the forward alone")
    loss = None
    for t in tensors:  # .float() only where it converts (on a float32 tensor it would record a no-op `to`)
        term = (t if t.dtype == torch.float32 else t.float()).mean()
        loss = term if loss is None else loss + term
    if not loss.requires_grad:
        raise ModelFileError(shown, "the forward output depends on no parameter or input that requires a "
                                    "gradient, so there is no backward pass; use --inference to time the forward alone")
    return loss


def _describe(value: Any) -> str:
    if isinstance(value, torch.Tensor):
        return f"a tensor of dtype {str(value.dtype).removeprefix('torch.')} and shape {list(value.shape)}"
    if isinstance(value, (list, tuple)):
        return f"a {type(value).__name__} of {len(value)}: " + ", ".join(_describe(v) for v in list(value)[:3]) + (
            ", …" if len(value) > 3 else "")
    return short(value, 60)


def _sizes(inputs: list) -> tuple[int, int]:
    """batch and input_size of the iteration (module docstring)."""
    first = next((t for x in inputs for t in _tensors(x) if t.dim() >= 1), None)
    if first is None:
        return 1, 0
    shape = list(first.shape)
    size = shape[2] if len(shape) == 4 else shape[1] if len(shape) == 3 else 0
    return max(int(shape[0]), 1), int(size)


def _tensors(value: Any) -> list[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in _tensors(v)]
    return []


# ---------------------------------------------------------------------------------------------
# errors


def _call(shown: str, fn: Callable[[], Any], stage: str = "") -> Any:
    """``fn()``; an exception in it (the file's code, or torch under it) as one ModelFileError line."""
    try:
        return fn()
    except ModelFileError:
        raise
    except (Exception, SystemExit) as exc:
        raise _raised(shown, exc, stage) from None


def _raised(shown: str, exc: BaseException, stage: str = "") -> ModelFileError:
    """``Type: message (at file:line in function)``, the frame being the innermost one in the
    user's file, else the innermost one; ``stage`` (e.g. the backward pass, which runs no line of
    the file) is added after the frame."""
    frames = traceback.extract_tb(exc.__traceback__)
    mine = os.path.abspath(shown)
    ours = [f for f in frames if f.filename == shown or os.path.abspath(f.filename) == mine]
    frame = ours[-1] if ours else frames[-1] if frames else None
    if isinstance(exc, SyntaxError) and exc.lineno:  # a module the file imports
        where = f" (at {exc.filename}:{exc.lineno})"
    else:
        where = f" (at {frame.filename}:{frame.lineno} in {frame.name}{'; ' + stage if stage else ''})" \
            if frame is not None else f" ({stage})" if stage else ""
    message = " ".join(str(exc).split()) or "(no message)"
    if MEMORY_NOTE and (isinstance(exc, MemoryError) or "can't allocate memory" in message):
        message = f"ran out of memory ({MEMORY_NOTE}): {message}"
    head = f"{type(exc).__name__}: "
    room = MAX_MESSAGE - len(shown) - 2 - len(head) - len(where)
    if len(message) > room:
        message = message[:max(room - 1, 20)] + "…"
    return ModelFileError(shown, head + message + where)


def _one_line(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= MAX_MESSAGE else text[:MAX_MESSAGE - 1] + "…"


def short(value: Any, width: int = 80) -> str:
    from predictor.common.inputs import short as short_

    return short_(value, width)


__all__ = ["ModelFileError", "capture_model_file", "config_id_of", "expand"]

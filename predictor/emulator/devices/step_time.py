"""How long one training step of a zoo config takes on an emulated GPU (``ets devices time``).

Why: "what would this model cost on that GPU" is the question the emulator exists to answer, and
it should not need a dataset directory: build the config, capture its op sequence on the meta
device, emulate it without noise and sum the rows.

* :func:`resolve_config` — a model name (``resnet50``, ``transformer_encoder``,
  ``transformer_encoder_tiny``, ``gpt2_medium``, NeuSight aliases such as ``gpt3_27``) or a
  zoo config id, plus batch / size / dtype / optimizer, to a checked :class:`ModelConfig`.
  Vision names resolve as ``ets predict`` does (1,000 classes); sequence models take their zoo
  vocabulary and size variant. Unknown names raise :class:`InputError`, which lists close
  names and the known families; impossible sizes raise ``ModelBuildError`` naming the size.
* :func:`step_time` — capture + :func:`predictor.emulator.devices.timing.emulate` (``noise=False``) +
  :func:`summarize`: per phase Σ(duration + gap), so forward + backward + update = total; and
  per phase Σ duration (``<phase>_kernel_ms``), which add up to ``kernel_ms``. A phase the trace
  lacks (an inference capture has no backward or update) is 0.0.

The capture is :func:`predictor.emulator.capture.quiet.capture_quietly` (without the profiler's noise).
"""

from __future__ import annotations

import difflib

import pandas as pd

from predictor.common.inputs import InputError
from predictor.common.op_trace import PHASES
from predictor.emulator.capture.quiet import capture_quietly
from predictor.emulator.devices.specs import DeviceParams, load_params
from predictor.emulator.zoo.config import ModelBuildError, ModelConfig

# (batch, size) when not given, by kind; LLMs default to a batch and length they were measured at
DEFAULTS = {"vision": (32, 224), "randwire": (32, 64), "nlp": (32, 128), "speech": (32, 400), "llm": (8, 512)}
NLP_DEFAULT_VARIANT = {"transformer_encoder": "base", "transformer_seq2seq": "base", "lstm_lm": "medium",
                       "lstm_speech": "small"}


# ---------------------------------------------------------------------------------------------
# config resolution


def known_models() -> dict[str, str]:
    """Every model name :func:`resolve_config` accepts -> its kind."""
    from predictor.emulator.zoo import llm, nlp, vision

    names = {m: "vision" for m in (*vision.MODELS, *vision.CIFAR_MODELS)}
    for model in nlp.MODELS:
        names[model] = nlp.KIND[model]
        names.update({f"{model}_{variant}": nlp.KIND[model] for variant in nlp.SIZES[model]})
    names.update({m: "llm" for m in (*llm.MODELS, *llm.ALIASES)})
    return names


def known_families() -> list[str]:
    from predictor.common.families import TORCHVISION_FAMILIES
    from predictor.emulator.zoo import llm, nlp

    return [*TORCHVISION_FAMILIES, "randwire", *dict.fromkeys(nlp.FAMILY.values()), *llm.FAMILIES]


def _unknown(name: str) -> InputError:
    candidates = [*known_models(), "randwire_er", "randwire_ws", "randwire_ba"]
    close = difflib.get_close_matches(name.lower(), candidates, n=5, cutoff=0.6)
    hint = f"did you mean {', '.join(close)}? " if close else ""
    return InputError(f"unknown model {name!r}; {hint}known families: {', '.join(known_families())} "
                      "(e.g. resnet50, mobilenet_v2, transformer_encoder_tiny, lstm_lm, gpt2_medium), "
                      "or a zoo config id such as resnet18:b32:s128:float32:sgd:c1000")


def _from_id(target: str) -> ModelConfig:
    from predictor.common.families import family_of
    from predictor.emulator.zoo import llm, nlp, vision
    from predictor.emulator.zoo.registry import zoo_configs

    parts = target.split(":")
    model = parts[0]
    if model.startswith("randwire"):
        pool = zoo_configs("randwire")
    elif model in nlp.MODELS:
        pool = nlp.grid() + [c for d in ("float16", "bfloat16") for c in nlp.grid(d)]
    elif model in llm.MODELS:
        pool = llm.grid()
    else:
        pool = vision.grid() + [c for d in ("float16", "bfloat16") for c in vision.grid(d)]
    for c in pool:
        if c.config_id == target:
            return c
    if len(parts) == 6 and model in known_models() and known_models()[model] == "vision":
        try:  # a vision id outside the sampled grid, as `ets predict` reads it
            b, s, dtype, opt, classes = parts[1:]
            return ModelConfig(kind="vision", family=family_of(model), model=model, batch=int(b[1:]),
                               input_size=int(s[1:]), dtype=dtype, optimizer=opt, num_classes=int(classes[1:]))
        except ValueError as exc:
            raise InputError(f"{target!r} is not a valid config id ({exc})") from None
    if model not in known_models() and not model.startswith("randwire"):
        raise _unknown(model)
    raise InputError(f"{target!r} is not a zoo config id (ids with an ':x...' extra hash must be one of "
                     f"`ets collect`'s; give the model name with --batch/--size instead)")


def resolve_config(target: str, batch: int | None = None, size: int | None = None, dtype: str | None = None,
                   optimizer: str | None = None) -> ModelConfig:
    """The checked config of a model name or zoo config id. ``None`` options keep the id's values
    or the kind's defaults (:data:`DEFAULTS`; optimizer SGD, Adam for LLMs; float32)."""
    from predictor.common.families import family_of
    from predictor.emulator.zoo import llm, nlp, registry, vision

    target = target.strip()
    if ":" in target:
        config = _from_id(target)
        changes = {k: v for k, v in {"batch": batch, "input_size": size, "dtype": dtype,
                                     "optimizer": optimizer}.items() if v is not None}
        config = config.replace(**changes) if changes else config
    else:
        name = target.lower()
        kind = known_models().get(name)
        if kind is None:
            if name.startswith("randwire"):
                raise InputError(
                    f"{target!r}: RandWire models are random graphs; give a zoo config id (`ets collect --zoo "
                    f"randwire` lists them), e.g. {registry.zoo_configs('randwire', limit=1)[0].config_id}")
            raise _unknown(target)
        b, s = DEFAULTS[kind]
        b, s = batch or b, size or s
        if kind == "vision":
            config = ModelConfig(kind="vision", family=family_of(name), model=name, batch=b, input_size=s,
                                 dtype=dtype or "float32", optimizer=optimizer or "sgd", num_classes=1000)
        elif kind == "llm":
            config = llm.config_for(name, b, s, dtype or "float32", optimizer or "adam")
        else:
            model = name if name in nlp.MODELS else max((m for m in nlp.MODELS if name.startswith(m + "_")), key=len)
            variant = name[len(model) + 1:] or NLP_DEFAULT_VARIANT[model]
            config = nlp.config_for(model, variant, b, s, dtype or "float32", optimizer or "sgd")
    if config.kind == "vision" and config.model not in (*vision.MODELS, *vision.CIFAR_MODELS):
        raise _unknown(config.model)
    registry.check(config)  # ModelBuildError naming the size when it cannot be built
    return config


# ---------------------------------------------------------------------------------------------
# step time


def kernel_source_of(key: str) -> str:
    """``measured-kernels`` or ``spec-derived`` for a spec-sheet key (see kernels.kernel_source)."""
    from predictor.emulator.devices import kernels

    return kernels.kernel_source(key, kernels.shipped())


def summarize(emulated: pd.DataFrame, source: str, params_version: str) -> dict:
    """The step-time summary of one emulated trace (output of :func:`timing.emulate`)."""
    other = sorted(set(emulated["phase"]) - set(PHASES))
    if other:
        raise ValueError(f"{emulated['config_id'].iloc[0]}: ops of unknown phase(s) {', '.join(other)}")
    step = emulated["duration_us"] + emulated["gap_us"]
    phase_ms = {p: float(step[emulated["phase"] == p].sum()) / 1e3 for p in PHASES}
    # summed kernel time per phase, no gaps (0.0 for an absent phase, e.g. inference or no weights)
    kernel_phase_ms = {p: float(emulated["duration_us"][emulated["phase"] == p].sum()) / 1e3 for p in PHASES}
    total_ms = phase_ms["forward"] + phase_ms["backward"] + phase_ms["update"]
    gap_ms = float(emulated["gap_us"].sum()) / 1e3
    return {
        "config_id": str(emulated["config_id"].iloc[0]),
        "device": str(emulated["device"].iloc[0]),
        **{f"{p}_ms": phase_ms[p] for p in PHASES},
        "total_ms": total_ms,
        "kernel_ms": float(emulated["duration_us"].sum()) / 1e3,
        **{f"{p}_kernel_ms": kernel_phase_ms[p] for p in PHASES},
        "overhead_ms": gap_ms,
        "overhead_share": gap_ms / total_ms if total_ms > 0 else 0.0,
        "ops": int(len(emulated)),
        "source": source,
        "params_version": params_version,
    }


def step_time_of_trace(trace: pd.DataFrame, device: str, params: DeviceParams | None = None,
                       regime: str = "plain", allow_tf32: bool = False) -> dict:
    """:func:`step_time` of an already captured op sequence; an inference capture (a forward under
    ``no_grad``) pays the inference host cost per kernel (:mod:`predictor.emulator.devices.inference_host`),
    named in ``host``."""
    from predictor.emulator.devices import inference_host
    from predictor.emulator.devices.timing import emulate

    params = load_params() if params is None else params
    spec = params.device(device)  # DeviceParamsError listing the known GPUs
    per_op = inference_host.for_trace(trace, spec.name)
    emulated = emulate(trace, device, params, noise=False, regime=regime, allow_tf32=allow_tf32,
                       inference_host_us=per_op)
    host = ("training: fitted host table" if per_op is None
            else f"inference: {per_op:.1f} µs per kernel ({inference_host.shipped().origin(spec.name)})")
    return (summarize(emulated, kernel_source_of(spec.name), params.version)
            | {"regime": regime, "allow_tf32": allow_tf32, "kernel_math": kernel_math(trace, spec, allow_tf32),
               "host": host})


def kernel_math(trace: pd.DataFrame, spec, allow_tf32: bool = False) -> dict[str, str]:
    """The arithmetic the GEMM-like kernels of ``trace`` run in on ``spec``, per op class (e.g.
    ``{"conv": "tf32", "matmul": "fp32"}``; AMP: ``"fp16+fp32"`` where both occur)."""
    from predictor.emulator.devices.kernels import GROUPS, math_of
    from predictor.emulator.devices.timing import OpArrays

    problems = OpArrays.from_trace(trace.sort_values("idx").reset_index(drop=True)).problems
    problems = problems[problems["cls"].isin(GROUPS["gemm"])]
    if problems.empty:
        return {}
    math_ = math_of(problems, spec, allow_tf32)
    return {str(cls): "+".join(sorted(set(math_[(problems["cls"] == cls).to_numpy()])))
            for cls in sorted(problems["cls"].unique())}


def step_time(config: ModelConfig, device: str, params: DeviceParams | None = None, regime: str = "plain",
              allow_tf32: bool = False) -> dict:
    """One training step of ``config`` on emulated ``device`` ('emulated:T4', 'T4'): forward_ms,
    backward_ms, update_ms (each Σ duration + gap of its ops / 1000; they add up to total_ms),
    total_ms, kernel_ms, forward_kernel_ms, backward_kernel_ms, update_kernel_ms (Σ duration of
    the phase's ops / 1000, no gaps; they add up to kernel_ms), overhead_ms, overhead_share,
    ops, device, config_id, source
    (``measured-kernels`` | ``spec-derived``), params_version, regime (``plain`` | ``nsys``).
    Raises DeviceParamsError for an unknown GPU or regime (before capturing), ModelBuildError for a
    config that cannot be built."""
    from predictor.emulator.devices.specs import regime_host_factor

    params = load_params() if params is None else params
    params.device(device)
    regime_host_factor(params, regime)
    return step_time_of_trace(capture_quietly(config), device, params, regime, allow_tf32)


__all__ = ["ModelBuildError", "known_families", "known_models",
           "resolve_config", "step_time", "step_time_of_trace", "summarize"]

"""The zoo's entry points: named config sets, building a config into a workload, its optimizer.

Zoos:

* ``hpo``: the ETS torchvision grid (``vision.grid()``: every valid model x batch x image size).
* ``randwire``: ``randwire.sample()`` — seeded RandWire configs balanced over graph modes and
  estimated-op bins (``randwire.DEFAULT_COUNT`` of them when ``limit`` is None).
* ``nlp``: ``nlp.grid()`` — transformer encoder / encoder-decoder, LSTM LM and speech LSTM.
* ``all``: the three together (not ``llm``: ``all`` stays what the shipped checkpoints' datasets
  were built from).
* ``llm``: ``llm.grid()`` — GPT-2 / GPT-3 / OPT / BERT-large training configs at NeuSight's
  measured sizes (families ``gpt``, ``opt``, ``bert``).
* ``timm``: ``timm_models.grid()`` — PyTorch Image Models families (one per timm module).
* ``hf``: ``hf_models.grid()`` — Hugging Face ``transformers`` families (one per ``model_type``),
  scaled-down presets.
* ``wide``: ``all``, ``timm`` and ``hf`` together: every family a CPU can train (``llm`` is
  GPU-sized). Reserved families (:mod:`predictor.common.families`) are in no zoo: only
  ``zoo_configs(..., families=[...])`` naming them returns their configs.

Ordering: configs come in a seeded stratified order (``common.stratified_order``: round-robin over
families, within a family over models), so ``zoo_configs(z, limit=k, seed=s)`` is the first ``k``
of ``zoo_configs(z, seed=s)`` and any ``limit >= number of families`` covers every family.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from functools import lru_cache

import torch

from predictor.common import families as family_names
from predictor.emulator.zoo import hf_models, llm, nlp, randwire, timm_models, vision
from predictor.emulator.zoo.common import as_device, stratified_order
from predictor.emulator.zoo.config import ModelBuildError, ModelConfig, Workload, cross_entropy, stable_int

ZOOS = ("hpo", "randwire", "nlp", "all", "llm", "timm", "hf", "wide")
SGD_LR, SGD_MOMENTUM, ADAM_LR = 0.01, 0.9, 1e-3

_MODULES = {"vision": vision, "randwire": randwire, "nlp": nlp, "speech": nlp, "llm": llm, "timm": timm_models,
            "hf": hf_models}


def zoo_configs(zoo: str, limit: int | None = None, seed: int = 0, families=None) -> list[ModelConfig]:
    """The configs of ``zoo`` in seeded stratified order; the first ``limit`` when given.

    ``families``: only these (ValueError naming any that is not a family of the zoo); a reserved
    family is returned only when named here. Without it, reserved families are left out."""
    if zoo not in ZOOS:
        raise ValueError(f"unknown zoo {zoo!r}; known zoos: {', '.join(ZOOS)}")
    if limit is not None and limit < 0:
        raise ValueError(f"limit must be >= 0, got {limit}")
    wanted = None if families is None else tuple(sorted(set(families)))
    if wanted is not None:
        family_names.check_family_names(list(wanted), sorted(zoo_families(zoo)))
    return list(_zoo_configs(zoo, limit, seed, wanted))


@lru_cache(maxsize=8)
def _zoo_configs(zoo: str, limit: int | None, seed: int, wanted: tuple[str, ...] | None) -> tuple[ModelConfig, ...]:
    """:func:`zoo_configs`, kept for the last few calls (the wide zoo has 17,000 configs; configs are
    frozen, so callers share them safely)."""
    rng = random.Random(f"zoo:{zoo}:{seed}")
    configs: list[ModelConfig] = []
    if zoo in ("hpo", "all", "wide"):
        configs += vision.grid()
    if zoo in ("nlp", "all", "wide"):
        configs += nlp.grid()
    if zoo == "llm":
        configs += llm.grid()
    if zoo in ("timm", "wide"):
        configs += timm_models.grid()
    if zoo in ("hf", "wide"):
        configs += hf_models.grid()
    if zoo in ("randwire", "all", "wide") and (wanted is None or "randwire" in wanted):
        count = randwire.DEFAULT_COUNT if limit is None else limit
        configs += randwire.sample(count, seed)
    configs = [c for c in configs
               if (c.family in wanted if wanted is not None else not family_names.is_reserved(c.family))]
    if zoo == "randwire":
        ordered = configs  # already balanced over modes and op bins, prefix-stable
    else:
        # randwire.sample cycles er/ws/ba, so keeping its order keeps prefixes stable.
        ordered = stratified_order(configs, rng, keep_order=("randwire",))
    return tuple(ordered if limit is None else ordered[:limit])


@dataclass(frozen=True)
class Family:
    name: str
    source: str  # "torchvision", "zoo" (plain torch), "timm <version>", "transformers <version>"
    group: str
    models: tuple[str, ...]
    reserved: bool

    def to_dict(self) -> dict:
        return {"family": self.name, "source": self.source, "group": self.group, "models": list(self.models),
                "reserved": self.reserved}


def zoo_families(zoo: str = "wide") -> dict[str, Family]:
    """Every family of ``zoo`` (reserved ones included, marked), with its source and group."""
    import torchvision

    sources = {"vision": f"torchvision {torchvision.__version__}", "randwire": "zoo (plain torch)",
               "nlp": "zoo (plain torch)", "speech": "zoo (plain torch)", "llm": "zoo (plain torch)"}
    models: dict[str, dict[str, str]] = {}  # family -> model -> source
    if zoo in ("hpo", "all", "wide"):
        for c in vision.grid():
            models.setdefault(c.family, {})[c.model] = sources["vision"]
    if zoo in ("nlp", "all", "wide"):
        for c in nlp.grid():
            models.setdefault(c.family, {})[c.model] = sources[c.kind]
    if zoo in ("randwire", "all", "wide"):
        models["randwire"] = {m: sources["randwire"] for m in randwire.MODELS}
    if zoo == "llm":
        for c in llm.grid():
            models.setdefault(c.family, {})[c.model] = sources["llm"]
    if zoo in ("timm", "wide"):
        for family, names in timm_models.FAMILIES.items():
            models[family] = {timm_models.model_name(m): f"timm {timm_models.version()}" for m in names}
    if zoo in ("hf", "wide"):
        for family in hf_models.TASKS_OF:
            if family not in hf_models.EXCLUDED:
                models.setdefault(family, {})[hf_models.model_name(family)] = f"transformers {hf_models.version()}"
    out = {}
    for family in sorted(models):
        sources_of = sorted(set(models[family].values()))
        out[family] = Family(family, ", ".join(sources_of), family_names.group_of(family),
                                     tuple(sorted(models[family])), family_names.is_reserved(family))
    return out


def check(config: ModelConfig) -> None:
    """Raise ModelBuildError when ``config`` cannot be built (unknown model, impossible size...)."""
    module = _MODULES.get(config.kind)
    if module is None:  # pragma: no cover - ModelConfig validates kind
        raise ModelBuildError(config, f"unknown kind {config.kind!r}")
    module.check(config)


def build(config: ModelConfig, device: str | torch.device = "meta") -> Workload:
    """Construct ``config``'s model directly on ``device`` (random init, seeded by config_id),
    in ``config.dtype``, in training mode; with its deterministic inputs and cross-entropy loss."""
    device = as_device(device)
    check(config)
    module = _MODULES[config.kind]
    weight_seed = stable_int("weights", config.config_id, bits=63)
    fork_devices = [device] if device.type == "cuda" else []
    try:
        with torch.random.fork_rng(devices=fork_devices):
            torch.random.default_generator.manual_seed(weight_seed)
            if device.type == "cuda":
                with torch.cuda.device(device):
                    torch.cuda.manual_seed(weight_seed)
            with torch.device(device):
                model = module.build_model(config)
                if config.torch_dtype != torch.float32:
                    model = model.to(dtype=config.torch_dtype)
    except ModelBuildError:
        raise
    except Exception as exc:  # torchvision/torch refused the config
        raise ModelBuildError(config, f"{type(exc).__name__}: {exc}") from exc
    model.train()
    _PARAMETERS[config.config_id] = sum(p.numel() for p in model.parameters())
    return Workload(model=model, inputs=module.inputs(config), loss=cross_entropy, config=config)


_PARAMETERS: dict[str, int] = {}  # config_id -> parameter count, recorded by every build


def parameter_count(config: ModelConfig) -> int:
    """How many parameters ``config``'s model has: recorded by a build of it in this process (the
    capture's), else counted on a meta build (no memory, no compute) — a model built once."""
    if config.config_id not in _PARAMETERS:
        build(config, "meta")
    return _PARAMETERS[config.config_id]


def make_optimizer(config: ModelConfig, params) -> torch.optim.Optimizer:
    """SGD(lr 0.01, momentum 0.9) as in ETS, or Adam(lr 1e-3); torch's default implementation
    choice (foreach on CUDA, per-parameter loops on CPU/meta)."""
    if config.optimizer == "sgd":
        return torch.optim.SGD(params, lr=SGD_LR, momentum=SGD_MOMENTUM)
    if config.optimizer == "adam":
        return torch.optim.Adam(params, lr=ADAM_LR)
    raise ModelBuildError(config, f"unknown optimizer {config.optimizer!r}")  # pragma: no cover

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

Ordering: configs come in a seeded stratified order (``common.stratified_order``: round-robin over
families, within a family over models), so ``zoo_configs(z, limit=k, seed=s)`` is the first ``k``
of ``zoo_configs(z, seed=s)`` and any ``limit >= number of families`` covers every family.
"""

from __future__ import annotations

import random

import torch

from predictor.zoo import llm, nlp, randwire, vision
from predictor.zoo.common import as_device, stratified_order
from predictor.zoo.config import ModelBuildError, ModelConfig, Workload, cross_entropy, stable_int

ZOOS = ("hpo", "randwire", "nlp", "all", "llm")
SGD_LR, SGD_MOMENTUM, ADAM_LR = 0.01, 0.9, 1e-3

_MODULES = {"vision": vision, "randwire": randwire, "nlp": nlp, "speech": nlp, "llm": llm}


def zoo_configs(zoo: str, limit: int | None = None, seed: int = 0) -> list[ModelConfig]:
    """The configs of ``zoo`` in seeded stratified order; the first ``limit`` when given."""
    if zoo not in ZOOS:
        raise ValueError(f"unknown zoo {zoo!r}; known zoos: {', '.join(ZOOS)}")
    if limit is not None and limit < 0:
        raise ValueError(f"limit must be >= 0, got {limit}")
    rng = random.Random(f"zoo:{zoo}:{seed}")
    configs: list[ModelConfig] = []
    if zoo in ("hpo", "all"):
        configs += vision.grid()
    if zoo in ("nlp", "all"):
        configs += nlp.grid()
    if zoo == "llm":
        configs += llm.grid()
    if zoo in ("randwire", "all"):
        count = randwire.DEFAULT_COUNT if limit is None else limit
        configs += randwire.sample(count, seed)
    if zoo == "randwire":
        ordered = configs  # already balanced over modes and op bins, prefix-stable
    else:
        # randwire.sample cycles er/ws/ba, so keeping its order keeps prefixes stable.
        ordered = stratified_order(configs, rng, keep_order=("randwire",))
    return ordered if limit is None else ordered[:limit]


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
    return Workload(model=model, inputs=module.inputs(config), loss=cross_entropy, config=config)


def make_optimizer(config: ModelConfig, params) -> torch.optim.Optimizer:
    """SGD(lr 0.01, momentum 0.9) as in ETS, or Adam(lr 1e-3); torch's default implementation
    choice (foreach on CUDA, per-parameter loops on CPU/meta)."""
    if config.optimizer == "sgd":
        return torch.optim.SGD(params, lr=SGD_LR, momentum=SGD_MOMENTUM)
    if config.optimizer == "adam":
        return torch.optim.Adam(params, lr=ADAM_LR)
    raise ModelBuildError(config, f"unknown optimizer {config.optimizer!r}")  # pragma: no cover

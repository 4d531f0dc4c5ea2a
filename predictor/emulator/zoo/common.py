"""Helpers shared by the zoo modules: deterministic inputs, seeded sampling, stratified ordering."""

from __future__ import annotations

import random
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence

import torch

from predictor.emulator.zoo.config import ModelConfig, stable_int


def as_device(device: str | torch.device) -> torch.device:
    return device if isinstance(device, torch.device) else torch.device(device)


def _generator(device: torch.device, seed: int) -> torch.Generator | None:
    if device.type == "meta":
        return None
    generator = torch.Generator(device=device)
    generator.manual_seed(seed)
    return generator


def input_seed(config: ModelConfig) -> int:
    return stable_int("inputs", config.config_id, bits=63)


def randn(shape: Sequence[int], dtype: torch.dtype, device: torch.device, generator) -> torch.Tensor:
    if generator is None:
        return torch.empty(tuple(shape), dtype=dtype, device=device)
    return torch.randn(tuple(shape), generator=generator, device=device).to(dtype)


def randint(high: int, shape: Sequence[int], device: torch.device, generator) -> torch.Tensor:
    if generator is None:
        return torch.empty(tuple(shape), dtype=torch.long, device=device)
    return torch.randint(0, high, tuple(shape), generator=generator, device=device)


def input_factory(
    config: ModelConfig, make: Callable[[torch.device, torch.Generator | None], tuple]
) -> Callable[[torch.device], tuple]:
    """``inputs(device)``: calls ``make(device, generator)`` with a generator seeded by config_id.

    The same config gives bit-identical tensors on every call on the same device type; on the
    meta device tensors carry shapes and dtypes only.
    """

    def inputs(device: str | torch.device = "meta") -> tuple:
        device = as_device(device)
        return make(device, _generator(device, input_seed(config)))

    return inputs


def classes_for(*coords: object, low: int = 3, high: int = 1000) -> int:
    """ETS randomised the number of classes in [3, 1000]; ours is a hash of the config coordinates."""
    return low + stable_int("num_classes", *coords) % (high - low + 1)


def stratified_order(
    configs: Iterable[ModelConfig], rng: random.Random, keep_order: Iterable[str] = ()
) -> list[ModelConfig]:
    """Interleave configs so every prefix covers families, then models, as evenly as possible.

    Two-level round-robin: families in a seeded order; within a family its models in a seeded
    order; within a model its configs shuffled (kept in their given order for the families in
    ``keep_order``, whose order is already a seeded sample). Round ``r`` takes the next config of
    each family, each family cycling through its models.
    """
    keep = set(keep_order)
    by_family: dict[str, dict[str, list[ModelConfig]]] = defaultdict(lambda: defaultdict(list))
    for config in configs:
        by_family[config.family][config.model].append(config)
    families = sorted(by_family)
    rng.shuffle(families)
    streams = []
    for family in families:
        models = sorted(by_family[family])
        if family not in keep:
            rng.shuffle(models)
        queues = []
        for model in models:
            queue = list(by_family[family][model])
            if family not in keep:
                rng.shuffle(queue)
            queues.append(queue)
        streams.append(_round_robin(queues))
    return _round_robin(streams)


def _round_robin(queues: list[list]) -> list:
    out: list = []
    position = 0
    while True:
        added = False
        for queue in queues:
            if position < len(queue):
                out.append(queue[position])
                added = True
        if not added:
            return out
        position += 1


def image_inputs(config: ModelConfig):
    """A (batch, 3, size, size) image batch and class labels: the inputs of vision and RandWire models."""
    shape = (config.batch, 3, config.input_size, config.input_size)

    def make(device, generator):
        x = randn(shape, config.torch_dtype, device, generator)
        return (x,), randint(config.num_classes, (config.batch,), device, generator)

    return input_factory(config, make)

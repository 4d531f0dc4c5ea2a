"""One training workload of the model zoo: a frozen, hashable description and its built form.

Why: traces are keyed by ``config_id`` from capture to training split, so a config must have one
stable, human-readable name that does not depend on the Python process (no ``hash()``, no global
random state), and must round-trip through JSON (``to_dict`` / ``from_dict``).

``config_id`` = ``"{model}:b{batch}:s{input_size}:{dtype}:{optimizer}:c{num_classes}"``, plus
``":x{8 hex}"`` when ``extra`` is non-empty: the first 8 hex digits of the SHA-1 of ``extra`` as
compact JSON with sorted keys. E.g. ``resnet18:b32:s128:float32:sgd:c10``,
``randwire_ws:b16:s64:float32:sgd:c412:x1f0c9a3e``.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from predictor.common.inputs import InputError
from predictor.common.op_trace import DTYPES

KINDS = ("vision", "randwire", "nlp", "speech", "llm", "timm", "hf")
# The dtypes the zoo trains in (float64 appears only in imported traces), in the trace schema's order.
ZOO_DTYPES = tuple(d for d in DTYPES if d != "float64")
# A config may also train with automatic mixed precision: built in float32, its op sequence
# rewritten as autocast runs it (:mod:`predictor.emulator.capture.amp`); its ops are float16 or float32.
AMP = "amp"
CONFIG_DTYPES = ZOO_DTYPES + (AMP,)
TORCH_DTYPES = {d: getattr(torch, d) for d in ZOO_DTYPES} | {AMP: torch.float32}
OPTIMIZERS = ("sgd", "adam")


def stable_int(*parts: object, bits: int = 64) -> int:
    """A non-negative integer determined only by ``parts`` (their ``repr``), stable across processes."""
    digest = hashlib.sha256(repr(parts).encode()).digest()
    return int.from_bytes(digest[: bits // 8], "big")


def _normalize_extra(extra: Any) -> tuple[tuple[str, object], ...]:
    items = extra.items() if isinstance(extra, dict) else extra
    pairs = []
    for item in items:
        key, value = item
        if not isinstance(key, str):
            raise ValueError(f"extra keys must be strings, got {key!r}")
        if isinstance(value, list):
            value = tuple(value)
        if not isinstance(value, (str, int, float, bool, type(None), tuple)):
            raise ValueError(f"extra value for {key!r} must be a JSON scalar, got {type(value).__name__}")
        pairs.append((key, value))
    pairs.sort(key=lambda kv: kv[0])
    keys = [k for k, _ in pairs]
    if len(set(keys)) != len(keys):
        raise ValueError(f"duplicate extra keys: {keys}")
    return tuple(pairs)


@dataclass(frozen=True)
class ModelConfig:
    """One training configuration: model, batch, input size, dtype, optimizer, classes, extras."""

    kind: str  # one of KINDS
    family: str  # families.family_of(model) for torchvision; "randwire", "transformer", "lstm", "gpt", ...
    model: str  # e.g. "resnet18", "randwire_ws", "transformer_encoder", "lstm_lm"
    batch: int
    input_size: int  # image height = width (vision/randwire); sequence length (nlp/speech)
    dtype: str = "float32"
    optimizer: str = "sgd"  # "sgd" (momentum 0.9, lr 0.01) | "adam"
    num_classes: int = 1000  # classes (vision/randwire/speech); vocabulary (nlp/llm)
    extra: tuple[tuple[str, object], ...] = field(default=())  # sorted (key, value) pairs

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"kind must be one of {KINDS}, got {self.kind!r}")
        if self.dtype not in CONFIG_DTYPES:
            raise ValueError(f"dtype must be one of {CONFIG_DTYPES}, got {self.dtype!r}")
        if self.optimizer not in OPTIMIZERS:
            raise ValueError(f"optimizer must be one of {OPTIMIZERS}, got {self.optimizer!r}")
        for name in ("batch", "input_size", "num_classes"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        object.__setattr__(self, "extra", _normalize_extra(self.extra))

    @property
    def extra_dict(self) -> dict[str, object]:
        return dict(self.extra)

    def get(self, key: str, default: object = None) -> object:
        """Value of ``key`` in ``extra`` (``default`` when absent)."""
        return self.extra_dict.get(key, default)

    @property
    def extra_hash(self) -> str:
        """First 8 hex digits of SHA-1 over ``extra`` as sorted compact JSON ("" when empty)."""
        if not self.extra:
            return ""
        text = json.dumps(self.extra_dict, sort_keys=True, separators=(",", ":"))
        return hashlib.sha1(text.encode()).hexdigest()[:8]

    @property
    def config_id(self) -> str:
        base = (
            f"{self.model}:b{self.batch}:s{self.input_size}:{self.dtype}:"
            f"{self.optimizer}:c{self.num_classes}"
        )
        return f"{base}:x{self.extra_hash}" if self.extra else base

    @property
    def torch_dtype(self) -> torch.dtype:
        return TORCH_DTYPES[self.dtype]

    def to_dict(self) -> dict:
        return {
            "kind": self.kind,
            "family": self.family,
            "model": self.model,
            "batch": self.batch,
            "input_size": self.input_size,
            "dtype": self.dtype,
            "optimizer": self.optimizer,
            "num_classes": self.num_classes,
            "extra": {k: list(v) if isinstance(v, tuple) else v for k, v in self.extra},
            "config_id": self.config_id,
        }

    @classmethod
    def from_dict(cls, d: dict) -> ModelConfig:
        """Inverse of ``to_dict`` (a ``config_id`` key, if present, must match)."""
        fields = {k: d[k] for k in ("kind", "family", "model", "batch", "input_size")}
        for k in ("dtype", "optimizer", "num_classes"):
            if k in d:
                fields[k] = d[k]
        config = cls(**fields, extra=d.get("extra") or ())
        if "config_id" in d and d["config_id"] != config.config_id:
            raise ValueError(f"config_id mismatch: stored {d['config_id']!r}, rebuilt {config.config_id!r}")
        return config

    def replace(self, **changes: object) -> ModelConfig:
        d = {**self.to_dict(), **changes}
        d.pop("config_id")
        return ModelConfig.from_dict(d)


class ModelBuildError(InputError):
    """A config that cannot be built; the message names the config_id and the reason.

    ``ModelBuildError(config, reason)`` formats "cannot build {config_id}: {reason}";
    ``ModelBuildError(message)`` (one argument) keeps the message as given, like ValueError.
    """

    def __init__(self, config: ModelConfig | str, reason: str | None = None):
        if reason is None:
            self.config_id, self.reason = None, str(config)
            super().__init__(str(config))
            return
        self.config_id = config if isinstance(config, str) else config.config_id
        self.reason = reason
        super().__init__(f"cannot build {self.config_id}: {reason}")


@dataclass
class Workload:
    """A built config: the model on its device, a deterministic input factory and the loss."""

    model: torch.nn.Module
    inputs: Callable[[torch.device], tuple]  # device -> (model inputs tuple, targets)
    loss: Callable  # loss(model_output, targets) -> scalar tensor
    config: ModelConfig | None = None


def cross_entropy(output: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Cross-entropy over the last dim; sequence outputs (B, S, V) are flattened to (B*S, V)."""
    if output.dim() > 2:
        output = output.reshape(-1, output.shape[-1])
        targets = targets.reshape(-1)
    return torch.nn.functional.cross_entropy(output, targets)

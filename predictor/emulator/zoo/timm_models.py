"""PyTorch Image Models (``timm``) architectures: the vision families beyond torchvision's.

Why: a claim about unseen families needs many families; timm defines about a hundred, each in its
own module (``convnext``, ``levit``, ``maxxvit``, ``mobilevit``, ``coat``, ``nfnet``, ...). Family
= the timm module that defines the model. Modules that re-implement a family the zoo already has
under torchvision's name (``resnet``, ``vision_transformer`` = ``vit``, ``mobilenetv3``, ...)
are left out, so that a family split cannot meet one architecture under two names.

Models are timm's own, at their real sizes (random weights, ``pretrained=False``, never a
download), the smallest variants of each module: one training iteration takes 10-500 ms on one
CPU core at the images here. A model with learned position embeddings is built for the config's
image size (``img_size``) where timm allows it; ``probed/timm.json`` (written by
``python -m experiments.zoo_probe``) lists the sizes each model was captured at.
"""

from __future__ import annotations

import json
from pathlib import Path

from torch import nn

from predictor.emulator.zoo.common import classes_for, image_inputs
from predictor.emulator.zoo.config import ModelBuildError, ModelConfig

KIND = "timm"
PREFIX = "timm_"
BATCHES = (1, 2, 4, 8)


PROBED = Path(__file__).parent / "probed" / "timm.json"  # written by experiments/zoo_probe.py
# timm modules that re-implement a zoo family under torchvision's name (or the same name), and
# modules whose every model is a GPU-sized foundation encoder
SKIPPED = {
    **{m: "already a zoo family (torchvision)" for m in ("convnext", "densenet", "efficientnet", "inception_v3",
                                                         "regnet", "resnet", "vgg")},
    "vision_transformer": "already a zoo family: vit", "swin_transformer": "already a zoo family: swin",
    "mobilenetv3": "already a zoo family: mobilenet_v3",
    **{m: "GPU-sized only (over 80 M parameters)" for m in ("deepseek_vit", "gemma4_vit", "naflexvit", "qwen3_vit",
                                                             "nasnet", "pnasnet", "vision_transformer_sam",
                                                             "mobilenetv5")},
}


def _load() -> tuple[dict[str, tuple[str, ...]], dict[str, dict], dict[str, str]]:
    data = json.loads(PROBED.read_text())
    families: dict[str, list[str]] = {}
    for name, info in sorted(data["models"].items(), key=lambda kv: (kv[1]["family"], kv[1]["cpu_ms"])):
        families.setdefault(info["family"], []).append(name)
    return ({f: tuple(m) for f, m in sorted(families.items())}, data["models"],
            {**SKIPPED, **data["excluded"]})


# family (timm module) -> its models, the smallest ones of the module that built and trained;
# model -> its probe record (image sizes, whether it takes img_size, CPU ms of one step);
# every module or model left out, and why. Groups: predictor.common.families.TIMM_GROUPS.
FAMILIES, MODELS, EXCLUDED = _load()


def version() -> str:
    from importlib.metadata import version as installed

    return installed("timm")


def model_name(timm_name: str) -> str:
    return PREFIX + timm_name


def timm_name_of(config: ModelConfig) -> str:
    return config.model[len(PREFIX):]


def family_of_model(timm_name: str) -> str:
    for family, models in FAMILIES.items():
        if timm_name in models:
            return family
    raise ModelBuildError(f"unknown timm model {timm_name!r} in the zoo (`ets zoo list` shows the families)")


def config_for(timm_name: str, *, batch: int, size: int, dtype: str = "float32", optimizer: str = "sgd",
               num_classes: int | None = None) -> ModelConfig:
    family = family_of_model(timm_name)
    classes = num_classes or classes_for("timm", timm_name, batch, size)
    return ModelConfig(kind=KIND, family=family, model=model_name(timm_name), batch=batch, input_size=size,
                       dtype=dtype, optimizer=optimizer, num_classes=classes)


def grid(families=None) -> list[ModelConfig]:
    """Every model x batch x probed image size of each family."""
    return [config_for(name, batch=b, size=s)
            for family, models in FAMILIES.items() if families is None or family in families
            for name in models for s in MODELS[name]["sizes"] for b in BATCHES]


def check(config: ModelConfig) -> None:
    name = timm_name_of(config)
    if not config.model.startswith(PREFIX) or not any(name in models for models in FAMILIES.values()):
        raise ModelBuildError(config, f"unknown timm model {config.model!r}")
    sizes = MODELS[name]["sizes"]
    if config.input_size not in sizes:
        raise ModelBuildError(config, f"{name} was probed at image sizes {', '.join(map(str, sizes)) or 'none'} "
                                      "only (experiments/zoo_probe.py)")


def build_model(config: ModelConfig) -> nn.Module:
    import timm

    name = timm_name_of(config)
    kwargs = {"img_size": config.input_size} if MODELS[name]["takes_img_size"] else {}
    return timm.create_model(name, pretrained=False, num_classes=config.num_classes, **kwargs)


def inputs(config: ModelConfig):
    return image_inputs(config)

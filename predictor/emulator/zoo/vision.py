"""The ETS torchvision zoo: 18 families, their variants, and the HPO batch x image-size grid.

Why: ETS (predictors.md §1.1) trained on torchvision classifiers swept over
batch in {2..512} x image size in {16..768}, fp32, SGD(0.01, momentum 0.9), cross-entropy,
with the number of classes randomised in [3, 1000]. The variant list mirrors ETS's
``benchmark/models/load.py`` (74 classifiers; its deeplabv3 segmentation models are not part of
the 18 families and are left out).

Size rule (which grid points are skipped): a config is valid when
``input_size >= MIN_SIZE[model]`` and, for ViT, ``input_size % patch == 0``. ``MIN_SIZE`` is the
smallest square image for which the model's forward pass produces a (batch, classes) output,
measured with torchvision 0.29 on the meta device (bisection over 1..128 px); the smallest
grid size at or above it is what the grid uses. Sources of the minima: stride-2 poolings whose
window exceeds the feature map (alexnet, vgg, squeezenet, densenet), convnext's 2x2 stride-2
downsampling, inception_v3's valid convolutions (torchvision documents >= 75 px). The rest
(resnet, efficientnet, mobilenet, swin via padding, ...) run at any size >= the grid's 16 px.

CIFAR variants (``CIFAR_MODELS``, e.g. ``resnet18_cifar``): buildable by name but not part of
``MODELS`` / ``grid()`` (so not in the ``hpo`` zoo). They rebuild the measured calibration
workloads (``predictor.emulator.devices.measurements``): the CIFAR-10 ResNet-18 that Gavel and Pollux/Sia
train (kuangliu/pytorch-cifar) is torchvision's resnet18 with a 3x3 stride-1 stem conv of 64
channels and no max-pool; at 32x32 input its adaptive average pool sees the same 4x4 map as
kuangliu's ``avg_pool2d(4)``.
"""

from __future__ import annotations

import contextlib
import threading

import torch
import torchvision

from predictor.common.families import TORCHVISION_FAMILIES, family_of
from predictor.emulator.zoo.common import classes_for, image_inputs
from predictor.emulator.zoo.config import ModelBuildError, ModelConfig

BATCHES = (2, 4, 8, 16, 32, 64, 96, 128, 192, 256, 512)
IMAGE_SIZES = (16, 32, 64, 128, 160, 256, 384, 512, 768)

VARIANTS: dict[str, tuple[str, ...]] = {
    "resnet": ("resnet18", "resnet34", "resnet50", "resnet101", "resnet152"),
    "wide_resnet": ("wide_resnet50_2", "wide_resnet101_2"),
    "alexnet": ("alexnet",),
    "convnext": ("convnext_tiny", "convnext_small", "convnext_base", "convnext_large"),
    "densenet": ("densenet121", "densenet161", "densenet169", "densenet201"),
    "efficientnet": tuple(f"efficientnet_b{i}" for i in range(8)),
    "efficientnet_v2": ("efficientnet_v2_s", "efficientnet_v2_m", "efficientnet_v2_l"),
    "googlenet": ("googlenet",),
    "inception_v3": ("inception_v3",),
    "mobilenet_v2": ("mobilenet_v2",),
    "mobilenet_v3": ("mobilenet_v3_small", "mobilenet_v3_large"),
    "mnasnet": ("mnasnet0_5", "mnasnet0_75", "mnasnet1_0", "mnasnet1_3"),
    "regnet": (
        "regnet_x_400mf", "regnet_x_800mf", "regnet_x_1_6gf", "regnet_x_3_2gf",
        "regnet_x_8gf", "regnet_x_16gf", "regnet_x_32gf",
        "regnet_y_400mf", "regnet_y_800mf", "regnet_y_1_6gf", "regnet_y_3_2gf",
        "regnet_y_16gf", "regnet_y_32gf", "regnet_y_128gf",
    ),
    "shufflenet": ("shufflenet_v2_x0_5", "shufflenet_v2_x1_0", "shufflenet_v2_x1_5", "shufflenet_v2_x2_0"),
    "squeezenet": ("squeezenet1_0", "squeezenet1_1"),
    "swin": ("swin_t", "swin_s", "swin_b", "swin_v2_t", "swin_v2_s", "swin_v2_b"),
    "vgg": ("vgg11", "vgg11_bn", "vgg13", "vgg13_bn", "vgg16", "vgg16_bn", "vgg19", "vgg19_bn"),
    "vit": ("vit_b_16", "vit_b_32", "vit_l_16", "vit_l_32"),
}
assert tuple(sorted(VARIANTS)) == tuple(sorted(TORCHVISION_FAMILIES))

MODELS: tuple[str, ...] = tuple(m for family in TORCHVISION_FAMILIES for m in VARIANTS[family])

# CIFAR-stem variant -> the torchvision model it modifies (see module docstring); not in MODELS.
CIFAR_MODELS: dict[str, str] = {"resnet18_cifar": "resnet18"}

# Smallest square input (px) whose forward pass works; models not listed accept any size >= 1.
# Measured on the meta device with torchvision 0.29 (see module docstring).
MIN_SIZE: dict[str, int] = {
    "alexnet": 63,
    "squeezenet1_0": 21,
    "squeezenet1_1": 17,
    "googlenet": 15,
    "inception_v3": 75,
    **{m: 29 for m in VARIANTS["densenet"]},
    **{m: 32 for m in VARIANTS["convnext"]},
    **{m: 32 for m in VARIANTS["vgg"]},
    **{m: 4 for m in VARIANTS["swin"]},
}

VIT_PATCH = {"vit_b_16": 16, "vit_b_32": 32, "vit_l_16": 16, "vit_l_32": 32}


def min_size(model: str) -> int:
    return max(MIN_SIZE.get(model, 1), VIT_PATCH.get(model, 1))


def size_problem(model: str, input_size: int) -> str | None:
    """Why ``model`` cannot take ``input_size`` x ``input_size`` images (None when it can)."""
    if model not in MODELS and model not in CIFAR_MODELS:
        known = ", ".join((*MODELS, *CIFAR_MODELS))
        return f"unknown torchvision model {model!r} (known: {known})"
    if input_size < min_size(model):
        return f"image size {input_size} px is below the minimum {min_size(model)} px of {model}"
    patch = VIT_PATCH.get(model)
    if patch and input_size % patch:
        return f"image size {input_size} px is not divisible by the {model} patch size {patch}"
    return None


def config_for(model: str, batch: int, input_size: int, dtype: str = "float32", optimizer: str = "sgd") -> ModelConfig:
    return ModelConfig(
        kind="vision",
        family=family_of(model),
        model=model,
        batch=batch,
        input_size=input_size,
        dtype=dtype,
        optimizer=optimizer,
        num_classes=classes_for(model, batch, input_size, dtype),
    )


def grid(dtype: str = "float32") -> list[ModelConfig]:
    """Every valid (model, batch, image size) point of the ETS HPO grid, in a fixed order."""
    return [
        config_for(model, batch, size, dtype)
        for model in MODELS
        for size in IMAGE_SIZES
        if size_problem(model, size) is None
        for batch in BATCHES
    ]


_REGNET_LOCK = threading.Lock()


@contextlib.contextmanager
def _regnet_block_params_on_cpu():
    """torchvision's RegNet computes its stage widths with tensors + ``.tolist()``, which fails
    under a meta default device; run just that computation on the CPU (scoped, restored after)."""
    from torchvision.models import regnet

    original = regnet.BlockParams.__dict__["from_init_params"]
    func = original.__func__

    def on_cpu(cls, *args, **kwargs):
        with torch.device("cpu"):
            return func(cls, *args, **kwargs)

    with _REGNET_LOCK:
        regnet.BlockParams.from_init_params = classmethod(on_cpu)
        try:
            yield
        finally:
            regnet.BlockParams.from_init_params = original


def check(config: ModelConfig) -> None:
    problem = size_problem(config.model, config.input_size)
    if problem is None and config.family != family_of(config.model):
        problem = f"family {config.family!r} does not match family_of({config.model!r}) = {family_of(config.model)!r}"
    if problem is not None:
        raise ModelBuildError(config, problem)


def _cifar_model(config: ModelConfig) -> torch.nn.Module:
    """torchvision ``CIFAR_MODELS[model]`` with a 3x3 stride-1, 64-channel stem conv and no max-pool."""
    model = torchvision.models.get_model(CIFAR_MODELS[config.model], weights=None, num_classes=config.num_classes)
    model.conv1 = torch.nn.Conv2d(3, 64, kernel_size=3, stride=1, padding=1, bias=False)
    torch.nn.init.kaiming_normal_(model.conv1.weight, mode="fan_out", nonlinearity="relu")  # as torchvision
    model.maxpool = torch.nn.Identity()
    return model


def build_model(config: ModelConfig) -> torch.nn.Module:
    """The torchvision model of ``config`` (random init) on the current default device."""
    check(config)
    if config.model in CIFAR_MODELS:
        return _cifar_model(config)
    kwargs: dict[str, object] = {"weights": None, "num_classes": config.num_classes}
    if config.model in VIT_PATCH:
        kwargs["image_size"] = config.input_size
    if config.model in ("googlenet", "inception_v3"):
        kwargs.update(aux_logits=False, init_weights=False)
    if config.family == "regnet":
        with _regnet_block_params_on_cpu():
            return torchvision.models.get_model(config.model, **kwargs)
    return torchvision.models.get_model(config.model, **kwargs)


def inputs(config: ModelConfig):
    return image_inputs(config)

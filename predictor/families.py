"""Model family of a model name: the unit of the family-disjoint train/test split.

Why: ETS evaluates on families never seen in training (predictors.md §1.1 lists the 18 torchvision
families), so every trace must carry its family, whatever tool produced it.
"""

from __future__ import annotations

import re

# Ordered: the first pattern that matches the start of the name wins (efficientnet_v2 before
# efficientnet, wide_resnet before resnet, ...).
_FAMILIES: tuple[tuple[str, str], ...] = (
    ("efficientnet_v2", r"efficientnet_v2"),
    ("efficientnet", r"efficientnet"),
    ("wide_resnet", r"wide_resnet"),
    ("resnet", r"resnet|resnext"),
    ("mobilenet_v2", r"mobilenet_v2"),
    ("mobilenet_v3", r"mobilenet_v3"),
    ("shufflenet", r"shufflenet"),
    ("squeezenet", r"squeezenet"),
    ("inception_v3", r"inception"),
    ("googlenet", r"googlenet"),
    ("densenet", r"densenet"),
    ("convnext", r"convnext"),
    ("regnet", r"regnet"),
    ("mnasnet", r"mnasnet"),
    ("alexnet", r"alexnet"),
    ("swin", r"swin"),
    ("vgg", r"vgg"),
    ("vit", r"vit"),
    ("randwire", r"randwire"),
    # the LLM zoo's models (predictor/zoo/llm.py) by their zoo and NeuSight names, anchored, so
    # that other "bert..." / "gpt..." names (bert_base_squad, imported traces) stay "transformer"
    ("gpt2", r"gpt2_(medium|med|large|xl)$"),
    ("gpt3", r"gpt3_(xl|2\.7b|27)$"),
    ("opt", r"opt_(1\.3b|13)$"),
    ("bert", r"bert_large$"),
    ("transformer", r"transformer|bert|gpt"),
    ("lstm", r"lstm"),
)

TORCHVISION_FAMILIES = tuple(name for name, _ in _FAMILIES[:18])


def family_of(model: str) -> str:
    """Family of a model name (e.g. "wide_resnet50_2" -> "wide_resnet"); unknown names are their own family."""
    name = model.strip().lower()
    for family, pattern in _FAMILIES:
        if re.match(pattern, name):
            return family
    return name


JOB_CLASSES = ("image", "language", "speech")
LANGUAGE_FAMILIES = ("transformer", "gpt2", "gpt3", "opt", "bert")


def job_class(family: str, model: str) -> str:
    """The job class a cluster trace's job may be bound to: speech (LSTM speech models),
    language (transformers and the LLM families, LSTM language models) or image (everything
    else: the vision families and RandWire)."""
    if family == "lstm":
        return "speech" if "speech" in model else "language"
    return "language" if family in LANGUAGE_FAMILIES else "image"

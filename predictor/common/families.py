"""Model families: the family of a model name, the group of a family, and the reserved families.

Why: ETS evaluates on families never seen in training (predictors.md §1.1 lists the 18 torchvision
families), so every trace must carry its family, whatever tool produced it. Two more things make
that claim testable and honest:

* **groups** (CNN, vision transformer, hybrid, encoder LM, decoder LM, encoder-decoder, speech,
  RNN): a leave-one-group-out split holds out a whole kind of architecture, and prediction
  intervals are calibrated per group (Mondrian conformal, :mod:`predictor.intervals`), since
  families of one group err alike and groups differ by an order of magnitude;
* **reserved families**: every family new to the zoo since the 25 of :data:`FIRST_FAMILIES`
  whose name's SHA-256 hex digest starts with ``0`` or ``1`` (about one in eight) is never
  profiled, trained, tuned or evaluated on, so that a later, outside check has families no
  choice of ours has touched. Only an explicit ``ets collect --family NAME`` captures one.

Plain data, no torch: the simulator reads groups with stored interval calibrations.
"""

from __future__ import annotations

import difflib
import hashlib
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
    # the LLM zoo's models (predictor/emulator/zoo/llm.py) by their zoo and NeuSight names, anchored, so
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


GROUPS = ("CNN", "vision transformer", "hybrid", "encoder LM", "decoder LM", "encoder-decoder", "speech", "RNN")

# The zoo's families before timm and Hugging Face architectures came in (torchvision, RandWire,
# the plain-torch sequence models and the NeuSight LLMs). The reservation rule spares them: they
# had been profiled and trained on long before it existed.
FIRST_FAMILIES: dict[str, str] = {
    **{f: "CNN" for f in ("alexnet", "convnext", "densenet", "efficientnet", "efficientnet_v2", "googlenet",
                          "inception_v3", "mnasnet", "mobilenet_v2", "mobilenet_v3", "randwire", "regnet", "resnet",
                          "shufflenet", "squeezenet", "vgg", "wide_resnet")},
    "vit": "vision transformer", "swin": "vision transformer",
    "transformer": "encoder-decoder",  # nn.Transformer encoders and encoder-decoders (predictor/emulator/zoo/nlp.py)
    "bert": "encoder LM", "gpt2": "decoder LM", "gpt3": "decoder LM", "opt": "decoder LM",
    "lstm": "RNN",  # LSTM language and speech models
}
RESERVED_DIGITS = "01"


def _groups(group: str, *families: str) -> dict[str, str]:
    return {f: group for f in families}


# timm modules (predictor/emulator/zoo/timm_models.py) by group: convolutional, attention throughout, or
# both / another token mixer (pooling, MLP, state space, LSTM).
TIMM_GROUPS: dict[str, str] = {
    **_groups("CNN", "byobnet", "convmixer", "cpubone", "cspnet", "cspnext", "dla", "dpn", "fasternet", "ghostnet",
              "hardcorenas", "hgnet", "hrnet", "inception_next", "inception_resnet_v2", "inception_v4", "lcnetv2",
              "mambaout", "nfnet", "rdnet", "repghost", "repvit", "res2net", "resnest", "resnetv2", "rexnet",
              "selecsls", "senet", "sknet", "starnet", "tresnet", "vovnet", "xception", "xception_aligned"),
    **_groups("vision transformer", "beit", "cait", "crossvit", "davit", "deit", "eva", "focalnet", "gcvit", "hiera",
              "hieradet_sam2", "mvitv2", "nest", "pit", "pvt_v2", "swin_transformer_v2", "swin_transformer_v2_cr",
              "tnt", "twins", "vision_transformer_relpos", "volo", "xcit"),
    **_groups("hybrid", "byoanet", "coat", "convit", "csatv2", "edgenext", "efficientformer", "efficientformer_v2",
              "efficientvim", "efficientvit_mit", "efficientvit_msra", "fastvit", "iformer", "levit", "lowformer",
              "maxxvit", "metaformer", "mlp_mixer", "mobilevit", "nextvit", "sequencer", "shvit", "swiftformer",
              "tiny_vit", "visformer", "vision_transformer_hybrid", "vitamin"),
}
# transformers model types (predictor/emulator/zoo/hf_models.py) by group.
HF_GROUPS: dict[str, str] = {
    **_groups("decoder LM", "llama", "mistral", "qwen2", "qwen3", "gemma", "gemma2", "phi", "phi3", "falcon", "bloom",
              "gpt_neox", "gptj", "gpt_neo", "codegen", "stablelm", "olmo", "olmo2", "starcoder2", "mpt",
              "persimmon", "biogpt", "xglm", "cohere", "granite", "mixtral", "qwen2_moe", "ctrl", "gpt_bigcode",
              "helium", "glm", "nemotron", "exaone4", "smollm3", "arcee", "bitnet"),
    **_groups("RNN", "mamba", "mamba2", "rwkv"),
    **_groups("encoder LM", "roberta", "deberta", "deberta-v2", "albert", "electra", "distilbert", "convbert",
              "mpnet", "funnel", "ernie", "mobilebert", "nystromformer", "fnet", "rembert", "big_bird", "roformer",
              "megatron-bert", "xlm-roberta", "camembert", "data2vec-text", "mra", "ibert", "roberta-prelayernorm",
              "nomic_bert", "layoutlm", "tapas", "xmod", "yoso"),
    **_groups("encoder-decoder", "t5", "bart", "mbart", "pegasus", "marian", "blenderbot", "blenderbot-small",
              "prophetnet", "led", "bigbird_pegasus", "mt5", "umt5", "longt5", "switch_transformers", "plbart",
              "m2m_100", "fsmt", "mvp", "nllb-moe"),
    **_groups("speech", "whisper", "speech_to_text", "wav2vec2", "hubert", "wavlm", "sew", "unispeech",
              "data2vec-audio"),
}


def is_reserved(family: str) -> bool:
    """True for a family new since :data:`FIRST_FAMILIES` whose SHA-256 hex digest starts with 0 or 1."""
    if family in FIRST_FAMILIES:
        return False
    return hashlib.sha256(family.encode()).hexdigest()[0] in RESERVED_DIGITS


def group_of(family: str) -> str:
    """The group of a zoo family; "other" for a family the zoo does not define (an imported trace)."""
    return FIRST_FAMILIES.get(family) or TIMM_GROUPS.get(family) or HF_GROUPS.get(family) or "other"


def check_family_names(names, known) -> None:
    """ValueError naming every name of ``names`` that is not a zoo family (with the closest names)."""
    unknown = [n for n in names if n not in known]
    if unknown:
        hints = {n: difflib.get_close_matches(n, known, n=3) for n in unknown}
        raise ValueError("unknown famil" + ("ies " if len(unknown) > 1 else "y ") + "; ".join(
            f"{n!r}" + (f" (did you mean {', '.join(hints[n])}?)" if hints[n] else "") for n in unknown)
            + "; `ets zoo list` shows every family")

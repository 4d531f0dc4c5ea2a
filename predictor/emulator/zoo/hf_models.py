"""Hugging Face ``transformers`` architectures, built from their config classes: no download.

Why: ETS must be judged on many more families than the zoo's own; ``transformers`` defines
hundreds of architectures, each instantiable with random weights from its config class alone.
Family = ``config.model_type`` (``llama``, ``t5``, ``whisper``, ...); the task head decides the
loss: a causal or masked LM (token cross-entropy), an encoder-decoder (teacher forcing, target
= source length), speech recognition (log-mel frames in, tokens out) or CTC (raw audio in,
per-frame characters out).

Sizes (``extra``):

* **scaled-down presets**, named by their sizes (``preset``: ``L2-H128``, ``L4-H256``...): the
  config's depth, width, heads, feed-forward width and vocabulary set to the preset's, small
  enough that one training iteration takes 10-500 ms on one CPU core;
* **the real size**: ``extra`` empty, the config class's defaults (e.g. Llama's 7B), for the
  emulated GPUs (captured on the meta device only).

Training as the library runs it, less what makes the op sequence change from step to step: no
LayerDrop (a layer skipped at random) and no SpecAugment (masks drawn from tensor values, which the
meta device does not have). Causal LMs get the all-ones attention mask a tokenizer gives
(without one, transformers inspects position values for packed sequences); encoders and
encoder-decoders get none, which transformers treats as the same unpadded batch.

Never a download: configs come from ``AutoConfig.for_model`` (the config class's defaults), models
from ``from_config``; nothing reads a tokenizer or a hub file. ``HF_HUB_OFFLINE`` is set while a
model is built, so a class that would still reach for the hub fails at once with a message
instead of hanging on the network.
"""

from __future__ import annotations

import json
import os
from functools import cache
from pathlib import Path

import torch
from torch import nn

from predictor.common.families import HF_GROUPS
from predictor.emulator.zoo.common import input_factory, randint, randn
from predictor.emulator.zoo.config import ModelBuildError, ModelConfig

KIND = "hf"
PREFIX = "hf_"
# Task of each curated architecture (causal, masked, seq2seq, speech-seq2seq, ctc); its group is
# predictor.common.families.HF_GROUPS. Each was built, trained one iteration on the CPU and captured on
# the meta device by `python -m experiments.zoo_probe` (EXCLUDED lists those that could not be, and why).
_SEQ2SEQ = ("t5", "bart", "mbart", "pegasus", "marian", "blenderbot", "blenderbot-small", "prophetnet", "led",
            "bigbird_pegasus", "mt5", "umt5", "longt5", "switch_transformers", "plbart", "m2m_100", "fsmt", "mvp",
            "nllb-moe")
TASKS_OF: dict[str, str] = {
    **{f: "causal" for f, g in HF_GROUPS.items() if g in ("decoder LM", "RNN")},
    **{f: "masked" for f, g in HF_GROUPS.items() if g == "encoder LM"},
    **{f: "seq2seq" for f in _SEQ2SEQ},
    "whisper": "speech-seq2seq", "speech_to_text": "speech-seq2seq",
    **{f: "ctc" for f in ("wav2vec2", "hubert", "wavlm", "sew", "unispeech", "data2vec-audio")},
}
PROBED = Path(__file__).parent / "probed" / "hf.json"  # written by experiments/zoo_probe.py


def _load() -> tuple[dict[str, dict], dict[str, str]]:
    if not PROBED.exists():  # before the first probe: every candidate
        return {}, {}
    data = json.loads(PROBED.read_text())
    return data["models"], data["excluded"]


# model_type -> its probe record (CPU ms of one L2-H128 step at batch 2); model_type -> why it was
# left out (it failed to build, to run on the meta device or on the CPU)
MODELS, EXCLUDED = _load()

# Scaled-down presets: (layers, hidden, heads, feed-forward, vocabulary).
PRESETS: dict[str, tuple[int, int, int, int, int]] = {
    "L2-H128": (2, 128, 4, 512, 4096),
    "L2-H256": (2, 256, 4, 1024, 8192),
    "L4-H256": (4, 256, 8, 1024, 8192),
    "L4-H384": (4, 384, 6, 1536, 16384),
}
BATCHES = (1, 2, 4, 8)
SEQ_LENS = (32, 64, 128, 256)
SPEECH_FRAMES = (200, 400)  # log-mel frames (whisper: 2 x encoder positions)
AUDIO_SAMPLES = (8000, 16000)  # raw 16 kHz samples (CTC models)
DECODER_TOKENS = 32  # speech-to-text target length
MEL_BINS = 80
FRAMES_FIRST = {"speech_to_text"}  # log-mel features as (batch, frames, bins); whisper: (batch, bins, frames)
CTC_CLASSES = 32  # characters + blank


def version() -> str:
    from importlib.metadata import version as installed

    return installed("transformers")  # without importing it (importing it first would leave the hub online)


def model_name(model_type: str) -> str:
    return PREFIX + model_type


def model_type_of(config: ModelConfig) -> str:
    return config.model[len(PREFIX):]


def config_for(model_type: str, *, batch: int, seq: int, preset: str | None = "L2-H128", dtype: str = "float32",
               optimizer: str = "adam") -> ModelConfig:
    """One training config of ``model_type``: a scaled-down ``preset`` or, with ``preset=None``,
    the config class's real size. ``seq``: tokens, log-mel frames or audio samples by task."""
    task = TASKS_OF.get(model_type)
    if task is None:
        raise ModelBuildError(f"unknown transformers architecture {model_type!r} (known: {', '.join(TASKS_OF)})")
    extra: dict = {}
    if preset is not None:
        if preset not in PRESETS:
            raise ModelBuildError(f"unknown preset {preset!r} (known: {', '.join(PRESETS)})")
        extra = {"preset": preset}
    classes = (CTC_CLASSES if task == "ctc" else PRESETS[preset][4] if preset else _real_vocab(model_type))
    return ModelConfig(kind=KIND, family=model_type, model=model_name(model_type), batch=batch, input_size=seq,
                       dtype=dtype, optimizer=optimizer, num_classes=classes, extra=extra)


def grid(families=None) -> list[ModelConfig]:
    """The CPU-sized configs: every preset x batch x length (by task) of each family."""
    out = []
    for model_type, task in TASKS_OF.items():
        if model_type in EXCLUDED or (families is not None and model_type not in families):
            continue
        lengths = {"speech-seq2seq": SPEECH_FRAMES, "ctc": AUDIO_SAMPLES}.get(task, SEQ_LENS)
        for preset in PRESETS:
            for batch in BATCHES:
                for seq in lengths:
                    out.append(config_for(model_type, batch=batch, seq=seq, preset=preset))
    return out


@cache
def _real_vocab(model_type: str) -> int:
    return int(getattr(_base_config(model_type), "vocab_size", None) or CTC_CLASSES)


def _base_config(model_type: str):
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # never a network hang: a class that wants a file fails now
    import transformers

    transformers.logging.set_verbosity_error()
    try:
        return transformers.AutoConfig.for_model(model_type)
    except Exception as exc:
        raise ModelBuildError(f"transformers {version()} cannot make a {model_type!r} config: "
                              f"{_one_line(exc)}") from None


def _one_line(exc: Exception) -> str:
    """An exception of transformers as one short line (its messages can list every architecture)."""
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text[:300]}{'...' if len(text) > 300 else ''}"


def hf_config(config: ModelConfig):
    """The transformers config of ``config``: the class defaults, resized by its preset."""
    model_type = model_type_of(config)
    task = TASKS_OF[model_type]
    cfg = _base_config(model_type)
    preset = config.get("preset")
    if preset is not None:
        layers, hidden, heads, ff, vocab = PRESETS[str(preset)]
        sizes = {
            "num_hidden_layers": layers, "num_layers": layers, "n_layer": layers, "encoder_layers": layers,
            "decoder_layers": layers, "num_decoder_layers": layers,
            "hidden_size": hidden, "d_model": hidden, "n_embd": hidden, "embedding_size": hidden,
            "num_attention_heads": heads, "n_head": heads, "num_heads": heads, "encoder_attention_heads": heads,
            "decoder_attention_heads": heads, "num_key_value_heads": max(1, heads // 2), "multi_query_group_num": 2,
            "head_dim": hidden // heads, "d_kv": hidden // heads, "kv_channels": hidden // heads,
            "rotary_dim": hidden // heads,
            "intermediate_size": ff, "ffn_dim": ff, "d_ff": ff, "encoder_ffn_dim": ff, "decoder_ffn_dim": ff,
            "n_inner": ff, "ffn_hidden_size": ff, "ffn_size": ff,
            "num_local_experts": 4, "num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": ff // 2,
            "shared_expert_intermediate_size": ff // 2, "expert_capacity": 64,
            "vocab_size": CTC_CLASSES if task == "ctc" else vocab,
            "max_position_embeddings": 1024, "n_positions": 1024, "max_target_positions": 1024,
            "max_source_positions": 1024,
            "num_mel_bins": MEL_BINS, "input_feat_per_channel": MEL_BINS,
            "hidden_dim": hidden, "dim": hidden, "conv_dim": (hidden,) * len(getattr(cfg, "conv_dim", ()) or ()),
            "num_conv_pos_embeddings": 16, "pad_token_id": 0,
        }
        for key, value in sizes.items():
            if hasattr(cfg, key) and getattr(cfg, key) is not None:
                try:
                    setattr(cfg, key, value)
                except Exception:  # a read-only or derived attribute: the class keeps its own
                    pass
    if model_type == "whisper":  # its encoder takes exactly 2 x max_source_positions frames
        cfg.max_source_positions = config.input_size // 2
    if hasattr(cfg, "apply_spec_augment"):
        cfg.apply_spec_augment = False  # SpecAugment draws its masks with numpy from tensor values
    for key in ("layerdrop", "encoder_layerdrop", "decoder_layerdrop"):
        if getattr(cfg, key, None):
            setattr(cfg, key, 0.0)  # a layer skipped at random changes the op sequence from step to step
    if hasattr(cfg, "use_cache"):
        cfg.use_cache = False  # training: no key/value cache
    return cfg


class _Logits(nn.Module):
    """A transformers model called with its task's inputs, returning the logits alone."""

    def __init__(self, model: nn.Module, task: str):
        super().__init__()
        self.model = model
        self.task = task

    def forward(self, *inputs: torch.Tensor) -> torch.Tensor:
        if self.task == "seq2seq":
            out = self.model(input_ids=inputs[0], decoder_input_ids=inputs[1])
        elif self.task == "speech-seq2seq":
            out = self.model(input_features=inputs[0], decoder_input_ids=inputs[1])
        elif self.task == "ctc":
            out = self.model(input_values=inputs[0])
        elif self.task == "causal":
            out = self.model(input_ids=inputs[0], attention_mask=inputs[1])
        else:
            out = self.model(input_ids=inputs[0])
        return out.logits


_AUTO = {"causal": "AutoModelForCausalLM", "masked": "AutoModelForMaskedLM", "seq2seq": "AutoModelForSeq2SeqLM",
         "speech-seq2seq": "AutoModelForSpeechSeq2Seq", "ctc": "AutoModelForCTC"}


def check(config: ModelConfig) -> None:
    model_type = model_type_of(config)
    if not config.model.startswith(PREFIX) or model_type not in TASKS_OF:
        raise ModelBuildError(config, f"unknown transformers architecture {config.model!r}")
    if model_type in EXCLUDED:
        raise ModelBuildError(config, EXCLUDED[model_type])
    preset = config.get("preset")
    if preset is not None and preset not in PRESETS:
        raise ModelBuildError(config, f"unknown preset {preset!r} (known: {', '.join(PRESETS)})")
    if model_type == "whisper" and config.input_size % 2:
        raise ModelBuildError(config, "whisper takes an even number of log-mel frames (2 per encoder position)")


def build_model(config: ModelConfig) -> nn.Module:
    import transformers

    task = TASKS_OF[model_type_of(config)]
    auto = getattr(transformers, _AUTO[task])
    cfg = hf_config(config)
    try:
        try:
            model = auto.from_config(cfg, attn_implementation="eager")
        except TypeError:  # an architecture without the attention switch
            model = auto.from_config(cfg)
    except Exception as exc:  # a class that needs more than its config (sub-configs, files)
        raise ModelBuildError(config, f"transformers {version()}: {_one_line(exc)}") from None
    return _Logits(model, task)


def ctc_frames(config: ModelConfig) -> int:
    """Output frames of a CTC model for ``input_size`` audio samples (its conv feature encoder)."""
    cfg = hf_config(config)
    length = config.input_size
    for kernel, stride in zip(cfg.conv_kernel, cfg.conv_stride):
        length = (length - kernel) // stride + 1
    return length


def inputs(config: ModelConfig):
    task = TASKS_OF[model_type_of(config)]
    b, s, vocab = config.batch, config.input_size, config.num_classes
    dtype = config.torch_dtype
    frames = ctc_frames(config) if task == "ctc" else 0
    if task == "ctc" and frames < 1:
        raise ModelBuildError(config, f"{s} audio samples are too few for the feature encoder")

    def make(device, generator):
        if task == "speech-seq2seq":
            layout = (b, s, MEL_BINS) if model_type_of(config) in FRAMES_FIRST else (b, MEL_BINS, s)
            features = randn(layout, dtype, device, generator)
            tokens = randint(vocab, (b, DECODER_TOKENS), device, generator)
            return (features, tokens), randint(vocab, (b, DECODER_TOKENS), device, generator)
        if task == "ctc":
            audio = randn((b, s), dtype, device, generator)
            return (audio,), randint(vocab, (b, frames), device, generator)
        tokens = randint(vocab, (b, s), device, generator)
        if task == "seq2seq":
            return (tokens, randint(vocab, (b, s), device, generator)), randint(vocab, (b, s), device, generator)
        if task == "causal":  # the mask a tokenizer gives (no padding); without it transformers looks for
            # packed sequences, which reads tensor values (no meta capture)
            return (tokens, torch.ones((b, s), dtype=torch.long, device=device)), randint(vocab, (b, s), device,
                                                                                         generator)
        return (tokens,), randint(vocab, (b, s), device, generator)

    return input_factory(config, make)

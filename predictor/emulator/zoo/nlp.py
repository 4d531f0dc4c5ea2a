"""Sequence models: BERT-like encoders, nn.Transformer encoder-decoders, LSTM LMs and speech LSTMs.

Why: the predictor must also see op sequences that are not convolutional (attention, layer
norm, embedding, fused RNN kernels), so held-out families exist beyond the vision zoo.

Models (``input_size`` = sequence length, ``num_classes`` = vocabulary for token models):

* ``transformer_encoder`` (kind ``nlp``): token + learned position embedding, LayerNorm,
  ``nn.TransformerEncoder`` (post-norm, GELU, batch_first), masked-LM head (dense, GELU,
  LayerNorm, linear to the vocabulary). Sizes from the BERT miniatures table (Turc et al. 2019,
  "Well-Read Students Learn Better", and BERT-base): tiny L2/H128, mini L4/H256, small L4/H512,
  medium L8/H512, base L12/H768; heads = H/64, feed-forward = 4H; vocabulary 30522.
* ``transformer_seq2seq`` (kind ``nlp``): shared token embedding + learned positions for source
  and target, ``nn.Transformer`` with a causal target mask, linear to the vocabulary. Sizes: tiny
  (2+2 layers, d 256, 4 heads, ff 1024), base and big (6+6, d 512/1024, 8/16 heads, ff
  2048/4096; Vaswani et al. 2017); vocabulary 32000. Source and target have the same length.
* ``lstm_lm`` (kind ``nlp``): embedding -> ``nn.LSTM`` -> linear to the vocabulary; sizes small
  (2x200), medium (2x650), large (2x1500) from Zaremba et al. 2014; vocabulary 10000 (PTB).
* ``lstm_speech`` (kind ``speech``): 80-dim filterbank frames -> ``nn.LSTM`` (bidirectional) ->
  linear to per-frame classes (29: characters + blank); sizes small (3x320), large (5x512).

All losses are token/frame-level cross-entropy over the flattened (batch * length) outputs.

Output width different from the vocabulary: ``config_for(..., vocab=V, num_classes=C)`` with
``C != V`` stores ``"vocab": V`` in ``extra``; token embeddings (and token inputs) then use ``V``
and the per-token outputs (and targets) ``C``. For ``transformer_encoder`` the head is then a
single linear layer per token instead of the masked-LM head (BERT's question-answering span head:
start/end logits, ``C = 2``). Without the ``vocab`` key the vocabulary is ``num_classes``, as before.
"""

from __future__ import annotations

import torch
from torch import nn

from predictor.emulator.zoo.common import input_factory, randint, randn
from predictor.emulator.zoo.config import ModelBuildError, ModelConfig

BATCHES = (2, 4, 8, 16, 32, 64, 128)
SEQ_LENS = (32, 64, 128, 256, 512)
SPEECH_FRAMES = (100, 200, 400, 800, 1600)
SPEECH_FEATURES = 80

SIZES: dict[str, dict[str, dict[str, object]]] = {
    "transformer_encoder": {
        "tiny": {"layers": 2, "d_model": 128, "heads": 2, "ff": 512},
        "mini": {"layers": 4, "d_model": 256, "heads": 4, "ff": 1024},
        "small": {"layers": 4, "d_model": 512, "heads": 8, "ff": 2048},
        "medium": {"layers": 8, "d_model": 512, "heads": 8, "ff": 2048},
        "base": {"layers": 12, "d_model": 768, "heads": 12, "ff": 3072},
    },
    "transformer_seq2seq": {
        "tiny": {"layers": 2, "d_model": 256, "heads": 4, "ff": 1024},
        "base": {"layers": 6, "d_model": 512, "heads": 8, "ff": 2048},
        "big": {"layers": 6, "d_model": 1024, "heads": 16, "ff": 4096},
    },
    "lstm_lm": {
        "small": {"layers": 2, "hidden": 200},
        "medium": {"layers": 2, "hidden": 650},
        "large": {"layers": 2, "hidden": 1500},
    },
    "lstm_speech": {
        "small": {"layers": 3, "hidden": 320, "bidirectional": True},
        "large": {"layers": 5, "hidden": 512, "bidirectional": True},
    },
}
VOCAB = {"transformer_encoder": 30522, "transformer_seq2seq": 32000, "lstm_lm": 10000, "lstm_speech": 29}
KIND = {"transformer_encoder": "nlp", "transformer_seq2seq": "nlp", "lstm_lm": "nlp", "lstm_speech": "speech"}
FAMILY = {"transformer_encoder": "transformer", "transformer_seq2seq": "transformer", "lstm_lm": "lstm",
          "lstm_speech": "lstm"}
MODELS = tuple(SIZES)
MAX_POSITIONS = 4096


def config_for(model: str, size: str, batch: int, seq_len: int, dtype: str = "float32", optimizer: str = "sgd",
               *, vocab: int | None = None, num_classes: int | None = None) -> ModelConfig:
    """``vocab``: token vocabulary (default ``VOCAB[model]``); ``num_classes``: per-token output width
    (default: the vocabulary). Only when the two differ does ``extra`` get a ``"vocab"`` key."""
    vocab = VOCAB[model] if vocab is None else vocab
    classes = vocab if num_classes is None else num_classes
    extra = {"size": size, **SIZES[model][size]}
    if classes != vocab:
        extra["vocab"] = vocab
    return ModelConfig(
        kind=KIND[model],
        family=FAMILY[model],
        model=model,
        batch=batch,
        input_size=seq_len,
        dtype=dtype,
        optimizer=optimizer,
        num_classes=classes,
        extra=tuple(sorted(extra.items())),
    )


def grid(dtype: str = "float32") -> list[ModelConfig]:
    """Every (model, size, batch, length) point, in a fixed order."""
    return [
        config_for(model, size, batch, length, dtype)
        for model in MODELS
        for size in SIZES[model]
        for length in (SPEECH_FRAMES if model == "lstm_speech" else SEQ_LENS)
        for batch in BATCHES
    ]


class EncoderLM(nn.Module):
    """``classes`` None or == ``vocab``: masked-LM head; otherwise one linear layer per token."""

    def __init__(self, vocab: int, layers: int, d_model: int, heads: int, ff: int, dropout: float = 0.1,
                 classes: int | None = None):
        super().__init__()
        self.tokens = nn.Embedding(vocab, d_model)
        self.positions = nn.Embedding(MAX_POSITIONS, d_model)
        self.norm = nn.LayerNorm(d_model)
        self.dropout = nn.Dropout(dropout)
        layer = nn.TransformerEncoderLayer(d_model, heads, ff, dropout, activation="gelu", batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        if classes is None or classes == vocab:
            self.head = nn.Sequential(nn.Linear(d_model, d_model), nn.GELU(), nn.LayerNorm(d_model),
                                      nn.Linear(d_model, vocab))
        else:
            self.head = nn.Linear(d_model, classes)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(tokens.shape[1], device=tokens.device)
        x = self.dropout(self.norm(self.tokens(tokens) + self.positions(positions)))
        return self.head(self.encoder(x))


class Seq2SeqLM(nn.Module):
    def __init__(self, vocab: int, layers: int, d_model: int, heads: int, ff: int, dropout: float = 0.1,
                 classes: int | None = None):
        super().__init__()
        self.tokens = nn.Embedding(vocab, d_model)
        self.positions = nn.Embedding(MAX_POSITIONS, d_model)
        self.transformer = nn.Transformer(d_model, heads, layers, layers, ff, dropout, batch_first=True)
        self.head = nn.Linear(d_model, vocab if classes is None else classes)

    def forward(self, src: torch.Tensor, tgt: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(max(src.shape[1], tgt.shape[1]), device=src.device)
        s = self.tokens(src) + self.positions(positions[: src.shape[1]])
        t = self.tokens(tgt) + self.positions(positions[: tgt.shape[1]])
        mask = nn.Transformer.generate_square_subsequent_mask(tgt.shape[1], device=tgt.device, dtype=t.dtype)
        return self.head(self.transformer(s, t, tgt_mask=mask, tgt_is_causal=True))


class LSTMModel(nn.Module):
    """Embedding (token input) or raw features -> nn.LSTM -> linear, per time step."""

    def __init__(self, classes: int, layers: int, hidden: int, vocab: int | None = None,
                 features: int | None = None, bidirectional: bool = False, dropout: float = 0.0):
        super().__init__()
        self.embedding = nn.Embedding(vocab, hidden) if vocab is not None else None
        self.lstm = nn.LSTM(hidden if vocab is not None else features, hidden, layers,
                            batch_first=True, bidirectional=bidirectional, dropout=dropout)
        self.head = nn.Linear(hidden * (2 if bidirectional else 1), classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.embedding is not None:
            x = self.embedding(x)
        out, _ = self.lstm(x)
        return self.head(out)


def _size_params(config: ModelConfig) -> dict:
    if config.model not in SIZES:
        raise ModelBuildError(config, f"unknown sequence model {config.model!r} (known: {', '.join(MODELS)})")
    if config.family != FAMILY[config.model] or config.kind != KIND[config.model]:
        raise ModelBuildError(
            config, f"{config.model} is kind {KIND[config.model]!r}, family {FAMILY[config.model]!r}"
        )
    e = config.extra_dict
    needed = ("layers", "d_model", "heads", "ff") if config.family == "transformer" else ("layers", "hidden")
    missing = [k for k in needed if k not in e]
    if missing:
        raise ModelBuildError(config, f"extra lacks {missing}")
    vocab = e.get("vocab")
    if vocab is not None and (isinstance(vocab, bool) or not isinstance(vocab, int) or vocab < 1):
        raise ModelBuildError(config, f"extra vocab must be a positive int, got {vocab!r}")
    if config.family == "transformer":
        if e["d_model"] % e["heads"]:
            raise ModelBuildError(config, f"d_model {e['d_model']} is not divisible by heads {e['heads']}")
        if config.input_size > MAX_POSITIONS:
            raise ModelBuildError(config, f"sequence length {config.input_size} exceeds {MAX_POSITIONS} positions")
    return e


def check(config: ModelConfig) -> None:
    _size_params(config)


def _vocab(config: ModelConfig) -> int:
    """Token vocabulary: ``extra["vocab"]`` when set, else ``num_classes``."""
    return int(config.get("vocab", config.num_classes))


def build_model(config: ModelConfig) -> nn.Module:
    e = _size_params(config)
    vocab, classes = _vocab(config), config.num_classes
    if config.model == "transformer_encoder":
        return EncoderLM(vocab, e["layers"], e["d_model"], e["heads"], e["ff"], classes=classes)
    if config.model == "transformer_seq2seq":
        return Seq2SeqLM(vocab, e["layers"], e["d_model"], e["heads"], e["ff"], classes=classes)
    if config.model == "lstm_lm":
        return LSTMModel(classes, e["layers"], e["hidden"], vocab=vocab)
    return LSTMModel(config.num_classes, e["layers"], e["hidden"], features=int(e.get("features", SPEECH_FEATURES)),
                     bidirectional=bool(e.get("bidirectional", False)))


def inputs(config: ModelConfig):
    b, s, v, t = config.batch, config.input_size, _vocab(config), config.num_classes

    def make(device, generator):
        if config.model == "lstm_speech":
            features = int(config.get("features", SPEECH_FEATURES))
            model_inputs = (randn((b, s, features), config.torch_dtype, device, generator),)
        elif config.model == "transformer_seq2seq":
            model_inputs = (randint(v, (b, s), device, generator), randint(v, (b, s), device, generator))
        else:
            model_inputs = (randint(v, (b, s), device, generator),)
        return model_inputs, randint(t, (b, s), device, generator)

    return input_factory(config, make)

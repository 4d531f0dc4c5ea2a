"""Transformer LLM training workloads (GPT-2, GPT-3, OPT, BERT-large) in plain ``torch.nn``.

Why: NeuSight (ASPLOS'25) measured real training iterations of these models on A100 and V100
(``calibration/neusight/labels``, per iteration and per torch.fx node); the zoo must rebuild
exactly those networks, so that an emulated or predicted iteration can be compared with the
measurement op for op. No HuggingFace: the modules below follow the HF originals' structure
(the NeuSight label CSVs list their fx nodes), written with ``nn.Linear`` / ``torch.matmul`` /
``torch.bmm`` / ``torch.softmax``, so that the meta-device capture records every GEMM of the
attention as a matmul-class op with FLOPs (``F.scaled_dot_product_attention`` would be one fused
op whose name the cost model does not know as a GEMM, and would differ from the measured runs,
which used explicit matmul + softmax).

Kind ``llm`` (its own entry in ``config.KINDS``): the models are not ``nlp.py``'s size-parametrised
encoders — each model name fixes its architecture, so ``extra`` is empty for the real models and
config ids stay short. Families (the unit of family-disjoint splits, see
``predictor.common.families``): ``gpt2``, ``gpt3`` (GPT-2's architecture at other sizes, so a model
trained on GPT-2 can be tested on an unseen GPT-3), ``opt``, ``bert``. Optimizer Adam by default
(LLMs are trained with Adam). Where NeuSight's config differs from the paper's (its GPT-3 XL), we
follow the measured config.

Architectures, loss and config ids: docs/ets.md, 'The llm zoo's architectures'.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn

from predictor.common.families import family_of
from predictor.emulator.zoo.common import input_factory, randint
from predictor.emulator.zoo.config import ZOO_DTYPES, ModelBuildError, ModelConfig

KIND = "llm"


@dataclass(frozen=True)
class Spec:
    arch: str  # "gpt" | "opt" | "bert"
    layers: int
    d_model: int
    heads: int
    ff: int
    vocab: int
    positions: int  # maximum sequence length (learned position embeddings)
    origin: str  # NeuSight DLmodel_configs file the sizes come from


# Sizes from NeuSight's DLmodel_configs/<origin> (sitar-lab/NeuSight@6945927, MIT; read at
# ../shared/calibration/neusight/DLmodel_configs): n_layer / num_hidden_layers, n_embd /
# hidden_size, n_head / num_attention_heads, vocab_size, n_positions / max_position_embeddings;
# ff = intermediate_size (BERT), ffn_dim (OPT), 4 * n_embd for GPT (no n_inner: HF's default).
SPECS: dict[str, Spec] = {
    "gpt2_medium": Spec("gpt", 24, 1024, 16, 4 * 1024, 50257, 1024, "gpt2_med.json"),
    "gpt2_large": Spec("gpt", 36, 1280, 20, 4 * 1280, 50257, 1024, "gpt2_large.json"),
    "gpt2_xl": Spec("gpt", 48, 1600, 25, 4 * 1600, 50257, 1024, "gpt2_xl.json"),
    "gpt3_xl": Spec("gpt", 24, 3072, 24, 4 * 3072, 50257, 2048, "gpt3_xl.json"),
    "gpt3_2.7b": Spec("gpt", 32, 2560, 32, 4 * 2560, 50257, 2048, "gpt3_27.json"),
    "opt_1.3b": Spec("opt", 24, 2048, 32, 8192, 50272, 2048, "opt_13.json"),
    "bert_large": Spec("bert", 24, 1024, 16, 4096, 30522, 512, "bert_large.json"),
}
MODELS: tuple[str, ...] = tuple(SPECS)
FAMILIES: tuple[str, ...] = tuple(dict.fromkeys(family_of(m) for m in MODELS))  # gpt2, gpt3, opt, bert
# NeuSight's file / label names -> zoo names (the others are spelled the same)
ALIASES = {"gpt2_med": "gpt2_medium", "gpt3_27": "gpt3_2.7b", "opt_13": "opt_1.3b"}
NEUSIGHT_NAMES: dict[str, str] = {
    **{m: m for m in ("gpt2_large", "gpt2_xl", "gpt3_xl", "bert_large")}, **ALIASES}
OPT_POSITION_OFFSET = 2  # OPTLearnedPositionalEmbedding: position ids are shifted by 2

# NeuSight's measured (sequence, batches) per model (labels/<GPU>/<model>-train-<seq>-<batch>)
LABEL_POINTS: dict[str, tuple[int, tuple[int, ...]]] = {
    "bert_large": (512, (2, 8)), "gpt2_large": (1024, (1, 4)), "gpt3_xl": (2048, (1,)),
    "gpt3_2.7b": (2048, (1,)), "opt_1.3b": (2048, (1, 2)),
}
SEQ_LENS = (128, 256, 512, 1024, 2048)
BATCHES = (1, 2, 4, 8)
OVERRIDES = ("layers", "d_model", "heads", "ff", "positions")
DROPOUT = {"gpt": 0.1, "opt": 0.1, "bert": 0.1}  # embd/resid/attn_pdrop; OPT dropout; BERT hidden
ATTN_DROPOUT = {"gpt": 0.1, "opt": 0.0, "bert": 0.1}


def canonical_model(name: str) -> str:
    """The zoo name of an LLM given by its zoo or NeuSight name (``gpt3_27`` -> ``gpt3_2.7b``)."""
    key = name.strip().lower()
    key = ALIASES.get(key, key)
    if key not in SPECS:
        raise ModelBuildError(f"unknown LLM {name!r} (known: {', '.join(MODELS)}; "
                              f"NeuSight names: {', '.join(NEUSIGHT_NAMES)})")
    return key


def config_for(model: str, batch: int, seq_len: int, dtype: str = "float32", optimizer: str = "adam",
               **overrides: int) -> ModelConfig:
    """The config of ``model`` (zoo or NeuSight name). ``overrides``: ``layers``, ``d_model``,
    ``heads``, ``ff``, ``positions`` (kept in ``extra``) and ``vocab`` (= ``num_classes``) — for
    tiny test variants; the real models take none."""
    model = canonical_model(model)
    spec = SPECS[model]
    vocab = int(overrides.pop("vocab", spec.vocab))
    unknown = sorted(set(overrides) - set(OVERRIDES))
    if unknown:
        raise ModelBuildError(f"{model}: unknown size overrides {unknown} (allowed: {', '.join(OVERRIDES)}, vocab)")
    return ModelConfig(kind=KIND, family=family_of(model), model=model, batch=batch, input_size=seq_len,
                       dtype=dtype, optimizer=optimizer, num_classes=vocab, extra=tuple(sorted(overrides.items())))


def grid() -> list[ModelConfig]:
    """NeuSight's measured points plus, per model, seq x batch x dtype around them (Adam)."""
    configs: list[ModelConfig] = []
    for model, spec in SPECS.items():
        points = {(s, b) for s in SEQ_LENS if s <= spec.positions for b in BATCHES}
        if model in LABEL_POINTS:
            seq, batches = LABEL_POINTS[model]
            points |= {(seq, b) for b in batches}
        configs += [config_for(model, b, s, dtype) for dtype in ZOO_DTYPES for s, b in sorted(points)]
    return configs


def sizes(config: ModelConfig) -> Spec:
    """The spec of ``config`` with its overrides applied; ModelBuildError when it cannot be built."""
    if config.model not in SPECS:
        raise ModelBuildError(config, f"unknown LLM {config.model!r} (known: {', '.join(MODELS)})")
    spec = SPECS[config.model]
    if config.kind != KIND or config.family != family_of(config.model):
        raise ModelBuildError(config, f"{config.model} is kind {KIND!r}, family {family_of(config.model)!r}")
    extra = config.extra_dict
    unknown = sorted(set(extra) - set(OVERRIDES))
    if unknown:
        raise ModelBuildError(config, f"unknown extra keys {unknown} (allowed: {', '.join(OVERRIDES)})")
    for key, value in extra.items():
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ModelBuildError(config, f"extra {key} must be a positive int, got {value!r}")
    fields = {k: extra.get(k, getattr(spec, k)) for k in OVERRIDES}
    spec = Spec(spec.arch, fields["layers"], fields["d_model"], fields["heads"], fields["ff"], config.num_classes,
                fields["positions"], spec.origin)
    if spec.d_model % spec.heads:
        raise ModelBuildError(config, f"d_model {spec.d_model} is not divisible by heads {spec.heads}")
    if config.input_size > spec.positions:
        raise ModelBuildError(config, f"sequence length {config.input_size} exceeds {config.model}'s "
                              f"{spec.positions} positions")
    return spec


def check(config: ModelConfig) -> None:
    sizes(config)


def build_model(config: ModelConfig) -> nn.Module:
    spec = sizes(config)
    return {"gpt": GPTLM, "opt": OPTLM, "bert": BertMLM}[spec.arch](spec)


def inputs(config: ModelConfig):
    """Token ids (batch, seq) and per-token targets over the vocabulary."""
    b, s, v = config.batch, config.input_size, config.num_classes

    def make(device, generator):
        return (randint(v, (b, s), device, generator),), randint(v, (b, s), device, generator)

    return input_factory(config, make)


# --- modules -------------------------------------------------------------------------------------

_MASK_VALUE = -65504.0  # float16's lowest finite value: representable in every dtype of the grid


def _heads(x: torch.Tensor, heads: int) -> torch.Tensor:
    """(B, S, D) -> (B, H, S, D/H)."""
    b, s, d = x.shape
    return x.view(b, s, heads, d // heads).transpose(1, 2)


def _merge(x: torch.Tensor) -> torch.Tensor:
    """(B, H, S, Dh) -> (B, S, H*Dh)."""
    b, h, s, dh = x.shape
    return x.transpose(1, 2).reshape(b, s, h * dh)


class GPTAttention(nn.Module):
    def __init__(self, spec: Spec, dropout: float, attn_dropout: float):
        super().__init__()
        self.heads = spec.heads
        self.c_attn = nn.Linear(spec.d_model, 3 * spec.d_model)
        self.c_proj = nn.Linear(spec.d_model, spec.d_model)
        self.attn_dropout = nn.Dropout(attn_dropout)
        self.resid_dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor, future: torch.Tensor) -> torch.Tensor:
        q, k, v = (_heads(t, self.heads) for t in self.c_attn(x).split(x.shape[-1], dim=2))
        scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(q.shape[-1])
        scores = scores.masked_fill(future, _MASK_VALUE)
        probs = self.attn_dropout(torch.softmax(scores, dim=-1))
        return self.resid_dropout(self.c_proj(_merge(torch.matmul(probs, v))))


class GPTBlock(nn.Module):
    def __init__(self, spec: Spec, dropout: float, attn_dropout: float):
        super().__init__()
        self.ln_1 = nn.LayerNorm(spec.d_model)
        self.attn = GPTAttention(spec, dropout, attn_dropout)
        self.ln_2 = nn.LayerNorm(spec.d_model)
        self.mlp = nn.Sequential(nn.Linear(spec.d_model, spec.ff), nn.GELU(approximate="tanh"),
                                 nn.Linear(spec.ff, spec.d_model), nn.Dropout(dropout))

    def forward(self, x: torch.Tensor, future: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x), future)
        return x + self.mlp(self.ln_2(x))


class GPTLM(nn.Module):
    """GPT-2 / GPT-3 causal LM; ``lm_head`` shares ``wte``'s weight."""

    def __init__(self, spec: Spec):
        super().__init__()
        p, pa = DROPOUT["gpt"], ATTN_DROPOUT["gpt"]
        self.wte = nn.Embedding(spec.vocab, spec.d_model)
        self.wpe = nn.Embedding(spec.positions, spec.d_model)
        self.drop = nn.Dropout(p)
        self.h = nn.ModuleList(GPTBlock(spec, p, pa) for _ in range(spec.layers))
        self.ln_f = nn.LayerNorm(spec.d_model)
        self.lm_head = nn.Linear(spec.d_model, spec.vocab, bias=False)
        self.lm_head.weight = self.wte.weight
        # True above the diagonal: the future positions a query may not attend to (one shared buffer)
        self.register_buffer("future", torch.ones(spec.positions, spec.positions, dtype=torch.bool).triu(1),
                             persistent=False)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        s = tokens.shape[1]
        x = self.drop(self.wte(tokens) + self.wpe(torch.arange(s, device=tokens.device)))
        future = self.future[:s, :s]
        for block in self.h:
            x = block(x, future)
        return self.lm_head(self.ln_f(x))


class OPTAttention(nn.Module):
    def __init__(self, spec: Spec, attn_dropout: float):
        super().__init__()
        d = spec.d_model
        self.heads, self.scaling = spec.heads, (d // spec.heads) ** -0.5
        self.q_proj, self.k_proj, self.v_proj, self.out_proj = (nn.Linear(d, d) for _ in range(4))
        self.dropout = nn.Dropout(attn_dropout)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        b, s, d = x.shape
        h = self.heads

        def split(t: torch.Tensor) -> torch.Tensor:  # (B, S, D) -> (B*H, S, Dh)
            return _heads(t, h).reshape(b * h, s, d // h)

        q, k, v = split(self.q_proj(x) * self.scaling), split(self.k_proj(x)), split(self.v_proj(x))
        scores = (torch.bmm(q, k.transpose(1, 2)).view(b, h, s, s) + mask).view(b * h, s, s)
        out = torch.bmm(self.dropout(torch.softmax(scores, dim=-1)), v)
        return self.out_proj(_merge(out.view(b, h, s, d // h)))


class OPTLayer(nn.Module):
    def __init__(self, spec: Spec, dropout: float, attn_dropout: float):
        super().__init__()
        self.self_attn_layer_norm = nn.LayerNorm(spec.d_model)
        self.self_attn = OPTAttention(spec, attn_dropout)
        self.final_layer_norm = nn.LayerNorm(spec.d_model)
        self.fc1 = nn.Linear(spec.d_model, spec.ff)
        self.fc2 = nn.Linear(spec.ff, spec.d_model)
        self.activation = nn.ReLU()
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        x = x + self.dropout(self.self_attn(self.self_attn_layer_norm(x), mask))
        return x + self.dropout(self.fc2(self.activation(self.fc1(self.final_layer_norm(x)))))


class OPTLM(nn.Module):
    """OPT causal LM (pre-LN, ReLU); ``lm_head`` shares ``embed_tokens``' weight."""

    def __init__(self, spec: Spec):
        super().__init__()
        p, pa = DROPOUT["opt"], ATTN_DROPOUT["opt"]
        self.embed_tokens = nn.Embedding(spec.vocab, spec.d_model, padding_idx=1)
        self.embed_positions = nn.Embedding(spec.positions + OPT_POSITION_OFFSET, spec.d_model)
        self.dropout = nn.Dropout(p)
        self.layers = nn.ModuleList(OPTLayer(spec, p, pa) for _ in range(spec.layers))
        self.final_layer_norm = nn.LayerNorm(spec.d_model)
        self.lm_head = nn.Linear(spec.d_model, spec.vocab, bias=False)
        self.lm_head.weight = self.embed_tokens.weight
        future = torch.ones(spec.positions, spec.positions, dtype=torch.bool).triu(1)
        self.register_buffer("causal", torch.zeros(spec.positions, spec.positions).masked_fill(future, _MASK_VALUE),
                             persistent=False)  # additive mask; follows the model's dtype

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        s = tokens.shape[1]
        positions = torch.arange(s, device=tokens.device) + OPT_POSITION_OFFSET
        x = self.dropout(self.embed_tokens(tokens) + self.embed_positions(positions))
        mask = self.causal[:s, :s]
        for layer in self.layers:
            x = layer(x, mask)
        return self.lm_head(self.final_layer_norm(x))


class BertLayer(nn.Module):
    def __init__(self, spec: Spec, dropout: float, attn_dropout: float):
        super().__init__()
        d = spec.d_model
        self.heads = spec.heads
        self.query, self.key, self.value, self.attn_out = (nn.Linear(d, d) for _ in range(4))
        self.attn_dropout, self.dropout = nn.Dropout(attn_dropout), nn.Dropout(dropout)
        self.attn_norm = nn.LayerNorm(d, eps=1e-12)
        self.intermediate = nn.Linear(d, spec.ff)
        self.activation = nn.GELU()
        self.output = nn.Linear(spec.ff, d)
        self.output_norm = nn.LayerNorm(d, eps=1e-12)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = (_heads(f(x), self.heads) for f in (self.query, self.key, self.value))
        scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(q.shape[-1])
        context = _merge(torch.matmul(self.attn_dropout(torch.softmax(scores, dim=-1)), v))
        x = self.attn_norm(x + self.dropout(self.attn_out(context)))
        return self.output_norm(x + self.dropout(self.output(self.activation(self.intermediate(x)))))


class BertMLM(nn.Module):
    """BERT encoder (post-LN) with the masked-LM head; the decoder shares the token embedding."""

    def __init__(self, spec: Spec):
        super().__init__()
        d, p = spec.d_model, DROPOUT["bert"]
        self.word_embeddings = nn.Embedding(spec.vocab, d, padding_idx=0)
        self.position_embeddings = nn.Embedding(spec.positions, d)
        self.token_type_embeddings = nn.Embedding(2, d)  # type_vocab_size 2; every token is type 0
        self.embed_norm = nn.LayerNorm(d, eps=1e-12)
        self.dropout = nn.Dropout(p)
        self.layers = nn.ModuleList(BertLayer(spec, p, ATTN_DROPOUT["bert"]) for _ in range(spec.layers))
        self.transform = nn.Sequential(nn.Linear(d, d), nn.GELU(), nn.LayerNorm(d, eps=1e-12))
        self.decoder = nn.Linear(d, spec.vocab)
        self.decoder.weight = self.word_embeddings.weight
        self.register_buffer("position_ids", torch.arange(spec.positions), persistent=False)
        self.register_buffer("token_type_ids", torch.zeros(spec.positions, dtype=torch.long), persistent=False)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        b, s = tokens.shape
        x = self.word_embeddings(tokens) + self.token_type_embeddings(self.token_type_ids[:s].expand(b, s))
        x = self.dropout(self.embed_norm(x + self.position_embeddings(self.position_ids[:s])))
        for layer in self.layers:
            x = layer(x)
        return self.decoder(self.transform(x))

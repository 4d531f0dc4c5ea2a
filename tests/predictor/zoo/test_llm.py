"""The LLM zoo (predictor/emulator/zoo/llm.py): NeuSight's sizes, published parameter counts, names and
aliases, the grid, and the meta-device capture of a tiny variant (GEMM FLOPs by hand)."""

from __future__ import annotations

import json

import pytest
import torch

from predictor.common.families import family_of, job_class
from predictor.emulator.capture.opseq import capture
from predictor.emulator.zoo import ModelBuildError, build, llm, zoo_configs

# Published sizes (GPT-2 paper / HF model cards: 355M, 774M, 1.5B (1,557.6M counted with tied
# embeddings); GPT-3 paper: 2.7B; OPT paper: 1.3B; BERT paper: 340M (HF BertForMaskedLM:
# 335.2M)). Tied input/output embeddings count once, as in all of them.
PUBLISHED = {"gpt2_medium": 355e6, "gpt2_large": 774e6, "gpt2_xl": 1.558e9, "gpt3_2.7b": 2.7e9,
             "opt_1.3b": 1.3e9, "bert_large": 335e6}


def _gpt_closed_form(spec: llm.Spec) -> int:
    """12 d^2 + 13 d per block (qkv, proj, MLP 4d, two LayerNorms), embeddings, final LayerNorm."""
    d = spec.d_model
    return spec.layers * (12 * d * d + 13 * d) + (spec.vocab + spec.positions) * d + 2 * d


@pytest.mark.parametrize("model", llm.MODELS)
def test_parameter_counts(model):
    workload = build(llm.config_for(model, 1, 128), "meta")
    net = workload.model
    count = sum(p.numel() for p in net.parameters())  # distinct: a tied matrix counts once
    assert all(p.device.type == "meta" for p in net.parameters())  # nothing allocated
    if model in PUBLISHED:
        assert count == pytest.approx(PUBLISHED[model], rel=0.025)
    spec = llm.SPECS[model]
    if spec.arch == "gpt":
        assert count == _gpt_closed_form(spec)
        assert net.lm_head.weight is net.wte.weight  # tied: the head adds no parameters
    if model == "gpt3_xl":
        # NeuSight's gpt3_xl.json has n_embd 3072 (24 layers): 2.88B, not the GPT-3 paper's 1.3B XL
        assert count == pytest.approx(2.88e9, rel=0.01)


def test_untied_heads_would_count_the_vocabulary_twice():
    net = build(llm.config_for("opt_13", 1, 128), "meta").model
    assert net.lm_head.weight is net.embed_tokens.weight
    bert = build(llm.config_for("bert_large", 1, 128), "meta").model
    assert bert.decoder.weight is bert.word_embeddings.weight and bert.decoder.bias.shape == (30522,)


def test_sizes_are_neusight_configs(shared_dir):
    configs = shared_dir / "calibration" / "neusight" / "DLmodel_configs"
    if not configs.is_dir():
        pytest.skip(f"NeuSight configs {configs} not found")
    for model, spec in llm.SPECS.items():
        c = json.loads((configs / spec.origin).read_text())
        layers = c.get("n_layer", c.get("num_hidden_layers"))
        d = c.get("n_embd", c.get("hidden_size"))
        heads = c.get("n_head", c.get("num_attention_heads"))
        ff = c.get("intermediate_size", c.get("ffn_dim", c.get("n_inner") or 4 * d))
        positions = c.get("n_positions", c.get("max_position_embeddings"))
        assert (spec.layers, spec.d_model, spec.heads, spec.ff, spec.vocab, spec.positions) == (
            layers, d, heads, ff, c["vocab_size"], positions), model


def test_names_aliases_and_families():
    for neusight, zoo_name in llm.NEUSIGHT_NAMES.items():
        assert llm.canonical_model(neusight) == zoo_name
        assert llm.config_for(neusight, 1, 128).model == zoo_name
    assert llm.canonical_model("GPT3_27") == "gpt3_2.7b"
    for model in llm.MODELS:
        config = llm.config_for(model, 1, 128)
        assert config.kind == "llm" and config.family == family_of(model)
        assert job_class(config.family, model) == "language"
        assert config.extra == () and config.optimizer == "adam"
    assert {llm.config_for(m, 1, 128).family for m in llm.MODELS} == {"gpt2", "gpt3", "opt", "bert"}
    assert llm.config_for("gpt2_large", 4, 1024).config_id == "gpt2_large:b4:s1024:float32:adam:c50257"
    # other transformer names keep their family
    assert family_of("bert_base_squad") == family_of("transformer_encoder") == "transformer"


def test_unknown_names_and_impossible_configs():
    with pytest.raises(ModelBuildError, match=r"unknown LLM 'gpt4'.*gpt2_medium.*bert_large.*gpt3_27"):
        llm.canonical_model("gpt4")
    with pytest.raises(ModelBuildError, match="exceeds"):
        build(llm.config_for("bert_large", 1, 1024))
    with pytest.raises(ModelBuildError, match="not divisible"):
        build(llm.config_for("gpt2_large", 1, 16, d_model=100, heads=3))
    with pytest.raises(ModelBuildError, match="unknown size overrides"):
        llm.config_for("gpt2_large", 1, 16, depth=2)


def test_grid():
    grid = llm.grid()
    assert 200 <= len(grid) <= 400 and len({c.config_id for c in grid}) == len(grid)
    for model, (seq, batches) in llm.LABEL_POINTS.items():
        for b in batches:
            assert llm.config_for(model, b, seq) in grid  # every NeuSight measurement is in the zoo
    assert all(c.input_size <= llm.SPECS[c.model].positions for c in grid)
    assert {c.dtype for c in grid} == {"float32", "float16", "bfloat16"} and {c.optimizer for c in grid} == {"adam"}
    assert sorted(c.config_id for c in zoo_configs("llm")) == sorted(c.config_id for c in grid)
    assert {c.family for c in zoo_configs("llm", limit=4)} == {"gpt2", "gpt3", "opt", "bert"}
    # the ``all`` zoo is unchanged: no LLM in it
    assert not {"gpt2", "gpt3", "opt", "bert"} & {c.family for c in zoo_configs("all", limit=200)}


TINY = {"layers": 2, "d_model": 64, "heads": 4, "ff": 256, "vocab": 100, "positions": 32}
B, S = 2, 16


def _gemm_flops(trace, phase="forward"):
    rows = trace[(trace["phase"] == phase) & trace["op"].isin(["linear", "matmul", "bmm"])]
    return rows["flops"].sum(), rows


@pytest.mark.parametrize("model", ["gpt2_large", "opt_13", "bert_large"])
def test_tiny_capture_phases_and_gemm_flops(model):
    config = llm.config_for(model, B, S, **TINY)
    trace = capture(config, "meta")
    phases = list(trace["phase"])
    assert phases == sorted(phases, key=["forward", "backward", "update"].index)
    assert set(phases) == {"forward", "backward", "update"}
    d, ff, v, t = TINY["d_model"], TINY["ff"], TINY["vocab"], B * S
    # one layer: q, k, v and output projections, the two MLP GEMMs, and attention's
    # scores = q k^T and context = p v (2 B S S d each, over all heads)
    layer = 2 * t * d * (4 * d) + 2 * (2 * t * d * ff) + 2 * (2 * B * S * S * d)
    head = 2 * t * d * v + (2 * t * d * d if model == "bert_large" else 0)  # BERT's MLM transform
    total, rows = _gemm_flops(trace)
    assert total == TINY["layers"] * layer + head
    attention = rows[rows["op"].isin(["matmul", "bmm"])]
    assert len(attention) == 2 * TINY["layers"] and (attention["flops"] == 2 * B * S * S * d).all()
    assert {"bmm" if model == "opt_13" else "matmul"} == set(attention["op"])
    assert (trace.loc[trace["op"] == "softmax", "flops"] > 0).all()
    backward = set(trace.loc[trace["phase"] == "backward", "op"])
    assert {"BmmBackward0", "SoftmaxBackward0", "NativeLayerNormBackward0"} <= backward


def test_tiny_half_precision_capture():
    trace = capture(llm.config_for("gpt2_xl", B, S, dtype="bfloat16", **TINY), "meta")
    assert set(trace["dtype"]) == {"bfloat16"} and len(trace) > 100
    workload = build(llm.config_for("opt_1.3b", B, S, dtype="float16", **TINY))
    (tokens,), targets = workload.inputs("meta")
    assert tokens.shape == targets.shape == (B, S) and tokens.dtype == torch.long
    out = workload.model(tokens)
    assert out.shape == (B, S, TINY["vocab"]) and out.dtype == torch.float16

"""The model zoo: config ids, zoo sampling, building every family, RandWire op counts."""

from __future__ import annotations

import json

import pytest
import torch

from predictor.common.families import TORCHVISION_FAMILIES, family_of
from predictor.emulator.zoo import (
    ModelBuildError,
    ModelConfig,
    build,
    make_optimizer,
    nlp,
    randwire,
    vision,
    zoo_configs,
)
from tests.predictor.zoo.opcount import count_iteration_ops


def _randwire(mode: str, node_num: int, stages: int = 1, seed: int = 1, batch: int = 2, size: int = 32, **kw):
    extra = {"c": 16, "node_num": node_num, "stages": stages, "seed": seed, **kw}
    return ModelConfig("randwire", "randwire", f"randwire_{mode}", batch, size, num_classes=10,
                       extra=tuple(sorted(extra.items())))


# --- config ids ---------------------------------------------------------------------------------


def test_config_id_exact_values():
    assert ModelConfig("vision", "resnet", "resnet18", 32, 128, num_classes=10).config_id == (
        "resnet18:b32:s128:float32:sgd:c10"
    )
    # num_classes is a hash of the coordinates, not global random state: pinned.
    assert vision.config_for("resnet18", 32, 128).config_id == "resnet18:b32:s128:float32:sgd:c592"
    ws = _randwire("ws", 8, k=4, p=0.75)
    assert ws.config_id == "randwire_ws:b2:s32:float32:sgd:c10:x05bcec61"
    assert nlp.config_for("transformer_encoder", "base", 8, 128).config_id == (
        "transformer_encoder:b8:s128:float32:sgd:c30522:xb3a38380"
    )


def test_extra_is_normalised_and_hashed_by_content():
    a = ModelConfig("randwire", "randwire", "randwire_er", 2, 32, extra={"p": 0.2, "c": 16})
    b = ModelConfig("randwire", "randwire", "randwire_er", 2, 32, extra=(("c", 16), ("p", 0.2)))
    assert a == b and a.config_id == b.config_id and a.extra == (("c", 16), ("p", 0.2))
    assert a.config_id != a.replace(extra={"p": 0.3, "c": 16}).config_id
    with pytest.raises(ValueError):
        ModelConfig("vision", "resnet", "resnet18", 0, 32)
    with pytest.raises(ValueError):
        ModelConfig("audio", "resnet", "resnet18", 2, 32)


def test_round_trip_through_json():
    configs = zoo_configs("all", limit=60, seed=3) + [_randwire("ba", 6, m=2)]
    for config in configs:
        d = json.loads(json.dumps(config.to_dict()))
        assert ModelConfig.from_dict(d) == config
        assert ModelConfig.from_dict(config.to_dict()).config_id == config.config_id


# --- zoo sampling -------------------------------------------------------------------------------


def test_zoo_configs_deterministic_and_seeded():
    a = zoo_configs("hpo", limit=40, seed=0)
    assert a == zoo_configs("hpo", limit=40, seed=0)
    assert a != zoo_configs("hpo", limit=40, seed=1)
    assert zoo_configs("randwire", limit=10, seed=0) == zoo_configs("randwire", limit=10, seed=0)
    assert zoo_configs("randwire", limit=10, seed=0) != zoo_configs("randwire", limit=10, seed=1)
    # a limit is a prefix of a larger limit
    assert zoo_configs("nlp", limit=7, seed=2) == zoo_configs("nlp", limit=30, seed=2)[:7]
    assert zoo_configs("randwire", limit=5, seed=4) == zoo_configs("randwire", limit=12, seed=4)[:5]


def test_hpo_limit_covers_every_family():
    configs = zoo_configs("hpo", limit=36)
    assert len(configs) == 36
    counts = {f: sum(c.family == f for c in configs) for f in TORCHVISION_FAMILIES}
    assert set(counts.values()) == {2}
    for c in configs:
        assert c.kind == "vision" and c.family == family_of(c.model)
        assert c.batch in vision.BATCHES and c.input_size in vision.IMAGE_SIZES
        assert 3 <= c.num_classes <= 1000


def test_full_grids_unique_and_valid():
    hpo = zoo_configs("hpo")
    assert len(hpo) == len(vision.grid()) == 7051
    assert {c.family for c in hpo} == set(TORCHVISION_FAMILIES)
    assert all(vision.size_problem(c.model, c.input_size) is None for c in hpo)
    assert not any(c.model == "inception_v3" and c.input_size < 75 for c in hpo)
    assert not any(c.model == "vit_b_32" and c.input_size % 32 for c in hpo)
    grids = vision.grid() + nlp.grid() + randwire.sample(200)
    ids = [c.config_id for c in grids]
    assert len(set(ids)) == len(ids)
    first = zoo_configs("all", limit=63)  # 21 families, 3 rounds
    assert {c.family for c in first} == set(TORCHVISION_FAMILIES) | {"randwire", "transformer", "lstm"}


def test_unknown_zoo_lists_names():
    with pytest.raises(ValueError, match="hpo.*randwire.*nlp.*all"):
        zoo_configs("imagenet")


# --- building -----------------------------------------------------------------------------------

# The smallest variant of every family, at a small valid size.
_SMALL = {
    "resnet": ("resnet18", 32), "wide_resnet": ("wide_resnet50_2", 32), "alexnet": ("alexnet", 64),
    "convnext": ("convnext_tiny", 32), "densenet": ("densenet121", 32), "efficientnet": ("efficientnet_b0", 32),
    "efficientnet_v2": ("efficientnet_v2_s", 32), "googlenet": ("googlenet", 32),
    "inception_v3": ("inception_v3", 128), "mobilenet_v2": ("mobilenet_v2", 32),
    "mobilenet_v3": ("mobilenet_v3_small", 32), "mnasnet": ("mnasnet0_5", 32), "regnet": ("regnet_y_400mf", 32),
    "shufflenet": ("shufflenet_v2_x0_5", 32), "squeezenet": ("squeezenet1_1", 32), "swin": ("swin_v2_t", 32),
    "vgg": ("vgg11_bn", 32), "vit": ("vit_b_32", 64),
}


@pytest.mark.parametrize("family", TORCHVISION_FAMILIES)
def test_every_family_builds_on_meta(family):
    model, size = _SMALL[family]
    config = vision.config_for(model, 2, size)
    workload = build(config)
    assert workload.config == config
    assert all(p.device.type == "meta" for p in workload.model.parameters())
    (x,), targets = workload.inputs("meta")
    assert x.shape == (2, 3, size, size) and targets.shape == (2,)
    out = workload.model(x)
    assert out.shape == (2, config.num_classes)
    assert workload.loss(out, targets).shape == ()


@pytest.mark.parametrize("model", nlp.MODELS)
def test_sequence_models_build_on_meta(model):
    size = next(iter(nlp.SIZES[model]))
    config = nlp.config_for(model, size, 3, 16)
    workload = build(config)
    model_inputs, targets = workload.inputs("meta")
    out = workload.model(*model_inputs)
    assert out.shape == (3, 16, config.num_classes) and targets.shape == (3, 16)
    assert workload.loss(out, targets).shape == ()


def test_dtype_and_optimizers():
    config = vision.config_for("mobilenet_v3_small", 4, 32, dtype="float16", optimizer="adam")
    workload = build(config)
    assert {p.dtype for p in workload.model.parameters()} == {torch.float16}
    assert workload.inputs("meta")[0][0].dtype == torch.float16
    assert isinstance(make_optimizer(config, workload.model.parameters()), torch.optim.Adam)
    sgd = make_optimizer(config.replace(optimizer="sgd"), workload.model.parameters())
    assert isinstance(sgd, torch.optim.SGD)
    assert sgd.defaults["lr"] == 0.01 and sgd.defaults["momentum"] == 0.9


def test_regnet_patch_is_scoped():
    from torchvision.models import regnet

    before = regnet.BlockParams.__dict__["from_init_params"]
    build(vision.config_for("regnet_x_400mf", 2, 32))
    assert regnet.BlockParams.__dict__["from_init_params"] is before


@pytest.mark.parametrize(
    "config, reason",
    [
        (vision.config_for("inception_v3", 2, 64), "below the minimum 75"),
        (vision.config_for("vit_b_32", 2, 48), "not divisible"),
        (ModelConfig("vision", "resnet", "resnet9000", 2, 32), "unknown torchvision model"),
        (ModelConfig("vision", "vgg", "resnet18", 2, 32), "does not match"),
        (_randwire("ws", 4, k=4, p=0.5), "k < node_num"),
        (ModelConfig("randwire", "randwire", "randwire_xx", 2, 32), "unknown RandWire"),
        (ModelConfig("nlp", "transformer", "transformer_encoder", 2, 32), "extra lacks"),
    ],
)
def test_impossible_configs_raise(config, reason):
    with pytest.raises(ModelBuildError, match=reason) as info:
        build(config)
    assert config.config_id in str(info.value)


def test_one_real_cpu_step_is_deterministic():
    config = _randwire("er", 4, p=0.5, batch=2, size=16)
    a, b = build(config, "cpu"), build(config, "cpu")
    assert all(torch.equal(p, q) for p, q in zip(a.model.parameters(), b.model.parameters()))
    (x1,), t1 = a.inputs("cpu")
    (x2,), t2 = a.inputs(torch.device("cpu"))
    assert torch.equal(x1, x2) and torch.equal(t1, t2)
    optimizer = make_optimizer(config, a.model.parameters())
    loss = a.loss(a.model(x1), t1)
    loss.backward()
    optimizer.step()
    assert torch.isfinite(loss)


# --- RandWire -----------------------------------------------------------------------------------


def test_randwire_graph_is_a_function_of_the_config():
    config = _randwire("ws", 16, stages=2, k=4, p=0.75)
    assert randwire.stage_dags(config) == randwire.stage_dags(config.replace())
    assert randwire.stage_dags(config) != randwire.stage_dags(config.replace(extra={**config.extra_dict, "seed": 2}))
    for dag in randwire.stage_dags(config):  # edges point from lower to higher index
        assert all(all(u < v for u in preds) for v, preds in enumerate(dag))
    edges = sum(len(preds) for dag in randwire.stage_dags(config) for preds in dag)
    assert edges == 2 * 16 * 4 // 2  # WS keeps n*k/2 edges per stage


def test_randwire_size_grows_with_node_num():
    leaves = []
    for n in (4, 8, 16, 32, 64):
        model = build(_randwire("ba", n, stages=2, m=2)).model
        leaves.append(sum(1 for m in model.modules() if not list(m.children())))
    assert leaves == sorted(leaves) and len(set(leaves)) == len(leaves)


def test_randwire_estimate_matches_profiler():
    for config in (_randwire("er", 6, p=0.4), _randwire("ws", 8, stages=2, k=4, p=0.5)):
        measured = count_iteration_ops(config)
        estimate = randwire.estimated_ops(config)
        assert {k: measured[k] for k in estimate} == estimate


def test_randwire_zoo_spans_the_op_range():
    configs = zoo_configs("randwire", limit=50)
    assert {c.model for c in configs} == set(randwire.MODELS)
    ops = [randwire.estimated_train_ops(c) for c in configs]
    assert min(ops) < 150
    largest = configs[max(range(len(configs)), key=ops.__getitem__)]
    measured = count_iteration_ops(largest)
    assert measured["forward"] + measured["backward"] > 1200
    smallest = configs[min(range(len(configs)), key=ops.__getitem__)]
    measured = count_iteration_ops(smallest)
    assert measured["forward"] + measured["backward"] < 250


def test_model_build_error_forms():
    config = vision.config_for("resnet18", 2, 32)
    err = ModelBuildError(config, "too big")
    assert str(err) == f"cannot build {config.config_id}: too big" and err.config_id == config.config_id
    assert str(ModelBuildError("plain message")) == "plain message"
    assert isinstance(err, ValueError)

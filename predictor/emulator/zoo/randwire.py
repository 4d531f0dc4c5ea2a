"""Randomly wired networks (Xie et al., ICCV 2019, "Exploring Randomly Wired Neural Networks").

Why: ETS's NAS evaluation set is ~7.4 k RandWire graphs spanning < 250 to > 800 ops per
iteration (predictors.md §1.1); random wiring gives op sequences unlike any torchvision family.

Network (the paper's small regime, simplified):

* stem: conv3x3/2 (3 -> c/2) + BN + ReLU, conv3x3/2 (c/2 -> c) + BN;
* ``stages`` random-graph stages; stage i maps c*2^(i-1) -> c*2^i channels (stage 0: c -> c) and
  halves the resolution;
* head: ReLU, conv1x1 -> 1280, BN, ReLU, global average pool, linear -> num_classes.

One stage is one undirected graph from networkx, seeded, made a DAG by orienting every edge from
the lower to the higher node index: ``erdos_renyi_graph(n, p)`` (ER),
``watts_strogatz_graph(n, k, p)`` (WS), ``barabasi_albert_graph(n, m)`` (BA). Stage ``i`` uses
networkx seed ``stable_int("randwire", seed, i) % 2**32``, so the graph is a function of the
config. A node = aggregation (weighted sum of its predecessors' outputs with weights
sigmoid(w), w learnable, initialised to 0; nodes with one input skip it) -> ReLU -> separable
conv 3x3 (depthwise 3x3 + pointwise 1x1) -> BN. Nodes without predecessors read the stage input
with stride 2; the stage output is the mean of the nodes without successors.

Config: ``model = "randwire_{er|ws|ba}"``, ``extra`` = ``c`` (channels), ``node_num`` (nodes per
stage), ``stages`` (1-3), ``seed`` (graph seed) and ``p`` (ER, WS), ``k`` (WS), ``m`` (BA).
"""

from __future__ import annotations

import random

import networkx as nx
import torch
from torch import nn

from predictor.emulator.zoo.common import classes_for, image_inputs
from predictor.emulator.zoo.config import ModelBuildError, ModelConfig, stable_int

GRAPH_MODES = ("er", "ws", "ba")
MODELS = tuple(f"randwire_{mode}" for mode in GRAPH_MODES)

# Sampling space of zoo_configs("randwire").
NODE_NUMS = (2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64)
STAGES = (1, 2, 3)
ER_P = (0.1, 0.2, 0.3, 0.4)
WS_K = (2, 4, 6)
WS_P = (0.25, 0.5, 0.75)
BA_M = (1, 2, 3, 5)
CHANNELS = (16, 32, 48, 64, 78)
BATCHES = (2, 4, 8, 16, 32, 64, 96, 128, 192, 256)
IMAGE_SIZES = (32, 64, 128, 160, 224, 256)
DEFAULT_COUNT = 2000  # zoo_configs("randwire") without a limit
# Bins of forward + backward ops (estimated_train_ops), sampled round-robin: ETS's RandWire
# histogram bins (predictors.md §1.1) with its open "800+" bin split at 1200 and capped.
OP_BINS = ((0, 250), (250, 550), (550, 800), (800, 1200), (1200, 2500))
HEAD_CHANNELS = 1280


def _graph_params(config: ModelConfig) -> tuple[str, int, int, dict]:
    mode = config.model.removeprefix("randwire_")
    if mode not in GRAPH_MODES:
        raise ModelBuildError(config, f"unknown RandWire model {config.model!r} (known: {', '.join(MODELS)})")
    e = config.extra_dict
    required = {"er": ("p",), "ws": ("k", "p"), "ba": ("m",)}[mode] + ("c", "node_num", "stages", "seed")
    missing = [key for key in required if key not in e]
    if missing:
        raise ModelBuildError(config, f"extra lacks {missing}")
    n, stages, c = e["node_num"], e["stages"], e["c"]
    if not (isinstance(n, int) and n >= 2):
        raise ModelBuildError(config, f"node_num must be an int >= 2, got {n!r}")
    if not (isinstance(stages, int) and 1 <= stages <= 4):
        raise ModelBuildError(config, f"stages must be 1..4, got {stages!r}")
    if not (isinstance(c, int) and c >= 2):
        raise ModelBuildError(config, f"c must be an int >= 2, got {c!r}")
    if mode == "ws" and not (isinstance(e["k"], int) and 2 <= e["k"] < n):
        raise ModelBuildError(config, f"WS needs 2 <= k < node_num, got k={e['k']!r}, node_num={n}")
    if mode == "ba" and not (isinstance(e["m"], int) and 1 <= e["m"] < n):
        raise ModelBuildError(config, f"BA needs 1 <= m < node_num, got m={e['m']!r}, node_num={n}")
    if "p" in required and not (0.0 <= float(e["p"]) <= 1.0):
        raise ModelBuildError(config, f"p must be in [0, 1], got {e['p']!r}")
    return mode, n, stages, e


def stage_graph(mode: str, params: dict, stage: int) -> nx.Graph:
    """The undirected random graph of one stage (nodes 0..node_num-1), seeded by (seed, stage)."""
    n = params["node_num"]
    seed = stable_int("randwire", params["seed"], stage) % 2**32
    if mode == "er":
        return nx.erdos_renyi_graph(n, float(params["p"]), seed=seed)
    if mode == "ws":
        return nx.watts_strogatz_graph(n, params["k"], float(params["p"]), seed=seed)
    return nx.barabasi_albert_graph(n, params["m"], seed=seed)


def stage_dags(config: ModelConfig) -> list[list[tuple[int, ...]]]:
    """Per stage, the predecessors of each node (edges oriented low -> high index)."""
    mode, n, stages, params = _graph_params(config)
    dags = []
    for stage in range(stages):
        graph = stage_graph(mode, params, stage)
        preds: list[list[int]] = [[] for _ in range(n)]
        for u, v in graph.edges():
            lo, hi = min(u, v), max(u, v)
            preds[hi].append(lo)
        dags.append([tuple(sorted(p)) for p in preds])
    return dags


class SeparableConv2d(nn.Module):
    def __init__(self, in_channels: int, out_channels: int, stride: int):
        super().__init__()
        self.depthwise = nn.Conv2d(in_channels, in_channels, 3, stride, 1, groups=in_channels, bias=False)
        self.pointwise = nn.Conv2d(in_channels, out_channels, 1, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.pointwise(self.depthwise(x))


class Node(nn.Module):
    """Aggregation (sigmoid-weighted sum) -> ReLU -> separable conv 3x3 -> BN."""

    def __init__(self, in_degree: int, in_channels: int, out_channels: int, stride: int):
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(in_degree)) if in_degree > 1 else None
        self.relu = nn.ReLU()
        self.conv = SeparableConv2d(in_channels, out_channels, stride)
        self.bn = nn.BatchNorm2d(out_channels)

    def forward(self, inputs: list[torch.Tensor]) -> torch.Tensor:
        if self.weight is None:
            x = inputs[0]
        else:
            w = torch.sigmoid(self.weight)
            x = inputs[0] * w[0]
            for i in range(1, len(inputs)):
                x = x + inputs[i] * w[i]
        return self.bn(self.conv(self.relu(x)))


class RandWireStage(nn.Module):
    def __init__(self, preds: list[tuple[int, ...]], in_channels: int, out_channels: int):
        super().__init__()
        self.preds = [tuple(p) for p in preds]
        has_successor = {u for p in self.preds for u in p}
        self.outputs = [i for i in range(len(preds)) if i not in has_successor]
        self.nodes = nn.ModuleList(
            Node(len(p), out_channels, out_channels, 1) if p else Node(1, in_channels, out_channels, 2)
            for p in self.preds
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        outs: list[torch.Tensor] = []
        for node, preds in zip(self.nodes, self.preds):
            outs.append(node([outs[j] for j in preds] if preds else [x]))
        y = outs[self.outputs[0]]
        for i in self.outputs[1:]:
            y = y + outs[i]
        return y / len(self.outputs) if len(self.outputs) > 1 else y


class RandWireNet(nn.Module):
    def __init__(self, dags: list[list[tuple[int, ...]]], channels: int, num_classes: int):
        super().__init__()
        c = channels
        self.stem = nn.Sequential(
            nn.Conv2d(3, c // 2, 3, 2, 1, bias=False),
            nn.BatchNorm2d(c // 2),
            nn.ReLU(),
            nn.Conv2d(c // 2, c, 3, 2, 1, bias=False),
            nn.BatchNorm2d(c),
        )
        stages, width = [], c
        for i, preds in enumerate(dags):
            out = c * 2**i
            stages.append(RandWireStage(preds, width, out))
            width = out
        self.stages = nn.Sequential(*stages)
        self.head = nn.Sequential(
            nn.ReLU(),
            nn.Conv2d(width, HEAD_CHANNELS, 1, bias=False),
            nn.BatchNorm2d(HEAD_CHANNELS),
            nn.ReLU(),
            nn.AdaptiveAvgPool2d(1),
            nn.Flatten(1),
        )
        self.fc = nn.Linear(HEAD_CHANNELS, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.head(self.stages(self.stem(x))))


def check(config: ModelConfig) -> None:
    _graph_params(config)
    if config.family != "randwire":
        raise ModelBuildError(config, f"family must be 'randwire', got {config.family!r}")


def build_model(config: ModelConfig) -> nn.Module:
    check(config)
    return RandWireNet(stage_dags(config), int(config.get("c")), config.num_classes)


def inputs(config: ModelConfig):
    return image_inputs(config)


def estimated_ops(config: ModelConfig) -> dict[str, int]:
    """Estimated top-level ops of one SGD training iteration, per phase and ``total``.

    The forward count follows this implementation op by op: per node relu, 2 convs, batch_norm
    and BN's ``num_batches_tracked`` add_, plus, for in-degree d > 1, sigmoid + d select + d mul +
    (d - 1) add; per stage with o > 1 output nodes (o - 1) add + 1 div; stem 5 + 2 add_, head
    6 + 1 add_, fc 1, loss 1. Backward: one autograd node per differentiable forward op (linear and
    cross-entropy make two each), one AccumulateGrad per parameter tensor, the initial ones_like.
    Update: SGD with momentum, 3 ops per parameter tensor. Checked on the meta device against the
    profiler's count (tests/predictor/zoo/opcount.py).
    """
    fwd, params, nondiff = 16, 11, 3  # stem + head + fc + loss; their parameter tensors; BN add_
    for dag in stage_dags(config):
        has_successor = {u for p in dag for u in p}
        outputs = len(dag) - len(has_successor)
        for preds in dag:
            d = len(preds)
            fwd += 5 + (3 * d if d > 1 else 0)
            nondiff += 1
            params += 4 + (1 if d > 1 else 0)  # depthwise, pointwise, bn weight + bias (+ w)
        if outputs > 1:
            fwd += outputs
    backward = fwd - nondiff + 2 + params + 1
    update = 3 * params
    return {"forward": fwd, "backward": backward, "update": update, "total": fwd + backward + update}


def estimated_train_ops(config: ModelConfig) -> int:
    """Forward + backward ops of one iteration (``estimated_ops`` without the optimizer update,
    whose op count depends on torch's foreach choice per device)."""
    ops = estimated_ops(config)
    return ops["forward"] + ops["backward"]


def _sample_one(rng: random.Random, mode: str) -> ModelConfig:
    n = rng.choice([n for n in NODE_NUMS if mode != "ws" or n > min(WS_K)])
    extra: dict[str, object] = {
        "c": rng.choice(CHANNELS),
        "node_num": n,
        "stages": rng.choice(STAGES),
        "seed": rng.randrange(10_000),
    }
    if mode == "er":
        extra["p"] = rng.choice(ER_P)
    elif mode == "ws":
        extra["k"] = rng.choice([k for k in WS_K if k < n])
        extra["p"] = rng.choice(WS_P)
    else:
        extra["m"] = rng.choice([m for m in BA_M if m < n])
    batch, size = rng.choice(BATCHES), rng.choice(IMAGE_SIZES)
    model = f"randwire_{mode}"
    return ModelConfig(
        kind="randwire",
        family="randwire",
        model=model,
        batch=batch,
        input_size=size,
        num_classes=classes_for(model, batch, size, tuple(sorted(extra.items()))),
        extra=tuple(sorted(extra.items())),
    )


def sample(count: int, seed: int = 0) -> list[ModelConfig]:
    """``count`` distinct RandWire configs, balanced over graph modes and over ``OP_BINS``.

    Deterministic in (count-prefix, seed): the i-th config targets bin ``i % len(OP_BINS)`` and
    graph mode ``i % 3``; candidates are drawn from a ``random.Random`` seeded with the zoo seed
    until one falls in the target bin (by ``estimated_train_ops``). ``sample(k, s)`` is a prefix of
    ``sample(k + j, s)``.
    """
    rng = random.Random(f"randwire:{seed}")
    out: list[ModelConfig] = []
    seen: set[str] = set()
    while len(out) < count:
        lo, hi = OP_BINS[len(out) % len(OP_BINS)]
        mode = GRAPH_MODES[len(out) % len(GRAPH_MODES)]
        for _ in range(10_000):
            config = _sample_one(rng, mode)
            if config.config_id not in seen and lo <= estimated_train_ops(config) < hi:
                break
        else:  # pragma: no cover - the bins are all reachable
            raise RuntimeError(f"no RandWire config with estimated ops in [{lo}, {hi})")
        seen.add(config.config_id)
        out.append(config)
    return out

"""Count the top-level ops of one training iteration of a config, with torch.profiler.

Why: ETS's RandWire set is binned by ops per iteration (0-250 / 250-550 / 550-800 / 800+,
predictors.md §1.1), so the zoo needs a measured op count to check that its RandWire configs span
that range — without a GPU, hence on the meta device (shapes only, no compute).

What counts as one op (the same rule as the Kineto importer, predictor/emulator/capture/kineto.py):

* forward / update: a profiler event named ``aten::*`` that has no ``aten::*`` or autograd-node
  ancestor on its thread (ops called by other ops are not counted);
* backward: one ``autograd::engine::evaluate_function: X`` event per autograd node executed
  (``XBackward0``, ``AccumulateGrad``, ...), whatever aten ops it runs inside.

Phases are the ``record_function`` ranges ``zoo::forward`` (forward + loss), ``zoo::backward``
and ``zoo::update`` (``optimizer.step()`` + ``zero_grad()``). On the meta device the SGD/Adam
step uses torch's per-parameter (non-foreach) loop, as on CPU; on CUDA torch defaults to foreach
kernels, which makes the update phase much shorter.
"""

from __future__ import annotations

import torch
from torch.profiler import ProfilerActivity, profile, record_function

from predictor.common.op_trace import PHASES
from predictor.emulator.zoo.config import ModelConfig

_NODE_PREFIX = "autograd::engine::evaluate_function:"


def _is_op(name: str) -> bool:
    return name.startswith("aten::") or name.startswith(_NODE_PREFIX)


def count_iteration_ops(config: ModelConfig, device: str | torch.device = "meta") -> dict[str, int]:
    """``{"forward": n, "backward": n, "update": n, "total": n}`` for one training iteration."""
    from predictor.emulator.zoo.registry import build, make_optimizer

    workload = build(config, device)
    optimizer = make_optimizer(config, workload.model.parameters())
    model_inputs, targets = workload.inputs(device)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        with record_function("zoo::forward"):
            loss = workload.loss(workload.model(*model_inputs), targets)
        with record_function("zoo::backward"):
            loss.backward()
        with record_function("zoo::update"):
            optimizer.step()
            optimizer.zero_grad()
    counts = dict.fromkeys(PHASES, 0)
    for event in prof.events():
        if not _is_op(event.name):
            continue
        phase = None
        parent = event.cpu_parent
        nested = False
        while parent is not None:
            if _is_op(parent.name):
                nested = True
                break
            if parent.name.startswith("zoo::"):
                phase = parent.name.removeprefix("zoo::")
            parent = parent.cpu_parent
        if nested:
            continue
        if event.name.startswith(_NODE_PREFIX):
            phase = "backward"
        if phase in counts:
            counts[phase] += 1
    counts["total"] = sum(counts[p] for p in PHASES)
    return counts

"""A config's checkpoint size, what a preemptive policy's resume reads back: its parameters (one
accumulated gradient per parameter) at their element size, plus the optimizer's state."""

from __future__ import annotations

import pandas as pd
import pytest

from traces.workloads import checkpoint_bytes, read_workloads, workload_configs


def sequence(config_id: str, grads: list[tuple[str, str]]) -> pd.DataFrame:
    rows = [{"config_id": config_id, "idx": 0, "op": "conv2d", "input_shapes": "[[1,3,8,8],[4,3,3,3]]",
             "dtype": "float32", "family": "resnet", "model": "resnet18"}]
    rows += [{"config_id": config_id, "idx": i + 1, "op": "AccumulateGrad", "input_shapes": shapes, "dtype": dtype,
              "family": "resnet", "model": "resnet18"} for i, (shapes, dtype) in enumerate(grads)]
    return pd.DataFrame(rows)


def test_parameters_times_element_size_times_one_plus_optimizer_states_by_hand():
    grads = [("[[4,3,3,3]]", "float32"), ("[[4]]", "float32")]  # 108 + 4 parameters
    frame = pd.concat([sequence("resnet18:b1:s8:float32:sgd:c4", grads),
                       sequence("resnet18:b1:s8:float32:adam:c4", grads),
                       sequence("resnet18:b1:s8:bfloat16:sgd:c4", [("[[4,3,3,3]]", "bfloat16")])])
    sizes = checkpoint_bytes(frame)
    assert sizes["resnet18:b1:s8:float32:sgd:c4"] == 112 * 4 * 2  # SGD keeps its momentum
    assert sizes["resnet18:b1:s8:float32:adam:c4"] == 112 * 4 * 3  # Adam two moments
    assert sizes["resnet18:b1:s8:bfloat16:sgd:c4"] == 108 * 2 * 2


def test_the_catalog_models_have_their_published_sizes():
    configs = workload_configs(read_workloads()).set_index("config_id")
    gpt3 = configs[configs.index.str.startswith("gpt3_2.7b:")]
    assert len(gpt3) and (gpt3["checkpoint_bytes"] > 0).all()
    # GPT-3 2.7B: 2.65 billion parameters, fp32 with Adam: 3 x 4 bytes each
    fp32 = gpt3[gpt3.index.str.contains(":float32:adam:")]["checkpoint_bytes"]
    assert fp32.iloc[0] / 12 == pytest.approx(2.65e9, rel=0.01)

"""`ets predict --gpus N [--per-node K]`: the checkpoint's prediction as per-GPU compute plus the
spec-derived gradient all-reduces, printed as `ets devices time --gpus` prints them."""

from __future__ import annotations

import json
import math
from functools import cache

import pandas as pd
import pytest
from click.testing import CliRunner

from predictor.checkpoints import CHECKPOINT_DIR
from predictor.cli import main as ets
from predictor.emulator.devices.collectives import CollectiveError
from predictor.emulator.devices.data_parallel import data_parallel_step
from predictor.prediction import Subject, data_parallel_steps

ETS = str(CHECKPOINT_DIR / "ets-A100.pt")  # emulated:A100: NVLink-bridged pairs, PCIe Gen4 beyond
DNNPERF = str(CHECKPOINT_DIR / "dnnperf-V100.pt")  # one number per graph: no phase breakdown
TINY = ["resnet18", "--batch", "2", "--size", "32"]
DP_KEYS = {"total_ms", "compute_ms", "allreduce_ms", "communication_ms", "gpus", "nodes", "per_node",
           "scaling_efficiency", "link", "buckets", "communication_label", "overlap"}


@cache
def _predict(ckpt: str, *args: str) -> str:
    """stdout of `ets predict` on the tiny config (each distinct call run once)."""
    result = CliRunner().invoke(ets, ["predict", "--ckpt", ckpt, *TINY, *args])
    assert result.exit_code == 0, result.output
    return result.stdout


def test_one_gpu_output_is_unchanged_to_the_byte():
    assert _predict(ETS, "--gpus", "1") == _predict(ETS)
    assert _predict(ETS, "--gpus", "1", "--json") == _predict(ETS, "--json")
    record = json.loads(_predict(ETS, "--json"))["predictions"][0]
    assert not DP_KEYS & set(record)


def test_gpus_adds_the_data_parallel_step_to_the_prediction():
    one = json.loads(_predict(ETS, "--json"))["predictions"][0]
    packed = json.loads(_predict(ETS, "--gpus", "8", "--json"))["predictions"][0]
    spread = json.loads(_predict(ETS, "--gpus", "8", "--per-node", "1", "--json"))["predictions"][0]
    for r in (packed, spread):
        assert DP_KEYS <= set(r) and r["gpus"] == 8
        # the compute keeps the method's prediction and label; the communication is spec-derived
        assert r["compute_ms"] == r["iteration_ms"] == one["iteration_ms"]
        assert r["prediction"] == one["prediction"] and r["communication_label"] == "spec-derived"
        assert r["overlap"] == "backward" and r["allreduce_ms"] > 0
        assert r["total_ms"] == pytest.approx(r["compute_ms"] + r["communication_ms"], rel=1e-9)
        assert 0 < r["scaling_efficiency"] <= 1
    assert (packed["nodes"], packed["per_node"], spread["nodes"]) == (1, 8, 8)
    assert spread["total_ms"] > packed["total_ms"] and spread["link"] == "network"
    text = _predict(ETS, "--gpus", "8", "--per-node", "4")
    lines = text.splitlines()
    assert lines[0] == _predict(ETS).rstrip("\n")  # the prediction line, then the block
    assert lines[1].startswith("  on 8 GPUs (2 node(s) × 4 GPU(s), data-parallel; communication spec-derived")
    assert "(the prediction above, per GPU)" in lines[2] and "scaling efficiency" in lines[-1]


def test_the_same_block_as_ets_devices_time():
    """Both commands print one block (predictor.cli.data_parallel): the same lines, given the
    same numbers; here the emulated step as compute, against the prediction's."""
    devices = CliRunner().invoke(ets, ["devices", "time", *TINY, "--device", "emulated:A100", "--gpus", "4"]).stdout
    predict = _predict(ETS, "--gpus", "4")
    labels = [line.split()[0] for line in devices.splitlines()[-5:]]
    assert [line.split()[0] for line in predict.splitlines()[-5:]] == labels == \
        ["on", "compute", "all-reduce", "exposed", "total"]
    # the communication is the device's and the config's, whatever computes: the same all-reduces
    assert devices.splitlines()[-3] == predict.splitlines()[-3]


def test_a_method_without_a_backward_phase_exposes_every_all_reduce():
    r = json.loads(_predict(DNNPERF, "--gpus", "4", "--json"))["predictions"][0]
    assert r["overlap"] == "none"
    assert r["communication_ms"] == pytest.approx(r["allreduce_ms"], rel=1e-9)
    assert "predicts no backward phase" in _predict(DNNPERF, "--gpus", "4")


@pytest.mark.parametrize("args, message", [
    (["--gpus", "0"], "--gpus: 0 must be ≥ 1"),
    (["--gpus", "-2"], "--gpus: -2 must be ≥ 1"),
    (["--gpus", "4", "--per-node", "8"], "--per-node: 8 must divide --gpus 4"),
    (["--gpus", "4", "--per-node", "3"], "--per-node: 3 must divide --gpus 4"),
    (["--gpus", "12"], "--gpus: 12 GPUs do not fill 8-GPU nodes"),
])
def test_bad_placements_are_one_line_naming_the_value(args, message):
    result = CliRunner().invoke(ets, ["predict", "--ckpt", ETS, *TINY, *args])
    assert result.exit_code == 2 and "Traceback" not in result.output
    errors = [line for line in result.output.splitlines() if line.startswith("Error")]
    assert len(errors) == 1 and message in errors[0]


def test_gpus_with_a_model_file_is_refused_in_one_line(tmp_path):
    result = CliRunner().invoke(ets, ["predict", "--ckpt", ETS, "--model-file", str(tmp_path / "m.py"),
                                      "--gpus", "2"])
    assert result.exit_code == 2 and "--gpus applies to TARGET" in result.output


# -- the library: data_parallel_steps on hand-made records ---------------------------------------

def _grads(config_id: str, device: str, sizes: list[int]) -> pd.DataFrame:
    """One config's AccumulateGrad rows (float32 gradients of ``sizes`` elements)."""
    return pd.DataFrame({"config_id": config_id, "device": device, "idx": range(len(sizes)), "op": "AccumulateGrad",
                         "input_shapes": [f"[[{n}]]" for n in sizes], "dtype": "float32"})


def _record(config_id: str, pred_us: float, backward_us: float, trace_device: str = "meta") -> dict:
    return {"config_id": config_id, "pred_us": pred_us, "pred_backward_us": backward_us,
            "iteration_ms": pred_us / 1e3, "trace_device": trace_device}


def test_compute_is_the_prediction_with_its_backward_phase_overlapping():
    # 32 MB, 32 MB and 0.8 MB of float32 gradients: each of the first two fills its bucket (the first
    # capped at 1 MiB, the next at 25 MiB), the last is the open one: 3 buckets
    sizes = [8_000_000, 8_000_000, 200_000]
    subject = Subject(_grads("c", "meta", sizes), "hand")
    step = data_parallel_steps([_record("c", 60_000.0, 40_000.0)], subject, "emulated:A100-SXM4", 8, 4)[0]
    expected = data_parallel_step(0.040, 0.020, [32_000_000, 32_000_000, 800_000], 8, 4, "emulated:A100-SXM4")
    assert step == expected | {"overlap": "backward"}
    none = data_parallel_steps([_record("c", 60_000.0, math.nan)], subject, "emulated:A100-SXM4", 8, 4)[0]
    assert none["overlap"] == "none"
    assert none["total_ms"] == pytest.approx(60.0 + expected["allreduce_ms"], rel=1e-12)
    assert none["total_ms"] > step["total_ms"]


def test_a_config_timed_on_several_devices_counts_its_gradients_once():
    subject = Subject(pd.concat([_grads("c", "T4", [1_000_000, 2_000_000]), _grads("c", "V100", [1_000_000,
                                                                                                  2_000_000])]), "f")
    steps = data_parallel_steps([_record("c", 10_000.0, 5_000.0, "T4"), _record("c", 8_000.0, 4_000.0, "V100")],
                                subject, "emulated:A100-SXM4", 2, 2)
    assert [s["buckets"] for s in steps] == [2, 2]  # 4 MB (over the 1 MiB first cap), then 8 MB
    assert steps[0]["allreduce_ms"] == steps[1]["allreduce_ms"]


def test_what_cannot_be_priced_is_one_error_naming_it():
    subject = Subject(_grads("c", "meta", [1000]).assign(op="addmm"), "a trace file x.parquet")
    with pytest.raises(CollectiveError, match="c in a trace file x.parquet records no gradients"):
        data_parallel_steps([_record("c", 1000.0, 500.0)], subject, "emulated:A100", 2, 2)
    grads = Subject(_grads("c", "meta", [1000]), "hand")
    with pytest.raises(CollectiveError, match="GPU B200 has no \\[interconnect\\]"):
        data_parallel_steps([_record("c", 1000.0, 500.0)], grads, "emulated:B200", 2, 2)

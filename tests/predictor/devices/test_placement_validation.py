"""Multi-GPU validation sets: readers on hand-made files, one composed step by hand, and the real
sets (when ../shared is present) predicted out of sample."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from predictor.common.gpus import entry
from predictor.emulator.devices import placement_sets as sets
from predictor.emulator.devices import placement_validation as pv
from predictor.emulator.devices.collectives import gpu_interconnect, params_from_json, shipped_params
from predictor.emulator.devices.measurements import MeasurementError

# --- readers -------------------------------------------------------------------------------------


def _write(path, text):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_sia_placements_parsed_exactly(tmp_path):
    # columns in another order than Sia's files (read by name); ncf has no model of ours: counted
    _write(tmp_path / "cifar10" / "placements-aws.csv",
           "local_bsz,placement,sync_time,step_time\n32,1,0.001,0.05\n32,13,0.06,0.10\n\n64,22,0.0,0.2\n")
    _write(tmp_path / "ncf" / "placements-aws.csv", "placement,local_bsz,step_time,sync_time\n1,8,0.1,0\n2,8,0.2,0\n")
    df = sets.load_sia_placements(tmp_path, models=("cifar10", "ncf"), clusters=("aws", "rtx"))
    assert df["placement"].tolist() == ["1", "13", "22"]
    assert df["counts"].tolist() == [(1,), (1, 3), (2, 2)]
    assert df["gpus"].tolist() == [1, 4, 4] and df["nodes"].tolist() == [1, 2, 2]
    assert df["local_bsz"].tolist() == [32, 32, 64]
    assert df["step_time"].tolist() == [0.05, 0.10, 0.2] and df["sync_time"].tolist() == [0.001, 0.06, 0.0]
    assert set(df["workload"]) == {"resnet18_cifar"} and set(df["device"]) == {"T4"}
    assert df["origin"].tolist() == ["cifar10/placements-aws.csv:2", "cifar10/placements-aws.csv:3",
                                     "cifar10/placements-aws.csv:5"]
    assert df.attrs["unmodelled"] == {"ncf": 2}
    assert df.attrs["missing"] == ["cifar10/placements-rtx.csv", "ncf/placements-rtx.csv"]


@pytest.mark.parametrize(("row", "field"), [("10,32,0.1,0.0", "placement"), ("x1,32,0.1,0.0", "placement"),
                                            ("2,0,0.1,0.0", "local_bsz"), ("2,32,abc,0.0", "step_time"),
                                            ("2,32,0.1,-1", "sync_time"), ("2,32,0,0", "step_time")])
def test_sia_bad_row_names_file_line_and_field(tmp_path, row, field):
    path = _write(tmp_path / "bert" / "placements-dgx.csv",
                  f"placement,local_bsz,step_time,sync_time\n1,32,0.1,0\n{row}\n")
    with pytest.raises(MeasurementError) as err:
        sets.load_sia_placements(tmp_path, models=("bert",), clusters=("dgx",))
    assert str(path) in str(err.value) and "line 3" in str(err.value) and field in str(err.value)


def test_sia_scalability_even_counts(tmp_path):
    assert sets.even_counts(3, 8) == (3, 3, 2) and sets.even_counts(2, 2) == (1, 1)
    _write(tmp_path / "imagenet" / "scalability-aws.csv",
           "num_nodes,num_replicas,local_bsz,step_time,sync_time\n3,8,20,0.3,0.1\n")
    df = sets.load_sia_scalability(tmp_path, models=("imagenet",), clusters=("aws",))
    assert df.loc[0, "counts"] == (3, 3, 2) and df.loc[0, "placement"] == "332" and df.loc[0, "gpus"] == 8
    _write(tmp_path / "imagenet" / "scalability-aws.csv",
           "num_nodes,num_replicas,local_bsz,step_time,sync_time\n4,3,20,0.3,0.1\n")
    with pytest.raises(MeasurementError, match="line 2.*num_replicas"):
        sets.load_sia_scalability(tmp_path, models=("imagenet",), clusters=("aws",))


@pytest.mark.parametrize(("system", "device", "gpus", "twin", "key"), [
    ("2x2080TiNVlink_trt", "RTX2080Ti", 2, "nvlink", "2080Ti_trt"),
    ("8xQuadroRTX8000_trt2", "RTX8000", 8, "pcie", "QuadroRTX8000_trt2"),
    ("LambdaCloud_4xQuadroRTX6000", "RTX6000", 4, None, None),
    ("8xA100_40GB_SXM4_v1", "A100-SXM4", 8, None, None),
    ("LambdaCloud_2xV100_16GB_v1", "V100-SXM2", 2, None, None),
    ("p3.16xlarge", "V100-SXM2", 8, None, None),
])
def test_lambda_system_names(system, device, gpus, twin, key):
    info = sets.lambda_system(system)
    assert (info["device"], info["gpus"], info["twin"], info["twin_key"]) == (device, gpus, twin, key)


def test_lambda_unknown_system_is_none():
    assert sets.lambda_system("2xFooBar") is None and sets.lambda_system("QuadroRTX8000") is None


_LAMBDA_HEADER = ("results_dir,system,task,precision_dir,run_file,throughput,path,config_file,num_gpu_config,"
                  "batch_size_config\n")


def _lambda_line(system, task, precision, throughput, gpus, batch):
    return (f"results,{system},{task},{precision},r.txt,{throughput},p/{system}.txt,scripts/config_v1/c.sh,"
            f"{gpus},{batch}\n")


def test_lambda_multi_parsed_exactly(tmp_path):
    _write(tmp_path / "lambda_runs.csv", _LAMBDA_HEADER
           + _lambda_line("2080Ti", "resnet50", "FP32", 100.0, 1.0, 64)            # 1 GPU: not here
           + _lambda_line("2x2080TiNVlink_trt", "resnet50", "FP32", 190.0, 2.0, 64)
           + _lambda_line("2x2080Ti_trt", "resnet50", "AMP", 180.0, 2, 64)
           + _lambda_line("2x2080Ti_trt", "ncf", "FP32", 5000.0, 2, 64)            # no zoo model
           + _lambda_line("2x2080Ti_trt", "resnet50", "FP16", "", 2, 64))          # failed run
    df = sets.load_lambda_multi(tmp_path)
    assert df["system"].tolist() == ["2x2080TiNVlink_trt", "2x2080Ti_trt"]
    assert df["twin"].tolist() == ["nvlink", "pcie"] and set(df["twin_key"]) == {"2080Ti_trt"}
    assert df["precision"].tolist() == ["fp32", "amp"] and df["workload"].tolist() == ["resnet50_imagenet"] * 2
    assert df["seconds"].tolist() == pytest.approx([64 * 2 / 190.0, 64 * 2 / 180.0])
    assert df["config_version"].tolist() == ["v1", "v1"]
    assert df["origin"].tolist() == [f"{tmp_path.name}/lambda_runs.csv:{n}" for n in (3, 4)]
    assert df.attrs["excluded_counts"] == {"task ncf: no zoo model": 1, "no parsed throughput": 1}


def test_lambda_multi_bad_row(tmp_path):
    path = _write(tmp_path / "lambda_runs.csv", _LAMBDA_HEADER
                  + _lambda_line("2x2080Ti_trt", "resnet50", "FP32", "fast", 2, 64))
    with pytest.raises(MeasurementError) as err:
        sets.load_lambda_multi(tmp_path)
    assert str(path) in str(err.value) and "line 2" in str(err.value) and "throughput" in str(err.value)


def _gavel(tmp_path, lm2="30.0"):
    body = {}
    for gpu in ("k80", "p100", "v100"):
        body[gpu] = {"('LM (batch size 5)', 1)": {"null": 10.0}, "('LM (batch size 5)', 2)": {"null": 16.0},
                     "('A3C', 2)": {"null": 1.0}}
        body[f"{gpu}_unconsolidated"] = {"('LM (batch size 5)', 1)": {"null": 10.0},
                                         "('LM (batch size 5)', 2)": {"null": 8.0}}
    body["v100"]["('LM (batch size 5)', 2)"] = {"null": json.loads(lm2) if lm2[0].isdigit() else lm2}
    return _write(tmp_path / "gavel.json", json.dumps(body))


def test_gavel_placements_parsed_exactly(tmp_path):
    df = sets.load_gavel_placements(_gavel(tmp_path))
    assert df["device"].tolist() == ["K80", "P100", "V100"] and set(df["gpus"]) == {2}
    assert df["consolidated_steps_s"].tolist() == [16.0, 16.0, 30.0]
    assert set(df["unconsolidated_steps_s"]) == {8.0} and set(df["single_steps_s"]) == {10.0}
    assert set(df["workload"]) == {"lstm_wikitext2"} and set(df["batch"]) == {5}
    assert df.attrs["excluded_counts"] == {"job A3C: no zoo model": 3}


def test_gavel_bad_throughput(tmp_path):
    with pytest.raises(MeasurementError) as err:
        sets.load_gavel_placements(_gavel(tmp_path, lm2="fast"))
    assert "gavel.json" in str(err.value) and "'v100'" in str(err.value) and "null" in str(err.value)


def test_neusight_dp(tmp_path):
    folder = tmp_path / "NVIDIA_A100-SXM4-40GB"
    _write(folder / "gpt2_large-train-1024-4-dp4.json", json.dumps({"e2e_latency": 452.3}))
    _write(folder / "gpt2_large-train-1024-4-tp4.json", json.dumps({"e2e_latency": 484.9}))
    df = sets.load_neusight_dp(tmp_path)
    assert len(df) == 1 and df.loc[0, "gpus"] == 4 and df.loc[0, "per_gpu_batch"] == 1 and df.loc[0, "seq"] == 1024
    assert df.loc[0, "measured_s"] == pytest.approx(0.4523) and df.loc[0, "device"] == "A100-SXM4"
    _write(folder / "gpt2_large-train-1024-4-dp4.json", json.dumps({"e2e_latency": -1}))
    with pytest.raises(MeasurementError, match="dp4.json: field 'e2e_latency'|e2e_latency"):
        sets.load_neusight_dp(tmp_path)


# --- the composition by hand ---------------------------------------------------------------------


def _toy_params():
    return params_from_json({
        "protocols": {"ll": {"call_s": 1e-5, "share": 0.5}, "simple": {"call_s": 2e-5, "share": 1.0}},
        "links": {k: {"alpha_s": 1e-6, "efficiency": 1.0} for k in ("nvlink", "pcie", "pcie_host")},
        "network": {"alpha_s": 1e-6, "stream_bps": 1e9, "streams": 1}})


def test_predict_step_by_hand():
    """2 GPUs on 2 nodes, buckets 1 MB and 3 MB, a 10 ms step with 60 % backward. Ring on N = 2: 2
    steps, 1/2 of the message each: Simple 20 µs + 2 µs + bytes / 1 GB/s (LL: 10 + 2 µs + bytes /
    0.5 GB/s is slower) = 1.022 ms and 3.022 ms. Bucket 1 ready at 6 ms × 1/4 = 1.5 ms, done 2.522
    ms; bucket 2 ready at 6 ms, done 9.022 ms; step = 4 ms (forward + update) + 9.022 ms."""
    t4 = gpu_interconnect(entry("T4"))
    total, allreduce = pv.predict_step(0.010, 0.6, [1_000_000, 3_000_000], (1, 1), t4, _toy_params())
    assert allreduce == pytest.approx(1.022e-3 + 3.022e-3)
    assert total == pytest.approx(0.004 + 0.009022)
    # a node's 0.5 GB/s line rate halves the network bandwidth: 2.022 + 6.022 ms of all-reduce
    total, allreduce = pv.predict_step(0.010, 0.6, [1_000_000, 3_000_000], (1, 1), t4, _toy_params(), 0.5e9)
    assert allreduce == pytest.approx(2.022e-3 + 6.022e-3)
    # one GPU: the 1-GPU step, to the bit
    assert pv.predict_step(0.010, 0.6, [1_000_000, 3_000_000], (1,), t4, _toy_params()) == (0.010, 0.0)


class _StubPhases:
    """Fixed backward share and buckets: the Sia composition without a capture."""

    def capture(self, configs):
        pass

    def backward_share(self, config, device, allow_tf32=False):
        return 0.6

    def buckets(self, config):
        return [1_000_000, 3_000_000]


def test_sia_prediction_composed_and_out_of_sample(tmp_path):
    _write(tmp_path / "cifar10" / "placements-aws.csv",
           "placement,local_bsz,step_time,sync_time\n1,32,0.010,0\n11,32,0.5,0.4\n4,32,0.02,0.005\n2,64,0.3,0\n")
    rows = sets.load_sia_placements(tmp_path, models=("cifar10",), clusters=("aws",))
    out = pv.sia_predictions(rows, _StubPhases(), _toy_params()).set_index("placement")
    assert out.attrs["no_single"] == 1  # "2" at batch 64 has no 1-GPU row
    # aws: T4 links, 50 Gb/s network (above the toy's 1 GB/s stream): the hand case above
    assert out.loc["11", "predicted_s"] == pytest.approx(0.013022)
    assert out.loc["11", "perfect_s"] == 0.010 and out.loc["11", "label"] == pv.LABEL
    assert out.loc["4", "predicted_s"] < out.loc["11", "predicted_s"]  # PCIe in one node beats the network
    # out of sample: the multi-GPU rows' own times never enter their prediction
    rows.loc[rows["gpus"] > 1, "step_time"] *= 10
    again = pv.sia_predictions(rows, _StubPhases(), _toy_params()).set_index("placement")
    assert again["predicted_s"].tolist() == out["predicted_s"].tolist()


def test_summary_and_report_by_hand(tmp_path):
    rows = pd.DataFrame({"set": "Sia placements", "group": "aws (T4)", "device": "T4", "workload": "w", "batch": 8,
                         "placement": ["2", "11", "1111", "22", "13"], "gpus": [2, 2, 4, 4, 4],
                         "nodes": [1, 2, 4, 2, 2],
                         "measured_s": [1.0, 2.0, 4.0, 2.0, 3.0], "predicted_s": [1.1, 1.6, 3.0, 1.0, 2.0],
                         "perfect_s": 1.0, "compute_s": 1.0, "allreduce_s": 0.1,
                         "measured_sync_s": [0.0, 1.0, 3.0, 1.0, 2.0], "label": pv.LABEL, "origin": "x"})
    result = {"rows": rows, "twins": pd.DataFrame(), "gavel_ratios": pd.DataFrame(), "notes": ["n"]}
    table = pv.summary(result).set_index("set")
    # errors 10, 20, 25, 50, 33.3 % -> median 25 %; perfect scaling 0, 50, 75, 50, 66.7 % -> 50 %
    assert table.loc["Sia placements, all multi-GPU rows", "ours"] == pytest.approx(0.25)
    assert table.loc["Sia placements, all multi-GPU rows", "perfect_scaling"] == pytest.approx(0.5)
    assert table.loc["Sia placements, > 2 nodes", "ours"] == pytest.approx(0.25)
    # 4 GPUs: predicted 3.0, 1.0, 2.0 vs measured 4.0, 2.0, 3.0 -> same order, rho 1
    assert table.loc["Sia placements, order at equal GPU count", "ours"] == pytest.approx(1.0)
    pv.write_report(tmp_path, result)
    text = (tmp_path / "multi_gpu.md").read_text()
    assert "| Sia placements, all multi-GPU rows | 5 | median abs. error of the step | 25.0% | 50.0% | ≤ 12% | no |" \
        in text
    assert (tmp_path / "multi_gpu.csv").is_file() and (tmp_path / "multi_gpu.png").is_file()


# --- the real sets -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def calibration(shared_dir):
    path = shared_dir / "calibration"
    if not (path / "sia_placements").is_dir():
        pytest.skip(f"{path}: no sia_placements")
    return path


def test_shipped_links_saw_none_of_these_sets():
    fitted = shipped_params().provenance["fitted_on"] + shipped_params().provenance["data"]
    assert "Vidur" in fitted and not any(s in fitted for s in ("Sia", "sia_placements", "Lambda", "Gavel", "NeuSight"))


def test_real_sia_out_of_sample(calibration):
    """Two batch sizes of ResNet-18 (CIFAR) on the T4 cluster: every multi-GPU row predicted,
    finite, at least its 1-GPU step, and unchanged when the rows' own measurements change."""
    rows = sets.load_sia_placements(calibration / "sia_placements", models=("cifar10",), clusters=("aws",))
    rows = rows[rows["local_bsz"].isin(sorted(set(rows["local_bsz"]))[:2])].reset_index(drop=True)
    phases = pv.Phases()
    out = pv.sia_predictions(rows, phases)
    assert len(out) == (rows["gpus"] > 1).sum() > 50 and out.attrs["no_single"] == 0
    assert np.isfinite(out["predicted_s"]).all() and (out["predicted_s"] >= out["perfect_s"]).all()
    assert (out["nodes"] > 2).any() and set(out["label"]) == {pv.LABEL}
    rows.loc[rows["gpus"] > 1, "step_time"] = 99.0
    assert pv.sia_predictions(rows, phases)["predicted_s"].tolist() == out["predicted_s"].tolist()


def test_real_gavel_resnet18_out_of_sample(calibration):
    """Gavel's ResNet-18 (CIFAR) jobs: spread is never predicted faster than packed; the
    prediction uses the 1-GPU throughput only."""
    rows = sets.load_gavel_placements(calibration / "gavel_physical_cluster_throughputs.json")
    rows = rows[rows["workload"] == "resnet18_cifar"]
    predicted = pv.gavel_predictions(rows, pv.Phases())
    ratios = pv.gavel_ratios(predicted)
    assert len(ratios) == 45 and np.isfinite(ratios[["measured", "predicted"]]).all().all()
    assert (ratios["predicted"] >= 1).all()
    rows = rows.assign(consolidated_steps_s=1.0, unconsolidated_steps_s=1.0)
    assert pv.gavel_predictions(rows, pv.Phases())["predicted_s"].tolist() == predicted["predicted_s"].tolist()


def test_real_neusight_dp4_within_target(calibration):
    """GPT-2 large, 4 A100 SXM4, per-GPU batch 1: the emulated forward + backward plus the
    spec-derived all-reduces of its 774 M float32 gradients, within 10 % of the label."""
    dp = sets.load_neusight_dp(calibration / "neusight" / "labels")
    out = pv.neusight_predictions(dp, pv.Phases())
    assert len(out) == 1 and np.isfinite(out["predicted_s"]).all()
    assert out.loc[0, "allreduce_s"] > 0.01  # 3.1 GB of gradients in 25 MB buckets
    assert abs(out.loc[0, "predicted_s"] / out.loc[0, "measured_s"] - 1) <= pv.NEUSIGHT_TARGET


def test_cli_multi_gpu_only_on_a_small_sia_folder(tmp_path):
    """`ets devices validate --multi-gpu-only` on one Sia file: the table, the files, the skipped
    sets named; a malformed row is one line naming it."""
    from click.testing import CliRunner

    from predictor.cli import main as ets

    cal = tmp_path / "cal"
    _write(cal / "sia_placements" / "cifar10" / "placements-aws.csv",
           "placement,local_bsz,step_time,sync_time\n1,32,0.043,0.001\n2,32,0.049,0.004\n11,32,0.104,0.062\n"
           "1111,32,0.127,0.085\n")
    args = ["devices", "validate", "--multi-gpu-only", "--calibration", str(cal), "--report", str(tmp_path / "r"),
            "--cache", str(tmp_path / "seqs.parquet")]
    result = CliRunner().invoke(ets, args)
    assert result.exit_code == 0, result.output
    assert "| Sia placements, all multi-GPU rows | 3 |" in result.output and "Lambda: " in result.output
    assert {p.name for p in (tmp_path / "r").iterdir()} >= {"multi_gpu.md", "multi_gpu.csv", "multi_gpu.png"}
    _write(cal / "sia_placements" / "cifar10" / "placements-aws.csv",
           "placement,local_bsz,step_time,sync_time\n1,32,0.043,0.001\n2,32,slow,0.004\n")
    result = CliRunner().invoke(ets, [*args, "--overwrite"])
    assert result.exit_code == 1 and "Traceback" not in result.output
    assert "placements-aws.csv: line 3: field 'step_time'" in result.output

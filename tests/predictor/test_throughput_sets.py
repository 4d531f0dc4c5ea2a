"""Lambda and pytorch-gpu-benchmark iteration-time sets: hand-checkable tiny CSV fixtures, the
zoo configs and phases of their rows, saturation, the relative-time table, malformed inputs, and
the real shared files (skipped without them)."""

from __future__ import annotations

import csv
import math
from pathlib import Path

import pytest

from predictor.common.op_trace import PHASES
from predictor.emulator.devices import throughput_sets as ts
from predictor.emulator.devices.measurements import MeasurementError

LAMBDA_HEADER = ["results_dir", "system", "task", "precision_dir", "run_file", "throughput", "pattern_version", "path",
                 "config_file", "num_gpu_config", "batch_size_config", "batch_source", "params_tokens",
                 "gpu_model_guess"]
PGB_HEADER = ["source_file", "device", "num_gpus", "precision", "mode", "model", "n_iters", "mean_ms", "median_ms",
              "std_ms", "min_ms", "batch_per_gpu", "global_batch", "batch_note"]
_FLAGS = {"FP32": "", "FP16": " --fp16", "AMP": " --amp"}


def lam(system, task, precision, throughput, batch, gpus="1.0", version="v0", run="r.txt", params=None):
    """One lambda_runs.csv row (the columns the loader reads, plus the others as in the file)."""
    if params is None:
        params = (f"bert args ckpt 2.0 {batch} 0.0 {precision.lower()} 1 1" if task.startswith("bert")
                  else f"examples/x args --batch-size {batch}{_FLAGS.get(precision, '')}")
    return ["results", system, task, precision, run, throughput, "0.0",
            f"pytorch/results/{system}/PyTorch_{task}_{precision}/{run}",
            f"pytorch/scripts/config_{version}/config_pytorch_{system}.sh", gpus, batch, "--batch-size", params, "?"]


def write(path: Path, header: list[str], rows: list[list]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(header)
        writer.writerows(rows)
    return path


def lambda_root(tmp_path: Path, rows: list[list], header: list[str] = LAMBDA_HEADER) -> Path:
    write(tmp_path / "lambda" / ts.LAMBDA_FILE, header, rows)
    return tmp_path / "lambda"


def pgb(device, precision, mode, model, median_ms, batch="12.0", gpus="1", source="raw/a.csv"):
    return [source, device, gpus, precision, mode, model, "50", median_ms, median_ms, "1.0", median_ms, batch, batch,
            "note"]


def pgb_root(tmp_path: Path, rows: list[list], header: list[str] = PGB_HEADER) -> Path:
    write(tmp_path / "pgb" / ts.PGB_FILE, header, rows)
    return tmp_path / "pgb"


# --- Lambda -------------------------------------------------------------------------------------


def test_lambda_seconds_precision_tf32_and_exclusions(tmp_path):
    root = lambda_root(tmp_path, [
        lam("V100", "resnet50", "FP32", "400", "200"),                 # line 2: 0.5 s
        lam("A100_SXM4", "resnet50", "FP32", "800", "200"),            # line 3: TF32 (Ampere)
        lam("A100_SXM4", "resnet50", "AMP", "1250", "500"),            # line 4
        lam("2080Ti", "bert_base_squad", "FP16", "80", "20"),          # line 5: 0.25 s
        lam("2080Ti", "ssd", "FP32", "100", "32"),                     # line 6: no zoo model
        lam("2080Ti", "resnet50", "FP32", "", "100"),                  # line 7: failed run
        lam("A100_sonantic_v1", "resnet50", "FP32", "900", "100"),     # line 8: unplaced system
        lam("2xV100", "resnet50", "FP32", "700", "200", gpus="2.0"),   # line 9: 2 GPUs
    ])
    df = ts.load_lambda(root)
    assert list(df.columns) == list(ts.LAMBDA_COLUMNS)
    got = [(r.device, r.workload, r.batch, r.precision, r.tf32) for r in df.itertuples()]
    assert got == [("V100M32", "resnet50_imagenet", 200, "fp32", False),
                   ("A100-SXM4", "resnet50_imagenet", 200, "fp32", True),
                   ("A100-SXM4", "resnet50_imagenet", 500, "amp", False),
                   ("RTX2080Ti", "bert_base_squad", 20, "fp16", False)]
    assert df["seconds"].tolist() == pytest.approx([0.5, 0.25, 0.4, 0.25])
    assert (df["source"] == "lambda").all() and (df["config_version"] == "v0").all()
    assert df["origin"].iloc[0] == "lambda/lambda_runs.csv:2 pytorch/results/V100/PyTorch_resnet50_FP32/r.txt"
    assert all(p == PHASES for p in df["phases"])
    assert df["precision_in_config"].all() and not df["duplicate"].any()
    assert [o.split()[0] for o in df.attrs["excluded"]] == [f"lambda/lambda_runs.csv:{n}" for n in (6, 7, 8)]
    counts = df.attrs["excluded_counts"]
    assert counts["task ssd: no zoo model"] == 1 and counts["no parsed throughput"] == 1
    assert counts["multi-GPU run"] == 1 and sum(counts.values()) == 4
    assert any(k.startswith("system A100_sonantic_v1") for k in counts)

    everything = ts.load_lambda(root, all_tasks=True)
    ssd = everything[everything["task"] == "ssd"]
    assert len(ssd) == 1 and ssd["workload"].iloc[0] is None and ssd["seconds"].iloc[0] == pytest.approx(0.32)
    assert ts.configs(ssd).tolist() == [None]
    assert everything.attrs["all_tasks"] and not df.attrs["all_tasks"]


def test_lambda_duplicates_and_precision_flag(tmp_path):
    root = lambda_root(tmp_path, [
        lam("V100", "resnet50", "FP32", "400", "256", run="a.txt"),
        lam("V100", "resnet50", "FP32", "400", "256", run="b.txt"),   # exact repeat of a.txt
        lam("V100", "resnet50", "FP32", "401", "256", run="c.txt"),
        lam("V100", "resnet50", "FP16", "800", "256", params="x --batch-size 256 --amp"),  # config says AMP
    ])
    df = ts.load_lambda(root)
    assert len(df) == 4  # every run kept
    assert df["duplicate"].tolist() == [False, True, False, False]
    assert df["precision_in_config"].tolist() == [True, True, True, False]


def test_saturated_keeps_every_run_at_the_largest_batch(tmp_path):
    root = lambda_root(tmp_path, [
        lam("V100", "resnet50", "FP32", "300", "64"),
        lam("V100", "resnet50", "FP32", "360", "128", run="a.txt"),
        lam("V100", "resnet50", "FP32", "362", "128", run="b.txt"),
        lam("V100", "resnet50", "AMP", "700", "96"),
        lam("2080Ti", "resnet50", "FP32", "250", "100"),
        lam("2080Ti", "resnet50", "FP32", "200", "50"),
    ])
    df = ts.load_lambda(root)
    sat = ts.saturated(df)
    assert [(r.device, r.precision, r.batch, r.throughput) for r in sat.itertuples()] == [
        ("V100M32", "fp32", 128, 360.0), ("V100M32", "fp32", 128, 362.0), ("V100M32", "amp", 96, 700.0),
        ("RTX2080Ti", "fp32", 100, 250.0)]
    assert sat.attrs["excluded"] == df.attrs["excluded"]
    assert ts.saturated(df.iloc[:0]).empty


def test_lambda_relative_time_by_hand(tmp_path):
    root = lambda_root(tmp_path, [
        # resnet50: equal batches 64 and 128 -> geomean(400/300, 500/250) = sqrt(8/3)
        lam("p3.2xlarge", "resnet50", "FP32", "400", "64"), lam("p3.2xlarge", "resnet50", "FP32", "500", "128"),
        lam("2080Ti", "resnet50", "FP32", "300", "64"), lam("2080Ti", "resnet50", "FP32", "250", "128"),
        # ssd: no equal batch -> largest batch of each side: 150 / 100
        lam("p3.2xlarge", "ssd", "FP32", "100", "32"), lam("p3.2xlarge", "ssd", "FP32", "150", "64"),
        lam("2080Ti", "ssd", "FP32", "60", "16"), lam("2080Ti", "ssd", "FP32", "100", "48"),
        # ignored: fp16, a task the reference lacks, a software version the reference lacks
        lam("2080Ti", "resnet50", "FP16", "900", "64"), lam("2080Ti", "gnmt", "FP32", "5", "64"),
        lam("2080Ti", "ssd", "FP32", "1", "48", version="v1"),
    ])
    df = ts.load_lambda(root, all_tasks=True)
    expected = math.sqrt(math.sqrt(8 / 3) * 1.5)  # 1.5651
    assert ts.lambda_relative_time(df) == {"RTX2080Ti": round(expected, 3), "V100-SXM2": 1.0}
    table = ts.lambda_relative_time_table(df)
    row = table.loc["RTX2080Ti"]
    assert (row["tasks"], row["comparisons"]) == (2, 3)
    assert row["methods"] == {"resnet50": "same batch", "ssd": "largest batch"}
    assert row["per_task"] == {"resnet50": round(math.sqrt(8 / 3), 3), "ssd": 1.5}
    assert ts.lambda_relative_time(df, tasks=("ssd",))["RTX2080Ti"] == 1.5


def test_configs_and_phases(tmp_path):
    root = lambda_root(tmp_path, [
        lam("V100", "resnet50", "FP32", "400", "256"), lam("V100", "resnet50", "FP16", "800", "256"),
        lam("V100", "resnet50", "AMP", "800", "256"), lam("V100", "bert_base_squad", "FP16", "150", "48"),
        lam("V100", "bert_large_squad", "FP32", "12", "12"),
    ])
    ids = [c.config_id for c in ts.configs(ts.load_lambda(root))]
    assert ids[:3] == ["resnet50:b256:s224:float32:sgd:c1000", "resnet50:b256:s224:float16:sgd:c1000",
                       "resnet50:b256:s224:float32:sgd:c1000"]
    assert ids[3].startswith("transformer_encoder:b48:s384:float16:adam:c2")
    assert ids[4] == "bert_large:b12:s384:float32:adam:c2"
    proot = pgb_root(tmp_path, [pgb("TITAN RTX", "float16", "train", "mobilenet_v2", "20.0"),
                                pgb("TITAN RTX", "float32", "inference", "resnet50", "10.0")])
    df = ts.load_pytorch_gpu_benchmark(proot)
    assert [c.config_id for c in ts.configs(df)] == ["mobilenet_v2:b12:s224:float16:sgd:c1000",
                                                    "resnet50:b12:s224:float32:sgd:c1000"]
    assert df["phases"].tolist() == [("forward", "backward"), ("forward",)]


# --- pytorch-gpu-benchmark ----------------------------------------------------------------------


def test_pgb_rows_and_exclusions(tmp_path):
    root = pgb_root(tmp_path, [
        pgb("A100-SXM4-40GB", "float32", "train", "resnet50", "40.0"),                # line 2: TF32
        pgb("GeForce RTX 2080 Ti", "float16", "inference", "vgg16", "12.5"),          # line 3
        pgb("GeForce RTX 2080 Ti", "float16", "inference", "vgg16", "12.5", source="raw/b.csv"),  # duplicate
        pgb("TITAN Xp", "float64", "train", "resnet50", "99"),                         # float64: skipped
        pgb("TITAN Xp", "float32", "train", "resnet50", "30", gpus="2"),               # 2 GPUs
        pgb("TITAN V", "float32", "train", "resnet50", "30", batch=""),                # line 7: no batch
        pgb("TITAN RTX", "float32", "train", "resnext50_32x4d", "30"),                 # line 8: no zoo model
    ])
    df = ts.load_pytorch_gpu_benchmark(root)
    assert list(df.columns) == list(ts.PGB_COLUMNS)
    got = [(r.device, r.workload, r.batch, r.mode, r.precision, r.tf32, r.duplicate) for r in df.itertuples()]
    assert got == [("A100-SXM4", "resnet50", 12, "train", "fp32", True, False),
                   ("RTX2080Ti", "vgg16", 12, "inference", "fp16", False, False),
                   ("RTX2080Ti", "vgg16", 12, "inference", "fp16", False, True)]
    assert df["seconds"].tolist() == pytest.approx([0.04, 0.0125, 0.0125])
    assert df["origin"].iloc[0] == "pgb/summary.csv:2 raw/a.csv"
    assert [o.split()[0] for o in df.attrs["excluded"]] == ["pgb/summary.csv:7", "pgb/summary.csv:8"]
    assert df.attrs["excluded_counts"] == {"batch not recorded": 1, "model resnext50_32x4d: no zoo model": 1,
                                           "multi-GPU run": 1, "precision float64": 1}


# --- bad input ----------------------------------------------------------------------------------


def _raises(call, *parts):
    with pytest.raises(MeasurementError) as info:
        call()
    for part in parts:
        assert part in str(info.value)
    return info.value


def test_lambda_bad_input(tmp_path):
    _raises(lambda: ts.load_lambda(tmp_path / "nowhere"), "lambda_runs.csv", "file not found")
    header = [c for c in LAMBDA_HEADER if c != "batch_size_config"]
    root = lambda_root(tmp_path / "a", [], header=header)
    _raises(lambda: ts.load_lambda(root), "line 1", "field 'batch_size_config'", "column missing")
    cases = [
        (lam("V100", "resnet50", "FP32", "fast", "256"), "field 'throughput'", "not a number"),
        (lam("V100", "resnet50", "FP32", "-3", "256"), "field 'throughput'", "> 0"),
        (lam("V100", "resnet50", "FP32", "400", "lots"), "field 'batch_size_config'", "not a number"),
        (lam("V100", "resnet50", "FP32", "400", "2.5"), "field 'batch_size_config'", "whole number"),
        (lam("V100", "resnet50", "FP32", "400", "64", gpus="one"), "field 'num_gpu_config'", "not a number"),
        (lam("Mystery", "resnet50", "FP32", "400", "64"), "field 'system'", "unknown single-GPU system"),
        (lam("V100", "yolo", "FP32", "400", "64"), "field 'task'", "unknown task"),
        (lam("V100", "resnet50", "BF16", "400", "64"), "field 'precision_dir'", "unknown precision"),
    ]
    for i, (row, field, problem) in enumerate(cases):
        root = lambda_root(tmp_path / f"c{i}", [lam("V100", "resnet50", "FP32", "400", "64"), row])
        error = _raises(lambda root=root: ts.load_lambda(root), "lambda_runs.csv", "line 3", field, problem)
        assert error.where == "line 3"


def test_pgb_bad_input(tmp_path):
    _raises(lambda: ts.load_pytorch_gpu_benchmark(tmp_path), "summary.csv", "file not found")
    header = [c for c in PGB_HEADER if c != "median_ms"]
    root = pgb_root(tmp_path / "a", [], header=header)
    _raises(lambda: ts.load_pytorch_gpu_benchmark(root), "line 1", "field 'median_ms'")
    cases = [
        (pgb("TITAN Xp", "float32", "train", "resnet50", "slow"), "field 'median_ms'", "not a number"),
        (pgb("TITAN Xp", "float32", "train", "resnet50", "0"), "field 'median_ms'", "> 0"),
        (pgb("TITAN Xp", "float32", "train", "resnet50", "5", batch="twelve"), "field 'batch_per_gpu'", "not a number"),
        (pgb("TITAN Z", "float32", "train", "resnet50", "5"), "field 'device'", "unknown device"),
        (pgb("TITAN Xp", "float32", "train", "lenet", "5"), "field 'model'", "unknown model"),
        (pgb("TITAN Xp", "int8", "train", "resnet50", "5"), "field 'precision'", "unknown precision"),
        (pgb("TITAN Xp", "float32", "eval", "resnet50", "5"), "field 'mode'", "unknown mode"),
    ]
    for i, (row, field, problem) in enumerate(cases):
        root = pgb_root(tmp_path / f"c{i}", [pgb("TITAN Xp", "float32", "train", "resnet50", "5"), row])
        _raises(lambda root=root: ts.load_pytorch_gpu_benchmark(root), "summary.csv", "line 3", field, problem)


# --- the real files -----------------------------------------------------------------------------


def test_real_sets(shared_dir):
    calibration = shared_dir / "calibration"
    if not (calibration / "lambda" / ts.LAMBDA_FILE).is_file() or not (
            calibration / "pytorch_gpu_benchmark" / ts.PGB_FILE).is_file():
        pytest.skip(f"{calibration}/lambda or pytorch_gpu_benchmark not found")
    lam_df = ts.load_lambda(calibration / "lambda")
    assert len(lam_df) == 270 and (lam_df["seconds"] > 0).all()
    per_device = lam_df.groupby("device").size().to_dict()
    assert per_device["V100M32"] == 7 and per_device["V100-SXM2"] == 6 and per_device["A100-SXM4"] == 20
    assert per_device["RTX3090"] == 18 and len(per_device) == 28
    assert set(lam_df["task"]) == set(ts.LAMBDA_TASKS)
    assert lam_df.attrs["excluded_counts"]["multi-GPU run"] == 2077
    assert ts.configs(lam_df).notna().all()

    pgb_df = ts.load_pytorch_gpu_benchmark(calibration / "pytorch_gpu_benchmark")
    assert pgb_df.groupby("device").size().to_dict() == {"A100-SXM4": 120, "RTX2080Ti": 240, "TitanRTX": 120,
                                                         "TitanXp": 120}
    assert (pgb_df["seconds"] > 0).all() and set(pgb_df["batch"]) == {12}
    assert pgb_df["duplicate"].sum() == 120  # raw/new_results repeats raw/results/2080ti(2)

    relative = ts.lambda_relative_time(ts.load_lambda(calibration / "lambda", all_tasks=True))
    assert relative["V100-SXM2"] == 1.0 and 0.2 < relative["A100-SXM4"] < 0.5 and relative["GTX1080Ti"] > 1.5

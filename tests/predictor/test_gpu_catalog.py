"""The GPU catalogue is the only list of GPUs: its files' facts are consistent, every name the
issue asks for resolves, a new file shows up in emulation, cluster files and --help, and a broken
entry is refused naming the file and the field."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from predictor.common import gpus
from predictor.common.inputs import InputError
from predictor.emulator.devices.specs import DeviceParamsError, device_key, load_params, spec_sheets

REPO = Path(__file__).resolve().parents[2]
# FP32 lanes per SM by compute capability (CUDA programming guide, "arithmetic instructions")
LANES = {"3.7": 192, "5.2": 128, "6.0": 64, "6.1": 128, "7.0": 64, "7.5": 64, "8.0": 64, "8.6": 128, "8.9": 128,
         "9.0": 128, "10.0": 128}
REQUIRED = ("H100", "H100-PCIe", "H200", "GH200", "B200", "L4", "L40S", "A10", "A10G", "A40", "A800", "RTX3090",
            "RTX3090Ti", "RTX4090", "RTX6000Ada", "RTXA6000",
            # today's names, unchanged
            "K80", "P4", "P100", "P40", "T4", "V100", "RTX2080Ti", "RTX6000", "RTX3080Ti", "A100", "A100-80GB",
            "MISC", "V100M32")


def test_every_entry_reproduces_its_fp32_peak_from_sms_lanes_and_clock():
    for name, gpu in gpus.catalog().items():
        lanes = LANES[gpu.compute_capability]
        assert gpu.sms * lanes * 2 * gpu.boost_clock_mhz * 1e-6 == pytest.approx(gpu.fp32_tflops, rel=0.02), name


def test_tensor_rates_are_ordered_as_the_hardware_is():
    for name, gpu in gpus.catalog().items():
        if gpu.cc_major >= 8:  # Ampere and later: TF32 and BF16 tensor cores
            assert gpu.fp32_tflops <= gpu.tf32_tflops < gpu.fp16_tflops <= 2.02 * gpu.tf32_tflops, name
            assert gpu.bf16_tflops == pytest.approx(gpu.fp16_tflops), name
        else:
            assert gpu.tf32_tflops == gpu.bf16_tflops == 0, name


@pytest.mark.parametrize("name", REQUIRED)
def test_required_names_work_as_cluster_types_and_emulated_devices(name):
    assert gpus.canonical_gpu_type(name) == name
    assert device_key(f"emulated:{name}") == name
    assert load_params().device(f"emulated:{name}").name == name
    assert gpus.relative_time(name) > 0


def test_device_name_strings_of_the_data_sets_resolve():
    assert gpus.canonical_gpu_type("NVIDIA A100-SXM4-40GB") == "A100-SXM4"
    assert gpus.canonical_gpu_type("NVIDIA GeForce RTX 3090 Ti") == "RTX3090Ti"
    assert gpus.canonical_gpu_type("Tesla T4") == "T4"
    assert gpus.canonical_gpu_type("GTX2080Ti") == "RTX2080Ti"  # Hydra's cases
    assert gpus.canonical_gpu_type("V100-32GB") == "V100M32"  # PAI


def test_unknown_gpu_lists_the_catalogue():
    with pytest.raises(gpus.UnknownGpuTypeError, match=r"unknown GPU type 'H900'; the catalogue .* has: A10, .*H200"):
        gpus.canonical_gpu_type("H900")
    with pytest.raises(DeviceParamsError, match="unknown GPU type 'emulated:H900'.*emulated:<name>"):
        device_key("emulated:H900")


def _catalogue_copy(tmp_path: Path) -> Path:
    folder = tmp_path / "catalogue"
    shutil.copytree(gpus.CATALOG_DIR, folder)
    return folder


def _new_entry(folder: Path, name: str = "X1000", **changes: str) -> Path:
    text = (gpus.CATALOG_DIR / "A10.toml").read_text().split("\n[speed]")[0]  # a measured speed is not copied
    text = text.replace('name = "A10"', f'name = "{name}"').replace('marketing_name = "NVIDIA A10"',
                                                                    f'marketing_name = "Example {name}"')
    text = text.replace('aliases = ["NVIDIA A10"]', f'aliases = ["Example {name} PCIe"]')
    for key, value in changes.items():
        lines = [line for line in text.splitlines() if not line.startswith(f"{key} =")]
        text = "\n".join(lines if value is None else lines[:1] + [f"{key} = {value}"] + lines[1:]) + "\n"
    path = folder / f"{name}.toml"
    path.write_text(text)
    return path


def test_a_new_entry_is_seen_by_emulation_cluster_files_and_help(tmp_path, monkeypatch):
    from predictor.cli import main
    from simulator.cluster import load_file

    folder = _catalogue_copy(tmp_path)
    _new_entry(folder)
    monkeypatch.setenv(gpus.CATALOG_ENV, str(folder))
    assert gpus.canonical_gpu_type("example x1000 pcie") == "X1000"
    assert "X1000" in spec_sheets() and "X1000" in gpus.gpu_names()
    spec = load_params().device("emulated:X1000")
    assert spec.fp32_tflops == 31.2 and "median of" in spec.fitted  # not calibrated: the calibrated medians
    assert gpus.speed("X1000").source == "spec-derived estimate (not measured)"
    cluster_file = tmp_path / "cluster.yaml"
    cluster_file.write_text("nodes:\n  - {gpu_type: X1000, num_gpus: 4, count: 2}\n")
    assert load_file(cluster_file).gpu_types == ["X1000"]
    listing = CliRunner().invoke(main, ["devices", "list"])
    assert listing.exit_code == 0 and "emulated:X1000:" in listing.output
    env = dict(os.environ, **{gpus.CATALOG_ENV: str(folder)})
    for command in (["-c", "from predictor.cli import main; main()", "collect", "--help"],
                    ["-c", "from simulator.cli import main; main()", "--help"]):
        out = subprocess.run([sys.executable, *command], env=env, cwd=REPO, capture_output=True, text=True, timeout=120)
        assert out.returncode == 0 and "X1000" in out.stdout.replace("\n", " "), out.stderr[-500:]


@pytest.mark.parametrize("change, message", [
    ({"sms": None}, r"X1000.toml: lacks field\(s\) sms"),
    ({"fp32_tflops": '"fast"'}, r"X1000.toml: field 'fp32_tflops' must be a number, got 'fast'"),
    ({"memory_gbs": "-1"}, r"X1000.toml: field 'memory_gbs' must be a positive finite number"),
    ({"sms": "72.5"}, r"X1000.toml: field 'sms' must be a whole number"),
    ({"compute_capability": '"Ampere"'}, r"X1000.toml: field 'compute_capability' must look like '8.0'"),
    ({"aliases": '["NVIDIA T4"]'}, r"X1000.toml: name 'NVIDIA T4' also names 'T4'"),
])
def test_a_broken_entry_is_refused_naming_file_and_field(tmp_path, monkeypatch, change, message):
    folder = _catalogue_copy(tmp_path)
    _new_entry(folder, **change)
    monkeypatch.setenv(gpus.CATALOG_ENV, str(folder))
    with pytest.raises(InputError, match=message):
        gpus.catalog()


def test_a_broken_catalogue_is_one_line_from_the_command_line(tmp_path):
    folder = _catalogue_copy(tmp_path)
    (folder / "T4.toml").write_text((folder / "T4.toml").read_text().replace("memory_gbs = 320.0", 'memory_gbs = "x"'))
    env = dict(os.environ, **{gpus.CATALOG_ENV: str(folder)})
    out = subprocess.run([sys.executable, "-c", "from simulator.cli import main; main()", "--policy", "fifo",
                          "--predictor", "truth", "--limit", "5", "--out", str(tmp_path / "run")], env=env, cwd=REPO,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode != 0 and "Traceback" not in out.stderr
    assert "T4.toml: field 'memory_gbs' must be a number" in out.stderr


def test_measured_speeds_say_where_they_come_from():
    sources = {name: gpus.speed(name).source for name in gpus.catalog()}
    assert sources["V100"] == "reference" and sources["T4"] == "sia" and sources["K80"] == "gavel-physical"
    assert sources["A40"].startswith("lambda:") and sources["H100"].startswith("spec-derived")


def test_lambda_speeds_match_the_data(shared_dir):
    from predictor.emulator.devices.throughput_sets import lambda_relative_time, load_lambda

    root = shared_dir / "calibration" / "lambda"
    if not (root / "lambda_runs.csv").exists():
        pytest.skip(f"Lambda benchmark data not found under {root}")
    derived = lambda_relative_time(load_lambda(root, all_tasks=True))
    pinned = {n: g.measured_speed.relative_time for n, g in gpus.catalog().items()
              if g.measured_speed and g.measured_speed.source.startswith("lambda:")}
    assert len(pinned) >= 20
    for name, value in pinned.items():
        assert derived[name] == pytest.approx(value, abs=0.0006), name

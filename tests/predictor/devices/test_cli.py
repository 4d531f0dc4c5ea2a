"""`ets collect --device emulated:<GPU>`, `ets devices list|calibrate`: results and clear errors."""

from __future__ import annotations

import pandas as pd
from click.testing import CliRunner

from predictor.cli import main as ets


def test_collect_on_an_emulated_gpu(tmp_path):
    args = ["collect", "--zoo", "hpo", "--limit", "2", "--max-batch", "4", "--max-size", "64",
            "--device", "emulated:t4", "--workers", "1", "--out", str(tmp_path)]
    result = CliRunner().invoke(ets, args)
    assert result.exit_code == 0, result.output
    traces = pd.read_parquet(tmp_path / "emulated_T4.parquet")
    assert set(traces["device"]) == {"emulated:T4"} and traces["config_id"].nunique() == 2
    assert (traces["duration_us"] >= 0).all() and (traces["gap_us"] >= 0).all()
    again = CliRunner().invoke(ets, args)
    assert "0 captured, 2 already there" in again.output  # resumable under the canonical name


def test_unknown_emulated_gpu_is_a_usage_error(tmp_path):
    result = CliRunner().invoke(ets, ["collect", "--device", "emulated:GTX480", "--out", str(tmp_path)])
    assert result.exit_code == 2 and "unknown GPU type 'emulated:GTX480'" in result.output
    result = CliRunner().invoke(ets, ["collect", "--device", "tpu", "--out", str(tmp_path)])
    assert result.exit_code == 2 and "meta, cpu, cuda or emulated:<GPU>" in result.output


def test_devices_list_names_every_device_as_emulated():
    result = CliRunner().invoke(ets, ["devices", "list"])
    assert result.exit_code == 0, result.output
    for gpu in ("K80", "P100", "T4", "V100", "RTX2080Ti", "A100", "H100"):
        assert f"emulated:{gpu}:" in result.output


def test_calibrate_without_data_names_the_missing_input(tmp_path):
    result = CliRunner().invoke(ets, ["devices", "calibrate", "--calibration", str(tmp_path / "nowhere"),
                                      "--out", str(tmp_path / "p.json"), "--report", str(tmp_path)])
    assert result.exit_code == 1 and "nowhere" in result.output and "Traceback" not in result.output
    assert not (tmp_path / "p.json").exists()


def test_validate_without_data_names_the_missing_input(tmp_path):
    result = CliRunner().invoke(ets, ["devices", "validate", "--calibration", str(tmp_path / "nowhere"),
                                      "--report", str(tmp_path / "report")])
    assert result.exit_code == 1 and "nowhere" in result.output and "Traceback" not in result.output
    assert not (tmp_path / "report").exists()


def test_collect_refuses_to_mix_regimes(tmp_path):
    args = ["collect", "--zoo", "hpo", "--limit", "1", "--max-batch", "4", "--max-size", "64",
            "--device", "emulated:T4", "--workers", "1", "--out", str(tmp_path)]
    assert CliRunner().invoke(ets, args).exit_code == 0
    result = CliRunner().invoke(ets, args + ["--regime", "nsys"])
    assert result.exit_code == 1 and "plain regime, not nsys" in result.output and "Traceback" not in result.output
    result = CliRunner().invoke(ets, ["collect", "--device", "meta", "--regime", "nsys", "--out", str(tmp_path / "m")])
    assert result.exit_code == 2 and "emulated devices only" in result.output

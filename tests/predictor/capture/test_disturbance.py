"""CPU profiles taken beside other work are taken again, and not recorded while disturbed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from predictor.common.op_trace import read_dataset
from predictor.emulator.capture import disturbance
from predictor.emulator.capture.disturbance import CpuSample, DisturbedError, others_load, sample, undisturbed
from predictor.emulator.collect import collect
from predictor.emulator.zoo.config import ModelConfig

TINY = ModelConfig(kind="vision", family="resnet", model="resnet18", batch=2, input_size=16, num_classes=10)


def test_others_load_by_hand():
    # 3 busy CPU-seconds over 2 wall seconds, 1 of them this process's: the others kept 1 core busy
    assert others_load(CpuSample(100.0, 10.0, 0.0), CpuSample(103.0, 11.0, 2.0)) == pytest.approx(1.0)
    assert others_load(CpuSample(100.0, 10.0, 0.0), CpuSample(100.5, 11.0, 2.0)) == 0.0  # tick rounding, not < 0
    assert others_load(None, CpuSample(1.0, 1.0, 1.0)) is None
    assert others_load(CpuSample(1.0, 1.0, 1.0), CpuSample(2.0, 1.0, 1.0)) is None  # no time passed


def test_sample_reads_busy_time_with_steal_and_without_idle(tmp_path):
    stat = tmp_path / "stat"
    # user nice system idle iowait irq softirq steal guest guest_nice
    stat.write_text("cpu  100 5 50 1000 20 3 2 40 7 0\ncpu0 1 2 3 4 5 6 7 8 9 0\n")
    got = sample(stat)
    assert got.busy_s == pytest.approx((100 + 5 + 50 + 3 + 2 + 40) / os.sysconf("SC_CLK_TCK"))
    assert sample(tmp_path / "missing") is None


def probes(loads: list[float]):
    """A probe whose consecutive (before, after) pairs show the given loads of other work."""
    samples, t = [], 0.0
    for load in loads:
        samples += [CpuSample(10 * t, 0.0, t), CpuSample(10 * t + load, 0.0, t + 1.0)]
        t += 1.0
    return iter(samples).__next__


def test_a_disturbed_measurement_is_taken_again():
    calls = []
    result = undisturbed(lambda: calls.append(1) or len(calls), limit=0.25, retries=3, wait_s=0,
                         probe=probes([1.0, 0.6, 0.1]))
    assert result == 3 and len(calls) == 3


def test_every_try_disturbed_names_the_loads():
    calls = []
    with pytest.raises(DisturbedError, match=r"1\.00, 0\.90 cores busy during the 2 tries \(limit 0\.25\)"):
        undisturbed(lambda: calls.append(1), limit=0.25, retries=2, wait_s=0, probe=probes([1.0, 0.9]))
    assert len(calls) == 2


@pytest.mark.skipif(not disturbance.PROC_STAT.exists(), reason="no /proc/stat: the load is unknown off Linux")
def test_a_real_busy_process_is_seen():
    burner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        time.sleep(0.3)  # let it start
        before = sample()
        time.sleep(1.0)  # this process idle: what is busy is the burner
        load = others_load(before, sample())
    finally:
        burner.kill()
        burner.wait()
    assert load is not None and load >= 0.5


def test_collect_records_a_disturbed_profile_as_a_failure_and_profiles_it_on_rerun(tmp_path, monkeypatch):
    monkeypatch.setattr(disturbance, "RETRY_WAIT_S", 0.0)
    monkeypatch.setattr(disturbance, "RETRIES", 1)
    monkeypatch.setattr(disturbance, "sample", probes([2.0]))  # one disturbed try
    first = collect([TINY], "cpu", tmp_path, progress=False)
    assert first["failed"] == 1 and first["captured"] == 0
    failure = json.loads((tmp_path / "failures.jsonl").read_text())
    assert failure["config_id"] == TINY.config_id and failure["error"].startswith("DisturbedError")
    monkeypatch.setattr(disturbance, "sample", probes([0.0]))  # quiet now
    again = collect([TINY], "cpu", tmp_path, progress=False)
    assert again["captured"] == 1
    assert set(read_dataset(tmp_path)["config_id"]) == {TINY.config_id}

"""experiments.cpu_benchmark: the config selection and the report (the profiling itself is
`ets collect --device cpu`, tested in tests/predictor)."""

from __future__ import annotations

import pytest

from experiments import cpu_benchmark


def test_selection_is_capped_stratified_and_covers_every_kind():
    configs = cpu_benchmark.benchmark_configs(120, 8, 128, zoo="all")
    assert len(configs) == 120 and all(c.batch <= 8 and c.input_size <= 128 for c in configs)
    families = {c.family for c in configs}
    assert {"randwire", "transformer", "lstm", "resnet", "vgg"} <= families  # vision, RandWire, NLP, LSTM


def test_report_ratio_and_overhead_by_hand():
    rows = [{"method": "ets", "traces": 10, "mre": 0.04, "rmse_ms": 1.0, "wape": 0.05, "epochs": 3,
             "train_minutes": 1.0, "test_units": ["vgg", "lstm:x"],
             "by_family": {"vgg": {"traces": 4, "mre": 0.05, "signed": 0.01}}},
            {"method": "opbased", "traces": 10, "mre": 0.20, "rmse_ms": 2.0, "wape": 0.2, "epochs": 3,
             "train_minutes": 0.5, "test_units": ["vgg", "lstm:x"]},
            {"method": "dnnperf", "traces": 10, "mre": 0.10, "rmse_ms": 1.5, "wape": 0.1, "epochs": 3,
             "train_minutes": 0.7, "test_units": ["vgg", "lstm:x"]}]
    info = {"iterations": 12, "rows": 3400, "iteration_ms_median": 31.0, "per_family": {"vgg": 4, "lstm": 8},
            "overhead_share": {"p50": 0.1, "p90": 0.4}}
    text = cpu_benchmark.report(rows, info, 12, 1)
    assert "ETS / best baseline (dnnperf): 0.40." in text
    assert "p50 10.0%, p90 40.0%" in text and "Held-out units: vgg, lstm:x." in text
    assert "1 intra-op thread" in text and "Habitat-style is not run" in text
    assert "| vgg | 4 | 5.0% | – | – |" in text  # per family, where a method recorded it


def test_wide_selection_leaves_reserved_and_costly_configs_out_and_balances_every_prefix():
    from predictor.common.families import is_reserved

    configs = cpu_benchmark.benchmark_configs(400, 8, 128)
    families = [c.family for c in configs]
    assert len(set(families)) >= 100 and not any(is_reserved(f) for f in families)
    assert all((cpu_benchmark.estimated_step_ms(c) or 0) <= 400 for c in configs)
    counts = {f: families.count(f) for f in set(families)}
    assert max(counts.values()) - min(counts.values()) <= 3  # round-robin: a family runs out, none leads


def test_estimated_step_time_by_hand():
    from predictor.emulator.zoo import hf_models, timm_models

    name = timm_models.FAMILIES["starnet"][0]
    probe = timm_models.MODELS[name]
    config = timm_models.config_for(name, batch=8, size=probe["sizes"][0] * 2)
    assert cpu_benchmark.estimated_step_ms(config) == pytest.approx(probe["cpu_ms"] * 4 * 4)  # 4x pixels, 4x batch
    base = hf_models.config_for("llama", batch=2, seq=64, preset="L2-H128")
    assert cpu_benchmark.estimated_step_ms(base) == pytest.approx(hf_models.MODELS["llama"]["cpu_ms"])
    bigger = hf_models.config_for("llama", batch=4, seq=128, preset="L4-H256")
    work = (4 * 12 * 256 ** 2 + 8192 * 256) / (2 * 12 * 128 ** 2 + 4096 * 128)  # layers' GEMMs + output layer
    assert cpu_benchmark.estimated_step_ms(bigger) == pytest.approx(hf_models.MODELS["llama"]["cpu_ms"] * 4 * work)


def test_a_set_measured_on_another_cpu_is_not_added_to(tmp_path, monkeypatch):
    import json

    import click

    cpu_benchmark.check_machine(tmp_path)
    recorded = json.loads((tmp_path / "machine.json").read_text())
    assert recorded["cpu"] and recorded["torch"]
    cpu_benchmark.check_machine(tmp_path)  # the same machine: goes on
    (tmp_path / "machine.json").write_text(json.dumps({**recorded, "cpu": "Other CPU"}))
    with pytest.raises(click.ClickException, match="measured on 'Other CPU'"):
        cpu_benchmark.check_machine(tmp_path)


def test_the_repeat_sample_takes_every_group_in_turn():
    from predictor.emulator.zoo.config import ModelConfig

    def config(family: str, model: str, batch: int) -> ModelConfig:
        return ModelConfig(kind="vision", family=family, model=model, batch=batch, input_size=32)

    configs = [config("resnet", "resnet18", b) for b in range(1, 7)] + [config("vit", "vit_b_16", 1),
                                                                         config("swin", "swin_t", 1)]
    chosen = cpu_benchmark.repeat_sample(configs, 4)
    groups = [("vision transformer" if c.family in ("vit", "swin") else "CNN") for c in chosen]
    assert sorted(groups) == ["CNN", "CNN", "vision transformer", "vision transformer"]
    assert cpu_benchmark.repeat_sample(configs, 4) == chosen  # seeded


def test_peaks_are_recorded_once_before_profiling(tmp_path, monkeypatch):
    from predictor.emulator import peaks

    calls = []
    measured = peaks.Peaks("cpu", {"float32": 5e10}, {"float32": 5e10}, 1e10, "measured: stub")
    monkeypatch.setattr(cpu_benchmark, "measure_cpu", lambda: calls.append(1) or measured)
    cpu_benchmark.record_peaks(tmp_path)
    cpu_benchmark.record_peaks(tmp_path)  # a resumed run keeps the first record
    assert calls == [1] and peaks.recorded(tmp_path, "cpu") == measured


def test_noise_floor_by_hand():
    import pandas as pd

    first = pd.Series({"a": 100.0, "b": 200.0, "c": 50.0, "d": 10.0})
    second = pd.Series({"a": 110.0, "b": 190.0, "c": 50.0})  # d was not profiled again
    got = cpu_benchmark.noise_floor(first, second)
    assert got["configs"] == 3 and got["ratios"] == {"a": 1.1, "b": 0.95, "c": 1.0}
    assert abs(got["median"] - 0.05) < 1e-12 and abs(got["max"] - 0.1) < 1e-12
    assert abs(got["p90"] - 0.09) < 1e-12  # linear between 0.05 and 0.1 at 0.9 of the way from the 2nd
    text = cpu_benchmark.report([], {"iterations": 3, "rows": 9, "iteration_ms_median": 1.0, "per_family": {},
                                     "overhead_share": {"p50": 0.1}}, 3, 1, got)
    assert "Noise floor: 3 configs profiled again after the collection differ from their first profile by 5.0% " \
           "(median), 9.0% (90th percentile), 10.0% (largest)" in text


def test_repeatability_profiles_a_sample_again_once(tmp_path, monkeypatch):
    from predictor.emulator.capture import disturbance
    from predictor.emulator.collect import collect
    from predictor.emulator.zoo.config import ModelConfig

    configs = [ModelConfig(kind="vision", family="resnet", model="resnet18", batch=2, input_size=16, num_classes=10),
               ModelConfig(kind="vision", family="resnet", model="resnet18", batch=4, input_size=16, num_classes=10)]
    monkeypatch.setattr(disturbance, "DISTURBANCE_LIMIT", float("inf"))  # the guard is tested on its own
    collect(configs, "cpu", tmp_path, progress=False)
    first = cpu_benchmark.repeatability(configs, tmp_path, sample=1)
    assert first["configs"] == 1 and set(first["ratios"]) <= {c.config_id for c in configs}
    # the same config, profiled twice on this CPU: the same order of magnitude, not the same time —
    # a fresh process's first profiles run cold (a clean-clone CI measured 0.24), a unit slip is 1000x
    assert 0.05 < next(iter(first["ratios"].values())) < 20.0
    assert cpu_benchmark.repeatability(configs, tmp_path, sample=2) == first  # kept: not profiled again


def test_the_committed_reference_profiles_are_the_benchmarks_own_and_say_what_they_hold():
    import json

    from predictor.common.op_trace import read_dataset
    from predictor.emulator import peaks

    data = cpu_benchmark.FIRST_REFERENCE_DATA
    traces = read_dataset(data)
    assert set(traces["device"]) == {"cpu"} and peaks.recorded(data, "cpu") is not None
    configs = set(traces["config_id"])
    assert configs <= {c.config_id for c in cpu_benchmark.benchmark_configs(1100, 8, 128, zoo="all")}
    noise = json.loads((data / "repeatability.json").read_text())
    assert set(noise["ratios"]) <= configs and noise["configs"] == len(noise["ratios"])
    readme = (data / "README.md").read_text()
    assert f"{len(configs):,} configs" in readme and f"{traces['family'].nunique()} families" in readme


def test_the_wide_reference_profiles_are_a_prefix_of_the_benchmark_on_one_machine():
    import json

    from predictor.common.families import group_of, is_reserved
    from predictor.common.op_trace import read_dataset
    from predictor.emulator import peaks

    data = cpu_benchmark.REFERENCE_DATA
    traces = read_dataset(data)
    assert set(traces["device"]) == {"cpu"} and peaks.recorded(data, "cpu") is not None
    configs = set(traces["config_id"])
    selection = [c.config_id for c in cpu_benchmark.benchmark_configs(2400, 8, 128)]
    last = max(selection.index(c) for c in configs)
    assert configs <= set(selection[: last + 1])  # a prefix, less the configs that failed (listed)
    failed = {json.loads(line)["config_id"] for line in (data / "failures.jsonl").read_text().splitlines()}
    assert set(selection[: last + 1]) - configs <= failed
    assert not any(is_reserved(f) for f in traces["family"].unique())
    machine = json.loads((data / "machine.json").read_text())
    assert machine["cpu"] and machine["torch"]
    noise = json.loads((data / "repeatability.json").read_text())
    assert set(noise["ratios"]) <= configs and len(noise["by_group"]) == len({group_of(f) for f in traces["family"]})
    readme = (data / "README.md").read_text()
    assert f"{len(configs):,} configs" in readme and f"{traces['family'].nunique()} families" in readme


def test_a_noise_floor_that_stays_disturbed_is_one_line_and_keeps_the_profiles(tmp_path, monkeypatch):
    import torch
    from click.testing import CliRunner

    from predictor.emulator.capture.disturbance import DisturbedError

    def disturbed(*args, **kwargs):
        raise DisturbedError("other processes kept 1.00, 1.01, 0.98 cores busy during the 3 tries (limit 0.25)")

    monkeypatch.setattr(cpu_benchmark, "benchmark_configs", lambda *args: [])
    monkeypatch.setattr(cpu_benchmark, "record_peaks", lambda data: None)
    monkeypatch.setattr(cpu_benchmark, "collect", lambda *args, **kwargs: {"failed": 0})
    monkeypatch.setattr(cpu_benchmark, "repeatability", disturbed)
    threads = torch.get_num_threads()
    try:
        result = CliRunner().invoke(cpu_benchmark.main, ["--out", str(tmp_path)])
    finally:
        torch.set_num_threads(threads)
    assert result.exit_code == 1
    assert f"Error: noise floor of {tmp_path / 'data'}: other processes kept 1.00" in result.output
    assert "Traceback" not in result.output

"""experiments.cpu_benchmark: the config selection and the report (the profiling itself is
`ets collect --device cpu`, tested in tests/predictor)."""

from __future__ import annotations

from experiments import cpu_benchmark


def test_selection_is_capped_stratified_and_covers_every_kind():
    configs = cpu_benchmark.benchmark_configs(120, 8, 128)
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


def test_peaks_are_recorded_once_before_profiling(tmp_path, monkeypatch):
    from predictor import peaks

    calls = []
    measured = peaks.Peaks("cpu", {"float32": 5e10}, {"float32": 5e10}, 1e10, "measured: stub")
    monkeypatch.setattr(cpu_benchmark, "measure_cpu", lambda: calls.append(1) or measured)
    cpu_benchmark.record_peaks(tmp_path)
    cpu_benchmark.record_peaks(tmp_path)  # a resumed run keeps the first record
    assert calls == [1] and peaks.recorded(tmp_path, "cpu") == measured

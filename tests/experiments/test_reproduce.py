"""`python -m experiments.reproduce --quick`: every table of the paper regenerated from what ships."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from experiments.reproduce import ERRORS, METHODS, main
from predictor.checkpoints import available

pytestmark = pytest.mark.skipif(
    not all({"T4", "P100", "V100"} <= set(available(method=m)) for m in METHODS),
    reason="the shipped checkpoints (python -m experiments.pretrain) are missing")


def test_quick_reproduction_writes_every_section(tmp_path, monkeypatch):
    monkeypatch.setenv("ETS_SIM_CACHE", str(tmp_path / "cache"))
    out = tmp_path / "reproduce"
    result = CliRunner().invoke(main, ["--quick", "--out", str(out), "--workers", "1",
                                       "--ablations", str(tmp_path / "none")])
    assert result.exit_code == 0, result.output
    text = (out / "README.md").read_text()
    for section in ("Predictor accuracy", "Error by op count", "Convergence", "Window / stride",
                    "Scheduling with predicted run times", "Error sweep", "Reliability of the prediction intervals",
                    "Risk-aware deadline planning", "What prediction error costs preemptive",
                    "beside the peers' own simulators", "charged for their placement"):
        assert section in text
    body = json.loads((out / "results.json").read_text())
    assert {(r["method"], r["device"]) for r in body["accuracy"]} == {
        (m, f"emulated:{g}") for m in METHODS for g in ("T4", "P100", "V100")}
    assert all(0 <= r["mre"] < 5 and r["traces"] >= 20 for r in body["accuracy"])
    scheduling = body["scheduling"]
    truth = [r for r in scheduling if r["predictor"] == "truth"]
    assert truth and all(r["jct_mean_ratio"] == pytest.approx(1.0) for r in truth)
    assert {r["predictor"] for r in scheduling} == {"truth", "ets", "habitat", "dnnperf"}
    errors = {r["predictor"] for r in body["error_sweep"]}
    assert errors == {"truth"} | {f"noisy:{e:g}" for e in ERRORS}
    assert (out / "convergence.png").exists() and (out / "predictors").is_dir()
    # every shipped checkpoint's 90 % intervals, scored leave-family-out, and the risk experiment
    assert all(r["interval_coverage"] is None or 0 <= r["interval_coverage"] <= 1 for r in body["accuracy"])
    assert (out / "reliability.png").exists() and (out / "risk" / "risk_tradeoff.png").exists()
    assert {(r["policy"], r["setting"]) for r in body["risk"]} == {(p, s) for p in ("hydra", "edf")
                                                                   for s in ("point", "0.9")}
    # preemptive against non-preemptive: every policy with every predictor; Tiresias reads no
    # prediction, so its every ratio is exactly 1
    preemption = body["preemption"]
    assert {r["policy"] for r in preemption} == {"sjf", "srtf", "hydra", "gavel", "tiresias"}
    assert {r["predictor"] for r in preemption} == {"truth", "ets", "habitat", "dnnperf", "noisy:0.1", "noisy:0.2",
                                                    "noisy:0.4"}
    assert all(r["jct_mean_ratio"] == 1.0 for r in preemption if r["policy"] == "tiresias" or r["predictor"] == "truth")
    assert (out / "preemption" / "preemption.png").exists()
    # the peers' own simulators: Tiresias always (its runs and inputs ship), Gavel where its throughputs are
    assert {r["peer"].split("@")[0] for r in body["peers"]} >= {"tiresias"}
    assert all(abs(r["avg_jct_s_ratio"] - 1) < 0.02 for r in body["peers"])
    # placement: each rule beside blind timing; blind is the unit of its own ratio, and a job's
    # communication is never negative
    placement = body["placement"]
    assert {r["placement"] for r in placement} == {"blind", "consolidate", "spread", "tiresias"}
    assert all(r["jct_vs_blind"] == 1.0 and r["communication_share"] == 0.0
               for r in placement if r["placement"] == "blind")
    assert all(r["communication_share"] >= 0 for r in placement)
    assert (out / "placement" / "placement.png").exists()


def test_the_scheduling_table_pools_over_seeds_as_the_sweep_table_and_plots():
    import pandas as pd

    from experiments.reproduce import pooled_table

    norm = pd.DataFrame({"policy": "hydra", "source": "pai-like:10", "predictor": "ets", "seed": [0, 1],
                         "jct_mean": [110.0, 300.0], "jct_mean_truth": [100.0, 300.0],
                         "tardiness_total": [5.0, 0.0], "tardiness_total_truth": [1.0, 1.0]})
    row = pooled_table(norm).iloc[0]
    assert row["jct_mean_ratio"] == pytest.approx(410 / 400)  # not the mean of 1.1 and 1.0
    assert row["tardiness_total_ratio"] == pytest.approx(5 / 2)
    assert row["jct_mean"] == pytest.approx(205.0)

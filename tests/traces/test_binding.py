"""Predictors in the loop: binding jobs to model configs, iteration-time tables, online feedback,
and `simrun --predictor ets --compare-truth` end to end."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

from policies.base import Policy
from predictor.checkpoints import available
from predictor.common.inputs import InputError
from predictor.tables import IterationTimeTable
from simulator.cli import main as simrun
from simulator.cluster import homogeneous_groups
from simulator.engine import Simulation
from simulator.timing import RuntimePredictor
from tests.records import from_records
from traces.binding import CLASS_SHARES, bind_workload, job_classes
from traces.schema import RUNTIME_PREFIX

CONFIGS = pd.DataFrame({"config_id": ["img1", "img2", "lang1", "speech1"],
                        "family": ["resnet", "vgg", "transformer", "lstm"],
                        "model": ["resnet18", "vgg11", "transformer_encoder", "lstm_speech"],
                        "job_class": ["image", "image", "language", "speech"]})
TRUTH = IterationTimeTable(pd.DataFrame(
    [(c, g, s * f) for c, s in (("img1", 0.1), ("img2", 0.2), ("lang1", 0.05), ("speech1", 0.4))
     for g, f in (("V100", 1.0), ("T4", 3.0))], columns=["config_id", "device", "seconds"]))


def trace(n: int = 40, tags=None):
    return from_records([dict(job_id=f"j{i}", submit_s=float(i), num_gpus=1, duration_s=100.0 + i,
                              gpu_type="T4" if i % 2 else "", workload=(tags[i] if tags else ""))
                         for i in range(n)])


def test_binding_keeps_the_observed_duration_and_sets_per_type_truth():
    bound = bind_workload(trace(), CONFIGS, TRUTH, ["V100", "T4"], "V100", seed=3).jobs
    per_iter = {("img1", "V100"): 0.1, ("img2", "V100"): 0.2, ("lang1", "V100"): 0.05, ("speech1", "V100"): 0.4}
    for _, row in bound.iterrows():
        observed = row["gpu_type"] or "V100"
        seconds = per_iter[(row["config_id"], "V100")] * (3.0 if observed == "T4" else 1.0)
        assert row["iterations"] == pytest.approx(row["duration_s"] / seconds)
        assert row[RUNTIME_PREFIX + observed] == pytest.approx(row["duration_s"])
    ratio = bound[RUNTIME_PREFIX + "T4"] / bound[RUNTIME_PREFIX + "V100"]
    assert np.allclose(ratio, 3.0)


def test_a_jobs_binding_does_not_depend_on_the_other_jobs():
    full = bind_workload(trace(40), CONFIGS, TRUTH, ["V100"], "V100", seed=1).jobs.set_index("job_id")
    part = bind_workload(trace(10), CONFIGS, TRUTH, ["V100"], "V100", seed=1).jobs.set_index("job_id")
    assert (full.loc[part.index, "config_id"] == part["config_id"]).all()
    other = bind_workload(trace(40), CONFIGS, TRUTH, ["V100"], "V100", seed=2).jobs.set_index("job_id")
    assert (other["config_id"] != full["config_id"]).any()


def test_classes_come_from_tags_else_from_the_documented_shares():
    tags = ["bert_base", "lstm_speech", "resnet50", "lstm_lm", ""]
    jobs = pd.DataFrame({"job_id": [f"t{i}" for i in range(5)], "workload": tags})
    assert list(job_classes(jobs, 0))[:4] == ["language", "speech", "image", "language"]
    many = pd.DataFrame({"job_id": [f"u{i}" for i in range(20000)], "workload": ""})
    drawn = pd.Series(job_classes(many, 0)).value_counts(normalize=True)
    for cls, share in CLASS_SHARES.items():
        assert drawn[cls] == pytest.approx(share, abs=0.015)


def test_a_class_without_catalog_configs_is_a_clear_error():
    with pytest.raises(InputError, match="no speech configs"):
        bind_workload(trace(), CONFIGS[CONFIGS["job_class"] != "speech"], TRUTH, ["V100"], "V100")


class Spy(Policy):
    """FIFO on one GPU type that records the estimate of job 0 at every decision."""

    name = "spy"

    def __init__(self):
        self.seen = []

    def schedule(self, view):
        self.seen.append((view.now, view.estimate(0, "V100")))
        free = int(view.free_by_type[0])
        from policies.base import Placement
        return [Placement(j, "V100") for j in sorted(view.waiting)[:free]]


class TenTimes(RuntimePredictor):
    name = "ten-times"

    def runtimes(self, jobs, gpu_types, truth):
        return truth * 10


@pytest.mark.parametrize("observe_after, estimate_at_50", [(None, 1000.0), (10, 100.0)])
def test_online_feedback_replaces_the_estimate_after_k_iterations(observe_after, estimate_at_50):
    jobs = from_records([dict(job_id="a", submit_s=0.0, num_gpus=1, duration_s=100.0, gpu_type="V100"),
                         dict(job_id="b", submit_s=50.0, num_gpus=1, duration_s=10.0, gpu_type="V100")])
    jobs.jobs["iterations"] = [100.0, 10.0]  # 1 s per iteration: K = 10 iterations are seen at t = 10
    spy = Spy()
    sim = Simulation(jobs, homogeneous_groups([("V100", 2, 1)], "n"), spy, TenTimes(), observe_after=observe_after)
    result = sim.run()
    assert dict(spy.seen)[50.0] == estimate_at_50
    # the records keep the prediction the policy started with
    assert result.records.set_index("job_id").loc["a", "predicted_runtime"] == 1000.0


@pytest.mark.skipif(not {"T4", "P100", "V100"} <= set(available()),
                    reason="the shipped ETS checkpoints (experiments.pretrain) are missing")
def test_simrun_with_ets_against_truth_on_the_same_bound_workload(tmp_path, monkeypatch):
    monkeypatch.setenv("ETS_SIM_CACHE", str(tmp_path / "cache"))
    out = tmp_path / "run"
    result = CliRunner().invoke(simrun, ["--policy", "hydra", "--predictor", "ets", "--limit", "40",
                                         "--compare-truth", "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert "against truth" in result.output and "JCT mean" in result.output
    ets_jobs = pd.read_parquet(out / "jobs.parquet")
    truth_jobs = pd.read_parquet(out / "truth" / "jobs.parquet")
    # same jobs, same true run times per type, different plans' inputs
    assert (ets_jobs["job_id"] == truth_jobs["job_id"]).all()
    placed = ets_jobs["true_runtime"].notna()
    assert (ets_jobs.loc[placed, "predicted_runtime"] != ets_jobs.loc[placed, "true_runtime"]).any()
    assert (truth_jobs["predicted_runtime"] == truth_jobs["true_runtime"]).all()
    assert (ets_jobs["jct"] >= ets_jobs["true_runtime"] - 1e-9).all()
    # the table is cached: a second run reads it back
    again = CliRunner().invoke(simrun, ["--policy", "hydra", "--predictor", "ets", "--limit", "40", "--quiet",
                                        "--out", str(tmp_path / "again")])
    assert again.exit_code == 0, again.output
    assert (pd.read_parquet(tmp_path / "again" / "jobs.parquet")["predicted_runtime"]
            .equals(ets_jobs["predicted_runtime"]))

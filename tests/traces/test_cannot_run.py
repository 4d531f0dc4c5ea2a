""""Cannot run on this type": the truth matrix, the engine's rejection with a reason, every policy
placing a job only where it can run, the engine refusing a placement elsewhere, and binding
keeping the marker."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from policies.base import Placement, Policy, PolicyError
from policies.registry import make_policy
from predictor.tables import IterationTimeTable
from simulator.cluster import homogeneous_groups
from simulator.preemption import make_simulation
from simulator.timing import make_predictor, true_runtimes
from tests.records import from_records
from traces.binding import bind_workload
from traces.registry import load_trace

INF = np.inf
CLUSTER = [("A100", 1, 2), ("V100", 1, 2)]  # A100 first: a type-blind policy would take it on ties


def run(records, policy, groups=CLUSTER, predictor="truth"):
    trace = from_records(records)
    policy = make_policy(policy) if isinstance(policy, str) else policy
    sim = make_simulation(trace, homogeneous_groups(groups, "t"), policy, make_predictor(predictor, seed=1))
    return sim, sim.run().records.set_index("job_id")


def job(job_id, a100, v100, submit=0.0, num_gpus=1, **extra):
    """A job with run times on A100 and V100 (INF: cannot run there), observed on one it can run on."""
    seen, duration = ("V100", v100) if np.isfinite(v100) else ("A100", a100) if np.isfinite(a100) else ("", 100.0)
    return {"job_id": job_id, "submit_s": submit, "num_gpus": num_gpus, "duration_s": duration, "gpu_type": seen,
            "runtime_s:A100": a100, "runtime_s:V100": v100, **extra}


def test_the_truth_is_inf_where_the_job_cannot_run_and_scaled_where_unknown():
    jobs = from_records([job("a", INF, 100.0), job("b", np.nan, 100.0),
                         {"job_id": "c", "submit_s": 0.0, "num_gpus": 1, "duration_s": 100.0,
                          "allowed_gpus": "V100|T4"}]).jobs
    truth = true_runtimes(jobs, ["A100", "V100", "T4"], "V100")
    assert truth[0, 0] == INF and truth[0, 1] == 100.0
    from predictor.common.gpus import relative_time

    assert truth[1, 0] == pytest.approx(100.0 * relative_time("A100") / relative_time("V100"))  # empty: scaled
    assert truth[2, 0] == INF and np.isfinite(truth[2, 1:]).all()  # outside allowed_gpus


def test_a_job_no_type_can_run_is_rejected_with_a_reason():
    _, records = run([job("ok", 50.0, 100.0), job("never", INF, INF),
                      {"job_id": "elsewhere", "submit_s": 0.0, "num_gpus": 1, "duration_s": 10.0,
                       "allowed_gpus": "T4|K80"},
                      job("small", 10.0, INF, num_gpus=3, **{"runtime_s:A100": 10.0})], "fifo")
    assert records.loc["ok", "status"] == "completed"
    assert (records.loc[["never", "elsewhere", "small"], "status"] == "rejected").all()
    assert records.loc["never", "reason"] == "the trace says it cannot run on any GPU type of the cluster (A100, V100)"
    assert records.loc["elsewhere", "reason"] == ("the trace says it cannot run on any GPU type of the cluster "
                                                  "(A100, V100); it may run only on T4, K80")
    assert records.loc["small", "reason"] == "needs 3 GPUs of one type; the largest pool has 2"
    _, records = run([job("big", 10.0, INF, num_gpus=2)], "fifo", groups=[("A100", 1, 1), ("V100", 1, 2)])
    assert records.loc["big", "reason"] == ("needs 2 GPUs of one type it can run on: A100 hold at most 1, and the "
                                            "trace says it cannot run on V100")


POLICIES = ["fifo", "sjf", "edf", "allox", "allox:mode=offline", "hydra", "hydra:mode=offline", "srtf", "gavel",
            "tiresias", "tiresias:starve=2"]


@pytest.mark.parametrize("policy", POLICIES)
def test_every_policy_places_a_job_only_where_it_can_run(policy):
    # Jobs v* can run on V100 only, though A100 is faster for them and listed first; a* on A100
    # only; gang jobs too. Every job must complete, each on a type it can run on.
    records = [job(f"v{i}", INF, 300.0 + 10 * i, submit=float(i)) for i in range(5)]
    records += [job(f"a{i}", 100.0 + 5 * i, INF, submit=float(i)) for i in range(3)]
    records += [job("gv", INF, 200.0, submit=2.0, num_gpus=2), job("ga", 90.0, INF, submit=3.0, num_gpus=2)]
    records += [job(f"x{i}", 80.0, 120.0, submit=float(i)) for i in range(4)]
    _, done = run(records, policy)
    assert (done["status"] == "completed").all()
    assert (done.loc[done.index.str.startswith("v") | (done.index == "gv"), "gpu_type"] == "V100").all()
    assert (done.loc[done.index.str.startswith("a") | (done.index == "ga"), "gpu_type"] == "A100").all()
    assert np.isfinite(done["true_runtime"]).all()


def test_policies_see_inf_whatever_the_predictor_says():
    sim, _ = run([job("v", INF, 100.0), job("x", 50.0, 100.0)], "fifo", predictor="noisy:0.3")
    assert sim.initial_predicted[0, 0] == INF and np.isfinite(sim.initial_predicted[0, 1])
    assert np.isfinite(sim.initial_predicted[1]).all()
    assert sim.view.can_run(0).tolist() == [False, True]


class Stubborn(Policy):
    """Places every waiting job on the first type: a policy that ignores "cannot run"."""

    name = "stubborn"

    def schedule(self, view):
        return [Placement(job, view.gpu_types[0]) for job in list(view.waiting)[:1] if view.free_by_type[0]]


def test_the_engine_refuses_a_placement_where_the_job_cannot_run():
    with pytest.raises(PolicyError, match="placed job 0 on A100, where the trace says it cannot run"):
        run([job("v", INF, 100.0)], Stubborn())


def test_binding_keeps_cannot_run():
    configs = pd.DataFrame({"config_id": ["img1"], "family": ["resnet"], "model": ["resnet18"],
                            "job_class": ["image"]})
    table = IterationTimeTable(pd.DataFrame([("img1", "V100", 0.1), ("img1", "A100", 0.05)],
                                            columns=["config_id", "device", "seconds"]))
    bound = bind_workload(from_records([job("v", INF, 100.0), job("x", 60.0, 100.0)]), configs, table,
                          ["A100", "V100"], "V100").jobs.set_index("job_id")
    assert bound.loc["v", "runtime_s:A100"] == INF and bound.loc["v", "runtime_s:V100"] == pytest.approx(100.0)
    assert bound.loc["x", "runtime_s:A100"] == pytest.approx(50.0)  # the config's truth, as for any bound job


def test_binding_gives_a_named_catalog_model_its_nearest_config():
    from traces.binding import assign_configs, named_configs

    configs = pd.DataFrame({"config_id": ["densenet121:b64:s128:float32:sgd:c1", "densenet121:b256:s512:float32:sgd:c2",
                                          "densenet121:b64:s512:float16:sgd:c3", "gpt3_xl:b8:s2048:float16:adam:c4"],
                            "family": ["densenet", "densenet", "densenet", "gpt"],
                            "model": ["densenet121", "densenet121", "densenet121", "gpt3_xl"],
                            "job_class": ["image", "image", "image", "language"]})
    jobs = pd.DataFrame({"job_id": list("abcde"), "workload": ["DenseNet-121", "densenet121", "densenet121",
                                                               "ResNet-50", ""],
                         "model": ["DenseNet-121", "densenet121", "densenet121", "ResNet-50", ""],
                         "batch": pd.array([200, 64, None, None, None], dtype="Int64"),
                         "input_size": pd.array([None, 512, None, None, None], dtype="Int64"),
                         "dtype": ["", "float32", "float16", "", ""]})
    named = named_configs(jobs, configs)
    assert named.tolist() == ["densenet121:b256:s512:float32:sgd:c2", "densenet121:b64:s128:float32:sgd:c1",
                              "densenet121:b64:s512:float16:sgd:c3", "", ""]
    classes, chosen = assign_configs(jobs, configs, seed=0)
    assert chosen[:3].tolist() == named[:3].tolist() and classes[3] == "image"  # resnet: its class's draw


def test_a_generic_trace_with_never_runs_end_to_end(tmp_path):
    path = tmp_path / "jobs.csv"
    path.write_text("job_id,submit_s,num_gpus,duration_s,runtime_s:A100,runtime_s:V100\n"
                    "a,0,1,,never,100\nb,0,1,,50,never\nc,0,1,70,never,never\n")
    trace = load_trace(f"csv:{path}")
    sim = make_simulation(trace, homogeneous_groups(CLUSTER, "t"), make_policy("sjf"), make_predictor("truth"))
    records = sim.run().records.set_index("job_id")
    assert records["status"].to_dict() == {"a": "completed", "b": "completed", "c": "rejected"}
    assert records.loc["a", "gpu_type"] == "V100" and records.loc["a", "end"] == 100.0
    assert records.loc["b", "gpu_type"] == "A100" and records.loc["b", "end"] == 50.0
    assert records.loc["c", "reason"] == "the trace says it cannot run on any GPU type of the cluster (A100, V100)"

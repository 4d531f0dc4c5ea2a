"""Multi-GPU jobs charged for where they run (simulator/communication.py and the engines): the
data-parallel step by hand on a two-bucket toy, the engine charging the placement a job got by an
exact amount, the placement rules, the trace's ``shape``, and single-GPU jobs untouched."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from policies.registry import make_policy
from predictor.common.gpus import PCIE_LANE_GBS
from predictor.common.inputs import LocatedError, SpecError
from predictor.emulator.devices.collectives import load_params
from predictor.tables import IterationTimeTable
from simulator.allocation import ClusterState
from simulator.cluster import Cluster, Node
from simulator.communication import PlacementTiming, check_placement, packed_counts
from simulator.engine import Simulation
from simulator.preemption import make_simulation
from simulator.timing import TruthPredictor
from traces.schema import finalize

MIB = 1024 * 1024
CONFIG = "toy:b1:s1:float32:sgd:c0"


def _sequences(grad_elements: list[int], config: str = CONFIG) -> pd.DataFrame:
    """A config whose backward produces gradients of these element counts (float32), in order."""
    rows = [{"config_id": config, "idx": i, "op": "AccumulateGrad", "input_shapes": f"[[{n}]]", "dtype": "float32",
             "phase": "backward"} for i, n in enumerate(grad_elements)]
    return pd.DataFrame(rows)


def _cluster(nodes: int = 2, per_node: int = 2, gpu: str = "V100") -> Cluster:
    return Cluster("toy", tuple(Node(f"n{i}", gpu, per_node) for i in range(nodes)))


def _trace(jobs: list[dict]):
    frame = pd.DataFrame([{"job_id": str(i), "submit_s": 0.0, "gpu_type": "", "deadline_s": np.nan, "user": "",
                           "workload": "", "line": i + 2, **job} for i, job in enumerate(jobs)])
    return finalize(frame, "toy.csv", "csv")


def _timing(cluster: Cluster, trace, grads=(MIB, MIB), seconds=1.0, backward=0.5):
    truth = IterationTimeTable(pd.DataFrame({"config_id": [CONFIG], "device": ["V100"], "seconds": [seconds]}))
    back = IterationTimeTable(pd.DataFrame({"config_id": [CONFIG], "device": ["V100"], "seconds": [backward]}))
    jobs = trace.jobs.assign(config_id=CONFIG, iterations=trace.jobs["duration_s"] / seconds,
                             **{"runtime_s:V100": trace.jobs["duration_s"]})
    bound = trace.with_jobs(jobs)
    timing = PlacementTiming(bound.jobs, cluster, _sequences(list(grads)), back, truth)
    return timing.charge(bound, "V100"), timing


def _ring(nbytes: float, gpus: int, alpha: float, bandwidth: float) -> float:
    """NCCL's ring all-reduce, the faster protocol, written out from the formula."""
    p = load_params()
    steps = 2 * (gpus - 1)
    return min(proto.call_s + alpha * steps + steps / gpus * nbytes / (proto.share * bandwidth)
               for proto in p.protocols.values())


def _hand_step(backward: float, other: float, seconds: list[float], sizes: list[float]) -> float:
    """The two-bucket overlap by hand: bucket i ready at its share of backward, one after another."""
    ready1 = backward * sizes[0] / sum(sizes)
    end1 = ready1 + seconds[0]
    end2 = max(backward, end1) + seconds[1]
    return other + max(backward, end2)


def _links():
    p = load_params()
    pcie = (p.links["pcie"].alpha_s, p.links["pcie"].efficiency * PCIE_LANE_GBS[3] * 16 * 1e9)
    network = (p.network.alpha_s, p.network.stream_bps * 1)  # one GPU per node: one stream
    return pcie, network


def test_packed_counts_fill_whole_nodes_first():
    assert packed_counts(16, 8) == (8, 8)
    assert packed_counts(12, 8) == (8, 4)
    assert packed_counts(3, 8) == (3,)
    assert packed_counts(1, 2) == (1,)


def test_a_two_bucket_step_matches_the_hand_computation():
    trace = _trace([{"num_gpus": 2, "duration_s": 100.0}])
    cluster = _cluster()
    _, timing = _timing(cluster, trace)
    sizes = [4.0 * MIB, 4.0 * MIB]  # 4 MiB gradients: the first bucket closes at 1 MiB, the second stays open
    assert list(timing.buckets[CONFIG]) == sizes
    pcie, network = _links()
    packed = _hand_step(0.5, 0.5, [_ring(s, 2, *pcie) for s in sizes], sizes)
    spread = _hand_step(0.5, 0.5, [_ring(s, 2, *network) for s in sizes], sizes)
    links = [timing.typical_links["V100"]]
    assert timing.step(1.0, CONFIG, "V100", (2,), links) == pytest.approx(packed, rel=1e-12)
    assert timing.step(1.0, CONFIG, "V100", (1, 1), links * 2) == pytest.approx(spread, rel=1e-12)
    assert spread > packed > 1.0  # the network is slower than PCIe; both cost something
    assert timing.step(1.0, CONFIG, "V100", (1,), links) == 1.0  # one GPU: no communication


def test_the_engine_charges_the_placement_the_job_got_exactly():
    """A 2-GPU job observed packed runs its trace duration packed; spread over two nodes its run
    time is the duration × step(spread) ÷ step(packed), and its JCT moves by exactly that much."""
    trace = _trace([{"num_gpus": 2, "duration_s": 1000.0}])
    cluster = _cluster()
    bound, timing = _timing(cluster, trace)
    sizes = [4.0 * MIB, 4.0 * MIB]
    pcie, network = _links()
    ratio = (_hand_step(0.5, 0.5, [_ring(s, 2, *network) for s in sizes], sizes)
             / _hand_step(0.5, 0.5, [_ring(s, 2, *pcie) for s in sizes], sizes))
    jct = {}
    for placement in ("consolidate", "spread"):
        for policy in ("fifo", "srtf"):
            sim = make_simulation(bound, cluster, make_policy(policy), TruthPredictor(), timing=timing,
                                  placement=placement)
            records = sim.run().records
            jct[placement, policy] = float(records["jct"].iloc[0])
            nodes = {int(g) // 2 for g in records["gpu_ids"].iloc[0].split(",")}
            assert len(nodes) == (1 if placement == "consolidate" else 2)
            assert records["communication_s"].iloc[0] == pytest.approx(
                records["true_runtime"].iloc[0] - 1000.0 / _hand_step(0.5, 0.5, [_ring(s, 2, *pcie) for s in sizes],
                                                                      sizes), rel=1e-9)
    for policy in ("fifo", "srtf"):
        assert jct["consolidate", policy] == pytest.approx(1000.0, rel=1e-12)
        assert jct["spread", policy] == pytest.approx(1000.0 * ratio, rel=1e-12)


def test_a_recorded_shape_sets_the_work():
    """Observed spread (1+1) for 1000 s, the job does fewer iterations than one observed packed,
    and packed it finishes sooner than its trace duration."""
    cluster = _cluster()
    packed, _ = _timing(cluster, _trace([{"num_gpus": 2, "duration_s": 1000.0}]))
    spread, timing = _timing(cluster, _trace([{"num_gpus": 2, "duration_s": 1000.0, "shape": "1+1"}]))
    assert spread.jobs["iterations"].iloc[0] < packed.jobs["iterations"].iloc[0]
    records = Simulation(spread, cluster, make_policy("fifo"), TruthPredictor(), timing=timing).run().records
    assert records["jct"].iloc[0] < 1000.0


@pytest.mark.parametrize("shape, problem", [("8+4", "adds up to 12"), ("8x", "not GPUs per server"),
                                            ("4+0+4", "not GPUs per server")])
def test_a_shape_that_does_not_add_up_is_refused_naming_it(shape, problem):
    with pytest.raises(LocatedError, match=problem) as caught:
        _trace([{"num_gpus": 8, "duration_s": 10.0, "shape": shape}])
    assert "shape" in str(caught.value) and "\n" not in str(caught.value)


def test_single_gpu_jobs_are_untouched_to_the_bit():
    trace = _trace([{"num_gpus": 1, "duration_s": d} for d in (10.0, 20.0, 30.0, 40.0, 50.0)])
    cluster = _cluster(nodes=1, per_node=2)
    bound, timing = _timing(cluster, trace)
    pd.testing.assert_frame_equal(bound.jobs.drop(columns=["compute_s:V100"]),
                                  trace.jobs.assign(config_id=CONFIG, iterations=trace.jobs["duration_s"],
                                                    **{"runtime_s:V100": trace.jobs["duration_s"]}))
    blind = Simulation(bound, cluster, make_policy("fifo"), TruthPredictor()).run().records
    timed = Simulation(bound, cluster, make_policy("fifo"), TruthPredictor(), timing=timing).run().records
    pd.testing.assert_frame_equal(timed.drop(columns=["communication_s"]), blind)
    assert (timed["communication_s"] == 0).all()


def test_spread_takes_one_gpu_per_node_and_first_fit_fills_nodes_in_order():
    cluster = Cluster("c", tuple(Node(f"n{i}", "V100", 4) for i in range(3)))
    state = ClusterState(cluster)
    assert state.allocate_spread(0, 3) == (0, 4, 8)
    assert state.allocate_first_fit(0, 5) == (1, 2, 3, 5, 6)
    assert state.allocate(0, 2) == (9, 10)  # best fit: the node with the fewest free that holds it
    assert int(state.free_by_type[0]) == 2


def test_tiresias_consolidates_skewed_models_only():
    cluster = _cluster()
    trace = _trace([{"num_gpus": 2, "duration_s": 10.0}])
    _, balanced = _timing(cluster, trace, grads=(MIB, MIB, MIB, MIB, MIB))
    _, skewed = _timing(cluster, trace, grads=(8 * MIB, MIB, MIB))
    assert not balanced.skewed()[0] and skewed.skewed()[0]


def test_an_unknown_placement_is_refused_naming_it():
    with pytest.raises(SpecError, match="'packed'.*consolidate, spread, tiresias"):
        check_placement("packed")


def test_a_node_network_line_rate_and_interconnect_from_the_cluster_file_are_charged():
    """10 Gbit/s between nodes (1.25 GB/s, below the fitted 4.6 GB/s stream) makes the spread
    step slower; PCIe without peer-to-peer makes the packed one slower."""
    trace = _trace([{"num_gpus": 2, "duration_s": 100.0}])
    _, fast = _timing(_cluster(), trace)
    slow_net = Cluster("slow", tuple(Node(f"n{i}", "V100", 2, network_gbps=10.0) for i in range(2)))
    _, slow = _timing(slow_net, trace)
    host = Cluster("host", tuple(Node(f"n{i}", "V100", 2, interconnect="pcie-no-p2p") for i in range(2)))
    _, staged = _timing(host, trace)
    spread = {name: t.step(1.0, CONFIG, "V100", (1, 1), [t.links[0], t.links[1]])
              for name, t in (("fast", fast), ("slow", slow))}
    assert spread["slow"] > spread["fast"]
    assert staged.step(1.0, CONFIG, "V100", (2,), [staged.links[0]]) > fast.step(1.0, CONFIG, "V100", (2,),
                                                                                  [fast.links[0]])
    pcie, _ = _links()
    sizes = [4.0 * MIB, 4.0 * MIB]
    p = load_params()
    expected = _hand_step(0.5, 0.5, [_ring(s, 2, p.network.alpha_s, 10e9 / 8) for s in sizes], sizes)
    assert spread["slow"] == pytest.approx(expected, rel=1e-12)


# -- every policy, every placement rule, with multi-GPU jobs charged for where they run --------
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from policies.registry import POLICIES  # noqa: E402
from simulator.cluster import homogeneous_groups  # noqa: E402
from simulator.communication import PLACEMENTS  # noqa: E402
from simulator.timing import make_predictor  # noqa: E402

TYPES = ["V100", "T4", "A100"]


def _bound(trace, cluster, seconds_by_type):
    """The trace bound to the toy config: a type's iteration takes ``seconds_by_type[type]``."""
    types = cluster.gpu_types
    truth = IterationTimeTable(pd.DataFrame({"config_id": CONFIG, "device": TYPES,
                                             "seconds": [seconds_by_type[t] for t in TYPES]}))
    back = IterationTimeTable(pd.DataFrame({"config_id": CONFIG, "device": TYPES,
                                            "seconds": [seconds_by_type[t] / 2 for t in TYPES]}))
    observed = trace.jobs["gpu_type"].replace("", types[0])
    iterations = trace.jobs["duration_s"] / observed.map(seconds_by_type)
    jobs = trace.jobs.assign(config_id=CONFIG, iterations=iterations,
                             **{f"runtime_s:{t}": iterations * seconds_by_type[t] for t in types})
    timing = PlacementTiming(jobs, cluster, _sequences([64 * MIB, MIB, MIB]), back, truth)
    return timing.charge(trace.with_jobs(jobs), types[0]), timing


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(jobs=st.lists(st.fixed_dictionaries({"submit_s": st.integers(0, 100).map(float),
                                            "num_gpus": st.sampled_from([1, 2, 3, 4, 8]),
                                            "duration_s": st.integers(1, 100).map(float)}), min_size=1, max_size=20),
       groups=st.lists(st.tuples(st.sampled_from(TYPES), st.sampled_from([1, 2, 4]), st.integers(1, 3)),
                       min_size=1, max_size=3),
       policy=st.sampled_from(sorted(POLICIES) + ["srtf:lease=20,restart=3", "tiresias:thresholds=40/200,restart=3"]),
       placement=st.sampled_from(PLACEMENTS), predictor=st.sampled_from(["truth", "noisy:0.3", "noisy-comm:0.5"]))
def test_every_policy_and_rule_runs_multi_gpu_jobs_charged_for_their_placement(jobs, groups, policy, placement,
                                                                                predictor):
    trace = _trace([{**j, "gpu_type": ""} for j in jobs])
    cluster = homogeneous_groups(groups, "prop")
    bound, timing = _bound(trace, cluster, {"V100": 1.0, "T4": 2.5, "A100": 0.5})
    sim = make_simulation(bound, cluster, make_policy(policy), make_predictor(predictor, seed=3), timing=timing,
                          placement=placement)
    result = sim.run()
    done = result.records[result.records["status"] == "completed"]
    largest = max(cluster.gpus_of_type(t) for t in cluster.gpu_types)
    assert len(done) == sum(j["num_gpus"] <= largest for j in jobs)
    # a job's run is its packed time × its placement's slowdown (never faster than packed), and
    # what it spent communicating is part of it
    assert (done["communication_s"] >= -1e-9).all()
    assert (done["communication_s"] <= done["true_runtime"] + 1e-9).all()
    if result.segments is None:
        assert np.allclose(done["end"], done["start"] + done["true_runtime"])
        packed = np.array([bound.jobs.loc[int(i), f"runtime_s:{t}"] for i, t in zip(done.index, done["gpu_type"])])
        assert (done["true_runtime"].to_numpy() >= packed * (1 - 1e-12)).all()
        single = (done["num_gpus"] == 1).to_numpy()
        assert np.array_equal(done["true_runtime"].to_numpy()[single], packed[single])
    again = make_simulation(bound, cluster, make_policy(policy), make_predictor(predictor, seed=3), timing=timing,
                            placement=placement).run().records
    assert again.equals(result.records)


@pytest.mark.parametrize("policy", ["fifo", "sjf", "edf", "allox", "hydra"])
def test_a_policy_waits_for_a_packed_placement_when_the_spread_one_would_finish_later(policy):
    """Node 0 holds A (10 s) and B (200 s), node 1 holds C (200 s); the 2-GPU job D (100 s, at 1 s)
    could start at 10 s spread over both nodes, whose network is 10 Mbit/s (~7x slower: it would
    end at ~755 s), or at 200 s packed (ends at 300 s): every policy that asks the view waits.
    With a fast network the spread start wins: D starts at 10 s."""
    jobs = [{"num_gpus": 1, "duration_s": 10.0}, {"num_gpus": 1, "duration_s": 200.0},
            {"num_gpus": 1, "duration_s": 200.0}, {"num_gpus": 2, "duration_s": 100.0, "submit_s": 1.0}]
    started = {}
    for gbps in (0.01, 1000.0):
        cluster = Cluster("c", tuple(Node(f"n{i}", "V100", 2, network_gbps=gbps) for i in range(2)))
        bound, timing = _timing(cluster, _trace(jobs))
        records = make_simulation(bound, cluster, make_policy(policy), TruthPredictor(), timing=timing).run().records
        d = records.set_index("job_id").loc["3"]
        started[gbps] = float(d["start"])
        if gbps == 0.01:
            assert d["end"] == pytest.approx(300.0, rel=1e-12)
    assert started == {0.01: 200.0, 1000.0: 10.0}


def test_an_unbound_run_says_how_many_gpu_seconds_it_timed_blind():
    from simulator.run import RunConfig, execute

    out = execute(RunConfig(policy="fifo", predictor="truth", workload="philly-like:60", cluster="default"))
    records = out.records
    multi = records[(records["status"] == "completed") & (records["num_gpus"] > 1)]
    assert len(multi) > 0
    said = out.manifest["communication"]
    assert said["modelled"] is False and said["multi_gpu_jobs"] == len(multi)
    assert said["multi_gpu_gpu_seconds_timed_blind"] == pytest.approx(float((multi["num_gpus"] * multi["true_runtime"])
                                                                             .sum()))
    assert "communication_s" not in records and "communication_gpu_seconds" not in out.summary


def test_the_view_sees_communication_as_the_predictor_does():
    """The placement estimate scales the model's all-reduces by the predictor's view of them: a
    predictor that thought communication free would see no cost in spreading."""
    from types import SimpleNamespace

    cluster = _cluster()
    bound, timing = _timing(cluster, _trace([{"num_gpus": 2, "duration_s": 100.0}]))
    view = SimpleNamespace(now=0.0, predicted=np.array([[150.0]]),
                           gpu_available_at=lambda: np.array([0.0, 50.0, 0.0, 50.0]))
    spread = [(0, 1), (1, 1)]
    placed, free_at = timing.estimate(0, 0, spread, view)
    assert free_at == 50.0 and placed > 150.0
    assert timing.estimate(0, 0, spread, view, comm_scale=0.0)[0] == pytest.approx(150.0, rel=1e-12)
    assert timing.estimate(0, 0, spread, view, comm_scale=3.0)[0] > placed
    assert timing.estimate(0, 0, [(0, 2)], view) is None  # packed already

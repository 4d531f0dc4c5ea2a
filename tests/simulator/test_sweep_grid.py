"""The grid of ``simrun sweep``: expansion, seeds, defaults, spec splitting, binding, bad options."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from predictor.common.inputs import SpecError
from simulator.cli import main
from simulator.run import DEFAULT_WORKLOAD, RunConfig
from simulator.sweep.grid import parse_seeds, plan, split_specs
from simulator.sweep.points import config_key
from tests.simulator.helpers import REPO

FIXTURES = REPO / "tests" / "fixtures" / "traces"


def test_plan_expands_the_full_grid_with_error_points():
    configs = plan("allox,hydra", "truth,ets", errors="0,0.05,0.1", workloads="pai-like:300,philly-like:300",
                   seeds="0,1", load_scales="1,1.5", limit=50)
    assert len(configs) == 2 * 5 * 2 * 2 * 2
    assert len(set(configs)) == len(configs) and len({config_key(c) for c in configs}) == len(configs)
    assert {c.predictor for c in configs} == {"truth", "ets", "noisy:0", "noisy:0.05", "noisy:0.1"}
    assert {c.policy for c in configs} == {"allox", "hydra"}
    assert {c.workload for c in configs} == {"pai-like:300", "philly-like:300"}
    assert {c.seed for c in configs} == {0, 1} and {c.load_scale for c in configs} == {1.0, 1.5}
    assert all(c.limit == 50 and c.trace is None and c.cluster == "default" for c in configs)


def test_seeds_are_a_count_or_a_list():
    assert parse_seeds("3") == [0, 1, 2]
    assert parse_seeds(3) == [0, 1, 2]
    assert parse_seeds("0,5") == [0, 5]
    assert parse_seeds("7,") == [7]
    assert [c.seed for c in plan("fifo", "truth", seeds="3")] == [0, 1, 2]
    assert [c.seed for c in plan("fifo", "truth", seeds="4,9")] == [4, 9]
    for bad in ("0", "x", "1,a"):
        with pytest.raises(SpecError):
            parse_seeds(bad)


def test_plan_defaults_traces_and_spec_splitting(monkeypatch):
    # no workload/trace: the embedded default workload
    assert [c.workload for c in plan("fifo", "truth")] == [DEFAULT_WORKLOAD]
    # errors alone are enough predictors; duplicates collapse
    assert [c.predictor for c in plan("fifo", errors="0.1,0.1")] == ["noisy:0.1"]
    # policy options with commas stay with their policy
    assert split_specs("hydra:window=10,bnb=off,allox") == ["hydra:window=10,bnb=off", "allox"]
    assert split_specs(("fifo", "sjf,edf")) == ["fifo", "sjf", "edf"]
    # trace paths are made absolute so workers elsewhere find them
    monkeypatch.chdir(FIXTURES)
    (config,) = plan("fifo", "truth", traces="hydra:hydra_case.csv")
    assert config.trace == f"hydra:{FIXTURES / 'hydra_case.csv'}" and config.workload is None
    with pytest.raises(SpecError):
        plan("fifo")  # no predictor
    with pytest.raises(SpecError):
        plan("fifo", "truth", load_scales="0")


@pytest.mark.parametrize(("predictors", "observe_after", "bound"), [
    ("truth,noisy:0.1", None, False),
    ("truth,ets", None, True),       # a model-based predictor: truth binds too, to see the same jobs
    ("truth", 5, True),              # online feedback counts iterations
])
def test_every_point_binds_when_one_run_of_the_grid_would(predictors, observe_after, bound):
    configs = plan("fifo", predictors, observe_after=observe_after)
    alone = [RunConfig(policy="fifo", predictor=c.predictor, observe_after=observe_after).bound for c in configs]
    assert any(alone) == bound
    assert [c.bind for c in configs] == [bound] * len(configs)
    assert [c.bound for c in configs] == [bound] * len(configs)


def test_bad_sweep_options_are_usage_errors(tmp_path):
    result = CliRunner().invoke(main, ["sweep", "--policies", "fifo", "--predictors", "truth", "--seeds", "x",
                                       "--out", str(tmp_path)])
    assert result.exit_code == 2 and "--seeds 'x'" in result.output


def test_placement_rules_are_a_grid_axis_and_an_unknown_one_is_refused():
    from simulator.sweep.grid import plan

    configs = plan("fifo", "truth", workloads="philly-like:10", placements="consolidate,spread")
    assert [(c.placement, c.communication, c.bind) for c in configs] == [("consolidate", True, False),
                                                                         ("spread", True, False)]
    tiresias = plan("fifo", "truth", workloads="philly-like:10", placements="tiresias", communication=False)
    assert [(c.placement, c.communication, c.bind) for c in tiresias] == [("tiresias", False, True)]
    with pytest.raises(SpecError, match="unknown placement 'packed' in --placements; known: consolidate"):
        plan("fifo", "truth", placements="packed")

"""Hostile checkpoints, round 2 (issue 50, audit classes 3 and 4): a sealed checkpoint's every
field is checked before it is used — no traceback, no allocation from a crafted config, no
nonsense number printed — and converting a pickle cannot expand it without bound."""

from __future__ import annotations

import copy
import json
import math
import tracemalloc
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner

from predictor import checkpoint_file, methods
from predictor.checkpoint_file import CheckpointError
from predictor.checkpoints import CHECKPOINT_DIR
from predictor.cli import main as cli
from predictor.methods import ets
from tests.cli_checks import one_line_error

SHIPPED = ["ets-T4.pt", "ets-T4-real.pt", "opbased-T4.pt", "habitat-T4.pt", "dnnperf-T4.pt"]
WRONG = [None, [], {}, "x", 10**30, -1, math.nan]  # each field of a real body gets each of these
WRONG_INSIDE = [None, {}, "x", math.nan]  # and each field two levels down, these


@pytest.fixture(scope="module")
def bodies() -> dict[str, dict]:
    return {name: checkpoint_file.read(CHECKPOINT_DIR / name) for name in SHIPPED}


def field_paths(body: dict) -> list[tuple]:
    """Every field of a body: the top-level ones, one level into each object (and the first item
    of each list), and one more below that; of the weights, the first two (each tensor is the same
    kind of field)."""
    paths: list[tuple] = []
    for key, value in body.items():
        paths.append((key,))
        inner = value.items() if isinstance(value, dict) else enumerate(value[:1]) if isinstance(value, list) else ()
        for sub, item in list(inner)[:2] if key == "state_dict" else inner:
            paths.append((key, sub))
            deeper = item.items() if isinstance(item, dict) else enumerate(item[:1]) if isinstance(item, list) else ()
            if key != "state_dict":
                paths.extend((key, sub, leaf) for leaf, _ in list(deeper)[:20])
    return paths


def with_value(body: dict, path: tuple, value) -> dict:
    """A copy of ``body`` with the field at ``path`` set to ``value`` (only the objects on the
    path copied: the tensors are shared)."""
    out = dict(body)
    node = out
    for key in path[:-1]:
        node[key] = copy.copy(node[key])
        node = node[key]
    node[path[-1]] = value
    return out


def test_a_wrong_value_in_any_field_is_a_checkpoint_error_never_a_traceback(bodies):
    """The property: for each shipped body, each field, each wrong value, loading either works
    or raises CheckpointError naming the file. Most are refused; the fields nothing depends on
    (a fingerprint, a split count) may take any value."""
    refused = tried = 0
    for name, body in bodies.items():
        for path in field_paths(body):
            for value in WRONG if len(path) < 3 else WRONG_INSIDE:
                tried += 1
                try:
                    methods.from_body(with_value(body, path, value), name)
                except CheckpointError as exc:
                    assert str(exc).startswith(f"{name}:") and "\n" not in str(exc), (path, value, exc)
                    refused += 1
    assert tried > 1000 and refused > 0.75 * tried, (refused, tried)


@pytest.mark.parametrize(("path", "value", "needle"), [
    (("split",), [1], "field 'split': must be an object, got [1]"),
    (("history",), {"a": 1}, "field 'history': must be a list"),
    (("state_dict",), [1], "field 'state_dict': must be an object"),
    (("intervals",), "x", "field 'intervals': must be an object"),
    (("config", "hidden"), "x", "field 'config.hidden': must be an integer from 1 to 65,536, got 'x'"),
    (("spec", "std"), [0.0] * 41, "field 'spec.std[0]': must be a finite number > 0"),
])
def test_info_and_every_command_refuse_a_crafted_field_in_one_line(tmp_path, bodies, path, value, needle):
    ckpt = tmp_path / "crafted.pt"
    ckpt.write_bytes(checkpoint_file.encode(with_value(bodies["ets-T4.pt"], path, value)))
    for args in (["checkpoint", "info", str(ckpt)], ["checkpoint", "info", "--json", str(ckpt)],
                 ["predict", "--ckpt", str(ckpt), "alexnet"]):
        one_line_error(CliRunner().invoke(cli, args), f"{ckpt}: {needle}", codes=(1,))


def test_text_from_a_checkpoint_reaches_the_terminal_escaped(tmp_path, bodies):
    ckpt = tmp_path / "loud.pt"
    ckpt.write_bytes(checkpoint_file.encode(with_value(bodies["ets-T4.pt"], ("device",), "T4\x1b[2J\nforged")))
    for args in (["checkpoint", "info", str(ckpt)], ["predict", "--ckpt", str(ckpt), "resnet18", "--size", "32"]):
        result = CliRunner().invoke(cli, args)
        assert result.exit_code == 0, result.output
        assert "\x1b" not in result.output and "T4\\x1b[2J\\nforged" in result.output, result.output


def spy_on_builds(monkeypatch) -> list[str]:
    """The device each WindowModel is built on (the default device at its construction)."""
    devices: list[str] = []
    real = ets.WindowModel

    def build(*args, **kwargs):
        devices.append(torch.empty(0).device.type)
        return real(*args, **kwargs)

    monkeypatch.setattr(ets, "WindowModel", build)
    return devices


@pytest.mark.parametrize(("config", "needle"), [
    ({"hidden": 40_000}, "asks for a model of 128,034,080,198 parameters (477.0 GiB"),
    ({"hidden": 2_000}, "over the limit of 268,435,456"),
    ({"width": 10**9}, "field 'config.width': must be an integer from 1 to 1,024"),
    ({"layers": 100_000}, "field 'config.layers': must be an integer from 1 to 256"),
])
def test_a_huge_config_is_refused_before_any_tensor_is_allocated(bodies, monkeypatch, config, needle):
    body = bodies["ets-T4.pt"]
    devices = spy_on_builds(monkeypatch)
    with pytest.raises(CheckpointError, match=r"^x\.pt: ") as caught:
        methods.from_body(with_value(body, ("config",), {**body["config"], **config}), "x.pt")
    assert needle in str(caught.value)
    assert set(devices) <= {"meta"}  # sized on the meta device, never built for real


@pytest.mark.parametrize(("tensor", "needle"), [
    (torch.tensor([0, 0], dtype=torch.int8),
     "'state_dict.head.bias': must hold floating-point weights, not torch.int8"),
    (torch.tensor([True, False]), "must hold floating-point weights, not torch.bool"),
    (torch.tensor([math.nan, 0.0]), "'state_dict.head.bias': holds 1 non-finite value(s)"),
    (torch.tensor([math.inf, 0.0]), "holds 1 non-finite value(s)"),
    (torch.zeros(3), "weights do not match the stored feature spec / architecture (shape [3]"),
])
def test_weights_must_be_finite_floats_of_the_configured_shapes(bodies, tensor, needle):
    body = bodies["ets-T4.pt"]
    with pytest.raises(CheckpointError, match="^x.pt: ") as caught:
        methods.from_body(with_value(body, ("state_dict", "head.bias"), tensor), "x.pt")
    assert needle in str(caught.value)
    extra = with_value(body, ("state_dict", "extra"), torch.zeros(1))
    with pytest.raises(CheckpointError, match=r"weights do not match .*unexpected \['extra'\]"):
        methods.from_body(extra, "x.pt")


@pytest.mark.parametrize(("path", "value", "needle"), [
    (("scale",), [-1.0, 1.0], "field 'scale[0]': must be a finite number > 0, got -1.0"),
    (("intervals", "log_ratios"), [0.2, 0.1], "field 'intervals.log_ratios': must be sorted in ascending order"),
    (("intervals", "log_ratios"), [math.nan], "field 'intervals.log_ratios[0]': must be a finite number"),
    (("intervals", "family_index"), [99], "field 'intervals.family_index'"),
])
def test_numbers_that_would_print_nonsense_are_refused(tmp_path, bodies, path, value, needle):
    """Before: "-1.64 ms per iteration", "[90% interval 27.21–22.28 ms]", exit 0."""
    ckpt = tmp_path / "odd.pt"
    ckpt.write_bytes(checkpoint_file.encode(with_value(bodies["ets-T4.pt"], path, value)))
    one_line_error(CliRunner().invoke(cli, ["predict", "--ckpt", str(ckpt), "alexnet"]), f"{ckpt}: {needle}",
                   codes=(1,))


def test_a_prediction_that_is_no_time_is_refused_naming_the_checkpoint(monkeypatch):
    real = ets.EtsPredictor.iteration_times
    monkeypatch.setattr(ets.EtsPredictor, "iteration_times",
                        lambda self, traces: real(self, traces).assign(pred_us=-5.0))
    ckpt = CHECKPOINT_DIR / "ets-T4.pt"
    for args in (["predict", "--ckpt", str(ckpt), "resnet18", "--batch", "2", "--size", "32"],
                 ["predict", "--ckpt", str(ckpt), "resnet18", "--batch", "2", "--size", "32", "--json"]):
        one_line_error(CliRunner().invoke(cli, args), f"{ckpt}: predicted pred_us = -5.0 µs for resnet18",
                       "not a positive finite time", codes=(1,))


# -- converting a pickle ----------------------------------------------------------------------------

def convert(tmp_path: Path, body) -> tuple:
    source, out = tmp_path / "old.pt", tmp_path / "new.pt"
    torch.save(body, source)
    result = CliRunner().invoke(cli, ["checkpoint", "convert", "--trust", str(source), "--out", str(out)])
    return result, source, out


def test_shared_references_are_measured_not_expanded(tmp_path):
    """1,000 references to 1,000 references to one list of 1,000: a few KB of pickle, a billion
    items expanded (before: 3 GB, then MemoryError). Refused while the Python heap stays small."""
    a = [0] * 1000
    b = [a] * 1000
    c = [b] * 1000
    result, source, out = convert(tmp_path, {"format": 1, "method": "ets", "x": c})
    one_line_error(result, f"{source}: cannot convert: field 'x' expands past the size of a checkpoint file",
                   "ETS_SIM_MAX_FILE_BYTES", codes=(1,))
    assert not out.exists()
    tracemalloc.start()
    try:
        with pytest.raises(CheckpointError, match="expands past"):
            checkpoint_file.convert_legacy(source)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    # expanded, the body is a billion list items (8 GB of pointers); measured, it stays below the
    # 64 MiB read buffer predictor.common.inputs.read_bytes allocates (and frees) for any file
    assert peak < 96 * 2**20, peak


def test_shared_references_within_the_limits_convert_to_copies(tmp_path):
    a = [1.5, 2]
    result, _, out = convert(tmp_path, {"format": 1, "x": [a, a, (a, a)], "w": torch.ones(2)})
    assert result.exit_code == 0, result.output
    body = checkpoint_file.read(out)
    assert body["x"] == [[1.5, 2], [1.5, 2], [[1.5, 2], [1.5, 2]]] and torch.equal(body["w"], torch.ones(2))


def test_the_expanded_size_limit_is_the_readers(tmp_path, monkeypatch):
    monkeypatch.setenv("ETS_SIM_MAX_JSON_CONTAINERS", "100")
    a = [[0]] * 10
    result, source, _ = convert(tmp_path, {"x": [a] * 10})
    one_line_error(result, f"{source}: cannot convert: field 'x' expands to more objects and arrays",
                   "ETS_SIM_MAX_JSON_CONTAINERS", codes=(1,))


def cyclic() -> list:
    loop: list = []
    loop.append(loop)
    return loop


@pytest.mark.parametrize(("value", "needle"), [
    (cyclic(), "field 'x/0' contains itself (a cycle)"),  # before: RecursionError
    (b"abc", "field 'x' holds a value of type bytes"),  # before: TypeError traceback
    ({1, 2}, "field 'x' holds a value of type set"),
    (torch.eye(2).to_sparse(), "field 'x' is a sparse_coo tensor"),  # before: RuntimeError traceback
    (torch.zeros(2, dtype=torch.complex64), "field 'x' is a tensor of torch.complex64"),
    ({1: "a", "1": "b"}, "field 'x' has two keys that both become '1' as text"),  # before: silently {"1": "b"}
    ({(1, 2): "a"}, "field 'x' has a key of type tuple"),
    (10**30, "field 'x' holds an integer outside the 64-bit range"),
    ([[[[0]]]], "field 'x/0/0/0' is nested more than 3 levels deep"),
])
def test_what_the_format_cannot_hold_is_refused_in_one_line(tmp_path, monkeypatch, value, needle):
    monkeypatch.setenv("ETS_SIM_MAX_JSON_DEPTH", "4")  # the body is one level, "x" two, its list three
    result, source, out = convert(tmp_path, {"format": 1, "x": value})
    one_line_error(result, f"{source}: cannot convert: {needle}", codes=(1,), alone=True)
    assert not out.exists()


# -- the model commands -----------------------------------------------------------------------------

def test_train_refuses_a_model_too_large_to_build(monkeypatch):
    """``ets train --layers 100000`` hung in construction (the options are checked first now), and
    a config under the layer limit but over the parameter cap is refused before building."""
    with pytest.raises(ValueError, match="ets option 'layers': must be an integer from 1 to 256, got 100000"):
        methods.make_config("ets", layers=100_000)
    from tests.predictor.ets_data import tiny_traces

    traces = tiny_traces()
    devices = spy_on_builds(monkeypatch)
    with pytest.raises(ValueError, match=r"the ets options .*: asks for a model of [\d,]+ parameters"):
        ets.train(traces, traces, ets.EtsConfig(hidden=60_000, layers=8), progress=False)
    assert set(devices) == {"meta"}


def test_the_time_limit_covers_building_the_model(monkeypatch):
    """A clock that jumps past the budget while the model is built: no optimizer step is taken
    (before: the clock started after construction, so a slow build was never counted)."""
    from tests.predictor.ets_data import tiny_traces

    now = {"t": 0.0}
    monkeypatch.setattr("predictor.methods.training.time.perf_counter", lambda: now["t"])
    real = ets.WindowModel

    def slow_build(*args, **kwargs):
        now["t"] += 120.0  # two minutes building
        return real(*args, **kwargs)

    monkeypatch.setattr(ets, "WindowModel", slow_build)
    steps = {"count": 0}
    real_step = torch.optim.Adam.step

    def counted(self, *args, **kwargs):
        steps["count"] += 1
        return real_step(self, *args, **kwargs)

    monkeypatch.setattr(torch.optim.Adam, "step", counted)
    traces = tiny_traces()
    ids = sorted(traces["config_id"].unique())
    train, val = traces[traces["config_id"].isin(ids[:-2])], traces[traces["config_id"].isin(ids[-2:])]
    model = ets.train(train, val, ets.EtsConfig(hidden=8, layers=1, max_epochs=3, max_minutes=1.0), progress=False)
    assert steps["count"] == 0 and len(model.history) == 1


def test_json_output_is_strict_json(tmp_path):
    """A trace whose true time is 0 makes the MRE infinite: `--json` wrote ``"mre": Infinity``,
    which strict parsers refuse; now null, and named under ``non_finite``."""
    from predictor.common.op_trace import write_traces
    from tests.predictor.ets_data import tiny_traces

    traces = tiny_traces().copy()
    zero = traces["config_id"] == sorted(traces["config_id"].unique())[0]
    traces.loc[zero, ["duration_us", "gap_us"]] = 0.0
    write_traces(tmp_path / "data", traces)
    result = CliRunner().invoke(cli, ["evaluate", "--ckpt", str(CHECKPOINT_DIR / "ets-T4.pt"), "--data",
                                      str(tmp_path / "data"), "--split", "all", "--json"])
    assert result.exit_code == 0, result.output

    def refuse(constant: str):
        raise AssertionError(f"not JSON: {constant}")

    doc = json.loads(result.stdout, parse_constant=refuse)
    assert doc["mre"] is None and doc["non_finite"]["mre"] == "inf"

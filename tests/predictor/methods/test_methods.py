"""Every method through the same CLI and loader: `ets train --method`, evaluate, predict."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from predictor import checkpoint_file, methods
from predictor.checkpoint_file import CheckpointError
from predictor.cli import main as ets
from predictor.common.op_trace import write_traces
from predictor.methods.base import TrainedPredictor
from tests.predictor.methods.multi_device_data import multi_device_traces


def small(method: str) -> list[str]:
    """Training options that keep ``method`` tiny (every method takes --hidden and --layers; one that
    scales a source device's traces gets that device)."""
    source = ["--source-device", "emulated:T4"] if methods.info(method).reads_source_device else []
    return ["--hidden", "8" if method == "ets" else "16", "--layers", "1", *source]


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("methods")
    write_traces(root / "data", multi_device_traces())
    return root


@pytest.fixture(scope="module", params=list(methods.METHODS))  # the registry itself
def trained(request, data_dir):
    method = request.param
    ckpt = data_dir / f"{method}.pt"
    args = ["train", "--method", method, "--data", str(data_dir / "data"), "--device", "emulated:V100",
            "--out", str(ckpt), "--test-families", "vgg", "--epochs", "3", "--json", *small(method)]
    result = CliRunner().invoke(ets, args)
    assert result.exit_code == 0, result.output
    return method, ckpt, json.loads(result.output[result.output.index("{"):])


def test_every_method_trains_evaluates_and_loads_through_one_interface(trained, data_dir):
    method, ckpt, report = trained
    assert report["method"] == method and report["device"] == "emulated:V100"
    assert report["traces"] == 2 and len(report["convergence"]) == 3
    assert methods.checkpoint_method(ckpt) == method
    model = methods.load(ckpt)
    assert isinstance(model, TrainedPredictor)  # the one shape every method has
    assert model.method == method and model.device == "emulated:V100" and len(model.history) == 3
    out = CliRunner().invoke(ets, ["evaluate", "--ckpt", str(ckpt), "--data", str(data_dir / "data"), "--json"])
    assert out.exit_code == 0, out.output
    again = json.loads(out.output)
    assert again["traces"] == 2 and again["mre"] == pytest.approx(report["mre"])
    # per-op breakdowns exist exactly for the per-op methods
    assert bool(again["by_phase"]) == (method != "dnnperf")


def test_options_a_method_does_not_have_are_refused_by_name():
    assert methods.make_config("ets", hidden=None, width=8).width == 8
    with pytest.raises(ValueError, match="method 'dnnperf' has no option width"):
        methods.make_config("dnnperf", width=8)
    with pytest.raises(ValueError, match="unknown method 'magic'"):
        methods.module("magic")


def test_every_shipped_checkpoint_has_the_one_shape():
    from predictor.checkpoints import CHECKPOINT_DIR

    shipped = sorted(CHECKPOINT_DIR.glob("*.pt"))
    assert {methods.checkpoint_method(p) for p in shipped} == set(methods.METHODS)
    for path in shipped:
        assert isinstance(methods.load(path), TrainedPredictor), path


def test_foreign_checkpoints_are_refused(tmp_path):
    path = tmp_path / "x.pt"
    checkpoint_file.write(path, {"format": 1, "method": "oracle"})
    with pytest.raises(CheckpointError, match="method 'oracle'"):
        methods.load(path)
    with pytest.raises(CheckpointError, match="no such checkpoint"):
        methods.load(tmp_path / "missing.pt")


def test_habitat_needs_its_source_device(data_dir, tmp_path):
    out = CliRunner().invoke(ets, ["train", "--method", "habitat", "--data", str(data_dir / "data"),
                                   "--device", "emulated:V100", "--out", str(tmp_path / "h.pt")])
    assert out.exit_code != 0 and "needs --source-device" in out.output
    out = CliRunner().invoke(ets, ["train", "--method", "ets", "--data", str(data_dir / "data"), "--device",
                                   "emulated:V100", "--source-device", "emulated:T4", "--out", str(tmp_path / "e.pt")])
    assert out.exit_code != 0 and "habitat only" in out.output


def test_evaluate_on_another_devices_rows(data_dir):
    """`ets evaluate --device`: a V100 checkpoint scored on the T4 rows, as if they were its own."""
    from predictor.common.op_trace import read_dataset
    from predictor.evaluate import evaluate

    ckpt = data_dir / "ets-cross.pt"
    trained = CliRunner().invoke(ets, ["train", "--data", str(data_dir / "data"), "--device", "emulated:V100",
                                       "--out", str(ckpt), "--test-families", "vgg", "--epochs", "2",
                                       *small("ets")])
    assert trained.exit_code == 0, trained.output
    out = CliRunner().invoke(ets, ["evaluate", "--ckpt", str(ckpt), "--data", str(data_dir / "data"),
                                   "--device", "emulated:T4", "--split", "all", "--json"])
    assert out.exit_code == 0, out.output
    report = json.loads(out.output)
    model = methods.load(ckpt)
    t4 = read_dataset(data_dir / "data").query("device == 'emulated:T4'")
    expected = evaluate(model, t4.assign(device=model.device))
    assert report["data_device"] == "emulated:T4" and report["device"] == "emulated:V100"
    assert report["traces"] == t4["config_id"].nunique()
    assert report["mre"] == pytest.approx(expected.headline()["mre"])
    own = json.loads(CliRunner().invoke(ets, ["evaluate", "--ckpt", str(ckpt), "--data", str(data_dir / "data"),
                                              "--split", "all", "--json"]).output)
    assert own["data_device"] == "emulated:V100" and own["mre"] != pytest.approx(report["mre"])
    missing = CliRunner().invoke(ets, ["evaluate", "--ckpt", str(ckpt), "--data", str(data_dir / "data"),
                                       "--device", "H100"])
    assert missing.exit_code != 0 and "no traces of device 'H100'" in missing.output
    assert "emulated:T4" in missing.output and "Traceback" not in missing.output


def test_capabilities_are_asked_of_the_registry_not_of_names():
    assert set(methods.single_device_methods()) == {m for m, spec in methods.METHODS.items()
                                                   if not spec.reads_source_device}
    assert [m for m, spec in methods.METHODS.items() if not spec.baseline] == ["ets"]  # the one method compared
    with pytest.raises(ValueError, match="unknown method 'nope'; known: ets, opbased, habitat, dnnperf"):
        methods.info("nope")


@pytest.mark.parametrize("method", list(methods.METHODS))
def test_every_method_has_the_shared_fit_options_and_the_one_base(method):
    from dataclasses import fields

    from predictor.methods.base import FIT_FIELDS, MAX_MINUTES, TrainedPredictor

    defaults = {f.name: f.default for f in fields(methods.config_class(method))}
    assert set(FIT_FIELDS) <= set(defaults)
    assert defaults["max_minutes"] == MAX_MINUTES and defaults["seed"] == 0
    predictor_class = methods.module(method).load.__self__  # the module's loader is its class's
    assert issubclass(predictor_class, TrainedPredictor) and predictor_class.method == method


@pytest.mark.parametrize("method", list(methods.METHODS))
def test_an_incomplete_checkpoint_of_any_method_is_refused_in_one_line(method, tmp_path):
    path = tmp_path / "x.pt"
    checkpoint_file.write(path, {"format": 1, "method": method, "device": "T4"})  # no config, spec, weights
    with pytest.raises(CheckpointError, match=r"x\.pt: (field '\w+': must be an? \w+.*missing|the model reads)"):
        methods.load(path)

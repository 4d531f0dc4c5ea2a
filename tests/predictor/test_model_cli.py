"""`ets train | evaluate | predict` end to end on a tiny emulated dataset."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from predictor.cli import main as ets
from predictor.common.op_trace import write_traces
from tests.predictor.ets_data import tiny_traces


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    root = tmp_path_factory.mktemp("ets")
    write_traces(root / "data", tiny_traces())
    ckpt = root / "t4.pt"
    result = CliRunner().invoke(ets, ["train", "--data", str(root / "data"), "--out", str(ckpt),
                                      "--test-families", "vgg", "--hidden", "16", "--layers", "2",
                                      "--epochs", "4", "--lr", "0.01", "--json"])
    assert result.exit_code == 0, result.output
    return root, ckpt, json.loads(result.output[result.output.index("{"):])


def test_train_reports_the_held_out_families(trained):
    _, ckpt, report = trained
    assert ckpt.exists() and report["split"]["test_units"] == ["vgg"]
    assert report["traces"] == 2 and {"mre", "rmse_ms", "wape", "by_op_count", "convergence"} <= set(report)
    assert len(report["convergence"]) == 4


def test_evaluate_json_on_the_test_split_and_all(trained):
    root, ckpt, report = trained
    out = CliRunner().invoke(ets, ["evaluate", "--ckpt", str(ckpt), "--data", str(root / "data"), "--json"])
    assert out.exit_code == 0, out.output
    got = json.loads(out.output)
    assert got["traces"] == 2 and got["mre"] == pytest.approx(report["mre"])
    every = json.loads(CliRunner().invoke(ets, ["evaluate", "--ckpt", str(ckpt), "--data", str(root / "data"),
                                                "--split", "all", "--json"]).output)
    assert every["traces"] == tiny_traces()["config_id"].nunique()


def test_predict_a_model_name_and_a_trace_file(trained, tmp_path):
    root, ckpt, _ = trained
    out = CliRunner().invoke(ets, ["predict", "--ckpt", str(ckpt), "alexnet", "--batch", "2", "--size", "64"])
    assert out.exit_code == 0, out.output
    assert out.output.startswith("alexnet:b2:s64:float32:sgd:c1000: emulated:T4 prediction by t4.pt: ")
    assert ("overhead" in out.output
            and "ops from a meta-device capture (op order and shapes; nothing timed)" in out.output)
    assert "measure" not in out.output and "timing" not in out.output  # a meta capture times nothing
    meta = json.loads(CliRunner().invoke(ets, ["predict", "--ckpt", str(ckpt), "alexnet", "--json"]).output)
    assert meta["predictions"][0]["timings"] == [] and "true_us" not in meta["predictions"][0]
    parquet = next((root / "data").glob("*.parquet"))
    out = CliRunner().invoke(ets, ["predict", "--ckpt", str(ckpt), str(parquet), "--json"])
    assert out.exit_code == 0, out.output
    predictions = json.loads(out.output)["predictions"]
    assert len(predictions) == tiny_traces()["config_id"].nunique()
    assert all(p["timings"][0]["what"] == f"emulated:T4 timing in {parquet}" and p["timings"][0]["ms"] > 0
               for p in predictions)


def test_user_errors_are_one_line_messages(trained, tmp_path):
    root, ckpt, _ = trained
    bad = tmp_path / "bad.pt"
    bad.write_text("nope")
    for args in (["predict", "--ckpt", str(bad), "alexnet"],
                 ["predict", "--ckpt", str(ckpt), str(tmp_path / "x.txt")],
                 ["evaluate", "--ckpt", str(ckpt), "--data", str(tmp_path)],
                 ["train", "--data", str(root / "data"), "--out", str(tmp_path / "m.pt"), "--test-families", "gpt"]):
        if args[-1].endswith("x.txt"):
            (tmp_path / "x.txt").write_text("?")
        result = CliRunner().invoke(ets, args)
        assert result.exit_code == 1 and "Traceback" not in result.output and result.output.startswith("Error:"), args

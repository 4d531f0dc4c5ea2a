"""`ets finetune`: a checkpoint of one device continued on a few traces of another."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from predictor import finetune, methods
from predictor.cli import main as cli
from predictor.common.inputs import SpecError
from predictor.common.op_trace import read_dataset, write_traces
from predictor.evaluate import evaluate
from predictor.methods import ets
from tests.predictor.methods.multi_device_data import multi_device_traces

# log targets: a parent whose V100 times are far off the T4 (anchored, re-anchoring on the T4 alone
# takes it most of the way: tests/predictor/methods/test_anchored.py)
TINY = {"layers": 1, "hidden": 8, "max_epochs": 6, "seed": 0, "target_transform": "log"}


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    root = tmp_path_factory.mktemp("finetune")
    data = multi_device_traces()
    write_traces(root / "data", data)
    v100 = data[data["device"] == "emulated:V100"]
    ids = sorted(v100["config_id"].unique())
    val = v100[v100["config_id"].isin(ids[::4])]
    parent = ets.train(v100[~v100["config_id"].isin(ids[::4])], val, ets.EtsConfig(**TINY), progress=False)
    parent.save(root / "v100.pt")
    return root, data


def _mre(model, rows):
    return evaluate(model, rows.assign(device=model.device)).headline()["mre"]


def test_finetune_moves_a_mismatched_checkpoint_to_the_new_device(setup):
    root, data = setup
    out = root / "t4.pt"
    result = CliRunner().invoke(cli, ["finetune", "--ckpt", str(root / "v100.pt"), "--data", str(root / "data"),
                                      "--device", "emulated:T4", "--out", str(out), "--epochs", "8", "--lr", "2e-3",
                                      "--tune", "all", "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.output[result.output.index("{"):])
    t4 = data[data["device"] == "emulated:T4"]
    parent, child = methods.load(root / "v100.pt"), methods.load(out)
    before, after = _mre(parent, t4), _mre(child, t4)
    assert after < 0.5 * before, (before, after)  # the V100 model is far off the (slower) T4
    # what the checkpoint records: the data's device, its parent, the traces it saw
    assert child.device == "emulated:T4" and report["parent_device"] == "emulated:V100"
    assert child.lineage == [{"checkpoint": str(root / "v100.pt"), "device": "emulated:V100",
                              "fingerprint": parent.fingerprint, "epochs": len(parent.history)}]
    assert set(child.split["traces"]) == set(t4["config_id"]) and report["traces"] == 12
    assert child.split["validation"] == "held-out traces" and child.split["val"] == 2  # 12 traces: 20 % held out
    assert report["tune"] == "all"
    assert child.spec.to_dict() == parent.spec.to_dict()  # the weights stay tied to the parent's spec


def test_finetune_holds_out_test_families_and_scores_them(setup):
    root, data = setup
    out = root / "t4-novgg.pt"
    result = CliRunner().invoke(cli, ["finetune", "--ckpt", str(root / "v100.pt"), "--data", str(root / "data"),
                                      "--device", "emulated:T4", "--out", str(out), "--test-families", "vgg",
                                      "--epochs", "2", "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.output[result.output.index("{"):])
    child = methods.load(out)
    vgg = data[(data["device"] == "emulated:T4") & (data["family"] == "vgg")]
    assert report["traces"] == 2 and report["mre"] == pytest.approx(_mre(child, vgg))  # the held-out configs
    assert child.split["test_units"] == ["vgg"] and not set(child.split["traces"]) & set(vgg["config_id"])


def test_small_data_rule():
    ids = [f"c{i}" for i in range(9)]
    assert finetune.split_traces(ids) == (sorted(ids), [])  # too few to hold any out: fixed epochs
    train, val = finetune.split_traces([f"c{i}" for i in range(10)], seed=3)
    assert len(val) == 2 and not set(train) & set(val) and len(train) == 8
    assert finetune.split_traces([f"c{i}" for i in range(10)], seed=3) == (train, val)  # seeded


def test_few_traces_calibrate_two_factors_by_hand(setup):
    root, data = setup
    parent = methods.load(root / "v100.pt")
    three = data[(data["device"] == "emulated:T4") & data["config_id"].str.startswith("resnet18")]
    child = finetune.fit_small(three, parent, progress=False)
    assert child.split["tune"] == "scale" and child.split["traces"] == sorted(three["config_id"].unique())
    assert child.history == [] and child.device == "emulated:T4" and child.lineage[0]["device"] == "emulated:V100"
    # the normal equations of min Σ((aD + bG)/T − 1)² + 0.1((a − 1)² + (b − 1)²), solved by hand
    s = parent.iteration_times(three.assign(device=parent.device))
    d, g, t = (s[c].to_numpy() for c in ("pred_duration_us", "pred_gap_us", "true_us"))
    x, y = d / t, g / t
    m = [[(x * x).sum() + 0.1, (x * y).sum()], [(x * y).sum(), (y * y).sum() + 0.1]]
    r = [x.sum() + 0.1, y.sum() + 0.1]
    det = m[0][0] * m[1][1] - m[0][1] * m[1][0]
    a, b = (r[0] * m[1][1] - m[0][1] * r[1]) / det, (m[0][0] * r[1] - m[1][0] * r[0]) / det
    assert child.scale == pytest.approx((a, b))
    ops = child.predict_ops(three)
    plain = parent.predict_ops(three)
    assert ops["pred_duration_us"].to_numpy() == pytest.approx(a * plain["pred_duration_us"].to_numpy())
    assert ops["pred_gap_us"].to_numpy() == pytest.approx(b * plain["pred_gap_us"].to_numpy())
    assert _mre(child, three) < _mre(parent, three)  # calibrated to what it saw
    child.save(root / "calibrated.pt")
    again = methods.load(root / "calibrated.pt")
    assert again.scale == pytest.approx(child.scale) and again.lineage == child.lineage
    with pytest.raises(SpecError, match="tune must be one of scale, all"):
        finetune.fit_small(three, parent, tune="head", progress=False)


def test_fixed_epochs_below_the_validation_threshold_keep_the_last_weights(setup):
    root, data = setup
    parent = methods.load(root / "v100.pt")
    three = data[(data["device"] == "emulated:T4") & data["config_id"].str.startswith("resnet18")]
    child = finetune.fit_small(three, parent, tune="all", epochs=3, progress=False)
    assert len(child.history) == 3 and child.split["validation"] == "fixed epochs"
    assert child.split["val"] == 0 and child.split["train"] == 3 and child.scale == (1.0, 1.0)


def test_refusals_name_the_reason(setup, tmp_path):
    root, data = setup
    run = lambda *args: CliRunner().invoke(cli, ["finetune", "--out", str(tmp_path / "x.pt"), *args])  # noqa: E731
    base = ["--ckpt", str(root / "v100.pt"), "--data", str(root / "data")]
    missing = run(*base, "--device", "H100")
    assert missing.exit_code != 0 and "no traces of device 'H100'" in missing.output
    assert "emulated:T4" in missing.output and "Traceback" not in missing.output
    several = run(*base)  # three devices and none named
    assert several.exit_code != 0 and "pick one with --device" in several.output
    nothing = run(*base, "--device", "emulated:T4", "--test-families",
                  ",".join(sorted(data["family"].unique())))
    assert nothing.exit_code != 0 and "nothing left to train on" in nothing.output
    # a baseline's checkpoint
    other = tmp_path / "op.pt"
    trained = CliRunner().invoke(cli, ["train", "--method", "opbased", "--data", str(root / "data"), "--device",
                                       "emulated:V100", "--out", str(other), "--epochs", "1", "--hidden", "8",
                                       "--layers", "1", "--test-fraction", "0"])
    assert trained.exit_code == 0, trained.output
    foreign = run("--ckpt", str(other), "--data", str(root / "data"), "--device", "emulated:T4")
    assert foreign.exit_code != 0 and "'opbased' checkpoint" in foreign.output
    assert "continues ETS checkpoints" in foreign.output
    # features of another kind: op names the checkpoint never saw
    renamed = data[data["device"] == "emulated:T4"].assign(op=lambda d: "aten::" + d["op"] + "_recorded")
    write_traces(tmp_path / "renamed", renamed)
    alien = run("--ckpt", str(root / "v100.pt"), "--data", str(tmp_path / "renamed"))
    assert alien.exit_code != 0 and "op vocabulary covers 0%" in alien.output and "--features zoo" in alien.output
    assert not (tmp_path / "x.pt").exists()
    assert read_dataset(tmp_path / "renamed")["config_id"].nunique() == 12  # the data is untouched

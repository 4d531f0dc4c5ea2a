"""Calibration measurements: Gavel / Sia loaders on hand-written fixtures, malformed inputs, the
real shared files (skipped without them), and the zoo configs that rebuild the workloads."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

from predictor.devices import measurements as m
from predictor.devices.measurements import (
    MeasurementError, WORKLOADS, default_calibration_dir, load_gavel, load_measurements, load_sia, workload_config,
)
from predictor.zoo import zoo_configs
from predictor.zoo.registry import build

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "calibration"
GAVEL = FIXTURES / "gavel_physical_cluster_throughputs.json"
SIA = FIXTURES / "sia_placements"
GAVEL_NAME = "gavel_physical_cluster_throughputs.json"


def _records(df) -> list[tuple]:
    return [tuple(r) for r in df[list(m.COLUMNS)].itertuples(index=False)]


# --- fixtures: exact rows -----------------------------------------------------------------------


def test_load_gavel_fixture_exact_rows():
    df = load_gavel(GAVEL)
    assert list(df.columns) == list(m.COLUMNS)
    assert _records(df) == [
        ("gavel", "K80", "resnet18_cifar", 16, pytest.approx(0.2), f"{GAVEL_NAME}:k80:('ResNet-18 (batch size 16)', 1)"),
        ("gavel", "P100", "lstm_wikitext2", 20, pytest.approx(0.02), f"{GAVEL_NAME}:p100:('LM (batch size 20)', 1)"),
        ("gavel", "V100", "transformer_multi30k", 32, pytest.approx(0.125),
         f"{GAVEL_NAME}:v100:('Transformer (batch size 32)', 1)"),
        ("gavel", "V100", "resnet50_imagenet", 64, pytest.approx(0.25),
         f"{GAVEL_NAME}:v100:('ResNet-50 (batch size 64)', 1)"),
    ]
    # the 0.0 of a kept job type is excluded and reported; skipped job types (A3C, CycleGAN,
    # Recommendation), scale factor 2 and *_unconsolidated are not read at all
    assert df.attrs["excluded"] == [f"{GAVEL_NAME}:k80:('ResNet-50 (batch size 128)', 1)"]
    assert df["batch"].dtype == "int64" and df["seconds"].dtype == "float64"


def test_load_sia_fixture_exact_rows():
    df = load_sia(SIA)
    assert _records(df) == [
        ("sia", "T4", "resnet18_cifar", 32, 0.04, "sia_placements/cifar10/placements-aws.csv:2"),
        ("sia", "T4", "resnet18_cifar", 64, 0.06, "sia_placements/cifar10/placements-aws.csv:4"),
        ("sia", "RTX6000", "resnet18_cifar", 32, 0.041, "sia_placements/cifar10/placements-quad.csv:2"),
        ("sia", "RTX6000", "resnet18_cifar", 128, 0.061, "sia_placements/cifar10/placements-quad.csv:4"),
        ("sia", "T4", "resnet50_imagenet_amp", 163, 0.7624, "sia_placements/imagenet/placements-aws.csv:2"),
    ]  # placements-dgx.csv is skipped (dgx-ext is the A100 profile)
    assert df.attrs["excluded"] == []
    assert len(df.attrs["missing"]) == 15 - 3 and "bert/placements-aws.csv" in df.attrs["missing"]


def _complete_tree(tmp_path: Path) -> Path:
    """The fixtures plus header-only CSVs for every expected file they lack."""
    root = tmp_path / "calibration"
    shutil.copytree(FIXTURES, root)
    for model in m.SIA_MODELS:
        for cluster in m.SIA_DEVICES:
            path = root / "sia_placements" / model / f"placements-{cluster}.csv"
            if not path.exists():
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text("placement,local_bsz,step_time,sync_time\n")
    return root


def test_load_measurements_concatenates_and_requires_every_file(tmp_path):
    root = _complete_tree(tmp_path)
    df = load_measurements(root)
    assert list(df["source"]) == ["gavel"] * 4 + ["sia"] * 5
    assert df.index.tolist() == list(range(9))
    assert df.attrs["excluded"] == [f"{GAVEL_NAME}:k80:('ResNet-50 (batch size 128)', 1)"]

    (root / "sia_placements" / "bert" / "placements-rtx.csv").unlink()
    with pytest.raises(MeasurementError, match=r"placements-rtx\.csv.*file not found"):
        load_measurements(root)
    with pytest.raises(MeasurementError, match="directory not found"):
        load_measurements(tmp_path / "nowhere")
    (root / GAVEL_NAME).unlink()
    with pytest.raises(MeasurementError, match=GAVEL_NAME):
        load_measurements(root)


# --- malformed inputs ---------------------------------------------------------------------------


def _sia_dir(tmp_path: Path, text: str) -> Path:
    directory = tmp_path / "sia_placements"
    (directory / "cifar10").mkdir(parents=True)
    (directory / "cifar10" / "placements-aws.csv").write_text(text)
    return directory


def test_sia_non_numeric_step_time(tmp_path):
    directory = _sia_dir(tmp_path, "placement,local_bsz,step_time,sync_time\n4,8,0.1,0.0\n1,8,abc,0.0\n")
    with pytest.raises(MeasurementError) as info:
        load_sia(directory)
    message = str(info.value)
    assert "placements-aws.csv" in message and "step_time" in message and "line 3" in message
    assert info.value.field == "step_time" and info.value.where == "line 3"


@pytest.mark.parametrize("text, field, where", [
    ("placement,local_bsz,sync_time\n1,8,0.0\n", "step_time", "line 1"),  # missing column
    ("placement,local_bsz,step_time,sync_time\n1,8,-0.5,0.0\n", "step_time", "line 2"),  # negative
    ("placement,local_bsz,step_time,sync_time\n1,8,,0.0\n", "step_time", "line 2"),  # empty
    ("placement,local_bsz,step_time,sync_time\n1,8.5,0.1,0.0\n", "local_bsz", "line 2"),  # not an int
    ("placement,local_bsz,step_time,sync_time\nx,8,0.1,0.0\n", "placement", "line 2"),
])
def test_sia_malformed_values(tmp_path, text, field, where):
    with pytest.raises(MeasurementError) as info:
        load_sia(_sia_dir(tmp_path, text))
    assert "placements-aws.csv" in str(info.value) and repr(field) in str(info.value)
    assert (info.value.field, info.value.where) == (field, where)


def _gavel_file(tmp_path: Path, v100: dict) -> Path:
    path = tmp_path / GAVEL_NAME
    path.write_text(json.dumps({"k80": {}, "p100": {}, "v100": v100}))
    return path


@pytest.mark.parametrize("v100, field", [
    ({"ResNet-18 (batch size 16)": {"null": 5.0}}, "job key"),  # key is not a tuple
    ({"('ResNet-18 (batch size 16)',": {"null": 5.0}}, "job key"),  # unparsable
    ({"('ResNet-18 (batch size 16)', 1)": {"null": "fast"}}, "null"),  # non-numeric
    ({"('ResNet-18 (batch size 16)', 1)": {"null": -2.0}}, "null"),  # negative
    ({"('ResNet-18 (batch size 16)', 1)": {}}, "null"),  # missing
    ({"('ResNet-18', 1)": {"null": 5.0}}, "job type"),  # no batch size
    ({"('GPT-3 (batch size 8)', 1)": {"null": 5.0}}, "job type"),  # unknown job type
])
def test_gavel_malformed(tmp_path, v100, field):
    with pytest.raises(MeasurementError) as info:
        load_gavel(_gavel_file(tmp_path, v100))
    message = str(info.value)
    assert GAVEL_NAME in message and repr(field) in message and "'v100'" in message
    assert info.value.field == field


def test_gavel_missing_section_and_file(tmp_path):
    path = tmp_path / GAVEL_NAME
    path.write_text(json.dumps({"k80": {}, "v100": {}}))
    with pytest.raises(MeasurementError, match=r"gavel_physical_cluster_throughputs\.json.*'p100'"):
        load_gavel(path)
    with pytest.raises(MeasurementError, match="file not found"):
        load_gavel(tmp_path / "absent.json")
    path.write_text("{not json")
    with pytest.raises(MeasurementError, match="not valid JSON"):
        load_gavel(path)


def test_default_calibration_dir(monkeypatch):
    monkeypatch.setenv("ETS_CALIBRATION", "/x/cal")
    monkeypatch.setenv("ETS_SHARED", "/y/shared")
    assert default_calibration_dir() == Path("/x/cal")
    monkeypatch.delenv("ETS_CALIBRATION")
    assert default_calibration_dir() == Path("/y/shared/calibration")
    monkeypatch.delenv("ETS_SHARED")
    repo = Path(__file__).resolve().parents[3]
    assert default_calibration_dir() == repo.parent / "shared" / "calibration"


# --- the real shared files ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def real(shared_dir):
    path = shared_dir / "calibration"
    if not path.is_dir():
        pytest.skip(f"calibration data {path} not found")
    return load_measurements(path)


def test_real_row_counts(real):
    counts = real.groupby(["source", "device"]).size().to_dict()
    assert counts == {
        ("gavel", "K80"): 18, ("gavel", "P100"): 19, ("gavel", "V100"): 19,  # 5+4+5+5 job types, K80 lacks R50/128
        ("sia", "T4"): 24, ("sia", "V100"): 34, ("sia", "A100"): 36, ("sia", "RTX6000"): 30, ("sia", "RTX2080Ti"): 24,
    }
    assert real.attrs["excluded"] == [f"{GAVEL_NAME}:k80:('ResNet-50 (batch size 128)', 1)"]
    assert set(real["workload"]) == set(WORKLOADS)
    assert (real["seconds"] > 0).all() and not real.duplicated(["source", "device", "workload", "batch"]).any()


def test_real_values_match_the_readme(real):
    def one(source, device, workload, batch):
        row = real[(real.source == source) & (real.device == device) & (real.workload == workload)
                   & (real.batch == batch)]
        assert len(row) == 1
        return row.iloc[0]

    v100 = one("gavel", "V100", "resnet18_cifar", 16)
    assert v100.seconds == pytest.approx(0.0309, abs=5e-5)
    assert v100.origin == f"{GAVEL_NAME}:v100:('ResNet-18 (batch size 16)', 1)"
    t4 = one("sia", "T4", "resnet50_imagenet_amp", 163)
    assert t4.seconds == pytest.approx(0.7624, abs=5e-5)
    assert t4.origin.startswith("sia_placements/imagenet/placements-aws.csv:")


# --- zoo configs --------------------------------------------------------------------------------


@pytest.mark.parametrize("workload", WORKLOADS)
def test_workload_config_builds_on_meta(workload):
    config = workload_config(workload, 4)
    assert config.batch == 4
    workload_ = build(config, "meta")
    inputs, targets = workload_.inputs("meta")
    out = workload_.model(*inputs)
    assert out.device.type == "meta" and out.shape[0] == 4
    assert workload_.loss(out, targets).shape == ()


def test_resnet18_cifar_is_the_cifar_network():
    model = build(workload_config("resnet18_cifar", 2), "meta").model
    assert (model.conv1.kernel_size, model.conv1.stride, model.conv1.out_channels) == ((3, 3), (1, 1), 64)
    assert isinstance(model.maxpool, torch.nn.Identity)
    assert model(torch.empty(2, 3, 32, 32, device="meta")).shape == (2, 10)
    assert sum(p.numel() for p in model.parameters()) == 11_173_962  # kuangliu/pytorch-cifar ResNet18


def test_workload_config_shapes():
    bert = build(workload_config("bert_base_squad", 2), "meta")
    assert bert.model.tokens.num_embeddings == 30522  # BERT vocabulary kept, 2-logit span head
    assert bert.model(*bert.inputs("meta")[0]).shape == (2, 384, 2)
    lm = build(workload_config("lstm_wikitext2", 3), "meta")
    assert lm.model(*lm.inputs("meta")[0]).shape == (3, 35, 33278)
    assert (lm.model.lstm.num_layers, lm.model.lstm.hidden_size) == (2, 200)
    seq = workload_config("transformer_multi30k", 2)
    assert (seq.input_size, seq.num_classes, seq.get("layers"), seq.get("d_model")) == (32, 10000, 6, 512)
    r50 = workload_config("resnet50_imagenet", 8)
    assert (r50.model, r50.input_size, r50.num_classes) == ("resnet50", 224, 1000)
    assert workload_config("resnet50_imagenet_amp", 8).dtype == "float16"


def test_unknown_workload_names_the_known_ones():
    with pytest.raises(ValueError, match="cyclegan.*resnet18_cifar.*bert_base_squad"):
        workload_config("cyclegan", 8)


def test_calibration_models_stay_out_of_the_hpo_zoo():
    hpo = zoo_configs("hpo")
    assert len(hpo) == 7051  # unchanged by the CIFAR variant
    assert not any(c.model == "resnet18_cifar" for c in hpo)

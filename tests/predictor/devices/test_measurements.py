"""Calibration measurements: Gavel / Sia loaders on hand-written fixtures, malformed inputs, the
real shared files (skipped without them), and the zoo configs that rebuild the workloads."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

from predictor.emulator.devices import measurements as m
from predictor.emulator.devices.measurements import (
    WORKLOADS,
    MeasurementError,
    default_calibration_dir,
    load_gavel,
    load_measurements,
    load_sia,
    workload_config,
)
from predictor.emulator.zoo import zoo_configs
from predictor.emulator.zoo.registry import build

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
        ("gavel", "K80", "resnet18_cifar", 16, pytest.approx(0.2),
         f"{GAVEL_NAME}:k80:('ResNet-18 (batch size 16)', 1)"),
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
    assert workload_config("resnet50_imagenet_amp", 8).dtype == "amp"  # autocast, as Sia measured it


def test_unknown_workload_names_the_known_ones():
    with pytest.raises(ValueError, match="cyclegan.*resnet18_cifar.*bert_base_squad"):
        workload_config("cyclegan", 8)


def test_calibration_models_stay_out_of_the_hpo_zoo():
    hpo = zoo_configs("hpo")
    assert len(hpo) == 7051  # unchanged by the CIFAR variant
    assert not any(c.model == "resnet18_cifar" for c in hpo)


# --- NeuSight and SPREAD (real end-to-end iterations; read only when asked for) -----------------

from predictor.emulator.devices import neusight_ops  # noqa: E402
from predictor.emulator.devices.measurements import (  # noqa: E402
    NEUSIGHT_WORKLOADS,
    SPREAD_CONFIGS,
    SPREAD_WORKLOADS,
    load_neusight,
    load_spread,
)
from predictor.emulator.devices.neusight_ops import load_neusight_ops  # noqa: E402

NEUSIGHT = FIXTURES / "neusight"
SPREAD = FIXTURES / "spread" / "iterations.csv"
_A100 = "neusight/labels/NVIDIA_A100_80GB_PCIe"
_V100 = "neusight/labels/Tesla_V100-PCIE-32GB"
_SPREAD_HEADER = ("model,gpu,gpus_in_job,world_size,rank,batch,computation_proportion,iterations,iter_ms_median,"
                  "iter_ms_mean,iter_ms_p10,iter_ms_p90,backend,file\n")


def test_load_neusight_fixture_exact_rows():
    df = load_neusight(NEUSIGHT)
    assert list(df.columns) == list(m.NEUSIGHT_COLUMNS)
    assert _records(df) == [
        ("neusight", "A100-80GB", "gpt2_large", 4, 1.5, f"{_A100}/gpt2_large-train-1024-4.json"),
        ("neusight", "A100-80GB", "opt_1.3b", 2, 3.0, f"{_A100}/opt_13-train-2048-2.json"),
        ("neusight", "V100", "bert_large", 2, 0.25, f"{_V100}/bert_large-train-512-2.json"),
    ]
    assert df["forward_s"].tolist() == [0.5, 1.25, 0.1] and df["backward_s"].tolist() == [1.0, 1.75, 0.15]
    assert df["seq"].tolist() == [1024, 2048, 512]
    assert df.attrs["excluded"] == ["neusight/labels/NVIDIA_A100-SXM4-40GB/gpt2_large-train-1024-4-dp4.json",
                                    f"{_A100}/switchxl4-train-512-1.json"]


def test_load_spread_fixture_exact_rows():
    df = load_spread(SPREAD)
    assert _records(df) == [
        ("spread", "T4", "spread_resnet50", 16, 0.22, "spread/iterations.csv:2"),
        ("spread", "RTX2080Ti", "spread_lstm", 20, 0.0115, "spread/iterations.csv:6"),
        ("spread", "T4", "spread_bert_base", 8, 0.2, "spread/iterations.csv:7"),
        ("spread", "RTX2080Ti", "spread_inception_v3", 4, 0.08, "spread/iterations.csv:8"),
    ]  # line 3: 50 % of the GPU, line 4: 2 GPUs — not read; line 5 YoloV5S: excluded
    assert df.attrs["excluded"] == ["spread/iterations.csv:5"]


def test_load_measurements_with_the_new_sources(tmp_path):
    root = _complete_tree(tmp_path)
    default = load_measurements(root)
    assert list(default.columns) == list(m.COLUMNS) and set(default["source"]) == {"gavel", "sia"}
    df = load_measurements(root, sources=("gavel", "sia", "neusight", "spread"))
    assert list(df.columns) == list(m.NEUSIGHT_COLUMNS)
    assert df["source"].value_counts().to_dict() == {"gavel": 4, "sia": 5, "neusight": 3, "spread": 4}
    assert df.loc[df["source"] != "neusight", "seq"].isna().all() and df["seq"].dtype == "Int64"
    assert df.attrs["excluded"][0].startswith(GAVEL_NAME) and df.attrs["excluded"][-1] == "spread/iterations.csv:5"
    spread_only = load_measurements(root, sources=("spread",))
    assert list(spread_only.columns) == list(m.COLUMNS) and len(spread_only) == 4
    with pytest.raises(ValueError, match="gavel, sia, neusight, spread"):
        load_measurements(root, sources=("philly",))
    with pytest.raises(ValueError, match="distinct"):
        load_measurements(root, sources=("sia", "sia"))


def _neusight_tree(tmp_path: Path, name: str, text: str, gpu: str = "NVIDIA_A100_80GB_PCIe") -> Path:
    directory = tmp_path / "neusight"
    (directory / "labels" / gpu).mkdir(parents=True)
    (directory / "labels" / gpu / name).write_text(text)
    return directory


@pytest.mark.parametrize("text, field, where", [
    ('{\n  "fw_latency": 1.0,\n  "bwall_latency": 2.0\n}', "e2e_latency", "line 1"),  # missing
    ('{\n  "e2e_latency": 3.0,\n  "fw_latency": "fast",\n  "bwall_latency": 2.0\n}', "fw_latency", "line 3"),
    ('{\n  "e2e_latency": 3.0,\n  "fw_latency": 1.0,\n  "bwall_latency": 0\n}', "bwall_latency", "line 4"),
])
def test_neusight_malformed_values(tmp_path, text, field, where):
    with pytest.raises(MeasurementError) as info:
        load_neusight(_neusight_tree(tmp_path, "gpt2_large-train-1024-1.json", text))
    assert "gpt2_large-train-1024-1.json" in str(info.value) and repr(field) in str(info.value)
    assert (info.value.field, info.value.where) == (field, where)


def test_neusight_malformed_files(tmp_path):
    with pytest.raises(MeasurementError, match=r"line 2.*not valid JSON"):
        load_neusight(_neusight_tree(tmp_path / "a", "gpt2_large-train-1024-1.json", '{\n  "e2e_latency": ,\n}'))
    with pytest.raises(MeasurementError, match="unknown GPU folder 'Tesla_T4'") as info:
        load_neusight(_neusight_tree(tmp_path / "b", "gpt2_large-train-1024-1.json", "{}", gpu="Tesla_T4"))
    assert info.value.field == "GPU"
    with pytest.raises(MeasurementError, match="unknown LLM 'llama_7b'") as info:
        load_neusight(_neusight_tree(tmp_path / "c", "llama_7b-train-1024-1.json", "{}"))
    assert info.value.field == "model"
    with pytest.raises(MeasurementError, match="file name"):
        load_neusight(_neusight_tree(tmp_path / "d", "gpt2_large-infer-1024.json", "{}"))
    with pytest.raises(MeasurementError, match="directory not found"):
        load_neusight(tmp_path / "nowhere")


def _spread_file(tmp_path: Path, rows: str, header: str = _SPREAD_HEADER) -> Path:
    path = tmp_path / "spread" / "iterations.csv"
    path.parent.mkdir(parents=True)
    path.write_text(header + rows)
    return path


_ROW = "ResNet50,Tesla_T4,Tesla_T4,{ws},0,{batch},{share},200,{ms},1,1,1,gloo,a.json\n"


@pytest.mark.parametrize("rows, field, where", [
    (_ROW.format(ws=1, batch=16, share=100, ms=220) + _ROW.format(ws=1, batch=16, share=100, ms="n/a"),
     "iter_ms_median", "line 3"),  # non-numeric
    (_ROW.format(ws=1, batch=16, share=100, ms=-1.0), "iter_ms_median", "line 2"),  # negative
    (_ROW.format(ws="one", batch=16, share=100, ms=220), "world_size", "line 2"),
    (_ROW.format(ws=2, batch=16, share="full", ms=220), "computation_proportion", "line 2"),  # checked on every row
    (_ROW.format(ws=1, batch=0, share=100, ms=220), "batch", "line 2"),
    (_ROW.format(ws=1, batch=16, share=100, ms=220).replace("ResNet50", "GPT9"), "model", "line 2"),
    (_ROW.format(ws=1, batch=16, share=100, ms=220).replace("Tesla_T4,Tesla_T4", "A100,A100"), "gpu", "line 2"),
])
def test_spread_malformed_rows(tmp_path, rows, field, where):
    with pytest.raises(MeasurementError) as info:
        load_spread(_spread_file(tmp_path, rows))
    assert "iterations.csv" in str(info.value) and repr(field) in str(info.value)
    assert (info.value.field, info.value.where) == (field, where)


def test_spread_missing_column_and_file(tmp_path):
    header = _SPREAD_HEADER.replace("iter_ms_median,", "")
    with pytest.raises(MeasurementError) as info:
        load_spread(_spread_file(tmp_path, "", header=header))
    assert (info.value.field, info.value.where) == ("iter_ms_median", "line 1")
    with pytest.raises(MeasurementError, match="file not found"):
        load_spread(tmp_path / "absent.csv")


def test_load_neusight_ops_fixture():
    df = load_neusight_ops(NEUSIGHT)
    assert list(df.columns) == list(neusight_ops.COLUMNS)
    assert df["node"].tolist() == ["input_ids", "size", "bert_embeddings_word_embeddings", "matmul", "softmax"]
    assert set(df["device"]) == {"V100"} and set(df["workload"]) == {"bert_large"}
    assert (df["seq"] == 512).all() and (df["batch"] == 2).all()
    matmul = df.iloc[3]
    assert matmul["fx_op"] == "call_function" and matmul["input_shapes"] == [[2, 16, 512, 64], [2, 16, 64, 512]]
    assert matmul["output_shape"] == [2, 16, 512, 512] and (matmul["fw_ms"], matmul["bw_ms"]) == (0.5, 1.0)
    assert matmul["origin"] == f"{_V100}/bert_large-train-512-2.csv:5"
    assert df.iloc[0]["input_shapes"] == [] and df.iloc[1]["dtype"] == ""
    assert df.attrs["excluded"] == []


_OPS_HEADER = "Name,op,target,input_shapes,output_shape,dtype,latency,fw_latency,bw_latency\n"


@pytest.mark.parametrize("text, field, where", [
    (_OPS_HEADER + 'mm,call_function,mm,"[[2, 3]]","(2, 3)",torch.float32,1.0,fast,0.5\n', "fw_latency", "line 2"),
    (_OPS_HEADER + 'mm,call_function,mm,"[[2, x]]","(2, 3)",torch.float32,1.0,0.5,0.5\n', "input_shapes", "line 2"),
    (_OPS_HEADER + 'mm,call_function,mm,"[[2, 3]]","(2, 3.5)",torch.float32,1.0,0.5,0.5\n', "output_shape", "line 2"),
    (_OPS_HEADER.replace(",bw_latency", "") + 'mm,call_function,mm,"[[2]]","(2,)",,1.0,0.5\n', "bw_latency", "line 1"),
])
def test_neusight_ops_malformed(tmp_path, text, field, where):
    with pytest.raises(MeasurementError) as info:
        load_neusight_ops(_neusight_tree(tmp_path, "gpt2_large-train-1024-1.csv", text))
    assert "gpt2_large-train-1024-1.csv" in str(info.value) and repr(field) in str(info.value)
    assert (info.value.field, info.value.where) == (field, where)


@pytest.mark.parametrize("workload", NEUSIGHT_WORKLOADS + SPREAD_WORKLOADS)
def test_new_workload_configs_build_on_meta(workload):
    config = workload_config(workload, 2)
    w = build(config, "meta")
    inputs, targets = w.inputs("meta")
    out = w.model(*inputs)
    assert out.device.type == "meta" and out.shape[0] == 2 and w.loss(out, targets).shape == ()


def test_new_workload_config_sizes():
    assert workload_config("gpt2_large", 4).input_size == 1024 and workload_config("gpt3_27", 1).model == "gpt3_2.7b"
    assert workload_config("bert_large", 8).input_size == 512 and workload_config("opt_1.3b", 1).input_size == 2048
    assert workload_config("gpt2_large", 4, input_size=512).config_id == "gpt2_large:b4:s512:float32:adam:c50257"
    assert workload_config("gpt2_xl", 1).input_size == 1024  # not measured: the model's maximum
    inception = workload_config("spread_inception_v3", 8)
    assert (inception.model, inception.input_size, inception.num_classes) == ("inception_v3", 299, 1000)
    assert workload_config("spread_resnet18", 8, input_size=32).input_size == 32  # another size assumption
    lstm, gavel_lstm = workload_config("spread_lstm", 20), workload_config("lstm_wikitext2", 20)
    assert lstm == gavel_lstm  # the same word-language-model job
    bert = workload_config("spread_bert_base", 8)
    assert (bert.model, bert.input_size, bert.num_classes) == ("transformer_encoder", 128, 30522)
    assert bert.get("layers") == 12
    assert set(SPREAD_CONFIGS) == set(m.SPREAD_MODELS.values())


# --- the real NeuSight and SPREAD files ---------------------------------------------------------


@pytest.fixture(scope="module")
def real_calibration(shared_dir):
    path = shared_dir / "calibration"
    if not (path / "neusight" / "labels").is_dir() or not (path / "spread" / "iterations.csv").is_file():
        pytest.skip(f"NeuSight / SPREAD data under {path} not found")
    return path


def test_real_neusight_rows(real_calibration):
    df = load_neusight(real_calibration / "neusight")
    assert df.groupby("device").size().to_dict() == {"A100-80GB": 8, "V100": 3}  # README's 10 A100 incl. Switch-XL
    assert len(df.attrs["excluded"]) == 5  # 3 four-GPU runs, 2 Switch-XL
    assert set(df["workload"]) == set(NEUSIGHT_WORKLOADS)
    assert ((df["forward_s"] + df["backward_s"] - df["seconds"]).abs() < 1e-6 * df["seconds"]).all()
    gpt2 = df[(df.device == "A100-80GB") & (df.workload == "gpt2_large") & (df.batch == 4)]
    assert gpt2["seconds"].item() == pytest.approx(1.6357, abs=1e-4)  # README's example
    for row in df.itertuples():
        assert workload_config(row.workload, row.batch, input_size=row.seq).input_size == row.seq
        assert workload_config(row.workload, row.batch).input_size == row.seq  # the default is the measured one
    ops = load_neusight_ops(real_calibration / "neusight")
    assert len(ops) == 1215 and ops.groupby(["device", "workload", "batch"]).ngroups == 11
    # ``latency`` is timed on its own: fw + bw for most nodes, more for 140 (mostly modules with weights)
    assert (ops["latency_ms"] >= ops["fw_ms"] + ops["bw_ms"] - 1e-4).all()
    assert ((ops["latency_ms"] - ops["fw_ms"] - ops["bw_ms"]).abs() < 1e-3).sum() == 1215 - 140


def test_real_spread_rows(real_calibration):
    df = load_spread(real_calibration / "spread" / "iterations.csv")
    excluded = df.attrs["excluded"]
    assert len(df) + len(excluded) == 169  # the README's single-GPU whole-GPU rows
    assert (len(df), len(excluded)) == (143, 26)  # 26 YoloV5S rows have no zoo model
    assert set(df["workload"]) == set(SPREAD_WORKLOADS)
    assert df.groupby("device").size().to_dict() == {"RTX2080Ti": 99, "T4": 44}
    r50 = df[(df.device == "T4") & (df.workload == "spread_resnet50") & (df.batch == 16)]
    assert r50["seconds"].median() == pytest.approx(0.226, abs=0.01)  # README's example: 226 ms


@pytest.mark.parametrize("fx_op, target, dtype, op", [
    ("call_module", "bert.encoder.layer.0.attention.self.query", "torch.float32", "linear"),
    ("call_module", "bert.encoder.layer.0.output.LayerNorm", "torch.float32", "layer_norm"),
    ("call_module", "transformer.h.0.ln_1", "torch.float32", "layer_norm"),
    ("call_module", "model.decoder.embed_tokens", "torch.float32", "embedding"),
    ("call_module", "transformer.h.0.attn.attn_dropout", "torch.float32", "dropout"),
    ("call_module", "model.decoder.layers.0.activation_fn", "torch.float32", "gelu"),
    ("call_function", "<built-in method addmm of type object at 0x15552dc96d80>", "torch.float32", "addmm"),
    ("call_function", "<built-in function truediv>", "torch.float32", "div"),
    ("call_function", "<function softmax at 0x1554949e1a20>", "torch.float32", "softmax"),
    ("call_method", "contiguous", "torch.float32", "clone"),
    ("call_method", "view", "torch.float32", None),  # a view launches nothing
    ("call_function", "<built-in function getitem>", "", None),  # a Python int from a size
    ("placeholder", "input_ids", "torch.int64", None),
])
def test_neusight_node_ops(fx_op, target, dtype, op):
    assert neusight_ops.node_op(fx_op, target, dtype) == op


def _labelled_layer(tmp_path: Path) -> Path:
    # bert_large has 24 layers: the layer-0 block (rows 3-6, up to the next module) counts 24 times
    rows = ['input_ids,placeholder,input_ids,[],"(2, 512)",,0,0,0',
            'bert_embeddings_word_embeddings,call_module,bert.embeddings.word_embeddings,"[[2, 512]]",'
            '"(2, 512, 1024)",torch.float32,0.3,0.1,0.2',
            'bert_encoder_layer_0_attention_self_query,call_module,bert.encoder.layer.0.attention.self.query,'
            '"[[2, 512, 1024]]","(2, 512, 1024)",torch.float32,3.0,1.0,2.0',
            'matmul,call_function,<built-in method matmul of type object at 0x1>,'
            '"[[2, 16, 512, 64], [2, 16, 64, 512]]",'
            '"(2, 16, 512, 512)",torch.float32,1.5,0.5,1.0',
            'view,call_method,view,"[[2, 512, 1024]]","(2, 512, 16, 64)",torch.float32,0.01,0.01,0',
            'add,call_function,<built-in function add>,"[[2, 512, 1024], [2, 512, 1024]]","(2, 512, 1024)",'
            'torch.float32,0.03,0.02,0.01',
            'cls_predictions_decoder,call_module,cls.predictions.decoder,"[[2, 512, 1024]]","(2, 512, 30522)",'
            'torch.float32,9.0,3.0,6.0',
            'output,output,output,[],"(2, 512, 30522)",torch.float32,0,0,0']
    return _neusight_tree(tmp_path, "bert_large-train-512-2.csv", _OPS_HEADER + "\n".join(rows) + "\n",
                          gpu="Tesla_V100-PCIE-32GB")


def test_neusight_class_times_expand_the_layer_by_hand(tmp_path):
    ops = load_neusight_ops(_labelled_layer(tmp_path))
    assert neusight_ops.layer_block(ops) == (2, 6)
    table = neusight_ops.class_times(ops).set_index(["phase", "cls"])
    assert set(table["device"]) == {"V100"} and set(table["batch"]) == {2} and set(table["seq"]) == {512}
    # matmul: (query 1.0 + matmul 0.5) x 24 + decoder 3.0 = 39 ms forward; (2 + 1) x 24 + 6 = 78 ms backward
    assert table.loc[("forward", "matmul"), "measured_s"] == pytest.approx(0.039)
    assert table.loc[("backward", "matmul"), "measured_s"] == pytest.approx(0.078)
    assert table.loc[("forward", "matmul"), "nodes"] == 2 * 24 + 1
    assert table.loc[("forward", "elementwise"), "measured_s"] == pytest.approx(0.02 * 24 / 1e3)  # the add, no view
    assert table.loc[("forward", "embedding"), "measured_s"] == pytest.approx(0.1e-3)  # outside the layer: once
    assert table.loc[("forward", "embedding"), "origin"].endswith("Tesla_V100-PCIE-32GB/bert_large-train-512-2.csv")


def test_neusight_class_times_need_a_layer(tmp_path):
    text = _OPS_HEADER + 'lm_head,call_module,lm_head,"[[1, 4]]","(1, 8)",torch.float32,1,0.5,0.5\n'
    with pytest.raises(MeasurementError, match="layer 0") as info:
        neusight_ops.class_times(load_neusight_ops(_neusight_tree(tmp_path, "gpt2_large-train-1024-1.csv", text)))
    assert "gpt2_large-train-1024-1.csv" in str(info.value) and info.value.field == "Name"

"""Work done once: a checkpoint read once per table build and run, ``params.json`` parsed once a
process for the same bytes, a zoo model built once per ``ets predict``.

Why: a second read of a checkpoint could see another file than the one hashed into a table's cache
key (and costs the time); the meta model was built three times per ``ets predict``.
"""

from __future__ import annotations

import shutil

import pandas as pd
import pytest

from predictor.common import inputs
from predictor.common.inputs import InputError


@pytest.fixture
def reads(monkeypatch) -> list[str]:
    """The names of the files read through the input reader (checkpoints, params.json)."""
    seen: list[str] = []
    real = inputs.read_bytes

    def counting(path, what="input file"):
        seen.append(str(path).rsplit("/", 1)[-1])
        return real(path, what)

    monkeypatch.setattr(inputs, "read_bytes", counting)
    return seen


def checkpoints_read(reads: list[str]) -> list[str]:
    return sorted(r for r in reads if r.endswith(".pt"))


def test_a_table_built_reads_each_checkpoint_once_and_its_models_come_from_those_bytes(monkeypatch, tmp_path, reads):
    from predictor import tables
    from predictor.checkpoints import CHECKPOINT_DIR, Pretrained
    from traces.workloads import read_workloads

    monkeypatch.setenv("ETS_SIM_CACHE", str(tmp_path / "cache"))
    folder = tmp_path / "ckpt"
    folder.mkdir()
    for gpu in ("T4", "V100"):
        shutil.copy(CHECKPOINT_DIR / f"opbased-{gpu}.pt", folder / f"opbased-{gpu}.pt")
    catalog = read_workloads()
    sequences = catalog[catalog["config_id"].isin(sorted(catalog["config_id"].unique())[:2])]
    pretrained = Pretrained("opbased", ["T4", "V100"], folder)
    assert checkpoints_read(reads) == ["opbased-T4.pt", "opbased-V100.pt"]
    (folder / "opbased-T4.pt").write_bytes(b"not a checkpoint any more")  # what was read is what is used
    reads.clear()
    table = tables.method_table("opbased", sequences, ["V100", "T4"], folder, pretrained=pretrained,
                                warn=lambda line: None)
    assert checkpoints_read(reads) == []  # built from the bytes read, its cache key hashing those same bytes
    assert len(table) == 4 and (table.to_frame()["seconds"] > 0).all()
    same = tables.method_table("opbased", sequences, ["T4", "V100"], folder, pretrained=pretrained)
    assert same.to_frame().equals(table.to_frame()) and checkpoints_read(reads) == []  # from the cache
    with pytest.raises(InputError, match="not a checkpoint of this tool"):
        tables.method_table("opbased", sequences, ["T4", "V100"], folder)  # read afresh: the file on disk now


def test_the_intervals_of_a_run_come_from_the_checkpoints_its_table_read(monkeypatch, tmp_path, reads):
    from simulator.timing import make_predictor
    from traces.workloads import read_workloads

    monkeypatch.setenv("ETS_SIM_CACHE", str(tmp_path / "cache"))
    catalog = read_workloads().groupby("config_id")["family"].first()
    bound = pd.DataFrame({"job_id": ["a", "b"], "config_id": catalog.index[:2], "iterations": [10, 20]})
    predictor = make_predictor("ets")
    predictor.runtimes(bound, ["T4", "V100"], None)
    predictor.quantile_factors(0.9, bound, ["T4", "V100"])
    predictor.quantile_factors(0.5, bound, ["V100"])
    assert checkpoints_read(reads) == ["ets-T4.pt", "ets-V100.pt"]


def test_params_are_parsed_once_for_the_same_bytes_and_again_when_they_change(tmp_path):
    from predictor.emulator.devices import specs

    path = tmp_path / "params.json"
    shutil.copy(specs.PARAMS_FILE, path)
    first = specs.load_params(path)
    assert specs.load_params(path) is first  # the same bytes, the same catalogue: not parsed again
    path.write_text(" " + path.read_text())  # the same values, other bytes
    second = specs.load_params(path)
    assert second is not first and second == first  # parsed again, to the same values
    path.write_text("{}")
    with pytest.raises(specs.DeviceParamsError, match="format"):
        specs.load_params(path)  # a changed file is read and checked again, never served stale


def test_ets_predict_builds_the_model_once(monkeypatch):
    from predictor.emulator.capture import opseq
    from predictor.emulator.zoo import registry
    from predictor.emulator.zoo.config import ModelConfig
    from predictor.memory import estimate

    builds: list[str] = []
    real = registry.build

    def counting(config, device="meta"):
        builds.append(str(device))
        return real(config, device)

    monkeypatch.setattr(registry, "build", counting)
    monkeypatch.setattr(opseq, "build", counting)
    config = ModelConfig("vision", "resnet", "resnet18", batch=2, input_size=32)
    trace = opseq.capture(config, "meta")
    memory = estimate(config, trace)
    assert builds == ["meta"]  # the capture's build; the estimate reads the parameter count it recorded
    parameters = sum(p.numel() for p in real(config, "meta").model.parameters())
    assert memory.state_bytes == parameters * 4 * (2 + 1)  # fp32 weights, gradients, SGD momentum

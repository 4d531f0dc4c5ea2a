"""The zoo's timm and Hugging Face families: naming, groups, the reservation rule, capture, bad input."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner

from predictor.checkpoint_file import read
from predictor.cli import main
from predictor.common import families
from predictor.emulator.collect import collect
from predictor.emulator.zoo import hf_models, timm_models
from predictor.emulator.zoo.config import ModelBuildError, ModelConfig
from predictor.emulator.zoo.registry import zoo_configs, zoo_families

ROOT = Path(__file__).resolve().parents[3]
NEW_FAMILIES = sorted(set(timm_models.FAMILIES) | (set(hf_models.TASKS_OF) - set(hf_models.EXCLUDED)))
RESERVED = [f for f in NEW_FAMILIES if hashlib.sha256(f.encode()).hexdigest()[0] in "01"]


def test_reservation_rule_is_the_sha256_first_digit_of_new_families_only():
    assert RESERVED, "about one in eight new families is reserved; the zoo has a hundred"
    for family in NEW_FAMILIES:
        assert families.is_reserved(family) == (family in RESERVED)
    assert not any(families.is_reserved(f) for f in families.FIRST_FAMILIES)
    # a first family whose digest starts with 0 or 1 is spared: the rule is for families new since
    spared = [f for f in families.FIRST_FAMILIES if hashlib.sha256(f.encode()).hexdigest()[0] in "01"]
    assert all(not families.is_reserved(f) for f in spared)


def test_every_zoo_leaves_reserved_families_out_unless_named():
    every = {c.family for c in zoo_configs("wide")}
    assert not every & set(RESERVED)
    named = zoo_configs("wide", families=[RESERVED[0]])
    assert named and {c.family for c in named} == {RESERVED[0]}


def test_family_names_are_the_timm_module_and_the_transformers_model_type():
    import timm
    import transformers

    for family, models in timm_models.FAMILIES.items():
        assert set(models) <= set(timm.list_models(module=family)), family
        assert family not in families.FIRST_FAMILIES and family in families.TIMM_GROUPS
    for model_type in list(hf_models.TASKS_OF)[:12]:
        assert transformers.AutoConfig.for_model(model_type).model_type == model_type
    assert set(hf_models.TASKS_OF) == set(families.HF_GROUPS)


def test_the_zoo_lists_a_hundred_families_each_in_a_group():
    listed = {**zoo_families("wide"), **zoo_families("llm")}
    assert len(listed) >= 100
    assert all(f.group in families.GROUPS for f in listed.values())
    assert {f.name for f in listed.values() if f.reserved} == set(RESERVED)
    result = CliRunner().invoke(main, ["zoo", "list", "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert len(data["families"]) == len(listed)
    row = next(r for r in data["families"] if r["family"] == "llama")
    assert row["source"].startswith("transformers ") and row["group"] == "decoder LM"


def test_timm_and_transformers_configs_capture_on_the_meta_device():
    from predictor.emulator.capture.opseq import capture

    name = timm_models.FAMILIES["starnet"][0]
    image = capture(timm_models.config_for(name, batch=1, size=64), "meta")
    assert image["family"].iloc[0] == "starnet" and image["op"].str.contains("conv").any()
    text = capture(hf_models.config_for("llama", batch=1, seq=32, preset="L2-H128"), "meta")
    assert text["family"].iloc[0] == "llama" and text["op"].str.contains("mm").any()
    real = hf_models.hf_config(hf_models.config_for("llama", batch=1, seq=32, preset=None))
    assert real.num_hidden_layers == 32  # the real size is the config class's defaults (7B)


def test_collect_refuses_an_unknown_family_in_one_line(tmp_path):
    result = CliRunner().invoke(main, ["collect", "--zoo", "wide", "--family", "lamma", "--out", str(tmp_path)])
    assert result.exit_code == 2
    assert "unknown family 'lamma' (did you mean llama" in result.output and "Traceback" not in result.output


def test_collect_captures_a_reserved_family_only_when_named(tmp_path):
    from predictor.common.op_trace import read_dataset

    reserved = next(f for f in RESERVED if f in timm_models.FAMILIES)
    args = ["collect", "--zoo", "timm", "--device", "meta", "--max-batch", "1", "--max-size", "64", "--workers", "1"]
    plain = CliRunner().invoke(main, [*args, "--limit", "3", "--out", str(tmp_path / "a")])
    assert plain.exit_code == 0, plain.output
    assert not set(read_dataset(tmp_path / "a")["family"]) & set(RESERVED)
    named = CliRunner().invoke(main, [*args, "--limit", "1", "--family", reserved, "--out", str(tmp_path / "b")])
    assert named.exit_code == 0, named.output
    assert set(read_dataset(tmp_path / "b")["family"]) == {reserved}


def test_a_model_that_fails_to_build_is_named_and_the_others_go_on(tmp_path):
    good = timm_models.config_for(timm_models.FAMILIES["starnet"][0], batch=1, size=64)
    bad = ModelConfig(kind="timm", family="starnet", model="timm_no_such_model", batch=1, input_size=64)
    counts = collect([bad, good], "meta", tmp_path, workers=1)
    assert counts["captured"] == 1 and counts["failed"] == 1
    failure = json.loads((tmp_path / "failures.jsonl").read_text().splitlines()[0])
    assert failure["config_id"] == bad.config_id and "unknown timm model" in failure["error"]


@pytest.mark.parametrize("model_type", ["rag", "no_such_architecture"])
def test_an_architecture_that_cannot_be_made_from_its_config_alone_is_refused_in_one_line(monkeypatch, model_type):
    from predictor.emulator.zoo.registry import build

    monkeypatch.setitem(hf_models.TASKS_OF, model_type, "seq2seq")  # rag needs a retriever's sub-configs
    config = ModelConfig(kind="hf", family=model_type, model=f"hf_{model_type}", batch=1, input_size=8,
                         num_classes=100, extra={"preset": "L2-H128"})
    with pytest.raises(ModelBuildError) as error:
        build(config, "meta")
    message = str(error.value)
    assert model_type in message and "\n" not in message and len(message) < 600


def test_a_transformers_class_reaching_for_the_hub_fails_at_once():
    """A class that wants a hub file (a tokenizer here) fails in seconds, never a network hang:
    the zoo loads transformers offline (a fresh process, as `ets collect` is)."""
    import subprocess
    import sys
    import time

    code = ("from predictor.emulator.zoo import hf_models; hf_models._base_config('llama'); import transformers\n"
            "try:\n    transformers.AutoTokenizer.from_pretrained('bert-base-uncased')\n"
            "except OSError as exc:\n    print('refused:', type(exc).__name__)")
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert "refused: " in done.stdout, done.stderr[-2000:]
    assert time.perf_counter() - start < 60


def test_no_committed_data_or_shipped_checkpoint_holds_a_reserved_family():
    from predictor.common.op_trace import read_trace_file

    for parquet in sorted((ROOT / "experiments" / "data").rglob("*.parquet")):
        held = set(read_trace_file(parquet)["family"])
        assert not held & set(RESERVED), parquet
    for checkpoint in sorted((ROOT / "predictor" / "checkpoints").glob("*.pt")):
        assert not _strings(read(checkpoint)) & set(RESERVED), checkpoint


def _strings(value) -> set[str]:
    """Every string anywhere in a checkpoint body (keys and values; family names in splits,
    interval calibrations, vocabularies), each also split at ':' (config ids)."""
    if isinstance(value, str):
        return {value, *value.split(":")}
    if isinstance(value, dict):
        return set().union(*(_strings(k) | _strings(v) for k, v in value.items())) if value else set()
    if isinstance(value, (list, tuple)):
        return set().union(*(_strings(v) for v in value)) if value else set()
    return set()


def test_hf_inputs_follow_the_task():
    ctc = hf_models.config_for("hubert", batch=2, seq=8000) if "hubert" not in hf_models.EXCLUDED else None
    if ctc is not None:
        (audio,), targets = hf_models.inputs(ctc)(torch.device("meta"))
        assert audio.shape == (2, 8000) and targets.shape == (2, hf_models.ctc_frames(ctc))
    t5 = hf_models.config_for("t5", batch=2, seq=16)
    (tokens, decoder), targets = hf_models.inputs(t5)(torch.device("meta"))
    assert tokens.shape == decoder.shape == targets.shape == (2, 16)

"""The shipped data set's configs and its pinned held-out units."""

from __future__ import annotations

import pandas as pd
import pytest

from experiments.pretrain import EXTRA_CONFIGS, LLM_CONFIGS, TEST_UNITS, dataset_configs, held_out_units, llm_configs


def test_extra_configs_extend_the_stratified_prefix_with_one_family_only():
    base, extra = dataset_configs(42)
    assert len(base) == 42 + LLM_CONFIGS and len(extra) == EXTRA_CONFIGS["lstm"]
    assert [c.config_id for c in base[42:]] == [c.config_id for c in llm_configs()]
    assert {c.family for c in base[42:]} == {"gpt2", "gpt3", "opt", "bert"}
    assert {"gpt3", "opt"} <= set(TEST_UNITS) and not {"gpt2", "bert"} & set(TEST_UNITS)  # held out by family
    assert len({c.config_id for c in base[42:]}) == LLM_CONFIGS  # every model x dtype, distinct points
    assert {c.family for c in extra} == {"lstm"}
    assert not {c.config_id for c in base} & {c.config_id for c in extra}


def test_held_out_speech_configs_come_from_the_base_configs_only():
    ids = ["lstm_speech:b2:s100:x1", "lstm_speech:b4:s100:x1", "lstm_speech:b8:s100:x1", "lstm_speech:b16:s100:x1"]
    traces = pd.DataFrame({"config_id": ids, "model": "lstm_speech"})
    base = {ids[0], ids[1], ids[3]}  # ids[2] is an extra config
    # base in id order: b16, b2, b4 -> every other: b16, b4
    assert held_out_units(traces, base) == TEST_UNITS + ["lstm:lstm_speech:b16:s100:x1", "lstm:lstm_speech:b4:s100:x1"]


def test_configs_that_failed_before_are_read_from_the_failure_log(tmp_path):
    from experiments.pretrain import _failed_ids

    log = tmp_path / "failures.jsonl"
    assert _failed_ids(log) == set()  # no log: nothing skipped
    log.write_text('{"config_id": "lstm_lm:b128", "device": "meta", "error": "RuntimeError: out of memory"}\n\n'
                   '{"config_id": "lstm_speech:b64", "device": "meta", "error": "RuntimeError"}\n')
    assert _failed_ids(log) == {"lstm_lm:b128", "lstm_speech:b64"}


def test_habitat_sources_are_read_from_the_shipped_checkpoints():
    """Which GPU each Habitat model learns from is recorded once: the shipped habitat-<GPU>.pt
    config's source_device (the table experiments.pretrain kept before gave the same)."""
    from experiments.pretrain import HABITAT_SOURCE_UNSHIPPED, habitat_source
    from predictor.checkpoints import CHECKPOINT_DIR, available

    shipped = available(CHECKPOINT_DIR, "habitat")
    if not shipped:
        pytest.skip("no shipped Habitat checkpoints (python -m experiments.pretrain)")
    assert not set(shipped) & set(HABITAT_SOURCE_UNSHIPPED)  # each GPU's source is kept in one place
    old = {"T4": "V100", "P100": "T4", "V100": "T4", "A100": "V100", "H100": "V100", "L4": "T4"}
    assert {g: habitat_source(g) for g in old} == old

"""The new families on the emulated GPUs: which configs, and the memory limit."""

from __future__ import annotations

from experiments import emulated_families as ef
from predictor.common.families import is_reserved
from predictor.emulator.zoo import hf_models, timm_models


def test_candidates_cover_every_unreserved_new_family_and_no_reserved_one():
    candidates = ef.candidate_configs(3)
    new = {f for f in timm_models.FAMILIES} | {m for m in hf_models.TASKS_OF if m not in hf_models.EXCLUDED}
    assert set(candidates) == {f for f in new if not is_reserved(f)} - set(ef.TOO_COSTLY)
    assert all(configs and all(c.family == f for c in configs) for f, configs in candidates.items())
    # Hugging Face at the config class's real size: no preset, the real vocabulary
    llama = candidates["llama"]
    assert all(not c.extra_dict for c in llama) and {c.dtype for c in llama} == {"float16", "float32"}
    assert candidates == ef.candidate_configs(3)  # seeded
    assert candidates != ef.candidate_configs(3, seed=1)


def test_configs_over_the_memory_limit_are_left_out_with_the_reason(tmp_path, monkeypatch):
    family = next(f for f in sorted(timm_models.FAMILIES) if not is_reserved(f))
    candidates = {family: ef.candidate_configs(1)[family][:2]}
    chosen, left_out = ef.choose_configs(candidates, 1, tmp_path / "seq", rounds=(2,))
    assert [c.config_id for c in chosen] == [candidates[family][0].config_id] and not left_out
    monkeypatch.setattr(ef, "MEMORY_LIMIT_GB", 1e-6)
    chosen, left_out = ef.choose_configs(candidates, 1, tmp_path / "seq", rounds=(2,))
    assert chosen == [] and set(left_out) == {c.config_id for c in candidates[family]}
    assert all("GB (> 1e-06 GB)" in reason for reason in left_out.values())

"""ETS: features, splits, training (a tiny model overfits tiny data), inference, checkpoints."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from predictor import checkpoint_file
from predictor.common.op_trace import DTYPES, PHASES
from predictor.dataset import split_by_family, unit_of
from predictor.evaluate import evaluate, headline_metrics
from predictor.features import (
    CONTEXT_COLUMNS,
    OPTIMIZERS,
    encode,
    encode_targets,
    fit_features,
    heavy_ops,
    iteration_context,
)
from predictor.methods import ets
from tests.predictor.ets_data import tiny_traces

FAST = dict(hidden=16, layers=2, lr=1e-2, batch_size=64, max_minutes=2.0)


@pytest.fixture(scope="module")
def traces():
    return tiny_traces()


@pytest.fixture(scope="module")
def overfit(traces):
    alexnet = traces[traces["family"] == "alexnet"]
    # bounded by epochs, not by time: a busy machine must not stop it early
    config = ets.EtsConfig(max_epochs=150, patience=150, seed=0, **{**FAST, "lr": 3e-2, "max_minutes": 60.0})
    return ets.train(alexnet, alexnet, config, progress=False), alexnet


def test_features_layout_and_train_only_scalers(traces):
    train = traces[traces["family"] != "vgg"]
    spec = fit_features(train, top_k=5)
    x = encode(spec, traces)
    slots = len(spec.ops) + 1  # 5 frequent + the heavy ones + others
    assert set(spec.ops) == set(train["op"].value_counts().index[:5]) | heavy_ops(train)
    assert x.shape == (len(traces), spec.dim) and spec.dim == slots + len(PHASES) + len(DTYPES) + len(OPTIMIZERS) + 34
    assert (x[:, :slots].sum(axis=1) == 1).all()  # exactly one op slot
    top = train["op"].value_counts().index[0]
    assert spec.ops[0] == top and (x[(traces["op"] == top).to_numpy(), 0] == 1).all()
    # continuous columns z-scored with the training rows' statistics, not the full data's
    z = encode(spec, train)[:, -34:]
    assert np.allclose(z.mean(axis=0), 0, atol=1e-4)
    assert not np.allclose(x[:, -34:].mean(axis=0), 0, atol=1e-3)
    y = encode_targets(spec, train)
    assert np.allclose(y.mean(axis=0), 0, atol=1e-4) and np.allclose(y.std(axis=0), 1, atol=1e-3)


def test_iteration_context_counts_what_came_before_in_each_segment():
    # rows out of order on purpose; trace a: forward idx 0-1, backward idx 2, update idx 3
    t = pd.DataFrame({"config_id": ["a", "a", "a", "a", "b", "b"], "idx": [2, 0, 1, 3, 0, 1],
                      "phase": ["backward", "forward", "forward", "update", "forward", "backward"],
                      "flops": [10.0, 1.0, 3.0, 5.0, 7.0, 2.0], "bytes": [4.0, 1.0, 2.0, 8.0, 1.0, 1.0]})
    # FLOPs / bytes / ops before the op in its segment (forward | backward + update), trace totals
    expected = [[0, 0, 0, 19, 15, 4], [0, 0, 0, 19, 15, 4], [1, 1, 1, 19, 15, 4], [10, 4, 1, 19, 15, 4],
                [0, 0, 0, 9, 2, 2], [0, 0, 0, 9, 2, 2]]
    assert np.allclose(np.expm1(iteration_context(t)), expected)


def test_context_columns_extend_the_feature_vector(traces):
    plain, with_context = fit_features(traces), fit_features(traces, context=True)
    assert with_context.dim == plain.dim + CONTEXT_COLUMNS
    x = encode(with_context, traces)
    assert np.allclose(x[:, :plain.dim - 34], encode(plain, traces)[:, :plain.dim - 34])  # one-hots unchanged
    assert np.allclose(x[:, -CONTEXT_COLUMNS:].mean(axis=0), 0, atol=1e-4)  # z-scored like the others


def _trace(config_id: str, ops: list[tuple[str, float, float]]) -> pd.DataFrame:
    return pd.DataFrame([{"config_id": config_id, "op": op, "duration_us": d, "gap_us": g} for op, d, g in ops])


def test_a_rare_op_that_dominates_some_iteration_gets_its_own_slot():
    # 40 add_ of 1 µs + 1 µs gap; a 20 µs lstm in one trace (20 % of it), a 0.5 µs ones_like (0.6 %)
    small = [("add_", 1.0, 1.0)] * 40
    train = pd.concat([_trace("a", small + [("lstm", 20.0, 0.0)]), _trace("b", small + [("ones_like", 0.5, 0.0)])])
    assert heavy_ops(train) == {"add_", "lstm"}  # add_ in aggregate: 80 % of each trace
    assert heavy_ops(train, share=0.25) == {"add_"}


def test_loss_weights_are_half_uniform_half_time_share():
    ordered = _trace("a", [("conv", 3.0, 0.0), ("relu", 1.0, 0.0)])
    w = ets.op_weights(ordered, np.array([0, 2]))
    # shares of the 4 µs iteration: conv 3/4, relu 1/4, gaps 0; × 2 ops, + 0.5
    assert np.allclose(w, [[2.0, 0.5], [1.0, 0.5]])


def test_per_op_normalisation_uses_each_op_types_statistics(traces):
    spec = fit_features(traces, norm="per-op")
    op = traces["op"].value_counts().index[0]
    rows = traces[traces["op"] == op]
    y = encode_targets(spec, rows)
    assert op in spec.per_op and np.allclose(y.mean(axis=0), 0, atol=1e-4)


def test_unencodable_dtype_is_named(traces):
    spec = fit_features(traces)
    with pytest.raises(ValueError, match="'int8' not encodable"):
        encode(spec, traces.head(3).assign(dtype="int8"))


def test_split_is_family_disjoint_and_randwire_splits_by_graph(traces):
    split = split_by_family(traces, test_fraction=0.3, val_fraction=0.2, seed=1)
    fam = traces.groupby("config_id")["family"].first()
    parts = {p: set(fam[list(getattr(split, p))]) for p in ("train", "val", "test")}
    assert parts["train"] and parts["val"] and parts["test"]
    assert not (parts["train"] & parts["test"]) and not (parts["val"] & parts["test"])
    assert parts["val"] <= parts["train"]  # validation: configs of the training families
    assert len(split.train) + len(split.val) + len(split.test) == fam.size
    assert len(split.val) == round(0.2 * fam.size)
    assert unit_of("randwire", "randwire_ws:b16:s64:float32:sgd:c412:x1f0c9a3e") == "randwire:randwire_ws:x1f0c9a3e"
    assert (unit_of("transformer", "transformer_seq2seq:b8:s64:float32:adam:c100:x1")
            == "transformer:transformer_seq2seq")
    assert unit_of("lstm", "lstm_speech:b2:s100:float32:sgd:c29:x2") == "lstm:lstm_speech:b2:s100:float32:sgd:c29:x2"
    pinned = split_by_family(traces, test_families=["vgg"], seed=1)
    assert pinned.test_units == ("vgg",)
    with pytest.raises(ValueError, match="not in the data: gpt"):
        split_by_family(traces, test_families=["gpt"])


def test_a_tiny_model_overfits_a_tiny_dataset(overfit):
    model, data = overfit
    losses = [h["train_loss"] for h in model.history]
    assert losses[-1] < 0.1 < losses[0]
    result = evaluate(model, data).headline()
    assert result["mre"] < 0.05 and result["traces"] == 3


def test_iteration_time_is_the_sum_of_op_predictions(overfit):
    model, data = overfit
    ops = model.predict_ops(data)
    summary = model.iteration_times(data)
    per_trace = (ops["pred_duration_us"] + ops["pred_gap_us"]).groupby(ops["config_id"]).sum()
    assert np.allclose(summary.set_index("config_id")["pred_us"], per_trace)
    phases = summary[["pred_forward_us", "pred_backward_us", "pred_update_us"]].sum(axis=1)
    assert np.allclose(phases, summary["pred_us"])
    assert np.allclose(summary["pred_duration_us"] + summary["pred_gap_us"], summary["pred_us"])
    assert (ops["pred_duration_us"] >= 0).all() and (ops["pred_gap_us"] >= 0).all()


def test_checkpoint_round_trip_gives_identical_predictions(overfit, tmp_path):
    model, data = overfit
    path = model.save(tmp_path / "m.pt")
    again = ets.load(path)
    assert again.device == "emulated:T4" and again.fingerprint == model.fingerprint
    pd.testing.assert_frame_equal(again.iteration_times(data), model.iteration_times(data))


def test_mismatched_checkpoints_are_refused_with_a_reason(overfit, tmp_path):
    model, _ = overfit
    path = model.save(tmp_path / "m.pt")
    body = checkpoint_file.read(path)
    body["spec"]["ops"] = body["spec"]["ops"][:-1]  # one op type fewer: the weights no longer fit
    checkpoint_file.write(tmp_path / "spec.pt", body)
    with pytest.raises(checkpoint_file.CheckpointError, match="spec.pt.*incompatible"):
        ets.load(tmp_path / "spec.pt")
    body = checkpoint_file.read(path)
    body["config"]["hidden"] = 8
    checkpoint_file.write(tmp_path / "arch.pt", body)
    with pytest.raises(checkpoint_file.CheckpointError, match="arch.pt.*weights do not match"):
        ets.load(tmp_path / "arch.pt")
    body["format"] = 0
    checkpoint_file.write(tmp_path / "old.pt", body)
    with pytest.raises(checkpoint_file.CheckpointError, match="old.pt.*format 0"):
        ets.load(tmp_path / "old.pt")
    (tmp_path / "junk.pt").write_bytes(b"not a checkpoint")
    with pytest.raises(checkpoint_file.CheckpointError, match="junk.pt: not a checkpoint of this tool"):
        ets.load(tmp_path / "junk.pt")


def test_checkpoints_from_before_the_context_columns_still_load(traces, tmp_path):
    data = traces[traces["family"] == "squeezenet"]
    model = ets.train(data, data, ets.EtsConfig(max_epochs=1, patience=1, context=False, **FAST), progress=False)
    body = checkpoint_file.read(model.save(tmp_path / "m.pt"))
    del body["spec"]["context"], body["config"]["context"]  # what older versions wrote
    checkpoint_file.write(tmp_path / "old.pt", body)
    again = ets.load(tmp_path / "old.pt")
    assert not again.spec.context and not again.config.context
    pd.testing.assert_frame_equal(again.iteration_times(data), model.iteration_times(data))


@pytest.mark.parametrize("arch", ["gru", "transformer", "mlp"])
def test_ablation_architectures_train(traces, arch):
    data = traces[traces["family"] == "resnet"]
    config = ets.EtsConfig(arch=arch, max_epochs=3, patience=3, seed=0, **FAST)
    model = ets.train(data, data, config, progress=False)
    assert len(model.history) == 3 and np.isfinite(model.history[-1]["val_mre"])


def test_training_is_seeded(traces):
    data = traces[traces["family"] == "squeezenet"]
    config = ets.EtsConfig(max_epochs=2, patience=2, seed=3, **FAST)
    a = ets.train(data, data, config, progress=False).iteration_times(data)
    b = ets.train(data, data, config, progress=False).iteration_times(data)
    pd.testing.assert_frame_equal(a, b)


def test_headline_metrics_match_their_formulas():
    m = headline_metrics(np.array([110.0, 1800.0]), np.array([100.0, 2000.0]))
    assert m["mre"] == pytest.approx((0.1 + 0.1) / 2)
    assert m["rmse_ms"] == pytest.approx(np.sqrt((0.01 ** 2 + 0.2 ** 2) / 2))
    assert m["wape"] == pytest.approx(210 / 2100)


def test_log_target_transform_round_trips(traces):
    from predictor.features import decode_targets, raw_targets

    for transform in ("log", "none"):
        spec = fit_features(traces, target_transform=transform)
        back = decode_targets(spec, traces, encode_targets(spec, traces))
        assert np.allclose(back, raw_targets(traces), rtol=1e-4, atol=1e-2), transform
    with pytest.raises(ValueError, match="target_transform"):
        fit_features(traces, target_transform="sqrt")


def test_validation_is_drawn_by_config_outside_the_test_units():
    ids = [f"{family}:b{b}:s32:float32:sgd:c10" for family in ("vgg", "resnet", "alexnet") for b in (2, 4, 8, 16)]
    traces = pd.DataFrame({"config_id": ids, "family": [i.split(":")[0] for i in ids]})
    draws = set()
    for seed in range(5):
        split = split_by_family(traces, test_families=["vgg"], val_fraction=0.25, seed=seed)
        assert set(split.test) == {i for i in ids if i.startswith("vgg")}
        assert len(split.val) == 3 and not set(split.val) & set(split.test) and not set(split.val) & set(split.train)
        assert {i.split(":")[0] for i in split.train} == {"resnet", "alexnet"}  # every untested family trains
        draws.add(split.val)
    assert len(draws) > 1  # seeded draw, not a fixed choice
    with pytest.raises(ValueError, match="nothing left to train on"):
        split_by_family(traces, test_families=["vgg"], val_fraction=0.7)

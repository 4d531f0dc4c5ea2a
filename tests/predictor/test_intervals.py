"""Prediction intervals: the conformal step, leave-family-out, checkpoints and the CLI."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

from predictor.intervals import IntervalCalibration, calibrate, check_level, interval_metrics


def per_trace(ratios: dict[str, list[float]], pred: float = 100.0) -> pd.DataFrame:
    """Traces whose true time is pred · exp(r), by family."""
    rows = [{"config_id": f"{f}:{i}", "family": f, "pred_us": pred, "true_us": pred * math.exp(r)}
            for f, rs in ratios.items() for i, r in enumerate(rs)]
    return pd.DataFrame(rows)


def test_hand_checked_quantiles_with_the_conformal_correction():
    # one family, 9 traces with log-ratios 0.1 … 0.9: weights 1/10 each, 1/10 at ±infinity
    cal = calibrate(per_trace({"a": [i / 10 for i in range(1, 10)]}))
    assert cal.log_quantile(0.5) == pytest.approx(0.5)  # cumulative 0.5 reached at the 5th
    assert cal.log_quantile(0.9) == pytest.approx(0.9)  # 0.9 at the 9th and last
    assert cal.log_quantile(0.91) == math.inf  # beyond the finite mass 9/10
    assert cal.log_quantile(0.1) == pytest.approx(0.1)  # upper tail weight 0.9 from the 1st
    assert cal.log_quantile(0.05) == -math.inf
    assert cal.max_level() == pytest.approx(0.8)  # (n - 1) / (n + 1)
    low, high = cal.bounds([10.0], level=0.8)
    assert low[0] == pytest.approx(10 * math.exp(0.1)) and high[0] == pytest.approx(10 * math.exp(0.9))


def test_families_count_alike_and_a_calibration_family_is_left_out():
    # family "big": 8 traces at r = 0; family "small": 2 traces at r = 1. Each family weighs 1/2.
    cal = calibrate(per_trace({"big": [0.0] * 8, "small": [1.0, 1.0]}))
    # for a new family: cumulative weight of r = 0 is (1/2) · 10/11 = 0.4545 < 0.5: the median is 1
    assert cal.log_quantile(0.5) == pytest.approx(1.0)
    assert cal.log_quantile(0.4) == pytest.approx(0.0)
    # a trace of "small" gets "big" alone (and vice versa): no trace is scored by its own family
    assert cal.log_quantile(0.5, "small") == pytest.approx(0.0)
    assert cal.log_quantile(0.6, "big") == pytest.approx(1.0)
    assert cal.log_quantile(0.5, "unseen") == cal.log_quantile(0.5)
    # a "big" trace has "small" alone (2 traces: finite up to level 1/3); a "small" one has "big" (8: 7/9)
    assert cal.max_level("big") == pytest.approx(1 / 3) and cal.max_level("small") == pytest.approx(7 / 9)
    m = interval_metrics(per_trace({"big": [0.0] * 8, "small": [1.0, 1.0]}), cal, 0.7)
    # the big traces are unbounded at 70 %; the small ones get big's [exp(0), exp(0)], missing their r = 1
    assert m["interval_unbounded"] == 8 and m["interval_coverage"] == 0.0 and m["interval_width"] == 0.0


def test_coverage_on_synthetic_data_with_known_noise():
    """Exchangeable traces: each one-sided conformal quantile covers with probability in
    [q, q + 1/(n+1)], so a level-L interval covers in [L, L + 2/(n+1)] on average over calibrations."""
    rng = np.random.default_rng(0)
    n, level, repeats, fresh = 40, 0.8, 400, 200
    covered = []
    for _ in range(repeats):
        families = {f: list(rng.normal(0.0, 0.2, n // 4)) for f in "abcd"}
        cal = calibrate(per_trace(families))
        test = per_trace({"new": list(rng.normal(0.0, 0.2, fresh))})
        covered.append(interval_metrics(test, cal, level)["interval_coverage"])
    mean = float(np.mean(covered))
    error = 3 * float(np.std(covered)) / math.sqrt(repeats)  # sampling error of the mean
    assert level - error <= mean <= level + 2 / (n + 1) + error


def test_levels_outside_zero_one_are_refused():
    for bad in (0, 1, 1.5, -0.1, "abc", None):
        with pytest.raises(ValueError, match="level must"):
            check_level(bad)
    assert check_level("0.9") == 0.9


def test_calibration_refuses_unusable_rows():
    rows = per_trace({"a": [0.0, 0.1]})
    rows.loc[1, "pred_us"] = 0.0
    with pytest.raises(ValueError, match="a:1.*positive and finite"):
        calibrate(rows)
    with pytest.raises(ValueError, match="no held-out traces"):
        calibrate(rows.iloc[:0])


def test_round_trip_through_a_dict():
    cal = calibrate(per_trace({"a": [0.1, -0.2, 0.3], "b": [0.05, 0.4]}), "here")
    back = IntervalCalibration.from_dict(json.loads(json.dumps(cal.to_dict())))
    for q in (0.1, 0.5, 0.7):
        for family in (None, "a", "b"):
            assert back.factor(q, family) == cal.factor(q, family)
    assert back.source == "here" and back.families == ("a", "b")


# -- checkpoints and the CLI --------------------------------------------------------------------------

@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    from predictor.cli import main as ets
    from predictor.common.op_trace import write_traces
    from tests.predictor.ets_data import tiny_traces

    root = tmp_path_factory.mktemp("intervals")
    write_traces(root / "data", tiny_traces())
    ckpt = root / "t4.pt"
    result = CliRunner().invoke(ets, ["train", "--data", str(root / "data"), "--out", str(ckpt), "--method",
                                      "opbased", "--test-families", "vgg,resnet", "--epochs", "3"])
    assert result.exit_code == 0, result.output
    return root, ckpt


def test_training_stores_intervals_and_a_checkpoint_keeps_them(trained):
    from predictor.methods import load

    root, ckpt = trained
    model = load(ckpt)
    assert model.intervals is not None and set(model.intervals.families) == {"vgg", "resnet"}
    assert "held-out families" in model.intervals.source


def test_predict_json_gives_the_interval(trained):
    from predictor.cli import main as ets

    root, ckpt = trained
    out = CliRunner().invoke(ets, ["predict", "--ckpt", str(ckpt), "alexnet", "--batch", "2", "--size", "64",
                                   "--level", "0.5", "--json"])
    assert out.exit_code == 0, out.output
    got = json.loads(out.output)["predictions"][0]
    assert got["level"] == 0.5 and got["iteration_ms"] == pytest.approx(got["pred_us"] / 1e3)
    model_factor = (got["low_ms"] / got["iteration_ms"], got["high_ms"] / got["iteration_ms"])
    from predictor.methods import load

    cal = load(ckpt).intervals  # alexnet is a new family: every calibration trace counts
    assert model_factor == pytest.approx((cal.factor(0.25), cal.factor(0.75)))


def test_level_outside_zero_one_is_a_usage_error(trained):
    from predictor.cli import main as ets

    root, ckpt = trained
    for command in (["predict", "--ckpt", str(ckpt), "alexnet"], ["evaluate", "--ckpt", str(ckpt), "--data",
                                                                   str(root / "data")]):
        out = CliRunner().invoke(ets, [*command, "--level", "1.5"])
        assert out.exit_code == 2 and "level must lie strictly between 0 and 1" in out.output
        assert "Traceback" not in out.output


def test_evaluate_reports_coverage_and_width(trained):
    from predictor.cli import main as ets

    root, ckpt = trained
    out = CliRunner().invoke(ets, ["evaluate", "--ckpt", str(ckpt), "--data", str(root / "data"), "--json",
                                   "--level", "0.5"])
    assert out.exit_code == 0, out.output
    got = json.loads(out.output)
    assert got["interval_level"] == 0.5 and got["intervals"]["traces"] == got["traces"]
    assert {r["level"] for r in got["reliability"]} == {0.5, 0.6, 0.7, 0.8, 0.9, 0.95}
    assert {"interval_coverage", "interval_width"} <= set(got["by_family"][0])


def test_a_checkpoint_without_intervals_loads_and_says_so(trained, tmp_path):
    from predictor.cli import main as ets
    from predictor.methods import load

    root, ckpt = trained
    model = load(ckpt)
    model.intervals = None  # as a checkpoint written before intervals existed
    bare = model.save(tmp_path / "bare.pt")
    assert load(bare).intervals is None
    got = json.loads(CliRunner().invoke(ets, ["predict", "--ckpt", str(bare), "alexnet", "--json"]).output)
    assert got["intervals"] is None and got["predictions"][0]["low_ms"] is None
    text = CliRunner().invoke(ets, ["evaluate", "--ckpt", str(bare), "--data", str(root / "data")]).output
    assert "prediction intervals: none (the checkpoint has no calibration" in text
    js = json.loads(CliRunner().invoke(ets, ["evaluate", "--ckpt", str(bare), "--data", str(root / "data"),
                                             "--json"]).output)
    assert js["intervals"] is None and js["interval_coverage"] is None
    # ets calibrate adds them on the recorded held-out families, weights untouched
    args = ["calibrate", "--ckpt", str(bare), "--data", str(root / "data"), "--json"]
    kept = CliRunner().invoke(ets, args)  # in place only when asked: --overwrite
    assert kept.exit_code == 1 and "--overwrite" in kept.output and load(bare).intervals is None, kept.output
    out = CliRunner().invoke(ets, [*args, "--overwrite"])
    assert out.exit_code == 0, out.output
    again = load(bare)
    assert again.intervals.factor(0.7) == model_intervals_factor(ckpt, 0.7)
    refused = CliRunner().invoke(ets, ["calibrate", "--ckpt", str(bare), "--data", str(root / "data"),
                                       "--families", "alexnet"])
    assert refused.exit_code == 1 and "did not hold out alexnet" in refused.output


def model_intervals_factor(ckpt, q: float) -> float:
    from predictor.methods import load

    return load(ckpt).intervals.factor(q)


def test_shipped_checkpoint_calibrations_are_readable():
    """Every shipped checkpoint either has intervals or says it has none; no other outcome."""
    from predictor.checkpoints import CHECKPOINT_DIR, Pretrained, available
    from predictor.methods import METHODS

    for method in METHODS:
        for gpu in available(CHECKPOINT_DIR, method):
            cal = Pretrained(method, [gpu]).intervals(gpu)
            assert cal is None or (cal.traces > 0 and 0 < cal.factor(0.9) < math.inf)


def _two_groups(extra: dict[str, float] | None = None) -> IntervalCalibration:
    """One trace per family: group A's four err by 1-4 %, group B's four by 50-80 % (log-ratios)."""
    ratios = {"a1": 0.01, "a2": 0.02, "a3": 0.03, "a4": 0.04, "b1": 0.5, "b2": 0.6, "b3": 0.7, "b4": 0.8,
              **(extra or {})}
    names = sorted(ratios)
    groups = tuple("A" if n.startswith("a") else "B" if n.startswith("b") else "C" for n in names)
    order = np.argsort([ratios[n] for n in names], kind="stable")
    return IntervalCalibration(np.array([ratios[names[i]] for i in order]), np.array(order, dtype=np.int64),
                               tuple(names), "hand", groups)


def test_mondrian_quantiles_come_from_the_other_families_of_the_group():
    cal = _two_groups()
    # a2: its group's others are 0.01, 0.03, 0.04, weight 1/4 each (3/4 in all): the 25 % and 75 %
    # quantiles are 0.01 and 0.04
    assert cal.log_quantile(0.25, "a2") == pytest.approx(0.01)
    assert cal.log_quantile(0.75, "a2") == pytest.approx(0.04)
    # pooled, the seven others weigh 1/8 each: 0.03 and 0.7
    pooled = IntervalCalibration(cal.log_ratios, cal.family_index, cal.families, "hand")
    assert pooled.log_quantile(0.25, "a2") == pytest.approx(0.03)
    assert pooled.log_quantile(0.75, "a2") == pytest.approx(0.7)
    # the 50 % intervals cover a2 and a3 (inside their group's others), not a1 or a4: 2 of 4 per group
    inside = {f: low <= math.exp(r) <= high for f, r in zip(cal.families, [0.01, 0.02, 0.03, 0.04, 0.5, 0.6, 0.7,
                                                                           0.8])
              for low, high in [cal.bounds([1.0], 0.5, [f])]}
    assert inside == {"a1": False, "a2": True, "a3": True, "a4": False,
                      "b1": False, "b2": True, "b3": True, "b4": False}


def test_a_group_with_too_few_families_or_traces_falls_back_to_the_pooled_residuals():
    cal = _two_groups({"c1": 2.0, "c2": 3.0})  # group C: two families, fewer than MIN_GROUP_FAMILIES
    pooled = IntervalCalibration(cal.log_ratios, cal.family_index, cal.families, "hand")
    assert cal.log_quantile(0.5, "c1") == pooled.log_quantile(0.5, "c1")
    # group A has three others for a1: its 90 % upper quantile needs more than their 3/4 of the
    # mass, so it comes from the pooled residuals (nine others, 1/10 each: the ninth, 3.0)
    assert cal.log_quantile(0.9, "a1") == pooled.log_quantile(0.9, "a1") == pytest.approx(3.0)
    assert cal.log_quantile(0.7, "a1") == pytest.approx(0.04)  # within the group's finite mass


def test_mondrian_calibration_round_trips_and_groups_real_families():
    frame = pd.DataFrame({"config_id": ["r", "m", "l"], "family": ["resnet", "mobilevit", "llama"],
                          "pred_us": [1.0, 1.0, 1.0], "true_us": [1.1, 1.2, 2.0]})
    cal = calibrate(frame)
    assert dict(zip(cal.families, cal.family_groups)) == {"llama": "decoder LM", "mobilevit": "hybrid",
                                                          "resnet": "CNN"}
    again = IntervalCalibration.from_dict(cal.to_dict())
    assert again.family_groups == cal.family_groups and again.kind.endswith("mondrian-by-group")
    assert calibrate(frame, by_group=False).family_groups == ()

"""`python -m experiments.generalisation --quick`: every variant over three family splits, the
summary's arithmetic by hand, resume, and bad options named."""

from __future__ import annotations

import json

import pandas as pd
import pytest
from click.testing import CliRunner

from experiments import generalisation


def test_summary_mean_sd_and_ratio_to_the_best_baseline_by_hand():
    rows = pd.DataFrame([{"set": "s", "kind": "real", "variant": v, "method": m, "mre": x, "signed": -x,
                          "fit_s": 1.0, "split": i}
                         for v, m, xs in (("ets", "ets", (0.1, 0.3)), ("opbased", "opbased", (0.4, 0.4)),
                                          ("dnnperf", "dnnperf", (0.5, 0.7)))
                         for i, x in enumerate(xs)])
    table = generalisation.summary(rows).set_index("variant")
    assert table.loc["ets", "mre"] == pytest.approx(0.2) and table.loc["ets", "sd"] == pytest.approx(0.1414, abs=1e-4)
    assert table.loc["ets", "vs_best_baseline"] == pytest.approx(0.5)  # best baseline: opbased at 0.4
    assert table.loc["dnnperf", "vs_best_baseline"] == pytest.approx(1.5)


def test_quick_generalisation_runs_every_variant_on_three_splits_and_resumes(tmp_path):
    out = tmp_path / "gen"
    result = CliRunner().invoke(generalisation.main, ["--quick", "--out", str(out)])
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert {(r["split"], r["variant"]) for r in rows} == {(s, v) for s in range(3) for v in generalisation.VARIANTS}
    for r in rows:  # scored on held-out families only: none of them trained
        assert r["traces"] >= 1 and r["mre"] >= 0 and set(r["by_family"]) <= {u.split(":")[0] for u in r["test_units"]}
    assert len({tuple(r["test_units"]) for r in rows}) >= 2  # the splits differ
    report = (out / "report.md").read_text()
    assert "| quick:emulated:T4 | emulated | ets | 3 |" in report and (out / "generalisation.png").stat().st_size > 0
    again = CliRunner().invoke(generalisation.main, ["--quick", "--out", str(out)])
    assert again.exit_code == 0 and len((out / "results.jsonl").read_text().splitlines()) == len(rows)


@pytest.mark.parametrize("args, named", [(["--variants", "ets,nope"], "--variants"),
                                         (["--set", "nowhere"], "--set"),
                                         (["--set", "cpu=/nonexistent/dir"], "experiments.cpu_benchmark")])
def test_bad_options_are_named(args, named, tmp_path):
    result = CliRunner().invoke(generalisation.main, [*args, "--out", str(tmp_path / "o")])
    assert result.exit_code == 2 and named in result.output


def test_each_variant_trains_with_the_targets_its_name_says():
    """The ``-log`` ablations must not follow the methods' default (anchored) targets."""
    from predictor import methods

    for name, variant in generalisation.VARIANTS.items():
        config = methods.make_config(variant.method, **variant.options)
        assert config.target_transform == ("log" if name.endswith("-log") else "anchored"), name


def test_quick_folds_hold_every_family_out_once_and_give_intervals_per_group(tmp_path):
    out = tmp_path / "folds"
    result = CliRunner().invoke(generalisation.main, ["--quick", "--folds", "3", "--variants", "opbased",
                                                      "--out", str(out)])
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert sorted(r["split"] for r in rows) == ["fold:0/3", "fold:1/3", "fold:2/3"]
    held = [f for r in rows for f in r["by_family"]]
    assert sorted(held) == sorted(set(held)) and len(held) == 6  # every family held out exactly once
    report = (out / "report.md").read_text()
    assert "| quick:emulated:T4 | CNN | 6 |" in report  # six families, one group
    assert "| quick:emulated:T4 | opbased | CNN | 12 |" in report  # intervals over all 12 traces

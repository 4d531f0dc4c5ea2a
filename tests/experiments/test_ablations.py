"""The ablation grid and its section of the reproduction report."""

from __future__ import annotations

import pandas as pd

from experiments.ablations import DEFAULT, key, points
from experiments.reproduce import ablation_section
from predictor.methods import ets


def test_every_point_is_a_distinct_valid_config_and_differs_from_the_default_in_its_study_only():
    grid = points()
    assert len({key(p) for p in grid}) == len(grid)
    assert sum(p["study"] == "window" for p in grid) == 28  # 5 widths x 6 strides, minus S > W
    for p in grid:
        ets.EtsConfig(**{k: p[k] for k in DEFAULT})
        assert p["stride"] <= p["width"]
        changed = {k for k in DEFAULT if p[k] != DEFAULT[k]}
        allowed = {"window": {"width", "stride"}, "overlap": {"overlap"}, "arch": {"arch"},
                   "loss": {"loss_weight"}, "ema": {"ema"}, "context": {"context"}}[p["study"]]
        assert changed <= allowed and (changed or p["study"] == "window")


def test_reproduce_reads_the_ablation_results(tmp_path):
    rows = [{"key": key(p), **p, "mre": 0.05 + i / 100, "rmse_ms": 1.0, "wape": 0.1, "epochs": 3, "train_s": 60}
            for i, p in enumerate(points()[:2])]
    pd.DataFrame(rows).to_csv(tmp_path / "results.csv", index=False)
    section = ablation_section(tmp_path)
    assert "0.05" in section and "0.06" in section and "window_stride.png" in section
    assert "not run" in ablation_section(tmp_path / "absent")


def test_a_results_file_of_an_older_version_is_refused_not_appended_to(tmp_path):
    from click.testing import CliRunner

    from experiments.ablations import main
    from predictor.common.op_trace import device_file

    data = tmp_path / "data"
    data.mkdir()
    pd.DataFrame({"config_id": ["a"], "family": ["vgg"]}).to_parquet(device_file(data, "emulated:V100"))
    out = tmp_path / "out"
    out.mkdir()
    (out / "results.csv").write_text("key,study,width,stride,arch,overlap,mre\n"
                                     "window:4:1:lstm:True,window,4,1,lstm,True,0.2\n")
    result = CliRunner().invoke(main, ["--data", str(data), "--out", str(out), "--configs", "10"])
    assert result.exit_code != 0 and "older version" in result.output and "loss_weight" in result.output
    assert (out / "results.csv").read_text().count("\n") == 2  # untouched

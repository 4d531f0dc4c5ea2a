"""``simrun plot``: files for a sweep and a single run, and the plotted numbers against the sweep
table and hand computations from results.parquet and per-job records; every seed and policy drawn."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

import simulator.plots as plots
from simulator.cli import main
from simulator.plots import (
    _pyplot,
    bar_data,
    bar_seed_data,
    cdf_figure,
    error_curve_data,
    error_curve_seed_data,
    plot,
    run_panels,
    utilisation_figure,
    utilisation_series,
)
from simulator.run import RunConfig, execute
from simulator.sweep.driver import run_sweep
from simulator.sweep.grid import plan
from simulator.sweep.points import load_results
from simulator.sweep.tables import source_label, summary_table

FIGURES = ("jct_mean_vs_truth", "tardiness_total_vs_truth", "jct_vs_error", "jct_cdf", "utilisation")


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    out = tmp_path_factory.mktemp("sweep")
    configs = plan("fifo,hydra", "truth", errors="0.1,0.3", workloads="pai-like:80,philly-like:80", seeds="2",
                   limit=60)
    run_sweep(configs, out, workers=1, progress=False)
    return out


def _truth_pairs(results: pd.DataFrame, metric: str) -> dict:
    """By hand: (value, truth value) per (workload, policy, predictor), one pair per seed, where
    truth is the row with the same policy, workload and seed."""
    truth = {(r.policy, r.workload, r.seed): getattr(r, metric)
             for r in results.itertuples() if r.predictor == "truth"}
    out: dict = {}
    for r in results.itertuples():
        if r.predictor != "truth":
            out.setdefault((r.workload, r.policy, r.predictor), []).append((getattr(r, metric),
                                                                           truth[(r.policy, r.workload, r.seed)]))
    return out


def _pooled_by_hand(pairs) -> float:
    num, den = sum(v for v, _ in pairs), sum(t for _, t in pairs)
    return num / den if den > 0 else (1.0 if num == 0 else np.nan)


def _seed_ratios_by_hand(pairs) -> list[float]:
    return [v / t if t else (1.0 if v == 0 else np.nan) for v, t in pairs]


@pytest.mark.parametrize("metric", ["jct_mean", "tardiness_total"])
def test_bar_numbers_equal_the_hand_computation(sweep, metric):
    results = pd.read_parquet(sweep / "results.parquet")
    assert len(results) == 2 * 3 * 2 * 2 and (results["status"] == "ok").all()
    data = bar_data(results, metric).set_index(["source", "policy", "predictor"])
    seeds = bar_seed_data(results, metric)
    checked = 0
    for (workload, policy, predictor), pairs in _truth_pairs(results, metric).items():
        pooled = _pooled_by_hand(pairs)
        dots = seeds[(seeds["source"] == workload) & (seeds["policy"] == policy) & (seeds["predictor"] == predictor)]
        assert sorted(dots["ratio"]) == pytest.approx(sorted(x for x in _seed_ratios_by_hand(pairs) if not np.isnan(x)))
        if np.isnan(pooled):
            assert (workload, policy, predictor) not in data.index
            continue
        row = data.loc[(workload, policy, predictor)]
        assert row["ratio"] == pytest.approx(pooled) and row["n"] == len(pairs)
        checked += 1
    assert checked >= 4
    assert (data.reset_index()["load_scale"] == 1.0).all()


def _panel_rows(results: pd.DataFrame, source: str) -> pd.DataFrame:
    return results[[source_label(r) == source for _, r in results.iterrows()]]


@pytest.mark.parametrize("metric, column", [("jct_mean", "jct_ratio"), ("tardiness_total", "tardiness_ratio")])
def test_bars_are_the_sweep_tables_pooled_ratio(sweep, metric, column):
    results = pd.read_parquet(sweep / "results.parquet")
    table = summary_table(results).set_index(["policy", "predictor"])[column]
    overall = bar_data(results, metric, panels=False).set_index(["policy", "predictor"])["ratio"]
    assert len(overall) and overall.to_dict() == table.drop(index="truth", level="predictor").dropna().to_dict()
    panels = bar_data(results, metric)
    for source, d in panels.groupby("source"):  # each panel: the table of the panel's points
        part = summary_table(_panel_rows(results, source)).set_index(["policy", "predictor"])[column]
        assert d.set_index(["policy", "predictor"])["ratio"].to_dict() == \
            part.drop(index="truth", level="predictor").dropna().to_dict()


def test_error_curve_numbers_equal_the_sweep_table_and_the_hand_computation(sweep):
    results = pd.read_parquet(sweep / "results.parquet")
    curve = error_curve_data(results).set_index(["source", "policy", "mre"])
    seeds = error_curve_seed_data(results)
    assert len(curve) == 2 * 2 * 2 and len(seeds) == 2 * 2 * 2 * 2
    for (workload, policy, predictor), pairs in _truth_pairs(results, "jct_mean").items():
        mre = float(predictor.split(":")[1])
        assert curve.loc[(workload, policy, mre), "ratio"] == pytest.approx(_pooled_by_hand(pairs))
        dots = seeds[(seeds["source"] == workload) & (seeds["policy"] == policy) & (seeds["mre"] == mre)]
        assert sorted(dots["ratio"]) == pytest.approx(sorted(_seed_ratios_by_hand(pairs)))
        assert sorted(dots["seed"]) == [0, 1]
    table = summary_table(results).set_index(["policy", "predictor"])["jct_ratio"]
    overall = error_curve_data(results, panels=False)
    assert {(r.policy, f"noisy:{r.mre:g}"): r.ratio for r in overall.itertuples()} == \
        {k: v for k, v in table.to_dict().items() if k[1].startswith("noisy:")}
    for source, d in error_curve_data(results).groupby("source"):
        part = summary_table(_panel_rows(results, source)).set_index(["policy", "predictor"])["jct_ratio"]
        assert {(r.policy, f"noisy:{r.mre:g}"): r.ratio for r in d.itertuples()} == \
            {k: v for k, v in part.to_dict().items() if k[1].startswith("noisy:")}


def _captured(monkeypatch) -> list:
    """Figures handed to plots._save, kept open for inspection instead of being written."""
    figures: list = []
    monkeypatch.setattr(plots, "_save", lambda fig, out, name: figures.append((name, fig)) or [])
    return figures


def test_bar_and_curve_figures_show_the_table_numbers_and_state_their_aggregation(sweep, monkeypatch, tmp_path):
    results = load_results(sweep)
    figures = _captured(monkeypatch)
    plots.plot_bars(results, tmp_path, "tardiness_total", "total tardiness")
    plots.plot_error_curves(results, tmp_path)
    (_, bars), (_, curves) = figures
    assert plots.BAR_AGGREGATION in bars._suptitle.get_text()
    assert plots.CURVE_AGGREGATION in curves._suptitle.get_text()
    for fig in (bars, curves):
        axes = [ax for ax in fig.axes if ax.get_visible()]
        assert [ax.get_title() for ax in axes] == [plots.ALL_POINTS, "pai-like:80", "philly-like:80"]
        assert all(ax.get_ylabel().endswith("/ truth (pooled over seeds)") for ax in axes)
    # the first panel's bar heights are the table's ratios (bars drawn per predictor, policies sorted)
    table = summary_table(results).set_index(["policy", "predictor"])["tardiness_ratio"]
    heights = [p.get_height() for p in bars.axes[0].patches]
    expected = [table.get((policy, pred), np.nan) for pred in ("noisy:0.1", "noisy:0.3")
                for policy in ("fifo", "hydra")]
    assert heights == pytest.approx(expected, nan_ok=True)
    _pyplot().close("all")


def test_cdf_and_utilisation_figures_draw_every_seed_and_policy(sweep):
    results = load_results(sweep)
    panels = run_panels(results)
    assert [(k["policy"], k["source"]) for k, _ in panels] == [
        ("fifo", "pai-like:80"), ("fifo", "philly-like:80"), ("hydra", "pai-like:80"), ("hydra", "philly-like:80")]
    assert sorted(k for _, g in panels for k in g["key"]) == sorted(results["key"])
    for make in (cdf_figure, utilisation_figure):
        fig = make(results, sweep)
        drawn = [line.get_gid() for ax in fig.axes for line in ax.get_lines() if line.get_gid()]
        assert sorted(drawn) == sorted(results["key"]), make.__name__
        assert plots.RUN_AGGREGATION in fig._suptitle.get_text()
        legends = {t.get_text() for ax in fig.axes if ax.get_legend() for t in ax.get_legend().get_texts()}
        assert legends == {"truth (2 seeds)", "noisy:0.1 (2 seeds)", "noisy:0.3 (2 seeds)"}
        _pyplot().close(fig)


def test_points_of_another_grid_in_the_same_directory_get_their_own_panels(tmp_path):
    out = tmp_path / "mixed"
    for limit in (20, 30):  # two sweeps into one directory, differing only in --limit
        run_sweep(plan("fifo,sjf", "truth", errors="0.2", workloads="pai-like:40", seeds="0,", limit=limit), out,
                  workers=1, progress=False)
    results = load_results(out)
    assert len(results) == 8
    data = bar_data(results)
    assert list(data.columns[:3]) == ["source", "load_scale", "limit"] and sorted(data["limit"]) == [20, 20, 30, 30]
    for limit, d in data.groupby("limit"):
        part = summary_table(results[results["limit"] == limit]).set_index(["policy", "predictor"])["jct_ratio"]
        assert (d.set_index(["policy", "predictor"])["ratio"].to_dict()
                == part.xs("noisy:0.2", level=1, drop_level=False).to_dict())
    assert {plots.panel_title(k, show_load=False) for k, _ in run_panels(results)} == {
        "fifo | pai-like:40 | limit 20", "fifo | pai-like:40 | limit 30", "sjf | pai-like:40 | limit 20",
        "sjf | pai-like:40 | limit 30"}


def test_an_unwritable_plot_out_is_refused_in_one_line(sweep, tmp_path):
    (tmp_path / "file").write_text("")
    result = CliRunner().invoke(main, ["plot", str(sweep), "--out", str(tmp_path / "file" / "plots")])
    assert result.exit_code == 1
    assert result.output.splitlines() == [f"Error: cannot write to {tmp_path / 'file' / 'plots'}: Not a directory"]


def test_utilisation_series_by_hand():
    jobs = pd.DataFrame({"start": [0.0, 5.0, 10.0, np.nan], "end": [10.0, 15.0, 20.0, np.nan],
                         "num_gpus": [2, 1, 2, 4], "status": ["completed"] * 3 + ["rejected"]})
    t, u = utilisation_series(jobs, 4)
    assert list(t) == [0.0, 5.0, 10.0, 15.0, 20.0]
    # job 0 ends and job 2 starts at 10: the level there is after both
    assert list(u) == [0.5, 0.75, 0.75, 0.5, 0.0]


def test_sweep_figures_are_written(sweep, tmp_path):
    result = CliRunner().invoke(main, ["plot", str(sweep), "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    for name in FIGURES:
        for ext in ("png", "pdf"):
            path = tmp_path / f"{name}.{ext}"
            assert path.stat().st_size > 1000 and str(path) in result.output


def test_a_sweep_without_truth_skips_the_normalised_panels(tmp_path):
    run_sweep(plan("fifo", errors="0.1", workloads="pai-like:40", seeds="0,"), tmp_path / "s", workers=1,
              progress=False)
    messages: list[str] = []
    files = plot(tmp_path / "s", tmp_path / "p", log=messages.append)
    assert {p.stem for p in files} == {"jct_cdf", "utilisation"}
    assert sum("no truth point" in m for m in messages) == 3


def test_single_run_gives_cdf_and_utilisation(tmp_path):
    run = execute(RunConfig(policy="sjf", predictor="noisy:0.1", workload="pai-like:50")).write(tmp_path / "run")
    result = CliRunner().invoke(main, ["plot", str(run)])
    assert result.exit_code == 0, result.output
    assert {p.name for p in (run / "plots").iterdir()} == {"jct_cdf.png", "jct_cdf.pdf", "utilisation.png",
                                                           "utilisation.pdf"}
    bad = CliRunner().invoke(main, ["plot", str(tmp_path)])
    assert bad.exit_code == 1 and "neither a sweep directory" in bad.output

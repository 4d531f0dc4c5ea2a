"""Figures of a sweep or a single run: normalised JCT/tardiness bars, error curves, JCT CDFs,
cluster utilisation over time (PNG and PDF, matplotlib Agg).

Why: the paper's claims are comparisons with the truth predictor; every figure here is computed
from the sweep's results.parquet and per-job records through small functions that tests check
against the sweep table and hand computations (:func:`bar_data`, :func:`error_curve_data`,
:func:`run_panels`, :func:`utilisation_series`). Bars and curves show the sweep table's pooled
ratio (:func:`simulator.sweep.tables.pooled_ratio`), never another mean, with each seed as a dot;
the CDF and utilisation figures draw every run. Each figure says its aggregation in its title.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from predictor.common.inputs import InputError, short
from predictor.common.outputs import atomic_file, check_writable, inside
from simulator.sweep.points import load_results, read_json, read_table
from simulator.sweep.tables import normalise_to_truth, pooled_ratio, source_label
from simulator.timeline import FAILED_STRETCHES

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure
    from matplotlib.lines import Line2D


# Config fields besides the workload and the load that split panels when they take more than one
# value: a sweep directory may hold the points of several sweeps (e.g. two --limit values), and
# points that differ in them must not be pooled into one bar or curve.
PANEL_EXTRAS = ("cluster", "limit", "deadline_fraction", "reference_gpu", "observe_after", "bind", "failures",
                "checkpoint_every")
ALL_POINTS = "all points (= sweep table)"
BAR_AGGREGATION = "bar: pooled ratio over seeds, sum / sum of truth (as in the sweep table); dots: each seed"
CURVE_AGGREGATION = "line: pooled ratio over seeds (as in the sweep table); dots: each seed"
RUN_AGGREGATION = "one line per run: colour = predictor, every seed drawn"


def _pyplot():
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


def _save(fig, out: Path, name: str) -> list[Path]:
    """Write ``fig`` as OUT/NAME.png and .pdf, each atomically (no truncated figure on a full disk)."""
    paths = []
    try:
        for ext in ("png", "pdf"):
            path = inside(out, f"{name}.{ext}")
            with atomic_file(path) as tmp:
                fig.savefig(tmp, format=ext, dpi=120 if ext == "png" else None, bbox_inches="tight")
            paths.append(path)
    finally:
        _pyplot().close(fig)
    return paths


def _grid(n: int, *, width: float = 4.2, height: float = 3.2):
    plt = _pyplot()
    cols = min(n, 3)
    rows = -(-n // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(width * cols, height * rows), squeeze=False,
                             layout="constrained")
    for ax in axes.flat[n:]:
        ax.set_visible(False)
    return fig, list(axes.flat[:n])


def _noisy_mre(spec: str) -> float | None:
    m = re.fullmatch(r"noisy:([0-9.eE+-]+)", str(spec))
    try:
        return float(m.group(1)) if m else None
    except ValueError:
        return None


def _text(column: pd.Series) -> pd.Series:
    """A config column as comparable text (None/NaN never compare equal)."""
    return column.astype(object).where(column.notna(), "<none>").astype(str)


def panel_columns(results: pd.DataFrame) -> list[str]:
    """The columns that split panels: workload/trace (``source``), load scale, and each of
    :data:`PANEL_EXTRAS` that takes more than one value among the ok rows."""
    ok = results[results["status"] == "ok"]
    return ["source", "load_scale", *(c for c in PANEL_EXTRAS if c in ok and _text(ok[c]).nunique() > 1)]


def panel_title(key: dict, *, show_load: bool = True) -> str:
    """A panel's title from its values of :func:`panel_columns` (and policy, when given)."""
    parts = [str(key["policy"])] if "policy" in key else []
    parts.append(str(key["source"]) + (f" (load x{key['load_scale']:g})" if show_load else ""))
    parts += [f"{c} {'-' if pd.isna(key[c]) else key[c]}" for c in PANEL_EXTRAS if c in key]
    return " | ".join(parts)


# ---------------------------------------------------------------------------------------------
# The numbers behind the figures


def _non_truth(results: pd.DataFrame, metric: str) -> pd.DataFrame:
    """The ok non-truth rows with their ratio to truth (and ``mre`` for noisy:X predictors)."""
    norm = normalise_to_truth(results, (metric,))
    norm = norm[norm["predictor"] != "truth"]
    return norm.assign(mre=[_noisy_mre(p) for p in norm["predictor"]])


def _pooled(norm: pd.DataFrame, by: list[str], metric: str) -> pd.DataFrame:
    """Per group of ``by``: the pooled ratio (:func:`pooled_ratio`, the sweep table's number) and
    n, the points with a truth run; groups without a defined ratio are dropped."""
    rows = [{**dict(zip(by, key)), "ratio": pooled_ratio(g, metric), "n": int(g[f"{metric}_truth"].notna().sum())}
            for key, g in norm.groupby(by, sort=True, dropna=False)] if len(norm) else []
    frame = pd.DataFrame(rows, columns=[*by, "ratio", "n"])
    return frame[frame["ratio"].notna()].reset_index(drop=True)


def _seed_points(norm: pd.DataFrame, by: list[str], metric: str) -> pd.DataFrame:
    col = f"{metric}_ratio"
    keep = norm[norm[col].notna()]
    return keep[[*by, "seed", col]].rename(columns={col: "ratio"}).sort_values([*by, "seed"]).reset_index(drop=True)


def bar_data(results: pd.DataFrame, metric: str = "jct_mean", *, panels: bool = True) -> pd.DataFrame:
    """Per panel (:func:`panel_columns`) x policy x predictor: ``ratio``, the pooled ratio of
    ``metric`` to truth over the seeds, and ``n``. With ``panels=False`` per policy x predictor
    over every point: exactly the sweep table's ``jct_ratio`` / ``tardiness_ratio``.

    Truth rows are left out (1 by definition); groups without a defined ratio are dropped (the
    table prints '-')."""
    by = (panel_columns(results) if panels else []) + ["policy", "predictor"]
    return _pooled(_non_truth(results, metric), by, metric)


def bar_seed_data(results: pd.DataFrame, metric: str = "jct_mean", *, panels: bool = True) -> pd.DataFrame:
    """The per-seed ratios drawn as dots over :func:`bar_data`'s bars (rows with a defined ratio)."""
    by = (panel_columns(results) if panels else []) + ["policy", "predictor"]
    return _seed_points(_non_truth(results, metric), by, metric)


def error_curve_data(results: pd.DataFrame, metric: str = "jct_mean", *, panels: bool = True) -> pd.DataFrame:
    """Per panel x policy x MRE of the noisy:<MRE> points: the pooled ratio to truth over the seeds
    (the table's number for that noisy predictor) and ``n``."""
    norm = _non_truth(results, metric)
    by = (panel_columns(results) if panels else []) + ["policy", "mre"]
    return _pooled(norm[norm["mre"].notna()], by, metric)


def error_curve_seed_data(results: pd.DataFrame, metric: str = "jct_mean", *, panels: bool = True) -> pd.DataFrame:
    """The per-seed ratios drawn as dots around :func:`error_curve_data`'s curves."""
    norm = _non_truth(results, metric)
    by = (panel_columns(results) if panels else []) + ["policy", "mre"]
    return _seed_points(norm[norm["mre"].notna()], by, metric)


def run_panels(results: pd.DataFrame) -> list[tuple[dict, pd.DataFrame]]:
    """The ok rows split into the panels of the CDF and utilisation figures: one per policy x
    :func:`panel_columns`, each holding every predictor and seed of it (sorted), so that the two
    figures cover every run of the sweep."""
    ok = results[results["status"] == "ok"].copy()
    if ok.empty:
        return []
    ok["source"] = [source_label(r) for _, r in ok.iterrows()]
    by = ["policy", *panel_columns(results)]
    return [(dict(zip(by, key)), g.sort_values(["predictor", "seed", "key"]))
            for key, g in ok.groupby(by, sort=True, dropna=False)]


def utilisation_series(jobs: pd.DataFrame, total_gpus: int) -> tuple[np.ndarray, np.ndarray]:
    """Step function of busy GPUs / total: times t[i] and the fraction busy from t[i] to t[i+1]."""
    done = jobs[jobs["start"].notna() & jobs["end"].notna()]
    if done.empty or total_gpus <= 0:
        return np.zeros(1), np.zeros(1)
    t = np.concatenate([done["start"].to_numpy(float), done["end"].to_numpy(float)])
    d = np.concatenate([done["num_gpus"].to_numpy(float), -done["num_gpus"].to_numpy(float)])
    order = np.lexsort((d, t))  # at one instant: releases before starts
    t, d = t[order], d[order]
    uniq, idx = np.unique(t, return_index=True)
    busy = np.cumsum(d)
    last = np.r_[idx[1:] - 1, len(t) - 1]  # level after all changes at each instant
    return uniq, busy[last] / total_gpus


def _completed(jobs: pd.DataFrame) -> pd.DataFrame:
    return jobs[jobs["status"] == "completed"] if "status" in jobs else jobs


# ---------------------------------------------------------------------------------------------
# Figures


def _colours(names: Iterable[str]) -> dict[str, str]:
    """One colour per name, the same in every panel and figure."""
    return {name: f"C{i % 10}" for i, name in enumerate(sorted(set(names)))}


def _panels_with_total(data: pd.DataFrame, seeds: pd.DataFrame, total: pd.DataFrame, total_seeds: pd.DataFrame,
                       results: pd.DataFrame) -> list[tuple[str, pd.DataFrame, pd.DataFrame]]:
    """(title, data, seeds) per panel; with more than one panel, first the one pooled over all
    points, whose numbers are the sweep table's."""
    by = panel_columns(results)
    show_load = data["load_scale"].nunique() > 1

    def titles(frame: pd.DataFrame) -> pd.Series:
        rows = frame[by].itertuples(index=False)
        return pd.Series([panel_title(dict(zip(by, v)), show_load=show_load) for v in rows], index=frame.index,
                         dtype=object)

    data_titles, seed_titles = titles(data), titles(seeds)
    order = list(dict.fromkeys(data_titles[g.index[0]] for _, g in data.groupby(by, sort=True, dropna=False)))
    panels = [(t + (" (= sweep table)" if len(order) == 1 else ""), data[data_titles == t], seeds[seed_titles == t])
              for t in order]
    if len(order) > 1:
        panels.insert(0, (ALL_POINTS, total, total_seeds))
    return panels


def plot_bars(results: pd.DataFrame, out: Path, metric: str, label: str) -> list[Path]:
    data = bar_data(results, metric)
    if data.empty:
        return []
    panels = _panels_with_total(data, bar_seed_data(results, metric), bar_data(results, metric, panels=False),
                                bar_seed_data(results, metric, panels=False), results)
    fig, axes = _grid(len(panels))
    colours = _colours(data["predictor"])
    predictors = sorted(colours)
    for ax, (title, d, seeds) in zip(axes, panels):
        policies = sorted({*d["policy"], *seeds["policy"]})
        width = 0.8 / max(1, len(predictors))
        for j, pred in enumerate(predictors):
            x = np.arange(len(policies)) + (j - (len(predictors) - 1) / 2) * width
            sel = d[d["predictor"] == pred].set_index("policy").reindex(policies)
            ax.bar(x, sel["ratio"].to_numpy(float), width, color=colours[pred], label=pred)
            dots = seeds[seeds["predictor"] == pred]
            ax.scatter(x[[policies.index(p) for p in dots["policy"]]], dots["ratio"], s=9, color="black", zorder=3,
                       label="each seed" if j == 0 else None)
        ax.axhline(1.0, color="black", lw=0.8, ls="--")
        ax.set_xticks(np.arange(len(policies)), policies)
        ax.set_title(title, fontsize=9)
        ax.set_ylabel(f"{label} / truth (pooled over seeds)")
    axes[0].legend(fontsize=7, title="predictor", title_fontsize=7)
    fig.suptitle(f"{label} normalised to the truth predictor. {BAR_AGGREGATION}", fontsize=9)
    return _save(fig, out, f"{metric}_vs_truth")


def plot_error_curves(results: pd.DataFrame, out: Path) -> list[Path]:
    data = error_curve_data(results)
    if data.empty:
        return []
    panels = _panels_with_total(data, error_curve_seed_data(results), error_curve_data(results, panels=False),
                                error_curve_seed_data(results, panels=False), results)
    fig, axes = _grid(len(panels))
    colours = _colours(data["policy"])
    for ax, (title, d, seeds) in zip(axes, panels):
        for policy, p in d.groupby("policy", sort=True):
            ax.plot(p["mre"], p["ratio"], marker="o", color=colours[policy], label=policy)
            dots = seeds[seeds["policy"] == policy]
            ax.scatter(dots["mre"], dots["ratio"], s=9, color=colours[policy], alpha=0.6, zorder=3)
        ax.axhline(1.0, color="black", lw=0.8, ls="--")
        ax.set_xlabel("prediction MRE (noisy:X)")
        ax.set_ylabel("mean JCT / truth (pooled over seeds)")
        ax.set_title(title, fontsize=9)
    axes[0].legend(fontsize=7, title="policy", title_fontsize=7)
    fig.suptitle(f"mean JCT normalised to truth against the injected error. {CURVE_AGGREGATION}", fontsize=9)
    return _save(fig, out, "jct_vs_error")


def _cdf(ax: Axes, jct: np.ndarray, label: str, **style) -> Line2D:
    x = np.sort(jct)
    (line,) = ax.step(x, np.arange(1, len(x) + 1) / max(1, len(x)), where="post", label=label, **style)
    return line


Draw = Callable[["Axes", Path, str, dict], "Line2D"]
Log = Callable[[str], None]


def _run_figure(results: pd.DataFrame, sweep: Path, draw: Draw, xlabel: str, ylabel: str,
                what: str, log: Log | None = None) -> Figure | None:
    """A panel per :func:`run_panels` entry, a line per run (``draw(ax, run_dir, label, style)``,
    gid = the point's key) coloured by predictor, one legend entry per predictor; None when the
    sweep has no ok run. Runs whose jobs.parquet is missing are left out; a run whose files are
    unreadable too, with one warning line through ``log`` (without ``log`` it raises
    :class:`InputError`)."""
    panels = run_panels(results)
    if not panels:
        return None
    fig, axes = _grid(len(panels))
    colours = _colours(p for _, g in panels for p in g["predictor"])
    show_load = len({k["load_scale"] for k, _ in panels}) > 1
    unreadable: list[str] = []
    for ax, (key, g) in zip(axes, panels):
        for pred, runs in g.groupby("predictor", sort=True):
            label = f"{pred} ({len(runs)} seed{'s' if len(runs) > 1 else ''})"
            for _, row in runs.iterrows():
                run = sweep / "runs" / row["key"]
                if (run / "jobs.parquet").exists() or (run / "jobs.parquet").is_symlink():
                    try:
                        line = draw(ax, run, label, dict(color=colours[pred], lw=0.9))
                    except InputError as exc:
                        if log is None:
                            raise
                        unreadable.append(str(exc))
                        continue
                    line.set_gid(row["key"])
                    label = "_nolegend_"  # one entry per predictor
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        ax.set_title(panel_title(key, show_load=show_load), fontsize=9)
        if ax.get_lines():
            ax.legend(fontsize=7)
    fig.suptitle(f"{what}. {RUN_AGGREGATION}", fontsize=9)
    if unreadable and log is not None:
        log(f"warning: {len(unreadable):,} run(s) left out of the {what} figure, their files unreadable; "
            f"e.g. {unreadable[0]}")
    return fig


def cdf_figure(results: pd.DataFrame, sweep: Path, log: Log | None = None) -> Figure | None:
    """The JCT CDFs of every run of the sweep (see :func:`run_panels`)."""
    def draw(ax: Axes, run: Path, label: str, style: dict) -> Line2D:
        ax.set_xscale("log")
        jct = _completed(run_records(run / "jobs.parquet", ("jct",)))["jct"].to_numpy()
        return _cdf(ax, jct, label, **style)

    return _run_figure(results, sweep, draw, "JCT (s)", "fraction of jobs", "JCT CDF of the completed jobs", log)


def utilisation_figure(results: pd.DataFrame, sweep: Path, log: Log | None = None) -> Figure | None:
    """Busy GPUs / total over time of every run of the sweep (see :func:`run_panels`)."""
    def draw(ax: Axes, run: Path, label: str, style: dict) -> Line2D:
        jobs = run_records(run / "jobs.parquet", ("start", "end", "num_gpus"))
        t, u = utilisation_series(held_gpus(run, jobs), _total_gpus(run))
        ax.set_ylim(0, 1.05)
        (line,) = ax.step(t / 3600, u, where="post", label=label, **style)
        return line

    return _run_figure(results, sweep, draw, "time (h)", "busy GPUs / total", "cluster utilisation", log)


def plot_sweep_cdfs(results: pd.DataFrame, sweep: Path, out: Path, log: Log | None = None) -> list[Path]:
    fig = cdf_figure(results, sweep, log)
    return [] if fig is None else _save(fig, out, "jct_cdf")


def plot_sweep_utilisation(results: pd.DataFrame, sweep: Path, out: Path, log: Log | None = None) -> list[Path]:
    fig = utilisation_figure(results, sweep, log)
    return [] if fig is None else _save(fig, out, "utilisation")


def run_records(path: Path, numeric: tuple[str, ...]) -> pd.DataFrame:
    """A run's jobs.parquet with the ``numeric`` columns (and ``status`` when there) checked, or
    InputError naming the file (truncated, not Parquet, a missing or non-numeric column)."""
    jobs = read_table(path, InputError)
    missing = [c for c in numeric if c not in jobs]
    if missing:
        raise InputError(f"{path}: jobs table lacks column(s) {missing}")
    for col in numeric:
        values = pd.to_numeric(jobs[col], errors="coerce").astype(float)
        bad = (values.isna() & jobs[col].notna()) | np.isinf(values)
        if bad.any():
            i = int(np.argmax(bad.to_numpy()))
            shown = f"{values.iloc[i]:g}" if pd.notna(values.iloc[i]) else short(jobs[col].iloc[i])
            raise InputError(f"{path}: row {i + 1} field {col!r}: {shown} is not a finite number")
        jobs[col] = values.astype(float)
    return jobs


def held_gpus(run: Path, jobs: pd.DataFrame) -> pd.DataFrame:
    """``start``, ``end``, ``num_gpus`` of every stretch GPUs were held: a preemptive run's
    segments.parquet (a suspended job holds none until it resumes), else the run's ``jobs``."""
    path = run / "segments.parquet"
    if not path.exists() and not path.is_symlink():
        return jobs
    segments = run_records(path, ("job", "start", "end"))
    job = segments["job"].to_numpy()
    bad = (job < 0) | (job >= len(jobs)) | (job != np.round(job))
    if bad.any():
        i = int(np.argmax(bad))
        raise InputError(f"{path}: row {i + 1} field 'job': {job[i]:g} is not a row of the run's jobs.parquet")
    held = pd.DataFrame({"start": segments["start"], "end": segments["end"],
                         "num_gpus": jobs["num_gpus"].to_numpy()[job.astype(np.int64)]})
    if "ended" in segments:  # a run with failures: why each stretch ended
        held["failed"] = segments["ended"].astype(str).isin(FAILED_STRETCHES).to_numpy()
    return held


def _manifest(run: Path) -> dict | None:
    """The run's manifest.json (None when there is none); InputError when it is unreadable."""
    path = run / "manifest.json"
    if not path.exists() and not path.is_symlink():
        return None
    return read_json(path, InputError)


def _total_gpus(run: Path) -> int:
    info = _manifest(run)
    if info is not None:
        cluster = info.get("cluster")
        if isinstance(cluster, dict) and "gpus" in cluster:
            gpus = cluster["gpus"]
            if isinstance(gpus, bool) or not isinstance(gpus, int) or gpus < 1:
                raise InputError(f"{run / 'manifest.json'}: field 'cluster.gpus': {short(gpus)} is not a GPU count")
            return gpus
        config = info.get("config")
        spec = config.get("cluster") if isinstance(config, dict) else None
        if isinstance(spec, str) and spec:
            from simulator.cluster import resolve

            try:
                return resolve(spec).total_gpus
            except (ValueError, OSError) as exc:  # InputError included
                raise InputError(f"{run / 'manifest.json'}: its cluster {short(spec)} cannot be read: "
                                 f"{exc}") from None
    raise InputError(f"{run}: manifest.json with the cluster size is missing")


def _as_text(value: object, width: int = 60) -> str:
    """A manifest value for a figure's title: a short string as is, anything else cut short."""
    return value if isinstance(value, str) and len(value) <= width else short(value, width)


def plot_run(run: Path, out: Path) -> list[Path]:
    """JCT CDF and utilisation of one run directory."""
    plt = _pyplot()
    jobs = run_records(run / "jobs.parquet", ("jct", "start", "end", "num_gpus"))
    label = run.name
    info = _manifest(run)
    if info is not None:
        cfg = info.get("config", {}) if isinstance(info.get("config"), dict) else {}
        label = f"{_as_text(cfg.get('policy'))} | {_as_text(cfg.get('predictor'))}"
    fig, ax = plt.subplots(figsize=(5, 3.4))
    _cdf(ax, _completed(jobs)["jct"].to_numpy(), label)
    ax.set_xscale("log")
    ax.set_xlabel("JCT (s)")
    ax.set_ylabel("fraction of jobs")
    ax.set_title(f"JCT CDF: {label}", fontsize=9)
    paths = _save(fig, out, "jct_cdf")
    fig, ax = plt.subplots(figsize=(7, 3.4))
    held, total = held_gpus(run, jobs), _total_gpus(run)
    t, u = utilisation_series(held, total)
    ax.step(t / 3600, u, where="post", lw=0.9, label="held")
    if "failed" in held and held["failed"].any():  # a run with failures: the GPUs of stretches that failed
        t, u = utilisation_series(held[held["failed"]], total)
        ax.step(t / 3600, u, where="post", lw=0.9, color="tab:red", label="held by attempts that failed")
        ax.legend(fontsize=7, loc="upper right")
    ax.set_xlabel("time (h)")
    ax.set_ylabel("busy GPUs / total")
    ax.set_ylim(0, 1.05)
    ax.set_title(f"cluster utilisation: {label}", fontsize=9)
    return paths + _save(fig, out, "utilisation")


def plot(path: str | Path, out: str | Path | None = None, *,
         log: Callable[[str], None] = print) -> list[Path]:
    """All figures of a sweep directory (or a single run directory); returns the written files.

    Raises :class:`~predictor.common.outputs.OutputError` (one line) before drawing when ``out`` cannot
    be written or, by default PATH/plots, is a symbolic link (a figure is never written through a
    link below ``out`` either). Panels whose inputs are missing (e.g. no truth point, no noisy:X
    point) are skipped with a message through ``log``.
    """
    path = Path(path)
    out = Path(out) if out is not None else inside(path, "plots")  # a planted plots/ link is refused
    if (path / "points").is_dir():
        results = load_results(path, warn=log)
        if not (results["status"] == "ok").any():
            raise InputError(f"{path}: the sweep has no finished point to plot")
        check_writable(out)
        written: list[Path] = []
        has_truth = (results.loc[results["status"] == "ok", "predictor"] == "truth").any()
        for metric, label in (("jct_mean", "mean JCT"), ("tardiness_total", "total tardiness")):
            files = plot_bars(results, out, metric, label)
            if not files:
                log(f"skipped {metric} bars: " + ("no non-truth point with a matching truth run"
                                                 if has_truth else "the sweep has no truth point"))
            written += files
        files = plot_error_curves(results, out)
        if not files:
            log("skipped JCT-vs-error curves: " + ("no noisy:X point with a matching truth run"
                                                  if has_truth else "the sweep has no truth point"))
        written += files
        written += plot_sweep_cdfs(results, path, out, log)
        written += plot_sweep_utilisation(results, path, out, log)
        return written
    if (path / "jobs.parquet").exists() or (path / "jobs.parquet").is_symlink():
        log(f"{path} is a single run: JCT CDF and utilisation only")
        check_writable(out)
        return plot_run(path, out)
    raise InputError(f"{path}: neither a sweep directory (points/) nor a run directory (jobs.parquet)")


"""Tests of traces/synthetic.py: determinism, schema, agreement with the fitted statistics, that the
parameter file round-trips, and (when the real trace files are present) that it equals a refit."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

from traces import synthetic as syn
from traces.schema import JOB_COLUMNS, JobTrace

REPO = Path(__file__).resolve().parents[2]
N_STAT = 50_000


def _shared_file(rel: str) -> Path:
    """A file under the shared folder ($ETS_SHARED or <repo>/../shared), or skip the test."""
    root = Path(os.environ.get("ETS_SHARED") or REPO.parent / "shared")
    path = root / rel
    if not path.exists():
        pytest.skip(f"real trace file {path} not present (set ETS_SHARED to the shared/ folder)")
    return path


@pytest.fixture(scope="module", params=syn.KINDS)
def big(request) -> tuple[syn.SyntheticParams, pd.DataFrame]:
    return syn.PARAMS[request.param], syn.generate(request.param, N_STAT, seed=123).jobs


# --- API, determinism, schema -----------------------------------------------------------------

@pytest.mark.parametrize("kind", syn.KINDS)
def test_same_seed_same_table_other_seed_differs(kind):
    a, b = syn.generate(kind, 2_000, seed=7), syn.generate(kind, 2_000, seed=7)
    pd.testing.assert_frame_equal(a.jobs, b.jobs)
    c = syn.generate(kind, 2_000, seed=8)
    assert not a.jobs["submit_s"].equals(c.jobs["submit_s"])
    assert not a.jobs["duration_s"].equals(c.jobs["duration_s"])


@pytest.mark.parametrize("kind", syn.KINDS)
def test_table_is_valid(kind):
    trace = syn.generate(kind, 3_000, seed=1)
    assert isinstance(trace, JobTrace) and len(trace) == 3_000
    assert trace.kind == "synthetic" and trace.source == f"synthetic:{kind}:3000:seed=1"
    jobs = trace.jobs
    assert list(jobs.columns) == list(JOB_COLUMNS)
    assert list(jobs["job_id"]) == [str(i) for i in range(3_000)]
    submit = jobs["submit_s"].to_numpy()
    assert submit[0] == 0.0 and np.all(np.diff(submit) >= 0)
    assert jobs["deadline_s"].isna().all()
    assert (jobs["user"] == "").all() and (jobs["workload"] == "").all()
    assert (jobs["duration_s"] >= syn.MIN_DURATION_S).all()
    assert set(jobs["num_gpus"]) <= set(syn.PARAMS[kind].gpu_counts)
    types = set(jobs["gpu_type"])
    assert types == ({""} if kind == "philly-like" else {"P100", "T4", "V100"})


def test_single_job_and_bad_arguments():
    one = syn.generate("pai-like", 1, seed=3).jobs
    assert len(one) == 1 and one["submit_s"].iloc[0] == 0.0
    with pytest.raises(ValueError, match="philly-like.*pai-like"):
        syn.generate("helios-like", 10)
    for bad in (0, -5):
        with pytest.raises(ValueError, match="num_jobs"):
            syn.generate("philly-like", bad)
    with pytest.raises(ValueError, match="num_jobs"):
        syn.generate("philly-like", 2.5)
    with pytest.raises(ValueError, match="rate_per_hour"):
        syn.generate("philly-like", 10, rate_per_hour=0)


def test_rate_override_scales_arrivals_only():
    base = syn.generate("philly-like", 20_000, seed=5)
    rate = 4 * syn.PARAMS["philly-like"].rate_per_hour
    fast = syn.generate("philly-like", 20_000, seed=5, rate_per_hour=rate)
    assert fast.source.endswith(":rate=208.92")
    ratio = base.jobs["submit_s"].iloc[-1] / fast.jobs["submit_s"].iloc[-1]
    assert ratio == pytest.approx(4.0, rel=0.02)
    for col in ("num_gpus", "duration_s", "gpu_type"):
        assert base.jobs[col].equals(fast.jobs[col])


def test_100k_jobs_generate_fast():
    syn.generate("pai-like", 100)  # warm-up
    for kind in syn.KINDS:
        best = min(_timed(lambda kind=kind: syn.generate(kind, 100_000, seed=0)) for _ in range(2))
        assert best < 1.0, f"{kind}: 100k jobs took {best:.2f} s"


def _timed(fn) -> float:
    import time

    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


# --- the shipped parameters are well formed ---------------------------------------------------

@pytest.mark.parametrize("kind", syn.KINDS)
def test_params_are_consistent(kind):
    p = syn.PARAMS[kind]
    assert len(p.hourly_shape) == 24 and np.mean(p.hourly_shape) == pytest.approx(1.0, abs=2e-3)
    fitted_jobs = p.reference["window_jobs"]  # the jobs inside the fitting window
    assert 0.95 * p.rows <= fitted_jobs <= p.rows
    assert sum(p.gpu_counts.values()) == fitted_jobs
    labels = p.bucket_labels()
    for cell, knots in p.durations.items():
        assert cell.split("/")[0] in labels
        assert len(knots) == len(syn.KNOT_PROBS) and np.all(np.diff(knots) >= 0)
        assert knots[0] >= syn.MIN_DURATION_S
    if p.gpu_types:
        assert sum(sum(t.values()) for t in p.gpu_types.values()) == fitted_jobs
        assert set(p.durations) == {f"{b}/{t}" for b, ts in p.gpu_types.items() for t in ts}
    else:
        assert set(p.durations) == set(labels)
    # the log-linear tail keeps the mean GPU time per job (i.e. the load) within 10% of the data
    assert syn.expected_gpu_hours(p) == pytest.approx(p.reference["mean_gpu_hours_per_job"], rel=0.10)


def test_fit_file_is_what_write_fit_writes(tmp_path):
    """The shipped file is write_fit's output for the parameters it holds (so its _about lines
    state what the values imply), and it loads back to equal parameters."""
    path = tmp_path / "fit.json"
    syn.write_fit(list(syn.PARAMS.values()), path)
    assert path.read_bytes() == syn.FIT_FILE.read_bytes()
    assert syn.load_fit(path) == syn.PARAMS
    assert syn.KINDS == ("philly-like", "pai-like")


def test_write_fit_round_trips_floats_and_keys_exactly(tmp_path):
    odd = dataclasses.replace(
        syn.PARAMS["pai-like"], kind="odd", rate_per_hour=0.1 + 0.2,
        hourly_shape=(1 / 3,) + syn.PARAMS["pai-like"].hourly_shape[1:],
        durations={**syn.PARAMS["pai-like"].durations, "1/T4": tuple(1000 + k / 7 for k in range(30))},
        reference={**syn.PARAMS["pai-like"].reference, "interarrival_cv": 2.0 ** -60})
    path = tmp_path / "fit.json"
    syn.write_fit([syn.PARAMS["philly-like"], odd], path)
    back = syn.load_fit(path)
    assert back == {"philly-like": syn.PARAMS["philly-like"], "odd": odd}
    assert list(back["odd"].gpu_counts) == list(odd.gpu_counts)  # int keys, in order
    assert all(isinstance(k, tuple) for k in back["odd"].durations.values())


# --- a large generated sample agrees with the fitted statistics --------------------------------

def test_gpu_count_shares(big):
    p, jobs = big
    got = jobs["num_gpus"].value_counts(normalize=True)
    for g, share in p.count_shares().items():
        assert abs(got.get(g, 0.0) - share) < 0.01, g


def test_gpu_type_shares(big):
    p, jobs = big
    got = jobs["gpu_type"].value_counts(normalize=True)
    for t, share in p.type_shares().items():
        assert abs(got.get(t, 0.0) - share) < 0.015, t


def test_duration_median_and_p90(big):
    p, jobs = big
    p50, p90 = np.quantile(jobs["duration_s"], [0.5, 0.9])
    assert p50 == pytest.approx(p.reference["duration_p50_s"], rel=0.10)
    assert p90 == pytest.approx(p.reference["duration_p90_s"], rel=0.10)


def test_arrival_rate_and_daily_shape(big):
    p, jobs = big
    submit = jobs["submit_s"].to_numpy()
    rate = (len(submit) - 1) / (submit[-1] / 3600.0)
    assert rate == pytest.approx(p.rate_per_hour, rel=0.05)
    hours = np.floor(np.mod(submit / 3600.0, 24.0)).astype(int)
    counts = np.bincount(hours, minlength=24)
    assert np.corrcoef(counts, p.hourly_shape)[0, 1] > 0.9


# --- the shipped parameters equal a refit from the real files --------------------------------

def test_philly_params_equal_refit():
    assert syn.fit_philly(_shared_file(syn.PHILLY_FILE)) == syn.PARAMS["philly-like"]


def test_pai_params_equal_refit():
    assert syn.fit_pai_sample(_shared_file(syn.PAI_SAMPLE_FILE)) == syn.PARAMS["pai-like"]


def test_fit_script_rewrites_the_file_unchanged(monkeypatch, tmp_path):
    from experiments import fit_synthetic

    path = _shared_file(syn.PHILLY_FILE)
    _shared_file(syn.PAI_SAMPLE_FILE)
    shared = path.parents[len(Path(syn.PHILLY_FILE).parts) - 1]
    target = tmp_path / "synthetic_fit.json"
    target.write_bytes(syn.FIT_FILE.read_bytes())
    monkeypatch.setattr(syn, "FIT_FILE", target)
    result = CliRunner().invoke(fit_synthetic.main, ["--shared", str(shared), "--jobs", "2000"])
    assert result.exit_code == 0, result.output
    out = result.output
    assert f"{target}: unchanged" in out
    assert target.read_bytes() == (Path(syn.__file__).with_name("synthetic_fit.json")).read_bytes()
    assert "Offered load at the fitted rate" in out and "real file vs generated sample" in out

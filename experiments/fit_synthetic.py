"""Refit the synthetic-trace parameters from the real trace files and write them to the package.

Usage: ``python -m experiments.fit_synthetic [--shared DIR] [--jobs N] [--seed S]``

``DIR`` defaults to ``$ETS_SHARED`` or ``<repo>/../shared``. The script rewrites
``traces/synthetic_fit.json`` (``traces.synthetic.FIT_FILE``) with the refit, prints what the
values imply, says whether the file changed, and compares a generated sample of N jobs with the
real statistics (and times the generation).
"""

from __future__ import annotations

import time
from pathlib import Path

import click
import numpy as np

from experiments.shared_data import shared_dir
from traces import synthetic as syn


def compare(params: syn.SyntheticParams, num_jobs: int, seed: int) -> list[tuple[str, str, str]]:
    """(statistic, real/fitted, generated) rows for a generated sample of num_jobs jobs."""
    start = time.perf_counter()
    jobs = syn.generate(params.kind, num_jobs, seed).jobs
    elapsed = time.perf_counter() - start
    ref = params.reference
    submit = jobs["submit_s"].to_numpy()
    gaps = np.diff(submit)
    hod = np.floor(np.mod(submit / 3600.0, 24.0)).astype(int)
    counts = np.bincount(hod, minlength=24)
    corr = float(np.corrcoef(counts, params.hourly_shape)[0, 1])
    dur = jobs["duration_s"].to_numpy()
    gpus = jobs["num_gpus"].to_numpy()
    rows = [
        ("rate (jobs/h)", f"{params.rate_per_hour:.2f}", f"{(len(submit) - 1) / (submit[-1] / 3600):.2f}"),
        ("hour-of-day corr. with shape", "1", f"{corr:.3f}"),
        ("inter-arrival CV", f"{ref['interarrival_cv']}", f"{gaps.std() / gaps.mean():.2f}"),
    ]
    shares = params.count_shares()
    for g in sorted(shares, key=lambda g: -shares[g])[:5]:
        rows.append((f"share {g} GPU", f"{100 * shares[g]:.2f}%", f"{100 * np.mean(gpus == g):.2f}%"))
    if params.gpu_types:
        for t, v in params.type_shares().items():
            rows.append((f"share {t}", f"{100 * v:.2f}%", f"{100 * np.mean(jobs['gpu_type'] == t):.2f}%"))
    for q in (50, 90, 99):
        real = ref[f"duration_p{q}_s"]
        rows.append((f"duration p{q} (s)", f"{real:,.0f}", f"{np.percentile(dur, q):,.0f}"))
    rows.append(("duration min (s)", "", f"{dur.min():,.1f}"))
    gpu_hours = (gpus * dur).mean() / 3600
    rows.append(("GPU-hours per job", f"{ref['mean_gpu_hours_per_job']}", f"{gpu_hours:.2f}"))
    rows.append((f"generate({num_jobs:,}) time (s)", "", f"{elapsed:.3f}"))
    return rows


@click.command(help=__doc__.splitlines()[0])
@click.option("--shared", type=click.Path(path_type=Path), default=shared_dir(), show_default=True,
              help="The shared/ folder.")
@click.option("--jobs", type=int, default=100_000, show_default=True, help="Jobs in the comparison sample.")
@click.option("--seed", type=int, default=0, show_default=True)
def main(shared: Path, jobs: int, seed: int) -> None:
    """Refit both workloads from the real files, rewrite the fit file, and compare samples with them."""

    fits = []
    for fit, rel in ((syn.fit_philly, syn.PHILLY_FILE), (syn.fit_pai_sample, syn.PAI_SAMPLE_FILE)):
        path = shared / rel
        if not path.exists():
            raise click.ClickException(f"{path} not found (set --shared or ETS_SHARED)")
        fits.append(fit(path))

    before = syn.FIT_FILE.read_bytes() if syn.FIT_FILE.exists() else None
    syn.write_fit(fits, syn.FIT_FILE)
    for params in fits:
        print(f"{params.kind}:")
        print("\n".join("  " + line for line in syn.describe(params)))
        print()
    same = syn.FIT_FILE.read_bytes() == before
    print(f"# {syn.FIT_FILE}: {'unchanged (it equals the refit)' if same else 'REWRITTEN from the refit'}")
    for params in fits:
        print(f"\n{params.kind}: real file vs generated sample ({jobs:,} jobs, seed {seed})")
        rows = compare(params, jobs, seed)
        w = max(len(r[0]) for r in rows)
        print(f"  {'statistic':<{w}}  {'real/fitted':>12}  {'generated':>12}")
        for stat, real, gen in rows:
            print(f"  {stat:<{w}}  {real:>12}  {gen:>12}")


if __name__ == "__main__":
    main()

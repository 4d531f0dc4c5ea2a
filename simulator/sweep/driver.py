"""Parameter sweeps: run a grid's points that are not done yet, resumably, on a local process pool
or a Ray cluster.

Why: the paper's comparisons (policy x predictor x prediction error x workload x seed x load) are
hundreds of independent runs; the driver checks OUT before any point runs, skips the points
already finished there (a killed sweep resumes where it stopped), writes each point as soon as it
finishes (a failing point never costs the others) and gathers every point of OUT in
``results.parquet`` at the end. The grid is :mod:`simulator.sweep.grid`, a point and the layout
of OUT :mod:`simulator.sweep.points`, where points run :mod:`simulator.sweep.executors`, the
comparison with truth :mod:`simulator.sweep.tables`.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from pathlib import Path

import pandas as pd

from predictor.common.outputs import inside, write_parquet
from simulator.run import RunConfig
from simulator.sweep.executors import run_points, worker_count
from simulator.sweep.points import config_key, done_keys, load_results, prepare_out, save_point


def run_sweep(configs: Sequence[RunConfig], out: str | Path, *, workers: int | None = None,
              ray_address: str | None = None, progress: bool = True,
              log: Callable[[str], None] | None = None) -> pd.DataFrame:
    """Run every config not already done in OUT; write each point as it finishes; return all rows.

    ``ray_address``: None -> local pool of ``workers`` processes (1 -> in this process; capped at
    the usable cores and the points to run, with a warning line through ``log`` past the cores);
    ``"auto"`` or an address -> ``ray.init(address=...)`` (an already initialised Ray is used as is);
    ``"local"`` -> start a local Ray. ``log`` (a print-like callable) gets one line of counts.
    One sweep at a time per OUT (leftover temp files of a killed sweep are removed at the start).
    Raises :class:`~predictor.common.outputs.OutputError` (one line) when OUT cannot be written, before
    any point runs, or when it breaks during the sweep (a point that merely fails to write is
    recorded as failed); its local workers are then ended and reaped before it returns. A finished
    point is skipped only when it matches its run folder (:func:`~simulator.sweep.points.check_point`).
    The local pool spawns its workers, which die with this process (even by SIGKILL); a script
    calling this with workers > 1 needs the usual ``if __name__ == "__main__":`` guard.
    """
    from tqdm import tqdm

    out = prepare_out(Path(out))
    configs = list(dict.fromkeys(configs))
    done = done_keys(out, warn=log, configs=configs)
    todo = [c for c in configs if config_key(c) not in done]
    skipped = len(configs) - len(todo)
    count, capped = worker_count(workers, len(todo))
    if log is not None:
        if capped and not ray_address:
            log(capped)
        log(f"{len(configs)} points: {skipped} already done (skipped), {len(todo)} to run"
            + (f" on Ray ({ray_address})" if ray_address else f" with {count} worker(s)"))
    results = run_points(todo, workers=count, ray_address=ray_address)
    failed = 0
    try:
        with tqdm(total=len(todo), desc="sweep", unit="pt", file=sys.stderr, disable=not progress) as bar:
            for result in results:
                result = save_point(out, result)
                failed += result["row"]["status"] != "ok"
                bar.set_postfix(failed=failed, refresh=False)
                bar.update(1)
    finally:  # stop the workers now, not when the generator is garbage-collected
        results.close()
    table = load_results(out, warn=log)
    write_parquet(inside(out, "results.parquet"), table)
    return table

"""Parameter sweeps: a grid of RunConfigs run on a local process pool or a Ray cluster, resumably.

Why: the paper's comparisons (policy x predictor x prediction error x workload x seed x load) are
hundreds of independent runs; each point is cached on disk under a stable hash of its config, as
soon as it finishes, so a killed sweep resumes where it stopped and a failing point never costs
the others.

Layout of a sweep directory OUT::

    OUT/points/<key>.parquet   one row per point: RunConfig fields, summary metrics, key, status
                               ("ok" | "error"), error, point_seconds; written last (the commit marker)
    OUT/runs/<key>/            jobs.parquet, summary.json, manifest.json (RunOutput.write); for a
                               failed point error.txt with the traceback
    OUT/results.parquet        all point rows, sorted by key (rewritten at the end of each sweep)

Every file and run folder is written atomically (:mod:`predictor.outputs`). OUT is checked for
writability before any point runs. A point whose output cannot be written (full disk, an I/O
error) is recorded as failed like a point that raised; only when even that record cannot be
written (OUT itself is broken) does the sweep stop, with one line (:class:`OutputError`).

OUT may hold the points of several sweeps (other grids): each point is its own file under the
hash of its full config, so they never overwrite or mix with each other; the sweep command's
table covers its own grid, ``results.parquet`` and ``simrun plot`` every point in OUT.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import shutil
import signal
import sys
import threading
import time
import traceback
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import asdict, fields
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

import numpy as np
import pandas as pd

from predictor.outputs import OutputError, atomic_dir, check_writable, write_parquet
from simulator.run import DEFAULT_CLUSTER, DEFAULT_WORKLOAD, RunConfig
from simulator.timing import MODEL_PREDICTORS

CONFIG_FIELDS = [f.name for f in fields(RunConfig)]
# Columns that measure the host, not the schedule: they differ between two runs of the same config.
TIMING_COLUMNS = ("wall_seconds", "policy_seconds", "events_per_second", "point_seconds")
# A run's identity apart from its predictor: rows sharing these are compared with the truth run.
STRING_COLUMNS = ("policy", "predictor", "trace", "workload", "cluster", "reference_gpu", "key", "status", "error")
MATCH_COLUMNS = ("policy", "trace", "workload", "limit", "cluster", "seed", "deadline_fraction",
                 "reference_gpu", "load_scale", "bind", "observe_after")


class SweepSpecError(ValueError):
    """A malformed sweep option (seeds, errors, load scales, an empty grid)."""


# ---------------------------------------------------------------------------------------------
# The grid


def split_specs(text: str | Iterable[str] | None) -> list[str]:
    """Split comma lists of specs, keeping ``name:k=v,k2=v2`` option lists together.

    A piece with ``=`` and no ``:`` continues the previous spec (``hydra:window=10,bnb=off,allox``
    -> ``["hydra:window=10,bnb=off", "allox"]``). Accepts one string or several (repeated options).
    """
    if text is None:
        return []
    items = [text] if isinstance(text, str) else list(text)
    out: list[str] = []
    for item in items:
        start = len(out)
        for piece in (p.strip() for p in item.split(",")):
            if not piece:
                continue
            if "=" in piece and ":" not in piece.split("=", 1)[0] and len(out) > start and ":" in out[-1]:
                out[-1] += "," + piece
            else:
                out.append(piece)
    return out


def parse_seeds(text: str | int | Sequence[int]) -> list[int]:
    """``"3"`` (a single integer: a count) -> 0, 1, 2; ``"0,5"`` or ``"7,"`` (a comma list) -> those seeds."""
    if isinstance(text, int):
        text = str(text)
    if not isinstance(text, str):
        return [int(s) for s in text]
    parts = [p.strip() for p in text.split(",")]
    try:
        if len(parts) == 1:
            count = int(parts[0])
            if count < 1:
                raise SweepSpecError(f"--seeds {text!r}: a single number is a count and must be >= 1 "
                                     "(write '0,' for the one seed 0)")
            return list(range(count))
        return list(dict.fromkeys(int(p) for p in parts if p))
    except ValueError:
        raise SweepSpecError(f"--seeds {text!r}: expected a count N (seeds 0..N-1) or a comma list "
                             "of integers") from None


def parse_floats(text: str | Sequence[float] | None, what: str, *, positive: bool = False) -> list[float]:
    if text is None:
        return []
    parts = [p.strip() for p in text.split(",")] if isinstance(text, str) else list(text)
    out = []
    for p in parts:
        if p == "":
            continue
        try:
            x = float(p)
        except ValueError:
            raise SweepSpecError(f"{what} {text!r}: {p!r} is not a number") from None
        if not np.isfinite(x) or x < 0 or (positive and x == 0):
            raise SweepSpecError(f"{what} {text!r}: {p!r} must be {'> 0' if positive else '>= 0'}")
        out.append(x)
    return list(dict.fromkeys(out))


def error_predictor(mre: float) -> str:
    """The predictor spec of an injected-error point: 0.05 -> ``noisy:0.05``, 0 -> ``noisy:0``."""
    return f"noisy:{mre:g}"


def _absolute_trace(spec: str) -> str:
    kind, sep, path = spec.partition(":")
    if not sep:
        return spec  # invalid; the point records the loader's error
    return f"{kind}:{Path(path).expanduser().resolve()}"


def plan(policies: str | Sequence[str], predictors: str | Sequence[str] = (), *,
         errors: str | Sequence[float] = (), workloads: str | Sequence[str] = (),
         traces: str | Sequence[str] = (), seeds: str | int | Sequence[int] = 1,
         load_scales: str | Sequence[float] = (1.0,), cluster: str = DEFAULT_CLUSTER,
         limit: int | None = None, deadline_fraction: float = 0.2,
         reference_gpu: str | None = None, observe_after: int | None = None) -> list[RunConfig]:
    """The grid policies x (predictors + noisy:<e> for e in errors) x (workloads + traces) x seeds x loads.

    No workload and no trace -> the embedded default workload. Trace paths are made absolute (so
    workers in another directory find them). Specs are not validated here: a bad one becomes a
    failed point, the others still run. When any predictor is model-based (or with online
    feedback), every point binds its jobs to model configs, so all predictors of a workload,
    truth included, see the same jobs.
    """
    pols = split_specs(policies)
    preds = list(dict.fromkeys(split_specs(predictors)
                               + [error_predictor(e) for e in parse_floats(errors, "--errors")]))
    sources: list[tuple[str | None, str | None]] = [(None, w) for w in split_specs(workloads)]
    sources += [(_absolute_trace(t), None) for t in split_specs(traces)]
    if not sources:
        sources = [(None, DEFAULT_WORKLOAD)]
    seed_list = parse_seeds(seeds)
    loads = parse_floats(load_scales, "--load-scales", positive=True) or [1.0]
    if not pols:
        raise SweepSpecError("no policy given (--policies)")
    if not preds:
        raise SweepSpecError("no predictor given (--predictors and/or --errors)")
    bind = observe_after is not None or any(q in MODEL_PREDICTORS for q in preds)
    configs = [RunConfig(policy=p, predictor=q, trace=t, workload=w, limit=None if limit is None else int(limit),
                         cluster=cluster, seed=int(s), deadline_fraction=float(deadline_fraction),
                         reference_gpu=reference_gpu, load_scale=float(ls), bind=bind, observe_after=observe_after)
               for p in pols for q in preds for t, w in sources for s in seed_list for ls in loads]
    return list(dict.fromkeys(configs))


def config_key(config: RunConfig) -> str:
    """A stable 16-hex-digit hash of the config (sorted JSON of its fields), and for a
    model-based predictor of its shipped checkpoints: a point run with other weights is another
    point (a resumed sweep must not keep results of retrained checkpoints)."""
    fields_ = asdict(config)
    method = config.predictor.partition(":")[0]
    if method in MODEL_PREDICTORS:
        fields_["checkpoints"] = checkpoint_digest(method)
    text = json.dumps(fields_, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


@functools.lru_cache(maxsize=None)
def checkpoint_digest(method: str) -> str:
    """sha1 of the names and bytes of ``method``'s shipped checkpoints."""
    from predictor.checkpoints import CHECKPOINT_DIR

    h = hashlib.sha1()
    for path in sorted(Path(CHECKPOINT_DIR).glob(f"{method}-*.pt")):
        h.update(path.name.encode())
        h.update(path.read_bytes())
    return h.hexdigest()[:12]


def source_label(row: Any) -> str:
    """The workload or trace of a result row, for tables and plot titles."""
    trace = row["trace"] if not isinstance(row, RunConfig) else row.trace
    workload = row["workload"] if not isinstance(row, RunConfig) else row.workload
    if isinstance(trace, str) and trace:
        kind, _, path = trace.partition(":")
        return f"{kind}:{Path(path).name}"
    return workload if isinstance(workload, str) and workload else DEFAULT_WORKLOAD


# ---------------------------------------------------------------------------------------------
# One point


def run_point(config: RunConfig) -> dict:
    """Run one config; never raises. Returns {row, records, summary, manifest, traceback}."""
    from simulator.run import execute

    t0 = time.perf_counter()
    row: dict[str, Any] = {**asdict(config), "key": config_key(config)}
    try:
        output = execute(config)
    except Exception as exc:  # a failed point is recorded, the sweep goes on
        row.update(status="error", error=f"{type(exc).__name__}: {exc}",
                   point_seconds=time.perf_counter() - t0)
        return {"row": row, "records": None, "summary": None, "manifest": None,
                "traceback": traceback.format_exc()}
    summary = dict(output.summary)
    by_type = summary.pop("utilization_by_type", {}) or {}
    row.update(summary)
    row.update({f"utilization_{t}": u for t, u in by_type.items()})
    row.update(status="ok", error=None, point_seconds=time.perf_counter() - t0)
    return {"row": row, "records": output.records, "summary": output.summary,
            "manifest": output.manifest, "traceback": None}


def _point_frame(row: dict) -> pd.DataFrame:
    frame = pd.DataFrame([row])
    for col in ("trace", "workload", "reference_gpu", "error"):  # keep string columns typed when all-None
        if col in frame:
            frame[col] = frame[col].astype("string")
    if "limit" in frame:
        frame["limit"] = frame["limit"].astype("Int64")
    return frame


def write_point(out: Path, result: dict) -> None:
    """Write one point's run folder, then its point row (the marker that the point is done),
    each atomically: a failure leaves the previous files or none, never half of one.

    Raises :class:`OutputError` when the files cannot be written."""
    from simulator.run import RunOutput

    key = result["row"]["key"]
    final = out / "runs" / key
    with atomic_dir(final) as tmp:
        if result["records"] is not None:
            try:
                RunOutput(result["records"], result["summary"], result["manifest"]).write(tmp)
            except OutputError as exc:  # name the file the user will look for, not its temporary twin
                raise OutputError(str(exc).replace(str(tmp), str(final))) from None
        else:
            (tmp / "config.json").write_text(json.dumps({k: result["row"][k] for k in CONFIG_FIELDS}, indent=2) + "\n")
            (tmp / "error.txt").write_text(result["traceback"] or result["row"].get("error") or "")
    write_parquet(out / "points" / f"{key}.parquet", _point_frame(result["row"]))


def _unwritten(result: dict, exc: BaseException) -> dict:
    """The failure record of a point that ran but whose output could not be written."""
    row = {**{k: result["row"][k] for k in CONFIG_FIELDS}, "key": result["row"]["key"], "status": "error",
           "error": f"{type(exc).__name__}: {exc}", "point_seconds": result["row"].get("point_seconds")}
    detail = (f"the point ran, but its output could not be written: {exc}\n" if isinstance(exc, OutputError)
              else "".join(traceback.format_exception(exc)))
    return {"row": row, "records": None, "summary": None, "manifest": None, "traceback": detail}


def save_point(out: Path, result: dict) -> dict:
    """Write a point; if its output cannot be written, write a failure record instead and
    return that (the sweep goes on). Raises :class:`OutputError` only when even the failure
    record cannot be written: then OUT itself is unusable and the sweep must stop."""
    try:
        write_point(out, result)
        return result
    except Exception as exc:  # a full disk or a writer's error costs this point only
        failed = _unwritten(result, exc)
    try:
        write_point(out, failed)
    except OutputError as exc:
        raise OutputError(f"{exc} (not even a failure record could be written, so the sweep stops; "
                          f"finished points are kept: rerun with the same --out to resume)") from None
    return failed


def _done_keys(out: Path) -> set[str]:
    """Keys of the points already finished successfully in OUT."""
    done = set()
    for path in (out / "points").glob("*.parquet"):
        if path.name.startswith("."):
            continue
        try:
            status = pd.read_parquet(path, columns=["status"])["status"]
        except Exception:  # unreadable: recompute
            continue
        if len(status) and status.iloc[0] == "ok":
            done.add(path.stem)
    return done


# ---------------------------------------------------------------------------------------------
# The sweep


def default_workers() -> int:
    return max(1, min(2, os.cpu_count() or 1))


# How often a worker without prctl(PR_SET_PDEATHSIG) checks that its parent is still alive.
PARENT_POLL_SECONDS = 1.0
_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def _watch_parent(parent_pid: int, on_orphan: Callable[[], None] | None = None,
                  interval: float = PARENT_POLL_SECONDS) -> threading.Thread:
    """Start a daemon thread that calls ``on_orphan`` (default: kill this process) once this
    process's parent is no longer ``parent_pid``, i.e. the parent died and it was re-parented.
    The portable fallback for :func:`_die_with_parent` where the kernel cannot do it."""
    def kill_self() -> None:
        os.kill(os.getpid(), getattr(signal, "SIGKILL", signal.SIGTERM))

    def watch() -> None:
        while os.getppid() == parent_pid:
            time.sleep(interval)
        (on_orphan or kill_self)()

    thread = threading.Thread(target=watch, name="watch-parent", daemon=True)
    thread.start()
    return thread


def _set_parent_death_signal() -> bool:
    """Ask Linux to SIGKILL this process when its parent (thread) dies; False where unsupported."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def _die_with_parent(parent_pid: int) -> None:
    """Pool worker initializer: end this worker when the sweep's driver dies, even by SIGKILL.

    Why: a worker blocks forever on the task queue (it holds both ends of its pipe), so an
    orphaned worker (~1 GB with a model predictor) would outlive a killed sweep indefinitely; once
    the workers are gone, multiprocessing's resource tracker sees its pipe close and exits too.
    The parent may have died before this ran: then exit at once."""
    if not _set_parent_death_signal():
        _watch_parent(parent_pid)
    if os.getppid() != parent_pid:
        os._exit(1)


def _terminate_workers(pool: ProcessPoolExecutor) -> None:
    """Stop the pool's workers now (an interrupted or stopped sweep must not wait for the points
    in flight, whose results would be dropped anyway)."""
    for proc in list((getattr(pool, "_processes", None) or {}).values()):
        with contextlib.suppress(Exception):
            proc.terminate()


def _iter_local(todo: list[RunConfig], workers: int):
    """Results of ``todo`` as they finish, in this process or on a pool of spawned workers that
    die with this process (:func:`_die_with_parent`; the pool starts them in ``submit``, i.e. in
    the thread that runs the sweep, which is the thread PR_SET_PDEATHSIG watches). Closing the
    generator early terminates the workers."""
    if workers <= 1:  # in process: no start-up cost, same results
        for config in todo:
            yield run_point(config)
        return
    import multiprocessing

    ctx = multiprocessing.get_context("spawn")  # no fork of a process that may hold threads (torch, tqdm)
    pool = ProcessPoolExecutor(max_workers=workers, mp_context=ctx, initializer=_die_with_parent,
                               initargs=(os.getpid(),))
    finished = False
    try:
        futures = {pool.submit(run_point, c): c for c in todo}
        for fut in as_completed(futures):
            try:
                result = fut.result()
            except Exception as exc:  # the worker died (e.g. out of memory)
                result = _crashed(futures[fut], exc)
            yield result
        finished = True
    finally:  # on Ctrl-C, a stopped sweep or an error in the driver: drop the queued points, do not wait
        if not finished:  # before shutdown: a worker must not exit cleanly with a point half done
            _terminate_workers(pool)
        pool.shutdown(wait=False, cancel_futures=True)


def _crashed(config: RunConfig, exc: BaseException) -> dict:
    row = {**asdict(config), "key": config_key(config), "status": "error",
           "error": f"{type(exc).__name__}: {exc}", "point_seconds": float("nan")}
    return {"row": row, "records": None, "summary": None, "manifest": None,
            "traceback": "".join(traceback.format_exception(exc))}


def _iter_ray(todo: list[RunConfig], address: str):
    import ray

    if not ray.is_initialized():
        if address == "local":
            ray.init(include_dashboard=False, log_to_driver=False)
        else:
            ray.init(address=address, log_to_driver=False)
    remote = ray.remote(num_cpus=1, max_retries=0)(run_point)
    pending = {remote.remote(c): c for c in todo}
    try:
        while pending:
            ready, _ = ray.wait(list(pending), num_returns=1)
            for ref in ready:
                config = pending.pop(ref)
                try:
                    result = ray.get(ref)
                except Exception as exc:  # the task or its worker failed outside run_point
                    result = _crashed(config, exc)
                yield result
    finally:
        for ref in pending:
            ray.cancel(ref)


def run_sweep(configs: Sequence[RunConfig], out: str | Path, *, workers: int | None = None,
              ray_address: str | None = None, progress: bool = True, log=None) -> pd.DataFrame:
    """Run every config not already done in OUT; write each point as it finishes; return all rows.

    ``ray_address``: None -> local pool of ``workers`` processes (1 -> in this process);
    ``"auto"`` or an address -> ``ray.init(address=...)`` (an already initialised Ray is used as is);
    ``"local"`` -> start a local Ray. ``log`` (a print-like callable) gets one line of counts.
    One sweep at a time per OUT (leftover temp files of a killed sweep are removed at the start).
    Raises :class:`OutputError` (one line) when OUT cannot be written, before any point runs, or
    when it breaks during the sweep (a point that merely fails to write is recorded as failed).
    The local pool spawns its workers, which die with this process (even by SIGKILL); a script
    calling this with workers > 1 needs the usual ``if __name__ == "__main__":`` guard.
    """
    from tqdm import tqdm

    out = _prepare_out(Path(out))
    configs = list(dict.fromkeys(configs))
    done = _done_keys(out)
    todo = [c for c in configs if config_key(c) not in done]
    skipped = len(configs) - len(todo)
    if log is not None:
        log(f"{len(configs)} points: {skipped} already done (skipped), {len(todo)} to run"
            + (f" on Ray ({ray_address})" if ray_address else f" with {workers or default_workers()} worker(s)"))
    results = _iter_ray(todo, ray_address) if ray_address else _iter_local(todo, workers or default_workers())
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
    table = load_results(out)
    write_parquet(out / "results.parquet", table)
    return table


def _prepare_out(out: Path) -> Path:
    """Check that OUT, OUT/points and OUT/runs can be written (one-line :class:`OutputError`
    before any work), and remove the temporary files and folders a killed sweep left."""
    for folder in (out, out / "points", out / "runs"):
        check_writable(folder)
    stale = [p for sub in ("points", "runs") for pattern in (".*.tmp-*", ".*.old-*") for p in (out / sub).glob(pattern)]
    try:
        for path in stale:
            shutil.rmtree(path) if path.is_dir() and not path.is_symlink() else path.unlink()
    except OSError as exc:
        raise OutputError(f"cannot remove {path}, left by an earlier sweep: {exc.strerror or exc}") from None
    return out


def load_results(out: str | Path) -> pd.DataFrame:
    """All point rows in OUT/points (finished or failed), sorted by key."""
    paths = sorted(p for p in (Path(out) / "points").glob("*.parquet") if not p.name.startswith("."))
    if not paths:
        return pd.DataFrame(columns=CONFIG_FIELDS + ["key", "status", "error"])
    frames = [pd.read_parquet(p).dropna(axis=1, how="all") for p in paths]
    table = pd.concat(frames, ignore_index=True, sort=False)
    for col in CONFIG_FIELDS + ["key", "status", "error"]:
        if col not in table:
            table[col] = None
    for col in STRING_COLUMNS:
        table[col] = table[col].astype("string")
    table["limit"] = table["limit"].astype("Int64")
    front = CONFIG_FIELDS + ["key", "status", "error"]
    table = table[front + [c for c in table.columns if c not in front]]
    return table.sort_values("key", kind="stable").reset_index(drop=True)


def config_of(row: Any) -> RunConfig:
    """The RunConfig of a result row."""
    def clean(v):
        return None if v is None or (isinstance(v, float) and np.isnan(v)) or v is pd.NA else v

    values = {k: clean(row[k]) for k in CONFIG_FIELDS}
    values["seed"] = int(values["seed"])
    values["limit"] = None if values["limit"] is None else int(values["limit"])
    values["load_scale"] = float(values["load_scale"])
    values["deadline_fraction"] = float(values["deadline_fraction"])
    values["bind"] = bool(values["bind"])
    values["observe_after"] = None if values["observe_after"] is None else int(values["observe_after"])
    return RunConfig(**values)


# ---------------------------------------------------------------------------------------------
# Comparison with the truth run


def normalise_to_truth(results: pd.DataFrame, metrics: Sequence[str] = ("jct_mean", "tardiness_total")) -> pd.DataFrame:
    """The ok rows with ``<metric>_ratio`` = metric / the same metric of the truth run that shares
    policy, workload/trace, cluster, limit, seed, deadline fraction, reference GPU and load scale.

    NaN where there is no truth run; for a truth value of 0 the ratio is 1 when the row's value
    is 0 too, else NaN (undefined). Adds ``source`` (workload or trace label) and ``<metric>_truth``.
    """
    ok = results[results["status"] == "ok"].copy()
    ok["source"] = [source_label(r) for _, r in ok.iterrows()] if len(ok) else []
    if ok.empty:
        for m in metrics:
            ok[f"{m}_ratio"] = []
        return ok
    keys = ["_m_" + c for c in MATCH_COLUMNS]
    for c, k in zip(MATCH_COLUMNS, keys):  # NaN/None never compare equal: match on text
        ok[k] = ok[c].astype(object).where(ok[c].notna(), "<none>").astype(str)
    truth = ok[ok["predictor"] == "truth"][keys + list(metrics)].drop_duplicates(keys)
    merged = ok.merge(truth, on=keys, how="left", suffixes=("", "_truth"))
    for m in metrics:
        num, den = merged[m].astype(float), merged[f"{m}_truth"].astype(float)
        with np.errstate(divide="ignore", invalid="ignore"):
            ratio = num / den
        ratio = ratio.where(den != 0, np.where((den == 0) & (num == 0), 1.0, np.nan))
        merged[f"{m}_ratio"] = ratio
    return merged.drop(columns=keys)


def pooled_ratio(norm: pd.DataFrame, metric: str) -> float:
    """sum of ``metric`` / sum of its truth values over the rows of ``norm`` (from
    :func:`normalise_to_truth`) that have a truth run: robust to near-zero truth tardiness, where
    the mean of per-point ratios explodes. 1 when both sums are 0, NaN when only the truth's is.
    The one aggregation of the sweep table and of the plots, so that both show the same number."""
    matched = norm[norm[f"{metric}_truth"].notna()]
    den = matched[f"{metric}_truth"].sum()
    num = matched[metric].sum()
    return float(num / den) if den > 0 else (1.0 if len(matched) and num == 0 else float("nan"))


def summary_table(results: pd.DataFrame) -> pd.DataFrame:
    """Mean JCT / total tardiness per policy x predictor (over workloads, seeds, loads), with the
    pooled ratio to the matching truth runs (:func:`pooled_ratio`) and counts of ok / failed points."""
    norm = normalise_to_truth(results)
    counts = results.groupby(["policy", "predictor"])["status"].agg(
        ok=lambda s: int((s == "ok").sum()), failed=lambda s: int((s != "ok").sum()))
    if norm.empty:
        return counts.reset_index()
    groups = norm.groupby(["policy", "predictor"])
    agg = pd.DataFrame({
        "jct_mean": groups["jct_mean"].mean(),
        "jct_ratio": groups.apply(lambda g: pooled_ratio(g, "jct_mean"), include_groups=False),
        "tardiness_total": groups["tardiness_total"].mean(),
        "tardiness_ratio": groups.apply(lambda g: pooled_ratio(g, "tardiness_total"), include_groups=False),
    })
    return counts.join(agg, how="left").reset_index()


def format_table(table: pd.DataFrame) -> str:
    """The summary table as aligned text."""
    if table.empty:
        return "  (no points)"
    head = ["policy", "predictor", "ok", "failed", "JCT mean (s)", "xtruth", "tardiness (s)", "xtruth"]

    def num(x, fmt):
        return "-" if x is None or pd.isna(x) else format(x, fmt)

    rows = [[str(r["policy"]), str(r["predictor"]), str(r["ok"]), str(r["failed"]),
             num(r.get("jct_mean"), ",.0f"), num(r.get("jct_ratio"), ".3f"),
             num(r.get("tardiness_total"), ",.0f"), num(r.get("tardiness_ratio"), ".3f")]
            for _, r in table.iterrows()]
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(head)]
    lines = ["  " + "  ".join(h.ljust(w) if i < 2 else h.rjust(w) for i, (h, w) in enumerate(zip(head, widths)))]
    for r in rows:
        lines.append("  " + "  ".join(v.ljust(w) if i < 2 else v.rjust(w) for i, (v, w) in enumerate(zip(r, widths))))
    return "\n".join(lines)

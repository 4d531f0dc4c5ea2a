"""One point of a sweep: its key, its run (which never raises), and its files in the sweep directory.

Why: a sweep is hundreds of independent runs; each point is cached on disk under a stable hash
of its config as soon as it finishes, so a killed sweep resumes where it stopped and a failing
point never costs the others.

Layout of a sweep directory OUT::

    OUT/points/<key>.parquet   one row per point: RunConfig fields, summary metrics, key, status
                               ("ok" | "error"), error, point_seconds; written last (the commit marker)
    OUT/runs/<key>/            jobs.parquet, summary.json, manifest.json (RunOutput.write); for a
                               failed point error.txt with the traceback
    OUT/results.parquet        all point rows, sorted by key (rewritten at the end of each sweep)

Every file and run folder is written atomically (:mod:`predictor.common.outputs`), never through a symbolic
link below OUT (:func:`predictor.common.outputs.inside`). A finished point counts (on resume, in the
results and figures) only when its row matches its run folder (:func:`check_point`). A point whose output
cannot be written (full disk, an I/O error) is recorded as failed like a point that raised; only
when even that record cannot be written (OUT itself is broken) does :func:`save_point` raise
:class:`OutputError`.

OUT may hold the points of several sweeps (other grids): each point is its own file under the
hash of its full config, so they never overwrite or mix with each other; the sweep command's
table covers its own grid, ``results.parquet`` and ``simrun plot`` every point in OUT.
"""

from __future__ import annotations

import functools
import hashlib
import json
import shutil
import time
import traceback
from collections.abc import Callable, Iterable
from dataclasses import asdict, fields
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from predictor.common.inputs import InputError, load_json, names, read_parquet, regular_file, short
from predictor.common.outputs import OutputError, atomic_dir, check_writable, inside, write_parquet
from simulator.run import RunConfig, RunOutput, execute
from simulator.timing import MODEL_PREDICTORS

CONFIG_FIELDS = [f.name for f in fields(RunConfig)]
# Columns that measure the host, not the schedule: they differ between two runs of the same config.
TIMING_COLUMNS = ("wall_seconds", "policy_seconds", "events_per_second", "point_seconds")
# Text columns of the results: the config's string fields (derived, so a new one needs no edit here) and the
# point's own.
STRING_COLUMNS = (*(f.name for f in fields(RunConfig) if "str" in str(f.type)), "key", "status", "error")
# Config fields added after sweeps were keyed, at the value that means "as before": left out of the
# key, so that a sweep resumed with this release finds its finished points.
KEYLESS_DEFAULTS = {"failures": "none", "checkpoint_every": None}


def config_key(config: RunConfig) -> str:
    """A stable 16-hex-digit hash of the config (sorted JSON of its fields), and for a
    model-based predictor of its shipped checkpoints: a point run with other weights is another
    point (a resumed sweep must not keep results of retrained checkpoints)."""
    fields_ = asdict(config)
    for name, default in KEYLESS_DEFAULTS.items():  # fields newer than the keys of finished sweeps
        if fields_.get(name) == default:
            del fields_[name]
    method = config.predictor.partition(":")[0]
    if method in MODEL_PREDICTORS:
        fields_["checkpoints"] = checkpoint_digest(method)
    text = json.dumps(fields_, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


@functools.cache
def checkpoint_digest(method: str) -> str:
    """sha1 of the names and bytes of ``method``'s shipped checkpoints: those a run loads, one per
    GPU type (not, say, ``ets-T4-real.pt``, which only ``ets predict --ckpt`` reads)."""
    from predictor.checkpoints import available, pretrained_path

    h = hashlib.sha1()
    for path in sorted(pretrained_path(gpu, method=method) for gpu in available(method=method)):
        h.update(path.name.encode())
        h.update(path.read_bytes())
    return h.hexdigest()[:12]


# ---------------------------------------------------------------------------------------------
# Running a point


def run_point(config: RunConfig) -> dict:
    """Run one config; never raises. Returns {row, records, summary, manifest, traceback}."""
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
            "manifest": output.manifest, "segments": output.segments, "traceback": None}


def crashed_point(config: RunConfig, exc: BaseException) -> dict:
    """The failure record of a point whose worker died, or that failed outside :func:`run_point`."""
    row = {**asdict(config), "key": config_key(config), "status": "error",
           "error": f"{type(exc).__name__}: {exc}", "point_seconds": float("nan")}
    return {"row": row, "records": None, "summary": None, "manifest": None,
            "traceback": "".join(traceback.format_exception(exc))}


# ---------------------------------------------------------------------------------------------
# Writing a point


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
    key = result["row"]["key"]
    final = inside(out, "runs", key)
    point = inside(out, "points", f"{key}.parquet")
    with atomic_dir(final) as tmp:
        if result["records"] is not None:
            try:
                RunOutput(result["records"], result["summary"], result["manifest"], result.get("segments")).write(tmp)
            except OutputError as exc:  # name the file the user will look for, not its temporary twin
                raise OutputError(str(exc).replace(str(tmp), str(final))) from None
        else:
            (tmp / "config.json").write_text(json.dumps({k: result["row"][k] for k in CONFIG_FIELDS}, indent=2) + "\n")
            (tmp / "error.txt").write_text(result["traceback"] or result["row"].get("error") or "")
    write_parquet(point, _point_frame(result["row"]))


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


# ---------------------------------------------------------------------------------------------
# The sweep directory


def prepare_out(out: Path) -> Path:
    """Check that OUT, OUT/points and OUT/runs can be written and that no entry below OUT on the
    way to our files (points/, runs/, results.parquet) is a symbolic link: one-line
    :class:`OutputError` before any work. Then remove the temporary files and folders a killed
    sweep left."""
    inside(out, "results.parquet")  # a link planted below OUT is refused before any point runs
    for folder in (out, inside(out, "points"), inside(out, "runs")):
        check_writable(folder)
    stale = [p for sub in ("points", "runs") for pattern in (".*.tmp-*", ".*.old-*") for p in (out / sub).glob(pattern)]
    try:
        for path in stale:
            shutil.rmtree(path) if path.is_dir() and not path.is_symlink() else path.unlink()
    except OSError as exc:
        raise OutputError(f"cannot remove {path}, left by an earlier sweep: {exc.strerror or exc}") from None
    return out


# A run folder's JSON files (manifest, summary) are a few KB; past this one is not ours.
MAX_RUN_JSON_BYTES = 64 * 2**20
POINT_COLUMNS = (*CONFIG_FIELDS, "key", "status")


def _reason(exc: BaseException) -> str:
    """A reader's error as a short clause for a one-line message (pyarrow's may span lines)."""
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if len(text) <= 160 else text[:159] + "…"


def read_table(path: Path, error: type[Exception] = ValueError, columns: list[str] | None = None) -> pd.DataFrame:
    """A Parquet table written by a run or a sweep, or ``error`` naming the file: not a regular file
    (a FIFO, a device), over the size limit or decoding past it (:func:`predictor.common.inputs.read_parquet`),
    truncated, not Parquet, or missing ``columns``."""
    try:
        return read_parquet(path, "Parquet table", columns=columns)
    except InputError as exc:
        raise error(str(exc)) from None
    except Exception as exc:  # pyarrow's ArrowInvalid, OSError, a missing column: all mean "not ours"
        raise error(f"{path}: not a readable Parquet table ({_reason(exc)}); it is truncated or not a "
                    "simrun output") from None


def read_json(path: Path, error: type[Exception] = ValueError) -> dict:
    """A run's JSON object (manifest.json, summary.json), or ``error`` naming the file: not a
    regular file, larger than :data:`MAX_RUN_JSON_BYTES`, nested too deep, truncated, or not an object."""
    try:
        with regular_file(path, "JSON file").open("rb") as handle:  # not a FIFO or a device: checked first
            data = handle.read(MAX_RUN_JSON_BYTES + 1)  # bounded even if the file grows meanwhile
        if len(data) > MAX_RUN_JSON_BYTES:
            raise error(f"{path}: more than {MAX_RUN_JSON_BYTES:,} bytes, larger than any simrun JSON file")
        doc = load_json(data, path)
    except InputError as exc:
        raise error(str(exc)) from None
    except (OSError, ValueError) as exc:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        if isinstance(exc, error):
            raise
        raise error(f"{path}: not valid JSON ({_reason(exc)}); it is truncated or not a simrun output") from None
    if not isinstance(doc, dict):
        raise error(f"{path}: expected a JSON object, got a {type(doc).__name__}")
    return doc


def read_point(path: Path) -> pd.DataFrame:
    """One point row (OUT/points/<key>.parquet), checked to be a point of a sweep: one row, the
    config fields, its own key, a known status. ValueError (one line naming the file) otherwise."""
    row = read_table(path)
    missing = [c for c in POINT_COLUMNS if c not in row]
    if missing:
        raise ValueError(f"{path}: not a sweep point (no column(s) {names(missing)})")
    if len(row) != 1:
        raise ValueError(f"{path}: not a sweep point ({len(row):,} rows, expected 1)")
    if str(row["key"].iloc[0]) != path.stem:
        raise ValueError(f"{path}: not a sweep point (it holds key {short(row['key'].iloc[0])})")
    if row["status"].iloc[0] not in ("ok", "error"):
        raise ValueError(f"{path}: not a sweep point (status {short(row['status'].iloc[0])})")
    return row


# Columns of a point row that are neither config nor a summary metric of its run folder.
POINT_OWN = ("key", "status", "error", "point_seconds")


def _same(a: object, b: object) -> bool:
    """Two stored values equal, a missing one (None, NaN, NA) equal only to another missing one."""
    missing_a, missing_b = a is None or a is pd.NA or a != a, b is None or b is pd.NA or b != b
    return missing_a == missing_b and (missing_a or a == b)


def check_point(out: Path, path: Path, row: pd.DataFrame, expected: RunConfig | None = None) -> None:
    """A finished point's row matches its run folder: its config is the one in
    OUT/runs/<key>/manifest.json (and ``expected``, the grid's config of that key, when given), and
    its metrics are exactly those of OUT/runs/<key>/summary.json, no more, no less. ValueError
    naming the first difference otherwise.

    Why: the point row is what the sweep table, results.parquet and the figures are computed from;
    an edited or copied-in row must not pass for a result (a stranger may hand over a sweep
    folder, and resuming trusts its finished points). A failed point holds no numbers: not checked."""
    if row["status"].iloc[0] != "ok":
        return
    values = row.iloc[0].to_dict()
    run = out / "runs" / path.stem
    try:
        config = config_of(values)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{path}: its config fields are not a run's config ({_reason(exc)})") from None
    if expected is not None and config != expected:
        raise ValueError(f"{path}: its config is not the one of its key {short(path.stem)}")
    recorded = read_json(run / "manifest.json").get("config")
    mine = json.loads(json.dumps(asdict(config), default=str))
    if isinstance(recorded, dict):  # a manifest older than a field holds none of it: as its default
        recorded = {**{k: v for k, v in KEYLESS_DEFAULTS.items() if k not in recorded}, **recorded}
    if mine != recorded:
        raise ValueError(f"{path}: its config differs from the one in {run / 'manifest.json'}")
    summary = dict(read_json(run / "summary.json"))
    by_type = summary.pop("utilization_by_type", None) or {}
    summary.update({f"utilization_{t}": u for t, u in (by_type.items() if isinstance(by_type, dict) else ())})
    for name in sorted(set(values) - set(CONFIG_FIELDS) - set(POINT_OWN) | set(summary)):
        if name not in summary or name not in values or not _same(values[name], summary[name]):
            raise ValueError(f"{path}: field {short(name)}: {short(values.get(name))} differs from "
                             f"{short(summary.get(name))} in {run / 'summary.json'}")


def _point_files(out: Path) -> list[Path]:
    return sorted(p for p in (Path(out) / "points").glob("*.parquet") if not p.name.startswith("."))


def _warn_unreadable(bad: list[str], what: str, warn: Callable[[str], None] | None) -> None:
    """One warning line for all the point files that could not be read."""
    if bad and warn is not None:
        warn(f"warning: {len(bad):,} point file(s) unreadable or not sweep points, {what}; e.g. {bad[0]}")


def _warn_mismatched(bad: list[str], what: str, warn: Callable[[str], None] | None) -> None:
    """One warning line for all the finished points that do not match their run folders."""
    if bad and warn is not None:
        warn(f"warning: {len(bad):,} point file(s) do not match their run folder (edited, or copied in), "
             f"{what}; e.g. {bad[0]}")


def done_keys(out: Path, warn: Callable[[str], None] | None = None,
              configs: Iterable[RunConfig] | None = None) -> set[str]:
    """Keys of the points already finished successfully in OUT (of ``configs`` only, when given:
    each point then checked to hold its config). A truncated or foreign point file, or one that
    does not match its run folder (:func:`check_point`), is a point to run again (one warning line
    through ``warn`` per kind)."""
    wanted = None if configs is None else {config_key(c): c for c in configs}
    rows = _checked_points(out, wanted, "so their points run again", warn)
    return {path.stem for path, row in rows if row["status"].iloc[0] == "ok"}


def _checked_points(out: Path, wanted: dict[str, RunConfig] | None, fate: str,
                    warn: Callable[[str], None] | None) -> list[tuple[Path, pd.DataFrame]]:
    """The point files of OUT (of ``wanted``'s keys only, when given) that read and match their run
    folders, with their rows; the others named in one warning line per kind, saying their ``fate``."""
    kept, bad, mismatched = [], [], []
    for path in _point_files(out):
        if wanted is not None and path.stem not in wanted:
            continue
        try:
            row = read_point(path)
        except ValueError as exc:
            bad.append(str(exc))
            continue
        try:
            check_point(out, path, row, None if wanted is None else wanted[path.stem])
        except ValueError as exc:
            mismatched.append(str(exc))
            continue
        kept.append((path, row))
    _warn_unreadable(bad, fate, warn)
    _warn_mismatched(mismatched, fate, warn)
    return kept


def load_results(out: str | Path, warn: Callable[[str], None] | None = None) -> pd.DataFrame:
    """All point rows in OUT/points (finished or failed), sorted by key. Unreadable or foreign
    point files, and finished points that do not match their run folders (:func:`check_point`),
    are left out, with one warning line per kind through ``warn``."""
    frames = [row.dropna(axis=1, how="all") for _, row in
              _checked_points(Path(out), None, "left out (rerun the sweep to redo a point of its grid)", warn)]
    if not frames:
        return pd.DataFrame(columns=CONFIG_FIELDS + ["key", "status", "error"])
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

    values = {k: clean(row[k]) if k in row else KEYLESS_DEFAULTS.get(k) for k in CONFIG_FIELDS}
    values["seed"] = int(values["seed"])
    values["limit"] = None if values["limit"] is None else int(values["limit"])
    values["load_scale"] = float(values["load_scale"])
    values["deadline_fraction"] = float(values["deadline_fraction"])
    values["bind"] = bool(values["bind"])
    values["communication"] = bool(values["communication"]) if values.get("communication") is not None else True
    values["placement"] = values.get("placement") or "consolidate"
    values["observe_after"] = None if values["observe_after"] is None else int(values["observe_after"])
    return RunConfig(**values)

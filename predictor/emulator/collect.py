"""Build execution-trace datasets from the model zoo: parallel, resumable, failures recorded.

Why: datasets of hundreds to thousands of configs take long; an interrupted run must resume
where it stopped (configs already in the device's Parquet file are skipped), and one config that
cannot be built must not stop the others (it is written to ``failures.jsonl`` with its error),
nor one whose worker process dies (a few real-size models allocate host memory even on the meta
device, and the out-of-memory killer ends their worker).
Meta-device captures run in parallel worker processes; CPU profiling defaults to one worker, since
concurrent work on the same cores would distort the timings it measures; a CPU profile taken while
other processes kept the machine busy is taken again (:mod:`predictor.emulator.capture.disturbance`).
"""

from __future__ import annotations

import json
import signal
import threading
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor, as_completed
from concurrent.futures.process import BrokenProcessPool
from contextlib import contextmanager
from pathlib import Path

import pandas as pd
from tqdm import tqdm

from predictor.common.inputs import InputError
from predictor.common.op_trace import device_file, read_trace_file, write_traces
from predictor.emulator.capture.heap import return_freed_memory
from predictor.emulator.zoo.config import ModelConfig


def _capture(config_dict: dict, device: str, regime: str = "plain") -> tuple[str, pd.DataFrame | None, str | None]:
    from predictor.emulator.capture.opseq import capture
    from predictor.emulator.zoo.config import ModelConfig

    config = ModelConfig.from_dict(config_dict)
    try:
        if device.startswith("emulated:"):
            from predictor.emulator.devices.specs import load_params
            from predictor.emulator.devices.timing import emulate

            return config.config_id, emulate(capture(config, "meta"), device, load_params(), regime=regime), None
        if device == "cpu":  # CPU timings are taken again while other work disturbs them
            from predictor.emulator.capture.disturbance import undisturbed

            return config.config_id, undisturbed(lambda: capture(config, device)), None
        return config.config_id, capture(config, device), None
    except Exception as exc:  # recorded, never silently dropped
        return config.config_id, None, f"{type(exc).__name__}: {exc}"
    finally:
        return_freed_memory()  # a long collection must not grow with every config


def dataset_device(device: str) -> str:
    """The device name a dataset records: "emulated:<GPU>" in its canonical spelling, the others
    as a capture records them (:func:`predictor.emulator.capture.opseq.recorded_device`)."""
    if device.startswith("emulated:"):
        from predictor.emulator.devices.specs import EMULATED_PREFIX, device_key

        return EMULATED_PREFIX + device_key(device)
    from predictor.emulator.capture.opseq import recorded_device

    return recorded_device(device)


def _open_dataset(device: str, out: str | Path, regime: str) -> tuple[str, Path, set[str]]:
    """The dataset's device name, its folder (created) and the config ids it already holds; a
    broken dataset file or one of another regime is refused before any work."""
    device = dataset_device(device)  # also rejects unknown emulated GPU types before any work
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    existing = device_file(out, device)
    done = read_trace_file(existing) if existing.exists() else None  # a broken file: refused before any work
    if done is not None and device.startswith("emulated:"):
        other = sorted({s.split(" regime")[0].split("(")[-1] for s in done["source"] if f"({regime} regime" not in s})
        if other:
            raise InputError(f"{existing}: holds {device} traces of the {', '.join(other)} regime, "
                             f"not {regime}; collect into another --out")
    return device, out, set(done["config_id"]) if done is not None else set()


def _interrupt(signum, frame) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


@contextmanager
def terminate_as_interrupt() -> Iterator[None]:
    """SIGTERM (``kill``, a job scheduler's stop) raises KeyboardInterrupt while inside, so a
    stopped run still writes what it captured; outside the main thread signals stay as they are."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, _interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


WORKER_DIED = "the worker process died while capturing it (out of memory, or killed): {}"


def limit_address_space(gb: float | None) -> None:
    """Cap this process's address space at ``gb`` GiB where the OS allows it (Linux; a no-op elsewhere
    or for ``None``): an allocation beyond it fails in this process instead of the machine's
    out-of-memory killer choosing a process."""
    try:
        import resource
    except ImportError:
        return
    if gb is None or not hasattr(resource, "RLIMIT_AS"):
        return
    limit = int(gb * 2**30)
    _, hard = resource.getrlimit(resource.RLIMIT_AS)
    resource.setrlimit(resource.RLIMIT_AS, (limit if hard == resource.RLIM_INFINITY else min(limit, hard), hard))


def _in_workers(todo: list[ModelConfig], device: str, regime: str, workers: int,
                worker_memory_gb: float | None = None) -> Iterator[tuple[str, pd.DataFrame | None, str | None]]:
    """Capture ``todo`` in ``workers`` processes, at most ``workers`` configs in flight. A worker that
    dies (the kernel's out-of-memory killer, a C++ abort) breaks the pool: the configs in flight are
    taken again one at a time in a fresh pool, and one whose worker dies alone too is a failure
    naming why; the others go on."""
    queue = list(reversed(todo))
    alone: list[ModelConfig] = []  # in flight when a pool broke: each taken again by itself
    while queue or alone:
        solo = bool(alone)
        pool = ProcessPoolExecutor(max_workers=1 if solo else workers, initializer=limit_address_space,
                                   initargs=(worker_memory_gb,))
        in_flight: dict = {}
        try:
            while (alone if solo else queue) or in_flight:
                source = alone if solo else queue
                while source and len(in_flight) < (1 if solo else workers):
                    config = source.pop()
                    in_flight[pool.submit(_capture, config.to_dict(), device, regime)] = config
                done = next(as_completed(in_flight))
                config = in_flight.pop(done)
                try:
                    yield done.result()
                except BrokenProcessPool as exc:
                    if solo:
                        yield config.config_id, None, WORKER_DIED.format(exc)
                    else:
                        alone += [config, *in_flight.values()]
                    in_flight.clear()
                    break
        finally:
            pool.shutdown(cancel_futures=True)  # a stopped run waits only for the configs in flight


def collect(configs: list[ModelConfig], device: str, out: str | Path, *, workers: int = 1,
            flush_every: int = 20, progress: bool = True, regime: str = "plain",
            worker_memory_gb: float | None = None) -> dict:
    """Capture every config not yet in ``out``; returns counts (done, skipped, failed). ``regime``
    (emulated devices only): ``plain`` or ``nsys`` host times; one dataset never mixes the two.
    ``worker_memory_gb`` (``workers`` >= 2): each worker's address space, so a config that would
    take the machine's memory fails alone."""
    device, out, done_ids = _open_dataset(device, out, regime)
    todo = [c for c in configs if c.config_id not in done_ids]
    failures = out / "failures.jsonl"
    pending: list[pd.DataFrame] = []
    counts = {"requested": len(configs), "skipped": len(configs) - len(todo), "captured": 0, "failed": 0}

    def flush() -> None:
        if pending:
            write_traces(out, pd.concat(pending, ignore_index=True))
            pending.clear()

    def handle(config_id: str, table: pd.DataFrame | None, error: str | None) -> None:
        if error is not None:
            with failures.open("a") as fh:
                fh.write(json.dumps({"config_id": config_id, "device": device, "error": error}) + "\n")
            counts["failed"] += 1
            return
        pending.append(table)
        counts["captured"] += 1
        if len(pending) >= flush_every:
            flush()

    bar = tqdm(total=len(todo), desc=f"collect {device}", unit="config", disable=not progress)
    with terminate_as_interrupt():
        try:
            if workers <= 1:
                for config in todo:
                    handle(*_capture(config.to_dict(), device, regime))
                    bar.update(1)
            else:
                for result in _in_workers(todo, device, regime, workers, worker_memory_gb):
                    handle(*result)
                    bar.update(1)
        finally:
            flush()  # an interrupted (or terminated) run keeps everything captured so far
            bar.close()
    return counts


def collect_model_files(paths: list[str], device: str, out: str | Path, *, inference: bool = False,
                        dtype: str = "float32", regime: str = "plain", report=None) -> dict:
    """Capture each model file (:mod:`predictor.emulator.capture.model_file`; runs the file's code) not yet
    in ``out`` — by its config id, ``file:<stem>...``, known before the file is run — on the meta
    device, timed on ``device`` when it is ``emulated:<GPU>``, into the same dataset as the zoo's.
    One child process for all the files, in order, each within the model-file time and memory
    limits (:mod:`predictor.emulator.capture.model_process`). A file that fails goes to ``failures.jsonl``
    (with ``model_file``) and its one-line message to ``report`` (e.g. stderr); the others go on. Two files of one
    config id (the same stem in two folders, or twice on the command line) are captured once;
    the second is a failure naming the first. Returns counts (requested, skipped, captured,
    failed)."""
    from predictor.emulator.capture.model_file import ModelFileError, config_id_of
    from predictor.emulator.capture.model_process import capture_files
    from predictor.emulator.devices.kernels import KernelModelError

    if not (device == "meta" or device.startswith("emulated:")):
        raise ValueError(f"model files are captured on the meta device: use --device meta or emulated:<GPU>, "
                         f"not {device!r}")
    device, out, done_ids = _open_dataset(device, out, regime)
    failures = out / "failures.jsonl"
    counts = {"requested": len(paths), "skipped": 0, "captured": 0, "failed": 0}
    seen: dict[str, str] = {}
    tables: list[pd.DataFrame] = []

    def fail(path: str, config_id: str, line: str) -> None:
        with failures.open("a") as fh:
            fh.write(json.dumps({"config_id": config_id, "model_file": path, "device": device, "error": line}) + "\n")
        counts["failed"] += 1
        if report is not None:
            report(line)

    todo: dict[str, str] = {}  # path -> config id, in order
    for path in paths:
        config_id = config_id_of(path, inference=inference, dtype=dtype)
        if config_id in seen:
            fail(path, config_id, f"{path}: has the config id {config_id} of {seen[config_id]}, captured "
                                  "already (rename one of them)")
            continue
        seen[config_id] = path
        if config_id in done_ids:
            counts["skipped"] += 1
            continue
        todo[path] = config_id
    try:
        for path, table in capture_files(list(todo), inference=inference, dtype=dtype):
            config_id = todo[path]
            if isinstance(table, ModelFileError):
                fail(path, config_id, str(table))
                continue
            try:
                if device.startswith("emulated:"):
                    from predictor.emulator.devices.inference_host import for_trace
                    from predictor.emulator.devices.specs import load_params
                    from predictor.emulator.devices.timing import emulate

                    params = load_params()
                    table = emulate(table, device, params, regime=regime,
                                    inference_host_us=for_trace(table, params.device(device).name))
            except KernelModelError:  # the installation's kernel model, not the file: stop
                raise
            except Exception as exc:  # an op the emulator cannot price: recorded, the others go on
                fail(path, config_id, f"{path}: cannot be timed on {device}: {type(exc).__name__}: "
                                      f"{' '.join(str(exc).split())}"[:1000])
                continue
            tables.append(table)
            counts["captured"] += 1
    finally:
        if tables:  # an interrupted run keeps everything captured so far
            write_traces(out, pd.concat(tables, ignore_index=True))
    return counts

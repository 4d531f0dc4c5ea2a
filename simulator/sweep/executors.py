"""Where a sweep's points run: in this process, on a local pool of spawned workers, or on Ray;
each yields the points' results as they finish.

Why: the points are independent, so the sweep's driver only needs results in completion order;
how they are computed is this module's business: a pool whose workers die with the driver (also
by SIGKILL: a killed sweep must not leave ~1 GB workers behind) and stop at once when the sweep
stops, or one Ray task per point. A worker that dies, or a task that fails outside
:func:`~simulator.sweep.points.run_point`, becomes a failed point; the others go on.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Generator
from concurrent.futures import ProcessPoolExecutor, as_completed

from simulator.run import RunConfig
from simulator.sweep.points import crashed_point, run_point

# How often a worker without prctl(PR_SET_PDEATHSIG) checks that its parent is still alive.
PARENT_POLL_SECONDS = 1.0
_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>

Results = Generator[dict, None, None]


# How long a stopped sweep waits for a terminated worker to exit before killing it.
STOP_SECONDS = 10.0


def usable_cores() -> int:
    """The CPU cores this process may run on (its affinity: a container's or ``taskset``'s
    share, not the machine's count)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # no affinity on this platform
        return max(1, os.cpu_count() or 1)


def default_workers() -> int:
    return min(2, usable_cores())


def worker_count(requested: int | None, points: int) -> tuple[int, str | None]:
    """The local workers to start for ``points`` points, and a warning line when fewer than
    ``requested``: at most one per usable core (:func:`usable_cores`), and never more than points.

    Why a cap and not a refusal: a point is one CPU-bound process, so workers past the cores
    only share them, run no sooner, and each costs its own memory (~1 GB with a model
    predictor); the results never depend on the count, so capping loses nothing and needs no flag."""
    wanted = requested or default_workers()
    cores = usable_cores()
    workers = max(1, min(wanted, cores, points))
    if wanted <= cores:
        return workers, None
    return workers, (f"warning: --workers {wanted}: this process may use {cores} CPU core(s), so {min(wanted, cores)} "
                     "worker(s) run (more would only share the cores and multiply memory)")


def run_points(todo: list[RunConfig], *, workers: int | None = None, ray_address: str | None = None) -> Results:
    """The results of ``todo`` as they finish: on Ray when ``ray_address`` is given, else on a
    local pool of ``workers`` processes (default :func:`default_workers`; 1 -> in this process).
    Close the generator to stop the points still running."""
    return _iter_ray(todo, ray_address) if ray_address else _iter_local(todo, worker_count(workers, len(todo))[0])


# ---------------------------------------------------------------------------------------------
# The local pool: workers that die with the driver


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
    """Stop the pool's workers now and wait until they are gone (an interrupted or stopped sweep
    must not wait for the points in flight, whose results would be dropped anyway; and it must
    not return, or exit, with workers still running: each holds ~1 GB and the pool's semaphores).
    A worker that outlives SIGTERM by :data:`STOP_SECONDS` is killed."""
    procs = list((getattr(pool, "_processes", None) or {}).values())
    for proc in procs:
        with contextlib.suppress(Exception):
            proc.terminate()
    deadline = time.monotonic() + STOP_SECONDS
    for proc in procs:
        with contextlib.suppress(Exception):
            proc.join(max(0.0, deadline - time.monotonic()))
            if proc.is_alive():
                proc.kill()
                proc.join()


def _stop_pool(pool: ProcessPoolExecutor, finished: bool) -> None:
    """Shut the pool down: after all its points, as usual; before (an error, Ctrl-C, a stopped
    sweep), its workers terminated and joined first, the queued points dropped, and its manager
    thread waited for, so that no process or thread of the pool outlives the sweep."""
    if not finished:  # before shutdown: a worker must not exit cleanly with a point half done
        _terminate_workers(pool)
    manager = getattr(pool, "_executor_manager_thread", None)
    pool.shutdown(wait=False, cancel_futures=True)
    if not finished and manager is not None:  # it sees the dead workers and releases the queues
        manager.join(STOP_SECONDS)


def _iter_local(todo: list[RunConfig], workers: int) -> Results:
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
                result = crashed_point(futures[fut], exc)
            yield result
        finished = True
    finally:  # on Ctrl-C, a stopped sweep or an error in the driver: drop the queued points, do not wait
        _stop_pool(pool, finished)


# ---------------------------------------------------------------------------------------------
# Ray: one task per point


def _iter_ray(todo: list[RunConfig], address: str) -> Results:
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
                    result = crashed_point(config, exc)
                yield result
    finally:
        for ref in pending:
            ray.cancel(ref)

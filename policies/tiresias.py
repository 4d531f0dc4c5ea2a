"""Tiresias: discretised two-dimensional least-attained-service (2D-LAS), preemptive, and blind
to run times — as Tiresias' own simulator runs it.

Why: Tiresias (Gu et al., NSDI'19) schedules without any run-time prediction, by the service a
job has had so far (GPUs × seconds run: the "two dimensions"); it is the control that shows what
a prediction adds to a preemptive scheduler. This follows the authors' simulator
(SymbioticLab/Tiresias, ``simulator/run_sim.py``, ``--schedule=dlas-gpu``, commit 959f9b0) rule
by rule; experiments/peers/tiresias.py runs it beside ours:

* **Queues** by attained GPU-seconds, split at ``thresholds`` (ascending, ``/``-separated; the
  simulator's ``3250/7200``: three queues). New jobs join the first queue at its end.
* **Every event reschedules** (``rounds = "event"``): an arrival, a completion, and the next time
  a running job's service reaches its queue's threshold. At each, running jobs whose service
  reached their threshold move down one queue, to its end; then the queues are walked in order,
  each in its own order, and a job runs (or keeps running) if GPUs are left for it, else is
  skipped (a smaller job behind it may run: the walk goes on); a running job not reached with
  room is preempted. After the walk each queue puts its running jobs before its waiting ones,
  both in their order: a running job is never preempted for a waiting job of its own queue, and a
  preempted job is the first waiting one of its queue.
* **The demotion timer** (``timer=``): ``paper`` (the default) — the time the job's service
  reaches the threshold, (threshold − service) / GPUs; ``simulator`` — the simulator's own line
  (``run_sim.py:1226``), which subtracts the *seconds* run (not GPU-seconds) and divides with
  Python 2's floor, so a multi-GPU job is checked late (a worked example: docs/scheduling.md)
  and one with no other event near stays in its queue for longer.
* **Placement** ignores heterogeneity: the type with the most free GPUs the job can run on (the
  simulator counts free GPUs over the whole cluster; on a one-type cluster they agree).
* ``starve=S`` (the paper's starvation knob; 0: off, as in the simulator's default): a job in a
  lower queue that has waited S times as long as it ran since it last joined the first queue goes
  back to it.

Where ours is not Tiresias' simulator: its clock is whole seconds (durations and submit times
are integers in its traces, so the two agree on them); its ``yarn`` placement scheme is never
called by ``dlas-gpu`` (the flag is ignored), ours neither.
"""

from __future__ import annotations

import math

import numpy as np

from policies.base import Placement, Preemption
from policies.options import choice, number
from policies.preemptive import PreemptivePolicy
from predictor.common.inputs import SpecError

TIMERS = ("paper", "simulator")


def thresholds_option(value: str | tuple[float, ...]) -> tuple[float, ...]:
    """Ascending positive GPU-second thresholds, given as ``a/b/c``."""
    if isinstance(value, tuple):
        return value
    parts = tuple(number("thresholds", v, 0.0, np.inf, low_open=True, high_open=True)
                  for v in str(value).split("/") if v.strip())
    if not parts or list(parts) != sorted(set(parts)):
        raise SpecError(f"option thresholds={value!r}: expected ascending positive GPU-seconds "
                        "such as 3200/25600")
    return parts


def most_room(room: list[int], n: int, able: np.ndarray | None = None) -> int | None:
    """The type with the most free GPUs (the first such), if ``n`` fit there: Tiresias ignores
    heterogeneity; only the types the job can run on (``able``; a trace may rule some out)."""
    if able is None or able.all():
        most = max(room)
        return room.index(most) if most >= n else None
    types = np.flatnonzero(able).tolist()
    if not types:
        return None
    k = max(types, key=room.__getitem__)  # the first of the most free
    return k if room[k] >= n else None


class TiresiasPolicy(PreemptivePolicy):
    name = "tiresias"
    rounds = "event"  # every arrival, completion and demotion reschedules
    reads_progress = False  # 2D-LAS reads attained service alone (view.attained)

    def __init__(self, thresholds: str | tuple[float, ...] = (3250.0, 7200.0), starve: float | str = 0.0,
                 timer: str = "paper", restart: float | str = 10.0, storage_gbps: float | str = 2.0) -> None:
        super().__init__(float("inf"), restart, storage_gbps)
        self.thresholds = np.asarray(thresholds_option(thresholds))
        self.starve = number("starve", starve, 0.0, np.inf, high_open=True)
        self.timer = choice("timer", timer, TIMERS)
        self._run: _Run | None = None

    def on_arrival(self, view, jobs: list[int]) -> None:
        if self._run is None or self._run.size != len(view.submit):
            self._run = _Run(view.submit, view.num_gpus, len(self.thresholds) + 1, len(view.total_by_type))
            self._run.limits = np.append(self.thresholds, np.inf)  # per queue: the service that demotes
        run = self._run
        run.queues[0].joined.extend(jobs)
        # a job submitted again (its attempt failed: simulator.failures) starts over in the first queue
        run.queue_of[jobs] = 0
        if view.attained is not None:
            run.base[jobs] = view.attained[jobs]
        run.pending[jobs] = 0.0

    def on_finish(self, view, job: int, now: float) -> None:
        """``job`` ended, or its attempt failed (it may come back as an arrival): out of its queue."""
        if self._run is not None:
            queue = self._run.queues[self._run.queue_of[job]]
            if job in queue.running:
                self._run.leave(queue, job)
                return
            if job in queue.joined:
                queue.joined.remove(job)
            elif job in queue.waiting:
                queue.waiting.remove(job)
                queue.count_waiting(self._run.need[job], -1)

    def schedule(self, view) -> list[Placement | Preemption]:
        run = self._run
        if run is None:
            return []
        running = view.running
        self._demote(view)
        if self.starve > 0:
            self._promote_starving(view, view.attained - run.base)
        run.checked = view.now
        if all(not queue.waiting and all(j in running for j in queue.joined) for queue in run.queues):
            # nobody waits: every running job keeps its GPUs (the demoted ones, at their new queue's end)
            for queue in run.queues:
                for job in queue.joined:
                    run.join_running(queue, job, running[job][1])
                queue.joined = []
            return []
        walk = _Walk(view, run)
        for queue in run.queues:
            walk.queue(queue)
        return walk.out + walk.place

    def _demote(self, view) -> None:
        """Running jobs whose service reached their queue's threshold move one queue down, to its
        end (in the runnable list's order). Only the queues with a threshold are looked at: the
        jobs running at a call are exactly the queues' running parts (see :class:`_Queue`)."""
        run = self._run
        ids = [job for queue in run.queues[:-1] for job in queue.running]
        if not ids:
            return
        jobs = np.array(ids, dtype=np.int64)
        due = jobs[view.attained[jobs] - run.base[jobs] >= run.limits[run.queue_of[jobs]]]
        for job in sorted(due.tolist(), key=run.order.__getitem__):
            q = run.queue_of[job]
            run.leave(run.queues[q], job)
            run.queues[q + 1].joined.append(job)
            run.queue_of[job] = q + 1

    def _promote_starving(self, view, service: np.ndarray) -> None:
        """Tiresias' starvation rule: a waiting job of a lower queue that has waited ``starve``
        times as long as it ran (both since it last joined the first queue) goes back to it."""
        run, now = self._run, view.now
        ran = service / np.maximum(view.num_gpus, 1)
        for job in sorted(view.waiting, key=run.order.__getitem__):
            if ran[job] > 0:
                run.pending[job] += now - run.checked
                if run.queue_of[job] > 0 and run.pending[job] >= ran[job] * self.starve:
                    run.base[job] = view.attained[job]
                    run.pending[job] = 0.0
                    queue = run.queues[run.queue_of[job]]
                    queue.waiting.remove(job)
                    queue.count_waiting(run.need[job], -1)
                    run.queues[0].joined.append(job)
                    run.queue_of[job] = 0
                    run.promotions += 1

    def next_event(self, view) -> float:
        """The first time a running job's service reaches its queue's threshold (``timer``), or a
        waiting one starves; inf if none."""
        run, now = self._run, view.now
        if run is None:
            return math.inf
        first = math.inf
        # the jobs running now: after a call, the queues' running parts (the last queue's have no threshold)
        ids = [job for queue in run.queues[:-1] for job in queue.running]
        if ids:
            jobs = np.array(ids, dtype=np.int64)
            limit = self.thresholds[run.queue_of[jobs]]
            n = view.num_gpus[jobs].astype(np.float64)
            service = view.attained[jobs] - run.base[jobs]
            if self.timer == "paper":
                at = np.ceil((limit - service) / n)
            else:  # run_sim.py:1226: seconds run, not GPU-seconds, and Python 2's floor division
                at = np.floor((np.floor(limit) - np.floor(service / n)) / n)
            first = now + float(at.min())
        if self.starve > 0:
            for job in view.waiting:
                ran = float(view.attained[job] - run.base[job]) / max(int(view.num_gpus[job]), 1)
                if run.queue_of[job] > 0 and ran > 0:
                    first = min(first, now + ran * self.starve - run.pending[job])
        return first if first > now else math.inf

    def describe(self) -> dict:
        return {**super().describe(), "thresholds": self.thresholds.tolist(), "starve": self.starve,
                "timer": self.timer, "promotions": self._run.promotions if self._run else 0}


class _Queue:
    """One queue in Tiresias' order: its running jobs, then its waiting ones, then the jobs that
    joined it at this event (new, demoted or promoted), each part in order. Between calls the
    running part holds exactly the queue's running jobs (a job leaves it as it ends: ``on_finish``);
    ``held`` is their GPUs per type, so a walk can see at once that they all keep their GPUs."""

    __slots__ = ("running", "waiting", "joined", "held", "sizes")

    def __init__(self, types: int) -> None:
        self.running: list[int] = []
        self.waiting: list[int] = []
        self.joined: list[int] = []
        self.held: list[int] = [0] * types
        self.sizes: dict[int, int] = {}  # waiting jobs per GPU count: a walk skips a part none of which fits

    def count_waiting(self, n: int, change: int) -> None:
        """``change`` waiting jobs of ``n`` GPUs more (or fewer)."""
        left = self.sizes.get(n, 0) + change
        if left:
            self.sizes[n] = left
        else:
            del self.sizes[n]

    def least_waiting(self) -> int:
        """The fewest GPUs a waiting job needs (0 with none waiting)."""
        return min(self.sizes, default=0)


class _Run:
    """One run's queues and per-job state."""

    def __init__(self, submit: np.ndarray, num_gpus: np.ndarray, queues: int, types: int) -> None:
        size = self.size = len(submit)
        self.need: list[int] = num_gpus.tolist()  # GPUs per job, as Python ints (read at every step of a walk)
        # a queue's running jobs are kept whole when they fit (_Walk): exact only if each needs a GPU
        self.whole = all(n >= 1 for n in self.need)
        self.on_type: list[int] = [-1] * size  # the type each running job holds
        self.queues = [_Queue(types) for _ in range(queues)]
        self.queue_of = np.zeros(size, dtype=np.int64)
        self.base = np.zeros(size)  # attained service when the job last joined the first queue
        self.pending = np.zeros(size)  # seconds waited since then, once it has run
        self.order = np.empty(size, dtype=np.int64)  # the simulator's runnable list: arrival order (then index)
        self.order[np.lexsort((np.arange(size), submit))] = np.arange(size)
        self.checked = 0.0
        self.limits = np.array([np.inf])  # per queue: the service that demotes (set by the policy)
        self.promotions = 0

    def join_running(self, queue: _Queue, job: int, k: int) -> None:
        """``job``, running on type k, at the end of the queue's running part."""
        queue.running.append(job)
        queue.held[k] += self.need[job]
        self.on_type[job] = k

    def leave(self, queue: _Queue, job: int) -> None:
        """``job`` out of the queue's running part (it ended, or moves down)."""
        queue.running.remove(job)
        queue.held[self.on_type[job]] -= self.need[job]


class _Walk:
    """One call's walk over the queues: the GPUs left per type, and the decisions so far. A job runs
    (or keeps running) if GPUs are left for it, else is skipped; once no GPU is left the rest keep
    their state, but for the running jobs among them, which are preempted."""

    def __init__(self, view, run: _Run) -> None:
        self.view, self.run, self.running = view, run, view.running
        self.room: list[int] = view.total_by_type.astype(np.int64).tolist()
        self.most = max(self.room)
        self.out: list[Placement | Preemption] = []
        self.place: list[Placement] = []

    def queue(self, queue: _Queue) -> None:
        """Walk one queue in its order (running, waiting, joined at this event); after it the queue
        is its running jobs first, waiting ones after, each in order."""
        stay, stopped, whole = self._running_part(queue)
        started: set[int] = set()
        scanned = 0
        need = self.run.need
        waiting = queue.waiting
        # waiting jobs do not run (the walk that left them there preempted them), so one needing
        # more GPUs than the most left on a type is skipped, as _visit would, and the GPUs left
        # only shrink as the walk goes on: the part is skipped whole when none of it can fit
        if waiting and 0 < self.most and queue.least_waiting() <= self.most:
            for i, job in enumerate(waiting):
                most = self.most
                if most == 0:
                    break
                scanned = i + 1
                if need[job] <= most and self._visit(job, stay):
                    started.add(job)
                    queue.count_waiting(need[job], -1)
        for job in queue.joined:
            if self.most == 0:
                break
            if self._visit(job, stay):
                started.add(job)
        # running jobs not given GPUs (skipped, or not reached once none was left) are preempted
        joined = [j for j in queue.joined if j not in started]
        self.out += [Preemption(j) for j in stopped + joined if j in self.running]
        if started and scanned:
            waiting = [j for j in waiting[:scanned] if j not in started] + waiting[scanned:]
        if stopped or joined:
            for job in stopped + joined:
                queue.count_waiting(need[job], 1)
            waiting = stopped + waiting + joined
        queue.waiting = waiting
        queue.joined = []
        self._settle(queue, stay, whole)

    def _running_part(self, queue: _Queue) -> tuple[list[int], list[int], bool]:
        """The queue's running jobs that keep running (none listed if all keep their GPUs untouched:
        they stay as they are), those skipped or not reached (to be preempted), and whether all did."""
        room = self.room
        if self.run.whole and all(h <= r for h, r in zip(queue.held, room)):
            # all fit where they run, each in turn, with a GPU left at every step: the walk keeps each
            for k, h in enumerate(queue.held):
                room[k] -= h
            self.most = max(room)
            return [], [], True
        stay: list[int] = []
        stopped: list[int] = []
        for job in queue.running:
            if self.most == 0 or not self._visit(job, stay):
                stopped.append(job)
        return stay, stopped, False

    def _settle(self, queue: _Queue, stay: list[int], whole: bool) -> None:
        """The jobs in ``stay`` run in this queue after the walk: appended to its running part when
        its running jobs all kept their GPUs untouched, else the running part anew (some stopped or moved)."""
        run = self.run
        if not whole:
            queue.running = []
            queue.held = [0] * len(queue.held)
        for job in stay:
            run.join_running(queue, job, run.on_type[job])

    def _visit(self, job: int, stay: list[int]) -> bool:
        """The walk reaches ``job``: it keeps its GPUs, or starts (or moves) on the type with the most
        free GPUs that it can run on, if its GPUs are left; appended to ``stay`` if so."""
        run, room = self.run, self.room
        n = run.need[job]
        now_on = self.running.get(job)
        if now_on is not None and room[now_on[1]] >= n:
            room[now_on[1]] -= n
            self.most = max(room)
            run.on_type[job] = now_on[1]
            stay.append(job)
            return True
        if n > self.most:
            return False
        k = most_room(room, n, self.view.can_run(job))
        if k is None:
            return False
        room[k] -= n
        self.most = max(room)
        run.on_type[job] = k
        stay.append(job)
        if now_on is not None:  # reached, but its type had no room: it moves
            self.out.append(Preemption(job))
        self.place.append(Placement(job, self.view.gpu_types[k]))
        return True

"""What a bound multi-GPU job's step costs where its GPUs are: per-GPU compute plus the gradient
all-reduces the backward pass does not hide, priced on the nodes the job actually holds.

Why: a data-parallel job on 8 GPUs spread over 8 nodes synchronises its gradients over the
network every step; packed on one NVLink board it barely notices. Timing every job as one GPU (as
the simulator did) hides placement, and a wrong prediction of communication, from JCT and
tardiness. This module is the one composition the simulator uses, for the truth and every
predictor alike (:mod:`predictor.emulator.devices.data_parallel`'s DDP buckets and overlap,
:mod:`predictor.emulator.devices.collectives`' ring all-reduce; communication is **spec-derived**):

    step(job, type, placement) = forward + update + max(backward, last all-reduce's end)

with the job's per-GPU compute time on the type split into backward and the rest by the truth's
backward share (the emulator's backward ops over its iteration: the method tables predict
iteration totals, not phases), its config's gradients packed in DDP's buckets, and each
all-reduce priced on the placement's slowest link: the weakest NVLink/PCIe link of a node it
holds several GPUs on, and between nodes the node with the fewest of its GPUs (the fewest network
streams), capped by a node's ``network_gbps`` where the cluster file states one.

A job's work is counted in iterations: the trace's duration at the trace's own GPU count over the
step at its original placement (the trace's ``shape``, e.g. ``8+8``; without one, packed on the
fewest nodes of its observed type). Its true run time on a type, the engine's truth matrix, is
then its run time **packed** there (fewest nodes of the cluster's largest node of that type); the
engine charges ``step(actual) ÷ step(packed)`` on top when it starts the job
(:meth:`PlacementTiming.slowdown`). Single-GPU jobs are untouched, to the bit.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from predictor.common.gpus import GpuEntry, Interconnect, entry
from predictor.common.inputs import SpecError
from predictor.emulator.devices.collectives import (
    CommParams,
    default_per_node,
    intra_link,
    override_interconnect,
    ring_seconds,
    shipped_params,
)
from predictor.emulator.devices.data_parallel import gradients, overlapped_step, pack_buckets
from predictor.tables import IterationTimeTable
from simulator.cluster import Cluster, Node
from traces.schema import RUNTIME_PREFIX, SHAPE, JobTrace, parse_shape

LABEL = "spec-derived"
# Where a multi-GPU job's GPUs go (the engine's allocation rule): ``consolidate`` as few nodes as
# possible (best fit; the default), ``spread`` as many nodes as possible, ``tiresias``
# consolidate only models with a skewed gradient (:meth:`PlacementTiming.skewed`), others first fit.
PLACEMENTS = ("consolidate", "spread", "tiresias")
# Tiresias' rule (Gu et al., NSDI'19, §4.2): consolidation matters for models whose largest tensor
# holds a large share of the gradient (VGG's, AlexNet's fully connected layers). The share above
# which a model counts as skewed is ours; the paper profiles each model instead.
SKEW_SHARE = 0.25


def check_placement(name: str) -> str:
    if name not in PLACEMENTS:
        raise SpecError(f"unknown placement {name!r}; known: {', '.join(PLACEMENTS)}")
    return name


@dataclass(frozen=True)
class NodeLinks:
    """How the GPUs of one node reach each other and the network."""

    interconnect: Interconnect | None  # None: the GPU's catalogue entry has no [interconnect]
    network_bps: float                 # the node's line rate, bytes/s (inf: not stated)


def node_links(node: Node, gpu: GpuEntry) -> NodeLinks:
    """A node's links: its cluster file's ``interconnect``/``network_gbps`` over the catalogue's."""
    interconnect = gpu.interconnect
    if node.interconnect:
        interconnect = override_interconnect(gpu, node.interconnect)
    gbps = float(node.network_gbps)
    return NodeLinks(interconnect, gbps * 1e9 / 8 if gbps > 0 else np.inf)


def packed_counts(gpus: int, node_size: int) -> tuple[int, ...]:
    """``gpus`` on the fewest nodes of ``node_size`` GPUs: full nodes, then the rest on one."""
    full, rest = divmod(int(gpus), max(1, int(node_size)))
    return (node_size,) * full + ((rest,) if rest else ())


class PlacementTiming:
    """Per bound job, the distributed step at any placement: all-reduce seconds per bucket are
    kept per (config, type, placement shape), so an engine start costs a lookup."""

    def __init__(self, jobs: pd.DataFrame, cluster: Cluster, sequences: pd.DataFrame,
                 backward: IterationTimeTable, truth: IterationTimeTable, params: CommParams | None = None):
        self.cluster = cluster
        self.params = params or shipped_params()
        self.types = list(cluster.gpu_types)
        self.num = jobs["num_gpus"].to_numpy(dtype=np.int64)
        self.config = jobs["config_id"].astype(str).to_numpy()
        self.multi = np.flatnonzero(self.num > 1)
        configs = sorted(set(self.config[self.multi]))
        self.buckets: dict[str, np.ndarray] = {}
        self.largest_share: dict[str, float] = {}  # the largest gradient's share of the config's gradient bytes
        mine = sequences[sequences["config_id"].isin(configs)]
        accumulate = mine[mine["op"] == "AccumulateGrad"]  # one filter for all configs: a sweep builds this per point
        for config_id, rows in accumulate.groupby("config_id"):
            grads = gradients(rows)
            self.buckets[str(config_id)] = np.asarray(pack_buckets(grads), dtype=float)
            total = sum(g.nbytes for g in grads)
            self.largest_share[str(config_id)] = max((g.nbytes for g in grads), default=0) / total if total else 0.0
        self._share: dict[tuple[str, str], float] = {}
        gpus = sorted(set(self.types) | set(jobs["gpu_type"].astype(str).unique()) - {""})
        for config_id in configs:
            for gpu in gpus:
                try:
                    share = backward.seconds(config_id, gpu) / truth.seconds(config_id, gpu)
                except KeyError:
                    continue
                self._share[config_id, gpu] = min(1.0, share)
        self.node_of_gpu = np.repeat(np.arange(len(cluster.nodes)), [n.num_gpus for n in cluster.nodes])
        self.links = [node_links(n, entry(n.gpu_type)) for n in cluster.nodes]
        self.node_size = {t: max(n.num_gpus for n in cluster.nodes if n.gpu_type == t) for t in self.types}
        typical = {}
        for i, n in enumerate(cluster.nodes):  # the first of the type's largest nodes stands for its packing
            if n.num_gpus == self.node_size[n.gpu_type]:
                typical.setdefault(n.gpu_type, i)
        self.typical_links = {t: self.links[i] for t, i in typical.items()}
        self._bucket_seconds: dict[tuple, np.ndarray | None] = {}
        self.compute = np.zeros((len(jobs), len(self.types)))  # true per-GPU seconds per iteration (charge)
        self.iterations = np.zeros(len(jobs))
        self._node_gpus: dict[str, np.ndarray] | None = None  # per type, the GPU ids of its largest nodes
        self.unpriced: set[str] = {t for t, links in self.typical_links.items() if links.interconnect is None}

    # -- the model ---------------------------------------------------------------------------------
    def _seconds(self, config_id: str, counts: tuple[int, ...], links: list[NodeLinks]) -> np.ndarray | None:
        """All-reduce seconds of each of the config's buckets on ``counts`` GPUs of nodes with
        ``links`` (None: a node's GPU has no known links, so communication is not priced)."""
        key = (config_id, counts, tuple(links))
        if key in self._bucket_seconds:
            return self._bucket_seconds[key]
        out = None
        if all(link.interconnect is not None for link in links):
            intra, best = ("", 0.0), np.inf
            for count, link in zip(counts, links):  # the weakest link among the nodes holding several GPUs
                found = intra_link(link.interconnect, count)
                if found is not None:
                    effective = self.params.links[found[0]].efficiency * found[1]
                    if effective < best:
                        intra, best = found, effective
            network = min(link.network_bps for link in links)
            out = ring_seconds(self.buckets.get(config_id, np.zeros(0)), sum(counts), min(counts), intra[0],
                               intra[1], 0, self.params, network)
        self._bucket_seconds[key] = out
        return out

    def step(self, compute_s: float, config_id: str, gpu: str, counts: tuple[int, ...],
             links: list[NodeLinks], comm_scale: float = 1.0) -> float:
        """Seconds of one data-parallel step of per-GPU compute ``compute_s`` on ``counts``, its
        all-reduces taking ``comm_scale`` × the model's time (a predictor's view of them)."""
        if sum(counts) <= 1:
            return compute_s
        seconds = self._seconds(config_id, counts, links)
        if seconds is None:
            return compute_s
        # the emulated backward share; 2/3 (backward ≈ 2× forward FLOPs) only for a pair the truth lacks
        share = self._share.get((config_id, gpu), 2.0 / 3.0)
        return overlapped_step(compute_s * share, compute_s * (1.0 - share), self.buckets.get(config_id, ()),
                               seconds * comm_scale)

    def packed_counts(self, job: int, gpu: str) -> tuple[int, ...]:
        return packed_counts(int(self.num[job]), self.node_size.get(gpu, default_per_node(int(self.num[job]))))

    def _typical(self, gpu: str, nodes: int) -> list[NodeLinks]:
        links = self.typical_links.get(gpu)
        if links is None:  # a type outside the cluster (a trace's observed type): its catalogue links
            links = NodeLinks(entry(gpu).interconnect, np.inf)
        return [links] * nodes

    def packed_steps(self, compute: np.ndarray) -> np.ndarray:
        """Per-iteration compute seconds (job, cluster type) → step seconds packed on each type."""
        out = np.array(compute, dtype=float, copy=True)
        for job in self.multi:
            for k, gpu in enumerate(self.types):
                if np.isfinite(out[job, k]):
                    counts = self.packed_counts(job, gpu)
                    out[job, k] = self.step(out[job, k], self.config[job], gpu, counts, self._typical(gpu, len(counts)))
        return out

    # -- the trace's work, and the truth ------------------------------------------------------
    def charge(self, trace: JobTrace, reference_type: str) -> JobTrace:
        """``trace`` (bound by :func:`traces.binding.bind_workload`: single-GPU timing) with its
        multi-GPU jobs' iterations counted at their original placement and their per-type run
        times packed on each type; ``compute_s:<type>`` columns keep the compute-only run times."""
        jobs = trace.jobs.copy()
        iterations = jobs["iterations"].to_numpy(dtype=float).copy()
        compute = np.column_stack([jobs[RUNTIME_PREFIX + t].to_numpy(dtype=float) for t in self.types]) \
            / np.where(iterations > 0, iterations, 1.0)[:, None]
        observed = jobs["gpu_type"].astype(str).replace("", reference_type).to_numpy()
        shapes = jobs[SHAPE].fillna("").astype(str).to_numpy() if SHAPE in jobs else np.full(len(jobs), "")
        duration = jobs["duration_s"].to_numpy(dtype=float)
        for job in self.multi:
            if not iterations[job] > 0:
                continue
            per_iteration = duration[job] / iterations[job]  # single-GPU compute on the observed type
            gpu = observed[job]
            counts = parse_shape(shapes[job]) if shapes[job] else self.packed_counts(job, gpu)
            step = self.step(per_iteration, self.config[job], gpu, counts, self._typical(gpu, len(counts)))
            iterations[job] = duration[job] / step
        jobs["iterations"] = iterations
        self.compute, self.iterations = compute, iterations
        packed = self.packed_steps(compute)
        for k, gpu in enumerate(self.types):
            jobs[RUNTIME_PREFIX + gpu] = iterations * packed[:, k]
            jobs[COMPUTE_PREFIX + gpu] = iterations * compute[:, k]
        return trace.with_jobs(jobs)

    # -- the engine's side --------------------------------------------------------------------
    def skewed(self) -> np.ndarray:
        """Per job, whether Tiresias' rule consolidates it: its largest gradient holds at least
        :data:`SKEW_SHARE` of its gradient bytes."""
        return np.array([self.largest_share.get(c, 0.0) >= SKEW_SHARE for c in self.config], dtype=bool)

    def estimate(self, job: int, k: int, plan: list[tuple[int, int]], view,
                 comm_scale: float = 1.0) -> tuple[float, float] | None:
        """By the predictions only: the job's run time on type k at ``plan`` (node, GPUs), and when
        a packed placement is predicted to free (None: ``plan`` is as packed as the type allows).
        The step ratio takes the predicted packed step per iteration as the compute (its overlap
        with communication is the truth's backward share, a property of the model, not a time)
        and the predictor's scale of communication (``comm_scale``: a noisy-comm predictor's
        error, 1 for the others)."""
        gpu = self.types[k]
        packed = self.packed_counts(job, gpu)
        if len(plan) <= len(packed):
            return None
        predicted = float(view.predicted[job, k])
        if not np.isfinite(predicted) or not self.iterations[job] > 0:
            return None
        per_iteration = predicted / self.iterations[job]
        config_id = self.config[job]
        ratio = (self.step(per_iteration, config_id, gpu, tuple(c for _, c in plan), [self.links[n] for n, _ in plan],
                           comm_scale)
                 / self.step(per_iteration, config_id, gpu, packed, self._typical(gpu, len(packed)), comm_scale))
        free_at = self._packed_free_at(view, k, packed)
        if not free_at > view.now:  # packed GPUs free now that the rule does not give: waiting gains nothing
            return None
        return predicted * ratio, free_at

    def _packed_free_at(self, view, k: int, packed: tuple[int, ...]) -> float:
        """When, by the predicted ends of running jobs, ``packed`` nodes of type k are free: the
        earliest time one of the type's largest nodes has packed[0] GPUs free (one node), or the
        time the len(packed)-th of them is wholly free (several)."""
        if self._node_gpus is None:
            self._node_gpus = {}
            for t in self.types:
                ids = [np.flatnonzero(self.node_of_gpu == i) for i, n in enumerate(self.cluster.nodes)
                       if n.gpu_type == t and n.num_gpus == self.node_size[t]]
                self._node_gpus[t] = np.vstack(ids)
        gpus = self._node_gpus[self.types[k]]
        available = np.sort(view.gpu_available_at()[gpus], axis=1)
        if len(packed) == 1:
            return float(available[:, packed[0] - 1].min())
        whole = np.sort(available[:, -1])
        return float(whole[len(packed) - 1]) if len(packed) <= len(whole) else np.inf

    def compute_runtime(self, k: np.ndarray) -> np.ndarray:
        """Per job, its compute-only run time on type ``k[job]`` (iterations × per-GPU compute)."""
        return self.iterations * self.compute[np.arange(len(k)), k]

    def compute_runtime_of(self, job: int, k: int) -> float:
        return float(self.iterations[job] * self.compute[job, k])

    def slowdown(self, job: int, k: int, gpu_ids) -> float:
        """Step at the job's GPUs ``gpu_ids`` ÷ step packed on type k (1.0 for one GPU)."""
        if self.num[job] <= 1:
            return 1.0
        nodes = self.node_of_gpu[np.asarray(gpu_ids, dtype=np.int64)]
        order, counts = np.unique(nodes, return_counts=True)
        gpu = self.types[k]
        config_id = self.config[job]
        actual = tuple(int(c) for c in counts)
        packed = self.packed_counts(job, gpu)
        if actual == packed and all(self.links[n] == self.typical_links.get(gpu) for n in order):
            return 1.0
        compute = float(self.compute[job, k])  # the overlap depends on the compute's own length
        return (self.step(compute, config_id, gpu, actual, [self.links[n] for n in order])
                / self.step(compute, config_id, gpu, packed, self._typical(gpu, len(packed))))


COMPUTE_PREFIX = "compute_s:"

"""How long one all-reduce takes on a placement (N GPUs, K per node): NCCL's ring from physics.

Why: a data-parallel job synchronises its gradients every iteration, and what that costs depends
on where its GPUs sit (one NVLink board, PCIe slots, several nodes). The time is the ring
algorithm's: 2(N−1) steps, each moving 1/N of the message over every link of the ring at once,

    t = c_p + α·2(N−1) + 2(N−1)/N · bytes / (s_p · B)

over the slowest link class the placement uses (largest α, smallest B), taken for the faster of
NCCL's two kinds of protocol p, as NCCL's own tuner picks: ``ll`` (LL/LL128: flags travel with
the data, a small fixed cost c_p but a share s_p < 1 of the bandwidth) and ``simple`` (the full
bandwidth, a larger fixed cost). Link classes: ``nvlink`` (NVSwitch board or a bridged pair),
``pcie`` (peer-to-peer over PCIe), ``pcie_host`` (no peer-to-peer: each byte staged through host
memory), ``network`` (between nodes). B = efficiency × the link's spec bandwidth per direction
(the GPU catalogue's ``[interconnect]``), so an efficiency fitted on one generation carries to
another; the network's B is a bandwidth per stream, and a node drives min(K, streams) streams at
once (NCCL spreads its rings' channels over the node's NICs). Tree all-reduce is not modelled:
the data reach 4 nodes at most, where a tree's log2(nodes) latency and the ring's cannot be told
apart. N = 1 costs nothing.

The parameters are fitted to real collectives (:mod:`predictor.emulator.devices.collective_fit`) and
shipped in ``collectives.json``; every time here is **spec-derived** (a GPU's spec sheet and
links fitted on other machines), never measured.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path

import numpy as np

from predictor.common.documents import read_document
from predictor.common.gpus import GpuEntry, Interconnect
from predictor.common.inputs import InputError

PARAMS_FILE = Path(__file__).with_name("collectives.json")
LINKS = ("nvlink", "pcie", "pcie_host")  # within a node; "network" between nodes
PROTOCOLS = ("ll", "simple")
SERVER_GPUS = 8  # GPUs of a typical server (DGX/HGX boards, 8-slot PCIe servers): --per-node's default cap
LABEL = "spec-derived"


class CollectiveError(InputError):
    """A placement, message or parameter file the model cannot price; the message names the value."""


@dataclass(frozen=True)
class Protocol:
    """A kind of NCCL protocol: fixed cost per call (s) and its share of the link bandwidth."""

    call_s: float
    share: float


@dataclass(frozen=True)
class Link:
    """A link class within a node: latency per ring step (s), achieved fraction of spec bandwidth."""

    alpha_s: float
    efficiency: float


@dataclass(frozen=True)
class Network:
    """The network between nodes: latency per ring step (s), bandwidth per stream (bytes/s) and
    how many streams a node drives at once."""

    alpha_s: float
    stream_bps: float
    streams: int


@dataclass(frozen=True)
class CommParams:
    """Fitted parameters of the model and where they come from."""

    protocols: dict[str, Protocol]
    links: dict[str, Link]
    network: Network
    provenance: dict

    def to_json(self) -> dict:
        return {"format": 1, "protocols": {k: vars(v) for k, v in self.protocols.items()},
                "links": {k: vars(v) for k, v in self.links.items()}, "network": vars(self.network),
                "provenance": self.provenance}


def params_from_json(body: dict, where: str = "collective parameters") -> CommParams:
    """The parameters of a ``to_json`` object; a missing or non-positive value names it."""
    try:
        protocols = {p: Protocol(float(body["protocols"][p]["call_s"]), float(body["protocols"][p]["share"]))
                     for p in PROTOCOLS}
        links = {k: Link(float(body["links"][k]["alpha_s"]), float(body["links"][k]["efficiency"])) for k in LINKS}
        net = body["network"]
        network = Network(float(net["alpha_s"]), float(net["stream_bps"]), int(net["streams"]))
    except (KeyError, TypeError, ValueError) as exc:
        raise CollectiveError(f"{where}: missing or malformed entry ({type(exc).__name__}: {exc})") from None
    values = [v for p in protocols.values() for v in (p.call_s, p.share)]
    values += [v for k in links.values() for v in (k.alpha_s, k.efficiency)]
    values += [network.alpha_s, network.stream_bps, network.streams]
    if not all(np.isfinite(v) and v > 0 for v in values):
        raise CollectiveError(f"{where}: every parameter must be a positive finite number")
    return CommParams(protocols, links, network, dict(body.get("provenance", {})))


def load_params(path: Path | None = None) -> CommParams:
    """The shipped fit (``collectives.json``), or another file written by the fitting script."""
    path = path or PARAMS_FILE
    body = read_document(path, "collective parameter file (python -m experiments.validate_collectives "
                               "--write-params makes it)", CollectiveError, kind="json")
    if not isinstance(body, dict):
        raise CollectiveError(f"{path}: not a JSON object of collective parameters")
    return params_from_json(body, str(path))


@lru_cache(maxsize=1)
def shipped_params() -> CommParams:
    """The shipped fit, read once per process (callers must not change it)."""
    return load_params(PARAMS_FILE)


def save_params(params: CommParams, path: Path | None = None) -> Path:
    path = path or PARAMS_FILE
    path.write_text(json.dumps(params.to_json(), indent=1) + "\n")
    return path


@dataclass(frozen=True)
class Placement:
    """N GPUs, ``per_node`` on each of N / per_node nodes."""

    gpus: int
    per_node: int

    def __post_init__(self) -> None:
        for name, value in (("gpus", self.gpus), ("per_node", self.per_node)):
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
                raise CollectiveError(f"{name} must be a whole number ≥ 1, got {value!r}")
        if self.per_node > self.gpus or self.gpus % self.per_node:
            raise CollectiveError(f"per_node {self.per_node} must divide gpus {self.gpus} (GPUs per node × nodes)")

    @property
    def nodes(self) -> int:
        return self.gpus // self.per_node


def default_per_node(gpus: int) -> int:
    """All N on one node up to a server's 8 GPUs; beyond, 8 per node (N must then be a multiple)."""
    return gpus if gpus <= SERVER_GPUS else SERVER_GPUS


def intra_link(interconnect: Interconnect, per_node: int) -> tuple[str, float] | None:
    """The slowest link class between the GPUs of one node and its spec bandwidth (bytes/s per
    direction); None for one GPU per node. A bridged pair is NVLink; a third GPU is over PCIe."""
    if per_node <= 1:
        return None
    if interconnect.nvlink_topology == "all" or (interconnect.nvlink_topology == "pairs" and per_node <= 2):
        return "nvlink", interconnect.nvlink_gbs * 1e9
    return ("pcie" if interconnect.pcie_p2p else "pcie_host"), interconnect.pcie_gbs * 1e9


def gpu_interconnect(gpu: GpuEntry) -> Interconnect:
    if gpu.interconnect is None:
        raise CollectiveError(f"GPU {gpu.name} has no [interconnect] in its catalogue entry ({gpu.file.name}): "
                              "its links are unknown, so its collectives cannot be priced")
    return gpu.interconnect


# What a cluster file's node may say its GPUs are joined by (``interconnect``), overriding the GPU
# catalogue: NVLink topology and whether PCIe peer-to-peer works.
INTERCONNECT_KINDS = {"nvlink": ("all", True), "nvlink-pairs": ("pairs", True), "pcie": ("none", True),
                      "pcie-no-p2p": ("none", False)}


def override_interconnect(gpu: GpuEntry, kind: str) -> Interconnect:
    """The GPU's catalogue links as a node that says ``interconnect: kind`` has them; NVLink on a
    GPU whose catalogue entry has none is refused (its bandwidth would be a guess)."""
    if kind not in INTERCONNECT_KINDS:
        raise CollectiveError(f"unknown interconnect {kind!r}; known: {', '.join(INTERCONNECT_KINDS)}")
    base = gpu_interconnect(gpu)
    topology, p2p = INTERCONNECT_KINDS[kind]
    if topology != "none" and base.nvlink_gbs <= 0:
        raise CollectiveError(f"interconnect {kind!r}: GPU {gpu.name} has no NVLink in its catalogue entry "
                              f"({gpu.file.name}); use pcie or pcie-no-p2p")
    return replace(base, nvlink_topology=topology, pcie_p2p=p2p,
                   nvlink_gbs=base.nvlink_gbs if topology != "none" else 0.0,
                   source=f"{base.source}; overridden by the cluster file: {kind}")


def ring_seconds(nbytes, gpus, per_node, intra: str | np.ndarray, intra_bps, streams,
                 params: CommParams, network_bps=np.inf) -> np.ndarray:
    """The model, vectorised over rows (numpy arrays or scalars): seconds of one all-reduce.

    ``intra``: the link class within a node ('' for one GPU per node); ``intra_bps``: its spec
    bandwidth per direction; ``streams``: network streams a node drives (0: the fitted default);
    ``per_node``: GPUs on the node with the fewest (it drives the fewest streams); ``network_bps``:
    a node's network line rate (bytes/s; a cluster file's ``network_gbps``), which caps what its
    streams move."""
    nbytes, gpus, per_node = (np.asarray(x, dtype=float) for x in (nbytes, gpus, per_node))
    intra, intra_bps, streams = np.asarray(intra), np.asarray(intra_bps, dtype=float), np.asarray(streams)
    alpha = np.zeros(np.broadcast(nbytes, gpus, intra).shape)
    bandwidth = np.full(alpha.shape, np.inf)
    for name, link in params.links.items():
        here = intra == name
        alpha = np.where(here, np.maximum(alpha, link.alpha_s), alpha)
        bandwidth = np.where(here, np.minimum(bandwidth, link.efficiency * intra_bps), bandwidth)
    net = params.network
    across = gpus > per_node
    node_streams = np.minimum(per_node, np.where(streams > 0, streams, net.streams))
    alpha = np.where(across, np.maximum(alpha, net.alpha_s), alpha)
    node_bps = np.minimum(net.stream_bps * node_streams, np.asarray(network_bps, dtype=float))
    bandwidth = np.where(across, np.minimum(bandwidth, node_bps), bandwidth)
    steps = 2 * (gpus - 1)
    moved = steps / np.maximum(gpus, 1) * nbytes
    best = np.full(alpha.shape, np.inf)
    for protocol in params.protocols.values():
        best = np.minimum(best, protocol.call_s + alpha * steps + moved / (protocol.share * bandwidth))
    return np.where(gpus > 1, best, 0.0)


def bottleneck(interconnect: Interconnect, placement: Placement, params: CommParams) -> str:
    """The link class that sets the bandwidth of the placement's ring."""
    intra = intra_link(interconnect, placement.per_node)
    if placement.gpus == 1:
        return "none"
    net_bps = params.network.stream_bps * min(placement.per_node, params.network.streams)
    if intra is None or (placement.nodes > 1 and net_bps < params.links[intra[0]].efficiency * intra[1]):
        return "network"
    return intra[0]


def allreduce(nbytes: float, placement: Placement, gpu: GpuEntry, params: CommParams | None = None) -> dict:
    """One all-reduce of ``nbytes`` on ``placement`` of ``gpu``: seconds, nodes, the bottleneck
    link and the label (spec-derived: no GPU here runs it)."""
    if isinstance(nbytes, bool) or not isinstance(nbytes, (int, float, np.integer, np.floating)) \
            or not np.isfinite(nbytes) or nbytes < 0:
        raise CollectiveError(f"bytes must be a finite number ≥ 0, got {nbytes!r}")
    if placement.gpus == 1:  # nothing to synchronise, whatever the GPU's links
        return {"seconds": 0.0, "gpus": 1, "per_node": 1, "nodes": 1, "link": "none", "label": LABEL}
    params = params or shipped_params()
    interconnect = gpu_interconnect(gpu)
    intra = intra_link(interconnect, placement.per_node)
    seconds = float(ring_seconds(nbytes, placement.gpus, placement.per_node, intra[0] if intra else "",
                                 intra[1] if intra else 0.0, 0, params))
    return {"seconds": seconds, "gpus": placement.gpus, "per_node": placement.per_node, "nodes": placement.nodes,
            "link": bottleneck(interconnect, placement, params), "label": LABEL}


def allreduce_on_nodes(nbytes, counts: tuple[int, ...], interconnect: Interconnect, params: CommParams | None = None,
                       network_bps: float = np.inf) -> np.ndarray:
    """Seconds of all-reduces of ``nbytes`` (an array: one per bucket) over GPUs spread as
    ``counts`` (GPUs on each node the job holds, e.g. (6, 2)): the simulator's placements, which
    need not be even. The ring's slowest links: within a node, the largest node's link class (a
    third GPU over PCIe on a bridged pair); between nodes, the node with the fewest GPUs, which
    drives the fewest network streams."""
    gpus = int(sum(counts))
    if gpus <= 1:
        return np.zeros(np.shape(nbytes))
    params = params or shipped_params()
    intra = intra_link(interconnect, max(counts))
    return ring_seconds(np.asarray(nbytes, dtype=float), gpus, min(counts), intra[0] if intra else "",
                        intra[1] if intra else 0.0, 0, params, network_bps)

"""The heterogeneous cluster: nodes with a GPU type and a GPU count, presets, and user files.

Why: every simulation runs on a cluster that must be named, reproducible and scalable — the
Hydra papers' 45-GPU clusters, the real PAI and Philly inventories (scaled down for quick runs),
or a user's own YAML/JSON description.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from predictor.common.documents import read_document
from predictor.common.gpus import UnknownGpuTypeError, canonical_gpu_type
from predictor.common.inputs import InputError, names, short

# The engine keeps state per GPU (and builds the node list one node at a time), so a size past
# this is a typo (num_gpus: 1e20) that would otherwise overflow, exhaust memory or never finish.
# 1,000,000 one-GPU nodes take about 0.7 GB and 12 s before the first job; 10,000,000 took 7 GB
# and minutes (the largest real inventory here, PAI's, has 6,742 GPUs).
MAX_GPUS = 1_000_000
# Nodes, and the characters of a node's or cluster's name. Why: the engine keeps a few objects per
# node, and each node its own name, so a 2 KB file (a 2,000-character name, count: 1000000) built
# 2.6 GB of nodes. At these bounds a cluster costs at most ~200 MB before the first job (1,000,000
# GPUs on 100,000 nodes named with 100 characters); the largest real inventory, PAI's, has 1,814
# nodes named with 20-odd characters.
MAX_NODES = 100_000
MAX_NAME = 100
# GPUs on one node. Why: the allocator keeps a heap per GPU type and free count up to the largest
# node, so one 1,000,000-GPU "node" beside 50 types made 50 million lists (3.6 GB) and walked a
# million empty heaps per allocation. Real nodes hold 8 or 16 GPUs; an NVL72 rack, 72.
MAX_NODE_GPUS = 1_024


def check_size(total: int, where: str, nodes: int = 0) -> None:
    """Refuse a cluster of more than :data:`MAX_GPUS` GPUs or :data:`MAX_NODES` nodes (checked
    from the counts, before a node is built)."""
    if total > MAX_GPUS:
        raise InputError(f"{where}: {total:,} GPUs; at most {MAX_GPUS:,} are supported "
                         "(the simulator keeps state per GPU)")
    if nodes > MAX_NODES:
        raise InputError(f"{where}: {nodes:,} nodes; at most {MAX_NODES:,} are supported "
                         "(the simulator keeps state per node)")


def check_name(name: str, where: str) -> str:
    """``name`` if it has at most :data:`MAX_NAME` characters, all printable (it is echoed to the
    terminal and kept once per node), else InputError naming ``where``."""
    if len(name) > MAX_NAME:
        raise InputError(f"{where}: {len(name):,} characters, at most {MAX_NAME} ({short(name)})")
    if not name.isprintable():
        raise InputError(f"{where}: holds a control or format character: {short(name)}")
    return name


@dataclass(frozen=True)
class Node:
    """A machine: ``num_gpus`` GPUs of ``gpu_type``. ``interconnect``: what joins its GPUs when a
    cluster file says so (a key of :data:`predictor.emulator.devices.collectives.INTERCONNECT_KINDS`;
    "" = the GPU catalogue's links); ``network_gbps``: its network line rate in Gbit/s when
    stated (0 = not stated: the collective model's fitted network)."""

    name: str
    gpu_type: str
    num_gpus: int
    interconnect: str = ""
    network_gbps: float = 0.0

    def __post_init__(self) -> None:
        if self.interconnect:
            from predictor.emulator.devices.collectives import INTERCONNECT_KINDS

            if self.interconnect not in INTERCONNECT_KINDS:
                raise InputError(f"node {short(self.name)}: unknown interconnect {short(self.interconnect)}; "
                                 f"known: {', '.join(INTERCONNECT_KINDS)}")
        if self.network_gbps and not (0 < self.network_gbps < math.inf):
            raise InputError(f"node {short(self.name)}: network_gbps must be a finite number > 0, "
                             f"got {short(self.network_gbps)}")


@dataclass(frozen=True)
class Cluster:
    """An immutable list of nodes; GPU ids are global, contiguous per node, in node order."""

    name: str
    nodes: tuple[Node, ...]

    def __post_init__(self) -> None:
        if not self.nodes:
            raise InputError(f"cluster {short(self.name)} has no GPU nodes")
        largest = max(self.nodes, key=lambda node: node.num_gpus)
        if largest.num_gpus > MAX_NODE_GPUS:
            raise InputError(f"cluster {short(self.name)}: node {short(largest.name)} has {largest.num_gpus:,} GPUs; "
                             f"at most {MAX_NODE_GPUS:,} per node are supported (split it into nodes)")

    @property
    def gpu_types(self) -> list[str]:
        """GPU types in order of first appearance (the column order of runtime matrices)."""
        seen: dict[str, None] = {}
        for node in self.nodes:
            seen.setdefault(node.gpu_type, None)
        return list(seen)

    def gpus_of_type(self, gpu_type: str) -> int:
        return sum(n.num_gpus for n in self.nodes if n.gpu_type == gpu_type)

    def reference_type(self) -> str:
        """The default reference GPU type: the most numerous type (the first of equals).

        Why: trace jobs without a GPU type are taken to have been observed on the reference type
        (their durations are scaled from it, :func:`simulator.timing.true_runtimes`); one
        definition, so that the engine, the binding of a run and the benchmarks agree."""
        return max(self.gpu_types, key=self.gpus_of_type)

    @property
    def total_gpus(self) -> int:
        return sum(n.num_gpus for n in self.nodes)

    def describe(self) -> dict:
        """Name, size and GPUs per type; and, only when some node states its links (a cluster
        file's ``interconnect`` / ``network_gbps``), ``node_links``: every node counted by (GPU
        type, interconnect, network_gbps), in order of first appearance, null where the node
        states nothing (the catalogue's links, the fitted network)."""
        out = {
            "name": self.name,
            "nodes": len(self.nodes),
            "gpus": self.total_gpus,
            "gpus_by_type": {t: self.gpus_of_type(t) for t in self.gpu_types},
        }
        if any(n.interconnect or n.network_gbps for n in self.nodes):
            groups: dict[tuple[str, str, float], int] = {}
            for n in self.nodes:
                key = (n.gpu_type, n.interconnect, n.network_gbps)
                groups[key] = groups.get(key, 0) + 1
            out["node_links"] = [{"gpu_type": gpu_type, "interconnect": interconnect or None,
                                  "network_gbps": network_gbps or None, "nodes": count}
                                 for (gpu_type, interconnect, network_gbps), count in groups.items()]
        return out


def homogeneous_groups(groups: list[tuple[str, int, int]], name: str) -> Cluster:
    """Build a cluster from (gpu_type, gpus_per_node, node_count) groups."""
    nodes = []
    for gpu_type, per_node, count in groups:
        canon = canonical_gpu_type(gpu_type)
        for i in range(count):
            nodes.append(Node(f"{canon.lower()}-{per_node}g-{i}", canon, per_node))
    return Cluster(name, tuple(nodes))


# Presets. The PAI and Philly compositions are the node counts of the real inventories
# (tests/test_cluster.py recounts them from ../shared when the files are there):
#   pai_machine_spec.csv: 280 MISC x 8, 798 P100 x 2, 497 T4 x 2, 104 V100 x 8, 135 V100M32 x 8
#                         (83 CPU-only machines left out) = 6,742 GPUs.
#   cluster_machine_list.csv: 321 x 2 GPUs of 12 GB (P100), 231 x 8 GPUs of 24 GB (P40) = 2,490 GPUs.
#   Hydra (iscas-system/Hydra main.go): single-GPU nodes; light 15/15/15, heavy 10 A100 / 20 V100 / 15 2080Ti.
PRESETS: dict[str, list[tuple[str, int, int]]] = {
    "hydra-light": [("A100", 1, 15), ("V100", 1, 15), ("RTX2080Ti", 1, 15)],
    "hydra-heavy": [("A100", 1, 10), ("V100", 1, 20), ("RTX2080Ti", 1, 15)],
    "pai": [("MISC", 8, 280), ("P100", 2, 798), ("T4", 2, 497), ("V100", 8, 104), ("V100M32", 8, 135)],
    "philly": [("P100", 2, 321), ("P40", 8, 231)],
    # today's GPUs, each of them emulated from the catalogue (ETS checkpoints ship for all three)
    "modern": [("H100", 8, 2), ("A100", 8, 2), ("L4", 4, 4)],
}

# The embedded default: the three calibrated PAI types (T4, P100, V100) in PAI's node shapes,
# 36 GPUs: the default pai-like workload (about 41 GPUs of offered work at its fitted rate) queues
# on it, so policies and prediction errors make a visible difference (a 64-GPU version idles).
PRESETS["default"] = [("T4", 2, 5), ("P100", 2, 5), ("V100", 8, 2)]


def scaled(groups: list[tuple[str, int, int]], factor: float) -> list[tuple[str, int, int]]:
    """Scale node counts (at least one node per type)."""
    if not factor > 0:
        raise InputError(f"cluster scale must be > 0, got {factor}")
    if not math.isfinite(factor) or factor > MAX_GPUS:
        raise InputError(f"cluster scale {factor:g} is too large (at most {MAX_GPUS:,} GPUs are supported)")
    out = [(t, per, max(1, math.floor(count * factor + 0.5))) for t, per, count in groups]
    check_size(sum(per * count for _, per, count in out), f"cluster scaled {factor:g}x",
               sum(count for _, _, count in out))
    return out


def from_table(rows, name: str) -> Cluster:
    """Build a cluster from a node table (columns node, gpu_type, num_gpus), e.g. a machine list;
    its size is checked before a node is built."""
    where = f"machine list {short(name)}"
    check_size(sum(int(n) for n in rows["num_gpus"]), where, sum(int(n) > 0 for n in rows["num_gpus"]))
    nodes = tuple(Node(check_name(str(r.node), f"{where}: node name"), canonical_gpu_type(r.gpu_type),
                       int(r.num_gpus))
                  for r in rows.itertuples(index=False) if int(r.num_gpus) > 0)
    return Cluster(name, nodes)


def _read_document(path: Path) -> object:
    """The parsed cluster file: JSON (suffix .json) or YAML (any other), read within the input
    limits (:func:`predictor.common.documents.read_document`)."""
    return read_document(path, "cluster file", InputError, kind="json" if path.suffix == ".json" else "yaml")


def _scalar_text(value: object, where: str, key: str) -> str:
    """A name field as text; a list or mapping (which ``str`` would expand whole) is refused."""
    if isinstance(value, (dict, list, tuple, set)):
        raise InputError(f"{where}: field {key!r} must be a string, got a {type(value).__name__}")
    return str(value)


NODE_FIELDS = ("gpu_type", "num_gpus", "count", "name", "interconnect", "network_gbps")


def _interconnect(entry: dict, gpu_type: str, where: str) -> str:
    """A node entry's ``interconnect`` ("" when absent): a known kind the GPU can have (NVLink
    only on a GPU whose catalogue entry has NVLink; none on a GPU without catalogue links)."""
    if "interconnect" not in entry:
        return ""
    from predictor.common.gpus import entry as gpu_entry
    from predictor.emulator.devices.collectives import INTERCONNECT_KINDS, CollectiveError, override_interconnect

    kind = entry["interconnect"]
    if not isinstance(kind, str) or kind not in INTERCONNECT_KINDS:
        raise InputError(f"{where}: field 'interconnect': unknown interconnect {short(kind)}; "
                         f"known: {', '.join(INTERCONNECT_KINDS)}")
    try:
        override_interconnect(gpu_entry(gpu_type), kind)
    except CollectiveError as exc:
        raise InputError(f"{where}: field 'interconnect': {exc}") from None
    return kind


def _network_gbps(entry: dict, where: str) -> float:
    """A node entry's ``network_gbps`` (0.0 when absent): a finite number of Gbit/s > 0."""
    if "network_gbps" not in entry:
        return 0.0
    value = entry["network_gbps"]
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < math.inf:
        raise InputError(f"{where}: field 'network_gbps' must be a finite number of Gbit/s > 0, got {short(value)}")
    return float(value)


def _node_entry(entry: object, i: int, path: Path) -> tuple[str, int, int, str, str, float]:
    """One ``nodes`` entry checked: (canonical GPU type, GPUs per node, count, base name,
    interconnect, network_gbps)."""
    where = f"{path}: nodes[{i}]"
    if not isinstance(entry, dict):
        raise InputError(f"{where}: expected a mapping, got {short(entry)}")
    unknown = set(entry) - set(NODE_FIELDS)
    if unknown:
        raise InputError(f"{where}: unknown field(s) [{names(sorted(unknown, key=str))}]")
    if "gpu_type" not in entry:
        raise InputError(f"{where}: field 'gpu_type' is missing")
    try:
        gpu_type = canonical_gpu_type(_scalar_text(entry["gpu_type"], where, "gpu_type"))
    except UnknownGpuTypeError as exc:
        raise InputError(f"{where}: field 'gpu_type': {exc}") from None
    for key, default, most in (("num_gpus", None, MAX_NODE_GPUS), ("count", 1, MAX_NODES)):
        value = entry.get(key, default)
        if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= most:
            raise InputError(f"{where}: field {key!r} must be an integer >= 1 and <= {most:,}, "
                             f"got {short(value)}")
    base = _scalar_text(entry.get("name", f"{gpu_type.lower()}-{i}"), where, "name")
    check_name(base, f"{where}: field 'name'")
    return (gpu_type, entry["num_gpus"], entry.get("count", 1), base, _interconnect(entry, gpu_type, where),
            _network_gbps(entry, where))


def load_file(path: str | Path) -> Cluster:
    """Load a YAML or JSON cluster file.

    Format::

        name: my-cluster            # optional
        nodes:
          - {gpu_type: V100, num_gpus: 8, count: 4}     # count: how many such nodes (default 1)
          - {gpu_type: T4,   num_gpus: 2, count: 10, name: t4-rack}
          - {gpu_type: A100, num_gpus: 8, interconnect: nvlink, network_gbps: 200}

    ``interconnect`` (optional): what joins a node's GPUs, overriding the GPU catalogue's links:
    ``nvlink`` (every pair over NVLink/NVSwitch), ``nvlink-pairs`` (bridged pairs, PCIe beyond),
    ``pcie`` or ``pcie-no-p2p`` (PCIe without peer-to-peer, through host memory); the NVLink
    kinds only for a GPU whose catalogue entry has NVLink, any of them only for a GPU whose entry
    has an ``[interconnect]``. ``network_gbps`` (optional): the node's network line rate in
    Gbit/s, a finite number > 0 (absent: the collective model's fitted network).

    A file from a stranger is safe: only a regular file within the size limit is read, its nesting
    and (YAML) alias expansion are bounded before it is built, and a value quoted in an error is
    cut short.
    """
    path = Path(path)
    doc = _read_document(path)
    if not isinstance(doc, dict) or not isinstance(doc.get("nodes"), list):
        raise InputError(f"{path}: expected a mapping with a 'nodes' list")
    entries = []
    gpus = count_nodes = 0
    for i, entry in enumerate(doc["nodes"], start=1):
        entries.append(_node_entry(entry, i, path))
        gpus += entries[-1][1] * entries[-1][2]
        count_nodes += entries[-1][2]
        check_size(gpus, f"{path}: nodes[{i}]", count_nodes)  # from the counts, before any node is built
    name = path.stem  # the file's own name, kept once: not bounded (the CLI escapes what it echoes)
    if "name" in doc:
        name = check_name(_scalar_text(doc["name"], str(path), "name"), f"{path}: field 'name'")
    nodes = [Node(f"{base}-{k}" if count > 1 else base, gpu_type, per_node, interconnect, network_gbps)
             for gpu_type, per_node, count, base, interconnect, network_gbps in entries for k in range(count)]
    return Cluster(name, tuple(nodes))


def resolve(spec: str) -> Cluster:
    """Turn a --cluster value into a Cluster.

    ``PRESET`` or ``PRESET:SCALE`` (e.g. ``pai:0.05``), ``pai-spec:PATH`` / ``philly-machines:PATH``
    (the real inventory files), or a path to a YAML/JSON file.
    """
    kind, _, arg = spec.partition(":")
    if kind in PRESETS:
        try:
            factor = float(arg) if arg else 1.0
        except ValueError:
            raise InputError(f"cluster scale in {short(spec)} is not a number") from None
        return homogeneous_groups(scaled(PRESETS[kind], factor) if arg else PRESETS[kind],
                                  spec if arg else kind)
    if kind in ("pai-spec", "philly-machines"):
        from traces.registry import load_machine_table

        table = load_machine_table("pai" if kind == "pai-spec" else "philly", arg)
        return from_table(table, spec)
    if Path(spec).suffix in (".yaml", ".yml", ".json"):
        return load_file(spec)
    raise InputError(
        f"unknown cluster {short(spec)}: use a preset ({', '.join(PRESETS)}; optionally PRESET:SCALE), "
        "pai-spec:PATH, philly-machines:PATH, or a .yaml/.json file"
    )


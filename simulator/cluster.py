"""The heterogeneous cluster: nodes with a GPU type and a GPU count, presets, and user files.

Why: every simulation runs on a cluster that must be named, reproducible and scalable — the
Hydra papers' 45-GPU clusters, the real PAI and Philly inventories (scaled down for quick runs),
or a user's own YAML/JSON description.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import yaml

from predictor.gpus import UnknownGpuTypeError, canonical_gpu_type


class ClusterError(ValueError):
    """A cluster description that cannot be used (unknown preset, bad file, unknown GPU type)."""


# The engine keeps state per GPU (and builds the node list one node at a time), so a size past
# this is a typo (num_gpus: 1e20) that would otherwise overflow, exhaust memory or never finish.
MAX_GPUS = 10_000_000


def check_size(total: int, where: str) -> None:
    """Refuse a cluster of more than :data:`MAX_GPUS` GPUs."""
    if total > MAX_GPUS:
        raise ClusterError(f"{where}: {total:,} GPUs; at most {MAX_GPUS:,} are supported "
                           "(the simulator keeps state per GPU)")


@dataclass(frozen=True)
class Node:
    name: str
    gpu_type: str
    num_gpus: int


@dataclass(frozen=True)
class Cluster:
    """An immutable list of nodes; GPU ids are global, contiguous per node, in node order."""

    name: str
    nodes: tuple[Node, ...]

    def __post_init__(self) -> None:
        if not self.nodes:
            raise ClusterError(f"cluster {self.name!r} has no GPU nodes")

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
        return {
            "name": self.name,
            "nodes": len(self.nodes),
            "gpus": self.total_gpus,
            "gpus_by_type": {t: self.gpus_of_type(t) for t in self.gpu_types},
        }


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
}

# The embedded default: the three calibrated PAI types (T4, P100, V100) in PAI's node shapes,
# 36 GPUs: the default pai-like workload (about 41 GPUs of offered work at its fitted rate) queues
# on it, so policies and prediction errors make a visible difference (a 64-GPU version idles).
PRESETS["default"] = [("T4", 2, 5), ("P100", 2, 5), ("V100", 8, 2)]


def scaled(groups: list[tuple[str, int, int]], factor: float) -> list[tuple[str, int, int]]:
    """Scale node counts (at least one node per type)."""
    if not factor > 0:
        raise ClusterError(f"cluster scale must be > 0, got {factor}")
    if not math.isfinite(factor) or factor > MAX_GPUS:
        raise ClusterError(f"cluster scale {factor:g} is too large (at most {MAX_GPUS:,} GPUs are supported)")
    out = [(t, per, max(1, math.floor(count * factor + 0.5))) for t, per, count in groups]
    check_size(sum(per * count for _, per, count in out), f"cluster scaled {factor:g}x")
    return out


def from_table(rows, name: str) -> Cluster:
    """Build a cluster from a node table (columns node, gpu_type, num_gpus), e.g. a machine list."""
    nodes = tuple(Node(str(r.node), canonical_gpu_type(r.gpu_type), int(r.num_gpus))
                  for r in rows.itertuples(index=False) if int(r.num_gpus) > 0)
    return Cluster(name, nodes)


def load_file(path: str | Path) -> Cluster:
    """Load a YAML or JSON cluster file.

    Format::

        name: my-cluster            # optional
        nodes:
          - {gpu_type: V100, num_gpus: 8, count: 4}     # count: how many such nodes (default 1)
          - {gpu_type: T4,   num_gpus: 2, count: 10, name: t4-rack}
    """
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise ClusterError(f"{path}: cannot read cluster file: {exc.strerror}") from None
    try:
        doc = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    except (json.JSONDecodeError, yaml.YAMLError) as exc:
        raise ClusterError(f"{path}: not valid {'JSON' if path.suffix == '.json' else 'YAML'}: {exc}") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("nodes"), list):
        raise ClusterError(f"{path}: expected a mapping with a 'nodes' list")
    nodes: list[Node] = []
    gpus = 0
    for i, entry in enumerate(doc["nodes"], start=1):
        where = f"{path}: nodes[{i}]"
        if not isinstance(entry, dict):
            raise ClusterError(f"{where}: expected a mapping, got {entry!r}")
        unknown = set(entry) - {"gpu_type", "num_gpus", "count", "name"}
        if unknown:
            raise ClusterError(f"{where}: unknown field(s) {sorted(unknown)}")
        try:
            gpu_type = canonical_gpu_type(entry["gpu_type"])
        except KeyError:
            raise ClusterError(f"{where}: field 'gpu_type' is missing") from None
        except UnknownGpuTypeError as exc:
            raise ClusterError(f"{where}: field 'gpu_type': {exc}") from None
        for key, default in (("num_gpus", None), ("count", 1)):
            value = entry.get(key, default)
            if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= MAX_GPUS:
                raise ClusterError(f"{where}: field {key!r} must be an integer >= 1 and <= {MAX_GPUS:,}, "
                                   f"got {value!r}")
        gpus += entry["num_gpus"] * entry.get("count", 1)
        check_size(gpus, where)  # before the nodes are built one by one
        base = entry.get("name", f"{gpu_type.lower()}-{i}")
        for k in range(entry.get("count", 1)):
            nodes.append(Node(f"{base}-{k}" if entry.get("count", 1) > 1 else str(base), gpu_type, entry["num_gpus"]))
    return Cluster(str(doc.get("name", path.stem)), tuple(nodes))


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
            raise ClusterError(f"cluster scale in {spec!r} is not a number") from None
        return homogeneous_groups(scaled(PRESETS[kind], factor) if arg else PRESETS[kind],
                                  spec if arg else kind)
    if kind in ("pai-spec", "philly-machines"):
        from traces.registry import load_machine_table

        table = load_machine_table("pai" if kind == "pai-spec" else "philly", arg)
        return from_table(table, spec)
    if Path(spec).suffix in (".yaml", ".yml", ".json"):
        return load_file(spec)
    raise ClusterError(
        f"unknown cluster {spec!r}: use a preset ({', '.join(PRESETS)}; optionally PRESET:SCALE), "
        "pai-spec:PATH, philly-machines:PATH, or a .yaml/.json file"
    )


"""A cluster file's per-node links: ``interconnect`` (overriding the GPU catalogue's) and
``network_gbps`` (the node's network line rate); each bad value is one line naming the file,
the node entry and the field."""

from __future__ import annotations

import json

import pytest

from predictor.common.inputs import InputError
from simulator.cluster import Cluster, Node, load_file, resolve


def _write(tmp_path, body: str, name: str = "c.yaml"):
    path = tmp_path / name
    path.write_text(body)
    return path


def test_nodes_carry_their_stated_links(tmp_path):
    path = _write(tmp_path, "name: links\nnodes:\n"
                  "  - {gpu_type: A100-SXM4, num_gpus: 8, count: 2, interconnect: nvlink, network_gbps: 200}\n"
                  "  - {gpu_type: A100-SXM4, num_gpus: 8, interconnect: nvlink-pairs}\n"
                  "  - {gpu_type: V100, num_gpus: 4, interconnect: pcie-no-p2p, network_gbps: 25.5}\n"
                  "  - {gpu_type: T4, num_gpus: 2, interconnect: pcie}\n"
                  "  - {gpu_type: T4, num_gpus: 2}\n")
    c = load_file(path)
    assert [(n.interconnect, n.network_gbps) for n in c.nodes] == [
        ("nvlink", 200.0), ("nvlink", 200.0), ("nvlink-pairs", 0.0), ("pcie-no-p2p", 25.5), ("pcie", 0.0), ("", 0.0)]
    assert isinstance(c.nodes[0].network_gbps, float)
    assert c.describe()["node_links"] == [
        {"gpu_type": "A100-SXM4", "interconnect": "nvlink", "network_gbps": 200.0, "nodes": 2},
        {"gpu_type": "A100-SXM4", "interconnect": "nvlink-pairs", "network_gbps": None, "nodes": 1},
        {"gpu_type": "V100", "interconnect": "pcie-no-p2p", "network_gbps": 25.5, "nodes": 1},
        {"gpu_type": "T4", "interconnect": "pcie", "network_gbps": None, "nodes": 1},
        {"gpu_type": "T4", "interconnect": None, "network_gbps": None, "nodes": 1}]
    j = _write(tmp_path, json.dumps({"nodes": [{"gpu_type": "H100", "num_gpus": 8, "network_gbps": 400}]}), "c.json")
    assert resolve(str(j)).nodes[0].network_gbps == 400.0


def test_a_cluster_that_states_no_links_describes_itself_as_before(tmp_path):
    """Manifests and frozen digests hold cluster.describe(): it gains a key only when some node
    states its links."""
    before = {"name": "lab", "nodes": 3, "gpus": 20, "gpus_by_type": {"V100": 16, "RTX2080Ti": 4}}
    path = _write(tmp_path, "name: lab\nnodes:\n  - {gpu_type: V100, num_gpus: 8, count: 2}\n"
                  "  - {gpu_type: GTX2080Ti, num_gpus: 4, name: old}\n")
    assert load_file(path).describe() == before
    assert set(resolve("default").describe()) == set(before) and set(resolve("philly").describe()) == set(before)


def test_existing_constructions_keep_working():
    node = Node("a", "T4", 8)
    assert (node.interconnect, node.network_gbps) == ("", 0.0)
    assert Node("a", "T4", 8) == node and hash(Node("a", "T4", 8)) == hash(node)
    assert Cluster("c", (node,)).describe() == {"name": "c", "nodes": 1, "gpus": 8, "gpus_by_type": {"T4": 8}}


@pytest.mark.parametrize("entry, message", [
    ("{gpu_type: T4, num_gpus: 2, interconnect: infiniband}",
     "field 'interconnect': unknown interconnect 'infiniband'; known: nvlink, nvlink-pairs, pcie, pcie-no-p2p"),
    ("{gpu_type: T4, num_gpus: 2, interconnect: NVLink}", "unknown interconnect 'NVLink'; known: nvlink"),
    ("{gpu_type: T4, num_gpus: 2, interconnect: [nvlink]}", "field 'interconnect': unknown interconnect"),
    ("{gpu_type: T4, num_gpus: 2, interconnect: 3}", "field 'interconnect': unknown interconnect 3;"),
    ("{gpu_type: T4, num_gpus: 2, interconnect: nvlink}",
     "field 'interconnect': interconnect 'nvlink': GPU T4 has no NVLink in its catalogue entry (T4.toml)"),
    ("{gpu_type: V100, num_gpus: 2, interconnect: nvlink-pairs}", "GPU V100 has no NVLink"),
    ("{gpu_type: MISC, num_gpus: 8, interconnect: pcie}", "field 'interconnect': GPU MISC has no [interconnect]"),
    ("{gpu_type: T4, num_gpus: 2, network_gbps: -100}",
     "field 'network_gbps' must be a finite number of Gbit/s > 0, got -100"),
    ("{gpu_type: T4, num_gpus: 2, network_gbps: 0}", "field 'network_gbps' must be a finite number of Gbit/s > 0"),
    ("{gpu_type: T4, num_gpus: 2, network_gbps: .inf}", "field 'network_gbps' must be a finite number"),
    ("{gpu_type: T4, num_gpus: 2, network_gbps: .nan}", "field 'network_gbps' must be a finite number"),
    ("{gpu_type: T4, num_gpus: 2, network_gbps: '100'}", "field 'network_gbps' must be a finite number"),
    ("{gpu_type: T4, num_gpus: 2, network_gbps: true}", "field 'network_gbps' must be a finite number"),
    ("{gpu_type: T4, num_gpus: 2, network_gbps: {rate: 100}}", "field 'network_gbps' must be a finite number"),
])
def test_bad_links_are_one_line_naming_file_node_and_field(tmp_path, entry, message):
    path = _write(tmp_path, f"nodes:\n  - {{gpu_type: T4, num_gpus: 2}}\n  - {entry}\n")
    with pytest.raises(InputError) as info:
        load_file(path)
    text = str(info.value)
    assert text.startswith(f"{path}: nodes[2]: ") and message in text and "\n" not in text


def test_a_node_built_in_code_is_checked_too():
    with pytest.raises(InputError, match="unknown interconnect 'ib'"):
        Node("a", "T4", 2, interconnect="ib")
    with pytest.raises(InputError, match="network_gbps must be a finite number > 0"):
        Node("a", "T4", 2, network_gbps=-1.0)


def test_simrun_prints_a_bad_link_as_one_line(tmp_path):
    from click.testing import CliRunner

    from simulator.cli import main as simrun

    path = _write(tmp_path, "nodes:\n  - {gpu_type: T4, num_gpus: 2, interconnect: nvlink}\n")
    result = CliRunner().invoke(simrun, ["--cluster", str(path), "--workload", "pai-like:5", "--policy", "fifo",
                                         "--predictor", "truth"])
    assert result.exit_code != 0 and "Traceback" not in result.output
    errors = [line for line in result.output.splitlines() if "Error" in line]
    assert len(errors) == 1 and "nodes[1]: field 'interconnect'" in errors[0] and "GPU T4 has no NVLink" in errors[0]

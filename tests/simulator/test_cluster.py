"""Cluster presets, scaling, user files, and the real inventories behind the presets."""

from __future__ import annotations

import json

import pytest

from predictor.common.inputs import InputError
from simulator.cluster import PRESETS, homogeneous_groups, load_file, resolve


def test_hydra_presets_match_the_paper_clusters():
    light, heavy = resolve("hydra-light"), resolve("hydra-heavy")
    assert light.describe()["gpus_by_type"] == {"A100": 15, "V100": 15, "RTX2080Ti": 15}
    assert heavy.describe()["gpus_by_type"] == {"A100": 10, "V100": 20, "RTX2080Ti": 15}
    assert all(n.num_gpus == 1 for n in light.nodes)


def test_real_presets_and_scaling():
    pai = resolve("pai")
    assert pai.total_gpus == 6742 and len(pai.nodes) == 1814
    philly = resolve("philly")
    assert philly.describe()["gpus_by_type"] == {"P100": 642, "P40": 1848}
    small = resolve("philly:0.1")
    assert small.describe()["gpus_by_type"] == {"P100": 64, "P40": 184}
    assert resolve("pai:0.0001").describe()["nodes"] == 5  # at least one node per type
    with pytest.raises(InputError, match="not a number"):
        resolve("pai:x")
    with pytest.raises(InputError, match="must be > 0"):
        resolve("pai:0")
    with pytest.raises(InputError, match="unknown cluster 'nope'"):
        resolve("nope")


def test_the_reference_type_is_the_most_numerous_first_of_equals():
    assert resolve("default").reference_type() == "V100"   # 16 V100, 10 T4, 10 P100
    assert resolve("hydra-heavy").reference_type() == "V100"
    assert resolve("hydra-light").reference_type() == "A100"  # 15 of each: the first
    assert homogeneous_groups([("T4", 2, 2), ("P100", 4, 1)], "tie").reference_type() == "T4"


def test_yaml_and_json_cluster_files(tmp_path):
    y = tmp_path / "c.yaml"
    y.write_text("name: lab\nnodes:\n  - {gpu_type: V100, num_gpus: 8, count: 2}\n"
                 "  - {gpu_type: GTX2080Ti, num_gpus: 4, name: old}\n")
    c = load_file(y)
    assert c.name == "lab" and c.describe()["gpus_by_type"] == {"V100": 16, "RTX2080Ti": 4}
    assert [n.name for n in c.nodes] == ["v100-1-0", "v100-1-1", "old"]
    j = tmp_path / "c.json"
    j.write_text(json.dumps({"nodes": [{"gpu_type": "T4", "num_gpus": 2}]}))
    assert resolve(str(j)).total_gpus == 2


@pytest.mark.parametrize("body, message", [
    ("nodes:\n  - {gpu_type: H900, num_gpus: 8}\n", "nodes\\[1\\]: field 'gpu_type': unknown GPU type 'H900'"),
    ("nodes:\n  - {gpu_type: V100, num_gpus: 0}\n", "field 'num_gpus' must be an integer >= 1"),
    ("nodes:\n  - {gpu_type: V100}\n", "field 'num_gpus' must be an integer"),
    ("nodes:\n  - {num_gpus: 2}\n", "field 'gpu_type' is missing"),
    ("nodes:\n  - {gpu_type: V100, num_gpus: 2, colour: red}\n", "unknown field"),
    ("nodes: []\n", "has no GPU nodes"),
    ("gpus: 3\n", "expected a mapping with a 'nodes' list"),
    ("nodes: [\n", "not valid YAML"),
])
def test_bad_cluster_files_name_the_file_and_field(tmp_path, body, message):
    path = tmp_path / "bad.yaml"
    path.write_text(body)
    with pytest.raises(InputError, match=message) as info:
        load_file(path)
    assert str(path) in str(info.value) or "has no GPU nodes" in str(info.value)


def test_presets_equal_the_real_inventories(shared_dir):
    from traces.registry import load_machine_table

    pai_spec = shared_dir / "traces/alibaba_pai_v2020/pai_machine_spec.csv"
    philly_list = shared_dir / "traces/philly/cluster_machine_list.csv"
    if not pai_spec.exists() or not philly_list.exists():
        pytest.skip(f"machine inventories not found under {shared_dir}/traces: set ETS_SHARED")
    for preset, kind, path in (("pai", "pai", pai_spec), ("philly", "philly", philly_list)):
        table = load_machine_table(kind, path)
        counts = table.groupby(["gpu_type", "num_gpus"]).size()
        expected = {(t, per): count for t, per, count in PRESETS[preset]}
        assert counts.to_dict() == expected
        assert resolve(f"{'pai-spec' if kind == 'pai' else 'philly-machines'}:{path}").total_gpus == \
            resolve(preset).total_gpus


# -- sizes that multiply (issue 50): names bounded, nodes counted before any is built ----------

def test_a_long_node_name_times_a_million_is_refused_before_a_node_is_built(tmp_path):
    # the audit's 2 KB file: 1,000,000 nodes each named with 2,000 characters took 2.6 GB
    path = tmp_path / "c.yaml"
    path.write_text("nodes:\n  - {gpu_type: V100, num_gpus: 1, count: 1000000, name: " + "n" * 2000 + "}\n")
    with pytest.raises(InputError, match=r"nodes\[1\]: field 'count' must be an integer >= 1 and <= 100,000"):
        resolve(str(path))
    path.write_text("nodes:\n  - {gpu_type: V100, num_gpus: 1, count: 1000, name: " + "n" * 2000 + "}\n")
    with pytest.raises(InputError, match=r"nodes\[1\]: field 'name': 2,000 characters, at most 100 \('nnn"):
        resolve(str(path))
    path.write_text("nodes:\n  - {gpu_type: V100, num_gpus: 1, count: 100001}\n")
    with pytest.raises(InputError, match=r"nodes\[1\]: field 'count' must be an integer >= 1 and <= 100,000"):
        resolve(str(path))
    path.write_text("nodes:\n" + "  - {gpu_type: V100, num_gpus: 1, count: 60000}\n" * 2)
    with pytest.raises(InputError, match=r"nodes\[2\]: 120,000 nodes; at most 100,000 are supported"):
        resolve(str(path))
    path.write_text("name: " + "c" * 101 + "\nnodes:\n  - {gpu_type: V100, num_gpus: 1}\n")
    with pytest.raises(InputError, match="field 'name': 101 characters, at most 100"):
        resolve(str(path))


def test_a_name_with_a_control_character_is_refused(tmp_path):
    path = tmp_path / "c.json"
    path.write_text(json.dumps({"name": "ok", "nodes": [{"gpu_type": "V100", "num_gpus": 1, "name": "a\nb"}]}))
    with pytest.raises(InputError, match=r"nodes\[1\]: field 'name': holds a control or format character: 'a\\nb'"):
        resolve(str(path))


def test_a_node_of_more_gpus_than_any_real_one_is_refused(tmp_path):
    # one 1,000,000-GPU node beside 50 one-GPU types made the allocator keep 50 million lists (3.6 GB)
    from simulator.cluster import Cluster, Node

    path = tmp_path / "c.yaml"
    path.write_text("nodes:\n  - {gpu_type: V100, num_gpus: 1025}\n")
    with pytest.raises(InputError, match=r"nodes\[1\]: field 'num_gpus' must be an integer >= 1 and <= 1,024"):
        resolve(str(path))
    with pytest.raises(InputError, match="node 'big' has 1,000,000 GPUs; at most 1,024 per node"):
        Cluster("c", (Node("a", "T4", 8), Node("big", "V100", 1_000_000)))
    assert Cluster("c", (Node("nvl72", "A100", 72),)).total_gpus == 72

"""Cluster presets, scaling, user files, and the real inventories behind the presets."""

from __future__ import annotations

import json

import pytest

from simulator.cluster import PRESETS, ClusterError, homogeneous_groups, load_file, resolve


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
    with pytest.raises(ClusterError, match="not a number"):
        resolve("pai:x")
    with pytest.raises(ClusterError, match="must be > 0"):
        resolve("pai:0")
    with pytest.raises(ClusterError, match="unknown cluster 'nope'"):
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
    with pytest.raises(ClusterError, match=message) as info:
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

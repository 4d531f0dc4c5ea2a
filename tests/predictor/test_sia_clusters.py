"""The Sia clusters are one record (predictor.common.sia_clusters): the speed derivation, the
calibration rows and the placement validation read it, its entries are catalogue GPUs, and it
names exactly the clusters of Sia's data files."""

from __future__ import annotations

import pytest

from predictor.common import gpus
from predictor.common.sia_clusters import SIA_ANCHOR, SIA_CLUSTERS, sia_speed_gpus
from predictor.emulator.devices import measurements, placement_sets


def test_every_cluster_names_catalogue_gpus_and_says_why_its_speed_entry_differs():
    for name, cluster in SIA_CLUSTERS.items():
        assert gpus.canonical_gpu_type(cluster.gpu) == cluster.gpu, name  # catalogue names, not aliases
        assert cluster.per_node >= 1 and cluster.source
        if cluster.speed_gpu is None or cluster.speed_gpu != cluster.gpu:
            assert cluster.speed_reason, name  # an attribution to another entry (or none) says why
        if cluster.speed_gpu is not None:
            assert gpus.canonical_gpu_type(cluster.speed_gpu) == cluster.speed_gpu
            assert gpus.speed(cluster.speed_gpu).source in ("sia", "reference"), name
    # the two deliberate differences, with the catalogue notes they rest on
    assert (SIA_CLUSTERS["dgx-ext"].gpu, SIA_CLUSTERS["dgx-ext"].speed_gpu) == ("A100-SXM4", "A100")
    assert "measured by Sia on DGX-A100" in gpus.entry("A100").notes
    assert (SIA_CLUSTERS["azure"].gpu, SIA_CLUSTERS["azure"].speed_gpu) == ("V100-SXM2", "V100")
    assert "Sia's V100s" in gpus.entry("V100").notes
    assert sia_speed_gpus()[SIA_ANCHOR] == "A100"


def test_the_three_uses_read_the_one_record():
    assert measurements.SIA_DEVICES == sia_speed_gpus()
    assert list(measurements.SIA_DEVICES) == ["aws", "azure", "dgx-ext", "quad", "rtx"]  # the rows' order
    assert placement_sets.SIA_CLUSTERS is SIA_CLUSTERS
    # every entry the catalogue says Sia measured is one a cluster's speed speaks for
    measured = {n for n, e in gpus.catalog().items() if e.measured_speed and e.measured_speed.source == "sia"}
    assert measured == set(sia_speed_gpus().values()) - {gpus.REFERENCE}


def test_the_record_names_the_clusters_of_the_sia_data_files(shared_dir):
    folder = shared_dir / "calibration" / "sia_placements"
    if not folder.is_dir():
        pytest.skip(f"{folder} not found: Sia's placement files are not in this shared data")
    found = {p.name.removeprefix(kind + "-").removesuffix(".csv")
             for kind in ("placements", "scalability") for p in folder.glob(f"*/{kind}-*.csv")}
    assert found == set(SIA_CLUSTERS)
    for model in ("bert", "cifar10", "imagenet"):  # every cluster the calibration reads has its file
        for cluster in sia_speed_gpus():
            assert (folder / model / f"placements-{cluster}.csv").is_file(), (model, cluster)

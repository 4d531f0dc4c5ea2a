"""The Sia / Pollux clusters: per cluster name (``placements-<cluster>.csv`` in Sia's data), its
hardware and which catalogue entry its measurements speak for — the one record of them.

Why: the cluster map was kept three times and the copies disagreed in kind: the catalogue's speed
derivation (:func:`predictor.common.gpus.derive_relative_iteration_time`) and the calibration
rows (:mod:`predictor.emulator.devices.measurements`) attributed ``dgx-ext`` to ``A100`` and
``azure`` to ``V100``, while the placement validation
(:mod:`predictor.emulator.devices.placement_sets`) modelled the boards the clusters have,
``A100-SXM4`` and ``V100-SXM2``. Both are deliberate; this record says so once, per cluster:

* ``gpu`` — the exact board (its catalogue entry: links, memory), which the placement
  validation's communication model prices;
* ``speed_gpu`` — the catalogue entry Sia's single-GPU step times are attributed to: the entry
  whose ``[speed]`` they set (the derivation) and the emulated device of the calibration rows;
  None where the cluster's data is not used so (``dgx`` repeats ``dgx-ext``'s hardware with fewer
  batch sizes profiled);
* ``speed_reason`` — why ``speed_gpu`` differs from ``gpu`` where it does;
* ``per_node``, ``network_gbps`` (a node's network line rate in Gb/s where the hardware's
  documentation states it; None: not stated) and ``source``.

Sources: siasosp23/artifacts' simulator_config.py (the data's README) and the vendors' pages.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SiaCluster:
    """The hardware of one Sia cluster and the catalogue entry its speed is attributed to."""

    gpu: str
    per_node: int
    network_gbps: float | None
    source: str
    speed_gpu: str | None
    speed_reason: str = ""


_A100 = ("the catalogue's 'A100' (PCIe 40GB) entry carries Sia's DGX-A100 speed: its notes say its relative "
         "speed was measured by Sia on DGX-A100 (SXM4 40GB) machines, and 'A100' is the emulated device "
         "calibrated on these rows")
_V100 = ("'V100' is the reference of relative speed (1.0), measured on Gavel's and Sia's V100s (SXM2 machines; "
         "the V100 entry's notes), and the emulated device calibrated on these rows")

# In cluster-name order: the order the calibration rows are read in.
SIA_CLUSTERS: dict[str, SiaCluster] = {
    "aws": SiaCluster("T4", 4, 50.0, "AWS g4dn.12xlarge: 4 T4 over PCIe, 50 Gb/s network", "T4"),
    "azure": SiaCluster("V100-SXM2", 8, 100.0, "Azure ND40rs_v2: 8 V100 SXM2 32 GB on NVLink, 100 Gb/s InfiniBand",
                        "V100", _V100),
    "dgx": SiaCluster("A100-SXM4", 8, 1600.0, "DGX A100: 8 A100 SXM4 40 GB on NVSwitch, 8 x 200 Gb/s InfiniBand",
                      None, "dgx-ext profiles the same hardware with more batch sizes; its rows are the ones used"),
    "dgx-ext": SiaCluster("A100-SXM4", 8, 1600.0, "DGX A100 (dgx's hardware, more batch sizes profiled)", "A100",
                          _A100),
    "quad": SiaCluster("RTX6000", 4, None, "on-premises 4x Quadro RTX 6000 (one node; network not stated)", "RTX6000"),
    "rtx": SiaCluster("RTX2080Ti", 8, None, "on-premises 8x RTX 2080 Ti per node (network not stated)", "RTX2080Ti"),
}
# The cluster whose step times the others are divided by in the speed derivation
SIA_ANCHOR = "dgx-ext"


def sia_speed_gpus() -> dict[str, str]:
    """Cluster -> the catalogue entry its single-GPU step times speak for (clusters that have one)."""
    return {name: c.speed_gpu for name, c in SIA_CLUSTERS.items() if c.speed_gpu is not None}

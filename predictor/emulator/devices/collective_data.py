"""Real collective timings (Vidur, DeepBench) as one table of placements, bytes and seconds.

Why a module of its own: the two sources count differently and say little about their machines,
so the units and setups are decided here, once, and written down:

* **Vidur** (``vidur/network/<setup>/all_reduce.csv``): ``size`` is **bytes** — Vidur's
  profiler (``vidur/profiling/collectives/collectives_wrapper.py``) all-reduces a float16 buffer
  of ``size`` elements and records ``size * 2  # bytes``; the largest size, 67,108,864, is twice
  its default ``--max_collective_size`` of 4096 × 8192 elements. The bandwidths agree: read as
  bytes, 8 GPUs of the DGX reach a bus bandwidth of 174 GB/s at 64 MiB, under NVLink3's 300 GB/s
  per direction; read as elements they would reach 348 GB/s, more than the link carries. Times
  (``time_stats.*``, ms) are NCCL kernel times from the torch profiler; we take the median.
  ``num_workers`` GPUs, ``devices_per_node`` of them on each of num_workers / devices_per_node
  nodes (1 per node: every hop crosses the network), ``max_devices_per_node`` GPUs in a node.
  Setups: ``a100_dgx`` = DGX A100 (A100 SXM4 80GB, NVSwitch, 8 per node, up to 2 nodes);
  ``a100_pairwise_nvlink`` = 4 A100 80GB PCIe per node, NVLink-bridged in pairs (Azure's NC A100
  v4), so 4 GPUs ring over PCIe Gen4 between the pairs. Nothing records the network's hardware.
  ``a40_pairwise_nvlink`` has send/recv only, which this all-reduce model does not price (NCCL's
  send/recv reaches 1.46× the all-reduce bus bandwidth on the DGX pair: another collective).
* **DeepBench** (``deepbench/deepbench_allreduce.csv``): ``Size # floats`` are fp32 elements,
  **4 bytes** each; ``# chips / accelerator cards`` is the GPU count N (``# nodes`` is for the
  Xeon Phi rows); ``Mean All Reduce Time (msec)`` the time; ``Gigabytes/sec`` = N × bytes / time
  (checked on the file). Per DeepBench's README, N ≤ 8 runs on one 8-GPU node over **PCIe 3**
  (two sockets, two PLX switches per socket, 2 GPUs per switch), 16 and 32 on 2 and 4 such nodes
  over **InfiniBand FDR**, one HCA per node (the spec sheets list one). The V100 and T4 rows have
  no times. The GTX 1080 Ti and Titan X Pascal reach 12 GB/s between 2 GPUs (77 % of PCIe 3
  x16: peer-to-peer); the M40, P100 and Titan X (Maxwell) machines 6 GB/s at every N, the rate of
  copies staged through host memory (every byte crosses PCIe twice). Their spec sheets do not say
  why (older driver and CUDA on two of them); they are taken as the ``pcie_host`` link class.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from predictor.common.gpus import entry
from predictor.common.inputs import short
from predictor.emulator.devices.collectives import CollectiveError, gpu_interconnect, intra_link
from predictor.emulator.devices.kernel_sources import DEEPBENCH_DEVICES

COLUMNS = ("source", "setup", "gpu", "gpus", "per_node", "nbytes", "seconds", "intra", "intra_bps",
           "streams")
VIDUR_DIR = Path("vidur") / "network"
DEEPBENCH_FILE = Path("deepbench") / "deepbench_allreduce.csv"
# Vidur setup folder -> (set name, GPU catalogue name).
VIDUR_SETUPS = {"a100_dgx": ("Vidur A100 DGX", "A100-SXM4-80GB"),
                "a100_pairwise_nvlink": ("Vidur A100 pairwise NVLink", "A100-80GB")}
DEEPBENCH_NODE_GPUS = 8
DEEPBENCH_STREAMS = 1  # one InfiniBand FDR HCA per node
DEEPBENCH_HOST_STAGED = ("M40", "P100", "TitanXMaxwell")  # 6 GB/s at every N: see the module docstring


def _csv(path: Path, columns: tuple[str, ...]) -> pd.DataFrame:
    if not path.is_file():
        raise CollectiveError(f"{path}: file not found (the shared calibration data; set $ETS_CALIBRATION)")
    try:
        table = pd.read_csv(path)
    except (OSError, ValueError, UnicodeDecodeError) as exc:
        raise CollectiveError(f"{path}: not a readable CSV ({type(exc).__name__}: "
                              f"{short(str(exc), 120)})") from None
    missing = [c for c in columns if c not in table.columns]
    if missing:
        raise CollectiveError(f"{path}: lacks column(s) {', '.join(missing)}")
    return table


def _numbers(path: Path, table: pd.DataFrame, column: str) -> np.ndarray:
    values = pd.to_numeric(table[column], errors="coerce").to_numpy(dtype=float)
    bad = ~np.isfinite(values) | (values <= 0)
    if bad.any():
        row = int(np.flatnonzero(bad)[0])
        raise CollectiveError(f"{path}: row {row + 2}, column {column!r}: not a positive number "
                              f"({short(table[column].iloc[row])})")
    return values


def _links(gpu: str, per_node: np.ndarray, host_staged: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """Link class and spec bandwidth within a node for each row's GPUs per node."""
    interconnect = gpu_interconnect(entry(gpu))
    classes, bps = [], []
    for k in per_node:
        link = intra_link(interconnect, int(k))
        name, rate = link if link else ("", 0.0)
        classes.append("pcie_host" if host_staged and name == "pcie" else name)
        bps.append(rate)
    return np.array(classes, dtype=object), np.array(bps)


def load_vidur(calibration_dir: Path, setup: str) -> pd.DataFrame:
    """One Vidur setup's all-reduce timings (a size measured twice: the median of the two)."""
    name, gpu = VIDUR_SETUPS[setup]
    path = calibration_dir / VIDUR_DIR / setup / "all_reduce.csv"
    median = "time_stats.all_reduce.median"
    table = _csv(path, (median, "num_workers", "size", "devices_per_node"))
    frame = pd.DataFrame({"gpus": _numbers(path, table, "num_workers").astype(int),
                          "per_node": _numbers(path, table, "devices_per_node").astype(int),
                          "nbytes": _numbers(path, table, "size"),
                          "seconds": _numbers(path, table, median) / 1e3})
    frame = frame.groupby(["gpus", "per_node", "nbytes"], as_index=False)["seconds"].median()
    intra, bps = _links(gpu, frame["per_node"].to_numpy())
    return frame.assign(source="vidur", setup=name, gpu=gpu, intra=intra, intra_bps=bps,
                        streams=0)[list(COLUMNS)]


def load_deepbench(calibration_dir: Path) -> pd.DataFrame:
    """DeepBench's NVIDIA all-reduce rows that have a time."""
    path = calibration_dir / DEEPBENCH_FILE
    time, gpus, floats = "Mean All Reduce Time (msec)", "# chips / accelerator cards", "Size # floats"
    table = _csv(path, ("device", time, gpus, floats))
    table = table[table["device"].isin(DEEPBENCH_DEVICES) & table[time].notna()].reset_index(drop=True)
    frames = []
    for device, rows in table.groupby("device", sort=True):
        gpu = DEEPBENCH_DEVICES[device]
        n = _numbers(path, rows, gpus).astype(int)
        per_node = np.minimum(n, DEEPBENCH_NODE_GPUS)
        intra, bps = _links(gpu, per_node, host_staged=gpu in DEEPBENCH_HOST_STAGED)
        frames.append(pd.DataFrame({"source": "deepbench", "setup": f"DeepBench {gpu}", "gpu": gpu, "gpus": n,
                                    "per_node": per_node, "nbytes": _numbers(path, rows, floats) * 4,
                                    "seconds": _numbers(path, rows, time) / 1e3, "intra": intra, "intra_bps": bps,
                                    "streams": DEEPBENCH_STREAMS}))
    if not frames:
        raise CollectiveError(f"{path}: no NVIDIA all-reduce row with a time")
    return pd.concat(frames, ignore_index=True)[list(COLUMNS)]


def load_all(calibration_dir: str | Path) -> pd.DataFrame:
    """Every real all-reduce row: Vidur's two A100 setups, then DeepBench's machines."""
    root = Path(calibration_dir)
    frames = [load_vidur(root, s) for s in VIDUR_SETUPS] + [load_deepbench(root)]
    return pd.concat(frames, ignore_index=True)

"""GPU types: canonical names, the aliases found in traces, and measured relative speeds.

Why: traces and cluster files spell GPU types differently (``GTX2080Ti`` in Hydra's cases,
``V100M32`` in PAI), and the simulator needs, for traces that record a run time on one type only,
how long the same job takes on another type. Those ratios come from measured per-iteration times
(``../shared/calibration``), derived by :func:`derive_relative_iteration_time`; the numbers below
are that function's output, pinned so the package works without the data (a test recomputes them).
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass
from pathlib import Path

from predictor.inputs import load_json, read_bytes, regular_file, short


class UnknownGpuTypeError(ValueError):
    """A GPU type name that is neither canonical nor a known alias."""


@dataclass(frozen=True)
class GpuSpeed:
    """Iteration time of a GPU type relative to a V100 (V100 = 1.0; larger = slower)."""

    relative_time: float
    source: str


# Derived from ../shared/calibration (see derive_relative_iteration_time); values rounded to 3 digits.
#   K80, P100:            Gavel physical-cluster throughputs, geometric mean of V100/type time ratio
#                         over every single-GPU job type measured on both (K80: 25 jobs, P100: 26).
#   A100, T4, RTX2080Ti,  Sia/Pollux single-GPU step times, anchored on A100 (dgx-ext): per model
#   RTX6000 (and V100):   the geometric mean over shared batch sizes, then the geometric mean over
#                         the models bert, cifar10, deepspeech2, imagenet, yolov3 (ncf excluded: its
#                         V100 profile is 9-18x off, see calibration/README.md; gpt_pmp is modelled,
#                         not measured); finally divided by Sia's own V100/A100 ratio.
# Not measured anywhere in the calibration data, marked as such in every manifest:
#   P40:     spec-sheet estimate = P100 x sqrt((9.3/11.76 TFLOPS) x (549/346 GB/s)) (PCIe parts).
#   MISC:    PAI's bucket of K40m/K80/M60 parts; assigned the measured K80 value.
#   V100M32: the 32 GB V100; same silicon as V100, so the V100 value.
SPEEDS: dict[str, GpuSpeed] = {
    "V100": GpuSpeed(1.0, "reference"),
    "K80": GpuSpeed(4.619, "gavel-physical"),
    "P100": GpuSpeed(1.336, "gavel-physical"),
    "A100": GpuSpeed(0.780, "sia"),
    "T4": GpuSpeed(1.589, "sia"),
    "RTX2080Ti": GpuSpeed(1.228, "sia"),
    "RTX6000": GpuSpeed(1.012, "sia"),
    "P40": GpuSpeed(1.496, "spec-estimate (not measured)"),
    "MISC": GpuSpeed(4.619, "alias of K80 (not measured)"),
    "V100M32": GpuSpeed(1.0, "alias of V100 (not measured)"),
}

ALIASES: dict[str, str] = {
    "GTX2080TI": "RTX2080Ti",
    "2080TI": "RTX2080Ti",
    "RTX2080TI": "RTX2080Ti",
    "RTX6000": "RTX6000",
    "QUADRORTX6000": "RTX6000",
    "V100M16": "V100",
    "V100-32GB": "V100M32",
}


def canonical_gpu_type(name: str) -> str:
    """Return the canonical spelling of a GPU type, or raise UnknownGpuTypeError."""
    key = str(name).strip()
    for canon in SPEEDS:
        if key.upper() == canon.upper():
            return canon
    alias = ALIASES.get(key.upper().replace(" ", ""))
    if alias is not None:
        return alias
    raise UnknownGpuTypeError(
        f"unknown GPU type {short(name)}; known: {', '.join(sorted(SPEEDS))} "
        f"(aliases: {', '.join(sorted(ALIASES))})"
    )


def relative_time(gpu_type: str) -> float:
    return SPEEDS[canonical_gpu_type(gpu_type)].relative_time


# ---------------------------------------------------------------------------------------------
# Derivation from the measured tables (used by the pinning test and by curious users).

_SIA_CLUSTERS = {"aws": "T4", "azure": "V100", "dgx-ext": "A100", "rtx": "RTX2080Ti", "quad": "RTX6000"}
_SIA_MODELS = ("bert", "cifar10", "deepspeech2", "imagenet", "yolov3")


def _geomean(values: list[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values))


def _gavel_single_gpu(table: dict, gpu: str) -> dict[str, float]:
    return {k: v["null"] for k, v in table[gpu].items() if k.endswith(", 1)") and v["null"] > 0}


def _sia_single_gpu(path: Path) -> dict[int, float]:
    with regular_file(path, "Sia placements file").open() as fh:
        return {int(r["local_bsz"]): float(r["step_time"]) for r in csv.DictReader(fh) if r["placement"] == "1"}


def derive_relative_iteration_time(calibration_dir: str | Path) -> dict[str, float]:
    """Recompute the measured entries of SPEEDS from Gavel and Sia files (V100 = 1)."""
    root = Path(calibration_dir)
    gavel_file = root / "gavel_physical_cluster_throughputs.json"
    gavel = load_json(read_bytes(gavel_file, "Gavel throughput file"), gavel_file)
    v100 = _gavel_single_gpu(gavel, "v100")
    out: dict[str, float] = {"V100": 1.0}
    for name, key in (("K80", "k80"), ("P100", "p100")):
        thr = _gavel_single_gpu(gavel, key)
        out[name] = _geomean([v100[k] / thr[k] for k in thr if k in v100])

    per_type: dict[str, list[float]] = {g: [] for g in _SIA_CLUSTERS.values() if g != "A100"}
    for model in _SIA_MODELS:
        a100 = _sia_single_gpu(root / "sia_placements" / model / "placements-dgx-ext.csv")
        for suffix, gpu in _SIA_CLUSTERS.items():
            if gpu == "A100":
                continue
            other = _sia_single_gpu(root / "sia_placements" / model / f"placements-{suffix}.csv")
            ratios = [other[b] / a100[b] for b in other if b in a100]
            if ratios:
                per_type[gpu].append(_geomean(ratios))
    v100_over_a100 = _geomean(per_type["V100"])
    out["A100"] = 1.0 / v100_over_a100
    for gpu in ("T4", "RTX2080Ti", "RTX6000"):
        out[gpu] = _geomean(per_type[gpu]) / v100_over_a100
    return out

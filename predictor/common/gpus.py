"""The GPU catalogue: every GPU type the tool knows, read from one data file per GPU.

Why: GPU names used to live in two hand-kept registries that disagreed (cluster types here,
emulated devices in :mod:`predictor.emulator.devices.specs`). Now each GPU is one TOML file in
``predictor/common/gpu_catalog/`` — spec-sheet facts (architecture, SMs, clock, FP32 / TF32 / FP16 / BF16 /
FP8 peaks, memory, bandwidth, L2, TDP, year), the names it goes by (marketing names,
``torch.cuda.get_device_name()`` strings as the data sets record them, trace names) and, where
measured, its relative iteration time — and everything else is derived from it: emulation, cluster
types, relative speeds, the ``--help`` lists, ``ets devices list``. Adding a GPU = adding a file.
``ETS_SIM_GPU_CATALOG=DIR`` reads the catalogue from another folder instead (a test does).

Relative iteration time (V100 = 1; larger = slower) is what the simulator scales an observed run
time by when a trace records one GPU type only. Where it was measured the entry says so in its
``[speed]`` table (Gavel, Sia/Pollux, Lambda; :func:`derive_relative_iteration_time` recomputes the
Gavel/Sia ones); otherwise it is a **spec-derived** estimate, the geometric mean of the FP32-peak
and bandwidth ratios to the V100 (:func:`spec_relative_time`), and says so.
"""

from __future__ import annotations

import csv
import math
import os
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from predictor.common.documents import read_document
from predictor.common.inputs import InputError, regular_file, short
from predictor.common.sia_clusters import SIA_ANCHOR, sia_speed_gpus

CATALOG_DIR = Path(__file__).with_name("gpu_catalog")
CATALOG_ENV = "ETS_SIM_GPU_CATALOG"
REFERENCE = "V100"  # relative time 1.0


class UnknownGpuTypeError(InputError):
    """A GPU type name that is neither a catalogue name nor one of its aliases. The message lists
    the catalogue; :attr:`brief` does not, for errors that must stay one short line (a trace row)."""

    def __init__(self, name: str):
        self.name = name
        super().__init__(f"unknown GPU type {short(name)}; the catalogue ({catalog_dir()}) has: "
                         f"{', '.join(gpu_names())} (aliases are listed by `ets devices list --aliases`)")

    def __reduce__(self):  # pickled (worker processes) by its name, not its message
        return type(self), (self.name,)

    @property
    def brief(self) -> str:
        return f"unknown GPU type {short(self.name)} (`ets devices list [--aliases]` shows the catalogue)"


@dataclass(frozen=True)
class GpuSpeed:
    """Iteration time of a GPU type relative to a V100 (V100 = 1.0; larger = slower)."""

    relative_time: float
    source: str


# Per-direction bandwidth of one PCIe lane by generation, GB/s (signalling rate × line-code
# efficiency ÷ 8: 8b/10b for Gen 1–2, 128b/130b for Gen 3–5, 242/256-byte FLITs for Gen 6).
PCIE_LANE_GBS = {1: 0.25, 2: 0.5, 3: 8 * 128 / 130 / 8, 4: 16 * 128 / 130 / 8, 5: 32 * 128 / 130 / 8,
                 6: 64 * 242 / 256 / 8}
NVLINK_TOPOLOGIES = ("all", "pairs", "none")


@dataclass(frozen=True)
class Interconnect:
    """How a GPU reaches the other GPUs of its server, from its spec sheet; the communication
    model (:mod:`predictor.emulator.devices.collectives`) prices collectives on these links.

    ``nvlink_gbs``: NVLink bandwidth of one GPU per direction, all its links together (half the
    "bidirectional" figure datasheets print); 0 without NVLink. ``nvlink_topology``: ``all`` (every
    GPU of the board reaches the others over NVLink: NVSwitch, or DGX-1's hybrid cube-mesh, whose
    rings NCCL runs over NVLink), ``pairs`` (2-GPU bridges: a third GPU is reached over PCIe) or
    ``none``. ``pcie_p2p``: whether the driver lets GPUs copy to each other over PCIe directly;
    without it NCCL stages every byte through host memory."""

    pcie_generation: int
    pcie_lanes: int
    nvlink_gbs: float
    nvlink_topology: str
    pcie_p2p: bool
    source: str

    @property
    def pcie_gbs(self) -> float:
        """PCIe bandwidth per direction, GB/s (the link's raw data rate, before protocol overhead)."""
        return PCIE_LANE_GBS[self.pcie_generation] * self.pcie_lanes


@dataclass(frozen=True)
class GpuEntry:
    """One catalogue file: a GPU's spec sheet and the names it goes by."""

    name: str
    vendor: str
    marketing_name: str
    aliases: tuple[str, ...]
    architecture: str
    compute_capability: str
    year: int
    form_factor: str
    sms: int
    boost_clock_mhz: float
    fp32_tflops: float
    tf32_tflops: float  # dense tensor-core TF32; 0: none
    fp16_tflops: float  # dense FP16 tensor with FP32 accumulate (the FP16 vector rate without tensor cores)
    bf16_tflops: float  # 0: none
    fp8_tflops: float  # 0: none
    memory_gb: float
    memory_gbs: float
    l2_mb: float
    tdp_w: float
    source: str
    notes: str
    measured_speed: GpuSpeed | None
    file: Path
    interconnect: Interconnect | None = None  # None: the entry does not say (no communication model)

    @property
    def speed(self) -> GpuSpeed:
        """The measured relative iteration time, else the spec-derived estimate."""
        return self.measured_speed or GpuSpeed(spec_relative_time(self), "spec-derived estimate (not measured)")

    @property
    def cc_major(self) -> int:
        return int(self.compute_capability.split(".")[0])


def spec_only_entry(name: str, source: str, file: Path, *, sms: int, boost_clock_mhz: float, fp32_tflops: float,
                    fp16_tflops: float, memory_gb: float, memory_gbs: float, l2_mb: float, tf32_tflops: float = 0.0,
                    bf16_tflops: float = 0.0) -> GpuEntry:
    """A GPU known by its spec facts alone, not in the catalogue (a NeuSight-style spec file: the
    emulator's ``emulated:path/to/gpu.json``): the same record as a catalogue entry, with no other
    names, no architecture (``compute_capability`` empty) and no FP8 or TDP figure."""
    return GpuEntry(name=name, vendor="", marketing_name=name, aliases=(), architecture="", compute_capability="",
                    year=0, form_factor="", sms=sms, boost_clock_mhz=boost_clock_mhz, fp32_tflops=fp32_tflops,
                    tf32_tflops=tf32_tflops, fp16_tflops=fp16_tflops, bf16_tflops=bf16_tflops, fp8_tflops=0.0,
                    memory_gb=memory_gb, memory_gbs=memory_gbs, l2_mb=l2_mb, tdp_w=0.0, source=source, notes="",
                    measured_speed=None, file=file)


_TEXT = ("name", "vendor", "marketing_name", "architecture", "compute_capability", "form_factor", "source")
_POSITIVE = ("sms", "boost_clock_mhz", "fp32_tflops", "fp16_tflops", "memory_gb", "memory_gbs", "l2_mb", "tdp_w",
             "year")
_RATES = ("tf32_tflops", "bf16_tflops", "fp8_tflops")  # 0 where the part has no such unit
_INTS = ("sms", "year")
FIELDS = _TEXT + ("aliases",) + _POSITIVE + _RATES


def normalized(name: str) -> str:
    """The form names are compared in: upper case, without spaces, '-' and '_'."""
    return "".join(ch for ch in str(name).strip().upper() if ch not in " -_")


def _number(path: Path, body: dict, key: str, positive: bool) -> float:
    value = body[key]
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InputError(f"{path}: field {key!r} must be a number, got {short(value)}")
    if not math.isfinite(value) or value < 0 or (positive and value == 0):
        raise InputError(f"{path}: field {key!r} must be a {'positive' if positive else 'non-negative'} "
                         f"finite number, got {short(value)}")
    if key in _INTS and value != int(value):
        raise InputError(f"{path}: field {key!r} must be a whole number, got {short(value)}")
    return int(value) if key in _INTS else float(value)


def read_entry(path: Path) -> GpuEntry:
    """One catalogue file; a missing, mistyped or non-positive field names the file and the field."""
    body = read_document(path, "GPU catalogue entry", InputError, kind="toml")
    missing = [k for k in FIELDS if k not in body]
    if missing:
        raise InputError(f"{path}: lacks field(s) {', '.join(missing)} (every entry needs {', '.join(FIELDS)})")
    for key in _TEXT:
        if not isinstance(body[key], str) or not body[key].strip():
            raise InputError(f"{path}: field {key!r} must be a non-empty string, got {short(body[key])}")
    if body["name"] != path.stem:
        raise InputError(f"{path}: field 'name' is {short(body['name'])} but the file is named {path.name!r}")
    aliases = body["aliases"]
    if not isinstance(aliases, list) or not all(isinstance(a, str) and a.strip() for a in aliases):
        raise InputError(f"{path}: field 'aliases' must be a list of non-empty strings")
    numbers = {k: _number(path, body, k, True) for k in _POSITIVE} | {k: _number(path, body, k, False) for k in _RATES}
    try:
        major = int(str(body["compute_capability"]).split(".")[0])
    except ValueError:
        major = -1
    if major < 1:
        raise InputError(f"{path}: field 'compute_capability' must look like '8.0', got "
                         f"{short(body['compute_capability'])}")
    speed = None
    if "speed" in body:
        table = body["speed"]
        if not isinstance(table, dict) or set(table) != {"relative_time", "source"}:
            raise InputError(f"{path}: table [speed] must hold exactly 'relative_time' and 'source'")
        value = _number(path / "[speed]", table, "relative_time", True)
        if not isinstance(table["source"], str) or not table["source"].strip():
            raise InputError(f"{path}: field [speed].source must be a non-empty string")
        speed = GpuSpeed(float(value), table["source"])
    notes = body.get("notes", "")
    if not isinstance(notes, str):
        raise InputError(f"{path}: field 'notes' must be a string, got {short(notes)}")
    return GpuEntry(name=body["name"], vendor=body["vendor"], marketing_name=body["marketing_name"],
                    aliases=tuple(aliases), architecture=body["architecture"],
                    compute_capability=str(body["compute_capability"]), form_factor=body["form_factor"],
                    source=body["source"], notes=notes, measured_speed=speed, file=path,
                    interconnect=_interconnect(path, body["interconnect"]) if "interconnect" in body else None,
                    **numbers)


_INTERCONNECT_KEYS = {"pcie_generation", "pcie_lanes", "nvlink_gbs", "nvlink_topology", "source"}


def _interconnect(path: Path, table: object) -> Interconnect:
    """The optional ``[interconnect]`` table; a wrong field names the file and the field."""
    if not isinstance(table, dict) or not _INTERCONNECT_KEYS <= set(table) <= _INTERCONNECT_KEYS | {"pcie_p2p"}:
        raise InputError(f"{path}: table [interconnect] must hold {', '.join(sorted(_INTERCONNECT_KEYS))} "
                         "and optionally pcie_p2p")
    where = path / "[interconnect]"
    generation = table["pcie_generation"]
    if isinstance(generation, bool) or generation not in PCIE_LANE_GBS:
        raise InputError(f"{where}: field 'pcie_generation' must be one of {', '.join(map(str, PCIE_LANE_GBS))}, "
                         f"got {short(generation)}")
    lanes = table["pcie_lanes"]
    if isinstance(lanes, bool) or lanes not in (1, 2, 4, 8, 16):
        raise InputError(f"{where}: field 'pcie_lanes' must be 1, 2, 4, 8 or 16, got {short(lanes)}")
    nvlink = _number(where, table, "nvlink_gbs", False)
    topology = table["nvlink_topology"]
    if topology not in NVLINK_TOPOLOGIES or (topology == "none") != (nvlink == 0):
        raise InputError(f"{where}: field 'nvlink_topology' must be one of {', '.join(NVLINK_TOPOLOGIES)}, "
                         f"'none' exactly when nvlink_gbs is 0; got {short(topology)} with nvlink_gbs {nvlink:g}")
    p2p = table.get("pcie_p2p", True)
    if not isinstance(p2p, bool):
        raise InputError(f"{where}: field 'pcie_p2p' must be true or false, got {short(p2p)}")
    if not isinstance(table["source"], str) or not table["source"].strip():
        raise InputError(f"{where}: field 'source' must be a non-empty string")
    return Interconnect(int(generation), int(lanes), float(nvlink), topology, p2p, table["source"])


def catalog_dir() -> Path:
    """The catalogue folder: ``$ETS_SIM_GPU_CATALOG`` when set, else the package's."""
    return Path(os.environ[CATALOG_ENV]) if os.environ.get(CATALOG_ENV) else CATALOG_DIR


@lru_cache(maxsize=4)
def _load(directory: Path) -> tuple[dict[str, GpuEntry], dict[str, str]]:
    if not directory.is_dir():
        raise InputError(f"{directory}: no such GPU catalogue folder (set {CATALOG_ENV} to one)")
    entries: dict[str, GpuEntry] = {}
    lookup: dict[str, str] = {}
    for path in sorted(directory.glob("*.toml")):
        entry = read_entry(path)
        for spelling in (entry.name, entry.marketing_name, *entry.aliases):
            key = normalized(spelling)
            if lookup.get(key, entry.name) != entry.name:
                raise InputError(f"{path}: name {spelling!r} also names {lookup[key]!r} "
                                 f"({entries[lookup[key]].file.name}); every name must name one GPU")
            lookup[key] = entry.name
        entries[entry.name] = entry
    if not entries:
        raise InputError(f"{directory}: no GPU catalogue entries (*.toml)")
    if REFERENCE not in entries:
        raise InputError(f"{directory}: the catalogue needs the reference GPU {REFERENCE!r} (relative time 1)")
    return entries, lookup


def catalog() -> dict[str, GpuEntry]:
    """Every GPU of the catalogue by canonical name (read once per folder and process)."""
    return _load(catalog_dir().resolve())[0]


def gpu_names() -> list[str]:
    return sorted(catalog(), key=str.upper)


EMULATED_PREFIX = "emulated:"  # 'emulated:V100': the emulator's V100 (a device name of traces and commands)
# Words a device string may carry before the part's own name ("Tesla T4", "NVIDIA GeForce RTX 2080 Ti")
_VENDOR_WORDS = re.compile(r"\b(nvidia|tesla|geforce|quadro)\b", re.IGNORECASE)


def canonical_gpu_type(name: str, *, emulated: bool = False, loose: bool = False) -> str:
    """The catalogue name of a GPU type given by any of its names, or UnknownGpuTypeError (naming
    ``name`` as given). The one resolver of GPU names.

    ``emulated``: also accept the emulator's ``emulated:`` prefix ('emulated:V100' -> 'V100').
    ``loose`` (implies ``emulated``; Habitat's reading of device strings): a name that is no
    catalogue spelling is tried again without the vendor words NVIDIA, Tesla, GeForce, Quadro,
    then cut at its first '-', then at its first space ('NVIDIA H100 80GB HBM3' -> 'H100'). The
    exact spelling always wins, so no catalogue name or alias resolves differently when loose."""
    lookup = _load(catalog_dir().resolve())[1]
    candidates = [name]
    if loose:
        bare = _VENDOR_WORDS.sub(" ", name.removeprefix(EMULATED_PREFIX)).strip()
        candidates += dict.fromkeys([bare, bare.split("-")[0].strip(), bare.split(" ")[0]])
    for candidate in candidates:
        found = lookup.get(normalized(candidate.removeprefix(EMULATED_PREFIX) if emulated or loose else candidate))
        if found is not None:
            return found
    raise UnknownGpuTypeError(name)


def names_help() -> str:
    """The catalogue's names for a ``--help`` text (read when the command line is built)."""
    try:
        return "GPU types of the catalogue: " + ", ".join(gpu_names())
    except InputError as exc:
        return f"(the GPU catalogue cannot be read: {short(str(exc), 200)})"


def entry(name: str) -> GpuEntry:
    return catalog()[canonical_gpu_type(name)]


def speed(gpu_type: str) -> GpuSpeed:
    return entry(gpu_type).speed


def relative_time(gpu_type: str) -> float:
    return speed(gpu_type).relative_time


def spec_relative_time(gpu: GpuEntry) -> float:
    """Iteration time relative to the V100 from spec sheets alone: the geometric mean of the FP32
    peak and the memory-bandwidth ratios (an fp32 job, half compute- and half memory-bound)."""
    ref = catalog()[REFERENCE]
    return round(math.sqrt(ref.fp32_tflops / gpu.fp32_tflops * ref.memory_gbs / gpu.memory_gbs), 3)


# ---------------------------------------------------------------------------------------------
# Derivation of the Gavel/Sia entries from the measured tables (a test pins the catalogue to it).

_SIA_MODELS = ("bert", "cifar10", "deepspeech2", "imagenet", "yolov3")


def _geomean(values: list[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values))


def _gavel_single_gpu(table: dict, gpu: str) -> dict[str, float]:
    return {k: v["null"] for k, v in table[gpu].items() if k.endswith(", 1)") and v["null"] > 0}


def _sia_single_gpu(path: Path) -> dict[int, float]:
    with regular_file(path, "Sia placements file").open() as fh:
        return {int(r["local_bsz"]): float(r["step_time"]) for r in csv.DictReader(fh) if r["placement"] == "1"}


def derive_relative_iteration_time(calibration_dir: str | Path) -> dict[str, float]:
    """Recompute the Gavel- and Sia-measured relative times from their files (V100 = 1).

    K80, P100: Gavel physical-cluster throughputs, geometric mean of the V100/type time ratio over
    every single-GPU job type measured on both. A100, T4, RTX2080Ti, RTX6000: Sia/Pollux
    single-GPU step times anchored on A100 (dgx-ext): per model the geometric mean over shared
    batch sizes, then over the models bert, cifar10, deepspeech2, imagenet, yolov3 (ncf excluded:
    its V100 profile is 9-18x off; gpt_pmp is modelled, not measured); divided by Sia's own
    V100/A100 ratio. Which entry each cluster's times speak for (dgx-ext's DGX-A100 SXM4 boards set
    the 'A100' entry's speed, azure's SXM2 V100s the reference's): :mod:`predictor.common.sia_clusters`."""
    root = Path(calibration_dir)
    gavel_file = root / "gavel_physical_cluster_throughputs.json"
    gavel = read_document(gavel_file, "Gavel throughput file", kind="json")
    v100 = _gavel_single_gpu(gavel, "v100")
    out: dict[str, float] = {"V100": 1.0}
    for name, key in (("K80", "k80"), ("P100", "p100")):
        thr = _gavel_single_gpu(gavel, key)
        out[name] = _geomean([v100[k] / thr[k] for k in thr if k in v100])

    clusters = sia_speed_gpus()
    anchor = clusters[SIA_ANCHOR]  # A100
    per_type: dict[str, list[float]] = {g: [] for g in clusters.values() if g != anchor}
    for model in _SIA_MODELS:
        a100 = _sia_single_gpu(root / "sia_placements" / model / f"placements-{SIA_ANCHOR}.csv")
        for suffix, gpu in clusters.items():
            if gpu == anchor:
                continue
            other = _sia_single_gpu(root / "sia_placements" / model / f"placements-{suffix}.csv")
            ratios = [other[b] / a100[b] for b in other if b in a100]
            if ratios:
                per_type[gpu].append(_geomean(ratios))
    v100_over_a100 = _geomean(per_type[REFERENCE])
    out[anchor] = 1.0 / v100_over_a100
    for gpu in (g for g in per_type if g != REFERENCE):
        out[gpu] = _geomean(per_type[gpu]) / v100_over_a100
    return out

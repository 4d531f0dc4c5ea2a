"""Every real kernel source as one table: what the kernel model learns from and is checked on.

Why a module of its own: the sources live side by side (:mod:`predictor.emulator.devices.kernel_data` for
NeuSight and the ETS traces, :mod:`predictor.emulator.devices.kernel_sources` for DeepBench and Vidur,
:mod:`predictor.emulator.devices.kernelbench` for KernelBench level 1), and the fit, the validation and
the experiments all want them together, with the same exclusions.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from predictor.emulator.devices import kernel_sources, kernelbench
from predictor.emulator.devices.kernel_data import COLUMNS, drop_implausible, load_ets, load_neusight
from predictor.emulator.devices.specs import spec_sheets

SOURCES = ("neusight", "ets", "deepbench", "vidur", "kernelbench")


def load_all(calibration_dir: str | Path, ets_dir: str | Path | None, specs: dict | None = None,
             sources: tuple[str, ...] = SOURCES, kernelbench_cache: Path | None = None,
             progress: bool = False) -> pd.DataFrame:
    """Every real kernel source in ``sources`` as one table: NeuSight, the plausible ETS trace rows
    (when ``ets_dir`` is given), DeepBench and Vidur (:mod:`predictor.emulator.devices.kernel_sources`) and
    KernelBench level 1 (:mod:`predictor.emulator.devices.kernelbench`, captures cached in
    ``kernelbench_cache``). ``attrs``: ``implausible`` ETS rows, ``sources`` rows per source."""
    root = Path(calibration_dir)
    frames = []
    implausible = 0
    if "neusight" in sources:
        frames.append(load_neusight(root / "neusight" / "kernels"))
    if "ets" in sources and ets_dir is not None:
        ets = drop_implausible(load_ets(ets_dir), specs or spec_sheets())
        implausible = ets.attrs["implausible"]
        frames.append(ets)
    extra = tuple(s for s in sources if s in kernel_sources.SOURCES)
    if extra:
        frames.append(kernel_sources.load_sources(root, extra)[list(COLUMNS)])
    if "kernelbench" in sources:
        timings = kernelbench.load_timings(root / "kernelbench", ("level1",))
        seqs, _ = kernelbench.sequences(root / "kernelbench", timings, kernelbench_cache, progress)
        frames.append(kernelbench.kernel_rows(timings, seqs))
    out = pd.concat(frames, ignore_index=True)
    out.attrs["implausible"] = implausible
    out.attrs["sources"] = out.groupby("dataset").size().to_dict()
    return out

"""GPU type names, aliases and the pinned relative speeds (recomputed from the calibration data)."""

from __future__ import annotations

import pytest

from predictor.common.gpus import UnknownGpuTypeError, canonical_gpu_type, derive_relative_iteration_time, speed


def test_gpu_aliases_and_unknown_names():
    assert canonical_gpu_type("GTX2080Ti") == "RTX2080Ti"
    assert canonical_gpu_type("v100") == "V100"
    assert canonical_gpu_type("V100M32") == "V100M32"
    with pytest.raises(UnknownGpuTypeError, match="unknown GPU type 'H900'"):
        canonical_gpu_type("H900")


def test_pinned_speeds_match_the_calibration_data(shared_dir):
    calib = shared_dir / "calibration"
    if not (calib / "gavel_physical_cluster_throughputs.json").exists():
        pytest.skip(f"calibration data not found under {calib}: set ETS_SHARED")
    derived = derive_relative_iteration_time(calib)
    for gpu, value in derived.items():
        assert speed(gpu).relative_time == pytest.approx(value, abs=0.0006), gpu
    # the inversion in Gavel's table survives the averaging: P100 is slower than V100 on average
    assert derived["P100"] > 1.0 and derived["A100"] < 1.0 < derived["T4"]

"""The tiny test traces (tests.predictor.ets_data) on several emulated GPUs: identical op
sequences, kernel times and gaps from each device's prior parameters (the roofline: test data must
not move when the shipped kernel model is refitted), for cross-device tests."""

from __future__ import annotations

from functools import lru_cache

import pandas as pd

from predictor.emulator.devices.specs import prior_params
from predictor.emulator.devices.timing import emulate
from tests.predictor.ets_data import tiny_traces

GPUS = ("T4", "P100", "V100")


@lru_cache(maxsize=1)
def multi_device_traces() -> pd.DataFrame:
    """Every tiny config on every GPU of :data:`GPUS` (devices "emulated:T4", ...)."""
    params = prior_params()
    parts = [emulate(trace, gpu, params, seed=1, model=None)
             for _, trace in tiny_traces().groupby("config_id", sort=True) for gpu in GPUS]
    return pd.concat(parts, ignore_index=True)

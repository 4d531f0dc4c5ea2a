"""Small emulated execution traces for predictor tests: a few tiny zoo configs of several
families, captured on the meta device and timed by an emulated T4 with the prior parameters."""

from __future__ import annotations

from functools import lru_cache

import pandas as pd

from predictor.emulator.capture.opseq import capture
from predictor.emulator.devices.specs import prior_params
from predictor.emulator.devices.timing import emulate
from predictor.emulator.zoo.config import ModelConfig

TINY = [("alexnet", "alexnet", b, 64) for b in (2, 4, 8)] + \
       [("resnet", "resnet18", b, 32) for b in (2, 4, 8)] + \
       [("squeezenet", "squeezenet1_1", b, 32) for b in (2, 4)] + \
       [("vgg", "vgg11", b, 32) for b in (2, 4)] + \
       [("mobilenet_v2", "mobilenet_v2", b, 32) for b in (2, 4)]


@lru_cache(maxsize=1)
def tiny_traces() -> pd.DataFrame:
    params = prior_params()
    parts = []
    for family, model, batch, size in TINY:
        config = ModelConfig(kind="vision", family=family, model=model, batch=batch, input_size=size, num_classes=10)
        parts.append(emulate(capture(config, "meta"), "T4", params, seed=1))
    return pd.concat(parts, ignore_index=True)

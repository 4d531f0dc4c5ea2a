"""Failure models for tests: node failures at a chosen mean interval, drawn from the engine's rng."""

from __future__ import annotations

import math


class RandomNodes:
    """Node failures every ~``mean`` seconds, repaired after 1-60 s (drawn from the engine's rng)."""

    def __init__(self, mean: float):
        self.mean = mean
        self.repair = self
        self.rate_per_gpu_day = 86400.0 / mean / 8  # about right for 8-GPU clusters: MTBF for Young/Daly

    def interval(self, rng, up_gpus):
        return float(rng.exponential(self.mean)) if up_gpus else math.inf

    def sample(self, rng, n):
        return rng.uniform(1.0, 60.0, n)

    def describe(self):
        return {}

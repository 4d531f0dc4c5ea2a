"""Execution traces and iteration-time prediction: ETS and its baselines, the emulated GPUs they
learn from, and the iteration-time tables the simulator reads.

Three rooms, top to bottom (checked by import-linter, docs/architecture.md): the predictors at
this package's root — the command line of ``ets`` (:mod:`predictor.cli`), the bridge to the
simulator (:mod:`~predictor.tables`, :mod:`~predictor.checkpoints`, :mod:`~predictor.memory`,
:mod:`~predictor.prediction`) and the methods (:mod:`predictor.methods`, with features,
evaluation, intervals, fine-tuning); :mod:`predictor.emulator`, the ground truth they are judged
against (``collect`` > ``devices`` > ``capture`` > ``zoo``); and :mod:`predictor.common`, the
foundation every package shares (inputs, outputs, the GPU catalogue, families, the trace table,
errors).

To add a method, a GPU or a trace format: docs/extending.md.
"""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("ets-sim")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0+source"

"""Execution traces and iteration-time prediction: ETS and its baselines, the emulated GPUs they
learn from, and the iteration-time tables the simulator reads.

Layers, top to bottom (checked by import-linter, docs/architecture.md): the command line of ``ets``
(:mod:`predictor.cli`); the bridge to the simulator (:mod:`~predictor.tables`,
:mod:`~predictor.checkpoints`, :mod:`~predictor.memory`, :mod:`~predictor.prediction`); the
prediction methods (:mod:`predictor.methods`, with features, evaluation, intervals, fine-tuning);
the emulator (``collect`` > :mod:`~predictor.devices` > :mod:`~predictor.capture` >
:mod:`~predictor.zoo`); and the trace schema and input/output utilities everything shares.

To add a method, a GPU or a trace format: docs/extending.md.
"""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("ets-sim")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0+source"

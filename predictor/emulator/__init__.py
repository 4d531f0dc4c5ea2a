"""The emulator: the simulator's ground truth and the predictors' training data — emulated GPUs
fitted to real kernel measurements (:mod:`~predictor.emulator.devices`), execution-trace capture and
import (:mod:`~predictor.emulator.capture`), the model zoo (:mod:`~predictor.emulator.zoo`), the
collection of trace datasets (:mod:`~predictor.emulator.collect`) and a CPU's measured peaks
(:mod:`~predictor.emulator.peaks`).

Why apart from the predictors: it is what their predictions are judged against, so it imports
none of them (import-linter checks it; docs/architecture.md).
"""

"""The emulated GPUs: kernel times from a model fitted to real kernel measurements, laid on a
host/GPU timeline, so that every GPU type has execution traces and true iteration times.

:mod:`~predictor.emulator.devices.specs` (spec sheets and fitted parameters; every GPU is **emulated**,
fitted to its real kernels, or **spec-derived**), :mod:`~predictor.emulator.devices.timing` (one op
sequence on one GPU), :mod:`~predictor.emulator.devices.kernels` and :mod:`~predictor.emulator.devices.problems`
(the learned kernel model and what each op runs), the real data it is fitted and checked on
(``kernel_data``, ``kernel_sources``, ``measurements``, ``throughput_sets``, ``kernelbench``,
``neusight_ops``), the fit itself (``calibrate``) and its out-of-sample check (``validate``).
This is the emulator layer of ``predictor``: the methods sit above it and never the other way
round (docs/architecture.md).

To add a GPU: its spec sheet in ``predictor/common/gpu_catalog/`` (docs/extending.md).
"""

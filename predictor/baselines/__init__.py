"""Baseline predictors the paper compares ETS against, on the same data, splits and metrics.

* :mod:`predictor.baselines.opbased` — per-op duration regression (no gaps), summed: the ETS
  authors' "operator-based" comparison.
* :mod:`predictor.baselines.habitat` — Habitat-style cross-device prediction from a trace measured
  on a source device: wave scaling for kernel-alike ops, MLPs for kernel-varying ops, the source's
  framework overhead carried over unchanged.
* :mod:`predictor.baselines.dnnperf` — DNNPerf-style graph neural network over the training
  step's computation graph, regressing the iteration time.

Every predictor offers ``iteration_times(traces)``, ``save(path)``, ``device``, ``history`` and
``split``; the per-op ones also ``predict_ops(traces)``. :mod:`predictor.methods` trains and loads
any of them by name.
"""

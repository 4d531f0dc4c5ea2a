"""The discrete-event simulator of a heterogeneous GPU cluster: jobs arrive, a policy plans with
predicted run times, the engine advances with true ones.

Where things are: :mod:`~simulator.engine` (the SimPy event loop: arrivals, completions, the
policy's decisions), :mod:`~simulator.preemption` (its subclass for preemptive policies — SRTF,
Tiresias, Gavel: rounds, suspended jobs keeping their progress, restart costs),
:mod:`~simulator.failures` (jobs and nodes that fail), :mod:`~simulator.communication` (what a
multi-GPU job's placement costs it), :mod:`~simulator.cluster` (GPU types and nodes), :mod:`~simulator.allocation`
(which GPUs a placed job holds), :mod:`~simulator.timing` (true and predicted seconds per job and
GPU type, from the iteration-time tables of :mod:`predictor.tables`), :mod:`~simulator.metrics`
(JCT, queueing, tardiness, utilisation), :mod:`~simulator.run` (one run: bind a trace, simulate,
write its files), :mod:`~simulator.sweep` (many runs), the command lines (:mod:`~simulator.cli`,
``cli_sweep``) and plots (``plots``, ``timeline``).

To add a policy: :mod:`policies` (the simulator only calls :class:`policies.base.Policy`); a trace
format: :mod:`traces`; a predictor: :data:`simulator.timing.MODEL_PREDICTORS` follows the method
registry (:mod:`predictor.methods`). Step by step: docs/extending.md.
"""

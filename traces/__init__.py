"""Job traces: what arrives when, asking for how many GPUs of which kind, for how long.

Loaders of the public traces (:mod:`~traces.philly`, :mod:`~traces.pai`, :mod:`~traces.itp`,
:mod:`~traces.hydra_cases`, :mod:`~traces.alibaba2023`), of peers' traces (:mod:`~traces.generic`:
any job table of documented columns; :mod:`~traces.gavel`: Gavel's own format) and the synthetic
workloads fitted to them (:mod:`~traces.synthetic`)
all produce the one job table of :mod:`~traces.schema`; :mod:`~traces.binding` binds each job to
a model config of the workload set (``traces/workloads/``), whose iteration times the simulator looks
up; :mod:`~traces.deadlines` and :mod:`~traces.seeding` give deadlines and the seeded draws.

To add a trace format: a loader returning the schema's table and its
:class:`~traces.registry.TraceKind` entry in :mod:`~traces.registry` (``--trace KIND:PATH`` and its
help follow); errors name the file, row and field (:class:`predictor.common.inputs.LocatedError`).
"""

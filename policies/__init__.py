"""Scheduling policies: given the waiting jobs, the free GPUs and every job's predicted run time on
every GPU type (a read-only :class:`policies.base.SchedulerView`), decide what starts where.

Each policy is one module beside the others: non-preemptive (``fifo``, ``sjf``, ``edf``,
``allox``, ``hydra``) and preemptive in rounds (``srtf``, ``tiresias``, ``gavel``: subclasses of
:class:`~policies.preemptive.PreemptivePolicy`, which may also suspend running jobs at a round);
:mod:`~policies.registry` is the one list the command line, sweeps and tests read, with the
``NAME[:key=value,...]`` options syntax (:mod:`~policies.options`).

To add one: a module with a :class:`~policies.base.Policy` subclass, its entry in
:data:`policies.registry.POLICIES` (factory and one-line help), and tests (docs/extending.md).
"""

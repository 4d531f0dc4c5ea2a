"""The foundation every package stands on: reading strangers' files within limits
(:mod:`~predictor.common.inputs`), writing results whole (:mod:`~predictor.common.outputs`), the
one GPU catalogue (:mod:`~predictor.common.gpus`), model families, the execution-trace table and
the one-line error every command line prints.

Why a room of its own: the simulator, the policies and the trace loaders need these and nothing
of the predictors; keeping them here, importing nothing above, lets each of those stand on
``predictor`` without standing on its methods or its emulator (docs/architecture.md).
"""

"""Capturing and importing execution traces: one training iteration as its ordered operators, with
shapes, FLOPs and bytes (:mod:`~predictor.emulator.capture.costs`), from the meta device (nothing timed),
torch.profiler on a CPU or GPU (:mod:`~predictor.emulator.capture.profile`), a user's model file
(:mod:`~predictor.emulator.capture.model_file`, run in a child process), or another tool's files —
Kineto JSON, Nsight Systems SQLite, the ETS authors' CSVs (:mod:`~predictor.emulator.capture.importers`).

To add a trace format: a reader returning the trace table of :mod:`predictor.common.op_trace` and its
entry in :data:`predictor.emulator.capture.importers.IMPORTERS` (``ets import KIND`` and its help follow).
"""

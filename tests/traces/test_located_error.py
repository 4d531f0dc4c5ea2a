"""Job traces and execution traces report bad content alike: one located error, file:line: field."""

from __future__ import annotations

from predictor.common.inputs import InputError, LocatedError
from predictor.common.op_trace import OpTraceFormatError


def test_both_trace_errors_are_one_located_error_with_one_message_shape():
    job = LocatedError("jobs.csv", "not a number: 'x'", line=7, field="num_gpus")
    ops = OpTraceFormatError("T4.parquet", "not a number: 'x'", row=7, field="num_gpus")
    assert isinstance(job, LocatedError) and isinstance(ops, LocatedError) and isinstance(job, InputError)
    assert str(job) == "jobs.csv:7: field 'num_gpus': not a number: 'x'"
    assert str(ops) == "T4.parquet:7: field 'num_gpus': not a number: 'x'"
    assert (ops.row, ops.line, ops.field, ops.path) == (7, 7, "num_gpus", "T4.parquet")
    assert str(LocatedError("jobs.csv", "empty file")) == "jobs.csv: empty file"

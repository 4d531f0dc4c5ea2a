"""A trace's recorded placement (``shape``): kept from Philly's RFold CSV and a generic csv,
checked against the job's GPU count with a one-line error naming file, line and field."""

from __future__ import annotations

import pytest

from predictor.common.inputs import LocatedError
from traces.registry import load_trace
from traces.schema import parse_shape

PHILLY_HEADER = "#job id,arrival time (sec),topology,shape,size,duration (sec)\n"


def test_philly_keeps_each_jobs_shape(tmp_path):
    path = tmp_path / "philly.csv"
    path.write_text(PHILLY_HEADER + "0,0.0,CLOS,1,1,10.0\n1,5.0,CLOS,8+8,16,20.0\n2,6.0,CLOS,2+2+2+2,8,30.0\n")
    jobs = load_trace(f"philly:{path}").jobs
    assert jobs["shape"].tolist() == ["1", "8+8", "2+2+2+2"]
    assert [parse_shape(s) for s in jobs["shape"]] == [(1,), (8, 8), (2, 2, 2, 2)]


def test_a_philly_shape_that_does_not_add_up_names_the_line(tmp_path):
    path = tmp_path / "philly.csv"
    path.write_text(PHILLY_HEADER + "0,0.0,CLOS,1,1,10.0\n1,5.0,CLOS,8+4,16,20.0\n")
    with pytest.raises(LocatedError, match=r"philly.csv:3: field 'shape': shape '8\+4' adds up to 12 GPUs, but the job "
                                         r"asks for 16"):
        load_trace(f"philly:{path}")


def test_a_generic_csv_may_record_shapes_and_leave_some_empty(tmp_path):
    path = tmp_path / "jobs.csv"
    path.write_text("job_id,submit_s,num_gpus,duration_s,shape\na,0,8,100,4+4\nb,1,2,100,\n")
    assert load_trace(f"csv:{path}").jobs["shape"].tolist() == ["4+4", ""]
    path.write_text("job_id,submit_s,num_gpus,duration_s,shape\na,0,8,100,4+four\n")
    with pytest.raises(LocatedError, match="jobs.csv:2: field 'shape': shape '4\\+four' is not GPUs per server"):
        load_trace(f"csv:{path}")

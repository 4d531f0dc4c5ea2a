"""How profiler events nest into ops (the raw-record pass of predictor.emulator.capture.profile)."""

from dataclasses import dataclass

import torch

from predictor.emulator.capture.profile import _nest


@dataclass
class Raw:
    """The few accessors of a Kineto raw record that the nesting reads."""

    label: str
    start: int  # ns
    end: int
    tid: int = 1

    def name(self):
        return self.label

    def is_async(self):
        return False

    def device_type(self):
        return torch.autograd.DeviceType.CPU

    def start_ns(self):
        return self.start

    def end_ns(self):
        return self.end

    def start_thread_id(self):
        return self.tid


def tree(roots):
    return [(e.name, tree(e.cpu_children)) for e in roots]


def test_children_lie_inside_their_parent_on_the_same_thread():
    got = _nest([Raw("step", 0, 100), Raw("aten::zeros", 10, 20), Raw("aten::empty", 11, 12),
                 Raw("aten::relu", 20, 30), Raw("other thread", 15, 16, tid=2)])
    assert tree(got) == [("step", [("aten::zeros", [("aten::empty", [])]), ("aten::relu", [])]),
                         ("other thread", [])]


def test_a_zero_length_last_call_at_its_parents_end_is_its_child():
    # what the profiler recorded for `aten::zeros` of an LSTM's initial state on a CPU: its
    # `zero_` got no time and starts where `zeros` ends; as a root it was an extra op in some
    # iterations only
    got = _nest([Raw("step", 0, 100), Raw("aten::zeros", 10, 20), Raw("aten::empty", 11, 12),
                 Raw("aten::zero_", 20, 20), Raw("aten::lstm", 25, 90)])
    assert tree(got) == [("step", [("aten::zeros", [("aten::empty", []), ("aten::zero_", [])]), ("aten::lstm", [])])]


def test_an_op_that_starts_where_the_previous_ends_and_takes_time_is_its_sibling():
    got = _nest([Raw("step", 0, 100), Raw("aten::add", 10, 20), Raw("aten::mul", 20, 21)])
    assert tree(got) == [("step", [("aten::add", []), ("aten::mul", [])])]

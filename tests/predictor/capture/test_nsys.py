"""Nsight Systems SQLite importer: fixtures built here from the documented export schema."""

from __future__ import annotations

import sqlite3

import pytest

from predictor.common.op_trace import COLUMNS, OpTraceFormatError
from predictor.emulator.capture import nsys

PID_A, PID_B = 100, 200
MAIN = PID_A * 0x1000000 + 1  # globalTid = pid << 24 | tid
AUTOGRAD = PID_A * 0x1000000 + 2
B_MAIN = PID_B * 0x1000000 + 1
T = 1_000_000  # start of iteration 1 (ns)

# Documented columns (nsys SQLite export schema reference; tables are created lazily).
SCHEMA = """
CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (
    start INT NOT NULL, end INT NOT NULL, deviceId INT NOT NULL, contextId INT NOT NULL,
    streamId INT NOT NULL, correlationId INT, globalPid INT, demangledName INT NOT NULL,
    shortName INT NOT NULL, gridX INT NOT NULL, gridY INT NOT NULL, gridZ INT NOT NULL,
    blockX INT NOT NULL, blockY INT NOT NULL, blockZ INT NOT NULL, staticSharedMemory INT NOT NULL,
    dynamicSharedMemory INT NOT NULL, localMemoryPerThread INT NOT NULL,
    localMemoryTotal INT NOT NULL, registersPerThread INT NOT NULL);
CREATE TABLE CUPTI_ACTIVITY_KIND_RUNTIME (
    start INT NOT NULL, end INT NOT NULL, eventClass INT NOT NULL, globalTid INT,
    correlationId INT, nameId INT NOT NULL, returnValue INT NOT NULL, callchainId INT);
CREATE TABLE NVTX_EVENTS (
    start INT NOT NULL, end INT, eventType INT NOT NULL, rangeId INT, category INT, color INT,
    text TEXT, globalTid INT, endGlobalTid INT, textId INT REFERENCES StringIds(id), domainId INT);
"""


class Fixture:
    """A small nsys export: helpers insert NVTX ranges and kernel launches."""

    def __init__(self, path, *, text_ids: bool = False):
        self.path = path
        self.con = sqlite3.connect(path)
        self.con.executescript(SCHEMA)
        self.ids: dict[str, int] = {}
        self.text_ids = text_ids

    def sid(self, value: str) -> int:
        if value not in self.ids:
            self.ids[value] = len(self.ids) + 1
            self.con.execute("INSERT INTO StringIds VALUES (?, ?)", (self.ids[value], value))
        return self.ids[value]

    def range(self, tid: int, start: int, end: int, text: str, event_type: int = 59) -> None:
        text_col, text_id = (None, self.sid(text)) if self.text_ids else (text, None)
        self.con.execute(
            "INSERT INTO NVTX_EVENTS (start, end, eventType, text, globalTid, textId, domainId) "
            "VALUES (?, ?, ?, ?, ?, ?, 0)", (start, end, event_type, text_col, tid, text_id))

    def launch(self, tid: int, corr: int, rstart: int, rend: int, kstart: int, kend: int,
               kernel: str = "void at::native::vectorized_elementwise_kernel<4, float>(int)") -> None:
        pid = tid // 0x1000000 % 0x1000000
        self.con.execute(
            "INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (?, ?, 1, ?, ?, ?, 0, 0)",
            (rstart, rend, tid, corr, self.sid("cudaLaunchKernel_v7000")))
        name = self.sid(kernel)
        self.con.execute(
            "INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES "
            "(?, ?, 0, 1, 7, ?, ?, ?, ?, 1, 1, 1, 128, 1, 1, 0, 0, 0, 0, 32)",
            (kstart, kend, corr, pid * 0x1000000, name, name))

    def gpu(self, name: str = "Tesla T4") -> None:
        self.con.execute("CREATE TABLE TARGET_INFO_GPU (id INT, name TEXT, busLocation TEXT)")
        self.con.execute("INSERT INTO TARGET_INFO_GPU VALUES (0, ?, '0000:00:04.0')", (name,))

    def close(self):
        self.con.commit()
        self.con.close()
        return self.path


def training_file(path, *, iteration_ranges: str = "ets", text_ids: bool = False, gpu: bool = True):
    """Two iterations of process A (iteration 1 detailed below) plus process B reusing A's
    correlation ids inside the same time window (proves the pid part of the join)."""
    f = Fixture(path, text_ids=text_ids)
    if iteration_ranges == "ets":
        iter_text = "layer:model=resnet18, batch=8, h=32, w=32, dtype=float32, iter={}"
    elif iteration_ranges == "step":
        iter_text = "ProfilerStep#{}"
    else:
        iter_text = None
    # iteration 0: one forward op
    if iter_text:
        f.range(MAIN, 0, 900_000, iter_text.format(0))
    f.range(MAIN, 1_000, 50_000, "aten::conv2d, seq = 1, sizes = [[4, 3, 16, 16], [16, 3, 3, 3], []]")
    f.launch(MAIN, 20, 2_000, 6_000, 10_000, 17_000)
    # iteration 1
    if iter_text:
        f.range(MAIN, T, T + 900_000, iter_text.format(1))
    # forward: conv2d (2 kernels below nested aten ranges), relu, linear (no sizes)
    f.range(MAIN, T + 1_000, T + 20_000,
            "aten::conv2d, seq = 10, sizes = [[8, 3, 32, 32], [16, 3, 3, 3], [16]]")
    f.range(MAIN, T + 2_000, T + 19_000, "aten::convolution, seq = 10")
    f.range(MAIN, T + 3_000, T + 18_000, "aten::cudnn_convolution, seq = 10")
    f.launch(MAIN, 1, T + 4_000, T + 9_000, T + 10_000, T + 30_000,
             "void implicit_convolve_sgemm<float>(int)")
    f.launch(MAIN, 2, T + 11_000, T + 14_000, T + 31_000, T + 36_000)
    f.range(MAIN, T + 25_000, T + 40_000, "aten::relu, seq = 11, sizes = [[8, 16, 32, 32]]")
    f.launch(MAIN, 3, T + 26_000, T + 30_000, T + 40_000, T + 50_000)
    f.range(MAIN, T + 45_000, T + 60_000, "aten::linear, seq = 12")
    f.launch(MAIN, 4, T + 46_000, T + 49_000, T + 52_000, T + 60_000)
    # backward on the autograd thread
    f.range(AUTOGRAD, T + 100_000, T + 130_000, "autograd::engine::evaluate_function: AddmmBackward0")
    f.range(AUTOGRAD, T + 101_000, T + 129_000, "AddmmBackward0, seq = 12")
    f.range(AUTOGRAD, T + 102_000, T + 128_000, "aten::mm")
    f.launch(AUTOGRAD, 5, T + 103_000, T + 106_000, T + 110_000, T + 122_000)
    f.range(AUTOGRAD, T + 140_000, T + 190_000,
            "autograd::engine::evaluate_function: ConvolutionBackward0")
    f.range(AUTOGRAD, T + 141_000, T + 189_000,
            "ConvolutionBackward0, seq = 10, sizes = [[8, 16, 32, 32], [8, 3, 32, 32], [16, 3, 3, 3]]")
    f.range(AUTOGRAD, T + 142_000, T + 188_000, "aten::convolution_backward, seq = 0")
    f.launch(AUTOGRAD, 6, T + 150_000, T + 152_000, T + 160_000, T + 175_000)
    # update: the optimizer range with 2 kernels
    f.range(MAIN, T + 300_000, T + 400_000, "Optimizer.step#SGD.step")
    f.range(MAIN, T + 301_000, T + 320_000, "aten::_foreach_mul_, seq = 13")
    f.launch(MAIN, 7, T + 302_000, T + 304_000, T + 310_000, T + 313_000)
    f.range(MAIN, T + 321_000, T + 340_000, "aten::_foreach_add_, seq = 13")
    f.launch(MAIN, 8, T + 322_000, T + 325_000, T + 330_000, T + 334_000)
    # process B: same correlation ids 1..3, same window, long API calls and kernels
    f.range(B_MAIN, T + 1_000, T + 200_000, "aten::add, seq = 1")
    for corr in (1, 2, 3):
        f.launch(B_MAIN, corr, T + 5_000 * corr, T + 5_000 * corr + 50_000,
                 T + 500_000 + 1_000 * corr, T + 500_500 + 1_000 * corr)
    if gpu:
        f.gpu()
    return f


EXPECTED = [  # op, phase, duration_us, kernels, cpu_us, gap_us
    ("conv2d", "forward", 25.0, 2, 8.0, 5.0),
    ("relu", "forward", 10.0, 1, 4.0, 2.0),
    ("linear", "forward", 8.0, 1, 3.0, 50.0),
    ("AddmmBackward0", "backward", 12.0, 1, 3.0, 38.0),
    ("ConvolutionBackward0", "backward", 15.0, 1, 2.0, 135.0),
    ("_foreach_mul_", "update", 3.0, 1, 2.0, 17.0),
    ("_foreach_add_", "update", 4.0, 1, 3.0, 0.0),
]


def _rows(df):
    return [(r.op, r.phase, r.duration_us, r.kernels, r.cpu_us, r.gap_us) for r in df.itertuples()]


def test_last_iteration_ops_phases_durations_gaps(tmp_path):
    path = training_file(tmp_path / "run.sqlite").close()
    df = nsys.load(path)
    assert list(df.columns) == list(COLUMNS)
    assert _rows(df) == EXPECTED
    assert list(df["idx"]) == list(range(7))
    assert set(df["config_id"]) == {"nsys:resnet18:1"}
    assert set(df["model"]) == {"resnet18"} and set(df["family"]) == {"resnet"}
    assert set(df["device"]) == {"Tesla T4"}
    assert set(df["batch"]) == {8} and set(df["input_size"]) == {32} and set(df["dtype"]) == {"float32"}
    assert df["input_shapes"].iloc[0] == "[[8,3,32,32],[16,3,3,3],[16]]"
    assert df["params"].iloc[0] == [8, 3, 32, 32, 16, 3, 3, 3, 16]
    assert df["input_shapes"].iloc[2] == "[]" and df["params"].iloc[2] == []
    assert df["input_shapes"].iloc[4] == "[[8,16,32,32],[8,3,32,32],[16,3,3,3]]"
    assert (df["flops"] == 0).all() and (df["bytes"] == 0).all()
    assert df["source"].iloc[0].startswith(str(path) + "#NVTX_EVENTS:")
    # iteration time = Σ(duration + gap) = last kernel end − first kernel start
    assert (df["duration_us"] + df["gap_us"]).sum() == pytest.approx((334_000 - 10_000) / 1000)


def test_pid_is_part_of_the_join(tmp_path):
    """Process B reuses correlation ids 1-3 inside the window: a join on correlationId alone would
    double conv2d's and relu's kernels and add B's 50 µs API calls to their cpu_us."""
    path = training_file(tmp_path / "run.sqlite").close()
    df = nsys.load(path)
    assert df["kernels"].sum() == 8
    assert df.set_index("op").loc["conv2d", "cpu_us"] == 8.0
    assert df.set_index("op").loc["relu", "cpu_us"] == 4.0


def test_iteration_selection_and_overrides(tmp_path):
    path = training_file(tmp_path / "run.sqlite").close()
    df = nsys.load(path, iteration=0, model="vgg11", device="V100")
    assert _rows(df) == [("conv2d", "forward", 7.0, 1, 4.0, 0.0)]
    assert set(df["config_id"]) == {"nsys:vgg11:0"}
    assert set(df["family"]) == {"vgg"} and set(df["device"]) == {"V100"}
    with pytest.raises(OpTraceFormatError, match=r"iteration 5 not found.*\[0, 1\]"):
        nsys.load(path, iteration=5)


def test_profiler_steps_text_ids_and_defaults(tmp_path):
    """ProfilerStep#N ranges, NVTX text in StringIds (textId), no ETS metadata, no GPU table."""
    path = training_file(tmp_path / "densenet121_b8.sqlite", iteration_ranges="step",
                         text_ids=True, gpu=False).close()
    df = nsys.load(path)
    assert _rows(df) == EXPECTED
    assert set(df["config_id"]) == {"nsys:densenet121_b8:1"}
    assert set(df["family"]) == {"densenet"} and set(df["device"]) == {"cuda"}
    assert set(df["batch"]) == {8}  # first dim of the first forward op's first input
    assert set(df["input_size"]) == {32} and set(df["dtype"]) == {"float32"}


def test_whole_file_without_iteration_ranges(tmp_path):
    path = training_file(tmp_path / "run.sqlite", iteration_ranges="none").close()
    df = nsys.load(path)
    # process A only (9 kernels against B's 3), both iterations
    assert list(df["op"]) == ["conv2d"] + [e[0] for e in EXPECTED]
    assert set(df["config_id"]) == {"nsys:run:all"}
    assert df["kernels"].sum() == 9
    with pytest.raises(OpTraceFormatError, match="no iteration ranges"):
        nsys.load(path, iteration=1)


def test_autograd_thread_and_unmarked_launches(tmp_path):
    f = training_file(tmp_path / "run.sqlite")
    # AccumulateGrad on the autograd thread: namespaced marker without seq and no "Backward" in it
    f.range(AUTOGRAD, T + 200_000, T + 220_000,
            "autograd::engine::evaluate_function: torch::autograd::AccumulateGrad")
    f.range(AUTOGRAD, T + 201_000, T + 219_000, "torch::autograd::AccumulateGrad")
    f.launch(AUTOGRAD, 9, T + 202_000, T + 204_000, T + 205_000, T + 206_000)
    # a launch inside Optimizer.step under no op marker
    f.launch(MAIN, 10, T + 350_000, T + 351_000, T + 352_000, T + 354_000,
             "void at::native::(anonymous namespace)::multi_tensor_apply_kernel<float>(int)")
    # a launch under the iteration range only: named after its kernel
    f.launch(MAIN, 11, T + 500_000, T + 501_000, T + 502_000, T + 503_000,
             "void at::native::(anonymous namespace)::fill_kernel<float>(int)")
    df = nsys.load(f.close())
    by_op = df.set_index("op")
    assert by_op.loc["fill_kernel", "phase"] == "forward"
    assert by_op.loc["torch::autograd::AccumulateGrad", "phase"] == "backward"
    assert by_op.loc["Optimizer.step#SGD.step", "phase"] == "update"
    assert by_op.loc["Optimizer.step#SGD.step", "duration_us"] == 2.0
    assert list(df["op"])[-2:] == ["Optimizer.step#SGD.step", "fill_kernel"]


def test_marker_parsing():
    text = "aten::conv2d, seq = 12, op_id = 3, sizes = [[1, 2], []], input_op_ids = [(1,0)]"
    assert nsys._marker(text) == ("aten::conv2d", [[1, 2], []])
    assert nsys._marker("ConvolutionBackward0, seq = 7") == ("ConvolutionBackward0", None)
    assert nsys._marker("aten::add_, sizes = [[3], [3]]") == ("aten::add_", [[3], [3]])
    for other in ("Optimizer.step#SGD.step", "layer:model=x, iter=1", "ProfilerStep#3",
                  "autograd::engine::evaluate_function: MmBackward0"):
        assert nsys._marker(other) is None


# -- errors -----------------------------------------------------------------------------------

def test_not_sqlite(tmp_path):
    path = tmp_path / "run.sqlite"
    path.write_text("op,dir\n1,2\n")
    with pytest.raises(OpTraceFormatError, match="not an SQLite file") as err:
        nsys.load(path)
    assert str(path) in str(err.value)


def test_corrupt_sqlite(tmp_path):
    path = tmp_path / "run.sqlite"
    path.write_bytes(b"SQLite format 3\x00" + b"\xff" * 200)
    with pytest.raises(OpTraceFormatError, match="cannot read the SQLite export"):
        nsys.load(path)


def test_missing_file(tmp_path):
    with pytest.raises(OpTraceFormatError, match="no such file"):
        nsys.load(tmp_path / "absent.sqlite")


def test_no_kernel_table(tmp_path):
    path = tmp_path / "run.sqlite"
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT NOT NULL)")
    con.close()
    with pytest.raises(OpTraceFormatError, match="file has no kernel table: was the profile captured "
                                               "with CUDA tracing") as err:
        nsys.load(path)
    assert str(path) in str(err.value) and "CUPTI_ACTIVITY_KIND_KERNEL" in str(err.value)


def test_no_nvtx_ranges(tmp_path):
    f = Fixture(tmp_path / "run.sqlite")
    f.launch(MAIN, 1, 0, 10, 20, 30)
    f.range(MAIN, 0, 0, "a mark", event_type=34)  # a marker, not a push/pop range
    path = f.close()
    with pytest.raises(OpTraceFormatError, match="no NVTX push/pop ranges") as err:
        nsys.load(path)
    assert "NVTX_EVENTS.eventType" in str(err.value) and str(path) in str(err.value)
    con = sqlite3.connect(path)
    con.execute("DROP TABLE NVTX_EVENTS")
    con.commit()
    con.close()
    with pytest.raises(OpTraceFormatError, match="no NVTX push/pop ranges"):
        nsys.load(path)


def test_kernel_name_missing_from_string_ids(tmp_path):
    f = training_file(tmp_path / "run.sqlite")
    f.con.execute("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET demangledName = 999 WHERE correlationId = 4")
    path = f.close()
    with pytest.raises(OpTraceFormatError, match="kernel name id 999 is not in StringIds") as err:
        nsys.load(path)
    assert err.value.field == "CUPTI_ACTIVITY_KIND_KERNEL.demangledName"
    assert str(path) in str(err.value)


def test_no_kernels_in_selected_iteration(tmp_path):
    f = training_file(tmp_path / "run.sqlite")
    f.range(MAIN, 2 * T, 2 * T + 500_000,
            "layer:model=resnet18, batch=8, h=32, w=32, dtype=float32, iter=2")
    path = f.close()
    with pytest.raises(OpTraceFormatError, match=r"no kernels in the selected iteration \(2\)") as err:
        nsys.load(path)
    assert "CUPTI_ACTIVITY_KIND_KERNEL" in str(err.value)
    assert len(nsys.load(path, iteration=1)) == 7

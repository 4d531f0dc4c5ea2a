"""The computation graph rebuilt from a trace: hand-checkable op sequences and the graph invariants."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from predictor.methods.graph import EDGE_KINDS, build_graph, edge_features, forward_output_shape
from tests.predictor.ets_data import tiny_traces


def trace(rows: list[tuple], dtype: str = "float32") -> pd.DataFrame:
    """A one-config trace from (op, phase, input shapes, params) rows."""
    return pd.DataFrame({"config_id": "t", "idx": range(len(rows)), "op": [r[0] for r in rows],
                         "phase": [r[1] for r in rows], "input_shapes": [json.dumps(r[2]) for r in rows],
                         "params": [list(r[3]) for r in rows], "dtype": dtype})


def edges(graph) -> set[tuple[int, int, str, float]]:
    return {(int(s), int(d), EDGE_KINDS[k], float(b))
            for (s, d), k, b in zip(graph.edge_index.T, graph.edge_kind, graph.edge_bytes)}


def reachable_from_first(graph) -> np.ndarray:
    seen = np.zeros(graph.num_nodes, dtype=bool)
    seen[0] = True
    order = np.argsort(graph.edge_index[0], kind="stable")  # sources in execution order: one sweep suffices
    for s, d in graph.edge_index.T[order]:
        seen[d] |= seen[s]
    return seen


def test_a_conv_relu_pool_chain_links_each_op_to_its_producer():
    g = build_graph(trace([
        ("conv2d", "forward", [[2, 3, 8, 8], [4, 3, 3, 3], [4]], [2, 3, 8, 8, 4, 3, 3, 3, 4, 1, 1, 1, 1, 1, 1, 1]),
        ("relu_", "forward", [[2, 4, 8, 8]], [2, 4, 8, 8]),
        ("max_pool2d", "forward", [[2, 4, 8, 8]], [2, 4, 8, 8, 2, 2, 2, 2, 0, 0, 1, 1]),
        ("flatten", "forward", [[2, 4, 4, 4]], [2, 4, 4, 4, 1, -1]),
        ("linear", "forward", [[2, 64], [10, 64], [10]], [2, 64, 10, 64, 10]),
    ]))
    act, pooled = 2 * 4 * 8 * 8 * 4, 2 * 4 * 4 * 4 * 4  # elements x 4 bytes
    assert edges(g) == {(0, 1, "data", act), (1, 2, "data", act), (2, 3, "data", pooled), (3, 4, "data", pooled)}
    assert g.num_nodes == 5


def test_a_residual_add_links_to_both_producers():
    s = [2, 4, 8, 8]
    g = build_graph(trace([
        ("relu_", "forward", [s], s),
        ("conv2d", "forward", [s, [8, 4, 1, 1]], [*s, 8, 4, 1, 1, 1, 1, 0, 0, 1, 1, 1]),  # -> [2, 8, 8, 8]
        ("conv2d", "forward", [[2, 8, 8, 8], [4, 8, 1, 1]], [2, 8, 8, 8, 4, 8, 1, 1, 1, 1, 0, 0, 1, 1, 1]),
        ("add", "forward", [s, s], [*s, *s]),
    ]))
    into_add = {(src, kind) for src, dst, kind, _ in edges(g) if dst == 3}
    assert into_add == {(2, "data"), (0, "data")}  # the branch's output and the block input


def test_a_pending_output_is_preferred_over_a_more_recent_consumed_one():
    g = build_graph(trace([
        ("relu", "forward", [[2, 4]], [2, 4]),  # 0: A, shape s = [2, 4]
        ("linear", "forward", [[2, 8], [4, 8]], [2, 8, 4, 8]),  # 1: B, also s; its input has no producer
        ("linear", "forward", [[2, 4], [6, 4]], [2, 4, 6, 4]),  # 2: consumes B
        ("relu", "forward", [[2, 4]], [2, 4]),  # 3: reads A (never consumed), not B (most recent)
    ]))
    assert {(src, dst, kind) for src, dst, kind, _ in edges(g)} == {(0, 1, "sequential"), (1, 2, "data"),
                                                                    (0, 3, "data")}


def test_missing_shapes_fall_back_to_sequential_edges():
    g = build_graph(trace([("conv2d", "forward", [], []), ("relu", "forward", [], []), ("add_", "update", [], [])]))
    assert edges(g) == {(0, 1, "sequential", 0.0), (1, 2, "sequential", 0.0)}


def test_backward_and_update_ops_follow_gradients_and_parameters():
    g = build_graph(trace([
        ("linear", "forward", [[2, 8], [4, 8], [4]], [2, 8, 4, 8, 4]),  # 0 -> [2, 4]
        ("relu", "forward", [[2, 4]], [2, 4]),  # 1
        ("ReluBackward0", "backward", [[2, 4], [2, 4]], [2, 4, 2, 4]),  # 2: pairs with relu
        ("AddmmBackward0", "backward", [[2, 4], [2, 8], [4, 8]], [2, 4, 2, 8, 4, 8]),  # 3: pairs with linear
        ("AccumulateGrad", "backward", [[4, 8]], [4, 8]),  # 4: weight gradient from 3
        ("AccumulateGrad", "backward", [[4]], [4]),  # 5: no producer of [4]: sequential
        ("mul_", "update", [[4, 8]], [4, 8]),  # 6: weight update starts from its gradient
        ("add_", "update", [[4, 8], [4, 8]], [4, 8, 4, 8]),  # 7
        ("mul_", "update", [[4]], [4]),  # 8: bias update
        ("add_", "update", [[4], [4]], [4, 4]),  # 9
    ], dtype="float16"))
    assert edges(g) == {
        (0, 1, "data", 16.0), (1, 2, "forward_backward", 16.0), (2, 3, "data", 16.0),
        (0, 3, "forward_backward", 16.0), (3, 4, "data", 64.0), (4, 5, "sequential", 8.0),
        (4, 6, "grad_update", 64.0), (6, 7, "data", 64.0), (5, 8, "grad_update", 8.0), (8, 9, "data", 8.0)}


def test_same_shaped_parameters_pair_with_gradients_in_reverse():
    p = [[3]]
    g = build_graph(trace([("relu", "forward", [[2, 3]], [2, 3]),
                           ("AccumulateGrad", "backward", p, [3]),  # 1: gradient of the last parameter
                           ("AccumulateGrad", "backward", p, [3]),  # 2: of the first parameter
                           ("mul_", "update", p, [3]), ("add_", "update", [*p, *p], [3, 3]),  # 3-4: first
                           ("mul_", "update", p, [3]), ("add_", "update", [*p, *p], [3, 3])]))  # 5-6: last
    grad_update = {(s, d) for s, d, kind, _ in edges(g) if kind == "grad_update"}
    assert grad_update == {(2, 3), (1, 5)}


@pytest.mark.parametrize("op,shapes,params,expected", [
    ("view", [[2, 3, 4]], [2, 3, 4, 6, -1], (6, 4)),
    ("reshape", [[2, 3, 4]], [2, 3, 4, -1], (24,)),
    ("flatten", [[2, 3, 4, 5]], [2, 3, 4, 5, 1], (2, 60)),
    ("transpose", [[2, 3, 4]], [2, 3, 4, 0, -1], (4, 3, 2)),
    ("permute", [[2, 3, 4]], [2, 3, 4, 2, 0, 1], (4, 2, 3)),
    ("unsqueeze", [[2, 3]], [2, 3, 0], (1, 2, 3)),
    ("squeeze", [[2, 1, 3]], [2, 1, 3, -2], (2, 3)),
    ("select", [[3, 5, 7]], [3, 5, 7, 0, 1], (5, 7)),
    ("expand", [[1, 1, 8]], [1, 1, 8, 4, -1, -1], (4, 1, 8)),
    ("unflatten", [[5, 12]], [5, 12, -1, 3, 4], (5, 3, 4)),
    ("conv2d", [[1, 3, 32, 32], [8, 3, 3, 3]], [1, 3, 32, 32, 8, 3, 3, 3, 2, 2, 1, 1, 1, 1, 1], (1, 8, 16, 16)),
    ("adaptive_avg_pool2d", [[2, 8, 5, 5]], [2, 8, 5, 5, 1, 1], (2, 8, 1, 1)),
    ("matmul", [[2, 5, 6], [6, 7]], [2, 5, 6, 6, 7], (2, 5, 7)),
    ("add", [[1, 5, 6], [4, 5, 6]], [1, 5, 6, 4, 5, 6], (4, 5, 6)),  # broadcasting: the largest input
    ("conv2d", [[1, 3, 32, 32], [8, 3, 3, 3]], [1, 3, 32, 32, 8, 3, 3], (1, 3, 32, 32)),  # truncated params
    ("view", [[2, 3]], [2, 3, 5, 5], (2, 3)),  # sizes that cannot hold the input: the input
])
def test_forward_output_shapes(op, shapes, params, expected):
    assert forward_output_shape(op, [tuple(s) for s in shapes], params) == expected


def test_no_input_shapes_means_no_known_output():
    assert forward_output_shape("cat", [], [1]) is None


def test_every_op_of_real_traces_is_reachable_and_edges_go_forward_in_time():
    traces = tiny_traces()
    graphs = {str(c): build_graph(t) for c, t in traces.groupby("config_id", sort=True)}
    sizes = traces.groupby("config_id").size()
    assert set(graphs) == set(sizes.index)
    for config, g in graphs.items():
        assert g.num_nodes == sizes[config]
        assert (g.edge_index[0] < g.edge_index[1]).all()
        assert reachable_from_first(g).all(), config
        kinds = set(np.asarray(EDGE_KINDS)[g.edge_kind])
        assert {"data", "forward_backward", "grad_update"} <= kinds
        ops = traces[traces["config_id"] == config].sort_values("idx")["op"].to_numpy()
        # every AccumulateGrad hands its gradient to exactly one update run, and vice versa
        grad_sources = g.edge_index[0][g.edge_kind == EDGE_KINDS.index("grad_update")]
        assert sorted(grad_sources) == list(np.flatnonzero(ops == "AccumulateGrad"))


def test_rows_out_of_order_give_the_same_graph():
    one = tiny_traces()
    one = one[one["config_id"] == one["config_id"].iloc[0]]
    a, b = build_graph(one), build_graph(one.iloc[::-1])
    assert np.array_equal(a.edge_index, b.edge_index) and np.array_equal(a.edge_bytes, b.edge_bytes)


def test_edge_features_are_log_bytes_and_a_kind_one_hot():
    g = build_graph(trace([("relu", "forward", [[2, 4]], [2, 4]), ("relu", "forward", [[2, 4]], [2, 4]),
                           ("cat", "forward", [], [1])]))
    f = edge_features(g)
    assert f.shape == (2, 1 + len(EDGE_KINDS))
    assert np.allclose(f[:, 0], np.log1p(g.edge_bytes)) and (f[:, 1:].sum(axis=1) == 1).all()
    assert f[0, 1 + EDGE_KINDS.index("data")] == 1 and f[1, 1 + EDGE_KINDS.index("sequential")] == 1


def test_bad_input_is_refused_with_a_reason():
    with pytest.raises(ValueError, match="empty trace"):
        build_graph(trace([]).astype({"idx": int}))
    two = pd.concat([trace([("relu", "forward", [], [])]), trace([("relu", "forward", [], [])]).assign(config_id="u")])
    with pytest.raises(ValueError, match="one trace, got 2 config_ids"):
        build_graph(two)

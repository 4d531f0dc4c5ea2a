"""The allocation rule on its own, by hand: best fit on one node, else the fewest nodes.

GPU ids are global and contiguous per node: node a (4 GPUs) holds 0-3, node b (2) holds 4-5,
node c (3) holds 6-8; all V100.
"""

from __future__ import annotations

import pytest

from policies.base import PolicyError
from simulator.allocation import ClusterState
from simulator.cluster import Cluster, Node


def state() -> ClusterState:
    return ClusterState(Cluster("t", (Node("a", "V100", 4), Node("b", "V100", 2), Node("c", "V100", 3))))


def test_best_fit_takes_the_fullest_node_that_holds_the_job():
    s = state()
    assert s.allocate(0, 2) == (4, 5)  # node b: exactly 2 free
    assert s.allocate(0, 3) == (6, 7, 8)  # node c: 3 free beats a's 4
    assert s.allocate(0, 1) == (0,)  # only a is left
    assert s.free_by_type.tolist() == [3]
    assert s.gpu_job.tolist() == [-1] * 9  # the engine writes the job ids, not the rule


def test_a_job_no_node_holds_spans_the_fewest_nodes_fullest_first():
    s = state()
    s.allocate(0, 2)  # b full
    assert s.allocate(0, 1) == (6,)  # best fit for one GPU: c (3 free) before a (4); c keeps 7, 8
    assert s.node_free == [4, 0, 2]
    assert s.allocate(0, 5) == (0, 1, 2, 3, 7)  # a's 4, then one of c's two
    with pytest.raises(PolicyError, match="not enough free V100 GPUs for a 2-GPU job"):
        s.allocate(0, 2)


def test_release_gives_the_gpus_back_and_a_pinned_claim_is_checked():
    s = state()
    ids = s.allocate(0, 3)
    s.release(0, ids)
    assert s.node_free == [4, 2, 3] and s.free_by_type.tolist() == [9]
    assert s.claim(0, (1, 5)) == (1, 5)
    with pytest.raises(PolicyError, match="GPU 5 is already busy"):
        s.claim(0, (5,))
    with pytest.raises(PolicyError, match="GPU 9 is not a V100 GPU"):
        s.claim(0, (9,))

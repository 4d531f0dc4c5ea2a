"""Which GPUs a job gets: free GPUs per node and per type, and the allocation rule for gang jobs.

Why its own module: the engine decides *when* jobs start and end; where their GPUs are is this
rule (one node if any node of the type has room, best fit: the fullest such node; otherwise the
fewest nodes), beside the other placement rules' plans (as many nodes as possible; first fit in
node order). Each rule plans (node, GPUs) without taking anything, so a policy's view can ask
what a job would get now; :meth:`ClusterState.take` books a plan.
"""

from __future__ import annotations

from bisect import bisect_left, insort

import numpy as np

from policies.base import DOWN_GPU, IDLE_GPU, PolicyError
from simulator.cluster import Cluster


class ClusterState:
    """Free GPUs per node, and the allocation rule for gang jobs.

    Per-event work is Python-level: node free counts in lists, and per type and free count the
    ascending ids of exactly the nodes with that many free (kept exact at every change, by
    bisection), so best fit is a lookup, not a scan of every node of the type, and a job across
    nodes walks only the nodes it may take. A job's GPUs are taken and given back node by node.
    """

    def __init__(self, cluster: Cluster):
        self.cluster = cluster
        self.types = cluster.gpu_types
        self.type_index = {t: k for k, t in enumerate(self.types)}
        sizes = [n.num_gpus for n in cluster.nodes]
        self.node_type = np.array([self.type_index[n.gpu_type] for n in cluster.nodes])
        self.node_type_list = self.node_type.tolist()
        self.node_free = list(sizes)
        self.type_nodes = [np.flatnonzero(self.node_type == k) for k in range(len(self.types))]
        self.free_by_type = np.array([cluster.gpus_of_type(t) for t in self.types], dtype=np.int64)
        self.total_by_type = self.free_by_type.copy()
        first = np.concatenate([[0], np.cumsum(sizes)])
        self.gpu_node = np.repeat(np.arange(len(cluster.nodes)), sizes)
        self.gpu_node_list = self.gpu_node.tolist()
        self._node_first = first.tolist()  # node i's GPU ids: _node_first[i] .. _node_first[i + 1] - 1
        # free GPU ids per node, kept in descending order so that the lowest ids are handed out first
        self.free_ids: list[list[int]] = [list(range(first[i + 1] - 1, first[i] - 1, -1))
                                          for i in range(len(cluster.nodes))]
        self.gpu_busy = [False] * cluster.total_gpus
        self.gpu_type = self.node_type[self.gpu_node]
        self.gpu_job = np.full(cluster.total_gpus, IDLE_GPU, dtype=np.int64)  # running job per GPU
        self.max_node = max(sizes, default=0)
        self.down: dict[int, list[int]] = {}  # failed node -> its GPU ids, while it is repaired
        # _by_free[type][free]: the ids, ascending, of exactly the type's nodes with that many free
        # GPUs (free > 0: best fit never asks for full nodes); every change of node_free moves its node
        self._by_free: list[list[list[int]]] = [[[] for _ in range(self.max_node + 1)] for _ in self.types]
        for node, free in enumerate(sizes):
            if free:
                self._by_free[self.node_type_list[node]][free].append(node)  # ascending

    def allocate(self, type_k: int, n: int) -> tuple[int, ...]:
        """n GPUs of the type: on one node if any has room (best fit: the node with the fewest free
        GPUs >= n, lowest id among equals), else across nodes; lowest GPU ids first on each node."""
        lists = self._by_free[type_k]
        for free in range(n, self.max_node + 1):
            nodes = lists[free]
            if nodes:  # the usual case, one node: take(best_fit) inlined
                node = nodes[0]
                pool = self.free_ids[node]
                ids = pool[:-n - 1:-1]  # the lowest ids: the pool is in descending order
                del pool[-n:]
                del nodes[0]
                left = free - n
                self.node_free[node] = left
                if left:
                    insort(lists[left], node)
                busy = self.gpu_busy
                for g in ids:
                    busy[g] = True
                self.free_by_type[type_k] -= n
                return tuple(ids)
        return self.take(type_k, self.best_fit(type_k, n))

    def best_fit(self, type_k: int, n: int) -> list[tuple[int, int]]:
        """The (node, GPUs) :meth:`allocate` would take, taking nothing."""
        lists = self._by_free[type_k]
        for free in range(n, self.max_node + 1):
            if lists[free]:
                return [(lists[free][0], n)]  # the usual case: one node
        # Across nodes: the fullest-free first (ties: lower id), as few nodes as possible. No
        # node has n free, so the free counts to walk, downwards, are n - 1 .. 1.
        chosen: list[tuple[int, int]] = []
        need = n
        for free in range(min(n - 1, self.max_node), 0, -1):
            for node in lists[free]:
                take = min(free, need)
                chosen.append((node, take))
                need -= take
                if need == 0:
                    return chosen
        raise PolicyError(f"not enough free {self.types[type_k]} GPUs for a {n}-GPU job")

    def _move(self, lists: list[list[int]], node: int, old: int, new: int) -> None:
        """Node ``node`` (of the type of ``lists``) goes from ``old`` free GPUs to ``new``."""
        self.node_free[node] = new
        if old:
            nodes = lists[old]
            del nodes[bisect_left(nodes, node)]
        if new:
            insort(lists[new], node)

    def take(self, type_k: int, chosen: list[tuple[int, int]]) -> tuple[int, ...]:
        """Take ``chosen`` (node, how many): the lowest free GPU ids of each node."""
        ids: list[int] = []
        for node, take in chosen:
            pool = self.free_ids[node]
            ids.extend(pool[:-take - 1:-1])  # the lowest ids: the pool is in descending order
            del pool[-take:]
        return self._taken(type_k, chosen, ids)

    def allocate_first_fit(self, type_k: int, n: int) -> tuple[int, ...]:
        """n GPUs of the type taken in node order, every free GPU of a node before the next: the
        placement of a scheduler that does not consolidate (Tiresias' rule for jobs it need not)."""
        return self.take(type_k, self.first_fit(type_k, n))

    def allocate_spread(self, type_k: int, n: int) -> tuple[int, ...]:
        """n GPUs of the type on as many nodes as possible (:meth:`spread`)."""
        return self.take(type_k, self.spread(type_k, n))

    def first_fit(self, type_k: int, n: int) -> list[tuple[int, int]]:
        """The (node, GPUs) of :meth:`allocate_first_fit`, taking nothing."""
        return self._walk(type_k, n, [node for node in self.type_nodes[type_k].tolist() if self.node_free[node]], None)

    def spread(self, type_k: int, n: int) -> list[tuple[int, int]]:
        """One GPU per node, the nodes with the most free GPUs first (lower id among equals), round
        after round until n are taken; taking nothing."""
        nodes = sorted((node for node in self.type_nodes[type_k].tolist() if self.node_free[node]),
                       key=lambda node: (-self.node_free[node], node))
        return self._walk(type_k, n, nodes, 1)

    def _walk(self, type_k: int, n: int, nodes: list[int], per_node: int | None) -> list[tuple[int, int]]:
        """(node, GPUs) taking n walking ``nodes`` in order, ``per_node`` at a time (None: all a node has)."""
        if self.free_by_type[type_k] < n:
            raise PolicyError(f"not enough free {self.types[type_k]} GPUs for a {n}-GPU job")
        taken = dict.fromkeys(nodes, 0)
        need = n
        while need:
            for node in nodes:
                room = self.node_free[node] - taken[node]
                take = min(room, need, per_node or room)
                taken[node] += take
                need -= take
                if not need:
                    break
        return [(node, count) for node, count in taken.items() if count]

    def claim(self, type_k: int, gpu_ids: tuple[int, ...]) -> tuple[int, ...]:
        for g in gpu_ids:
            if not 0 <= g < len(self.gpu_node_list) or self.node_type_list[self.gpu_node_list[g]] != type_k:
                raise PolicyError(f"GPU {g} is not a {self.types[type_k]} GPU")
            if self.gpu_busy[g]:
                raise PolicyError(f"GPU {g} is already busy")
        if len(set(gpu_ids)) != len(gpu_ids):
            raise PolicyError(f"GPU ids repeat in {gpu_ids}")
        for g in gpu_ids:
            self.free_ids[self.gpu_node_list[g]].remove(g)
        return self._mark(type_k, list(gpu_ids))

    def _per_node(self, ids) -> dict[int, list[int]]:
        by_node: dict[int, list[int]] = {}
        gpu_node = self.gpu_node_list
        for g in ids:
            node = gpu_node[g]
            if node in by_node:
                by_node[node].append(g)
            else:
                by_node[node] = [g]
        return by_node

    def _mark(self, type_k: int, ids: list[int]) -> tuple[int, ...]:
        """Mark GPUs (already out of their nodes' free pools) busy."""
        return self._taken(type_k, [(node, len(gs)) for node, gs in self._per_node(ids).items()], ids)

    def _taken(self, type_k: int, per_node: list[tuple[int, int]], ids: list[int]) -> tuple[int, ...]:
        """Book GPUs ``ids`` (out of their nodes' pools; ``per_node``: (node, how many)) as busy."""
        lists, node_free, move = self._by_free[type_k], self.node_free, self._move
        for node, count in per_node:
            free = node_free[node]
            move(lists, node, free, free - count)
        busy = self.gpu_busy
        for g in ids:
            busy[g] = True
        self.free_by_type[type_k] -= len(ids)
        return tuple(ids)

    def release(self, type_k: int, ids: tuple[int, ...]) -> None:
        lists, node_free, busy, gpu_job = self._by_free[type_k], self.node_free, self.gpu_busy, self.gpu_job
        if not ids:
            return
        node = self.gpu_node_list[ids[0]]
        if len(ids) == 1:
            g = ids[0]
            pool = self.free_ids[node]
            pool.append(g)
            if len(pool) > 1 and pool[-2] < g:  # keep descending order so pops give low ids
                pool.sort(reverse=True)
            free = node_free[node]
            self._move(lists, node, free, free + 1)
            busy[g] = False
            gpu_job[g] = IDLE_GPU
        else:
            if self._node_first[node] <= min(ids) and max(ids) < self._node_first[node + 1]:
                per_node = {node: ids}  # the usual case: one node
            else:
                per_node = self._per_node(ids)
            for node, gs in per_node.items():
                pool = self.free_ids[node]
                pool.extend(gs)
                pool.sort(reverse=True)  # descending, so pops give low ids
                free = node_free[node]
                self._move(lists, node, free, free + len(gs))
            for g in ids:
                busy[g] = False
                gpu_job[g] = IDLE_GPU
        self.free_by_type[type_k] += len(ids)

    # -- failed nodes ------------------------------------------------------------------------------
    def take_down(self, node: int) -> list[int]:
        """Node ``node`` fails: its GPUs (all idle: the engine has stopped its jobs) leave the free
        and the total counts, so that every policy sees a smaller cluster until :meth:`bring_up`."""
        if node in self.down:
            raise ValueError(f"node {node} is down already")
        ids = self.free_ids[node]
        size = int(self.cluster.nodes[node].num_gpus)
        if len(ids) != size:
            raise ValueError(f"node {node} still runs jobs ({size - len(ids)} GPUs busy)")
        k = self.node_type_list[node]
        self.down[node] = ids
        self.free_ids[node] = []
        self._move(self._by_free[k], node, self.node_free[node], 0)
        for g in ids:
            self.gpu_busy[g] = True
            self.gpu_job[g] = DOWN_GPU
        self.free_by_type[k] -= size
        self.total_by_type[k] -= size
        return ids

    def bring_up(self, node: int) -> None:
        """Node ``node`` is repaired: its GPUs are free again and count in the totals."""
        ids = self.down.pop(node)
        k = self.node_type_list[node]
        self.free_ids[node] = sorted(ids, reverse=True)
        self._move(self._by_free[k], node, self.node_free[node], len(ids))
        for g in ids:
            self.gpu_busy[g] = False
            self.gpu_job[g] = IDLE_GPU
        self.free_by_type[k] += len(ids)
        self.total_by_type[k] += len(ids)

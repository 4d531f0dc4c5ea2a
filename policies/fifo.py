"""FIFO: start jobs strictly in arrival order; the head blocks everything behind it.

Why: the baseline every scheduler is compared with. Heterogeneity-unaware: the head job goes to
the GPU type with the most free GPUs that can hold it (ties: cluster type order), which spreads
load without looking at run times.
"""

from __future__ import annotations

from policies.base import Placement, Policy


class FifoPolicy(Policy):
    name = "fifo"

    def schedule(self, view) -> list[Placement]:
        free = view.free_by_type.tolist()  # Python ints: this runs once per event on 100k-job traces
        types = range(len(free))
        out: list[Placement] = []
        for job in view.waiting:
            need = view.num_gpus[job]
            k = max(types, key=free.__getitem__)  # the first type with the most free GPUs
            if free[k] < need:
                break  # strict FIFO: nothing overtakes the head
            free[k] -= need
            out.append(Placement(job, view.gpu_types[k]))
        return out

"""A rough estimate of the GPU memory one training iteration of a config needs, from its captured
op sequence, to warn when no known GPU could hold it.

Why: the predictors answer for any batch size, so ``ets predict resnet18 --batch 100000``
returns a time for a run that could never start (its activations alone are hundreds of GB).
That is legal input but almost surely a mistake, so ``ets predict`` warns (it does not refuse).

The estimate is the activations autograd keeps for backward — the first input of every
forward op that is not in place (``relu_``, ``add_`` reuse their input's memory) — plus weights,
gradients and optimizer state: the parameters' bytes times 3 (SGD with momentum) or 4 (Adam's
two moments). It leaves out backward temporaries, workspace, the allocator's fragmentation
and CUDA's context, so it errs low (ResNet-50, batch 32, fp32: 3.2 GB) and a config near the
limit may still fail: it is for the gross cases, which it does not miss.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from predictor.common.op_trace import ELEMENT_BYTES, first_input_elements

OPTIMIZER_STATES = {"sgd": 1, "adam": 2, "adamw": 2}  # tensors kept per parameter (SGD: its momentum)


@dataclass(frozen=True)
class MemoryEstimate:
    config_id: str
    activation_bytes: float
    state_bytes: float  # weights, gradients, optimizer state

    @property
    def total_gb(self) -> float:
        return (self.activation_bytes + self.state_bytes) / 1e9


def activation_bytes(trace: pd.DataFrame) -> float:
    """Bytes of the tensors the forward pass of one iteration keeps for backward (see module)."""
    forward = trace[(trace["phase"] == "forward") & ~trace["op"].str.endswith("_")]
    elements = np.array([first_input_elements(s) for s in forward["input_shapes"]], dtype=np.float64)
    sizes = forward["dtype"].map(ELEMENT_BYTES).fillna(4).to_numpy(np.float64)
    return float((elements * sizes).sum())


def estimate(config, trace: pd.DataFrame) -> MemoryEstimate:
    """The estimate for a zoo config and its captured op sequence (the model is built on the meta
    device, which allocates nothing, to count its parameters)."""
    from predictor.emulator.zoo.registry import parameter_count

    parameters = parameter_count(config)
    copies = 2 + OPTIMIZER_STATES.get(config.optimizer, 2)  # weights, gradients, the optimizer's states
    state = parameters * ELEMENT_BYTES.get(config.dtype, 4) * copies
    return MemoryEstimate(config.config_id, activation_bytes(trace), float(state))


def largest_gpu() -> tuple[float, list[str]]:
    """The memory (GB) of the largest known GPU and the GPUs that have it (the spec sheets)."""
    from predictor.emulator.devices.specs import spec_sheets

    most = max(s.memory_gb for s in spec_sheets().values())
    return most, sorted(s.name for s in spec_sheets().values() if s.memory_gb == most)


def too_big_warning(memory: MemoryEstimate) -> str | None:
    """A one-line warning when the estimate exceeds the largest known GPU, else None."""
    most, names = largest_gpu()
    if memory.total_gb <= most:
        return None
    return (f"warning: {memory.config_id} needs about {memory.total_gb:,.0f} GB of GPU memory per iteration "
            f"(activations {memory.activation_bytes / 1e9:,.0f} GB + weights, gradients and optimizer state "
            f"{memory.state_bytes / 1e9:,.1f} GB, estimated from the capture), more than the largest known GPU "
            f"({', '.join(names)}: {most:g} GB): no GPU could run it, so its predicted time is hypothetical; "
            "lower --batch or --size")

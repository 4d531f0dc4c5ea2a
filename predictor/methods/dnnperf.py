"""The DNNPerf baseline ("dnnperf"): a graph neural network over the training step's computation
graph that regresses the iteration time directly.

Why: DNNPerf (Gao et al., ICSE-SEIP'23; predictors.md §3) is the graph-based alternative to ETS's
op sequence — it sees the model's structure (which op feeds which) instead of a window of
neighbouring ops, but predicts only the whole-iteration time, so it has no per-op breakdown.
The paper's pieces and ours:

* **Graph**: ops as nodes, data dependencies as edges. The paper walks the autograd graph; our
  traces keep no tensor identities, so :mod:`predictor.methods.graph` rebuilds the edges from
  op order and shapes. We also add every edge reversed (flagged in its features) so that a node
  hears from its consumers as well as its producers — with a few layers on a directed DAG the
  first ops of a model would otherwise see nothing.
* **Node features**: the paper's op type, hyper-parameters, FLOPs and tensor sizes are what
  :mod:`predictor.features` already encodes for ETS (op-type one-hot, phase, dtype, optimizer,
  batch, input size, log FLOPs, log bytes, the op's ``params``), fitted on the training split;
  reusing it keeps the comparison about the model, not the features.
* **Edge features**: log(1 + tensor bytes) z-scored on the training edges, the edge kind one-hot
  (data, sequential, forward→backward, gradient→update) and the reverse flag.
* **Encoder**: the paper's attention-based node–edge encoder is not public; we stack ``layers``
  attention convolutions that use edge attributes in their attention (``TransformerConv``, or
  ``GATv2Conv`` with ``conv="gatv2"``), each pre-normalised (LayerNorm) and residual.
* **Readout**: sum pooling (scaled by the training graphs' mean op count, so its magnitude stays
  near 1) and mean pooling, concatenated with global features — log batch, log input size, log op
  count (z-scored on the training traces), optimizer and dtype one-hots — into an MLP.
* **Target** (``target_transform="anchored"``, the default; :mod:`predictor.features`): z-scored
  log of the iteration time (Σ duration + gap of the trace) over the sum of its ops' analytical
  times on the device (+1 µs), the node features with the analytical time and clipped to the
  training range — ETS's anchor on the graph model. ``"log"``: the log iteration time alone.
  Iteration times span orders of magnitude over our zoo; the paper regresses the raw time, whose
  loss the largest models would dominate. The loss is the MAE in that space, i.e. roughly the
  relative error.
* **Training** as ETS: Adam, learning rate halved after 2 epochs without improvement, early
  stopping on the validation iteration MRE with the best weights kept, ``patience`` and
  ``max_minutes`` budgets; mini-batches of whole graphs (``torch_geometric.loader.DataLoader``,
  seeded shuffle). Graphs are built once per trace and kept in memory for all epochs.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import ClassVar

import numpy as np
import pandas as pd
import torch
from torch import nn

with warnings.catch_warnings():
    # importing torch_geometric runs torch.jit.script, which this torch deprecates with a
    # FutureWarning on every `ets predict`/`simrun`: the library's to fix, not the user's
    warnings.filterwarnings("ignore", message=r"`torch\.jit\.script` is deprecated", category=FutureWarning)
    from torch_geometric.data import Data
    from torch_geometric.loader import DataLoader
    from torch_geometric.nn import GATv2Conv, TransformerConv, global_add_pool, global_mean_pool

from predictor.common.op_trace import DTYPES
from predictor.emulator.peaks import Peaks
from predictor.features import NORMS, OPTIMIZERS, FeatureSpec, encode, fit_features, optimizer_of
from predictor.methods.base import (
    MAX_MINUTES,
    TrainedPredictor,
    build_weights,
    checked_config,
    checked_model_size,
    checked_spec,
    field_checker,
    stored_fields,
)
from predictor.methods.checks import MAX_HIDDEN
from predictor.methods.graph import EDGE_KINDS, build_graph, edge_features
from predictor.methods.training import EarlyStopping, anchor_peaks, clock, device_rows, fingerprint, sorted_traces

METHOD = "dnnperf"
CONVS = ("transformer", "gatv2")
EDGE_DIM = 1 + len(EDGE_KINDS) + 1  # log bytes, kind one-hot, reversed flag
GLOBAL_DIM = 3 + len(OPTIMIZERS) + len(DTYPES)  # log batch, log input size, log ops, one-hots
BREAKDOWN = ("pred_duration_us", "pred_gap_us", "pred_forward_us", "pred_backward_us", "pred_update_us")


@dataclass
class DnnPerfConfig:
    hidden: int = 64
    layers: int = 3
    heads: int = 4
    conv: str = "transformer"  # transformer | gatv2
    lr: float = 2e-3
    batch_size: int = 8  # graphs per mini-batch
    max_epochs: int = 300
    patience: int = 20
    max_minutes: float = MAX_MINUTES
    seed: int = 0
    top_k: int = 25  # op types with their own one-hot slot (predictor.features)
    norm: str = "global"  # node-feature normalisation (predictor.features): global | per-op
    target_transform: str = "anchored"  # log of the iteration time over its ops' analytical times, or "log"

    RANGES: ClassVar[dict[str, tuple]] = {"heads": (1, MAX_HIDDEN), "conv": CONVS, "norm": NORMS,
                                          "target_transform": ("anchored", "log")}


@dataclass
class Scalers:
    """Normalisation fitted on the training split (besides the FeatureSpec of the nodes)."""

    edge_mean: float = 0.0  # log1p(tensor bytes)
    edge_std: float = 1.0
    global_mean: list[float] = field(default_factory=lambda: [0.0, 0.0, 0.0])  # log batch, input, ops
    global_std: list[float] = field(default_factory=lambda: [1.0, 1.0, 1.0])
    target_mean: float = 0.0  # log iteration time (µs; anchored: over the analytical time)
    target_std: float = 1.0
    node_scale: float = 1.0  # mean op count of the training graphs (sum-pool scale)


def checked_scalers(data, check) -> Scalers:
    """The stored :class:`Scalers`, each finite, the standard deviations and node scale positive."""
    data = check.mapping(data, "")
    foreign = sorted(set(data) - set(Scalers.__dataclass_fields__))
    if foreign:
        raise check.fail(foreign[0], "is not a scaler of this method")
    defaults = Scalers()
    value = {name: data.get(name, getattr(defaults, name)) for name in Scalers.__dataclass_fields__}
    return Scalers(check.number(value["edge_mean"], "edge_mean"), check.number(value["edge_std"], "edge_std",
                                                                               positive=True),
                   check.numbers(value["global_mean"], "global_mean", 3),
                   check.numbers(value["global_std"], "global_std", 3, positive=True),
                   check.number(value["target_mean"], "target_mean"),
                   check.number(value["target_std"], "target_std", positive=True),
                   check.number(value["node_scale"], "node_scale", positive=True))


def _conv(kind: str, hidden: int, heads: int) -> nn.Module:
    if kind == "transformer":
        return TransformerConv(hidden, hidden // heads, heads=heads, edge_dim=EDGE_DIM)
    return GATv2Conv(hidden, hidden // heads, heads=heads, edge_dim=EDGE_DIM)


class GraphRegressor(nn.Module):
    """Node embedding, residual attention message passing, sum+mean pooling with globals, MLP."""

    def __init__(self, node_dim: int, config: DnnPerfConfig, node_scale: float = 1.0) -> None:
        super().__init__()
        if config.conv not in CONVS:
            raise ValueError(f"conv must be one of {CONVS}, got {config.conv!r}")
        if config.hidden < 1 or config.heads < 1 or config.hidden % config.heads:
            raise ValueError(f"hidden ({config.hidden}) must be a positive multiple of heads ({config.heads})")
        hidden = config.hidden
        self.embed = nn.Sequential(nn.Linear(node_dim, hidden), nn.ReLU(), nn.Linear(hidden, hidden))
        self.convs = nn.ModuleList(_conv(config.conv, hidden, config.heads) for _ in range(config.layers))
        self.norms = nn.ModuleList(nn.LayerNorm(hidden) for _ in range(config.layers))
        self.head = nn.Sequential(nn.Linear(2 * hidden + GLOBAL_DIM, hidden), nn.ReLU(),
                                  nn.Linear(hidden, hidden), nn.ReLU(), nn.Linear(hidden, 1))
        self.register_buffer("node_scale", torch.tensor(float(node_scale)))

    def forward(self, batch: Data) -> torch.Tensor:
        """A (mini-batch of) graph(s) -> [graphs] normalised log iteration times."""
        h = self.embed(batch.x)
        for conv, norm in zip(self.convs, self.norms):
            h = h + torch.relu(conv(norm(h), batch.edge_index, batch.edge_attr))
        graphs = batch.num_graphs
        pooled = torch.cat([global_add_pool(h, batch.batch, size=graphs) / self.node_scale,
                            global_mean_pool(h, batch.batch, size=graphs), batch.g], dim=1)
        return self.head(pooled).squeeze(1)


# -- graphs as model inputs -------------------------------------------------------------------------

def _global_raw(trace: pd.DataFrame) -> np.ndarray:
    """[3] log batch, log input size, log op count of one (sorted) trace."""
    first = trace.iloc[0]
    return np.log1p([max(float(first["batch"]), 0.0), max(float(first["input_size"]), 0.0), float(len(trace))])


def _global_onehots(trace: pd.DataFrame) -> np.ndarray:
    out = np.zeros(len(OPTIMIZERS) + len(DTYPES), dtype=np.float32)
    out[OPTIMIZERS.index(optimizer_of(trace["config_id"].iloc[0]))] = 1
    dtype = str(trace["dtype"].iloc[0])
    if dtype not in DTYPES:
        raise ValueError(f"trace {trace['config_id'].iloc[0]!r}: dtype {dtype!r} not encodable; known: "
                         f"{', '.join(DTYPES)}")
    out[len(OPTIMIZERS) + DTYPES.index(dtype)] = 1
    return out


def iteration_us(trace: pd.DataFrame) -> float:
    return float((trace["duration_us"] + trace["gap_us"]).sum())


@dataclass
class GraphSet:
    """Model inputs of a set of traces (one graph each, config_id order) and their trace rows."""

    data: list[Data]
    traces: list[pd.DataFrame]
    anchors: np.ndarray  # per trace: what its predicted (normalised log) time is relative to


def _log_bytes(graphs: list) -> np.ndarray:
    return np.concatenate([np.log1p(g.edge_bytes) for g in graphs]) if graphs else np.zeros(0)


def _mean_std(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Column means and standard deviations (std 1 where a column is constant; 0 / 1 when empty)."""
    if len(x) == 0:
        return np.zeros(x.shape[1:]), np.ones(x.shape[1:])
    std = x.std(axis=0)
    return x.mean(axis=0), np.where(std > 1e-9, std, 1.0)


def anchors(spec: FeatureSpec, parts: list[pd.DataFrame]) -> np.ndarray:
    """Per trace: 1 µs plus its ops' analytical times with an anchored spec; 1 otherwise."""
    return np.array([1.0 + spec.anchor_us(t).sum() if spec.anchored else 1.0 for t in parts])


def fit_scalers(parts: list[pd.DataFrame], graphs: list, anchor: np.ndarray) -> Scalers:
    """Scalers from the training traces (sorted, one per config), their graphs and anchors."""
    edge_mean, edge_std = _mean_std(_log_bytes(graphs))
    global_mean, global_std = _mean_std(np.stack([_global_raw(t) for t in parts]))
    target_mean, target_std = _mean_std(np.log([iteration_us(t) for t in parts] / anchor))
    return Scalers(float(edge_mean), float(edge_std), global_mean.tolist(), global_std.tolist(),
                   float(target_mean), float(target_std), float(np.mean([len(t) for t in parts])))


def _check_times(parts: list[pd.DataFrame]) -> None:
    for t in parts:
        total = iteration_us(t)
        if not np.isfinite(total) or total <= 0:
            raise ValueError(f"trace {t['config_id'].iloc[0]!r}: iteration time {total} µs is not positive; "
                             "dnnperf regresses its logarithm")


def make_graph_set(spec: FeatureSpec, scalers: Scalers, parts: list[pd.DataFrame], graphs: list,
                   with_targets: bool, anchor: np.ndarray | None = None) -> GraphSet:
    """One ``Data`` per trace: node features, both-way edges with features, globals, target
    (``anchor``: the traces' anchors when already computed)."""
    features = encode(spec, pd.concat(parts, ignore_index=True))
    offsets = np.concatenate([[0], np.cumsum([len(t) for t in parts])])
    anchor = anchors(spec, parts) if anchor is None else anchor
    data = []
    for i, (trace, graph) in enumerate(zip(parts, graphs)):
        attr = edge_features(graph)
        attr[:, 0] = (attr[:, 0] - scalers.edge_mean) / scalers.edge_std
        both = np.vstack([np.hstack([attr, np.zeros((len(attr), 1), np.float32)]),
                          np.hstack([attr, np.ones((len(attr), 1), np.float32)])])
        edges = np.hstack([graph.edge_index, graph.edge_index[::-1]])
        g = np.concatenate([(_global_raw(trace) - scalers.global_mean) / scalers.global_std, _global_onehots(trace)])
        item = Data(x=torch.from_numpy(features[offsets[i]:offsets[i + 1]]),
                    edge_index=torch.from_numpy(np.ascontiguousarray(edges)),
                    edge_attr=torch.from_numpy(both.astype(np.float32)),
                    g=torch.from_numpy(g.astype(np.float32)).unsqueeze(0), num_nodes=len(trace))
        if with_targets:
            item.y = torch.tensor([(np.log(iteration_us(trace) / anchor[i]) - scalers.target_mean)
                                   / scalers.target_std],
                                  dtype=torch.float32)
        data.append(item)
    return GraphSet(data, parts, anchor)


# -- the predictor ------------------------------------------------------------------------------------

class DnnPerfPredictor(TrainedPredictor):
    """A trained graph regressor with its feature spec and scalers; whole-iteration times only."""

    method = METHOD

    def __init__(self, spec: FeatureSpec, scalers: Scalers, config: DnnPerfConfig, model: GraphRegressor,
                 device: str, fingerprint: str = "", history: list[dict] | None = None,
                 split: dict | None = None) -> None:
        super().__init__(config, model, device, fingerprint, history, split)
        self.spec, self.scalers = spec, scalers

    def graph_set(self, traces: pd.DataFrame, with_targets: bool = False) -> GraphSet:
        if traces.empty:
            raise ValueError("no traces to predict")
        parts = sorted_traces(traces)
        return make_graph_set(self.spec, self.scalers, parts, [build_graph(t) for t in parts], with_targets)

    @torch.no_grad()
    def predict_us(self, graphs: GraphSet, batch_size: int = 64) -> np.ndarray:
        """Predicted iteration time (µs) of every graph, in order."""
        self.model.eval()
        out = [self.model(batch).numpy() for batch in DataLoader(graphs.data, batch_size=batch_size)]
        normalised = np.concatenate(out).astype(np.float64)
        return graphs.anchors * np.exp(np.minimum(normalised * self.scalers.target_std + self.scalers.target_mean,
                                                  50.0))

    def summary(self, graphs: GraphSet, pred_us: np.ndarray) -> pd.DataFrame:
        """Per trace: the contract's iteration-time columns (no breakdown: NaN) and the truth."""
        parts = graphs.traces
        out = pd.DataFrame({"config_id": [str(t["config_id"].iloc[0]) for t in parts],
                            "device": [t["device"].iloc[0] for t in parts],
                            "family": [t["family"].iloc[0] for t in parts],
                            "model": [t["model"].iloc[0] for t in parts],
                            "ops": np.array([len(t) for t in parts], dtype=np.int64), "pred_us": pred_us})
        for column in BREAKDOWN:
            out[column] = np.nan
        if all("duration_us" in t and t["duration_us"].notna().all() for t in parts):
            out["true_us"] = [iteration_us(t) for t in parts]
        return out

    def iteration_times(self, traces: pd.DataFrame) -> pd.DataFrame:
        """Per trace (config_id order): predicted iteration time, and the truth when present."""
        graphs = self.graph_set(traces)
        return self.summary(graphs, self.predict_us(graphs))

    def checkpoint_fields(self) -> dict:
        return {"spec": self.spec.to_dict(), "dim": self.spec.dim, "scalers": asdict(self.scalers)}

    @classmethod
    def from_checkpoint(cls, body: dict, path: str | Path) -> DnnPerfPredictor:
        spec = checked_spec(body, path)
        config = checked_config(DnnPerfConfig, body.get("config"), path,
                                target_transform=spec.target_transform)  # older: log
        common = stored_fields(body, path)
        scalers = checked_scalers(body.get("scalers"), field_checker(path, "scalers"))
        model = build_weights(path, lambda: GraphRegressor(spec.dim, config, scalers.node_scale),
                              body.get("state_dict"))
        return cls(spec, scalers, config, model, **common)


load = DnnPerfPredictor.load  # what predictor.methods.load dispatches to


# -- training -----------------------------------------------------------------------------------------

def train(train_traces: pd.DataFrame, val_traces: pd.DataFrame, config: DnnPerfConfig | None = None, *,
          device: str | None = None, split: dict | None = None, progress: bool = True,
          log: Callable[[dict], None] | None = None, peaks: Peaks | None = None) -> DnnPerfPredictor:
    """Fit the graph regressor on ``train_traces``; early stopping on ``val_traces``' iteration MRE.
    ``peaks``: the device's peaks for anchored targets (None: the GPU catalogue's)."""
    started = clock()  # the time budget covers features and model construction too
    config = config or DnnPerfConfig()
    if config.target_transform not in ("log", "anchored"):
        raise ValueError(f"dnnperf target_transform must be 'log' or 'anchored', got {config.target_transform!r}")
    device, train_traces, val_traces = device_rows(train_traces, val_traces, device)
    torch.manual_seed(config.seed)
    spec = fit_features(train_traces, top_k=config.top_k, norm=config.norm, target_transform=config.target_transform,
                        peaks=anchor_peaks(config.target_transform, device, peaks))
    train_parts, val_parts = sorted_traces(train_traces), sorted_traces(val_traces)
    _check_times(train_parts)
    _check_times(val_parts)
    train_graphs = [build_graph(t) for t in train_parts]
    train_anchors = anchors(spec, train_parts)
    scalers = fit_scalers(train_parts, train_graphs, train_anchors)
    checked_model_size(lambda: GraphRegressor(spec.dim, config, scalers.node_scale),
                       "the dnnperf options (--layers, --hidden)")
    model = GraphRegressor(spec.dim, config, scalers.node_scale)
    predictor = DnnPerfPredictor(spec, scalers, config, model, device,
                                 fingerprint(pd.concat([train_traces, val_traces])), [], split)
    train_set = make_graph_set(spec, scalers, train_parts, train_graphs, with_targets=True, anchor=train_anchors)
    val_set = make_graph_set(spec, scalers, val_parts, [build_graph(t) for t in val_parts], with_targets=False)
    val_truth = np.array([iteration_us(t) for t in val_parts])
    loader = DataLoader(train_set.data, batch_size=config.batch_size, shuffle=True,
                        generator=torch.Generator().manual_seed(config.seed))
    optimizer = torch.optim.Adam(model.parameters(), lr=config.lr)
    stop = EarlyStopping(model, predictor.history, config, "train dnnperf", optimizer=optimizer, progress=progress,
                         log=log, started=started)
    stop.fit(model, optimizer, lambda: loader, lambda batch: (model(batch) - batch.y).abs().mean(),
             lambda: float(np.mean(np.abs(predictor.predict_us(val_set) - val_truth) / val_truth)))
    stop.restore()
    return predictor

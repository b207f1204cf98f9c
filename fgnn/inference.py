"""Layer-wise full-graph inference: logits or embeddings of all (or given) vertices, all neighbours.

Scoring a vertex with every neighbour through mini-batches of its L-hop neighbourhood recomputes
the inner layers of shared neighbours over and over, and the L-hop neighbourhood of a batch can be
most of the graph. Layer-wise inference (PyG's ``inference`` of its GNN models, DGL's layer-wise
inference) computes one layer at a time instead: layer ``i`` for all the vertices that need it, in
batches of destination vertices, reading layer ``i - 1``'s output. Every representation is
computed once, and memory stays bounded by one batch plus two layers' outputs. A batch holds at
most ``batch_size`` destinations and ``batch_edges`` edges (a hub gets a batch of its own), so a
power-law graph's hubs do not blow up one batch. Layer outputs larger than ``memory_budget / 2``
go to a memory-mapped file under a temp directory, which is mapped only while a batch reads or
writes it.

Neighbourhoods:

* GCN and GraphSAGE (:class:`~fgnn.models.stack.BlockStack`): every in-neighbour, with the
  graph's edge weights when it has them, exactly as
  :class:`~fgnn.training.FullNeighborSampler` gives them. The result equals per-vertex
  evaluation with that sampler (up to float rounding).
* PinSAGE: its neighbourhoods are the top-k of random walks, not edges. Here they are drawn
  once per (layer, vertex) with a fixed seed (:class:`~fgnn.sampling.fixed_walk.FixedRandomWalk`,
  PinSAGE's own inference scheme). The result equals per-vertex evaluation with a
  ``FixedRandomWalk`` sampler of the same seed. It is *not* the expectation over fresh walks that
  the sampled training sees. ``neighbours="full"`` uses every in-neighbour instead.

When ``nodes`` is given, only the vertices that reach them are computed: layer ``L`` for
``nodes``, layer ``L - 1`` for those and their layer-``L`` neighbours, and so on down.

Example::

    from fgnn.inference import layerwise_inference

    logits = layerwise_inference(model, ds.graph, ds.features)                # (N, C)
    emb = layerwise_inference(model, ds.graph, ds.features, nodes=ds.test_idx,
                              layer=1)                                          # (|test|, H)
"""

from __future__ import annotations

import os
import tempfile
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Callable, Iterator, Optional, Union

import numpy as np
import torch
from torch import nn

from fgnn.data.dataset import Features
from fgnn.graph import CSRGraph
from fgnn.models.pinsage import PinSAGE
from fgnn.models.stack import BlockStack
from fgnn.sampling.base import Sample
from fgnn.sampling.fixed_walk import FixedRandomWalk
from fgnn.training import FullNeighborSampler, extract_features

__all__ = ["layerwise_inference", "LayerRows"]

#: How a layer's neighbourhoods are chosen: ``"full"``, a :class:`FixedRandomWalk`, or ``None``
#: for the model's default (full for GCN/GraphSAGE, ``FixedRandomWalk(seed=0)`` for PinSAGE).
Neighbours = Union[str, FixedRandomWalk, None]


class LayerRows:
    """One layer's output rows for a sorted set of vertices, in memory or in a memory-mapped file.

    Args:
        ids: ``(R,)`` sorted, distinct global ids whose rows are stored.
        num_nodes: N of the graph (for the id -> row lookup).
        width: row width.
        path: back the rows by a float32 file here (mapped per access); ``None`` keeps them in
            memory.
    """

    def __init__(self, ids: torch.Tensor, num_nodes: int, width: int,
                 path: Optional[Path] = None) -> None:
        self.ids, self.width, self.path = ids, int(width), path
        rows = int(ids.numel())
        if rows == num_nodes:
            self._pos: Optional[torch.Tensor] = None  # all vertices: row = id
        else:
            self._pos = torch.full((num_nodes,), -1, dtype=torch.int64)
            self._pos[ids] = torch.arange(rows)
        if path is None:
            self._data: Optional[torch.Tensor] = torch.empty((rows, self.width))
        else:
            self._data = None
            with open(path, "wb") as f:  # sparse file of the final size
                f.truncate(rows * self.width * 4)

    @contextmanager
    def _mapped(self, mode: str) -> Iterator[np.ndarray]:
        arr = np.memmap(self.path, dtype=np.float32, mode=mode,
                        shape=(int(self.ids.numel()), self.width))
        try:
            yield arr
        finally:
            if mode != "r":
                arr.flush()
            del arr  # unmap: touched pages leave this process's resident set

    def write(self, start: int, values: torch.Tensor) -> None:
        """Store ``values`` as rows ``start, start + 1, ...`` (positions in :attr:`ids`)."""
        values = values.detach().to("cpu", torch.float32)
        if self._data is not None:
            self._data[start:start + values.shape[0]] = values
            return
        with self._mapped("r+") as arr:
            arr[start:start + values.shape[0]] = values.numpy()

    def gather(self, nodes: torch.Tensor) -> torch.Tensor:
        """The rows of global ids ``nodes`` (each must be stored), ``(len(nodes), width)``."""
        rows = nodes.cpu() if self._pos is None else self._pos[nodes.cpu()]
        if self._data is not None:
            return self._data[rows]
        with self._mapped("r") as arr:
            return torch.from_numpy(np.ascontiguousarray(arr[rows.numpy()]))

    def all(self) -> torch.Tensor:
        """Every stored row, in :attr:`ids` order."""
        if self._data is not None:
            return self._data
        with self._mapped("r") as arr:
            return torch.from_numpy(np.array(arr))


def _layer_plan(model: nn.Module) -> tuple[list[nn.Module], Callable[[int, torch.Tensor],
                                                                      torch.Tensor],
                                           Optional[nn.Module]]:
    """The model's conv layers, what follows layer ``i`` inside the stack, and its head."""
    if isinstance(model, BlockStack):
        last = model.num_layers - 1
        return (list(model.layers), lambda i, h: model.activation(h) if i < last else h, None)
    if isinstance(model, PinSAGE):
        return list(model.layers), lambda i, h: h, model.head
    raise TypeError(f"layerwise_inference supports fgnn's GCN, GraphSAGE and PinSAGE, got "
                    f"{type(model).__name__}; score a custom model with "
                    f"fgnn.evaluation.evaluate_split and a FullNeighborSampler")


SampleLayer = Callable[[CSRGraph, torch.Tensor, int], Sample]


def _neighbourhood(model: nn.Module, graph: CSRGraph, neighbours: Neighbours
                   ) -> tuple[SampleLayer, torch.Tensor]:
    """``(graph, dst, layer) -> one-block Sample`` (dst first, then their layer neighbours), and
    a bound on each vertex's edge count ``(N,)`` (its degree, or ``top_k`` for walks)."""
    if neighbours is None:
        neighbours = (FixedRandomWalk(num_layers=model.num_layers) if isinstance(model, PinSAGE)
                      else "full")
    if isinstance(neighbours, FixedRandomWalk):
        walks = neighbours
        bound = torch.full((graph.num_nodes,), walks.top_k, dtype=torch.int64)
        return (lambda g, dst, layer: walks.sample_layer(g, dst, layer)), bound
    if neighbours == "full":
        full = FullNeighborSampler(1)
        return (lambda g, dst, layer: full.sample(g, dst)), graph.degrees().cpu()
    raise ValueError(f"neighbours must be 'full', a FixedRandomWalk or None, got {neighbours!r}")


def _batches(ids: torch.Tensor, edges: torch.Tensor, batch_size: int,
             batch_edges: int) -> list[torch.Tensor]:
    """Consecutive slices of ``ids`` with at most ``batch_size`` vertices and ``batch_edges``
    edges each (a vertex with more edges than that forms a batch of its own)."""
    total = torch.cumsum(edges[ids], 0)
    out, start, base, n = [], 0, 0, int(ids.numel())
    while start < n:
        end = int(torch.searchsorted(total, base + batch_edges, right=True))
        end = max(start + 1, min(end, start + batch_size, n))
        out.append(ids[start:end])
        base, start = int(total[end - 1]), end
    return out


def _needed(graph: CSRGraph, top: torch.Tensor, layers: int,
            batches: Callable[[torch.Tensor], list[torch.Tensor]],
            sample_layer: SampleLayer) -> list[torch.Tensor]:
    """Sorted vertex sets whose layer-``i`` output is needed, ``i = 0..layers`` (0 = features)."""
    n = graph.num_nodes
    sets = [top]
    for layer in range(layers - 1, -1, -1):
        cur = sets[0]
        if cur.numel() == n:
            sets.insert(0, cur)
            continue
        mask = torch.zeros(n, dtype=torch.bool)
        mask[cur] = True
        for dst in batches(cur):
            mask[sample_layer(graph, dst.to(graph.device), layer).input_nodes.cpu()] = True
        sets.insert(0, mask.nonzero().squeeze(1))
    return sets


def _check_sizes(model: nn.Module, graph: CSRGraph, features: Features, layer: Optional[int],
                 num_layers: int, batch_size: int, batch_edges: int) -> int:
    """:func:`layerwise_inference`'s ``layer``, batch sizes and feature shape checked; the
    number of layers to run."""
    upto = num_layers if layer is None else layer
    if isinstance(upto, bool) or not isinstance(upto, int) or not 1 <= upto <= num_layers:
        raise ValueError(f"layer must be an int in [1, {num_layers}] or None, got "
                         f"layer={layer!r}")
    for name, val in (("batch_size", batch_size), ("batch_edges", batch_edges)):
        if isinstance(val, bool) or not isinstance(val, int) or val < 1:
            raise ValueError(f"{name} must be a positive int, got {name}={val!r}")
    n = graph.num_nodes
    if features.shape[0] != n or features.shape[1] != getattr(model, "in_dim", features.shape[1]):
        raise ValueError(f"features have shape {tuple(features.shape)}; expected ({n}, "
                         f"{getattr(model, 'in_dim', 'F')}) for this graph and model")
    return upto


def _check_nodes(nodes: Optional[torch.Tensor], n: int
                 ) -> tuple[Optional[torch.Tensor], torch.Tensor]:
    """``(nodes as CPU int64 or None, their sorted ids)``: distinct ids in ``[0, n)``; ``None``
    means every vertex."""
    if nodes is None:
        return None, torch.arange(n)
    nodes = torch.as_tensor(nodes).to("cpu", torch.int64)
    if nodes.dim() != 1 or (nodes.numel() and (int(nodes.min()) < 0
                                               or int(nodes.max()) >= n)):
        raise ValueError(f"nodes must be a 1-D tensor of vertex ids in [0, {n})")
    top = torch.unique(nodes)
    if top.numel() != nodes.numel():
        raise ValueError("nodes must not repeat")
    return nodes, top


def _run_layers(plan: list[nn.Module], post: Callable[[int, torch.Tensor], torch.Tensor],
                head: Optional[nn.Module], graph: CSRGraph, features: Features,
                sets: list[torch.Tensor], batches: Callable[[torch.Tensor], list[torch.Tensor]],
                sample_layer: SampleLayer, device: Union[str, torch.device],
                memory_budget: int, tmp_dir: Optional[Union[str, os.PathLike]],
                progress: bool) -> LayerRows:
    """Run layers ``1 .. len(sets) - 1`` over their needed vertex sets, batch by batch; the last
    one's rows (in memory; ``head`` applied after the last conv layer unless ``None``).

    A layer larger than half of ``memory_budget`` (but the last) goes to a file in a temp
    directory under ``tmp_dir``, made on first use and removed on return.
    """
    n, upto = graph.num_nodes, len(sets) - 1
    with ExitStack() as stack:
        tmp = None
        prev: Optional[LayerRows] = None
        for i in range(upto):
            logits = head is not None and i == len(plan) - 1
            width = head.out_features if logits else plan[i].out_dim
            ids = sets[i + 1]
            path = None
            if i < upto - 1 and ids.numel() * width * 4 > memory_budget // 2:
                if tmp is None:
                    tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(
                        prefix="fgnn-infer-", dir=tmp_dir)))
                path = tmp / f"layer{i + 1}.f32"
            out = LayerRows(ids, n, width, path)
            todo = batches(ids)
            if progress:
                from tqdm.auto import tqdm
                todo = tqdm(todo, desc=f"layer {i + 1}/{upto}", unit="batch")
            start = 0
            for dst in todo:
                s = sample_layer(graph, dst.to(graph.device), i)
                h = (extract_features(features, s.input_nodes, device) if prev is None
                     else prev.gather(s.input_nodes).to(device))
                h = post(i, plan[i](s.blocks[0].to(device), h))
                if logits:
                    h = head(h)
                out.write(start, h)
                start += dst.numel()
            prev = out
    return prev


@torch.no_grad()
def layerwise_inference(model: nn.Module, graph: CSRGraph, features: Features,
                        nodes: Optional[torch.Tensor] = None, *, layer: Optional[int] = None,
                        batch_size: int = 4096, batch_edges: int = 2 ** 17,
                        device: Union[str, torch.device] = "cpu",
                        neighbours: Neighbours = None, memory_budget: int = 2 ** 30,
                        tmp_dir: Optional[Union[str, os.PathLike]] = None,
                        progress: bool = False) -> torch.Tensor:
    """Logits (or one layer's embeddings) of ``nodes`` with every neighbour, layer by layer.

    Args:
        model: a :class:`~fgnn.models.GCN`, :class:`~fgnn.models.GraphSAGE` or
            :class:`~fgnn.models.PinSAGE`; run in eval mode (no dropout), then restored.
        graph: the topology (row ``v`` lists the neighbours ``v`` aggregates from).
        features: ``(N, F)`` tensor or (memory-mapped) numpy array.
        nodes: ``(K,)`` distinct vertex ids to return; ``None`` returns all ``N`` in id order.
        layer: return the output of conv layer ``layer`` (``1..num_layers``, after the
            activation a following layer reads) instead of the logits. For PinSAGE
            ``layer=num_layers`` is the final embedding before the classification head.
        batch_size: most destination vertices per batch.
        batch_edges: most edges per batch (bounds the message buffers of one batch).
        device: where the model runs (its parameters must be there); layer outputs are kept
            on the CPU.
        neighbours: see :data:`Neighbours` and the module docstring.
        memory_budget: bytes for two layers' outputs in memory; a layer larger than half of it
            is written to a memory-mapped file under ``tmp_dir``.
        tmp_dir: parent of the temp directory for those files (removed at the end); ``None``
            uses the system's temp directory.
        progress: draw a tqdm bar per layer.

    Returns:
        ``(K, C)`` logits (or ``(K, H)`` embeddings), row ``j`` for ``nodes[j]`` (float32, CPU).

    Raises:
        TypeError: for a model without layer-wise support.
        ValueError: for bad ``nodes``, ``layer``, ``batch_size`` or ``neighbours``, or features
            that do not match the graph or the model.
    """
    plan, post, head = _layer_plan(model)
    upto = _check_sizes(model, graph, features, layer, len(plan), batch_size, batch_edges)
    nodes, top = _check_nodes(nodes, graph.num_nodes)
    sample_layer, edges = _neighbourhood(model, graph, neighbours)

    def batches(ids: torch.Tensor) -> list[torch.Tensor]:
        return _batches(ids, edges, batch_size, batch_edges)

    sets = _needed(graph, top, upto, batches, sample_layer)
    was_training = model.training
    model.eval()
    try:
        out = _run_layers(plan, post, head if layer is None else None, graph, features, sets,
                          batches, sample_layer, device, memory_budget, tmp_dir, progress)
    finally:
        model.train(was_training)
    return out.all() if nodes is None else out.gather(nodes)

"""PyG ``HeteroData`` and DGL heterographs as a :class:`~fgnn.graph.hetero.HeteroGraph`
(duck-typed).

:func:`fgnn.data.from_pyg` and :func:`fgnn.data.from_dgl` recognise a typed object
(:func:`is_typed_pyg`, :func:`is_typed_dgl`) and build its
:class:`~fgnn.data.dataset_hetero.HeteroDataset` with these converters and :func:`typed_dataset`.
Like :mod:`fgnn.data.convert`, the converters read attributes and methods only, so neither
torch_geometric nor dgl is imported. An edge ``u -> v`` of relation ``(s, r, d)`` is a message
from node ``u`` of type ``s`` to node ``v`` of type ``d``: row ``v`` of the relation's CSR lists
``u``.
"""

from __future__ import annotations

from typing import Any, Mapping, Optional

import torch

from fgnn.graph.arrays import as_cpu_tensor
from fgnn.data.dataset_hetero import HeteroDataset
from fgnn.graph.hetero import HeteroGraph

__all__ = ["from_pyg_hetero", "from_dgl_hetero", "is_typed_pyg", "is_typed_dgl",
           "labelled_type", "typed_dataset", "unlabelled_dataset"]


def is_typed_pyg(data: Any) -> bool:
    """Whether ``data`` is a typed PyG graph: it has ``node_types`` and ``edge_types``, as
    ``HeteroData`` does (a homogeneous ``Data`` has neither)."""
    return (getattr(data, "node_types", None) is not None
            and getattr(data, "edge_types", None) is not None)


def is_typed_dgl(graph: Any) -> bool:
    """Whether ``graph`` is a DGL heterograph: more than one node type or relation in
    ``ntypes`` / ``canonical_etypes`` (a homogeneous graph has one of each)."""
    ntypes = getattr(graph, "ntypes", None)
    etypes = getattr(graph, "canonical_etypes", None)
    return ntypes is not None and etypes is not None and (len(ntypes) > 1 or len(etypes) > 1)


def labelled_type(labelled: list[str], types: list[str], what: str, field: str) -> str:
    """The one node type with labels (``labelled``, those of ``types`` that have ``field``).

    Raises:
        ValueError: none or several types have labels: pass ``target_type=``.
    """
    if len(labelled) != 1:
        raise ValueError(f"{what}: {len(labelled)} node types have {field} ({labelled} of "
                         f"{list(types)}); pass target_type= (the node type whose {field} are "
                         f"the labels)")
    return labelled[0]


def typed_dataset(graph: HeteroGraph, *, name: str, num_classes: Optional[int],
                  splits: Mapping[str, Any], seed: Optional[int], what: str) -> HeteroDataset:
    """The HeteroDataset over ``graph`` (labels on its target type).

    Args:
        graph: a converted typed graph with ``target_type`` and labels.
        name: dataset name.
        num_classes: C; default the largest label + 1.
        splits: ``train`` / ``val`` / ``test`` node ids or boolean masks of the target type,
            each ``None`` when absent; all three ``None`` gives a seeded 50/20/30 split.
        seed: seed of that random split (default 0).
        what: prefixes errors.

    Raises:
        ValueError: a split is missing while others are given (naming it), or out of range.
    """
    given = {s: v for s, v in splits.items() if v is not None}
    missing = [s for s in splits if splits[s] is None]
    if given and missing:
        raise ValueError(f"{what}: no {missing[0]} split of node type {graph.target_type!r} "
                         f"found (given: {sorted(given)}); pass {missing[0]}=<node ids or "
                         f"boolean mask>")
    ids = {f"{s}_idx": as_cpu_tensor(v, f"{what} {s} split") for s, v in given.items()}
    return HeteroDataset.from_graph(graph, name=name, splits=ids or None,
                                    num_classes=num_classes, seed=0 if seed is None else seed)


def unlabelled_dataset(graph: HeteroGraph, given: Mapping[str, Any], what: str
                       ) -> HeteroDataset:
    """The label-free HeteroDataset of a typed graph no node type of which has labels (a link
    prediction or recommendation graph): :meth:`HeteroDataset.unlabelled`.

    Raises:
        ValueError: node splits were given (they split the nodes of a labelled type).
    """
    split = next((s for s, v in given.items() if v is not None), None)
    if split is not None:
        raise ValueError(f"{what}: {split}= splits the nodes of a labelled type, but no node "
                         f"type has labels; pass target_type= and labels, or leave the splits "
                         f"out (a link job splits the relation's edges)")
    return HeteroDataset.unlabelled(graph, name=str(graph.meta.get("name", "hetero")))


def _edge_types(obj: Any, attr: str, what: str) -> list[tuple[str, str, str]]:
    ets = getattr(obj, attr, None)
    if ets is None:
        raise ValueError(f"{what} has no {attr} (got {type(obj).__name__}; is it heterogeneous?)")
    out = []
    for et in ets:
        if not isinstance(et, tuple) or len(et) != 3:
            raise ValueError(f"{what}.{attr} holds {et!r}, not a (src_type, rel, dst_type) tuple")
        out.append(et)
    return out


def from_pyg_hetero(data: Any, *, target_type: Optional[str] = None,
                    name: str = "pyg-hetero") -> HeteroGraph:
    """A HeteroGraph from a PyG ``torch_geometric.data.HeteroData`` (or an object like it).

    Reads ``data.node_types``, ``data.edge_types``, per node type ``data[t].num_nodes``, ``x``
    (optional: a type without it gets learned embeddings) and, for ``target_type``, ``y``; per
    relation ``data[(s, r, d)].edge_index`` ``(2, E)`` (source row 0, destination row 1).

    Args:
        data: the typed graph.
        target_type: node type whose ``y`` are the labels (``None``: no labels).
        name: recorded in ``meta``.

    Raises:
        ValueError: naming the type, relation or attribute that is missing or malformed.
    """
    what = f"PyG HeteroData {name!r}"
    ntypes = getattr(data, "node_types", None)
    if ntypes is None:
        raise ValueError(f"{what} has no node_types (got {type(data).__name__}; a homogeneous "
                         f"Data goes through fgnn.data.from_pyg)")
    num_nodes, feats = {}, {}
    for t in ntypes:
        store = data[t]
        x = getattr(store, "x", None)
        n = getattr(store, "num_nodes", None)
        if n is None:
            if x is None:
                raise ValueError(f"{what}[{t!r}] has neither num_nodes nor x")
            n = x.shape[0]
        num_nodes[t] = int(n)
        if x is not None:
            feats[t] = x
    edges = {}
    for et in _edge_types(data, "edge_types", what):
        ei = getattr(data[et], "edge_index", None)
        if ei is None:
            raise ValueError(f"{what}[{et!r}] has no edge_index")
        edges[et] = ei
    labels = None
    if target_type is not None:
        if target_type not in num_nodes:
            raise ValueError(f"{what}: target_type {target_type!r} is not a node type "
                             f"(types: {list(num_nodes)})")
        labels = getattr(data[target_type], "y", None)
        if labels is None:
            raise ValueError(f"{what}[{target_type!r}] has no y (labels of the target type)")
    return HeteroGraph.from_edge_index(num_nodes, edges, feats, labels, target_type,
                                       {"source": "pyg", "name": name})


def from_dgl_hetero(graph: Any, *, target_type: Optional[str] = None, feat_key: str = "feat",
                    label_key: str = "label", name: str = "dgl-hetero") -> HeteroGraph:
    """A HeteroGraph from a DGL heterograph (or an object with its methods).

    Reads ``g.ntypes``, ``g.canonical_etypes``, ``g.num_nodes(t)``, ``g.edges(etype=(s, r,
    d))`` (``(src, dst)``), ``g.nodes[t].data[feat_key]`` when present and
    ``g.nodes[target_type].data[label_key]``.

    Args:
        graph: the heterograph.
        target_type: node type whose ``label_key`` field holds the labels (``None``: none).
        feat_key, label_key: ``ndata`` keys of features and labels.
        name: recorded in ``meta``.

    Raises:
        ValueError: naming the type, relation or key that is missing or malformed.
    """
    what = f"DGL heterograph {name!r}"
    ntypes = getattr(graph, "ntypes", None)
    if ntypes is None:
        raise ValueError(f"{what} has no ntypes (got {type(graph).__name__})")
    num_nodes, feats = {}, {}
    for t in ntypes:
        num_nodes[t] = int(graph.num_nodes(t))
        data = graph.nodes[t].data
        if feat_key in data:
            feats[t] = data[feat_key]
    edges = {}
    for et in _edge_types(graph, "canonical_etypes", what):
        src, dst = graph.edges(etype=et)
        edges[et] = torch.stack([torch.as_tensor(src).long(), torch.as_tensor(dst).long()])
    labels = None
    if target_type is not None:
        if target_type not in num_nodes:
            raise ValueError(f"{what}: target_type {target_type!r} is not a node type "
                             f"(types: {list(num_nodes)})")
        data = graph.nodes[target_type].data
        if label_key not in data:
            raise ValueError(f"{what} has no nodes[{target_type!r}].data[{label_key!r}] (keys: "
                             f"{sorted(data.keys())}); pass label_key=")
        labels = data[label_key]
    return HeteroGraph.from_edge_index(num_nodes, edges, feats, labels, target_type,
                                       {"source": "dgl", "name": name})

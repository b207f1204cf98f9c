"""Bring your own graph: PyG ``Data``, DGL graphs and OGB node-property datasets as a Dataset.

:func:`from_pyg` and :func:`from_dgl` take typed graphs too (PyG ``HeteroData``, DGL
heterographs) and return a :class:`~fgnn.data.dataset_hetero.HeteroDataset` for them (through
:mod:`fgnn.data.convert_hetero`).

The converters read the objects by their attributes (duck typing), so none of them imports
torch_geometric, dgl or ogb; only :func:`from_ogb` given a dataset *name* needs the ``ogb``
package (to download it) and says so when it is missing.

Edge direction follows the source library: an edge ``u -> v`` (PyG ``edge_index[:, e] = (u, v)``,
DGL ``g.edges() = (u, v)``) is a message from ``u`` to ``v``, so row ``v`` of the
:class:`~fgnn.graph.CSRGraph` lists ``u`` (see :meth:`CSRGraph.from_edge_index`). Nothing is
symmetrised unless asked (``symmetrize=True``); :func:`from_ogb` symmetrises by default, like the
``ogb:DIR`` spec.

Labels: ``(N,)`` or ``(N, 1)`` class ids. NaN or negative labels mark unlabelled nodes; they get
class 0 and must not appear in any split. Splits: boolean masks (PyG/DGL ``train_mask``, a 2-D
mask with one column per split needs ``split=k``) or node ids, each overridable by ``train=``,
``val=``, ``test=``.
"""

from __future__ import annotations

from typing import Any, Callable, Optional

import torch

from fgnn.data.dataset import Dataset, SplitLike, check_finite_features, split_ids
from fgnn.data.convert_hetero import (from_dgl_hetero, from_pyg_hetero, is_typed_dgl,
                                     is_typed_pyg, labelled_type, typed_dataset,
                                     unlabelled_dataset)
from fgnn.data.dataset_hetero import HeteroDataset
from fgnn.graph import CSRGraph
from fgnn.graph.arrays import as_cpu_tensor

__all__ = ["from_pyg", "from_dgl", "from_ogb"]

_SPLIT_NAMES = ("train", "val", "test")


def _features(x: Any, n: int, what: str) -> torch.Tensor:
    if x is None:
        raise ValueError(f"{what} is missing: fgnn needs (N, F) node features")
    t = as_cpu_tensor(x, what)
    if t.dim() != 2 or t.shape[0] != n:
        raise ValueError(f"{what} must have shape ({n}, F), got {tuple(t.shape)}")
    if t.dtype not in (torch.float32, torch.float16):
        if t.dtype == torch.bool or t.is_complex():
            raise ValueError(f"{what} must be numeric, got dtype {t.dtype}")
        t = t.to(torch.float32)                                  # float64 / integer features
    check_finite_features(t, what)        # after the cast: a float64 1e39 is inf in float32
    return t.contiguous()


def _labels(y: Any, n: int, what: str) -> tuple[torch.Tensor, torch.Tensor]:
    """``(labels, unlabelled)``: int64 class ids (0 where unlabelled) and a bool mask."""
    if y is None:
        raise ValueError(f"{what} is missing: fgnn trains node classification and needs labels")
    t = as_cpu_tensor(y, what)
    if t.dim() == 2 and t.shape[1] == 1:
        t = t[:, 0]
    if t.dim() != 1 or t.shape[0] != n:
        raise ValueError(f"{what} must hold one class id per node, shape ({n},) or ({n}, 1), got "
                         f"{tuple(t.shape)} (multi-label targets are not supported)")
    if t.dtype == torch.bool or t.is_complex():
        raise ValueError(f"{what} must hold integer class ids, got dtype {t.dtype}")
    unlabelled = torch.zeros(n, dtype=torch.bool)
    if t.is_floating_point():
        unlabelled = torch.isnan(t)
        known = t[~unlabelled]
        odd = ~torch.isfinite(known) | (known != known.floor())
        if bool(odd.any()):
            raise ValueError(f"{what} holds {float(known[odd][0])}, not a class id (regression "
                             f"targets are not supported)")
        t = torch.where(unlabelled, torch.zeros_like(t), t)
    t = t.to(torch.int64)
    unlabelled |= t < 0
    return torch.where(unlabelled, torch.zeros_like(t), t), unlabelled


def _mask_column(value: Any, split: Optional[int], what: str) -> Any:
    """One column of a 2-D mask (several splits, e.g. WikiCS) chosen by ``split``."""
    if value is None or getattr(value, "ndim", 1) != 2:
        return value
    cols = value.shape[1]
    if split is None:
        raise ValueError(f"{what} has shape {tuple(value.shape)}: {cols} splits, one per "
                         f"column; choose one with split=0..{cols - 1}")
    if not 0 <= split < cols:
        raise ValueError(f"split={split} is outside the {cols} columns of {what}")
    return value[:, split]


def _not_for(func: str, what: str, **given: Any) -> None:
    """Raise TypeError naming the first keyword of ``given`` that is set (not ``None`` or
    ``False``): it does not apply to the kind of graph ``what`` describes."""
    for key, value in given.items():
        if value is not None and value is not False:
            raise TypeError(f"{func}: {key}={value!r} does not apply to {what}")


def _splits(given: dict[str, Any], mask: Callable[[str], Any], where: str,
            split: Optional[int]) -> dict[str, Any]:
    """``train`` / ``val`` / ``test``: each ``given`` one, else the graph's ``mask(s)`` (its
    column ``split`` when 2-D); ``where`` names the mask in errors (``{s}``: the split)."""
    return {s: given[s] if given[s] is not None else
            _mask_column(mask(s), split, where.format(s=s)) for s in _SPLIT_NAMES}


def _assemble(name: str, n: int, edge_index: torch.Tensor, weights: Optional[torch.Tensor],
              features: Any, y: Any, splits: dict[str, Any], *, num_classes: Optional[int],
              symmetrize: bool, source: str, what: str) -> Dataset:
    """Build and validate the Dataset; ``what`` prefixes attribute names in errors."""
    if n < 1:
        raise ValueError(f"{what}: the graph has no nodes")
    feats = _features(features, n, f"{what} features")
    labels, unlabelled = _labels(y, n, f"{what} labels")
    ids = {}
    for s in _SPLIT_NAMES:
        if splits.get(s) is None:
            raise ValueError(f"{what}: no {s} split found; pass {s}=<node ids or boolean mask>")
        ids[s] = split_ids(as_cpu_tensor(splits[s], f"{what} {s} split"), n, what=f"{what} {s} split")
        hit = ids[s][(ids[s] >= 0) & (ids[s] < n)]
        if bool(unlabelled[hit].any()):
            bad = int(hit[unlabelled[hit]][0])
            raise ValueError(f"{what}: the {s} split holds node {bad}, which has no label "
                             f"(NaN or negative)")
    if num_classes is None:
        known = labels[~unlabelled]
        num_classes = int(known.max()) + 1 if known.numel() else 1
    ei = as_cpu_tensor(edge_index, f"{what} edge_index")
    w = None if weights is None else as_cpu_tensor(weights, f"{what} edge weights")
    if w is not None and w.dim() != 1:
        raise ValueError(f"{what} edge weights must be 1-D (one per edge), got shape "
                         f"{tuple(w.shape)}")
    try:
        graph = CSRGraph.from_edge_index(
            ei, num_nodes=n, weights=w, symmetrize=symmetrize, dedup=symmetrize,
            index_dtype=torch.int32 if n < 2 ** 31 else torch.int64)
    except ValueError as exc:
        raise ValueError(f"{what}: {exc}") from None
    return Dataset(name=name, graph=graph, features=feats, labels=labels,
                   train_idx=ids["train"], val_idx=ids["val"], test_idx=ids["test"],
                   num_classes=num_classes,
                   meta={"source": source, "symmetrize": bool(symmetrize),
                         "unlabelled": int(unlabelled.sum())})


# ---------------------------------------------------------------------------- PyG
def _sparse_edges(adj_t: Any, what: str) -> tuple[torch.Tensor, Optional[torch.Tensor]]:
    """``(edge_index, weights)`` of a transposed adjacency: row = target, column = source."""
    if hasattr(adj_t, "csr"):                                    # torch_sparse.SparseTensor
        rowptr, col, value = adj_t.csr()
    elif isinstance(adj_t, torch.Tensor) and adj_t.layout != torch.strided:
        csr = adj_t.to_sparse_csr()
        rowptr, col, value = csr.crow_indices(), csr.col_indices(), csr.values()
    else:
        raise ValueError(f"{what}.adj_t must be a torch_sparse.SparseTensor or a torch sparse "
                         f"tensor, got {type(adj_t).__name__}")
    rowptr, col = rowptr.long(), col.long()
    rows = torch.repeat_interleave(torch.arange(rowptr.numel() - 1), rowptr[1:] - rowptr[:-1])
    if value is not None and (value.dim() != 1 or bool((value == 1).all())):
        value = None                                             # an unweighted adjacency
    return torch.stack([col, rows]), value


def _pyg_edges(data: Any, what: str) -> tuple[torch.Tensor, Optional[torch.Tensor]]:
    ei = getattr(data, "edge_index", None)
    if ei is not None:
        return ei, getattr(data, "edge_weight", None)
    adj_t = getattr(data, "adj_t", None)
    if adj_t is not None:
        return _sparse_edges(adj_t, what)
    raise ValueError(f"{what} has neither edge_index nor adj_t, nor the node_types and "
                     f"edge_types of a HeteroData (got {type(data).__name__}; for a PyG "
                     f"dataset pass dataset[0])")


def _num_nodes(data: Any, x: Any, what: str) -> int:
    n = getattr(data, "num_nodes", None)
    if n is None and x is not None:
        n = x.shape[0]
    if n is None:
        raise ValueError(f"{what} has neither num_nodes nor x")
    return int(n)


def _typed_pyg(data: Any, what: str, *, name: str, num_classes: Optional[int],
               given: dict[str, Any], split: Optional[int], target_type: Optional[str],
               seed: Optional[int]) -> HeteroDataset:
    """The HeteroDataset of a typed PyG graph (see :func:`from_pyg`)."""
    types = list(data.node_types)
    labelled = [t for t in types if getattr(data[t], "y", None) is not None]
    if target_type is None and not labelled:
        return unlabelled_dataset(from_pyg_hetero(data, name=name), given, what)
    target = target_type or labelled_type(labelled, types, what, "y")
    graph = from_pyg_hetero(data, target_type=target, name=name)
    store = data[target]
    splits = _splits(given, lambda s: getattr(store, f"{s}_mask", None),
                     f"{what}[{target!r}].{{s}}_mask", split)
    return typed_dataset(graph, name=name, num_classes=num_classes, splits=splits, seed=seed,
                         what=what)


def from_pyg(data: Any, *, name: str = "pyg", num_classes: Optional[int] = None,
             train: Optional[SplitLike] = None, val: Optional[SplitLike] = None,
             test: Optional[SplitLike] = None, split: Optional[int] = None,
             symmetrize: bool = False, target_type: Optional[str] = None,
             seed: Optional[int] = None) -> Dataset:
    """A Dataset from a PyG ``Data`` or ``HeteroData`` (or any object with its attributes).

    Homogeneous: reads ``x`` ``(N, F)``, ``y`` ``(N,)``/``(N, 1)``, ``edge_index`` ``(2, E)``
    (source row 0, target row 1) or ``adj_t`` (a transposed ``SparseTensor`` / torch sparse
    tensor, as ``T.ToSparseTensor`` makes), optional ``edge_weight`` ``(E,)`` and ``train_mask``
    / ``val_mask`` / ``test_mask``. Typed (``data`` has ``node_types`` and ``edge_types``):
    reads the graph as :func:`~fgnn.data.convert_hetero.from_pyg_hetero` does, the labels from
    ``data[target_type].y`` and the splits from its masks, else a seeded 50/20/30 split.

    Args:
        data: the graph, e.g. ``Planetoid(root, "Cora")[0]`` or ``OGB_MAG(root)[0]``.
        name: dataset name.
        num_classes: C; default the largest label + 1.
        train, val, test: node ids or ``(N,)`` boolean masks (of the target type when typed),
            replacing the masks of ``data`` (e.g. from an OGB ``get_idx_split()``).
        split: column of 2-D ``(N, S)`` masks to use (datasets with several splits).
        symmetrize: homogeneous only: add every edge's reverse (then drop duplicates).
        target_type: typed only: the node type whose ``y`` are the labels; default the only
            node type with ``y``; when no type has ``y`` (a link-prediction or recommendation
            graph) the dataset has no labels (:meth:`HeteroDataset.unlabelled`: link jobs
            only, and no node splits may be given).
        seed: typed only: seed of the random split when the target type has no masks.

    Returns:
        A :class:`~fgnn.data.Dataset` whose row ``v`` lists the sources of the edges into ``v``;
        for a typed graph a :class:`~fgnn.data.dataset_hetero.HeteroDataset`.

    Raises:
        ValueError: naming the attribute on a missing or malformed one.
        TypeError: naming a keyword of the other kind (``symmetrize`` for a typed graph,
            ``target_type`` or ``seed`` for a homogeneous one).
    """
    what = f"PyG data {name!r}"
    given = {"train": train, "val": val, "test": test}
    if is_typed_pyg(data):
        _not_for("from_pyg", f"{what}, a typed HeteroData (each direction is a relation)",
                 symmetrize=symmetrize)
        return _typed_pyg(data, what, name=name, num_classes=num_classes, given=given,
                          split=split, target_type=target_type, seed=seed)
    _not_for("from_pyg", f"{what}, a homogeneous graph (it has no node_types)",
             target_type=target_type, seed=seed)
    ei, w = _pyg_edges(data, what)
    x = getattr(data, "x", None)
    n = _num_nodes(data, x, what)
    splits = _splits(given, lambda s: getattr(data, f"{s}_mask", None), f"{what}.{{s}}_mask",
                     split)
    return _assemble(name, n, ei, w, x, getattr(data, "y", None), splits,
                     num_classes=num_classes, symmetrize=symmetrize, source="pyg", what=what)


# ---------------------------------------------------------------------------- DGL
def _dgl_parts(graph: Any, what: str) -> tuple[int, torch.Tensor]:
    ntypes, etypes = getattr(graph, "ntypes", ["_N"]), getattr(graph, "canonical_etypes", [None])
    if len(ntypes) != 1 or len(etypes) != 1:
        raise ValueError(f"{what} is heterogeneous ({len(ntypes)} node types, {len(etypes)} edge "
                         f"types); convert one relation or use dgl.to_homogeneous first")
    src, dst = graph.edges()
    return int(graph.num_nodes()), torch.stack([as_cpu_tensor(src, what).long(),
                                                 as_cpu_tensor(dst, what).long()])


def _dgl_fields(graph: Any, what: str, feat_key: str, label_key: str,
                weight_key: Optional[str]) -> tuple[Any, Any, Any]:
    """``(features, labels, edge weights or None)`` of a homogeneous DGL graph."""
    ndata = graph.ndata
    for key in (feat_key, label_key):
        if key not in ndata:
            raise ValueError(f"{what} has no ndata[{key!r}] (keys: {sorted(ndata.keys())}); "
                             f"pass feat_key= / label_key=")
    if weight_key is None:
        return ndata[feat_key], ndata[label_key], None
    if weight_key not in graph.edata:
        raise ValueError(f"{what} has no edata[{weight_key!r}] (keys: "
                         f"{sorted(graph.edata.keys())})")
    return ndata[feat_key], ndata[label_key], graph.edata[weight_key]


def _typed_dgl(graph: Any, what: str, *, name: str, num_classes: Optional[int],
               given: dict[str, Any], split: Optional[int], target_type: Optional[str],
               seed: Optional[int], feat_key: str, label_key: str) -> HeteroDataset:
    """The HeteroDataset of a DGL heterograph (see :func:`from_dgl`)."""
    types = list(graph.ntypes)
    labelled = [t for t in types if label_key in graph.nodes[t].data]
    if target_type is None and not labelled:
        return unlabelled_dataset(from_dgl_hetero(graph, feat_key=feat_key, name=name), given,
                                  what)
    target = target_type or labelled_type(labelled, types, what, f"data[{label_key!r}]")
    typed = from_dgl_hetero(graph, target_type=target, feat_key=feat_key, label_key=label_key,
                            name=name)
    data = graph.nodes[target].data
    splits = _splits(given, lambda s: data[f"{s}_mask"] if f"{s}_mask" in data else None,
                     f"{what}.nodes[{target!r}].data['{{s}}_mask']", split)
    return typed_dataset(typed, name=name, num_classes=num_classes, splits=splits, seed=seed,
                         what=what)


def from_dgl(graph: Any, *, name: str = "dgl", feat_key: str = "feat", label_key: str = "label",
             weight_key: Optional[str] = None, num_classes: Optional[int] = None,
             train: Optional[SplitLike] = None, val: Optional[SplitLike] = None,
             test: Optional[SplitLike] = None, split: Optional[int] = None,
             symmetrize: bool = False, target_type: Optional[str] = None,
             seed: Optional[int] = None) -> Dataset:
    """A Dataset from a ``dgl.DGLGraph``, homogeneous or a heterograph (or any object with its
    methods).

    Homogeneous: reads ``g.edges()`` (``(src, dst)``: messages flow ``src -> dst``),
    ``g.num_nodes()``, ``g.ndata[feat_key]``, ``g.ndata[label_key]``, ``g.ndata["train_mask"]``
    / ``"val_mask"`` / ``"test_mask"`` and, with ``weight_key``, ``g.edata[weight_key]``. A
    heterograph (more than one node type or relation): reads it as
    :func:`~fgnn.data.convert_hetero.from_dgl_hetero` does, the splits from
    ``g.nodes[target_type].data["train_mask"]`` etc., else a seeded 50/20/30 split.

    Args:
        graph: the graph, e.g. ``dgl.data.CoraGraphDataset()[0]``.
        name: dataset name.
        feat_key, label_key: ``ndata`` keys of the features and labels.
        weight_key: homogeneous only: ``edata`` key of positive edge weights; ``None`` leaves
            the graph unweighted.
        num_classes, train, val, test, split, symmetrize, target_type, seed: as for
            :func:`from_pyg` (``target_type`` defaults to the only node type with
            ``label_key``; with none, the dataset has no labels, for link jobs).

    Returns:
        A :class:`~fgnn.data.Dataset` whose row ``v`` lists the sources of the edges into ``v``;
        for a heterograph a :class:`~fgnn.data.dataset_hetero.HeteroDataset`.

    Raises:
        ValueError: naming the key on a missing or malformed field.
        TypeError: naming a keyword of the other kind (``weight_key`` or ``symmetrize`` for a
            heterograph, ``target_type`` or ``seed`` for a homogeneous graph).
    """
    what = f"DGL graph {name!r}"
    given = {"train": train, "val": val, "test": test}
    if is_typed_dgl(graph):
        _not_for("from_dgl", f"{what}, a heterograph", weight_key=weight_key,
                 symmetrize=symmetrize)
        return _typed_dgl(graph, what, name=name, num_classes=num_classes, given=given,
                          split=split, target_type=target_type, seed=seed, feat_key=feat_key,
                          label_key=label_key)
    _not_for("from_dgl", f"{what}, a homogeneous graph (one node type and relation)",
             target_type=target_type, seed=seed)
    n, ei = _dgl_parts(graph, what)
    feats, labels, w = _dgl_fields(graph, what, feat_key, label_key, weight_key)
    ndata = graph.ndata
    splits = _splits(given, lambda s: ndata[f"{s}_mask"] if f"{s}_mask" in ndata else None,
                     f"{what}.ndata['{{s}}_mask']", split)
    return _assemble(name, n, ei, w, feats, labels, splits,
                     num_classes=num_classes, symmetrize=symmetrize, source="dgl", what=what)


# ---------------------------------------------------------------------------- OGB
def _open_ogb(name: str, root: str) -> Any:
    try:
        from ogb.nodeproppred import NodePropPredDataset
    except ImportError:
        raise ImportError(f"from_ogb({name!r}) needs the ogb package to download and read the "
                          f"dataset (pip install ogb); without it, pass an unpacked OGB "
                          f"directory as the dataset spec ogb:DIR") from None
    return NodePropPredDataset(name=name, root=root)


def from_ogb(dataset: Any, *, root: str = "dataset", name: Optional[str] = None,
             symmetrize: bool = True) -> Dataset:
    """A Dataset from an OGB node-property-prediction dataset.

    Args:
        dataset: an ``ogb.nodeproppred.NodePropPredDataset`` (``dataset[0]`` is ``(graph dict,
            labels)``, the dict holding ``edge_index``, ``node_feat``, ``num_nodes``), or its
            PyG / DGL twin (``PygNodePropPredDataset``, ``DglNodePropPredDataset``), or a
            dataset name such as ``"ogbn-arxiv"`` (then the ``ogb`` package downloads it).
        root: download directory when ``dataset`` is a name.
        name: dataset name, default ``dataset.name``.
        symmetrize: add every edge's reverse and drop duplicates, as the ``ogb:DIR`` spec does
            (ogbn-arxiv is stored directed).

    Returns:
        A :class:`~fgnn.data.Dataset` with the splits of ``get_idx_split()``.

    Raises:
        ImportError: ``dataset`` is a name and the ``ogb`` package is not installed.
        ValueError: naming the field on a malformed graph, labels or split.
    """
    if isinstance(dataset, str):
        dataset = _open_ogb(dataset, root)
    name = name or str(getattr(dataset, "name", "ogb"))
    what = f"OGB dataset {name!r}"
    idx = dataset.get_idx_split()
    if not isinstance(idx, dict) or any(k not in idx for k in ("train", "valid", "test")):
        raise ValueError(f"{what}: get_idx_split() must give a dict with train/valid/test, got "
                         f"{sorted(idx) if isinstance(idx, dict) else type(idx).__name__}")
    if any(isinstance(idx[k], dict) for k in ("train", "valid", "test")):
        raise ValueError(f"{what} is heterogeneous (its splits are per node type); fgnn trains "
                         f"on homogeneous graphs")
    splits = {"train": idx["train"], "val": idx["valid"], "test": idx["test"]}
    item = dataset[0]
    if not isinstance(item, tuple):                               # PygNodePropPredDataset
        return from_pyg(item, name=name, symmetrize=symmetrize, **splits)
    graph, labels = item
    if isinstance(graph, dict):                                   # NodePropPredDataset
        for key in ("edge_index", "node_feat", "num_nodes"):
            if key not in graph:
                raise ValueError(f"{what}: the graph dict has no {key!r} (keys: "
                                 f"{sorted(graph)})")
        if graph["node_feat"] is None:
            raise ValueError(f"{what} has no node features (node_feat is None)")
        return _assemble(name, int(graph["num_nodes"]), graph["edge_index"], None,
                         graph["node_feat"], labels, splits, num_classes=None,
                         symmetrize=symmetrize, source="ogb", what=what)
    n, ei = _dgl_parts(graph, what)                               # DglNodePropPredDataset
    feats = graph.ndata["feat"] if "feat" in graph.ndata else None
    return _assemble(name, n, ei, None, feats, labels, splits, num_classes=None,
                     symmetrize=symmetrize, source="ogb", what=what)

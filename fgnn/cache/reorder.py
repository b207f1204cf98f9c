"""Hot-first reordering of graph and features (DataTiering, Min et al., §3.2, Algorithm 2).

Renumbering vertices by descending score puts the hot rows at the front of the feature matrix, so
"is ``v`` cached?" becomes ``v < num_cached`` and no full id → slot map is needed (the paper's
reason for reordering the graph as well as the features). Algorithm 2 computes ``srt_idx`` (old id
→ new id), scatters the row lengths to their new rows, takes a prefix sum for the new row
pointers, relabels every edge endpoint through ``srt_idx`` and copies each neighbour list to its
new place, in its old order. Every step is a gather/scatter, vectorised here.

Because each neighbour list keeps its order, a sampler that picks neighbours by position draws the
same neighbours (relabelled) from the same random numbers: a reordered run trains on the very same
mini-batches as the plain one. :func:`reorder_dataset` applies the renumbering to everything a
job uses -- topology, features, labels and the three splits (kept in their order).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Optional, Union

import numpy as np
import torch

from fgnn.graph import CSRGraph

__all__ = ["Reordering", "hot_first_permutation", "reorder", "reorder_graph",
           "reorder_graph_to_files", "reorder_rows", "reorder_dataset"]

ArrayLike = Union[torch.Tensor, np.ndarray]


def hot_first_permutation(score: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The hot-first renumbering.

    Args:
        score: ``(N,)`` hotness; ties keep the smaller old id first.

    Returns:
        ``(perm, inv)``: ``perm[new] = old`` (vertices by descending score) and
        ``inv[old] = new`` (Algorithm 2's ``srt_idx``). For scores ``[0.1, 0.4, 0.2, 0.3]`` the
        paper's mapping is ``inv = [3, 0, 2, 1]``.
    """
    s = torch.as_tensor(score)
    if s.dim() != 1:
        raise ValueError(f"score must be a 1-D tensor of length N, got shape {tuple(s.shape)}")
    if s.numel() and bool(torch.isnan(s.to(torch.float64)).any()):
        raise ValueError("score contains NaN")
    perm = torch.argsort(s, descending=True, stable=True)
    inv = torch.empty_like(perm)
    inv[perm] = torch.arange(perm.numel(), device=perm.device)
    return perm, inv


def _check_perm(perm: torch.Tensor, n: int) -> torch.Tensor:
    p = torch.as_tensor(perm).long()
    if p.shape != (n,):
        raise ValueError(f"perm has shape {tuple(p.shape)}, expected ({n},)")
    if n and not torch.equal(torch.sort(p).values, torch.arange(n, device=p.device)):
        raise ValueError("perm is not a permutation of [0, N)")
    return p


def reorder_graph(graph: CSRGraph, perm: torch.Tensor,
                  inv: Optional[torch.Tensor] = None) -> CSRGraph:
    """Renumber ``graph`` so new vertex ``i`` is old vertex ``perm[i]`` (Algorithm 2).

    Row ``i`` of the result is old row ``perm[i]`` with every neighbour relabelled through
    ``inv``, in the row's old order (Algorithm 2 copies the neighbour lists as they are); edge
    weights follow their edges.
    """
    n = graph.num_nodes
    dev = graph.device
    perm = _check_perm(perm, n).to(dev)
    if inv is None:
        inv = torch.empty_like(perm)
        inv[perm] = torch.arange(n, device=dev)
    inv = inv.to(dev).long()
    deg = graph.degrees()
    new_deg = deg[perm]  # nd[srt_idx[i] + 1] = neighbour-list length of old row i
    indptr = torch.zeros(n + 1, dtype=torch.int64, device=dev)
    torch.cumsum(new_deg, 0, out=indptr[1:])  # prefix sum
    e = graph.num_edges
    # Position of every new edge in the old edge list: old row start + offset within the row.
    shift = torch.repeat_interleave(graph.indptr[:-1][perm] - indptr[:-1], new_deg,
                                    output_size=e)
    src_pos = torch.arange(e, device=dev) + shift
    cols = inv[graph.indices.long()[src_pos]]  # edg[i] = srt_idx[edg[i]]
    w = None if graph.weights is None else graph.weights[src_pos].contiguous()
    return CSRGraph(indptr, cols.to(graph.indices.dtype).contiguous(), w)


#: Edges a chunk of :func:`reorder_graph_to_files` relabels at once (its int64 positions and
#: gathered ids are the chunk's only edge-sized memory).
CHUNK_EDGES = 1 << 24


def reorder_graph_to_files(graph: CSRGraph, perm: torch.Tensor, inv: torch.Tensor,
                           directory: Union[str, os.PathLike],
                           chunk_edges: int = CHUNK_EDGES) -> CSRGraph:
    """:func:`reorder_graph` for a memory-mapped topology: the new ``indptr``, ``indices`` (and
    weights) are written to ``.npy`` files in ``directory`` a chunk of new rows at a time and
    mapped back (``graph.files``), so the processes of a host share them as they shared the
    original. Memory: ``indptr``-sized arrays (degrees, pointers, ``inv`` as int32 where ids
    fit) and one chunk of at most ``chunk_edges`` edges (a longer row is a chunk of its own);
    no edge-sized array.
    """
    from fgnn.data.ondisk import fsync_path
    from fgnn.graph.csr import TopologyFiles

    n, e = graph.num_nodes, graph.num_edges
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    p = _check_perm(perm, n).cpu().numpy()
    iv = torch.as_tensor(inv).cpu().numpy().astype(
        np.int32 if n < 2 ** 31 else np.int64, copy=False)
    old_ptr = graph.indptr.cpu().numpy()
    old_idx = graph.indices.cpu().numpy()
    old_w = None if graph.weights is None else graph.weights.cpu().numpy()
    deg = np.diff(old_ptr)
    fmt = np.lib.format
    ptr = fmt.open_memmap(d / "indptr.npy", mode="w+", dtype=np.int64, shape=(n + 1,))
    ptr[0] = 0
    np.cumsum(deg[p], out=ptr[1:])
    idx = fmt.open_memmap(d / "indices.npy", mode="w+", dtype=old_idx.dtype, shape=(e,))
    w = (None if old_w is None else
         fmt.open_memmap(d / "weights.npy", mode="w+", dtype=old_w.dtype, shape=(e,)))
    a = 0
    while a < n:
        b = int(np.searchsorted(ptr, ptr[a] + max(1, int(chunk_edges)), side="right")) - 1
        b = min(n, max(a + 1, b))
        rows, s0, s1 = p[a:b], int(ptr[a]), int(ptr[b])
        # old position of each new edge: its old row's start plus its offset in the row
        pos = np.repeat(old_ptr[rows] - ptr[a:b], deg[rows]) + np.arange(s0, s1)
        idx[s0:s1] = iv[old_idx[pos]]
        if w is not None:
            w[s0:s1] = old_w[pos]
        a = b
    files = []
    for name, arr in (("indptr", ptr), ("indices", idx), ("weights", w)):
        if arr is not None:
            arr.flush()
            fsync_path(d / f"{name}.npy")
            files.append(str((d / f"{name}.npy").resolve()))
    return TopologyFiles(*files).open()


def reorder_rows(rows: ArrayLike, perm: torch.Tensor) -> torch.Tensor:
    """Rows (features, labels, masks) in the new order: ``out[new] = rows[perm[new]]``.

    Accepts a tensor, a numpy array or an ``np.memmap`` (read into memory in the new order).
    """
    p = torch.as_tensor(perm).long()
    if isinstance(rows, np.ndarray):
        if rows.shape[0] != p.numel():
            raise ValueError(f"rows has {rows.shape[0]} rows, expected {p.numel()}")
        return torch.from_numpy(np.ascontiguousarray(rows[p.cpu().numpy()]))
    if not isinstance(rows, torch.Tensor):
        raise ValueError(f"rows must be a tensor or numpy array, got {type(rows).__name__}")
    if rows.shape[0] != p.numel():
        raise ValueError(f"rows has {rows.shape[0]} rows, expected {p.numel()}")
    return rows[p.to(rows.device)]


@dataclass
class Reordering:
    """The result of :func:`reorder`.

    Attributes:
        graph: the renumbered graph.
        perm: ``(N,)`` new id → old id.
        inv: ``(N,)`` old id → new id (Algorithm 2's ``srt_idx``).
        features: features in the new order, when given.
    """

    graph: CSRGraph
    perm: torch.Tensor
    inv: torch.Tensor
    features: Optional[torch.Tensor] = None

    def to_new(self, ids: torch.Tensor) -> torch.Tensor:
        """Map old ids (e.g. the training set) to new ids."""
        return self.inv[torch.as_tensor(ids, device=self.inv.device).long()]

    def to_old(self, ids: torch.Tensor) -> torch.Tensor:
        """Map new ids back to old ids."""
        return self.perm[torch.as_tensor(ids, device=self.perm.device).long()]


def reorder(graph: CSRGraph, score: torch.Tensor,
            features: Optional[ArrayLike] = None) -> Reordering:
    """Hot-first reorder ``graph`` (and ``features``) by descending ``score``.

    After this, caching the ``C`` hottest rows is caching new ids ``[0, C)``, and
    ``new_id < C`` tells whether a vertex is cached.

    Raises:
        ValueError: if ``score`` or ``features`` does not have N rows.
    """
    s = torch.as_tensor(score)
    if s.dim() != 1 or s.numel() != graph.num_nodes:
        raise ValueError(f"score has shape {tuple(s.shape)}, expected ({graph.num_nodes},)")
    perm, inv = hot_first_permutation(s.to(graph.device))
    g = reorder_graph(graph, perm, inv)
    f = None if features is None else reorder_rows(features, perm)
    return Reordering(g, perm, inv, f)


class _PermutedRows:
    """Rows of ``src`` in the order ``perm``, read a slice at a time (for the chunked writer)."""

    def __init__(self, src: np.ndarray, perm: np.ndarray) -> None:
        self.src, self.perm = src, perm
        self.shape, self.ndim, self.dtype = src.shape, src.ndim, src.dtype

    def __getitem__(self, rows: slice) -> np.ndarray:
        ids = self.perm[rows]
        order = np.argsort(ids, kind="stable")  # read the old rows in file order
        out = np.empty((ids.size, self.shape[1]), dtype=self.dtype)
        out[order] = self.src[ids[order]]
        return out


def reorder_features_to_file(features: np.ndarray, perm: torch.Tensor,
                             path: Union[str, os.PathLike]) -> np.ndarray:
    """Write ``features`` in the new order to the ``.npy`` file ``path`` and map it read-only.

    The matrix is streamed a chunk of rows at a time (:func:`fgnn.data.ondisk.
    write_features_npy_chunked`), so an on-disk feature file larger than memory can be reordered.

    Returns:
        The ``(N, F)`` memory map of the new file: row ``i`` is old row ``perm[i]``.
    """
    from fgnn.data.ondisk import write_features_npy_chunked

    p = np.asarray(torch.as_tensor(perm).cpu().numpy(), dtype=np.int64)
    if features.shape[0] != p.size:
        raise ValueError(f"features has {features.shape[0]} rows, expected {p.size}")
    write_features_npy_chunked(path, _PermutedRows(features, p))
    return np.load(path, mmap_mode="r")


def reorder_dataset(dataset: Any, score: torch.Tensor,
                    workdir: Optional[Union[str, os.PathLike]] = None) -> tuple[Any, Reordering]:
    """Hot-first renumber a whole :class:`~fgnn.data.Dataset` by descending ``score``.

    Topology (Algorithm 2), features and labels move to the new ids; ``train_idx``, ``val_idx``
    and ``test_idx`` hold the new ids of the same vertices in the same order, so mini-batches,
    evaluation chunks and every per-vertex array of the new dataset describe the same vertices as
    before. Features that are a file-backed ``np.memmap`` (an ``ondisk:DIR`` dataset) are written
    in the new order to ``workdir/features.npy`` and mapped from there (never loaded whole);
    in-memory features are permuted in memory. A memory-mapped topology (``graph.files``) is
    written to ``workdir/topology`` in chunks (:func:`reorder_graph_to_files`) when a
    ``workdir`` is given.

    Args:
        dataset: the dataset in its original numbering.
        score: ``(N,)`` hotness; ties keep the smaller old id first.
        workdir: directory for the reordered on-disk features and topology (required when
            the features are a file-backed memmap).

    Returns:
        ``(reordered dataset, the Reordering)``; the Reordering's ``features`` is left ``None``
        (they live in the dataset).

    Raises:
        ValueError: on a score of the wrong shape, or on-disk features without ``workdir``.
    """
    g = dataset.graph
    s = torch.as_tensor(score)
    if s.dim() != 1 or s.numel() != g.num_nodes:
        raise ValueError(f"score has shape {tuple(s.shape)}, expected ({g.num_nodes},)")
    perm, inv = hot_first_permutation(s.cpu())
    if g.files is not None and workdir is not None:   # mapped: a reordered copy on disk
        graph = reorder_graph_to_files(g, perm, inv, Path(workdir) / "topology")
    else:
        graph = reorder_graph(g, perm.to(g.device), inv.to(g.device))
    feats = dataset.features
    if isinstance(feats, np.memmap) and feats.filename is not None:
        if workdir is None:
            raise ValueError("reorder_dataset: on-disk (memory-mapped) features need a workdir "
                             "for the reordered copy")
        Path(workdir).mkdir(parents=True, exist_ok=True)
        features: Any = reorder_features_to_file(feats, perm, Path(workdir) / "features.npy")
    else:
        features = reorder_rows(feats, perm)
    to_new = (lambda idx: inv.to(idx.device)[idx.long()])  # noqa: E731
    meta = {**dataset.meta, "reorder": {"kind": "hot-first"}}
    new = replace(dataset, graph=graph, features=features,
                  labels=dataset.labels[perm.to(dataset.labels.device)],
                  train_idx=to_new(dataset.train_idx), val_idx=to_new(dataset.val_idx),
                  test_idx=to_new(dataset.test_idx), meta=meta)
    return new, Reordering(graph, perm, inv)

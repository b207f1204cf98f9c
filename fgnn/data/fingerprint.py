"""A content fingerprint of a dataset: what ``--resume`` compares besides the sizes.

Two datasets of the same sizes (a node permutation of Cora, another split of the same graph)
train the same weight shapes, so only their contents tell them apart. :func:`content_digest`
hashes (BLAKE2b) each part of a dataset -- the graph, the features, the labels and the splits --
with its shape and dtype. An array of at most :data:`FULL_BYTES` is hashed whole; a larger one
(the features or edges of a large graph, possibly a memory-mapped file) by
:data:`SAMPLE_BLOCKS` evenly spaced blocks of rows, :data:`FULL_BYTES` in all, so the digest
costs a bounded read whatever the size (a relabelled or reshuffled graph changes every block).
"""

from __future__ import annotations

import hashlib
from typing import Any, Iterable, Optional

import numpy as np
import torch

__all__ = ["content_digest", "FULL_BYTES", "SAMPLE_BLOCKS", "PARTS"]

#: Largest array hashed whole; larger ones are sampled to about this many bytes.
FULL_BYTES = 16 << 20
#: Evenly spaced blocks of rows a large array is sampled by.
SAMPLE_BLOCKS = 64
#: The parts :func:`content_digest` fingerprints, in the order messages name them.
PARTS = ("graph", "features", "labels", "splits")


def _rows(arr: Any, lo: int, hi: int) -> bytes:
    """Rows ``lo:hi`` of a tensor or (memory-mapped) array as bytes."""
    block = arr[lo:hi]
    if isinstance(block, torch.Tensor):
        block = block.detach().cpu().contiguous()
        return block.view(torch.uint8).numpy().tobytes() if block.numel() else b""
    return np.ascontiguousarray(block).tobytes()


def _update(h: Any, arr: Optional[Any]) -> None:
    """Hash ``arr``'s shape, dtype and contents (whole, or sampled blocks of rows) into ``h``."""
    if arr is None:
        h.update(b"none;")
        return
    shape = tuple(int(d) for d in arr.shape)
    dtype = str(arr.dtype).removeprefix("torch.")  # torch.float32 and float32 alike
    h.update(f"{shape};{dtype};".encode())
    n = shape[0] if shape else 0
    if n == 0:
        return
    item = arr.element_size() if isinstance(arr, torch.Tensor) else arr.dtype.itemsize
    row = max(1, item * int(np.prod(shape[1:], dtype=np.int64)))
    if n * row <= FULL_BYTES:
        h.update(_rows(arr, 0, n))
        return
    per = max(1, FULL_BYTES // SAMPLE_BLOCKS // row)
    for lo in np.linspace(0, n - per, SAMPLE_BLOCKS).astype(np.int64):
        h.update(_rows(arr, int(lo), int(lo) + per))


def _digest(arrays: Iterable[tuple[str, Optional[Any]]]) -> str:
    h = hashlib.blake2b(digest_size=16)
    for name, arr in arrays:
        h.update(f"{name}:".encode())
        _update(h, arr)
    return h.hexdigest()


def _graph_arrays(graph: Any) -> list[tuple[str, Optional[Any]]]:
    """The arrays of a CSR graph, or of every relation of a typed graph (sorted by name)."""
    relations = getattr(graph, "relations", None)
    if relations is None:
        return [("indptr", graph.indptr), ("indices", graph.indices),
                ("weights", graph.weights)]
    out: list[tuple[str, Optional[Any]]] = []
    for et in sorted(relations):
        csr = relations[et]
        name = ",".join(et)
        out += [(f"{name}/indptr", csr.indptr), (f"{name}/indices", csr.indices),
                (f"{name}/weights", csr.weights)]
    return out


def content_digest(dataset: Any) -> dict[str, str]:
    """The content fingerprint of a dataset, one hex digest per part of :data:`PARTS`.

    Args:
        dataset: a :class:`~fgnn.data.Dataset` (homogeneous, typed or user-item).

    Returns:
        ``{"graph": ..., "features": ..., "labels": ..., "splits": ...}``: the graph's CSR arrays
        (every relation of a typed graph), the feature rows (every node type's), the labels,
        and the three split id arrays.
    """
    graph = dataset.graph
    typed = getattr(graph, "relations", None) is not None
    feats = (sorted(graph.features.items()) if typed else [("x", dataset.features)])
    return {
        "graph": _digest(_graph_arrays(graph)),
        "features": _digest(feats),
        "labels": _digest([("y", dataset.labels)]),
        "splits": _digest([(s, getattr(dataset, s)) for s in ("train_idx", "val_idx",
                                                              "test_idx")]),
    }

"""Compressed sparse row graph, the topology every fgnn component shares.

Convention: row ``v`` lists the neighbours that ``v`` *aggregates from* (the sources of the
messages into ``v``), so sampling a seed ``v`` reads ``indices[indptr[v]:indptr[v + 1]]``. This is
PyG's CSC view of ``edge_index`` (``edge_index[0]`` = source, ``edge_index[1]`` = destination) and
DGL's in-edge sampling; for a symmetrised graph the two views coincide.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

import numpy as np
import torch

from fgnn import gpu

__all__ = ["CSRGraph", "TopologyFiles", "CHUNK"]

#: Elements per pass of the whole-graph scans (degrees, checks): no E-sized temporary is made.
CHUNK = 1 << 24


@dataclass(frozen=True)
class TopologyFiles:
    """The ``.npy`` files a memory-mapped topology was opened from: enough for another process
    on the host to map the same pages (the page cache holds one copy for all).

    Attributes:
        indptr, indices: absolute paths of the ``.npy`` files.
        weights: the weights file, or None.
    """

    indptr: str
    indices: str
    weights: Optional[str] = None

    def open(self) -> "CSRGraph":
        """The topology, memory-mapped copy-on-write (shared pages, writable tensors)."""
        def mapped(path: str) -> torch.Tensor:
            return torch.from_numpy(np.load(path, mmap_mode="c"))

        w = None if self.weights is None else mapped(self.weights)
        g = CSRGraph._trusted(mapped(self.indptr), mapped(self.indices), w)
        g.files = self
        return g


@dataclass
class CSRGraph:
    """A directed graph in CSR form.

    Attributes:
        indptr: ``(N + 1,)`` int64 row pointers, ``indptr[0] == 0``, non-decreasing.
        indices: ``(E,)`` int32 or int64 neighbour ids, each in ``[0, N)``; the loaders sort
            them within a row (a hot-first reordering keeps each row's order, relabelled).
        weights: optional ``(E,)`` float32 positive edge weights (for weighted sampling).
        files: where the arrays are memory-mapped from, when they are (executors then map the
            same files instead of receiving a copy); None for in-memory arrays.
    """

    indptr: torch.Tensor
    indices: torch.Tensor
    weights: Optional[torch.Tensor] = None
    files: Optional[TopologyFiles] = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        self.validate()

    # ------------------------------------------------------------------ properties
    @property
    def num_nodes(self) -> int:
        """Number of vertices N."""
        return int(self.indptr.numel()) - 1

    @property
    def num_edges(self) -> int:
        """Number of directed edges E."""
        return int(self.indices.numel())

    @property
    def device(self) -> torch.device:
        """Device holding the topology."""
        return self.indptr.device

    def degrees(self) -> torch.Tensor:
        """Row lengths: the number of neighbours each vertex samples from, ``(N,)`` int64."""
        return self.indptr[1:] - self.indptr[:-1]

    def in_degrees(self) -> torch.Tensor:
        """How many rows list each vertex as a neighbour, ``(N,)`` int64 (counted in chunks of
        :data:`CHUNK` edges: no E-sized int64 copy of ``indices``)."""
        out = torch.zeros(self.num_nodes, dtype=torch.int64, device=self.device)
        for lo in range(0, self.num_edges, CHUNK):
            part = self.indices[lo:lo + CHUNK]
            out += torch.bincount(part if part.dtype == torch.int64 else part.long(),
                                  minlength=self.num_nodes)
        return out

    def out_degrees(self) -> torch.Tensor:
        """Alias of :meth:`in_degrees` seen from the message sender: the number of vertices a
        vertex sends messages to (the PaGraph "out-degree" hotness)."""
        return self.in_degrees()

    def nbytes(self) -> int:
        """Bytes the topology occupies (indptr + indices + weights)."""
        total = self.indptr.numel() * self.indptr.element_size()
        total += self.indices.numel() * self.indices.element_size()
        if self.weights is not None:
            total += self.weights.numel() * self.weights.element_size()
        return int(total)

    # ------------------------------------------------------------------ validation
    def validate(self) -> None:
        """Check dtypes, shapes and CSR invariants; raise ``ValueError`` naming the field."""
        if not isinstance(self.indptr, torch.Tensor) or self.indptr.dtype != torch.int64:
            raise ValueError(
                f"CSRGraph.indptr must be an int64 tensor, got "
                f"{getattr(self.indptr, 'dtype', type(self.indptr).__name__)}"
            )
        if self.indptr.dim() != 1 or self.indptr.numel() < 1:
            raise ValueError(f"CSRGraph.indptr must be 1-D with N + 1 >= 1 entries, got shape "
                             f"{tuple(self.indptr.shape)}")
        if not isinstance(self.indices, torch.Tensor) or self.indices.dtype not in (
                torch.int32, torch.int64):
            raise ValueError(
                f"CSRGraph.indices must be an int32 or int64 tensor, got "
                f"{getattr(self.indices, 'dtype', type(self.indices).__name__)}"
            )
        if self.indices.dim() != 1:
            raise ValueError(f"CSRGraph.indices must be 1-D, got shape {tuple(self.indices.shape)}")
        if int(self.indptr[0]) != 0:
            raise ValueError(f"CSRGraph.indptr[0] must be 0, got {int(self.indptr[0])}")
        if int(self.indptr[-1]) != self.indices.numel():
            raise ValueError(
                f"CSRGraph.indptr[-1]={int(self.indptr[-1])} does not match "
                f"len(indices)={self.indices.numel()}"
            )
        if self.num_nodes > 0:
            steps = self.indptr[1:] - self.indptr[:-1]
            if bool((steps < 0).any()):
                row = int(torch.nonzero(steps < 0)[0])
                raise ValueError(f"CSRGraph.indptr is not non-decreasing at row {row}")
        if self.indices.numel() > 0:
            lo, hi = int(self.indices.min()), int(self.indices.max())
            if lo < 0 or hi >= self.num_nodes:
                bad = lo if lo < 0 else hi
                raise ValueError(
                    f"CSRGraph.indices holds node id {bad}, outside [0, {self.num_nodes})"
                )
        if self.weights is not None:
            if not isinstance(self.weights, torch.Tensor) or not self.weights.is_floating_point():
                raise ValueError("CSRGraph.weights must be a floating-point tensor")
            if self.weights.shape != self.indices.shape:
                raise ValueError(
                    f"CSRGraph.weights has shape {tuple(self.weights.shape)}, expected "
                    f"{tuple(self.indices.shape)} (one weight per edge)"
                )
            for lo in range(0, self.weights.numel(), CHUNK):
                part = self.weights[lo:lo + CHUNK]
                if bool(torch.isnan(part).any()):
                    raise ValueError("CSRGraph.weights contains NaN")
                if bool((part < 0).any()):
                    raise ValueError(
                        f"CSRGraph.weights must be non-negative, got min "
                        f"{float(self.weights.min())}"
                    )

    # ------------------------------------------------------------------ moves
    def to(self, device: torch.device | str) -> "CSRGraph":
        """Return a copy of the topology on ``device`` (no copy if already there)."""
        w = None if self.weights is None else self.weights.to(device)
        g = CSRGraph._trusted(self.indptr.to(device), self.indices.to(device), w)
        if g.indices is self.indices:  # not moved: still the mapped pages
            g.files = self.files
        return g

    def pin_memory(self) -> "CSRGraph":
        """Return a copy in page-locked host memory (no-op without CUDA)."""
        if not gpu.is_available():
            return self
        w = None if self.weights is None else gpu.pin(self.weights)
        return CSRGraph._trusted(gpu.pin(self.indptr), gpu.pin(self.indices), w)

    @classmethod
    def _trusted(cls, indptr: torch.Tensor, indices: torch.Tensor,
                 weights: Optional[torch.Tensor]) -> "CSRGraph":
        """Build without re-validating (inputs come from an already valid graph)."""
        g = cls.__new__(cls)
        g.indptr, g.indices, g.weights, g.files = indptr, indices, weights, None
        return g

    # ------------------------------------------------------------------ transforms
    def reverse(self) -> "CSRGraph":
        """The transposed graph: row ``u`` of the result lists the ``v`` whose row holds ``u``."""
        n = self.num_nodes
        rows = torch.repeat_interleave(torch.arange(n, device=self.device), self.degrees())
        return CSRGraph.from_edge_index(
            torch.stack([self.indices.long(), rows]), num_nodes=n, weights=self.weights,
            index_dtype=self.indices.dtype, flow="dst_to_src")

    def edge_index(self) -> torch.Tensor:
        """``(2, E)`` int64 ``[source, destination]`` pairs (source = neighbour, dst = row)."""
        rows = torch.repeat_interleave(torch.arange(self.num_nodes, device=self.device),
                                       self.degrees())
        return torch.stack([self.indices.long(), rows])

    # ------------------------------------------------------------------ constructors
    @classmethod
    def from_edge_index(
        cls,
        edge_index: torch.Tensor | np.ndarray,
        num_nodes: Optional[int] = None,
        weights: Optional[torch.Tensor | np.ndarray] = None,
        *,
        symmetrize: bool = False,
        dedup: bool = False,
        index_dtype: torch.dtype = torch.int64,
        flow: str = "src_to_dst",
    ) -> "CSRGraph":
        """Build a sorted CSR graph from ``(2, E)`` edges.

        Args:
            edge_index: ``(2, E)`` integer node pairs ``[source, destination]``.
            num_nodes: N; defaults to ``max id + 1``.
            weights: optional ``(E,)`` edge weights.
            symmetrize: add the reverse of every edge (weights are copied).
            dedup: drop repeated ``(row, neighbour)`` pairs (the first weight is kept).
            index_dtype: dtype of ``indices`` (int32 halves the memory of large graphs).
            flow: ``"src_to_dst"`` (row = destination, PyG's default message flow) or
                ``"dst_to_src"`` (row = ``edge_index[0]``).

        Raises:
            ValueError: on a malformed shape, negative or out-of-range ids, or bad weights.
        """
        ei, w, n = _check_edges(edge_index, num_nodes, weights, flow)
        if flow == "src_to_dst":
            rows, cols = ei[1], ei[0]
        else:
            rows, cols = ei[0], ei[1]
        if symmetrize:
            rows, cols = torch.cat([rows, cols]), torch.cat([cols, rows])
            if w is not None:
                w = torch.cat([w, w])
        rows, cols, w = _sort_edges(rows, cols, w, n, dedup)
        counts = torch.bincount(rows, minlength=n)
        indptr = torch.zeros(n + 1, dtype=torch.int64)
        torch.cumsum(counts, 0, out=indptr[1:])
        return cls(indptr, cols.to(index_dtype).contiguous(),
                   None if w is None else w.contiguous())

    @classmethod
    def from_scipy(cls, matrix, *, index_dtype: torch.dtype = torch.int64) -> "CSRGraph":
        """Build from a scipy sparse matrix whose row ``v`` lists the neighbours of ``v``.

        Stored values become edge weights unless they are all one.
        """
        import scipy.sparse as sp

        if not sp.issparse(matrix):
            raise ValueError(f"from_scipy expects a scipy sparse matrix, got "
                             f"{type(matrix).__name__}")
        if matrix.shape[0] != matrix.shape[1]:
            raise ValueError(f"adjacency matrix must be square, got shape {matrix.shape}")
        csr = sp.csr_matrix(matrix)
        csr.sum_duplicates()
        csr.sort_indices()
        data = np.asarray(csr.data, dtype=np.float32)
        weights = None if data.size == 0 or np.all(data == 1) else torch.from_numpy(data)
        return cls(torch.from_numpy(csr.indptr.astype(np.int64)),
                   torch.from_numpy(csr.indices.astype(np.int64)).to(index_dtype),
                   weights)

    def __repr__(self) -> str:
        w = ", weighted" if self.weights is not None else ""
        return (f"CSRGraph(num_nodes={self.num_nodes}, num_edges={self.num_edges}, "
                f"indices={self.indices.dtype}{w}, device={self.device})")


def _check_edges(edge_index: torch.Tensor | np.ndarray, num_nodes: Optional[int],
                 weights: Optional[torch.Tensor | np.ndarray], flow: str
                 ) -> tuple[torch.Tensor, Optional[torch.Tensor], int]:
    """:meth:`CSRGraph.from_edge_index`'s inputs checked: ``(int64 (2, E) edges, float32
    weights or None, N)``."""
    ei = torch.as_tensor(edge_index)
    if ei.dim() != 2 or ei.shape[0] != 2:
        raise ValueError(f"edge_index must have shape (2, E), got {tuple(ei.shape)}")
    if ei.is_floating_point() or ei.dtype == torch.bool:
        raise ValueError(f"edge_index must hold integers, got dtype {ei.dtype}")
    if flow not in ("src_to_dst", "dst_to_src"):
        raise ValueError(f"flow must be 'src_to_dst' or 'dst_to_src', got {flow!r}")
    ei = ei.long()
    w = None if weights is None else torch.as_tensor(weights, dtype=torch.float32)
    if w is not None and w.shape != (ei.shape[1],):
        raise ValueError(
            f"weights has shape {tuple(w.shape)}, expected ({ei.shape[1]},) (one per edge)")
    if ei.numel() > 0 and int(ei.min()) < 0:
        raise ValueError(f"edge_index holds a negative node id {int(ei.min())}")
    max_id = int(ei.max()) + 1 if ei.numel() > 0 else 0
    n = max_id if num_nodes is None else int(num_nodes)
    if n < max_id:
        raise ValueError(f"edge_index holds node id {max_id - 1}, outside num_nodes={n}")
    return ei, w, n


def _sort_edges(rows: torch.Tensor, cols: torch.Tensor, w: Optional[torch.Tensor], n: int,
                dedup: bool) -> tuple[torch.Tensor, torch.Tensor, Optional[torch.Tensor]]:
    """The edges sorted by ``(row, col)`` (one stable sort on a combined key), repeated pairs
    dropped when ``dedup`` (the first weight is kept)."""
    key = rows * max(n, 1) + cols
    order = torch.argsort(key, stable=True)
    key = key[order]
    rows, cols = rows[order], cols[order]
    if w is not None:
        w = w[order]
    if dedup and key.numel() > 0:
        keep = torch.ones_like(key, dtype=torch.bool)
        keep[1:] = key[1:] != key[:-1]
        rows, cols = rows[keep], cols[keep]
        if w is not None:
            w = w[keep]
    return rows, cols, w

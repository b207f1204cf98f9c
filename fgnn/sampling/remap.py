"""Dedup + remap of sampled vertices to consecutive local ids (FGNN §2 Fig. 1, §5.1 Fig. 9).

The hot path of the Sample stage after neighbour selection. GNNLab/FGNN dedups with a global
scratch array of size N on the sampling device instead of a hash map; this module does the same in
vectorised torch:

* ``scratch[v]`` holds the local id of every vertex already in the sample and ``_EMPTY``
  otherwise. It is allocated once per (device, N) and only the entries a sample touched are reset
  when the sample ends, so the per-sample cost is O(sampled edges), not O(N).
* To number the vertices a hop discovers in order of first occurrence, every candidate position
  ``p`` is scattered with ``amin`` as ``base + p``: known vertices keep their (smaller) local id,
  new ones end up holding ``base + first position``. One gather finds the first occurrences
  (value == ``base + p``); their new ids are written back and a second gather reads every
  candidate's local id.

Numbering (the convention of :mod:`fgnn.sampling.base`): seeds take ids ``0..B-1``; each hop's
newly discovered vertices follow in order of first appearance among that hop's candidates.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Optional

import torch

from fgnn.config import FRONTIERS
from fgnn.sampling.checks import seed_value_error
from fgnn.sampling.kernels import kernel_for

if TYPE_CHECKING:
    from fgnn.sampling.base import Block, Sample

__all__ = ["Remapper", "sample_layers"]

_I32_MAX = torch.iinfo(torch.int32).max
_I64_MAX = torch.iinfo(torch.int64).max
_EMPTY = _I64_MAX  # empty entry of an int64 scratch array (int32 arrays use _I32_MAX)


class Remapper:
    """Scratch-array dedup/remap shared by all samplers; one sample at a time (not thread-safe).

    Usage::

        rm = Remapper()
        rm.begin(seeds, num_nodes)          # seeds -> local ids 0..B-1
        src_local = rm.add(neighbours)      # per hop: global ids -> local ids, new ids appended
        frontier = rm.nodes()               # all vertices so far, local id = position
        input_nodes = rm.end()              # resets the touched scratch entries

    The scratch array (``N`` entries, int32 when ``N <= 2**30`` - half the cache footprint -
    else int64) is kept between samples on the device it was first used on; a sample on another
    device or graph size allocates a new one.
    """

    def __init__(self) -> None:
        self._scratch: Optional[torch.Tensor] = None
        self._base = 0
        self._empty = 0
        self._parts: list[torch.Tensor] = []
        self._size = 0
        self._active = False
        self._pending: Optional[tuple[torch.Tensor, torch.Tensor]] = None  # seeds, bad flag

    def __getstate__(self) -> dict:
        """Pickle without the scratch array: a sampler shipped to an executor builds its own
        there, on its own device, instead of carrying O(N) bytes through the object store."""
        if self._active:
            raise RuntimeError("cannot pickle a Remapper in the middle of a sample")
        state = dict(self.__dict__)
        state["_scratch"] = None
        state["_pending"] = None
        return state

    @staticmethod
    def scratch_bytes(num_nodes: int) -> int:
        """Device bytes of the scratch array for a graph of ``num_nodes`` vertices."""
        return int(num_nodes) * (4 if num_nodes <= (1 << 30) else 8)

    # ------------------------------------------------------------------ lifecycle
    def begin(self, seeds: torch.Tensor, num_nodes: int, check: bool = True) -> None:
        """Start a sample whose first local ids are ``seeds``.

        Args:
            seeds: ``(B,)`` int64 vertex ids.
            num_nodes: N of the graph.
            check: verify that ``seeds`` are in ``[0, N)`` and distinct. The check costs no
                host sync of its own: its flag is read by the first :meth:`add`'s sync (or by
                :meth:`end`), and until then the sample runs on the seeds clamped into range.
                Callers that validated the seeds already pass ``False``.

        Raises:
            ValueError: (from that later sync) an id outside ``[0, N)`` or a repeated vertex.
            RuntimeError: if the previous sample was not ended.
        """
        if self._active:
            raise RuntimeError("Remapper.begin called before the previous sample's end()")
        s = self._scratch
        if s is None or s.device != seeds.device or s.numel() != num_nodes:
            small = num_nodes <= (1 << 30)
            dtype = torch.int32 if small else torch.int64
            # local ids < base <= base + position < empty
            self._base = (1 << 30) if small else (1 << 40)
            self._empty = _I32_MAX if small else _I64_MAX
            s = torch.full((num_nodes,), self._empty, dtype=dtype, device=seeds.device)
            self._scratch = s
        self._pending = None
        if check and seeds.numel() > 0:
            given, seeds = seeds, seeds.clamp(0, num_nodes - 1)
            self._pending = (given, (given != seeds).any())
        pos = torch.arange(seeds.numel(), device=seeds.device, dtype=s.dtype)
        s.scatter_reduce_(0, seeds, pos, "amin")
        if self._pending is not None:  # a repeat: its later copy lost the amin
            given, out_of_range = self._pending
            self._pending = (given, out_of_range | (s.index_select(0, seeds) != pos).any())
        self._parts = [seeds]
        self._size = int(seeds.numel())
        self._active = True

    def _raise_if_bad_seeds(self, bad: bool) -> None:
        given, num_nodes = self._pending[0], self._scratch.numel()
        self._pending = None
        if bad:
            raise seed_value_error(given, num_nodes)

    def add(self, cand: torch.Tensor) -> torch.Tensor:
        """Map global ids ``cand`` ``(E,)`` int64 to local ids, appending unseen vertices.

        New vertices are numbered ``size, size + 1, ...`` in order of their first position in
        ``cand``. One host sync: the new vertices' positions (with the seed check of
        :meth:`begin`, when it is still pending).

        Returns:
            ``(E,)`` int64 local ids.
        """
        if kernel_for(cand, work=cand.numel()) == "compiled":
            return self._add_compiled(cand)
        limit = self._empty - self._base - 1  # positions per pass that fit above base
        if cand.numel() > limit:
            return torch.cat([self.add(cand[lo:lo + limit])
                              for lo in range(0, cand.numel(), limit)])
        s = self._scratch
        e = cand.numel()
        if e == 0:
            if self._pending is not None:
                self._raise_if_bad_seeds(bool(self._pending[1]))
            return torch.empty(0, dtype=torch.int64, device=cand.device)
        pos = torch.arange(self._base, self._base + e, device=cand.device, dtype=s.dtype)
        s.scatter_reduce_(0, cand, pos, "amin")
        first = s.index_select(0, cand) == pos  # new vertex, first occurrence
        new_pos = self._new_positions(first, cand)
        count = int(new_pos.numel())
        if count > 0:
            new_vertices = cand.index_select(0, new_pos)
            new_ids = torch.arange(self._size, self._size + count, device=cand.device,
                                   dtype=s.dtype)
            s.index_copy_(0, new_vertices, new_ids)
            self._parts.append(new_vertices)
            self._size += count
        return s.index_select(0, cand).long()

    def _add_compiled(self, cand: torch.Tensor) -> torch.Tensor:
        """:meth:`add` as one compiled loop (:mod:`fgnn.sampling.khop_compiled`), same ids."""
        from fgnn.sampling.khop_compiled import remap_compiled

        if self._pending is not None:
            self._raise_if_bad_seeds(bool(self._pending[1]))
        local, new_vertices = remap_compiled(self._scratch, cand, self._size, self._empty)
        if new_vertices.numel() > 0:
            self._parts.append(new_vertices)
            self._size += int(new_vertices.numel())
        return local

    def _new_positions(self, first: torch.Tensor, cand: torch.Tensor) -> torch.Tensor:
        """The positions of ``first``'s set entries, through :meth:`add`'s one host sync.

        The CUDA twin (:mod:`fgnn.sampling.kernels`) reads their count (with the pending seed
        check of :meth:`begin`) and fills a buffer of that size; the CPU twin runs ``nonzero``,
        one pass fewer, since a sync costs nothing there.

        Raises:
            ValueError: the pending seed check failed.
        """
        if self._pending is not None:
            count, bad = torch.stack([first.sum(), self._pending[1].long()]).tolist()
            if bad:  # the candidates' entries are not in the sample: reset them here
                self._scratch.index_fill_(0, cand, self._empty)
            self._raise_if_bad_seeds(bool(bad))
        elif kernel_for(cand) != "cuda":
            return torch.nonzero(first).squeeze(1)
        else:
            count = int(first.sum())
        return torch.nonzero_static(first, size=count).squeeze(1)

    def nodes(self) -> torch.Tensor:
        """All vertices of the sample so far, ``(size,)`` int64 global ids (position = local id)."""
        if len(self._parts) > 1:
            self._parts = [torch.cat(self._parts)]
        return self._parts[0]

    @property
    def size(self) -> int:
        """Number of distinct vertices so far."""
        return self._size

    def end(self) -> torch.Tensor:
        """Finish the sample: reset the scratch entries it touched; return the input nodes.

        Raises:
            ValueError: bad seeds (see :meth:`begin`) that no :meth:`add` has reported yet.
        """
        if self._pending is not None:  # a sample without any add: read the seed check now
            if bool(self._pending[1]):
                given = self._pending[0]
                self.abort()
                raise seed_value_error(given, self._scratch.numel())
            self._pending = None
        nodes = self.nodes()
        self._scratch.index_fill_(0, nodes, self._empty)
        self._parts, self._size, self._active = [], 0, False
        return nodes

    def abort(self) -> None:
        """Reset after an exception mid-sample (idempotent)."""
        self._pending = None
        if self._active:
            self.end()


#: ``select(frontier, layer) -> (neighbour global ids, dst local ids, edge weights or None)``.
LayerSelect = Callable[[torch.Tensor, int],
                       tuple[torch.Tensor, torch.Tensor, Optional[torch.Tensor]]]
#: ``edge_filter(src, dst, weights, layer, frontier_size) -> (src, dst, weights)``: drops some of
#: a hop's edges after the remap (``src`` local ids, ``dst`` positions in the hop's frontier).
EdgeFilter = Callable[[torch.Tensor, torch.Tensor, Optional[torch.Tensor], int, int],
                      tuple[torch.Tensor, torch.Tensor, Optional[torch.Tensor]]]


def sample_layers(remapper: Remapper, seeds: torch.Tensor, num_nodes: int, num_layers: int,
                  select: LayerSelect, frontier: str = "all",
                  edge_filter: Optional[EdgeFilter] = None) -> "Sample":
    """The layer loop every sampler shares (FGNN §2, Fig. 1): from the current frontier,
    ``select`` picks neighbours, the remapper gives new ones the next local ids, and one block is
    recorded per layer; blocks come back input layer first.

    Two frontiers (``frontier``):

    * ``"all"`` (DGL blocks, GNNLab): every vertex of the sample so far draws neighbours at each
      hop, so a layer's destination vertices get a fresh sample for every layer.
    * ``"new"`` (PyG's ``NeighborLoader``): only the vertices the previous hop discovered draw
      neighbours, and the block of hop ``h`` aggregates over every edge sampled at hops
      ``0 .. h``, so the seeds use the same sampled edges in every layer.

    Args:
        remapper: the sampler's scratch-array remapper (reset on success and on error).
        seeds: int64 seed ids on the graph's device; their range and repeats are checked in
            the first hop's host sync (:meth:`Remapper.begin`).
        num_nodes: N of the graph.
        num_layers: blocks to produce.
        select: picks the sampled edges of ``frontier`` for layer ``layer`` (0 = seeds' hop);
            its destination indices are positions in the frontier it was given.
        frontier: ``"all"`` or ``"new"``.
        edge_filter: called on each hop's edges after the remap, before they make a block
            (the link sampler's exclusion of seed edges, :mod:`fgnn.link._exclude`); it may only
            drop edges whose neighbour was already in the sample (the numbering of new vertices
            is fixed by then).

    Raises:
        ValueError: on another ``frontier``, or edge weights with ``frontier="new"``.
    """
    from fgnn.sampling.base import Sample

    if frontier not in FRONTIERS:
        raise ValueError(f"frontier must be one of {', '.join(FRONTIERS)}, got {frontier!r}")
    remapper.begin(seeds, num_nodes)
    try:
        blocks = _hop_blocks(remapper, num_layers, select, frontier, edge_filter)
        input_nodes = remapper.end()
    except BaseException:
        remapper.abort()
        raise
    blocks.reverse()  # blocks[0] is the input layer (the last hop)
    return Sample(seeds=seeds, blocks=blocks, input_nodes=input_nodes)


def _hop_blocks(remapper: Remapper, num_layers: int, select: LayerSelect, frontier: str,
                edge_filter: Optional[EdgeFilter]) -> "list[Block]":
    """One block per hop, seeds' hop first, for :func:`sample_layers` (between the remapper's
    ``begin`` and ``end``).

    Raises:
        ValueError: on edge weights with ``frontier="new"``.
    """
    from fgnn.sampling.base import Block

    blocks: list[Block] = []
    start = 0  # local id of the first vertex that samples at this hop
    src_so_far: list[torch.Tensor] = []
    dst_so_far: list[torch.Tensor] = []
    for layer in range(num_layers):
        nodes = remapper.nodes()
        hop = nodes if frontier == "all" else nodes[start:]
        nbr, dst, w = select(hop, layer)
        src = remapper.add(nbr)
        if edge_filter is not None:
            src, dst, w = edge_filter(src, dst, w, layer, int(hop.numel()))
        if frontier == "new":
            if w is not None:
                raise ValueError("frontier='new' does not take edge weights")
            src_so_far.append(src)
            dst_so_far.append(dst + start)
            src, dst = torch.cat(src_so_far), torch.cat(dst_so_far)
            start = int(nodes.numel())
        blocks.append(Block(src, dst, num_src=remapper.size, num_dst=int(nodes.numel()),
                            weights=w))
    return blocks

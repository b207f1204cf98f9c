"""Seed edges excluded inside the neighbour draw, for :class:`fgnn.link.sampler.ExcludingKHop`
(internal).

A row ``v`` with ``x`` excluded edges draws over ``deg(v) - x`` slots instead of ``deg(v)``, so
nothing is compacted after the draw. The slots are those of a private copy of the graph's
``indices`` in which, for the duration of one sample, every excluded edge in the first
``deg - x`` slots of its row (a *hole*) holds a neighbour from the row's last ``x`` slots that
is not excluded (there are exactly as many of those as holes). The row's end is lowered by
``x`` in a private copy of ``indptr[1:]``. A draw is then :func:`fgnn.sampling.khop.
sample_uniform`'s over the modified ends and slots: a uniform draw without replacement among
the row's other neighbours (``min(fanout, deg - x)`` of them), and a row whose neighbourhood
fits keeps all of them (in another order). Rows without an excluded edge are untouched, and a
hop costs no operation more than without exclusion.

The per-sample build (:meth:`FusedRows.begin`) works on the batch's ``2P`` excluded slots only,
with no host sync and no loop: one sort groups them by row in CSR order (a repeat, or ``E`` for
an edge the graph lacks, is dropped), a running count and a running maximum give each its
tail slot, and the holes are paired with the free tail slots by their ordinals (``cumsum``), in
row order, through a scratch buffer; about 30 tensor operations. :meth:`FusedRows.end` restores
the touched entries. The slots come from :meth:`FusedRows.slots_of`, one ``searchsorted`` in
the graph's sorted ``row * N + neighbour`` keys, best done once per set of training edges. It
needs sorted rows without a repeated ``(row, neighbour)`` pair (a repeat would need all of its
slots excluded): :attr:`FusedRows.ok`.

Memory: per graph, three arrays of ``E + 1`` entries (slots, keys, rows of the slots) and one of
``N + 1`` (row ends).
"""

from __future__ import annotations

from typing import Optional

import torch

from fgnn.graph import CSRGraph
from fgnn.sampling.checks import floyd_subsets

__all__ = ["FusedRows", "sample_fused"]


class FusedRows:
    """The private slots and row ends of one graph, modified for one sample at a time.

    Args:
        graph: a graph with sorted rows and no repeated ``(row, neighbour)`` pair (else
            :attr:`ok` is False and the object must not be used).
    """

    def __init__(self, graph: CSRGraph) -> None:
        n, e, dev = graph.num_nodes, graph.num_edges, graph.device
        self.graph, self.num_nodes, self.num_edges = graph, n, e
        ip = graph.indptr.long()
        #: slots: the graph's neighbours, then a dump slot ``E`` (dropped edges point there)
        self.slots = torch.cat([graph.indices, graph.indices.new_zeros(1)])
        #: row ends, then ``E`` for an empty dummy row ``N`` past the dump slot
        self.ends = torch.cat([ip[1:], ip.new_full((1,), e)])
        deg = ip[1:] - ip[:-1]
        rows = torch.repeat_interleave(torch.arange(n, device=dev), deg, output_size=e)
        big = (n + 1) * max(n, 1)
        self.keys = torch.cat([rows * max(n, 1) + graph.indices.long(),
                               ip.new_full((1,), big)])
        self.ok = self.fits(self.keys)
        self.row_of = torch.cat([rows, rows.new_full((1,), n)])
        self._e, self._zero = torch.tensor(e, device=dev), torch.tensor(0, device=dev)
        self.buf = torch.full((1,), e, dtype=torch.int64, device=dev)
        self._undo: Optional[tuple[torch.Tensor, ...]] = None

    @staticmethod
    def fits(keys: torch.Tensor) -> bool:
        """True when the graph's ``row * N + neighbour`` keys increase strictly: rows sorted,
        no repeated ``(row, neighbour)`` pair (one host sync, once per graph)."""
        return keys.numel() < 3 or bool((keys[1:-1] > keys[:-2]).all())

    def is_for(self, graph: CSRGraph) -> bool:
        """True when built for ``graph`` (the same tensors)."""
        return (self.graph.indptr is graph.indptr and self.graph.indices is graph.indices)

    def slots_of(self, pos: torch.Tensor, both: bool) -> torch.Tensor:
        """The slots of the message edges ``pos[0] -> pos[1]`` (row ``pos[1]``): ``(P, 1)``
        int64, or ``(P, 2)`` with the reverse's slot first when ``both``; ``E`` for an edge
        the graph lacks. One ``searchsorted`` in the graph's keys (about 50 ns an edge on a
        CPU): compute them once per set of seed edges where possible and pass a batch's rows
        to :meth:`begin`."""
        q = (torch.add(pos.flip(0), pos, alpha=self.num_nodes) if both
             else torch.add(pos[0], pos[1], alpha=self.num_nodes).unsqueeze(0))
        q = q.contiguous()
        lo = torch.searchsorted(self.keys, q)
        return torch.where(self.keys[lo] == q, lo, self.num_edges).t().contiguous()

    def begin(self, slots: torch.Tensor) -> None:
        """Take the edges at ``slots`` (from :meth:`slots_of`; repeats and ``E`` allowed) out of
        the draws until :meth:`end`.

        With the slots sorted, row ``r``'s ``x`` excluded slots are contiguous and its tail is
        ``[e, e + x)`` with ``e = end(r) - x``; the excluded slot of rank ``k`` in the row gets
        the tail slot ``e + k = cv + c(r)``, ``cv`` the running count of excluded slots and
        ``c(r) = e - cv`` at the row's first slot, a running maximum (``c`` never decreases
        from row to row). Free tail slots and holes are then paired by their ordinals."""
        e = self.num_edges
        s = slots.reshape(-1).sort().values                   # by row, then CSR order
        valid = s < e                                         # in the graph
        valid[1:].bitwise_and_(s[1:] != s[:-1])               # and not a repeat
        row = self.row_of.index_select(0, s)                  # rows ascending; N for E
        w = valid.long()
        self.ends.index_add_(0, row, w, alpha=-1)
        end = self.ends.index_select(0, row)                  # e: the row's end, deg - x
        cv = torch.cumsum(w, 0)
        tail = torch.cummax(end - cv, 0).values.add_(cv)      # e + rank in the row
        s = torch.where(valid, s, self._e)                    # repeats to the dump slot
        old = self.slots.index_select(0, s)
        self.slots.index_fill_(0, s, -1)                      # excluded, until end()
        free = valid > (self.slots.index_select(0, tail) < 0)  # a tail slot not excluded
        hole = s < end
        if self.buf.numel() <= s.numel():
            self.buf = torch.full((s.numel() + 1,), e, dtype=torch.int64, device=s.device)
        self.buf.index_copy_(0, torch.where(free, torch.cumsum(free, 0), self._zero), tail)
        src = self.buf.index_select(0, torch.cumsum(hole, 0))  # non-holes: any free slot
        self.slots.index_copy_(0, s, self.slots.index_select(0, src))
        self._undo = (row, w, s, old)

    def end(self) -> None:
        """Restore the slots and row ends :meth:`begin` changed (idempotent)."""
        if self._undo is not None:
            row, w, s, old = self._undo
            self._undo = None
            self.slots.index_copy_(0, s, old)
            self.ends.index_add_(0, row, w)


def sample_fused(fused: FusedRows, rows: torch.Tensor, fanout: int,
                 generator: Optional[torch.Generator] = None
                 ) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`fgnn.sampling.khop.sample_uniform` over ``fused``'s slots and row ends: the
    same draw, with the excluded edges of the current sample out of every row."""
    start = fused.graph.indptr.index_select(0, rows)
    deg = fused.ends.index_select(0, rows) - start
    row_index, off = floyd_subsets(deg, deg.clamp(max=fanout), generator)
    pos = start.index_select(0, row_index) + off
    return fused.slots.index_select(0, pos).long(), row_index

"""Input checks and small vectorised helpers shared by the samplers and the link sampler."""

from __future__ import annotations

from typing import Optional, Sequence

import torch

from fgnn.graph import CSRGraph

__all__ = ["check_fanouts", "check_seeds", "seed_value_error", "floyd_subsets", "row_bounds",
           "segment_arange", "rand"]


def check_fanouts(fanouts: Sequence[int], name: str = "fanouts") -> tuple[int, ...]:
    """Validate a non-empty sequence of positive ints; return it as a tuple."""
    if isinstance(fanouts, int) or not hasattr(fanouts, "__iter__"):
        raise ValueError(f"{name} must be a sequence of positive ints, got {fanouts!r}")
    out = tuple(fanouts)
    if not out:
        raise ValueError(f"{name} must not be empty, got {fanouts!r}")
    for f in out:
        if isinstance(f, bool) or not isinstance(f, int) or f <= 0:
            raise ValueError(f"{name} must hold positive ints, got {fanouts!r}")
    return out


def check_seeds(graph: CSRGraph, seeds: torch.Tensor, values: bool = True) -> torch.Tensor:
    """Validate ``seeds`` against ``graph``; return them as int64.

    Args:
        graph: the graph the seeds index.
        seeds: ``(B,)`` int32/int64 vertex ids on the graph's device.
        values: also check range and repeats here (one host sync). The k-hop samplers pass
            False: their :class:`~fgnn.sampling.remap.Remapper` checks both inside the first
            hop's own sync.

    Raises:
        ValueError: wrong type, dtype, shape or device, an id outside ``[0, N)``, or a
            repeated id.
    """
    if not isinstance(graph, CSRGraph):
        raise ValueError(f"graph must be a CSRGraph, got {type(graph).__name__}")
    if not isinstance(seeds, torch.Tensor):
        raise ValueError(f"seeds must be a torch.Tensor, got {type(seeds).__name__}")
    if seeds.dtype not in (torch.int32, torch.int64):
        raise ValueError(f"seeds must be an int32/int64 tensor, got dtype {seeds.dtype}")
    if seeds.dim() != 1:
        raise ValueError(f"seeds must be 1-D, got shape {tuple(seeds.shape)}")
    if seeds.device != graph.device:
        raise ValueError(f"seeds are on device {seeds.device} but the graph is on {graph.device}")
    if values and seeds.numel() > 0:  # one host sync for range and repeats
        srt = seeds.sort().values
        if bool((srt[0] < 0) | (srt[-1] >= graph.num_nodes) | (srt[1:] == srt[:-1]).any()):
            raise seed_value_error(seeds, graph.num_nodes)
    return seeds.long()


def seed_value_error(seeds: torch.Tensor, num_nodes: int) -> ValueError:
    """The error for ``seeds`` known to hold an id outside ``[0, num_nodes)`` or a repeat (the
    error path: it syncs freely to name the vertex)."""
    srt = seeds.sort().values
    lo, hi = int(srt[0]), int(srt[-1])
    if lo < 0 or hi >= num_nodes:
        return ValueError(f"seeds holds vertex {lo if lo < 0 else hi}, outside [0, {num_nodes})")
    rep = int(srt[1:][srt[1:] == srt[:-1]][0])
    return ValueError(f"seeds must be distinct, got vertex {rep} more than once")


def row_bounds(graph: CSRGraph, rows: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(start, deg)``: the CSR row start and the degree of every vertex of ``rows``."""
    start = graph.indptr.index_select(0, rows)
    deg = graph.indptr.index_select(0, rows + 1) - start
    return start, deg


def segment_arange(counts: torch.Tensor, total: Optional[int] = None
                   ) -> tuple[torch.Tensor, torch.Tensor]:
    """For ``counts`` ``(R,)``, the row of every element and its offset within the row.

    Args:
        counts: ``(R,)`` int64 elements per row.
        total: ``sum(counts)`` when the caller knows it (saves a host sync).

    Returns:
        ``(row, offset)``, each ``(sum(counts),)`` int64; row ``r`` contributes offsets
        ``0..counts[r]-1``.
    """
    r = counts.numel()
    if total is None:
        total = int(counts.sum()) if r else 0
    row = torch.repeat_interleave(torch.arange(r, device=counts.device), counts,
                                  output_size=total)
    starts = torch.cumsum(counts, 0) - counts
    offset = torch.arange(total, device=counts.device) - starts.index_select(0, row)
    return row, offset


def floyd_subsets(n: torch.Tensor, m: torch.Tensor, generator: Optional[torch.Generator]
                  ) -> tuple[torch.Tensor, torch.Tensor]:
    """A uniform ``m[r]``-subset of ``[0, n[r])`` for every row ``r`` (``0 <= m <= n``).

    Floyd's algorithm, run for every row and every step at once with no Python loop over the
    steps: step ``i`` of row ``r`` has ``j = n - m + i`` and draws ``t ~ U{0..j}``; it keeps
    ``j`` if ``t`` was kept before ("hit"), else ``t``. ``t`` was kept before exactly when an
    earlier step drew the same ``t`` (found by one sort), or when ``t = j'`` of an earlier step
    ``i' = t - (n - m)`` that was itself hit; that second case is a chain of strictly earlier
    steps, resolved by pointer jumping in ``ceil(log2(max(m)))`` vector rounds. Work is
    O(m log m) per row whatever ``n`` (the balanced work of FGNN §7.3(1)); one host sync (the
    output size and ``max(m)``). Rows with ``m == n`` keep ``0..n-1`` in order.

    Args:
        n: ``(R,)`` int64 population sizes.
        m: ``(R,)`` int64 subset sizes, ``m <= n``.
        generator: random source on the device of ``n``.

    Returns:
        ``(row, offset)``, each ``(sum(m),)`` int64, grouped by row in order.
    """
    dev = n.device
    # the one host sync: output size, rounds, key range of the sort (int32 sorts ~5x faster)
    total, max_m, key_range = (torch.stack([m.sum(), m.max(), n.sum()]).tolist() if m.numel()
                               else (0, 0, 0))
    row, i = segment_arange(m, total)
    if total == 0:
        return row, i
    n_r, m_r = n.index_select(0, row), m.index_select(0, row)
    low = n_r - m_r  # j = low + i
    j = low + i
    t = (rand((total,), generator, dev) * (j + 1)).long()
    torch.minimum(t, j, out=t)  # guard float rounding at the top end
    # t repeats an earlier step's t of the same row: sort by (row, t), stable keeps step order
    key = (torch.cumsum(n, 0) - n).index_select(0, row) + t
    if key_range < (1 << 31):
        key = key.int()
    srt, order = torch.sort(key, stable=True)
    hit = torch.zeros(total + 1, dtype=torch.bool, device=dev)  # last: a never-hit sentinel
    hit.index_copy_(0, order[1:], srt[1:] == srt[:-1])
    # else t is j' of step t - low, hit iff that step was: follow the chain to its end
    chained = (t >= low) & (t < j)
    flat = torch.arange(total, device=dev)
    ptr = torch.where(chained, flat + (t - j), total)  # flat index of step t - low
    ptr = torch.cat([ptr, ptr.new_full((1,), total)])
    for _ in range((max_m - 1).bit_length()):  # 2**rounds >= max_m >= nodes of any chain
        hit |= hit.index_select(0, ptr)
        ptr = ptr.index_select(0, ptr)
    off = torch.where(hit[:total], j, t)
    return row, torch.where(m_r == n_r, i, off)


def rand(shape: tuple[int, ...], generator: Optional[torch.Generator],
         device: torch.device, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """Uniform ``[0, 1)`` numbers from ``generator`` (float64: unbiased integer draws)."""
    return torch.rand(shape, generator=generator, device=device, dtype=dtype)

"""Input checks and small vectorised helpers shared by the samplers (internal)."""

from __future__ import annotations

from typing import Optional, Sequence

import torch

from fgnn.graph import CSRGraph

__all__ = ["check_fanouts", "check_seeds", "segment_arange", "rand"]


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


def check_seeds(graph: CSRGraph, seeds: torch.Tensor) -> torch.Tensor:
    """Validate ``seeds`` against ``graph``; return them as int64.

    Raises:
        ValueError: wrong type, dtype, shape or device, or an id outside ``[0, N)``.
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
    if seeds.numel() > 0:
        lo, hi = int(seeds.min()), int(seeds.max())
        if lo < 0 or hi >= graph.num_nodes:
            bad = lo if lo < 0 else hi
            raise ValueError(f"seeds holds vertex {bad}, outside [0, {graph.num_nodes})")
    return seeds.long()


def segment_arange(counts: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """For ``counts`` ``(R,)``, the row of every element and its offset within the row.

    Returns:
        ``(row, offset)``, each ``(sum(counts),)`` int64; row ``r`` contributes offsets
        ``0..counts[r]-1``.
    """
    r = counts.numel()
    row = torch.repeat_interleave(torch.arange(r, device=counts.device), counts)
    starts = torch.cumsum(counts, 0) - counts
    offset = torch.arange(row.numel(), device=counts.device) - starts.index_select(0, row)
    return row, offset


def rand(shape: tuple[int, ...], generator: Optional[torch.Generator],
         device: torch.device, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """Uniform ``[0, 1)`` numbers from ``generator`` (float64: unbiased integer draws)."""
    return torch.rand(shape, generator=generator, device=device, dtype=dtype)

"""A set of directed edges with vectorised membership tests (sorted ``src * N + dst`` keys)."""

from __future__ import annotations

import torch

__all__ = ["EdgeSet", "check_pairs"]


def check_pairs(edges: torch.Tensor, num_nodes: int, what: str = "edges") -> torch.Tensor:
    """``edges`` as a ``(2, E)`` int64 tensor of ids in ``[0, num_nodes)``.

    Raises:
        ValueError: naming ``what`` on another shape, a non-integer dtype or an id out of range.
    """
    e = torch.as_tensor(edges)
    if e.dim() != 2 or e.shape[0] != 2:
        raise ValueError(f"{what} must have shape (2, E), got {tuple(e.shape)}")
    if e.is_floating_point() or e.dtype == torch.bool:
        raise ValueError(f"{what} must hold integer node ids, got dtype {e.dtype}")
    e = e.long()
    if e.numel() and (int(e.min()) < 0 or int(e.max()) >= num_nodes):
        raise ValueError(f"{what} hold node ids outside [0, {num_nodes}): "
                         f"min {int(e.min())}, max {int(e.max())}")
    return e


class EdgeSet:
    """Directed edges ``(src, dst)`` of a graph with ``num_nodes`` vertices, for membership tests.

    Args:
        edges: ``(2, E)`` integer pairs ``[src, dst]`` (repeats are fine).
        num_nodes: N; every id must lie in ``[0, N)``.
        undirected: also hold every reversed pair ``(dst, src)``.

    Example::

        known = EdgeSet(torch.tensor([[0, 1], [1, 2]]), 3, undirected=True)
        known.contains(torch.tensor([1, 2]), torch.tensor([0, 0]))  # tensor([True, False])
    """

    def __init__(self, edges: torch.Tensor, num_nodes: int, undirected: bool = False) -> None:
        e = check_pairs(edges, num_nodes)
        if undirected:
            e = torch.cat([e, e.flip(0)], dim=1)
        self.num_nodes = int(num_nodes)
        self.keys = torch.unique(e[0] * self.num_nodes + e[1])  # sorted

    def __len__(self) -> int:
        return int(self.keys.numel())

    def contains(self, src: torch.Tensor, dst: torch.Tensor) -> torch.Tensor:
        """``(K,)`` bool: whether each pair ``(src[i], dst[i])`` is in the set."""
        q = src.long() * self.num_nodes + dst.long()
        if self.keys.numel() == 0:
            return torch.zeros(q.shape, dtype=torch.bool, device=q.device)
        pos = torch.searchsorted(self.keys, q).clamp_(max=self.keys.numel() - 1)
        return self.keys[pos] == q

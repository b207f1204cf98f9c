"""Link scorers: ``score(h_src, h_dst)`` -> one logit per pair."""

from __future__ import annotations

import torch
from torch import nn

__all__ = ["DotProductDecoder", "MLPDecoder", "build_decoder", "DECODERS"]

DECODERS = ("dot", "mlp")


class DotProductDecoder(nn.Module):
    """``<h_src, h_dst>`` (the GAE decoder, before its sigmoid). No parameters.

    Shapes:
        h_src, h_dst ``(P, D)`` -> ``(P,)``.
    """

    def forward(self, h_src: torch.Tensor, h_dst: torch.Tensor) -> torch.Tensor:
        return (h_src * h_dst).sum(-1)


class MLPDecoder(nn.Module):
    """An MLP on the Hadamard product ``h_src * h_dst`` (PyG's link-prediction examples).

    Args:
        dim: embedding size D.
        hidden: hidden size of the MLP.
        num_layers: linear layers, >= 1 (ReLU between them).

    Shapes:
        h_src, h_dst ``(P, D)`` -> ``(P,)``.
    """

    def __init__(self, dim: int, hidden: int = 64, num_layers: int = 2) -> None:
        super().__init__()
        if dim < 1 or hidden < 1 or num_layers < 1:
            raise ValueError(f"MLPDecoder: dim, hidden and num_layers must be >= 1, got "
                             f"dim={dim}, hidden={hidden}, num_layers={num_layers}")
        dims = [dim] + [hidden] * (num_layers - 1) + [1]
        layers: list[nn.Module] = []
        for i, (a, b) in enumerate(zip(dims[:-1], dims[1:])):
            if i:
                layers.append(nn.ReLU())
            layers.append(nn.Linear(a, b))
        self.mlp = nn.Sequential(*layers)

    def forward(self, h_src: torch.Tensor, h_dst: torch.Tensor) -> torch.Tensor:
        return self.mlp(h_src * h_dst).squeeze(-1)


def build_decoder(name: str, dim: int) -> nn.Module:
    """A decoder by name (one of :data:`DECODERS`) for ``dim``-wide embeddings."""
    if name == "dot":
        return DotProductDecoder()
    if name == "mlp":
        return MLPDecoder(dim)
    raise ValueError(f"decoder must be one of {', '.join(DECODERS)}, got {name!r}")

"""The layer stack shared by GCN, GraphSAGE and GAT: one conv layer per block, dropout on each layer's
input (``input_dropout`` on the raw features, 0 by default), an activation after every layer but
the last (which returns class logits)."""

from __future__ import annotations

from typing import Callable, Optional, Sequence

import torch
from torch import nn

from fgnn.models.aggregate import (Activation, SparseAwareDropout, check_hparams, check_inputs,
                                   resolve_activation)
from fgnn.sampling.base import Block

__all__ = ["BlockStack"]


class BlockStack(nn.Module):
    """``num_layers`` conv layers applied block by block, input block first.

    Subclasses set :attr:`conv`, a layer class built as ``conv(in_dim, out_dim)`` and called as
    ``layer(block, h)``.

    Shapes:
        x ``(M, F)`` features of ``sample.input_nodes`` (rows past ``blocks[0].num_src`` are
        ignored) -> ``(num_seeds, C)`` logits.
    """

    conv: Callable[[int, int], nn.Module]

    def __init__(self, in_dim: int, num_classes: int, num_layers: int, hidden: int,
                 dropout: float, activation: Activation,
                 input_dropout: Optional[float]) -> None:
        super().__init__()
        name = type(self).__name__
        check_hparams(name, in_dim, num_classes, num_layers, hidden, dropout, input_dropout)
        self.in_dim, self.num_classes, self.num_layers = in_dim, num_classes, num_layers
        self.hidden = hidden
        self.layers = nn.ModuleList(self._layers(dropout))
        self.dropout = nn.Dropout(dropout)
        self.input_dropout = SparseAwareDropout(dropout if input_dropout is None
                                                else input_dropout)
        self.activation = resolve_activation(activation)

    def _layers(self, dropout: float) -> list[nn.Module]:
        """One :attr:`conv` per block: ``in_dim -> hidden -> ... -> num_classes``."""
        dims = [self.in_dim] + [self.hidden] * (self.num_layers - 1) + [self.num_classes]
        return [self.conv(a, b) for a, b in zip(dims[:-1], dims[1:])]

    def forward(self, blocks: Sequence[Block], x: torch.Tensor) -> torch.Tensor:
        check_inputs(type(self).__name__, blocks, x, self.in_dim, self.num_layers)
        h = x[:blocks[0].num_src]
        for i, (layer, block) in enumerate(zip(self.layers, blocks)):
            h = layer(block, (self.input_dropout if i == 0 else self.dropout)(h))
            if i < self.num_layers - 1:
                h = self.activation(h)
        return h

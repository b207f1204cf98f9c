"""Edge-wise aggregation on sampled blocks, with native torch ops only (``index_add_``).

Every model in :mod:`fgnn.models` reduces the messages of a :class:`~fgnn.sampling.Block` with
the functions here and checks its inputs with :func:`check_inputs`, so a block's optional
``weights`` (the 1/q importance weights of locality-aware sampling, or PinSAGE's random-walk
visit counts) are honoured the same way everywhere. No torch-scatter or torch-sparse is needed.
"""

from __future__ import annotations

from typing import Callable, Optional, Sequence, Union

import torch
from torch import nn

from fgnn.sampling.base import Block

__all__ = [
    "weighted_sum",
    "weighted_mean",
    "edge_weight_sum",
    "check_block",
    "check_inputs",
    "check_hparams",
    "resolve_activation",
    "SparseAwareDropout",
]

#: An activation given by name (``relu``, ``elu``, ``gelu``, ``tanh``, ``leaky_relu``,
#: ``identity``) or as a module / callable.
Activation = Union[str, nn.Module, Callable[[torch.Tensor], torch.Tensor]]

_ACTIVATIONS = {
    "relu": nn.ReLU,
    "elu": nn.ELU,
    "gelu": nn.GELU,
    "tanh": nn.Tanh,
    "leaky_relu": nn.LeakyReLU,
    "identity": nn.Identity,
}


class SparseAwareDropout(nn.Dropout):
    """Dropout that draws random numbers only for the non-zero entries of a mostly-zero input.

    Dropping a zero changes nothing, so for sparse bag-of-words features (Cora: 1.3% non-zero)
    keeping each non-zero with probability ``1 - p`` and scaling it by ``1 / (1 - p)`` is the same
    distribution as :class:`torch.nn.Dropout` at a fraction of the cost (one Bernoulli draw per
    element dominates a training step on CPU). Inputs with more than ``dense_fraction``
    non-zeros use the ordinary dropout.

    Args:
        p: drop probability.
        dense_fraction: density above which the ordinary dense path is used.

    Shapes:
        ``(N, F) -> (N, F)``.
    """

    def __init__(self, p: float = 0.5, dense_fraction: float = 0.25) -> None:
        super().__init__(p)
        self.dense_fraction = dense_fraction

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training or self.p == 0.0 or x.numel() == 0:
            return x
        nz = x.nonzero(as_tuple=True)
        if nz[0].numel() > self.dense_fraction * x.numel():
            return super().forward(x)
        keep = torch.rand(nz[0].numel(), device=x.device) >= self.p
        kept = tuple(i[keep] for i in nz)
        out = torch.zeros_like(x)
        out[kept] = x[kept] / (1.0 - self.p)
        return out


def resolve_activation(activation: Activation) -> Callable[[torch.Tensor], torch.Tensor]:
    """Turn an activation name into a module; pass modules and callables through.

    Raises:
        ValueError: for an unknown name.
    """
    if isinstance(activation, str):
        if activation not in _ACTIVATIONS:
            raise ValueError(f"activation must be one of {', '.join(_ACTIVATIONS)} or a callable, "
                             f"got {activation!r}")
        return _ACTIVATIONS[activation]()
    if not callable(activation):
        raise ValueError(f"activation must be a name or a callable, got "
                         f"{type(activation).__name__}")
    return activation


def check_inputs(model: str, blocks: Sequence[Block], x: torch.Tensor, in_dim: int,
                 num_layers: int) -> None:
    """Validate the ``forward(blocks, x)`` arguments every fgnn model takes.

    Args:
        model: model name for messages.
        blocks: one block per layer, input layer first.
        x: features of ``sample.input_nodes`` (at least ``blocks[0].num_src`` rows).
        in_dim: the feature dimension the model was built for.
        num_layers: the number of layers the model has.

    Raises:
        ValueError: on a wrong block count, a feature-dim mismatch (naming expected and got), too
            few feature rows, or blocks that do not chain (a layer reading more rows than the
            previous one produced).
    """
    if len(blocks) != num_layers:
        raise ValueError(f"{model}: got {len(blocks)} blocks but the model has num_layers="
                         f"{num_layers} (one block per layer)")
    if not isinstance(x, torch.Tensor) or x.dim() != 2:
        raise ValueError(f"{model}: x must be a 2-D tensor (num_input_nodes, F), got "
                         f"{tuple(getattr(x, 'shape', ())) or type(x).__name__}")
    if x.shape[1] != in_dim:
        raise ValueError(f"{model}: input feature dim mismatch: expected in_dim={in_dim}, got "
                         f"x.shape[1]={x.shape[1]}")
    rows = int(x.shape[0])
    for i, block in enumerate(blocks):
        check_block(block, rows, name=f"{model} blocks[{i}]")
        rows = block.num_dst


def check_block(block: Block, num_src_rows: int, name: str = "block") -> None:
    """Validate a block against the rows of features it will read.

    Args:
        block: the block to check.
        num_src_rows: rows available to read (``>= block.num_src`` is required).
        name: how to call the block in error messages.

    Raises:
        ValueError: when the block reads more rows than exist, its dst vertices are not a prefix
            of its src vertices, or its edge tensors disagree in length.
    """
    if block.num_dst > block.num_src:
        raise ValueError(f"{name}: num_dst={block.num_dst} exceeds num_src={block.num_src}; dst "
                         f"vertices must be a prefix of the src vertices")
    if block.num_src > num_src_rows:
        raise ValueError(f"{name}: reads num_src={block.num_src} rows but only {num_src_rows} "
                         f"are available from the previous layer / input features")
    if block.src.shape != block.dst.shape:
        raise ValueError(f"{name}: src has shape {tuple(block.src.shape)} but dst has shape "
                         f"{tuple(block.dst.shape)}")
    if block.weights is not None and block.weights.shape != block.src.shape:
        raise ValueError(f"{name}: weights has shape {tuple(block.weights.shape)}, expected "
                         f"{tuple(block.src.shape)} (one per edge)")


def weighted_sum(h_src: torch.Tensor, src: torch.Tensor, dst: torch.Tensor, num_dst: int,
                 weights: Optional[torch.Tensor] = None) -> torch.Tensor:
    """Sum the messages ``w_e * h_src[src_e]`` into their destinations.

    ``out[v] = sum_{e: dst_e = v} w_e * h_src[src_e]`` (``w_e = 1`` without weights).

    Args:
        h_src: source features.
        src: local source id per edge.
        dst: local destination id per edge, each ``< num_dst``.
        num_dst: rows of the output.
        weights: optional per-edge weights.

    Returns:
        The aggregated rows; zero for a destination without in-edges.

    Shapes:
        h_src ``(S, F)``, src/dst/weights ``(E,)`` -> ``(num_dst, F)``.
    """
    msg = h_src.index_select(0, src)  # (E, F)
    if weights is not None:
        msg = msg * weights.to(msg.dtype).unsqueeze(-1)
    out = h_src.new_zeros((num_dst,) + tuple(h_src.shape[1:]))
    return out.index_add_(0, dst, msg)


def edge_weight_sum(dst: torch.Tensor, num_dst: int, weights: Optional[torch.Tensor] = None,
                    dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Per-destination sum of edge weights: the (weighted) sampled in-degree.

    Shapes:
        dst/weights ``(E,)`` -> ``(num_dst,)``.
    """
    w = (torch.ones(dst.shape, dtype=dtype, device=dst.device) if weights is None
         else weights.to(dtype))
    return torch.zeros(num_dst, dtype=dtype, device=dst.device).index_add_(0, dst, w)


def weighted_mean(h_src: torch.Tensor, src: torch.Tensor, dst: torch.Tensor, num_dst: int,
                  weights: Optional[torch.Tensor] = None) -> torch.Tensor:
    """Weighted mean of the in-neighbour messages of each destination.

    ``out[v] = sum_e w_e h_src[src_e] / sum_e w_e`` over the edges into ``v`` (plain mean without
    weights); a destination without in-edges (or with zero total weight) gets zeros.

    Shapes:
        h_src ``(S, F)``, src/dst/weights ``(E,)`` -> ``(num_dst, F)``.
    """
    total = weighted_sum(h_src, src, dst, num_dst, weights)
    denom = edge_weight_sum(dst, num_dst, weights, dtype=total.dtype)
    denom = torch.where(denom > 0, denom, torch.ones_like(denom))
    return total / denom.unsqueeze(-1)


def check_hparams(model: str, in_dim: int, num_classes: int, num_layers: int, hidden: int,
                  dropout: float, input_dropout: Optional[float] = None) -> None:
    """Validate the constructor arguments shared by the fgnn models; ``ValueError`` naming the
    argument and value."""
    for name, value in (("in_dim", in_dim), ("num_classes", num_classes),
                        ("num_layers", num_layers), ("hidden", hidden)):
        if not isinstance(value, int) or value < 1:
            raise ValueError(f"{model}: {name} must be a positive int, got {name}={value!r}")
    if not 0.0 <= dropout < 1.0:
        raise ValueError(f"{model}: dropout must lie in [0, 1), got dropout={dropout!r}")
    if input_dropout is not None and not 0.0 <= input_dropout < 1.0:
        raise ValueError(f"{model}: input_dropout must lie in [0, 1), got "
                         f"input_dropout={input_dropout!r}")

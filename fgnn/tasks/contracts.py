"""What fgnn checks of a user's sampler and model: the contract a node classification job
relies on, each breach one line naming the user's class and what was expected.

A custom :class:`~fgnn.Sampler` returns a :class:`~fgnn.Sample` whose seeds are the seeds it
was given and lead its ``input_nodes`` (the Trainer reads the seeds' logits from the first rows
and their labels by ``seeds``, so a sample that breaks it trains on misaligned labels without a
word); its ids lie in the graph and its blocks' edges inside their bounds. A custom model has
parameters and returns ``(B, num_classes)`` floating-point logits.

The checks cost what the training step costs anyway or less: every sample gets the O(B) ones
(its type, the seed count, the seeds prefix) and every output the O(1) ones (type, shape,
dtype); the O(M + E) ones (id range, block bounds) run on the first sample of each sampling
context only, so a sampler that is right once is taken at its word after.
"""

from __future__ import annotations

from typing import Any, Optional

import torch
from torch import nn

from fgnn.sampling.base import Block, Sample

__all__ = ["UserCodeError", "check_sample", "check_sample_layout", "check_logits",
           "check_trainable_model"]


class UserCodeError(ValueError, TypeError):
    """A custom sampler or model broke the contract fgnn relies on. A ``ValueError`` and a
    ``TypeError`` both; the message is one line naming the class and what was expected. The
    runtime raises it as it is (no resume hint: the code, not the run, needs the fix)."""


def _name(obj: Any) -> str:
    return type(obj).__name__


def check_sample(sampler: Any, sample: Any, seeds: torch.Tensor) -> None:
    """The O(B) checks of a sample ``sampler.sample(graph, seeds)`` returned: a
    :class:`~fgnn.Sample`, of as many seeds as it was given, whose ``input_nodes`` begin with
    them (homogeneous samples; a typed one's seeds are local ids of their type).

    Raises:
        UserCodeError: naming ``sampler``'s class and what was expected.
    """
    who = f"{_name(sampler)}.sample"
    if not isinstance(sample, Sample):
        raise UserCodeError(f"{who} returned {_name(sample)}, expected a fgnn.Sample (seeds, "
                            f"blocks, input_nodes)")
    b = int(seeds.numel())
    got = sample.seeds
    if not isinstance(got, torch.Tensor) or got.dim() != 1 or int(got.numel()) != b:
        shape = tuple(got.shape) if isinstance(got, torch.Tensor) else _name(got)
        raise UserCodeError(f"{who} returned a Sample whose seeds are {shape} for the {b} "
                            f"seeds it was given; expected those ({b},) seeds")
    nodes = sample.input_nodes
    if not isinstance(nodes, torch.Tensor):
        return  # a typed sample (one tensor per node type): its sampler checks it
    if nodes.dim() != 1 or int(nodes.numel()) < b:
        raise UserCodeError(f"{who} returned input_nodes of shape {tuple(nodes.shape)} for "
                            f"{b} seeds; expected a (M,) tensor, M >= {b}, beginning with the "
                            f"seeds")
    head = nodes[:b]
    if head.device.type != "cpu":  # a device sample: comparing would cost a host sync a batch
        return
    if not torch.equal(head, got.to(head.device, head.dtype)):
        i = int((head != got.to(head.device, head.dtype)).nonzero()[0])
        raise UserCodeError(f"{who} returned input_nodes that do not begin with its seeds "
                            f"(position {i}: input node {int(head[i])}, seed {int(got[i])}); "
                            f"expected input_nodes[:B] == seeds, the seeds' rows first (their "
                            f"logits are read from the first B rows, their labels by seeds)")


def check_sample_layout(sampler: Any, sample: Sample, num_nodes: int) -> None:
    """The O(M + E) checks of a homogeneous sample (a typed one is left alone): its
    ``input_nodes`` inside ``[0, num_nodes)``, blocks of :class:`~fgnn.Block` whose ``src`` and
    ``dst`` lie below ``num_src`` and ``num_dst``, ``num_dst <= num_src``, the first block reading
    at most the ``M`` input rows and the last one writing the ``B`` seeds.

    Raises:
        UserCodeError: naming ``sampler``'s class, the block and what was expected.
    """
    nodes = sample.input_nodes
    if not isinstance(nodes, torch.Tensor) or nodes.device.type == "meta":
        return  # a typed sample, or shapes without values (a device contract's meta run)
    who = f"{_name(sampler)}.sample"
    m, b = int(nodes.numel()), int(sample.seeds.numel())
    if m and (int(nodes.min()) < 0 or int(nodes.max()) >= num_nodes):
        bad = int(nodes.min()) if int(nodes.min()) < 0 else int(nodes.max())
        raise UserCodeError(f"{who} returned input_nodes holding {bad}; expected vertex ids "
                            f"in [0, {num_nodes})")
    if not isinstance(sample.blocks, (list, tuple)) or not sample.blocks:
        raise UserCodeError(f"{who} returned blocks={_name(sample.blocks)} of "
                            f"{len(sample.blocks) if hasattr(sample.blocks, '__len__') else 0} "
                            f"blocks; expected a list of fgnn.Block, one per layer")
    for i, blk in enumerate(sample.blocks):
        _check_block(who, i, blk)
    if sample.blocks[0].num_src > m:
        raise UserCodeError(f"{who}: blocks[0].num_src={sample.blocks[0].num_src} exceeds the "
                            f"{m} input_nodes; expected the first block to read at most them")
    if sample.blocks[-1].num_dst != b:
        raise UserCodeError(f"{who}: blocks[-1].num_dst={sample.blocks[-1].num_dst}; expected "
                            f"the last block to write the {b} seeds")


def _check_block(who: str, i: int, blk: Any) -> None:
    """One block of :func:`check_sample_layout`."""
    if not isinstance(blk, Block):
        raise UserCodeError(f"{who}: blocks[{i}] is {_name(blk)}, expected a fgnn.Block")
    if blk.src.shape != blk.dst.shape or blk.src.dim() != 1:
        raise UserCodeError(f"{who}: blocks[{i}] has src {tuple(blk.src.shape)} and dst "
                            f"{tuple(blk.dst.shape)}; expected two (E,) tensors")
    if not 0 <= blk.num_dst <= blk.num_src:
        raise UserCodeError(f"{who}: blocks[{i}] has num_dst={blk.num_dst}, "
                            f"num_src={blk.num_src}; expected 0 <= num_dst <= num_src")
    for end, bound in (("src", blk.num_src), ("dst", blk.num_dst)):
        ids = getattr(blk, end)
        if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= bound):
            bad = int(ids.min()) if int(ids.min()) < 0 else int(ids.max())
            raise UserCodeError(f"{who}: blocks[{i}].{end} holds local id {bad}; expected "
                                f"ids in [0, num_{end}={bound})")


def check_logits(model: nn.Module, out: Any, batch: int, num_classes: Optional[int]) -> None:
    """A node classifier's output for ``batch`` seeds: a ``(batch, num_classes)`` floating-point
    tensor (``num_classes`` None: any width).

    Raises:
        UserCodeError: naming the model's class, what it returned and what was expected.
    """
    width = "num_classes" if num_classes is None else str(num_classes)
    want = f"expected ({batch}, {width}) floating-point logits, one row per seed"
    who = f"{_name(model)}.forward"
    if not isinstance(out, torch.Tensor):
        raise UserCodeError(f"{who} returned {_name(out)}; {want}")
    if out.dim() != 2 or out.shape[0] != batch or (
            num_classes is not None and out.shape[1] != num_classes):
        raise UserCodeError(f"{who} returned shape {tuple(out.shape)}; {want}")
    if not out.is_floating_point():
        raise UserCodeError(f"{who} returned {str(out.dtype).replace('torch.', '')} logits; "
                            f"{want}")


def check_trainable_model(model: nn.Module) -> None:
    """A model has parameters to train (``requires_grad``): the optimizer and the gradient
    exchange step them.

    Raises:
        UserCodeError: naming the model's class.
    """
    if not any(p.requires_grad for p in model.parameters()):
        raise UserCodeError(f"{_name(model)} has no trainable parameters; expected a model "
                            f"whose weights are nn.Parameters (requires_grad) for the "
                            f"optimizer to step")

"""A model's size checked against host memory before it is built.

A dataset's ``num_classes`` (a manifest may say 16,777,216) or a large ``--hidden`` makes a
classifier of billions of parameters; built as it is, the process is killed by the kernel with
no line (16 GiB at hidden 256 for the classifier alone). :func:`check_model_fits` builds the
model on torch's ``meta`` device first (shapes, no storage), counts its parameter bytes and the
training state beside them (gradients and Adam's two moments: :data:`TRAINING_COPIES` times the
parameters) and refuses, in one line naming the largest layer, a model that cannot fit what
the host can give.
"""

from __future__ import annotations

from typing import Callable, Optional

import torch
from torch import nn

from fgnn.data.memory import MemoryLimit, format_bytes, host_memory_limit

__all__ = ["ModelTooLarge", "TRAINING_COPIES", "check_model_fits", "meta_parameters"]

#: Copies of the parameters a training process holds: the weights, their gradients and Adam's
#: two moments.
TRAINING_COPIES = 4


class ModelTooLarge(ValueError):
    """The model cannot fit the host's memory (raised before it is built).

    Attributes:
        need: bytes of the model with its training state.
        largest: ``(name, shape)`` of its largest parameter.
    """

    def __init__(self, message: str, need: int, largest: tuple[str, tuple[int, ...]]) -> None:
        super().__init__(message)
        self.need, self.largest = need, largest


def meta_parameters(build: Callable[[], nn.Module]) -> Optional[list[tuple[str, torch.Tensor]]]:
    """The named parameters of ``build()`` made on the ``meta`` device (no memory); None when
    the model cannot be built there (a model that computes with its weights while built)."""
    try:
        with torch.device("meta"):
            model = build()
    except Exception:  # noqa: BLE001 - not buildable on meta: the check is skipped
        return None
    return list(model.named_parameters())


def check_model_fits(build: Callable[[], nn.Module], limit: Optional[MemoryLimit] = None,
                     hint: str = "lower --hidden") -> None:
    """Refuse a model that cannot be trained in the host's memory, before it is built.

    Args:
        build: builds the model (called once, on the ``meta`` device).
        limit: what the host can give; default :func:`~fgnn.data.memory.host_memory_limit`.
        hint: what shrinks the model, at the end of the line.

    Raises:
        ModelTooLarge: ``the model needs about X of host memory (N parameters, with their
            gradients and Adam's two moments), more than the Y this machine can give
            (source); its largest layer is NAME of shape (a, b); <hint>``.
    """
    params = meta_parameters(build)
    limit = limit if limit is not None else host_memory_limit()
    if not params or limit is None:
        return
    count = sum(int(p.numel()) for _, p in params)
    need = TRAINING_COPIES * sum(int(p.numel()) * p.element_size() for _, p in params)
    if need <= limit.bytes:
        return
    name, biggest = max(params, key=lambda kv: kv[1].numel())
    shape = tuple(int(d) for d in biggest.shape)
    raise ModelTooLarge(
        f"the model needs about {format_bytes(need)} of host memory ({count:,} parameters, "
        f"with their gradients and Adam's two moments), more than the "
        f"{format_bytes(limit.bytes)} this machine can give ({limit.source}); its largest "
        f"layer is {name} of shape {shape}; {hint}", need, (name, shape))

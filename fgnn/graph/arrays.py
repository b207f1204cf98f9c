"""Array-likes from users (tensors, numpy arrays, lists) as CPU tensors, for the graph builders and
the converters."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

__all__ = ["as_cpu_tensor"]


def as_cpu_tensor(value: Any, what: str) -> torch.Tensor:
    """A CPU tensor from a tensor, numpy array or array-like.

    Args:
        value: the array-like.
        what: its name in the error message.

    Raises:
        ValueError: ``value`` cannot be read as an array (the message names ``what``).
    """
    if isinstance(value, torch.Tensor):
        return value.detach().cpu()
    try:
        return torch.as_tensor(np.asarray(value))
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{what} cannot be read as an array ({type(value).__name__}): "
                         f"{exc}") from None

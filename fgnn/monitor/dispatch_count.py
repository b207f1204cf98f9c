"""Count aten ops and host-syncing ops of a piece of torch code (a launch/sync meter).

On a GPU a sampler is bound by kernel launches and by host syncs (an op whose output shape or
value the host must read before it can go on), not by the device. Both are visible on the CPU:
:class:`DispatchCounter` is a ``TorchDispatchMode`` that sees every aten op torch dispatches
and classifies it by name, so a CPU test can hold the CUDA path to a budget.

Counted as a host sync (on CUDA each waits for the queued kernels):

* ``aten._local_scalar_dense``: ``.item()``, ``int(t)``, ``bool(t)``, ``.tolist()`` per element;
* ops whose output shape depends on the data: ``nonzero``, ``masked_select``, ``unique*``,
  ``repeat_interleave`` without ``output_size``, boolean-mask indexing (``index.Tensor`` /
  ``index_put`` with a bool index);
* a copy to the CPU from a non-CPU tensor (``.cpu()``, ``.to("cpu")``);
* ``Tensor.tolist()`` and ``Tensor.numpy()``, which read a CPU tensor without dispatching an
  aten op (so no dispatch mode sees them): the counter wraps both while it is active.

Usage::

    with DispatchCounter() as c:
        sampler.sample(graph, seeds, gen)
    c.ops, c.syncs, c.sync_ops  # totals, and a Counter of the syncing op names
"""

from __future__ import annotations

from collections import Counter
from typing import Any, Optional

import torch
from torch.utils._python_dispatch import TorchDispatchMode

__all__ = ["DispatchCounter", "count_dispatch"]

#: Ops (overload packet names) whose output shape depends on the input's values.
_DATA_SHAPED = frozenset({"nonzero", "masked_select", "_unique", "_unique2", "unique_dim",
                          "unique_consecutive", "unique_dim_consecutive"})
_COPIES = frozenset({"_to_copy", "copy_"})
_HOST_READS = ("tolist", "numpy")


def _is_bool_index(indices: Any) -> bool:
    return any(isinstance(i, torch.Tensor) and i.dtype == torch.bool
               for i in (indices or ()))


def _syncs(name: str, args: tuple, kwargs: dict) -> bool:
    """Whether the aten op ``name`` (overload packet) with these arguments syncs the host."""
    if name == "_local_scalar_dense" or name in _DATA_SHAPED:
        return True
    if name == "repeat_interleave":
        has_tensor_repeats = isinstance(args[0], torch.Tensor) and (
            len(args) == 1 or isinstance(args[1], torch.Tensor))
        return has_tensor_repeats and kwargs.get("output_size") is None
    if name in ("index", "index_put", "index_put_", "_index_put_impl_"):
        return _is_bool_index(args[1] if len(args) > 1 else kwargs.get("indices"))
    if name in _COPIES:
        src = args[1] if name == "copy_" else args[0]
        dst_dev = (args[0].device if name == "copy_"
                   else kwargs.get("device", getattr(src, "device", None)))
        return (isinstance(src, torch.Tensor) and src.device.type not in ("cpu", "meta")
                and dst_dev is not None and torch.device(dst_dev).type == "cpu")
    return False


class DispatchCounter(TorchDispatchMode):
    """Counts aten ops (``ops``) and host-syncing ops (``syncs``) run inside its ``with`` block.

    Attributes:
        ops: aten ops dispatched.
        syncs: of those, ops that sync the host on CUDA (see the module docstring).
        op_names: ``Counter`` of every op's overload-packet name.
        sync_ops: ``Counter`` of the syncing ops' names.
    """

    def __init__(self) -> None:
        super().__init__()
        self.ops = 0
        self.syncs = 0
        self.op_names: Counter[str] = Counter()
        self.sync_ops: Counter[str] = Counter()
        self._saved: dict[str, Any] = {}

    def __enter__(self) -> "DispatchCounter":
        self._saved = {name: getattr(torch.Tensor, name) for name in _HOST_READS}
        for name, fn in self._saved.items():
            setattr(torch.Tensor, name, self._host_read(name, fn))
        return super().__enter__()

    def __exit__(self, *exc: Any) -> None:
        try:
            super().__exit__(*exc)
        finally:
            for name, fn in self._saved.items():
                setattr(torch.Tensor, name, fn)

    def _host_read(self, name: str, fn: Any) -> Any:
        def read(tensor: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
            self.syncs += 1
            self.sync_ops[name] += 1
            return fn(tensor, *args, **kwargs)
        return read

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (),
                           kwargs: Optional[dict] = None) -> Any:
        kwargs = kwargs or {}
        name = func.overloadpacket.__name__
        self.ops += 1
        self.op_names[name] += 1
        if _syncs(name, args, kwargs):
            self.syncs += 1
            self.sync_ops[name] += 1
        return func(*args, **kwargs)

    def as_dict(self) -> dict[str, Any]:
        """``{"ops", "syncs", "sync_ops"}`` (JSON-friendly)."""
        return {"ops": self.ops, "syncs": self.syncs, "sync_ops": dict(self.sync_ops)}


def count_dispatch(fn: Any, *args: Any, **kwargs: Any) -> tuple[Any, DispatchCounter]:
    """Run ``fn(*args, **kwargs)`` under a :class:`DispatchCounter`; return ``(result, counter)``."""
    with DispatchCounter() as counter:
        out = fn(*args, **kwargs)
    return out, counter

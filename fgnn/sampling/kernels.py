"""Which twin of a sampling kernel runs: the CPU one or the CUDA one (issue 28).

Every neighbour-selection kernel of the k-hop samplers comes in two twins behind one public
function (:func:`fgnn.sampling.khop.sample_uniform`, :func:`~fgnn.sampling.khop.
sample_weighted`), as GraphBolt keeps ``impl/`` kernels per device under one API:

* the **CUDA twin** (:mod:`fgnn.sampling.khop_cuda`) is bound by kernel launches and host syncs:
  a constant number of launches per hop whatever the fanout, and at most two host syncs per hop
  (``tests/test_sampling_budget.py`` holds it to that budget);
* the **CPU twin** (:mod:`fgnn.sampling.khop_cpu`) is bound by the work per edge, since a launch
  or a sync costs a few microseconds on a CPU: it splits a hop's rows by degree, runs Floyd's
  algorithm on the rows with more neighbours than the fanout only, and loops over the fanout in
  Python (about half the vector passes per edge of the CUDA twin).

Both draw from the same distributions (the statistics tests run on both) but not the same
sample for one generator seed. The twin follows the device of the rows being sampled (CPU
tensors: the CPU twin; any other device: the CUDA twin) unless :func:`use_kernel` forces one,
which the tests and ``bench/sampling.py`` do to run the CUDA twin on CPU tensors. Random walks
and the remap run one kernel on every device (their CPU and CUDA forms measured the same).
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator, Optional

import torch

__all__ = ["KERNELS", "kernel_for", "use_kernel"]

#: The twins: ``"cpu"`` (work per edge) and ``"cuda"`` (launches and syncs).
KERNELS = ("cpu", "cuda")

_forced: Optional[str] = None


def kernel_for(tensor: torch.Tensor) -> str:
    """The twin that samples ``tensor``'s device: the forced one (:func:`use_kernel`), else
    ``"cpu"`` on a CPU and ``"cuda"`` on any other device."""
    if _forced is not None:
        return _forced
    return "cpu" if tensor.device.type == "cpu" else "cuda"


@contextmanager
def use_kernel(name: Optional[str]) -> Iterator[None]:
    """Run the ``name`` twin on every device inside the ``with`` block (``None``: by device).

    A process-wide switch (not thread-safe), for tests and benchmarks: ``use_kernel("cuda")``
    runs the GPU-style kernels, and counts their launches and syncs, on CPU tensors.

    Raises:
        ValueError: ``name`` is not ``None`` nor one of :data:`KERNELS`.
    """
    global _forced
    if name is not None and name not in KERNELS:
        raise ValueError(f"kernel must be one of {', '.join(KERNELS)} or None, got {name!r}")
    prev, _forced = _forced, name
    try:
        yield
    finally:
        _forced = prev

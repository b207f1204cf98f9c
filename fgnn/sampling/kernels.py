"""Which twin of a sampling kernel runs: the compiled CPU one, the vectorised CPU one or the
CUDA one (issue 28).

Every neighbour-selection kernel of the k-hop samplers, and the remap, come in twins behind one
public function (:func:`fgnn.sampling.khop.sample_uniform`, :func:`~fgnn.sampling.khop.
sample_weighted`, :meth:`fgnn.sampling.remap.Remapper.add`), as GraphBolt keeps ``impl/``
kernels per device under one API:

* the **CUDA twin** (:mod:`fgnn.sampling.khop_cuda`) is bound by kernel launches and host syncs:
  a constant number of launches per hop whatever the fanout, and at most two host syncs per hop
  (``tests/test_sampling_budget.py`` holds it to that budget);
* the **vectorised CPU twin** (:mod:`fgnn.sampling.khop_cpu`) is bound by the work per edge,
  since a launch or a sync costs a few microseconds on a CPU: it splits a hop's rows by degree,
  runs Floyd's algorithm on the rows with more neighbours than the fanout only, and loops over
  the fanout in Python (about half the vector passes per edge of the CUDA twin);
* the **compiled CPU twin** (:mod:`fgnn.sampling.khop_compiled`, numba, optional) runs the
  uniform and weighted selections and the remap as one loop each: a few memory accesses per
  edge. It serves hops of at least :data:`~fgnn.sampling.khop_compiled.MIN_EDGES` candidate
  edges on a CPU when numba is installed (importing it costs about a second per process, which
  small hops would never earn back); smaller hops, and selections at a fanout above
  :data:`~fgnn.sampling.khop_cpu.LOOP_FANOUT`, run the vectorised twin.

All draw from the same distributions (the statistics tests run on each) but not the same sample
for one generator seed. The twin follows the device of the rows being sampled unless
:func:`use_kernel` forces one, which the tests and ``bench/sampling.py`` do to run another twin
on CPU tensors. Random walks run one kernel on every device (their CPU and CUDA forms measured
the same).
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator, Optional

import torch

__all__ = ["KERNELS", "kernel_for", "use_kernel"]

#: The twins: ``"compiled"`` (numba loops), ``"cpu"`` (vector passes per edge) and ``"cuda"``
#: (launches and syncs).
KERNELS = ("compiled", "cpu", "cuda")

_forced: Optional[str] = None


def kernel_for(tensor: torch.Tensor, work: Optional[int] = None) -> str:
    """The twin that samples ``tensor``'s device: the forced one (:func:`use_kernel`), else on
    a CPU ``"compiled"`` when it is available and the hop's ``work`` (candidate edges; ``None``:
    any) reaches :data:`~fgnn.sampling.khop_compiled.MIN_EDGES`, else ``"cpu"``; on any other
    device ``"cuda"`` (also when ``"compiled"`` is forced: it runs on host memory only)."""
    on_cpu = tensor.device.type == "cpu"
    if _forced is not None:
        return "cuda" if _forced == "compiled" and not on_cpu else _forced
    if not on_cpu:
        return "cuda"
    from fgnn.sampling import khop_compiled

    if (work is None or work >= khop_compiled.MIN_EDGES) and khop_compiled.available():
        return "compiled"
    return "cpu"


@contextmanager
def use_kernel(name: Optional[str]) -> Iterator[None]:
    """Run the ``name`` twin on every device inside the ``with`` block (``None``: by device).

    A process-wide switch (not thread-safe), for tests and benchmarks: ``use_kernel("cuda")``
    runs the GPU-style kernels, and counts their launches and syncs, on CPU tensors.

    Raises:
        ValueError: ``name`` is not ``None`` nor one of :data:`KERNELS`, or is ``"compiled"``
            where numba is not installed (or ``FGNN_COMPILED=0``).
    """
    global _forced
    if name is not None and name not in KERNELS:
        raise ValueError(f"kernel must be one of {', '.join(KERNELS)} or None, got {name!r}")
    if name == "compiled":
        from fgnn.sampling import khop_compiled

        if not khop_compiled.available():
            raise ValueError("kernel 'compiled' needs numba (pip install numba) and "
                             "FGNN_COMPILED unset or 1")
    prev, _forced = _forced, name
    try:
        yield
    finally:
        _forced = prev

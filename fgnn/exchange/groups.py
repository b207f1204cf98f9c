"""Process groups of the collective exchange: which backend, and sums that never hang.

One group per generation of the exchange (:mod:`fgnn.exchange.collective`), built from a store
prefix without ``init_process_group``'s global state.

* **Backend.** NCCL on CUDA when every member is on its own physical GPU; NCCL refuses two ranks
  on one device ("Duplicate GPU detected", ``ncclInvalidUsage``), so a group whose members
  share a GPU (``--devices 2 --gpus-per-device 0.5`` on one GPU: the only factored layout one
  GPU can run) sums over gloo through host memory instead. The members compare their GPUs' UUIDs
  through the group's store before they build it (:func:`group_backend`), so they all pick the
  same backend, whatever Ray's packing of fractional bundles did.
* **Faults.** Gloo fails a call on a dead peer's closed connection. NCCL does not:
  ``work.wait()`` only makes the current stream wait, and the next host read of the result
  blocks until ``TORCH_NCCL_ASYNC_ERROR_HANDLING``'s watchdog (by default) kills the process.
  Here every NCCL wait blocks the host with the group's timeout (:func:`wait_work`), a timeout
  raises ``RuntimeError`` (the member reports a failed collective: the ledger probes the
  members and re-forms the group without the dead one), and the watchdog is set to abort the
  communicator without killing the process (``TORCH_NCCL_ASYNC_ERROR_HANDLING=2`` unless the
  environment sets it).
"""

from __future__ import annotations

import datetime
import os
from typing import Any, Callable

import torch

from fgnn import gpu

__all__ = ["abort_group", "gpu_identity", "group_backend", "group_broadcast", "group_sum",
           "group_sum_count", "is_nccl", "new_group", "wait_work"]

#: NCCL's async error handling in an exchange member: 2 aborts the communicator on a timeout or
#: error and leaves the process alive (torch's default, 3, kills it).
NCCL_ERROR_HANDLING = "2"


def gpu_identity(device: torch.device) -> str:
    """The physical GPU of ``device`` (its UUID): the same in every process on that GPU, whatever
    each process's ``CUDA_VISIBLE_DEVICES`` numbering."""
    return gpu.device_uuid(device)


def nccl_group(store: Any, rank: int, size: int, timeout: datetime.timedelta,
               device: torch.device) -> Any:
    """A ``ProcessGroupNCCL`` of ``size`` ranks on ``store`` (``device``: this rank's GPU)."""
    os.environ.setdefault("TORCH_NCCL_ASYNC_ERROR_HANDLING", NCCL_ERROR_HANDLING)
    opts = gpu.nccl_options()
    opts._timeout = timeout
    return gpu.nccl_process_group(store, rank, size, opts, device)


def group_backend(store: Any, rank: int, size: int, identity: str) -> str:
    """``"nccl"`` when the ``size`` members' GPUs (``identity`` is this member's) are all
    distinct, else ``"gloo"``: every member publishes its GPU under ``store`` and reads all
    of them, so every member returns the same answer."""
    store.set(f"gpu{rank}", identity)
    seen = [store.get(f"gpu{r}").decode() for r in range(size)]
    return "nccl" if len(set(seen)) == size else "gloo"


def new_group(store: Any, generation: int, rank: int, size: int, device: torch.device,
              timeout_s: float, *,
              nccl: Callable[..., Any] = nccl_group,
              identity: Callable[[torch.device], str] = gpu_identity) -> Any:
    """A process group of ``size`` members for one generation under the store prefix
    ``fgnn-g<generation>`` (no global ``init_process_group`` state): NCCL on CUDA when the
    members' GPUs are distinct (:func:`group_backend`), gloo otherwise.

    Args:
        nccl: ``nccl(store, rank, size, timeout, device)`` builds the NCCL group
            (:func:`nccl_group`; tests pass a fake).
        identity: this member's physical GPU (:func:`gpu_identity`).
    """
    import torch.distributed as dist

    prefixed = dist.PrefixStore(f"fgnn-g{generation}", store)
    timeout = datetime.timedelta(seconds=timeout_s)
    if gpu.is_cuda(device) and group_backend(prefixed, rank, size,
                                               identity(device)) == "nccl":
        return nccl(prefixed, rank, size, timeout, device)
    return dist.ProcessGroupGloo(prefixed, rank, size, timeout)


def is_nccl(pg: Any) -> bool:
    """Whether ``pg`` is an NCCL group (by the backend's own name)."""
    name = getattr(pg, "name", None)
    return callable(name) and str(name()).lower() == "nccl"


def wait_work(work: Any, timeout_s: float, what: str) -> None:
    """Block the host until ``work`` completes, at most ``timeout_s`` seconds.

    Raises:
        RuntimeError: the work failed, or did not complete in time (a peer that died or never
            answers): the caller treats it as a failed collective.
    """
    try:
        done = work.wait(datetime.timedelta(seconds=timeout_s))
    except RuntimeError as err:
        raise RuntimeError(f"{what} failed: {err}") from err
    if done is False:
        raise RuntimeError(f"{what}: no answer from every peer within {timeout_s:g} s "
                           f"(a member died or hangs)")


def abort_group(pg: Any) -> None:
    """Abort an NCCL group's communicator (a failed collective must not leave kernels waiting
    on a dead peer); gloo groups close with their last reference."""
    abort = getattr(pg, "abort", None) if is_nccl(pg) else None
    if abort is not None:
        try:
            abort()
        except Exception:  # noqa: BLE001 - best effort: the group is dropped either way
            pass


def group_sum(pg: Any, buf: torch.Tensor, timeout_s: float = 60.0) -> torch.Tensor:
    """The sum of ``buf`` over the members of ``pg`` (the same tensor, bit for bit, on every
    member).

    NCCL: one all-reduce, waited for on the host with ``timeout_s`` (:func:`wait_work`). Gloo:
    every member sends its buffer (a host copy of a CUDA one) to every other one and receives
    theirs, all sends and receives posted at once, then adds the rows in rank order. A ring
    all-reduce takes 2(N-1) dependent steps, an all-gather (gloo's is a ring) N-1; on an
    oversubscribed CPU each step waits for a process to be scheduled, and a ring whose member
    died leaves the members downstream of the gap waiting until the group's timeout. Here every
    member waits on each peer directly, so a dead peer fails every survivor's call at once, and
    an oversubscribed CPU schedules one wait a peer instead of a chain (docs/benchmarks.md has
    the timings). On GPUs the all-reduce is the bandwidth-optimal one (the exchange moves N
    times the bytes).

    Raises:
        RuntimeError: a peer died or did not answer in time.
    """
    if is_nccl(pg):
        wait_work(pg.allreduce([buf]), timeout_s, "NCCL all-reduce")
        return buf
    return _host_sum(pg, buf).to(buf.device)


_SIDE_STREAMS: dict[Any, Any] = {}


def _read_done(t: torch.Tensor) -> float:
    """``float(t)`` of a CUDA tensor whose producer the host has already seen complete, copied
    on a side stream: it does not wait behind the training kernels queued on the device's
    default stream (the reducer thread shares the device with the training thread)."""
    if not gpu.on_cuda(t):
        return float(t)
    where = gpu.device_of(t)
    stream = _SIDE_STREAMS.get(where)
    if stream is None:
        stream = _SIDE_STREAMS[where] = gpu.new_stream(where)
    with gpu.use_stream(stream):
        return float(t)


def group_sum_count(pg: Any, buf: torch.Tensor, timeout_s: float = 60.0
                    ) -> tuple[torch.Tensor, float]:
    """:func:`group_sum` of ``[gradient sum, seed count]`` and its seed count on the host,
    read without waiting for the device's other work: from the host sum over gloo; over NCCL,
    whose completion the host waited for, by a copy on a side stream.

    Raises:
        RuntimeError: a peer died or did not answer in time.
    """
    if is_nccl(pg):
        out = group_sum(pg, buf, timeout_s)
        return out, _read_done(out[-1])
    host = _host_sum(pg, buf)
    return host.to(buf.device), float(host[-1])


def _host_sum(pg: Any, buf: torch.Tensor) -> torch.Tensor:
    """The gloo sum of ``buf`` (see :func:`group_sum`) on the host."""
    host = buf.cpu()
    rank, size = pg.rank(), pg.size()
    rows, works = [host] * size, []
    for peer in range(size):
        if peer != rank:
            works.append(pg.send([host], peer, 0))
            rows[peer] = torch.empty_like(host)
            works.append(pg.recv([rows[peer]], peer, 0))
    for w in works:
        w.wait()
    return torch.stack(rows).sum(0)


def group_broadcast(pg: Any, buf: torch.Tensor, timeout_s: float = 60.0) -> torch.Tensor:
    """Rank 0's ``buf`` on every member of ``pg`` (in place on the others).

    NCCL: its broadcast, waited for with ``timeout_s``. Gloo: rank 0 sends (a host copy) to
    every member directly. Gloo's own broadcast is a binomial tree: a dead inner member leaves
    its subtree waiting until the group's timeout while the rest go on; directly, a dead member
    fails rank 0's call at once, and a dead rank 0 fails every member's.

    Raises:
        RuntimeError: a peer died or did not answer in time.
    """
    if is_nccl(pg):
        wait_work(pg.broadcast(buf, 0), timeout_s, "NCCL broadcast")
        return buf
    host = buf.cpu()
    if pg.rank() != 0:
        pg.recv([host], 0, 0).wait()
        if host is not buf:
            buf.copy_(host)
        return buf
    works = [pg.send([host], peer, 0) for peer in range(1, pg.size())]
    for w in works:
        w.wait()
    return buf

"""The collective exchange's process groups on CUDA, held to NCCL's rules with fakes on the CPU.

NCCL refuses two ranks on one GPU ("Duplicate GPU detected", ``ncclInvalidUsage``), and its
``work.wait()`` returns at once without raising on a dead peer. The fakes below do the same, so
these tests fail on a group builder that always takes NCCL on CUDA, or a sum that waits
without a timeout.
"""

from __future__ import annotations

import datetime
import threading
import time

import pytest
import torch
import torch.distributed as dist

from fgnn.exchange.groups import group_broadcast, group_sum, is_nccl, new_group, wait_work

CUDA = torch.device("cuda:0")  # a device object only: nothing is allocated on it


class DuplicateGpuRefused:
    """A ``ProcessGroupNCCL`` factory with NCCL's rule: two ranks of one group on one
    physical GPU fail ("Duplicate GPU detected")."""

    def __init__(self, gpus: dict[int, str]) -> None:
        self.gpus, self.built, self._lock = gpus, [], threading.Lock()

    def __call__(self, store, rank, size, timeout, device):
        with self._lock:
            self.built.append(rank)
        if len(set(self.gpus.values())) < size:
            raise RuntimeError("NCCL error: invalid usage (ncclInvalidUsage): Duplicate GPU "
                               "detected: rank 0 and rank 1 both on the same CUDA device")
        return FakeNccl(rank, size)


class FakeNccl:
    """An NCCL group whose collectives complete, or never answer (those named in ``hang``)."""

    def __init__(self, rank: int, size: int, hang: tuple[str, ...] = ()) -> None:
        self._rank, self._size, self.hang, self.waits = rank, size, hang, []

    def name(self) -> str:
        return "nccl"

    def rank(self) -> int:
        return self._rank

    def size(self) -> int:
        return self._size

    def allreduce(self, tensors):
        return FakeWork(self, "allreduce" in self.hang)

    def broadcast(self, tensor, root):
        return FakeWork(self, "broadcast" in self.hang)


class FakeWork:
    """NCCL's ``Work``: ``wait()`` without a timeout returns at once (it only orders streams),
    even for a peer that never answers; with one, it blocks up to the timeout (False)."""

    def __init__(self, pg: FakeNccl, hang: bool) -> None:
        self.pg, self.hang = pg, hang

    def wait(self, timeout=datetime.timedelta(0)) -> bool:
        self.pg.waits.append(timeout)
        if not self.hang:
            return True
        if timeout == datetime.timedelta(0):
            return True  # what NCCL's wait() does on a dead peer: the stream waits, not the host
        time.sleep(timeout.total_seconds())
        return False


def _build(n: int, gpus: dict[int, str], factory) -> list:
    store, out = dist.HashStore(), [None] * n

    def member(rank: int) -> None:
        try:
            out[rank] = new_group(store, 1, rank, n, CUDA, 10.0, nccl=factory,
                                  identity=lambda d, r=rank: gpus[r])
        except RuntimeError as err:
            out[rank] = err

    threads = [threading.Thread(target=member, args=(r,)) for r in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(20)
    return out


def test_the_old_builder_hits_ncclS_duplicate_gpu_refusal():
    """What the group builder did before (NCCL whenever the device is CUDA): two Trainers on
    one GPU (``--devices 2 --gpus-per-device 0.5``) fail to build their group."""
    gpus = {0: "GPU-aaaa", 1: "GPU-aaaa"}
    factory = DuplicateGpuRefused(gpus)
    store = dist.HashStore()
    with pytest.raises(RuntimeError, match="Duplicate GPU detected"):
        factory(dist.PrefixStore("g", store), 0, 2, datetime.timedelta(seconds=1), CUDA)


def test_members_sharing_a_gpu_sum_over_gloo_never_nccl():
    gpus = {0: "GPU-aaaa", 1: "GPU-aaaa"}
    factory = DuplicateGpuRefused(gpus)
    pgs = _build(2, gpus, factory)
    assert factory.built == []  # NCCL was never asked
    assert all(isinstance(pg, dist.ProcessGroupGloo) for pg in pgs), pgs
    out: list = [None, None]

    def member(rank: int) -> None:
        out[rank] = group_sum(pgs[rank], torch.full((5,), float(rank + 1)), 10.0)

    threads = [threading.Thread(target=member, args=(r,)) for r in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(20)
    assert torch.equal(out[0], torch.full((5,), 3.0)) and torch.equal(out[0], out[1])


def test_members_on_distinct_gpus_take_nccl():
    gpus = {0: "GPU-aaaa", 1: "GPU-bbbb", 2: "GPU-cccc"}
    factory = DuplicateGpuRefused(gpus)
    pgs = _build(3, gpus, factory)
    assert sorted(factory.built) == [0, 1, 2]
    assert all(is_nccl(pg) for pg in pgs)


def test_three_members_two_on_one_gpu_all_take_gloo():
    """One shared GPU in the group is enough: every member picks gloo (the same answer on
    every member, or the group could not form)."""
    gpus = {0: "GPU-aaaa", 1: "GPU-bbbb", 2: "GPU-aaaa"}
    factory = DuplicateGpuRefused(gpus)
    pgs = _build(3, gpus, factory)
    assert factory.built == [] and not any(is_nccl(pg) for pg in pgs)


@pytest.mark.parametrize("op", ["sum", "broadcast"])
def test_a_peer_that_never_answers_fails_the_nccl_call_within_the_timeout(op):
    """NCCL's ``wait()`` does not raise on a dead peer; the host waits with the group's
    timeout, and the timeout raises (the member then reports a failed collective)."""
    pg = FakeNccl(0, 2, hang=("allreduce", "broadcast"))
    t = time.perf_counter()
    with pytest.raises(RuntimeError, match="no answer"):
        (group_sum if op == "sum" else group_broadcast)(pg, torch.ones(4), 0.2)
    assert time.perf_counter() - t < 5
    assert pg.waits and all(w > datetime.timedelta(0) for w in pg.waits)


def test_a_failed_nccl_wait_is_a_runtime_error_naming_the_call():
    class Broken:
        def wait(self, timeout):
            raise RuntimeError("NCCL communicator was aborted")

    with pytest.raises(RuntimeError, match="NCCL all-reduce failed: NCCL communicator"):
        wait_work(Broken(), 1.0, "NCCL all-reduce")


def test_a_member_whose_peer_never_answers_reports_to_the_ledger_and_does_not_hang():
    """The reducer thread of an :class:`ExchangeMember` on an NCCL group whose peer never
    answers: the step's sum times out, the member aborts the group and tells the ledger
    (``failed``), so the ledger can re-form the group; training does not hang."""
    from torch import nn

    from fgnn.exchange.collective import ExchangeMember
    from fgnn.exchange.step_ledger import Event

    calls: list = []
    events = [Event("form", 1, ("a", "b"), 0), Event("reduce", 1, ("a", "b"), 0)]
    pg = FakeNccl(0, 2, hang=("allreduce",))  # the form's broadcast answers, the sum does not
    aborted: list = []
    pg.abort = lambda: aborted.append(True)

    def call(method, *args):
        calls.append((method,) + args)
        return 0

    def events_at(i, version):
        if i < len(events):
            return events[i]
        time.sleep(0.05)
        return None

    m = ExchangeMember("a", nn.Linear(3, 2), 0.01, call=call, store=None, timeout_s=0.3,
                       events=events_at)
    m.new_group = lambda *args: pg
    t = time.perf_counter()
    m.begin(1)
    while time.perf_counter() - t < 10 and not any(c[0] == "failed" for c in calls):
        time.sleep(0.05)
    m.stop()
    assert ("failed", "a", 1) in calls, calls
    assert time.perf_counter() - t < 5
    assert aborted == [True] and m.version == 0


def test_the_step_count_comes_with_the_sum_on_either_backend():
    """The reducer's seed count: read from the host sum over gloo, and over NCCL after the
    host waited for the all-reduce (no ``.item()`` queued behind the training kernels)."""
    from fgnn.exchange.groups import group_sum_count

    pg = FakeNccl(0, 2)
    buf = torch.tensor([1.0, 2.0, 5.0])
    out, count = group_sum_count(pg, buf, 1.0)
    assert count == 5.0 and out is buf and pg.waits == [datetime.timedelta(seconds=1)]
    store, got = dist.HashStore(), [None, None]

    def member(rank: int) -> None:
        g = new_group(store, 2, rank, 2, torch.device("cpu"), 10.0)
        got[rank] = group_sum_count(g, torch.tensor([1.0, float(rank + 3)]), 10.0)

    threads = [threading.Thread(target=member, args=(r,)) for r in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(20)
    assert [c for _, c in got] == [7.0, 7.0] and torch.equal(got[0][0], torch.tensor([2., 7.]))

"""The peer tier across processes (``fgnn/cache/peer_share.py``, ``fgnn/executors/peers.py``):
a buffer exported by one process is read in place by another; a peer that cannot be opened is
read from the host copy with its reason; no shared-memory segment outlives its release."""

from __future__ import annotations

import dataclasses
import multiprocessing as mp
import os

import torch

from fgnn.cache import peer_share as ps
from fgnn.cache.feature_store import FeatureStore
from fgnn.cache.placement import Placement
from fgnn.executors.peers import TrainerPeers, offers_for, peer_report

N, F = 64, 8


def feats() -> torch.Tensor:
    return torch.arange(N * F, dtype=torch.float32).view(N, F)


def placement() -> Placement:
    """Device 0 caches 0..15, device 1 caches 16..31, device 2 caches nothing."""
    return Placement([torch.arange(16), torch.arange(16, 32), torch.arange(0)], N)


def _reader(handle, ids, value, conn) -> None:
    """In a spawned process: open ``handle``, send back the rows ``ids`` (numpy: a tensor
    would travel as a file descriptor this process must outlive), fill row 0 with ``value``
    (the exporter must see it: the same memory, not a copy)."""
    try:
        if handle.kind == "ipc":
            torch.cuda.set_device(0)
        t = ps.open_buffer(handle)
        conn.send(("ok", t[torch.tensor(ids)].cpu().numpy(), str(t.device)))
        t[0] = value
        if t.is_cuda:
            torch.cuda.synchronize()
        conn.send("written")
    except Exception as err:  # noqa: BLE001 - the parent asserts on it
        conn.send(("error", f"{type(err).__name__}: {err}", ""))


def test_a_buffer_exported_here_is_read_in_place_by_a_spawned_process(device):
    buf = ps.shared_empty((N, F), torch.float32, device)
    buf.copy_(feats().to(device))
    handle = ps.export_buffer(buf)
    assert handle.kind == ("ipc" if device.startswith("cuda") else "shm")
    ctx = mp.get_context("spawn")
    parent, child = ctx.Pipe()
    ids = [5, 0, 63, 17]
    proc = ctx.Process(target=_reader, args=(handle, ids, -1.0, child))
    proc.start()
    try:
        assert parent.poll(120), "the reader did not answer"
        status, rows, where = parent.recv()
        assert status == "ok", rows
        assert torch.equal(torch.from_numpy(rows), feats()[ids])  # the same bytes
        assert parent.recv() == "written"
        assert torch.equal(buf[0].cpu(), torch.full((F,), -1.0))  # one memory, no copy
    finally:
        proc.join(60)
        ps.release(handle)
    assert proc.exitcode == 0
    assert handle.name not in ps.segments()


def test_a_peer_that_cannot_be_opened_is_read_from_the_host_with_the_reason():
    host, pl = feats(), placement()
    peers = [TrainerPeers("auto", f"t{d}") for d in range(3)]
    stores = [FeatureStore.from_placement(host, pl, d, peers_from_host=True,
                                          alloc=peers[d].alloc) for d in range(2)]
    other = os.getppid()  # a handle as another process would see it
    good = dataclasses.replace(peers[1].export()["handle"], pid=other)
    gone = ps.shared_empty((16, F))
    gone_handle = dataclasses.replace(ps.export_buffer(gone), pid=other)
    ps.release(gone)                                           # its segment is removed
    offers = {1: gone_handle}
    got = peers[0].open(stores[0], offers)
    assert got["sources"] == {1: "host"} and "is gone" in got["reasons"][1]
    for bad, why in ((dataclasses.replace(good, host="elsewhere/0"), "exported on host"),
                     (dataclasses.replace(good, kind="ipc", ipc=(None,) * 15), "CUDA"),
                     (dataclasses.replace(good, shape=(99, F)), "holds"),
                     ("fgnn-trainer-1 runs on another Ray node", "another Ray node")):
        if why == "CUDA" and torch.cuda.is_available():
            continue  # this host could open it; the refusal is what a CPU host shows
        got = peers[0].open(stores[0], {1: bad})
        assert got["sources"] == {1: "host"} and why in got["reasons"][1], got
    ids = torch.arange(N)
    x = stores[0].gather(ids, pl.holder_bits()[ids])
    assert torch.equal(x, host)                                # host copy: the same rows
    st = stores[0].reset_stats()
    assert (st.hits, st.peer, st.peer_host, st.misses) == (16, 16, 16, 32)
    report = peer_report("auto", {"t0": got})
    assert report["peer_source"] == {"t0": {"1": "host"}}
    assert report["fallbacks"][0]["peer"] == 1 and report["fallbacks"][0]["reason"]
    # the good handle maps the peer's segment: its rows now come from the buffer
    assert peers[0].open(stores[0], {1: good}) == {"sources": {1: "shm"}, "reasons": {}}
    x = stores[0].gather(ids, pl.holder_bits()[ids])
    assert torch.equal(x, host)
    st = stores[0].reset_stats()
    assert (st.hits, st.peer, st.peer_host, st.misses) == (16, 16, 0, 32)
    names = [p.export()["handle"].name for p in peers[:2]]
    for p in peers:
        p.close()
    assert not set(names) & set(ps.segments())
    del stores, p, peers  # a Trainer dropped without close stops sharing too
    dropped = TrainerPeers("auto", "t")
    dropped.alloc((4, F), torch.float32, torch.device("cpu"))
    name = dropped.export()["handle"].name
    assert name in ps.segments()
    del dropped
    assert name not in ps.segments()


def test_a_mapped_peer_whose_owner_is_gone_goes_back_to_the_host():
    host, pl = feats(), placement()
    store = FeatureStore.from_placement(host, pl, 0, peers_from_host=True)
    owner = {"alive": True}
    store.set_peer(1, host[16:32].clone(), alive=lambda: owner["alive"])
    ids = torch.arange(16, 32)
    store.gather(ids)
    assert (store.stats.peer, store.stats.peer_host) == (16, 0)
    owner["alive"] = False                                    # a CUDA IPC exporter exited
    assert torch.equal(store.gather(ids), host[16:32])
    assert (store.stats.peer, store.stats.peer_host) == (32, 16)
    assert store.buffers[1] is None and store.peers_lost == [1]


def test_offers_name_what_a_trainer_cannot_map():
    h = ps.BufferHandle("shm", (16, F), "float32", ps.host_key(), 1, name="x")
    exports = {0: {"handle": h, "node": "a", "why": None},
               1: {"handle": h, "node": "b", "why": None},
               3: {"handle": None, "node": "a", "why": "no writable /dev/shm on this host"}}
    names = {0: "t0", 1: "t1", 3: "t3"}
    got = offers_for(0, exports, [16, 16, 16, 16, 0], names)
    assert got[1] == "t1 runs on another Ray node"
    assert got[2] == "no live Trainer on device 2"
    assert got[3] == "t3 shares no buffer: no writable /dev/shm on this host"
    assert set(got) == {1, 2, 3}                              # not itself, not an empty peer
    same = offers_for(0, {**exports, 1: {**exports[1], "node": "a"}}, [16, 16], names)
    assert same == {1: h}


def test_no_segment_outlives_its_release():
    me = os.getpid()
    before = set(ps.segments(me))
    peers = TrainerPeers("auto", "t")
    a = peers.alloc((4, F), torch.float32, torch.device("cpu"))
    assert len(set(ps.segments(me)) - before) == 1
    handle = peers.export()["handle"]
    b = peers.alloc((4, F), torch.float32, torch.device("cpu"))  # the store is rebuilt
    new = peers.export()["handle"].name
    assert set(ps.segments(me)) - before == {new} and new != handle.name
    a.fill_(1.0)                                # the old buffer is still this store's memory
    peers.close()
    assert set(ps.segments(me)) == before
    assert b.shape == (4, F)
    host_only = TrainerPeers("host", "t")
    host_only.alloc((4, F), torch.float32, torch.device("cpu"))
    assert set(ps.segments(me)) == before and "host" in host_only.export()["why"]
    # a segment of a process that is gone (killed: no atexit) is swept by the next one
    proc = mp.get_context("fork").Process(target=os._exit, args=(0,))
    proc.start()
    proc.join()
    stale = os.path.join(ps.shm_dir(), f"{ps.SEGMENT_STEM}-{proc.pid}-dead")
    open(stale, "wb").close()
    c = ps.shared_empty((2, F))
    assert not os.path.exists(stale)
    ps.release(c)
    assert set(ps.segments(me)) == before

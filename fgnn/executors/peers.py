"""The peer tier across executor processes (internal): each Trainer reads the rows its peers
cache from their buffers, mapped into its process (:mod:`fgnn.cache.peer_share`), not from
the host copy.

Every Trainer (standbys too: the placement makes Trainers read rows a standby holds, since the
lowest-numbered holder wins and standbys sit on the first devices) is its own Ray actor. After
the cache fill the driver asks each for its buffer's handle (:meth:`TrainerPeers.export`),
offers every Trainer the handles of the others on its Ray node (:func:`offers_for`; another
node's, or none, come with the reason instead), and each opens them into its feature store
(:meth:`TrainerPeers.open`): CUDA IPC between GPU processes, a shared-memory segment on the CPU.
A peer that cannot be opened is read from the host copy, with one log line naming the reason,
and the report says so per Trainer (``allocation.peer_tier``). ``cache.peer_tier = "host"``
keeps every peer on the host copy (the behaviour before this module).

A restarted Trainer gets the others' handles with its cache; its own new buffer reaches them at
the start of the next epoch, when the driver offers the handles again. Until then a CUDA IPC
mapping of a dead Trainer is not read (its owner's pid is checked before each gather); a
shared-memory mapping stays valid, holding the same rows.
"""

from __future__ import annotations

import sys
import weakref
from typing import Any, Optional, Union

import torch

from fgnn.config import PEER_TIERS
from fgnn.cache.peer_share import (BufferHandle, PeerShareError, export_buffer,
                                   exporter_alive, host_key, open_buffer, release,
                                   shared_empty)

__all__ = ["PEER_TIERS", "TrainerPeers", "current_node", "host_reads", "offers_for",
           "peer_report"]

#: What a Trainer is offered for one peer device: its handle, or why there is none.
Offer = Union[BufferHandle, str]


def current_node() -> str:
    """This process's Ray node id inside a Ray job, else :func:`~fgnn.cache.peer_share.
    host_key` (Ray is not imported for it)."""
    ray = sys.modules.get("ray")
    if ray is not None:
        try:
            if ray.is_initialized():
                return str(ray.get_runtime_context().get_node_id())
        except Exception:  # noqa: BLE001 - an in-process job: the host is the node
            pass
    return host_key()


class TrainerPeers:
    """A Trainer's side of the peer tier: its own buffer shareable and exported, its peers'
    buffers opened into its store.

    Args:
        mode: ``cache.peer_tier`` (:data:`PEER_TIERS`).
        name: the Trainer's name.

    Attributes:
        sources: peer device -> ``"ipc"``, ``"shm"`` or ``"host"``, from the last :meth:`open`.
        reasons: peer device -> why it is read from the host copy.
    """

    def __init__(self, mode: str = "auto", name: str = "trainer") -> None:
        if mode not in PEER_TIERS:
            raise ValueError(f"peer tier must be one of {', '.join(PEER_TIERS)}, got {mode!r}")
        self.mode, self.name = mode, name
        self._own: Optional[torch.Tensor] = None
        self._handle: Optional[BufferHandle] = None
        self._finalizer: Optional[weakref.finalize] = None
        self._why = "no cache buffer yet"
        self.sources: dict[int, str] = {}
        self.reasons: dict[int, str] = {}

    def alloc(self, shape: tuple[int, ...], dtype: torch.dtype,
              device: torch.device) -> torch.Tensor:
        """The store's own buffer (``FeatureStore.from_placement``'s ``alloc``): shareable
        unless the mode is ``host`` or the host refuses (then a plain tensor, and the reason is
        what :meth:`export` reports). The previous buffer stops being shared."""
        self.close()
        if self.mode == "host":
            self._why = "cache.peer_tier is host"
        else:
            try:
                self._own = shared_empty(shape, dtype, device)
                # a Trainer dropped without close (in-process use) stops sharing it too
                self._finalizer = weakref.finalize(self, release, self._own)
                return self._own
            except PeerShareError as err:
                self._why = str(err)
        return torch.empty(shape, dtype=dtype, device=device)

    def export(self) -> dict[str, Any]:
        """``{"handle", "node", "why"}``: this Trainer's buffer handle (None, with ``why``,
        when it shares none) and its node (:func:`current_node`)."""
        node = current_node()
        if self._own is None:
            return {"handle": None, "node": node, "why": self._why}
        if self._handle is None:  # once per buffer (CUDA IPC counts every export)
            try:
                self._handle = export_buffer(self._own)
            except Exception as err:  # noqa: BLE001 - no export: the peers read the host
                return {"handle": None, "node": node, "why": _reason(err)}
        return {"handle": self._handle, "node": node, "why": None}

    def open(self, store: Any, offers: dict[int, Offer]) -> dict[str, Any]:
        """Open each offered peer buffer into ``store`` (``FeatureStore.set_peer``); a peer
        that cannot be opened (or was offered a reason) is read from the host copy. Returns
        ``{"sources", "reasons"}`` (peer device -> ...); the driver logs the reasons, one line
        each."""
        sources: dict[int, str] = {}
        reasons: dict[int, str] = {}
        for d, offer in sorted(offers.items()):
            d = int(d)
            if isinstance(offer, BufferHandle):
                try:
                    rows = open_buffer(offer, getattr(store, "device", None))
                    alive = (None if offer.kind != "ipc" else
                             (lambda h=offer: exporter_alive(h)))
                    store.set_peer(d, rows, alive)
                    sources[d] = "ipc" if offer.kind == "ipc" else "shm"
                    continue
                except Exception as err:  # noqa: BLE001 - never a crash: the host copy
                    why = _reason(err)
            else:
                why = str(offer)
            store.set_peer(d, None)
            sources[d], reasons[d] = "host", why
        self.sources, self.reasons = sources, reasons
        return {"sources": sources, "reasons": reasons}

    def adopt(self, replica: Optional[dict[str, Any]], device: torch.device
              ) -> Optional[torch.Tensor]:
        """The rows of another Trainer's buffer holding the same ids on this host (its
        :meth:`export`), mapped to serve as this Trainer's own cache and exported under the
        same handle (the owner keeps the segment); None (this Trainer fills its own) for a
        device that is not the host's memory, another node, no handle or a mapping refused."""
        self.close()
        handle = None if replica is None else replica.get("handle")
        if (device.type != "cpu" or not isinstance(handle, BufferHandle)
                or handle.kind != "shm" or replica.get("node") != current_node()):
            return None
        try:
            self._own = open_buffer(handle, device)
        except PeerShareError as err:
            self._why = str(err)
            return None
        self._handle = handle
        return self._own

    def close(self) -> None:
        """Stop sharing this Trainer's buffer (its segment's name is removed; readers keep
        their mappings)."""
        if self._finalizer is not None:
            self._finalizer()  # release(self._own), once
        self._own = self._handle = self._finalizer = None
        self._why = "no cache buffer yet"


def _reason(err: BaseException) -> str:
    """The reason of a refusal for the log and the report: the message of ours, else the
    error's type with it."""
    if isinstance(err, (PeerShareError, ValueError)):
        return str(err)
    return f"{type(err).__name__}: {err}"


def offers_for(me: int, exports: dict[int, dict[str, Any]], peer_rows: list[int],
               names: dict[int, str]) -> dict[int, Offer]:
    """What Trainer device ``me`` is offered: for each other device the placement gives rows
    (``peer_rows``), the handle it exported when it runs on ``me``'s node, else the reason
    (no live Trainer, shares no buffer, another node)."""
    mine = exports.get(me, {}).get("node")
    out: dict[int, Offer] = {}
    for d, rows in enumerate(peer_rows):
        if d == me or not rows:
            continue
        x = exports.get(d)
        who = names.get(d, f"device {d}")
        if x is None:
            out[d] = f"no live Trainer on device {d}"
        elif x["handle"] is None:
            out[d] = f"{who} shares no buffer: {x['why']}"
        elif mine is None or x["node"] != mine:
            out[d] = f"{who} runs on another Ray node"
        else:
            out[d] = x["handle"]
    return out


def peer_report(mode: str, opened: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The report's ``allocation.peer_tier``: the mode, each Trainer's ``peer_source`` (peer
    device -> ``ipc``/``shm``/``host``) and the ``fallbacks`` to the host copy with their
    reasons."""
    source = {name: {str(d): s for d, s in sorted(r["sources"].items())}
              for name, r in sorted(opened.items())}
    fallbacks = [{"trainer": name, "peer": int(d), "reason": why}
                 for name, r in sorted(opened.items())
                 for d, why in sorted(r["reasons"].items())]
    return {"mode": mode, "peer_source": source, "fallbacks": fallbacks}


def host_reads(peer_rows: list[int], me: int, why: str) -> dict[str, Any]:
    """The ``open`` result of a Trainer whose peers all stay on the host copy (``why``)."""
    peers = [d for d, rows in enumerate(peer_rows) if rows and d != me]
    return {"sources": {d: "host" for d in peers}, "reasons": {d: why for d in peers}}

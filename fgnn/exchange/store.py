"""The collective exchange's rendezvous store, bound and keyed so that only the job reaches it.

The ledger (:class:`~fgnn.exchange.step_ledger.StepLedger`) serves a ``torch.distributed``
``TCPStore``; left to itself, its server listens on every interface (``*:port``, IPv4 and IPv6)
and answers anyone, with no authentication. :func:`serve_store` instead

* hands the server a socket fgnn bound itself (``master_listen_fd``): to ``127.0.0.1`` when
  every member runs on the ledger's node (nothing off the host can connect at all), else to the
  node's own address only;
* keeps every key under a random secret prefix (:class:`StoreAddress`, 128 bits), which the
  members receive through Ray (the ledger's ``store_address``, a Ray call the cluster
  authenticates): a client that connects without it reads, overwrites and deletes nothing of
  the job's (the store lists no keys, so none can be found without the prefix).

:func:`connect_store` is the members' side.
"""

from __future__ import annotations

import datetime
import secrets
import socket
from dataclasses import dataclass
from typing import Any, Optional

__all__ = ["StoreAddress", "serve_store", "connect_store", "LOOPBACK"]

#: The address a store of a one-node job binds to.
LOOPBACK = "127.0.0.1"


@dataclass(frozen=True)
class StoreAddress:
    """Where the members reach the store, and the prefix of the job's keys.

    Attributes:
        host: the address the server is bound to.
        port: its port.
        secret: the random key prefix (hex); without it no key of the job is found.
    """

    host: str
    port: int
    secret: str


def _listen(host: str) -> socket.socket:
    """A TCP socket bound to ``host`` on a free port, listening."""
    family = socket.getaddrinfo(host, 0, type=socket.SOCK_STREAM)[0][0]
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.bind((host, 0))
        sock.listen(1024)
    except OSError:
        sock.close()
        raise
    return sock


def serve_store(host: Optional[str] = None) -> tuple[Any, StoreAddress]:
    """Start a store server bound to ``host`` only, its keys under a new random secret.

    Args:
        host: the address to bind: :data:`LOOPBACK` when every member is on this node; None:
            this node's own address (:func:`ray.util.get_node_ip_address`), for members on
            other nodes.

    Returns:
        ``(store, address)``: the job's view of the store (a ``PrefixStore`` under the secret;
        the server lives as long as it does) and what members pass to :func:`connect_store`.
    """
    import torch.distributed as dist

    if host is None:
        from ray.util import get_node_ip_address

        host = get_node_ip_address()
    sock = _listen(host)
    port = sock.getsockname()[1]
    # the server takes over the bound socket: it listens there and nowhere else
    server = dist.TCPStore(host, port, is_master=True, wait_for_workers=False,
                           master_listen_fd=sock.detach())
    address = StoreAddress(host, port, secrets.token_hex(16))
    return dist.PrefixStore(address.secret, server), address


def connect_store(address: StoreAddress, timeout_s: float) -> Any:
    """A member's client of the store at ``address``, keyed under its secret.

    Args:
        address: from :func:`serve_store`.
        timeout_s: how long a ``get`` or ``wait`` waits for a key.
    """
    import torch.distributed as dist

    client = dist.TCPStore(address.host, address.port, is_master=False,
                           timeout=datetime.timedelta(seconds=timeout_s))
    return dist.PrefixStore(address.secret, client)

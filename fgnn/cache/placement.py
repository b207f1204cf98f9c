"""Placing cached feature rows over several devices (Song & Jiang §3; DataTiering §4).

A placement is one buffer of vertex ids per device. Each device then locates any vertex through
Song & Jiang's ``dev_num`` and ``buf_pos`` (§3.2), which :class:`~fgnn.cache.lookup.CacheLookup`
answers from the holder bits and the buffers; a device reads a vertex from its own buffer
whenever it holds it.

Three strategies:

* :func:`replicate_placement` — Rule 1 (no fast link between devices): every device caches the
  ``capacity`` vertices with the highest sampling probability, which maximises
  ``E[|S_i ∩ B_i|]`` in the cost of Eq. 5.
* :func:`clique_placement` — Rule 2 / Algorithm 1 (devices in a clique with a fast link): start
  from Rule 1 and replace duplicated vertices by the next hottest ones while
  ``p(new) > α·p(old)`` (Eq. 7 with ``α = C_gpu / C_cpu``), keeping the devices' ``p_sum``
  balanced. This trades the last term of Eq. 6 (local hits) against the second last (hits
  anywhere in the clique).
* :func:`interleaved_placement` — DataTiering (Min et al., §4, Figs. 4–6): the ``replicated``
  hottest vertices on every device, then the next hottest spread round-robin (interleaved) over
  the devices so memory and link bandwidth stay balanced.

:func:`choose_placement` picks between Rule 1 and Rule 2 (``"auto"``) by the expected cost of
Eq. 3–4 (:func:`expected_cost`), and :func:`job_placement` lays a job's devices out: the Trainers
share the chosen placement, and each standby Trainer (FGNN §5.3, a smaller budget because the
topology shares its device) caches its own hottest rows. :meth:`Placement.holder_bits` is the map
the Sample stage marks against (FGNN's M step): one bit per device.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch

__all__ = [
    "PLACEMENTS",
    "Placement",
    "bits_dtype",
    "choose_placement",
    "clique_placement",
    "expected_cost",
    "interleaved_placement",
    "job_placement",
    "replicate_placement",
    "hot_order",
]

#: Placement strategies of the runtime (``CacheConfig.placement``).
PLACEMENTS = ("replicate", "algorithm1", "auto")

#: Most devices a holder bitmask describes (bits of an int64, sign bit unused).
MAX_DEVICES = 63


def _check_hotness(hotness: torch.Tensor, name: str = "hotness") -> torch.Tensor:
    h = torch.as_tensor(hotness)
    if h.dim() != 1:
        raise ValueError(f"{name} must be a 1-D tensor of length N, got shape {tuple(h.shape)}")
    if h.numel() > 0 and bool(torch.isnan(h.to(torch.float64)).any()):
        raise ValueError(f"{name} contains NaN")
    return h


def hot_order(hotness: torch.Tensor) -> torch.Tensor:
    """Vertex ids by descending hotness; ties keep the smaller id first (a stable sort)."""
    h = _check_hotness(hotness)
    return torch.argsort(h, descending=True, stable=True)


def _check_devices(num_devices: int, capacity: int) -> None:
    if not isinstance(num_devices, int) or num_devices < 1:
        raise ValueError(f"num_devices must be a positive int, got {num_devices!r}")
    if not isinstance(capacity, int) or capacity < 0:
        raise ValueError(f"capacity must be a non-negative int (rows per device), got "
                         f"{capacity!r}")


@dataclass
class Placement:
    """Vertex ids cached on each device of a group.

    Attributes:
        buffers: one ``(C_i,)`` int64 tensor per device; position = row in that device's buffer.
        num_nodes: N, the number of vertices.
    """

    buffers: list[torch.Tensor]
    num_nodes: int

    def __post_init__(self) -> None:
        for i, b in enumerate(self.buffers):
            if b.dim() != 1:
                raise ValueError(f"buffers[{i}] must be 1-D, got shape {tuple(b.shape)}")
            if b.numel() and (int(b.min()) < 0 or int(b.max()) >= self.num_nodes):
                raise ValueError(f"buffers[{i}] holds an id outside [0, {self.num_nodes})")
            if torch.unique(b).numel() != b.numel():
                raise ValueError(f"buffers[{i}] holds a vertex twice")

    @property
    def num_devices(self) -> int:
        """n, the number of devices."""
        return len(self.buffers)

    def holders(self) -> torch.Tensor:
        """``(n, N)`` bool: ``holders()[d, v]`` is True when device ``d`` caches ``v``."""
        out = torch.zeros(self.num_devices, self.num_nodes, dtype=torch.bool)
        for d, b in enumerate(self.buffers):
            out[d, b.cpu()] = True
        return out

    def covered(self) -> int:
        """Number of distinct vertices cached somewhere in the group (``|B_gpu|``)."""
        return int(self.holders().any(0).sum())

    def holder_bits(self) -> torch.Tensor:
        """``(N,)`` integer bitmask: bit ``d`` of ``holder_bits()[v]`` is set when device ``d``
        caches ``v``; 0 means host only. The dtype is the narrowest that holds ``n`` bits
        (:func:`bits_dtype`).

        This is the cache map the Sample stage marks against (FGNN Table 5 "M"): whichever
        device consumes a sample splits it into local, peer and host rows from the marks alone.
        """
        out = torch.zeros(self.num_nodes, dtype=bits_dtype(self.num_devices))
        for d, b in enumerate(self.buffers):
            b = b.cpu().long()
            out[b] = out[b] | (1 << d)
        return out


def bits_dtype(num_devices: int) -> torch.dtype:
    """The narrowest integer dtype with one bit per device (uint8 up to 8 devices)."""
    if not isinstance(num_devices, int) or not 0 <= num_devices <= MAX_DEVICES:
        raise ValueError(f"num_devices must be an int in [0, {MAX_DEVICES}] for a holder "
                         f"bitmask, got {num_devices!r}")
    for dtype, bits in ((torch.uint8, 8), (torch.int16, 15), (torch.int32, 31)):
        if num_devices <= bits:
            return dtype
    return torch.int64


def replicate_placement(hotness: torch.Tensor, num_devices: int, capacity: int) -> Placement:
    """Rule 1 (Song & Jiang §3.2): without fast links, each device caches the hottest vertices.

    Args:
        hotness: ``(N,)`` sampling probabilities (or any hotness map; only the order matters).
        num_devices: n.
        capacity: ``BSIZE``, rows per device.
    """
    _check_devices(num_devices, capacity)
    v = hot_order(hotness)
    top = v[: min(capacity, v.numel())].clone()
    # one tensor for every device: a pickled placement carries the ids once
    return Placement([top] * num_devices, int(v.numel()))


def clique_placement(hotness: torch.Tensor, num_devices: int, capacity: int,
                     alpha: float) -> Placement:
    """Rule 2: Song & Jiang Algorithm 1 for devices connected by a fast link (NVLink).

    Faithful to the listing and the worked example of §3.2: ``V`` = vertices by descending ``p``
    (line 2); every ``B_i = V[0:BSIZE]`` (lines 4–5); iteration ``i`` belongs to round
    ``r = ⌊i/n⌋`` that targets the duplicate ``old = V[BSIZE-1-r]`` (line 18); at the start of a
    round the devices are sorted by ``p_sum`` ascending (lines 8–10, ties by device id); the last
    device of each round is skipped so one copy of ``old`` survives (line 12); otherwise the next
    unplaced vertex ``new`` (``V[BSIZE]``, ``V[BSIZE+1]``, ... in order; the listing's
    ``V[i+BSIZE]`` does not count the skipped iterations, while the worked example does) replaces
    ``old`` in the device's buffer if ``p(new) > α·p(old)`` (line 21), adding ``p(new)`` to the
    device's ``p_sum``; the first failed test stops the algorithm (line 26). At most
    ``min(N, n·BSIZE) − BSIZE`` replacements happen (line 7).

    The loop runs once per replacement over ``n`` scalars (O(N), as the paper states); all
    per-vertex work is vectorised.

    Args:
        hotness: ``(N,)`` sampling probabilities ``p``.
        num_devices: n.
        capacity: ``BSIZE``, rows per device.
        alpha: ``α ∈ [0, 1]``, the stand-in for ``C_gpu / C_cpu``; larger keeps more duplicates.

    Returns:
        The placement; ``buffers[i]`` is ``B_{i+1}`` of the paper, slot order preserved.
    """
    _check_devices(num_devices, capacity)
    if not 0.0 <= float(alpha) <= 1.0:
        raise ValueError(f"alpha must lie in [0, 1], got {alpha}")
    p = _check_hotness(hotness).to(torch.float64).cpu()
    v = hot_order(p).cpu()
    n_nodes, n = int(v.numel()), num_devices
    bsize = min(capacity, n_nodes)
    buffers = [v[:bsize].clone() for _ in range(n)]
    max_repl = min(n_nodes, n * bsize) - bsize
    if n == 1 or max_repl <= 0:
        return Placement(buffers, n_nodes)
    p_sorted = p[v]
    num_repl = _replacement_count(p_sorted, bsize, n, max_repl, float(alpha))
    target_dev = _replacement_devices(p_sorted[bsize: bsize + num_repl].tolist(), n)
    target = torch.tensor(target_dev, dtype=torch.int64)
    slots = bsize - 1 - torch.div(torch.arange(num_repl), n - 1, rounding_mode="floor")
    news = v[bsize: bsize + num_repl]
    for d in range(n):  # line 23, vectorised per device
        m = target == d
        buffers[d][slots[m]] = news[m]
    return Placement(buffers, n_nodes)


def _replacement_count(p_sorted: torch.Tensor, bsize: int, n: int, max_repl: int,
                       alpha: float) -> int:
    """How many replacements :func:`clique_placement` makes (lines 7, 21, 26), vectorised.

    Replacement ``j`` happens in round ``r = j // (n-1)`` against ``old = V[bsize-1-r]`` with
    ``new = V[bsize+j]``; the first ``j`` failing Eq. 7 ends the algorithm.
    """
    j = torch.arange(max_repl)
    rounds = torch.div(j, n - 1, rounding_mode="floor")
    ok = p_sorted[bsize + j] > alpha * p_sorted[bsize - 1 - rounds]
    bad = torch.nonzero(~ok)
    return int(bad[0]) if bad.numel() else max_repl


def _replacement_devices(p_new: list[float], n: int) -> list[int]:
    """The device of each of :func:`clique_placement`'s replacements, whose new vertices have
    hotness ``p_new``: each round of ``n - 1`` replacements goes to the devices by ascending
    ``p_sum`` (lines 8-10, 12, 25)."""
    num_repl = len(p_new)
    p_sum = [0.0] * n
    target_dev = []
    for r in range((num_repl + n - 2) // (n - 1)):
        ordered = sorted(range(n), key=lambda d: (p_sum[d], d))  # lines 8-10
        for slot in range(n - 1):  # the last device of the round keeps old (line 12)
            jj = r * (n - 1) + slot
            if jj >= num_repl:
                break
            dev = ordered[slot]
            target_dev.append(dev)
            p_sum[dev] += p_new[jj]  # line 25
    return target_dev

def interleaved_placement(hotness: torch.Tensor, num_devices: int, capacity: int,
                          replicated: int = 0) -> Placement:
    """DataTiering's multi-GPU tiering (Min et al., §4, Fig. 6).

    The ``replicated`` hottest vertices go to every device (the optional "replicated local GPU
    tensor"); the next ``num_devices · (capacity − replicated)`` vertices in descending hotness are
    interleaved: the ``k``-th of them goes to device ``k mod n`` (not a blocked partition, which
    would put all the hottest rows on one device). The rest stay on the host.

    Args:
        hotness: ``(N,)`` scores.
        num_devices: n, devices connected by a fast link.
        capacity: rows per device (replicated + interleaved share).
        replicated: rows of each device spent on the replicated hottest part.
    """
    _check_devices(num_devices, capacity)
    if not isinstance(replicated, int) or not 0 <= replicated <= capacity:
        raise ValueError(f"replicated must be an int in [0, capacity={capacity}], got "
                         f"{replicated!r}")
    v = hot_order(hotness).cpu()
    n_nodes, n = int(v.numel()), num_devices
    rep = v[: min(replicated, n_nodes)]
    spread = v[rep.numel(): rep.numel() + n * (capacity - replicated)]
    buffers = [torch.cat([rep, spread[d::n]]) for d in range(n)]
    return Placement(buffers, n_nodes)


def expected_cost(placement: Placement, p: torch.Tensor, peer_cost: float) -> float:
    """The objective of Song & Jiang Eq. 4: ``max_i E[C_i(B)]`` in units of ``C_cpu``.

    With ``s_i ~ Bernoulli(p)`` per vertex (§3.2), Eq. 3 gives for device ``i``
    ``E[C_i] / C_cpu = Σ_{v ∉ B_gpu} p_v + c · Σ_{v ∈ B_gpu \\ B_i} p_v`` when
    ``c = C_gpu / C_cpu < 1`` (fast links: remote rows come from a peer when one holds them) and
    ``Σ_{v ∉ B_i} p_v`` otherwise (no fast link: every remote row comes from the host).

    Args:
        placement: the buffers ``B_1 .. B_n``.
        p: ``(N,)`` sampling probabilities (any positive scale; the argmin does not depend on it).
        peer_cost: ``c = C_gpu / C_cpu >= 0``.
    """
    if not float(peer_cost) >= 0.0:
        raise ValueError(f"peer_cost must be >= 0, got {peer_cost!r}")
    p = _check_hotness(p, "p").to(torch.float64).cpu()
    if p.numel() != placement.num_nodes:
        raise ValueError(f"p has {p.numel()} entries, the placement covers "
                         f"{placement.num_nodes} vertices")
    held = placement.holders()
    in_gpu = held.any(0)
    total = float(p.sum())
    off_gpu = total - float(p[in_gpu].sum())
    costs = []
    for i in range(placement.num_devices):
        if peer_cost < 1.0:
            on_peers = float(p[in_gpu & ~held[i]].sum())
            costs.append(off_gpu + float(peer_cost) * on_peers)
        else:
            costs.append(total - float(p[held[i]].sum()))
    return max(costs) if costs else 0.0


def choose_placement(strategy: str, hotness: torch.Tensor, num_devices: int, capacity: int,
                     peer_cost: float) -> tuple[str, Placement]:
    """The Trainers' placement for ``strategy`` (``replicate``, ``algorithm1`` or ``auto``).

    ``algorithm1`` runs :func:`clique_placement` with Eq. 7's ``α = min(peer_cost, 1)``
    (``C_gpu >= C_cpu`` never replaces a row, i.e. Rule 1). ``auto`` builds both candidates and
    keeps the one with the lower :func:`expected_cost` (ties: ``replicate``), so it follows the
    cost model and the device count: one device, or ``peer_cost >= 1`` (no fast link), gives
    Rule 1; otherwise each replacement Algorithm 1 makes lowers every device's cost (Eq. 7), and
    Rule 2 wins as soon as it replaces anything.

    Returns:
        ``(name, placement)`` with ``name`` the strategy actually used (never ``auto``).
    """
    if strategy not in PLACEMENTS:
        raise ValueError(f"strategy must be one of {', '.join(PLACEMENTS)}, got {strategy!r}")
    if not float(peer_cost) >= 0.0:
        raise ValueError(f"peer_cost must be >= 0, got {peer_cost!r}")
    rep = replicate_placement(hotness, num_devices, capacity)
    if strategy == "replicate":
        return "replicate", rep
    spread = clique_placement(hotness, num_devices, capacity, min(float(peer_cost), 1.0))
    if strategy == "algorithm1":
        return "algorithm1", spread
    if expected_cost(spread, hotness, peer_cost) < expected_cost(rep, hotness, peer_cost):
        return "algorithm1", spread
    return "replicate", rep


def job_placement(hotness: torch.Tensor, num_devices: int, trainers: Sequence[int],
                  capacity: int, standbys: Sequence[int] = (), standby_capacity: int = 0,
                  strategy: str = "replicate", peer_cost: float = 1.0
                  ) -> tuple[str, Placement]:
    """The cached rows of every device of a job, as one :class:`Placement` over its devices.

    The devices in ``trainers`` share the placement :func:`choose_placement` returns for
    ``strategy`` (``capacity`` rows each). A standby Trainer's device (``standbys``) also holds
    the topology, so its budget ``standby_capacity`` is smaller than the Trainers'; it caches
    its own hottest rows (Rule 1 for a lone device) and reads the rest from the Trainers'
    buffers or the host like any group member. Other devices (a Sampler without a standby)
    cache nothing.

    Args:
        hotness: ``(N,)`` hotness map (the sampling-probability estimate).
        num_devices: N_g, the job's devices; device ``d`` is bit ``d`` of the holder map.
        trainers: device indices of the Trainers.
        capacity: rows per Trainer (``⌊α N⌋``).
        standbys: device indices of the standby Trainers.
        standby_capacity: rows per standby Trainer.
        strategy: ``replicate``, ``algorithm1`` or ``auto``.
        peer_cost: ``C_gpu / C_cpu`` of Eq. 3 / Eq. 7.

    Returns:
        ``(name, placement)``: the strategy used for the Trainers and the placement over all
        ``num_devices`` devices.
    """
    _check_devices(num_devices, capacity)
    if strategy not in PLACEMENTS:
        raise ValueError(f"strategy must be one of {', '.join(PLACEMENTS)}, got {strategy!r}")
    if not isinstance(standby_capacity, int) or standby_capacity < 0:
        raise ValueError(f"standby_capacity must be a non-negative int, got "
                         f"{standby_capacity!r}")
    roles = list(trainers) + list(standbys)
    if len(set(roles)) != len(roles) or any(not 0 <= d < num_devices for d in roles):
        raise ValueError(f"trainers {list(trainers)} and standbys {list(standbys)} must be "
                         f"distinct devices in [0, {num_devices})")
    v = hot_order(hotness).cpu()
    empty = v[:0]
    buffers = [empty for _ in range(num_devices)]
    name = strategy if strategy != "auto" else "replicate"
    if trainers:
        name, group = choose_placement(strategy, hotness, len(trainers), capacity, peer_cost)
        for d, b in zip(trainers, group.buffers):
            buffers[d] = b
    for d in standbys:
        buffers[d] = v[:min(standby_capacity, v.numel())].clone()
    return name, Placement(buffers, int(v.numel()))

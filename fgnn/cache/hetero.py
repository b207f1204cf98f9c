"""A typed feature cache: PreSC hotness per node type and one byte budget across the types.

FGNN's cache (§6.1, :mod:`fgnn.cache`) ranks the vertices of one type by a hotness map and keeps
the top ``α|V|`` rows. With node types the rows differ in width (a paper has 128 floats, an
author 16, a type without features -- learned embeddings -- none), so a row count is no longer
the budget: bytes are. This module keeps the pieces of :mod:`fgnn.cache` and adds the typed step:

* :func:`hetero_presample_counts` / :func:`hetero_presc_hotness` -- PreSC#K (FGNN §6.3) over
  :class:`~fgnn.sampling.hetero.HeteroKHop` samples: the visit count of every ``(type, local
  id)``, i.e. how many mini-batches' ``input_nodes[type]`` hold the node.
* :func:`choose_cached_rows` -- which rows to cache under one byte budget. ``split="global"``
  (the default) ranks every row of every type with features by *visits per byte*
  (``hotness / row_bytes``; ties: node-type order, then the smaller id) and walks that order,
  taking each row that still fits in what is left of the budget. A cached row of type ``t``
  turns ``hotness`` row reads into hits for ``row_bytes[t]`` bytes of cache, so visits per byte
  is the hits a cached byte buys: the walk is the greedy solution of the knapsack that
  maximises the (row) hit rate under the budget. Host *bytes* saved per cached byte are the
  raw visits instead: ``split="global-bytes"`` walks all rows by descending ``hotness``, which
  maximises the bytes served from the cache (the host traffic saved). The two orders agree
  within a type and differ only across types of different widths: a narrow type's rows buy
  more hits, a wide type's rows save more bytes (docs/benchmarks.md measures both).
  ``split="even"`` is the baseline that gives each type with features ``budget // types``
  bytes and its own hottest rows.
* :class:`HeteroFeatureStore` -- one :class:`~fgnn.cache.feature_store.FeatureStore` per type
  with features, over the chosen rows: :meth:`~HeteroFeatureStore.extract` returns a typed
  sample's inputs per type and advances per-type hit/miss counters
  (:class:`~fgnn.cache.feature_store.TierStats`).

A type without features takes no cache space, is never counted, and its ``extract`` entry is its
``input_nodes`` (the ids a learned ``nn.Embedding`` reads, as
:func:`fgnn.models.hetero_sage.hetero_inputs` gives them).
"""

from __future__ import annotations

from typing import Mapping, Optional

import numpy as np
import torch

from fgnn.cache.feature_store import FeatureCache, FeatureStore, TierStats, fill_rows
from fgnn.graph.hetero import HeteroGraph, row_bytes_of
from fgnn.sampling.base import Sample
from fgnn.sampling.hetero import HeteroKHop

__all__ = ["SPLITS", "hetero_presample_counts", "hetero_presc_hotness", "choose_cached_rows",
           "feature_bytes", "HeteroFeatureStore"]

#: How :func:`choose_cached_rows` shares the budget between types.
SPLITS = ("global", "global-bytes", "even")


def _check_train(train_idx: torch.Tensor, seed_type: str, n: int) -> torch.Tensor:
    t = torch.as_tensor(train_idx)
    if t.dtype == torch.bool:
        if t.numel() != n:
            raise ValueError(f"train_idx mask has length {t.numel()}, expected "
                             f"num_nodes[{seed_type!r}]={n}")
        t = torch.nonzero(t).flatten()
    if t.dim() != 1 or t.is_floating_point() or t.numel() == 0:
        raise ValueError(f"train_idx must be a non-empty 1-D integer tensor of "
                         f"{seed_type!r} ids, got dtype {t.dtype} and shape {tuple(t.shape)}")
    t = t.long()
    if int(t.min()) < 0 or int(t.max()) >= n:
        bad = int(t.min()) if int(t.min()) < 0 else int(t.max())
        raise ValueError(f"train_idx holds id {bad}, outside num_nodes[{seed_type!r}]={n}")
    return t


def hetero_presample_counts(graph: HeteroGraph, sampler: HeteroKHop, seed_type: str,
                            train_idx: torch.Tensor, *, epochs: int = 1,
                            batch_size: int = 8000,
                            generator: Optional[torch.Generator] = None
                            ) -> dict[str, torch.Tensor]:
    """Run the typed sampler over the training seeds and count visits per ``(type, id)``.

    Each epoch shuffles ``train_idx`` (ids or an ``(N,)`` mask of ``seed_type``), cuts it into
    mini-batches of ``batch_size`` seeds, samples each, and adds one to ``counts[t][v]`` for
    every mini-batch whose ``input_nodes[t]`` holds ``v`` (no repeats within a batch: the rows of
    ``v`` the Extract stage would load), as :func:`fgnn.cache.hotness.presample_counts` does for
    one type.

    Returns:
        node type -> ``(num_nodes[t],)`` float32 summed visit counts (every type, featureless
        ones included).

    Raises:
        ValueError: on ``epochs`` or ``batch_size`` below 1, an unknown ``seed_type`` or bad
            ``train_idx``.
    """
    if epochs < 1 or batch_size < 1:
        raise ValueError(f"epochs and batch_size must be >= 1, got {epochs}, {batch_size}")
    if seed_type not in graph.num_nodes:
        raise ValueError(f"seed_type {seed_type!r} is not a node type (types: "
                         f"{graph.node_types})")
    train = _check_train(train_idx, seed_type, graph.num_nodes[seed_type])
    counts = {t: torch.zeros(n, dtype=torch.float32) for t, n in graph.num_nodes.items()}
    for _ in range(epochs):
        order = train[torch.randperm(train.numel(), generator=generator)]
        for seeds in torch.split(order, batch_size):
            sample = sampler.sample_type(graph, seed_type, seeds, generator)
            for t, ids in sample.input_nodes.items():
                counts[t].index_add_(0, ids.long(), torch.ones(ids.numel()))
    return counts


def hetero_presc_hotness(graph: HeteroGraph, sampler: HeteroKHop, seed_type: str,
                         train_idx: torch.Tensor, *, epochs: int = 1, batch_size: int = 8000,
                         generator: Optional[torch.Generator] = None
                         ) -> dict[str, torch.Tensor]:
    """PreSC#K per node type: :func:`hetero_presample_counts` averaged over ``K = epochs``."""
    counts = hetero_presample_counts(graph, sampler, seed_type, train_idx, epochs=epochs,
                                     batch_size=batch_size, generator=generator)
    return {t: c / float(epochs) for t, c in counts.items()}


def feature_bytes(graph: HeteroGraph) -> int:
    """Bytes of all feature rows of ``graph`` (a budget of ``α`` times this caches a share
    ``α`` of them, the typed analogue of FGNN's cache ratio)."""
    rb = row_bytes_of(graph)
    return sum(rb[t] * graph.num_nodes[t] for t in graph.node_types)


def _check_choice_inputs(hotness: Mapping[str, torch.Tensor], row_bytes: Mapping[str, int],
                         budget_bytes: int, split: str) -> dict[str, torch.Tensor]:
    if isinstance(budget_bytes, bool) or not isinstance(budget_bytes, (int, np.integer)) \
            or budget_bytes < 0:
        raise ValueError(f"budget_bytes must be a non-negative int, got {budget_bytes!r}")
    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
    out = {}
    for t, b in row_bytes.items():
        if isinstance(b, bool) or not isinstance(b, (int, np.integer)) or b < 0:
            raise ValueError(f"row_bytes[{t!r}] must be a non-negative int, got {b!r}")
        if t not in hotness:
            raise ValueError(f"hotness lacks node type {t!r} (types: {list(hotness)})")
        h = torch.as_tensor(hotness[t]).to(torch.float64).cpu()
        if h.dim() != 1 or bool(torch.isnan(h).any()):
            raise ValueError(f"hotness[{t!r}] must be a 1-D tensor without NaN, got shape "
                             f"{tuple(h.shape)}")
        out[t] = h
    return out


def _take_fitting(width: np.ndarray, budget: int) -> np.ndarray:
    """Positions of ``width`` (rows in rank order) taken by the walk "take each row that still
    fits": vectorised by prefix, since once a row of width ``w`` does not fit, no later row of
    width ``>= w`` does (what is left only shrinks); one round per distinct width at most."""
    pos = np.arange(width.size)
    taken, left = [], int(budget)
    while pos.size:
        cum = np.cumsum(width[pos])
        k = int(np.searchsorted(cum, left, side="right"))
        taken.append(pos[:k])
        if k:
            left -= int(cum[k - 1])
        rest = pos[k:]
        pos = rest[width[rest] <= left]
    return np.concatenate(taken) if taken else pos


def choose_cached_rows(hotness: Mapping[str, torch.Tensor], row_bytes: Mapping[str, int],
                       budget_bytes: int, split: str = "global") -> dict[str, torch.Tensor]:
    """The rows to cache per node type under one byte budget.

    Args:
        hotness: node type -> ``(num_nodes[t],)`` hotness (e.g. :func:`hetero_presc_hotness`).
        row_bytes: node type -> bytes of one row (:func:`row_bytes_of`); a type with 0 (no
            features) gets nothing. The types and their order are this mapping's.
        budget_bytes: bytes of all cached rows together.
        split: ``"global"``: walk every row by descending ``hotness / row_bytes`` (ties:
            ``row_bytes`` order of the type, then the smaller id), taking each row that still
            fits (most row hits); ``"global-bytes"``: the same walk by descending ``hotness``
            (most bytes hit); ``"even"``: each type with features gets
            ``budget_bytes // types`` bytes and its hottest rows (ties: smaller id).

    Returns:
        node type (with features) -> ``(C_t,)`` int64 ids in walk order (hottest first);
        their bytes sum to at most ``budget_bytes``.

    Raises:
        ValueError: on a negative budget, an unknown ``split``, a type missing from
            ``hotness`` or a hotness that is not 1-D or holds NaN.
    """
    hot = _check_choice_inputs(hotness, row_bytes, budget_bytes, split)
    typed = [t for t, b in row_bytes.items() if int(b) > 0]
    if not typed:
        return {}
    if split == "even":
        share = int(budget_bytes) // len(typed)
        return {t: torch.argsort(hot[t], descending=True, stable=True)[
            :min(hot[t].numel(), share // int(row_bytes[t]))] for t in typed}
    per = 1.0 if split == "global-bytes" else None
    dens = np.concatenate([hot[t].numpy() / (per or float(row_bytes[t])) for t in typed])
    tix = np.concatenate([np.full(hot[t].numel(), i) for i, t in enumerate(typed)])
    ids = np.concatenate([np.arange(hot[t].numel()) for t in typed])
    order = np.lexsort((ids, tix, -dens))  # last key first: density desc, type, id
    width = np.array([int(row_bytes[t]) for t in typed], dtype=np.int64)[tix[order]]
    chosen = order[np.sort(_take_fitting(width, int(budget_bytes)))]  # in rank order
    return {t: torch.from_numpy(ids[chosen[tix[chosen] == i]].astype(np.int64))
            for i, t in enumerate(typed)}


class HeteroFeatureStore:
    """Per-type feature stores over the rows one byte budget caches; typed extraction.

    Args:
        features: node type -> ``(num_nodes[t], F_t)`` host features (types without features
            are left out).
        cached: node type -> ids to cache on ``device`` (:func:`choose_cached_rows`); a type
            left out caches nothing.
        device: where cached and extracted rows live.

    Attributes:
        stores: node type -> its :class:`~fgnn.cache.feature_store.FeatureStore`.
        budget_bytes: the budget the rows were chosen under (``None`` when built directly).

    Raises:
        ValueError: on cached ids of a type without features, or ids outside the type.
    """

    def __init__(self, features: Mapping[str, torch.Tensor], cached: Mapping[str, torch.Tensor],
                 device: torch.device | str = "cpu") -> None:
        for t in cached:
            if t not in features:
                raise ValueError(f"cached names node type {t!r}, which has no features (types "
                                 f"with features: {list(features)})")
        self.device = torch.device(device)
        self.budget_bytes: Optional[int] = None
        self.stores: dict[str, FeatureStore] = {}
        self._caches: dict[str, torch.Tensor] = {}
        for t, x in features.items():
            ids = torch.as_tensor(cached.get(t, torch.empty(0, dtype=torch.int64))).long()
            self.stores[t] = self._store(t, x, ids)
            self._caches[t] = ids

    def _store(self, t: str, x: torch.Tensor, ids: torch.Tensor) -> FeatureStore:
        """The one-device store of type ``t`` over rows ``ids`` of ``x``."""
        if ids.dim() != 1 or torch.unique(ids).numel() != ids.numel():
            raise ValueError(f"cached[{t!r}] must be 1-D ids without repeats, got shape "
                             f"{tuple(ids.shape)}")
        cache = None
        if ids.numel():
            try:
                rows = fill_rows(x, ids, self.device)
            except ValueError as exc:
                raise ValueError(f"cached[{t!r}]: {exc}") from None
            cache = FeatureCache(ids, rows)
        return FeatureStore.single(x, cache, self.device)

    @classmethod
    def build(cls, graph: HeteroGraph, hotness: Mapping[str, torch.Tensor], budget_bytes: int,
              split: str = "global", device: torch.device | str = "cpu"
              ) -> "HeteroFeatureStore":
        """Choose the rows of ``graph.features`` under ``budget_bytes``
        (:func:`choose_cached_rows` with ``split``) and cache them on ``device``."""
        cached = choose_cached_rows(hotness, row_bytes_of(graph), budget_bytes, split)
        store = cls(graph.features, cached, device)
        store.budget_bytes = int(budget_bytes)
        return store

    # ------------------------------------------------------------------ queries
    def cached_ids(self, ntype: str) -> torch.Tensor:
        """``(C_t,)`` int64 cached ids of ``ntype`` (empty for a type without features)."""
        ids = self._caches.get(ntype)
        return torch.empty(0, dtype=torch.int64) if ids is None else ids

    def cache_bytes(self) -> dict[str, int]:
        """Bytes of cached rows per type with features."""
        return {t: int(self.cached_ids(t).numel()) * s.row_bytes for t, s in self.stores.items()}

    @property
    def nbytes(self) -> int:
        """Bytes of all cached rows."""
        return sum(self.cache_bytes().values())

    # ------------------------------------------------------------------ extraction
    def extract(self, sample: Sample) -> dict[str, torch.Tensor]:
        """The model inputs of ``sample``: ``(M_t, F_t)`` rows of ``input_nodes[t]`` (in order)
        for a type with features, the ``(M_t,)`` ids themselves for one without (learned
        embeddings). Advances the per-type counters of :meth:`stats`."""
        out = {}
        for t, ids in sample.input_nodes.items():
            store = self.stores.get(t)
            out[t] = ids.to(self.device) if store is None else store.gather(ids)
        return out

    def count(self, sample: Sample) -> None:
        """Advance the counters exactly as :meth:`extract` would, moving no row."""
        for t, ids in sample.input_nodes.items():
            if t in self.stores:
                self.stores[t].count(ids)

    def stats(self) -> dict[str, TierStats]:
        """Per type with features: rows served from the cache (``hits``) and from the host
        (``misses``) since the last :meth:`reset_stats`."""
        return {t: s.stats for t, s in self.stores.items()}

    def total_stats(self) -> TierStats:
        """The per-type counters summed (rows and bytes)."""
        tot = TierStats()
        for s in self.stats().values():
            tot.hits += s.hits
            tot.peer += s.peer
            tot.misses += s.misses
            for k, v in s.bytes.items():
                tot.bytes[k] += v
        return tot

    def reset_stats(self) -> dict[str, TierStats]:
        """Start new counters; returns the finished ones per type."""
        return {t: s.reset_stats() for t, s in self.stores.items()}

"""Homogeneous and typed graphs inside the executors (internal): the one place the executors
tell the two apart (:func:`graph_kind`). Everything else calls the kind it was handed:

* the topology's payload for the object store and its rebuild on a Sampler's device,
* the feature payload (one matrix, a memory-mapped file, or one matrix per node type),
* a Trainer's feature store and its Extract (hits and misses, per node type on a typed graph).

What differs in the tasks (seeds, samples, losses, scores) is :mod:`fgnn.tasks`'.
"""

from __future__ import annotations

from typing import Any

import torch

from fgnn.cache.feature_store import FeatureStore
from fgnn.executors import typed as _typed
from fgnn.executors.common import features_payload, graph_from_payload, graph_payload
from fgnn.executors.transport import tensor_from
from fgnn.graph import CSRGraph
from fgnn.data.dataset_hetero import HeteroDataset
from fgnn.graph.hetero import HeteroGraph
from fgnn.sampling.hetero import HeteroKHop
from fgnn.sampling import build_sampler
from fgnn.sampling.base import Sample

__all__ = ["GraphKind", "HOMOGENEOUS", "TYPED", "graph_kind", "build_store"]


def build_store(features: Any, placement: Any, device_index: int,
                device: str = "cpu", h2d: Any = None, alloc: Any = None,
                holders: Any = None, own: Any = None) -> Any:
    """A Trainer's feature store: the rows ``placement`` puts on device ``device_index``
    cached on ``device`` (FGNN §6.1 ``load_cache``) in a buffer ``alloc`` makes (shareable:
    :class:`~fgnn.executors.peers.TrainerPeers`), rows other devices cache in the peer tier
    (served from the host copy, counted as peer reads, until the peers' buffers are opened
    into it), the rest read from host memory. ``placement=None``: no cache. ``h2d``: the copy
    stream's upload (pinned, non-blocking), which every upload of the store's ``gather`` goes
    through. ``holders``: the placement's holder bits as the host's processes share them (the
    runtime's cache map in the object store, read in place), else computed here. ``own``: the
    rows of this device's share, already filled (another Trainer's replica), else filled here."""
    if placement is None:
        return FeatureStore.single(features, None, device, h2d)
    return FeatureStore.from_placement(features, placement, int(device_index), device=device,
                                       peers_from_host=True, h2d=h2d, alloc=alloc,
                                       holders=None if holders is None else tensor_from(holders),
                                       own=own)


class GraphKind:
    """A homogeneous graph: one CSR, one feature matrix, the placement's feature store."""

    typed = False

    def graph_payload(self, graph: CSRGraph) -> Any:
        """Numpy arrays of the topology."""
        return graph_payload(graph)

    def graph_from_payload(self, payload: Any, device: torch.device) -> Any:
        """The topology of :meth:`graph_payload` on ``device``."""
        return graph_from_payload(payload, device)

    def features_payload(self, dataset: Any) -> Any:
        """The feature matrix (a file descriptor for an on-disk matrix)."""
        return features_payload(dataset.features)

    def build_sampler(self, config: Any, dataset: Any) -> Any:
        """The job's sampler of ``config.sampler`` (:func:`fgnn.sampling.build_sampler`)."""
        return build_sampler(config.sampler)

    def new_visits(self, graph: Any, device: torch.device) -> Any:
        """Zeroed PreSC visit counts."""
        return torch.zeros(graph.num_nodes, dtype=torch.int32, device=device)

    def build_store(self, host: Any, placement: Any, device_index: int, device: str,
                    h2d: Any, alloc: Any = None, holders: Any = None, own: Any = None) -> Any:
        """The Trainer's :class:`~fgnn.cache.feature_store.FeatureStore` (:func:`build_store`)."""
        return build_store(host, placement, device_index, device, h2d, alloc, holders, own)

    def extract(self, store: Any, sample: Sample) -> tuple[Any, dict[str, Any]]:
        """The sample's input rows split by its marks, and the counters of its
        :class:`~fgnn.executors.task_record.TaskRecord` (field name -> value)."""
        x = store.gather(sample.input_nodes, sample.cached)
        st = store.reset_stats()
        return x, {"hits": st.hits + st.peer, "misses": st.misses,
                   "host_bytes": st.bytes["host"],
                   "tier_rows": {"local": st.hits, "peer": st.peer, "host": st.misses,
                                 "peer_host": st.peer_host},
                   "tier_bytes": {"local": st.bytes["device"], "peer": st.bytes["peer"],
                                  "host": st.bytes["host"]}}

    def cached_rows(self, store: Any) -> int:
        """Rows in this device's own cache."""
        bufs = store.buffers
        return int(bufs[store.local].shape[0]) if bufs else 0

    def store_source(self, store: Any) -> str:
        """The host tier's class name (the report's ``host_info``)."""
        return type(store.host).__name__


class TypedKind(GraphKind):
    """A typed graph: one CSR per relation, one feature matrix per node type, the typed store
    (:mod:`fgnn.executors.typed`)."""

    typed = True

    def graph_payload(self, graph: HeteroGraph) -> Any:  # noqa: D102
        return _typed.graph_payload(graph)

    def graph_from_payload(self, payload: Any, device: torch.device) -> Any:  # noqa: D102
        return _typed.graph_from_payload(payload, device)

    def features_payload(self, dataset: Any) -> Any:  # noqa: D102
        return _typed.features_payload(dataset)

    def build_sampler(self, config: Any, dataset: Any) -> Any:
        """The typed sampler: ``sampler.fanouts`` for every relation, replaced for those
        ``sampler.relation_fanouts`` names."""
        return HeteroKHop(dataset.resolve_fanouts(config.sampler.fanouts,
                                                  config.sampler.relation_fanouts))

    def new_visits(self, graph: Any, device: torch.device) -> Any:  # noqa: D102
        return _typed.new_visits(graph, device)

    def build_store(self, host: Any, placement: Any, device_index: int, device: str,
                    h2d: Any, alloc: Any = None, holders: Any = None, own: Any = None
                    ) -> Any:  # noqa: D102 - replicated: no peers
        return _typed.build_store(host, placement, device)

    def extract(self, store: Any, sample: Sample) -> tuple[Any, dict[str, Any]]:  # noqa: D102
        return _typed.extract_typed(store, sample)

    def cached_rows(self, store: Any) -> int:  # noqa: D102
        return sum(int(store.cached_ids(t).numel()) for t in store.stores)

    def store_source(self, store: Any) -> str:  # noqa: D102
        return type(store).__name__


HOMOGENEOUS, TYPED = GraphKind(), TypedKind()


def graph_kind(data: Any) -> GraphKind:
    """The kind of a dataset, graph, topology payload or feature payload: the one test of the
    graph kind in the executors."""
    typed = isinstance(data, (HeteroDataset, HeteroGraph)) or (
        isinstance(data, dict) and "indptr" not in data)  # a typed payload: per relation/type
    return TYPED if typed else HOMOGENEOUS

"""fgnn: a factored multi-GPU runtime for sample-based GNN training.

The public API in one place: the graph and dataset containers, the sampler interface with the
built-in samplers, the models, configs, :class:`Job`, which runs a whole training job, model files
(:func:`save_model`, :func:`load_model`) and layer-wise full-graph inference
(:func:`layerwise_inference`); the typed twins (:class:`HeteroGraph`, :class:`HeteroDataset`,
:func:`from_pyg_hetero`, :class:`HeteroKHop`, :class:`HeteroFeatureStore`, ...).

The names are imported on first use (PEP 562), so a process that needs only a light module (the
global queue's actor, the argument store) does not pay for importing torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fgnn._lazy import lazy_exports

__version__ = "0.1.0"

#: public name -> the module that defines it
_EXPORTS = {
    "CSRGraph": "fgnn.graph",
    "Dataset": "fgnn.data", "load_dataset": "fgnn.data",
    "Block": "fgnn.sampling", "Sample": "fgnn.sampling", "Sampler": "fgnn.sampling",
    "KHop": "fgnn.sampling", "RandomWalk": "fgnn.sampling",
    "LocalityAwareKHop": "fgnn.sampling", "build_sampler": "fgnn.sampling",
    "GCN": "fgnn.models", "GraphSAGE": "fgnn.models", "PinSAGE": "fgnn.models",
    "build_model": "fgnn.models",
    "Job": "fgnn.job", "JobConfig": "fgnn.config", "RunResult": "fgnn.monitor.stats",
    "SavedModel": "fgnn.model_file", "save_model": "fgnn.model_file",
    "load_model": "fgnn.model_file", "layerwise_inference": "fgnn.inference",
    # typed graphs: each typed piece lives beside its homogeneous twin
    "EdgeType": "fgnn.graph.hetero", "HeteroGraph": "fgnn.graph.hetero",
    "format_edge_type": "fgnn.graph.hetero", "row_bytes_of": "fgnn.graph.hetero",
    "HeteroDataset": "fgnn.data.dataset_hetero",
    "from_pyg_hetero": "fgnn.data.convert_hetero", "from_dgl_hetero": "fgnn.data.convert_hetero",
    "HeteroKHop": "fgnn.sampling.hetero", "HeteroBlock": "fgnn.sampling.base",
    "HeteroFeatureStore": "fgnn.cache.hetero", "choose_cached_rows": "fgnn.cache.hetero",
    "hetero_presc_hotness": "fgnn.cache.hetero",
}

__all__ = [
    "CSRGraph", "Dataset", "load_dataset",
    "Block", "Sample", "Sampler", "KHop", "RandomWalk", "LocalityAwareKHop", "build_sampler",
    "GCN", "GraphSAGE", "PinSAGE", "build_model",
    "Job", "JobConfig", "RunResult",
    "SavedModel", "save_model", "load_model", "layerwise_inference",
    "EdgeType", "HeteroGraph", "format_edge_type", "row_bytes_of", "HeteroDataset",
    "from_pyg_hetero", "from_dgl_hetero", "HeteroKHop", "HeteroBlock", "HeteroFeatureStore",
    "choose_cached_rows", "hetero_presc_hotness",
    "__version__",
]

if TYPE_CHECKING:
    from fgnn.cache.hetero import HeteroFeatureStore, choose_cached_rows, hetero_presc_hotness
    from fgnn.config import JobConfig
    from fgnn.data import Dataset, load_dataset
    from fgnn.data.convert_hetero import from_dgl_hetero, from_pyg_hetero
    from fgnn.data.dataset_hetero import HeteroDataset
    from fgnn.graph import CSRGraph
    from fgnn.graph.hetero import EdgeType, HeteroGraph, format_edge_type, row_bytes_of
    from fgnn.inference import layerwise_inference
    from fgnn.job import Job
    from fgnn.model_file import SavedModel, load_model, save_model
    from fgnn.models import GCN, GraphSAGE, PinSAGE, build_model
    from fgnn.monitor.stats import RunResult
    from fgnn.sampling import (Block, KHop, LocalityAwareKHop, RandomWalk, Sample, Sampler,
                               build_sampler)
    from fgnn.sampling.base import HeteroBlock
    from fgnn.sampling.hetero import HeteroKHop


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)

"""fgnn: a factored multi-GPU runtime for sample-based GNN training.

The public API in one place: the graph and dataset containers, the sampler interface with the
built-in samplers, the models, configs, :class:`Job`, which runs a whole training job, model files
(:func:`save_model`, :func:`load_model`) and layer-wise full-graph inference
(:func:`layerwise_inference`).
"""

from fgnn.config import JobConfig
from fgnn.data import Dataset, load_dataset
from fgnn.graph import CSRGraph
from fgnn.inference import layerwise_inference
from fgnn.job import Job
from fgnn.model_file import SavedModel, load_model, save_model
from fgnn.models import GCN, GraphSAGE, PinSAGE, build_model
from fgnn.monitor.stats import RunResult
from fgnn.sampling import (Block, KHop, LocalityAwareKHop, RandomWalk, Sample, Sampler,
                           build_sampler)

__version__ = "0.1.0"

__all__ = [
    "CSRGraph", "Dataset", "load_dataset",
    "Block", "Sample", "Sampler", "KHop", "RandomWalk", "LocalityAwareKHop", "build_sampler",
    "GCN", "GraphSAGE", "PinSAGE", "build_model",
    "Job", "JobConfig", "RunResult",
    "SavedModel", "save_model", "load_model", "layerwise_inference",
    "__version__",
]

"""fgnn: a factored multi-GPU runtime for sample-based GNN training."""

from fgnn.data import Dataset
from fgnn.graph import CSRGraph
from fgnn.sampling import Block, Sample, Sampler

__version__ = "0.1.0"

__all__ = ["CSRGraph", "Dataset", "Block", "Sample", "Sampler", "__version__"]

"""fgnn: a factored multi-GPU runtime for sample-based GNN training."""

from fgnn.data import Dataset
from fgnn.graph import CSRGraph
from fgnn.sampling import Block, Sample, Sampler
from fgnn.config import JobConfig
from fgnn.job import Job
from fgnn.monitor.stats import RunResult

__version__ = "0.1.0"

__all__ = ["CSRGraph", "Dataset", "Block", "Sample", "Sampler", "Job", "JobConfig", "RunResult",
           "__version__"]

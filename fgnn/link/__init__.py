"""Link prediction's pieces: edge splits, negatives, edge-seed sampling with seed edges excluded,
decoders, losses, metrics and a single-process training loop; on typed graphs the target
relation, its split and negatives (:mod:`fgnn.link.hetero`). The tasks are in :mod:`fgnn.tasks`
(:mod:`fgnn.tasks.link`, :mod:`fgnn.tasks.link_typed`)."""

from fgnn.link.decoders import DotProductDecoder, MLPDecoder, build_decoder
from fgnn.link.edges import EdgeSet
from fgnn.link.metrics import average_precision, hits_at_k, mrr, recall_at_k, roc_auc
from fgnn.link.negatives import Negatives, sample_negative_pairs, uniform_negatives
from fgnn.link.sampler import ExcludingKHop, LinkNeighborSampler, LinkSample
from fgnn.link.split import LinkSplit, random_link_split
from fgnn.link.training import LinkHistory, embed_all, evaluate_link, fit_link
from fgnn.models.losses import bce_loss, max_margin_loss

__all__ = [
    "DotProductDecoder", "MLPDecoder", "build_decoder", "EdgeSet", "bce_loss", "max_margin_loss",
    "average_precision", "hits_at_k", "mrr", "recall_at_k", "roc_auc", "Negatives",
    "sample_negative_pairs", "uniform_negatives", "ExcludingKHop", "LinkNeighborSampler",
    "LinkSample", "LinkSplit", "random_link_split", "LinkHistory", "embed_all", "evaluate_link",
    "fit_link",
]

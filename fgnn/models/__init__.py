"""GNN models that train on sampled blocks: GCN, GraphSAGE and PinSAGE (FGNN §7.1), and GAT.

The model contract. A model is any ``torch.nn.Module`` whose ``forward`` takes

    ``forward(blocks: list[Block], x: Tensor) -> Tensor``

* ``blocks`` -- ``sample.blocks`` of a :class:`~fgnn.sampling.Sample`, input layer first. All
  blocks share one local numbering (positions in ``sample.input_nodes``, seeds first); each
  block's dst vertices are a prefix of its src vertices, and ``blocks[l + 1]`` reads the first
  ``blocks[l + 1].num_src`` rows of what layer ``l`` produced.
* ``x`` -- ``(M, F)`` features of ``sample.input_nodes`` in that order; the model reads the first
  ``blocks[0].num_src`` rows (``x`` may have more).
* returns ``(len(sample.seeds), C)`` logits, row ``i`` for ``sample.seeds[i]``.

A user-defined model with this signature plugs into :mod:`fgnn.training` and the runtime's
trainers unchanged. Optional attributes the runtime reads when present: ``num_layers`` (checked
against the sampler's) and ``in_dim``. ``Block.weights`` (1/q importance weights of
locality-aware sampling, visit counts of random walks) should be used as edge weights of the
aggregation; :mod:`fgnn.models.aggregate` has the helpers the built-in models use. A block also
gives PyG's view, ``block.edge_index`` (``(2, E)``: senders, then receivers) and ``block.size``
(``(num_src, num_dst)``), so a PyG layer runs on it as it is:
``conv((h[:b.num_src], h[:b.num_dst]), b.edge_index, size=b.size)``.

Example::

    from fgnn.config import ModelConfig
    from fgnn.models import build_model

    model = build_model(ModelConfig("sage", hidden=256), in_dim=100, num_classes=47,
                        num_layers=2)
    logits = model(sample.blocks, features[sample.input_nodes])
"""

from __future__ import annotations

from torch import nn

from fgnn.config import ModelConfig
from fgnn.models.aggregate import edge_weight_sum, weighted_mean, weighted_sum
from fgnn.models.gat import GAT, GATConv
from fgnn.models.gcn import GCN, GCNConv
from fgnn.models.pinsage import PinSAGE, PinSAGEConv
from fgnn.models.sage import GraphSAGE, SAGEConv

__all__ = [
    "GCN",
    "GCNConv",
    "GAT",
    "GATConv",
    "GraphSAGE",
    "SAGEConv",
    "PinSAGE",
    "PinSAGEConv",
    "MODEL_CLASSES",
    "build_model",
    "weighted_sum",
    "weighted_mean",
    "edge_weight_sum",
]

#: ``ModelConfig.name`` -> model class.
MODEL_CLASSES: dict[str, type[nn.Module]] = {"gcn": GCN, "sage": GraphSAGE, "pinsage": PinSAGE,
                                             "gat": GAT}


def build_model(cfg: ModelConfig, in_dim: int, num_classes: int, num_layers: int) -> nn.Module:
    """Build the model a :class:`~fgnn.config.ModelConfig` names.

    Args:
        cfg: model name, hidden size, dropout and input dropout.
        in_dim: feature dimension F of the dataset.
        num_classes: number of classes C.
        num_layers: number of layers, equal to the sampler's number of blocks.

    Returns:
        A :class:`GCN`, :class:`GraphSAGE`, :class:`PinSAGE` or :class:`GAT` (``cfg.heads``
        heads of ``cfg.hidden`` features per hidden layer).

    Raises:
        ValueError: for an unknown ``cfg.name`` or a non-positive dimension.
    """
    if cfg.name not in MODEL_CLASSES:
        raise ValueError(f"cfg.name must be one of {', '.join(MODEL_CLASSES)}, got {cfg.name!r}")
    extra = {"heads": cfg.heads} if cfg.name == "gat" else {}
    return MODEL_CLASSES[cfg.name](in_dim, num_classes, num_layers=num_layers, hidden=cfg.hidden,
                                   dropout=cfg.dropout, input_dropout=cfg.input_dropout, **extra)

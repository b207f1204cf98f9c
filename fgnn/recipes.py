"""Training recipes: the settings a dataset and model get when the user sets nothing else.

Two recipes exist:

* ``fgnn-7.1`` -- the FGNN §7.1 defaults of :mod:`fgnn.config` (3-layer GCN with fanouts
  15, 10, 5, hidden 256, ...), for every dataset without a published recipe.
* ``kipf-welling`` -- Kipf & Welling's GCN recipe (ICLR 2017, §5.2), for the Planetoid
  datasets (``cora``, ``citeseer``, ``pubmed``) with ``--model gcn``: 2 layers, hidden 64
  (the paper uses 16; fgnn's weight decay covers both layers, and 64 holds the published
  accuracy more steadily over seeds), dropout 0.5 on the input features and between layers,
  Adam with lr 0.01 and weight decay 5e-4, 200 epochs, fanouts above every Planetoid vertex's
  degree (the full neighbourhood, the paper's full-graph propagation) and one mini-batch of the
  whole training split (the default batch of 8000 holds 140 / 120 / 60 training vertices). The
  features are row-normalised by the Planetoid loader; the test score is that of the best
  validation epoch.

A recipe is a set of values for dotted :class:`~fgnn.config.JobConfig` fields.
:func:`apply_recipe` writes them into a config except for the fields the user set, so a flag
always wins over the recipe, and records the recipe's name in ``JobConfig.recipe`` (the report
carries it).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Collection, Mapping

from fgnn.config import JobConfig

__all__ = ["Recipe", "FGNN_RECIPE", "KIPF_RECIPE", "FULL_FANOUT", "recipe_for", "apply_recipe"]

#: A fanout above the largest degree of Cora (168), CiteSeer (99) and PubMed (171): the k-hop
#: sampler keeps every neighbour of a vertex whose degree is at most its fanout.
FULL_FANOUT = 1000


@dataclass(frozen=True)
class Recipe:
    """A named set of defaults.

    Attributes:
        name: one of :data:`fgnn.config.RECIPES` (validated by ``JobConfig.recipe``).
        summary: one line for ``--help``, the job's output and the docs.
        values: dotted :class:`~fgnn.config.JobConfig` field -> value.
    """

    name: str
    summary: str
    values: Mapping[str, Any]


FGNN_RECIPE = Recipe("fgnn-7.1", "FGNN §7.1 defaults", {})

KIPF_RECIPE = Recipe(
    "kipf-welling",
    f"Kipf & Welling's GCN: 2 layers, hidden 64, dropout 0.5 (input too), lr 0.01, weight "
    f"decay 5e-4, 200 epochs, full neighbourhood (fanouts {FULL_FANOUT},{FULL_FANOUT}), one "
    f"batch of the training split",
    {
        "model.hidden": 64,
        "model.dropout": 0.5,
        "model.input_dropout": 0.5,
        "train.lr": 0.01,
        "train.weight_decay": 5e-4,
        "train.epochs": 200,
        "sampler.fanouts": (FULL_FANOUT, FULL_FANOUT),
    },
)

#: Datasets (spec kinds) whose GCN gets :data:`KIPF_RECIPE`.
_PLANETOID = ("cora", "citeseer", "pubmed")


def recipe_for(dataset: str, model: str) -> Recipe:
    """The recipe of a dataset spec and a model name: Kipf & Welling's for GCN on a Planetoid
    spec (``cora``, ``citeseer``, ``pubmed``, with or without ``:key=value`` options), the
    FGNN §7.1 defaults otherwise."""
    kind = dataset.strip().partition(":")[0].strip().lower() if isinstance(dataset, str) else ""
    return KIPF_RECIPE if model == "gcn" and kind in _PLANETOID else FGNN_RECIPE


def apply_recipe(config: JobConfig, recipe: Recipe, given: Collection[str] = ()) -> JobConfig:
    """``config`` with ``recipe``'s values in every field not in ``given``.

    Args:
        config: the job as built from flags or by hand.
        recipe: the recipe to apply (see :func:`recipe_for`).
        given: dotted fields the user set (``"model.hidden"``, ...); they keep their values.

    Returns:
        A new :class:`JobConfig` (each changed sub-config is rebuilt, so it validates itself)
        whose ``recipe`` names ``recipe``.
    """
    parts: dict[str, dict[str, Any]] = {}
    for field, value in recipe.values.items():
        if field in given:
            continue
        section, _, name = field.partition(".")
        parts.setdefault(section, {})[name] = value
    changes: dict[str, Any] = {s: dataclasses.replace(getattr(config, s), **v)
                               for s, v in parts.items()}
    return dataclasses.replace(config, recipe=recipe.name, **changes)

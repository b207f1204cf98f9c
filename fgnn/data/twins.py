"""Synthetic twins of the seeds' datasets, by name: ``pr-like``, ``tw-like``, ``pa-like``,
``uk-like``.

Each twin has the vertex and edge counts and the feature dimension of GNNLab's Table 3 (seed
003_c088540b1bbdf9a9, §7.1) and the training fraction the seeds use (PA 1.1 %, PR 8 %, TW and
UK 1 % as GNNLab did). Degrees follow the builder's Zipf law (:mod:`fgnn.data.outofcore`),
steeper for the social and web graphs (TW, UK) and flatter for the citation graph (PA); the
expected largest in-degree of PR-like is about 18 k (ogbn-products: 17.5 k). Labels are classes
planted in the features (a class centroid under noise) and in the neighbourhoods (half of the
edges join two vertices of one class), so a model learns from both.

A twin is built once by the out-of-core builder and reused from the dataset cache
(:func:`fgnn.data.outofcore.ensure_built`); its spec keys change the recipe (and so the cache
entry): ``feat_dtype`` (float32 or float16 on disk), ``seed``, the split fractions,
``homophily``, ``signal``, and ``num_nodes``/``num_edges`` to shrink a twin for a test.
"""

from __future__ import annotations

from typing import Any

from fgnn.data.outofcore import GraphRecipe

__all__ = ["TWINS", "twin_recipe", "TWIN_KEYS"]

#: name -> the recipe's fields: Table 3's sizes, the seeds' training fractions, the degree law.
TWINS: dict[str, dict[str, Any]] = {
    "pr-like": dict(num_nodes=2_449_029, num_edges=123_718_280, feat_dim=100, num_classes=47,
                    train_frac=0.08, skew=0.6, head=30.0),
    "tw-like": dict(num_nodes=41_652_230, num_edges=1_468_365_182, feat_dim=256,
                    num_classes=64, train_frac=0.01, skew=0.85, head=100.0),
    "pa-like": dict(num_nodes=111_059_956, num_edges=1_615_685_872, feat_dim=128,
                    num_classes=172, train_frac=0.011, skew=0.5, head=10.0),
    "uk-like": dict(num_nodes=77_741_046, num_edges=2_965_197_340, feat_dim=256,
                    num_classes=64, train_frac=0.01, skew=0.8, head=50.0),
}
#: Spec keys a twin takes, with their types.
TWIN_KEYS: dict[str, type] = {
    "feat_dtype": str, "seed": int, "train_frac": float, "val_frac": float, "test_frac": float,
    "homophily": float, "signal": float, "num_nodes": int, "num_edges": int,
}


def twin_recipe(name: str, **overrides: Any) -> GraphRecipe:
    """The :class:`~fgnn.data.outofcore.GraphRecipe` of twin ``name`` with ``overrides``.

    Raises:
        ValueError: an unknown twin, key or out-of-range value (naming it).
    """
    if name not in TWINS:
        raise ValueError(f"unknown twin {name!r}, expected one of {', '.join(TWINS)}")
    unknown = set(overrides) - set(TWIN_KEYS)
    if unknown:
        raise ValueError(f"twin {name!r}: unknown key {sorted(unknown)[0]!r}; known keys: "
                         f"{', '.join(sorted(TWIN_KEYS))}")
    fields = {**TWINS[name], **overrides}
    suffix = "" if fields.get("feat_dtype", "float32") == "float32" else "-fp16"
    return GraphRecipe(name=f"{name}{suffix}", **fields)

"""A synthetic typed graph with planted labels: papers, authors (no features) and fields.

Every paper has a class ``y`` in ``[0, classes)``. Its features are a weak class signal under
noise (``signal`` times the class centroid plus unit Gaussian noise), so the features alone
classify poorly and the typed neighbourhood carries the rest:

* each author has a class; a paper's ``authors_per_paper`` authors are of its class with
  probability ``homophily`` (else uniform). Authors have **no features**: the model learns an
  embedding per author;
* a paper cites ``cites_per_paper`` papers, of its class with probability ``homophily``;
* field ``f`` belongs to class ``f % classes``; a paper has one field, of its class with
  probability ``homophily``. Fields have ``field_dim`` random features.

Relations (source -> destination, row = destination): ``author-writes->paper``,
``paper-written_by->author``, ``paper-cites->paper``, ``paper-cited_by->paper``,
``field-topic_of->paper``, ``paper-has_topic->field``. The target type is ``paper``; link
prediction (``--task link``) predicts ``author-writes->paper`` by default, whose planted
structure is the class homophily (an author writes mostly papers of its own class; a dot-product
model of the classes alone reaches an AUC near 0.8). The same
arguments (``seed`` included) give the same graph, features, labels and split.
"""

from __future__ import annotations

import math

import torch

from fgnn.data.dataset import MAX_CLASSES
from fgnn.data.dataset_hetero import HeteroDataset, random_splits
from fgnn.graph.hetero import HeteroGraph

__all__ = ["typed_synthetic", "estimate_bytes", "SYNTHETIC_KEYS"]

#: ``hetero:key=value,...`` keys of the dataset spec and their defaults.
SYNTHETIC_KEYS = {"papers": 2000, "authors": 600, "fields": 16, "classes": 4, "feat_dim": 16,
                  "field_dim": 8, "authors_per_paper": 3, "cites_per_paper": 4,
                  "homophily": 0.8, "signal": 0.5, "train_frac": 0.3, "val_frac": 0.2,
                  "test_frac": 0.5, "seed": 0}


def _pick(n_draw: int, labels_of_pool: torch.Tensor, want: torch.Tensor, homophily: float,
          gen: torch.Generator) -> torch.Tensor:
    """For each entry of ``want`` (a class), a pool id: of that class with probability
    ``homophily`` (uniform within the class), else uniform over the pool."""
    pool = labels_of_pool.numel()
    uniform = torch.randint(pool, (n_draw,), generator=gen)
    order = torch.argsort(labels_of_pool, stable=True)
    counts = torch.bincount(labels_of_pool, minlength=int(want.max()) + 1)
    starts = torch.cumsum(counts, 0) - counts
    r = torch.rand(n_draw, generator=gen)
    size = counts[want].clamp(min=1)
    same = order[(starts[want] + (r * size).long().clamp(max=size - 1)).clamp(max=pool - 1)]
    keep = torch.rand(n_draw, generator=gen) < homophily
    return torch.where(keep & (counts[want] > 0), same, uniform)


def _check(params: dict) -> None:
    for k in ("papers", "authors", "fields", "classes", "feat_dim", "field_dim",
              "authors_per_paper", "cites_per_paper"):
        if int(params[k]) < 1:
            raise ValueError(f"{k} must be >= 1, got {params[k]!r}")
    if int(params["classes"]) > MAX_CLASSES:
        raise ValueError(f"classes must be at most {MAX_CLASSES} (2^24), got {params['classes']!r}")
    for k in ("homophily", "train_frac", "val_frac", "test_frac"):
        if not 0.0 <= float(params[k]) <= 1.0:
            raise ValueError(f"{k} must lie in [0, 1], got {params[k]!r}")
    if not math.isfinite(float(params["signal"])) or float(params["signal"]) < 0:
        raise ValueError(f"signal must be a finite number >= 0 (the class centroid's weight "
                         f"in the paper features), got {params['signal']!r}")
    if params["train_frac"] + params["val_frac"] + params["test_frac"] > 1.0 + 1e-9:
        raise ValueError("train_frac + val_frac + test_frac must be <= 1")


def _params(kw: dict) -> dict:
    """The keys given over the defaults, checked (ValueError naming an unknown key or an
    out-of-range value)."""
    unknown = set(kw) - set(SYNTHETIC_KEYS)
    if unknown:
        raise ValueError(f"unknown key {sorted(unknown)[0]!r}; known keys: "
                         f"{', '.join(SYNTHETIC_KEYS)}")
    p = {**SYNTHETIC_KEYS, **kw}
    _check(p)
    return p


def estimate_bytes(**kw: float) -> int:
    """Peak host bytes :func:`typed_synthetic` allocates, from the keys alone (nothing is
    generated).

    With ``n`` papers of ``F`` features and ``D = n (authors_per_paper + cites_per_paper + 1)``
    drawn edges: ``12 n F`` for the paper features (the class signal, the noise and their sum
    exist at once) plus ``360 D`` for the edges (the draws, each relation's stacked and
    de-duplicated edge index, its CSR and the sort's temporaries), plus the authors' and
    fields' few arrays. Measured peaks (resident set growth, 2026-11-27) were 0.55-0.95 of it:
    660 MiB for ``papers=400000``, 1.4 GiB for ``papers=200000,cites_per_paper=20``.

    Raises:
        ValueError: an unknown key or an out-of-range value, as :func:`typed_synthetic`.
    """
    p = _params(kw)
    n, f = int(p["papers"]), int(p["feat_dim"])
    draws = n * (int(p["authors_per_paper"]) + int(p["cites_per_paper"]) + 1)
    others = 24 * (int(p["authors"]) + int(p["fields"])) + 12 * int(p["fields"]) * int(
        p["field_dim"])
    return 12 * n * f + 360 * draws + 64 * n + others


def typed_synthetic(**kw: float) -> HeteroDataset:
    """The planted typed graph of the module docstring (keys and defaults:
    :data:`SYNTHETIC_KEYS`).

    Raises:
        ValueError: an unknown key or an out-of-range value, naming it.
    """
    p = _params(kw)
    gen = torch.Generator().manual_seed(int(p["seed"]))
    n_p, n_a, n_f, c = (int(p[k]) for k in ("papers", "authors", "fields", "classes"))
    h = float(p["homophily"])
    y = torch.randint(c, (n_p,), generator=gen)
    centroids = torch.randn(c, int(p["feat_dim"]), generator=gen)
    x_paper = float(p["signal"]) * centroids[y] + torch.randn(n_p, int(p["feat_dim"]),
                                                              generator=gen)
    author_class = torch.randint(c, (n_a,), generator=gen)
    k_a, k_c = int(p["authors_per_paper"]), int(p["cites_per_paper"])
    wp = torch.arange(n_p).repeat_interleave(k_a)
    wa = _pick(wp.numel(), author_class, y[wp], h, gen)
    cp = torch.arange(n_p).repeat_interleave(k_c)
    cq = _pick(cp.numel(), y, y[cp], h, gen)
    field_class = torch.arange(n_f) % c
    fp = torch.arange(n_p)
    ff = _pick(n_p, field_class, y, h, gen)
    ei = {("author", "writes", "paper"): _dedup(wa, wp),
          ("paper", "written_by", "author"): _dedup(wp, wa),
          ("paper", "cites", "paper"): _dedup(cq, cp),
          ("paper", "cited_by", "paper"): _dedup(cp, cq),
          ("field", "topic_of", "paper"): _dedup(ff, fp),
          ("paper", "has_topic", "field"): _dedup(fp, ff)}
    feats = {"paper": x_paper, "field": torch.randn(n_f, int(p["field_dim"]), generator=gen)}
    name = f"hetero-{n_p}p-{n_a}a-{n_f}f-s{int(p['seed'])}"
    g = HeteroGraph.from_edge_index({"paper": n_p, "author": n_a, "field": n_f}, ei, feats,
                                    y, "paper", {"name": name, "source": "synthetic",
                                                 "params": p,
                                                 "link_edge_type": "author,writes,paper"})
    fr = (float(p["train_frac"]), float(p["val_frac"]), float(p["test_frac"]))
    return HeteroDataset.from_graph(g, name, random_splits(n_p, fr, int(p["seed"]) + 1), c,
                                    check_features=False)


def _dedup(src: torch.Tensor, dst: torch.Tensor) -> torch.Tensor:
    """``(2, E)`` ``[src, dst]`` without repeated pairs."""
    return torch.unique(torch.stack([src, dst]), dim=1)

"""A typed dataset the runtime trains: a :class:`~fgnn.graph.hetero.HeteroGraph` with labels on
one target type and a train/validation/test split of that type's nodes.

:class:`HeteroDataset` is a :class:`~fgnn.data.Dataset` whose ``graph`` is the typed graph and
whose ``features`` map each node type to its matrix (a type left out has none: the model gives
it learned embeddings). ``labels`` and the splits are those of the target type, so everything
that cuts tasks from ``train_idx`` / ``val_idx`` / ``test_idx`` works unchanged; the runtime
samples, caches and trains it through :mod:`fgnn.runtime.cache_plan_typed`.

A typed graph with no labels at all (a link-prediction or recommendation graph, e.g. a PyG
``HeteroData`` of users rating items) becomes one with :meth:`HeteroDataset.unlabelled`:
``graph.labels`` stays ``None`` (``labelled`` is False), the dataset's ``labels`` are one
placeholder class per node of its first node type, and only link prediction trains it (node
classification refuses it in one line, :func:`fgnn.tasks.checks.check_typed`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Mapping, Optional

import torch

from fgnn.data.dataset import Dataset, check_finite_features, check_num_classes, split_ids
from fgnn.data.split_checks import check_split_ids
from fgnn.graph.hetero import HeteroGraph, format_edge_type, row_bytes_of

__all__ = ["HeteroDataset", "random_splits", "UNLABELLED"]

_SPLITS = ("train_idx", "val_idx", "test_idx")
#: ``meta`` key marking a dataset made by :meth:`HeteroDataset.unlabelled`
UNLABELLED = "unlabelled"


def random_splits(n: int, fracs: tuple[float, float, float], seed: int
                  ) -> dict[str, torch.Tensor]:
    """``train_idx`` / ``val_idx`` / ``test_idx`` of a seeded permutation of ``n`` ids."""
    perm = torch.randperm(n, generator=torch.Generator().manual_seed(int(seed)))
    a = int(round(fracs[0] * n))
    b = a + int(round(fracs[1] * n))
    c = min(n, b + int(round(fracs[2] * n)))
    return {"train_idx": perm[:a].sort().values, "val_idx": perm[a:b].sort().values,
            "test_idx": perm[b:c].sort().values}


@dataclass(repr=False)
class HeteroDataset(Dataset):
    """A typed graph with labels on ``graph.target_type`` (see the module docstring).

    Build one with :meth:`from_graph`. ``num_nodes`` is the target type's node count (the ids
    the splits and ``labels`` index); ``graph.num_nodes`` has every type's.
    """

    def __post_init__(self, check_features: bool = True) -> None:
        g = self.graph
        if not isinstance(g, HeteroGraph):
            raise ValueError(f"dataset {self.name!r}: a HeteroDataset needs a HeteroGraph, got "
                             f"{type(g).__name__}")
        if g.target_type is None or g.labels is None and not self.meta.get(UNLABELLED):
            raise ValueError(_no_target(self.name, g))
        n = g.num_nodes[g.target_type]
        for split in _SPLITS:
            setattr(self, split, split_ids(getattr(self, split), n,
                                           what=f"dataset {self.name!r}: {split}"))
        self.validate(check_features=check_features)

    @classmethod
    def from_graph(cls, graph: HeteroGraph, name: Optional[str] = None,
                   splits: Optional[Mapping[str, Any]] = None,
                   num_classes: Optional[int] = None,
                   fracs: tuple[float, float, float] = (0.5, 0.2, 0.3), seed: int = 0,
                   check_features: bool = True) -> "HeteroDataset":
        """A dataset over ``graph``: splits from ``splits``, else ``graph.meta["splits"]`` (what
        :func:`~fgnn.data.load_ondisk_hetero` puts there; a split left out is empty), else a
        seeded random split of the target type by ``fracs``.

        Raises:
            ValueError: one line when the graph has no labelled target type, or a split or
                label is out of range.
        """
        title = name or str(graph.meta.get("name", "hetero"))
        if graph.target_type is None or graph.labels is None:
            raise ValueError(_no_target(title, graph))
        y = graph.labels
        k = num_classes or graph.meta.get("num_classes") or (int(y.max()) + 1 if y.numel()
                                                             else 1)
        got = dict(splits or graph.meta.get("splits") or {})
        if not got:
            got = random_splits(graph.num_nodes[graph.target_type], fracs, seed)
        got = {s: got.get(s, torch.empty(0, dtype=torch.int64)) for s in _SPLITS}
        return cls(title, graph, graph.features, y, got["train_idx"], got["val_idx"],
                   got["test_idx"], int(k), dict(graph.meta), check_features)

    @property
    def target_type(self) -> str:
        """The node type the labels and splits belong to."""
        return str(self.graph.target_type)

    @property
    def num_nodes(self) -> int:
        """Nodes of the target type."""
        return self.graph.num_nodes[self.target_type]

    @property
    def num_edges(self) -> int:
        """Edges over all relations."""
        return sum(self.graph.num_edges(et) for et in self.graph.edge_types)

    @property
    def feat_dim(self) -> int:
        """Feature size of the target type (0 when it has none: learned embeddings)."""
        return int(self.graph.feat_dim(self.target_type) or 0)

    @property
    def feature_row_bytes(self) -> int:
        """Bytes of the widest feature row over the types (at least 4: a learned embedding's
        id)."""
        return max([4, *row_bytes_of(self.graph).values()])

    def validate(self, check_features: bool = True) -> None:
        """Labels, splits and (with ``check_features``) finite features of every type; raise
        ``ValueError`` naming the field."""
        n = self.num_nodes
        if self.num_classes < 1:
            raise ValueError(f"dataset {self.name!r}: num_classes must be >= 1, got "
                             f"{self.num_classes}")
        check_num_classes(self.name, self.num_classes)
        if self.labels.numel() and int(self.labels.max()) >= self.num_classes:
            raise ValueError(f"dataset {self.name!r}: labels hold class "
                             f"{int(self.labels.max())}, outside [0, {self.num_classes})")
        for split in _SPLITS:
            idx = getattr(self, split)
            if idx.numel() and (int(idx.min()) < 0 or int(idx.max()) >= n):
                bad = int(idx.min()) if int(idx.min()) < 0 else int(idx.max())
                raise ValueError(f"dataset {self.name!r}: {split} holds id {bad}, outside "
                                 f"num_nodes[{self.target_type!r}]={n}")
        check_split_ids(self.name, self._splits())
        if check_features:
            for t, x in self.graph.features.items():
                check_finite_features(x, f"dataset {self.name!r} features of node type {t!r}")

    def resolve_fanouts(self, fanouts: tuple[int, ...],
                        per_relation: Optional[Mapping[str, tuple[int, ...]]] = None
                        ) -> dict[tuple[str, str, str], tuple[int, ...]]:
        """Fanouts per relation: ``fanouts`` for every relation, replaced for those that
        ``per_relation`` names (by ``rel`` alone when unique, or ``src:rel:dst``).

        Raises:
            ValueError: one line naming an unknown or ambiguous relation, or a list whose
                length differs from ``fanouts`` (one fanout per layer).
        """
        out = {et: tuple(fanouts) for et in self.graph.edge_types}
        names = [":".join(e) for e in self.graph.edge_types]
        for key, fan in (per_relation or {}).items():
            hits = [et for et in self.graph.edge_types
                    if key in (et[1], ":".join(et), format_edge_type(et))]
            if len(hits) != 1:
                why = "is ambiguous (use src:rel:dst)" if hits else "is not a relation"
                raise ValueError(f"SamplerConfig.relation_fanouts: {key!r} {why} of dataset "
                                 f"{self.name!r} (relations: {', '.join(names)})")
            if len(fan) != len(fanouts):
                raise ValueError(f"SamplerConfig.relation_fanouts: {key!r} has {len(fan)} "
                                 f"fanouts, but the model has {len(fanouts)} layers "
                                 f"(--fanouts {','.join(map(str, fanouts))})")
            out[hits[0]] = tuple(int(f) for f in fan)
        return out

    def __repr__(self) -> str:
        types = ", ".join(f"{t}={n}" for t, n in self.graph.num_nodes.items())
        head = (f"HeteroDataset({self.name!r}, nodes={{{types}}}, relations="
                f"{len(self.graph.edge_types)}, edges={self.num_edges}")
        if not self.labelled:
            return head + ", no labels)"
        return (f"{head}, target={self.target_type!r}, classes={self.num_classes}, "
                f"train/val/test={self.train_idx.numel()}/{self.val_idx.numel()}/"
                f"{self.test_idx.numel()})")

    @property
    def labelled(self) -> bool:
        """Whether the graph has labels (False for :meth:`unlabelled`: link prediction only)."""
        return self.graph.labels is not None

    def check_trainable(self) -> None:
        """:meth:`Dataset.check_trainable` of a labelled dataset; an unlabelled one has no node
        split or class to check (a link job splits a relation's edges, and a node job is
        refused by :func:`fgnn.tasks.checks.check_typed`)."""
        if self.labelled:
            super().check_trainable()

    @classmethod
    def unlabelled(cls, graph: HeteroGraph, name: Optional[str] = None,
                   check_features: bool = True) -> "HeteroDataset":
        """A dataset over a typed graph without labels, for link prediction (a relation's edges
        are what it learns): ``graph.labels`` stays ``None``; ``target_type`` is the graph's,
        else its first node type, with one placeholder class and empty node splits (no node
        task reads them; a link job splits the relation's edges)."""
        title = name or str(graph.meta.get("name", "hetero"))
        target = graph.target_type or graph.node_types[0]
        g = dataclasses.replace(graph, labels=None, target_type=target)
        empty = torch.empty(0, dtype=torch.int64)
        return cls(title, g, g.features, torch.zeros(g.num_nodes[target], dtype=torch.int64),
                   empty, empty, empty, 1, dict(g.meta, **{UNLABELLED: True}), check_features)


def _no_target(name: str, g: HeteroGraph) -> str:
    return (f"dataset {name!r}: the typed graph has no labelled target type (target_type="
            f"{g.target_type!r}, labels {'missing' if g.labels is None else 'given'}); node "
            f"classification needs labels on one node type")

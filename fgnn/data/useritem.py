"""The planted user-item graph as a launchable dataset (``useritem:...``, ``--task recsys``).

:func:`useritem_dataset` generates :func:`fgnn.data.bipartite.user_item_graph` and lays it
out for the factored runtime as one id space, **items first**: item ``i`` is vertex ``i`` and
user ``u`` is vertex ``num_items + u``. The topology holds both directions of every training
interaction (a user's row lists its items, an item's row its users), which is what the
item -> user -> item random walks of PinSAGE run on. Feature rows: the item features plus the
standardised log degree of the item in the training interactions (PinSAGE's inputs, as in
:func:`fgnn.tasks.recsys_inprocess.train_pinsage`); user rows are zeros and are never read (a walk's
visits to users are dropped). Each user's held-out item is **not** in the graph; it is kept on
the dataset (``heldout``) for evaluation only.

Spec keys (:data:`USERITEM_KEYS`): ``users_log2``, ``items_log2``, ``interactions_log2``,
``dim``, ``affinity``, ``popularity_exponent``, ``feat_noise``, ``seed``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

import torch

from fgnn.data.dataset import Dataset
from fgnn.graph import CSRGraph
from fgnn.data.bipartite import _CHUNK_ELEMS, UI, UserItemData, user_item_graph

__all__ = ["RecsysDataset", "useritem_dataset", "estimate_bytes", "USERITEM_KEYS", "is_recsys"]

#: ``useritem:key=value,...`` keys and their defaults (the issue's full size is 16/14/20).
USERITEM_KEYS: dict[str, Any] = {"users_log2": 16, "items_log2": 14, "interactions_log2": 20,
                                 "dim": 4, "affinity": 8.0, "popularity_exponent": 0.8,
                                 "feat_noise": 0.5, "seed": 0}


@dataclass(repr=False)
class RecsysDataset(Dataset):
    """A user-item dataset in one id space, items ``[0, num_items)`` then users (module
    docstring). Beside :class:`~fgnn.data.Dataset`'s fields:

    Attributes:
        num_items: items I (vertices ``[0, I)``).
        history: ``(U, H)`` int64 training items of each user (item ids).
        heldout: ``(U,)`` int64 held-out item of each user (never in ``graph``).
        planted: the generator's output (planted latents: the recall ceiling).
    """

    num_items: int = 0
    history: Optional[torch.Tensor] = None
    heldout: Optional[torch.Tensor] = None
    planted: Optional[UserItemData] = field(default=None, repr=False)

    def __repr__(self) -> str:
        return (f"RecsysDataset({self.name!r}, items={self.num_items}, users={self.num_users}, "
                f"interactions={self.graph.num_edges // 2}, feat_dim={self.feat_dim})")

    @property
    def num_users(self) -> int:
        """Users U (vertices ``[I, I + U)``)."""
        return self.graph.num_nodes - self.num_items

    def check_trainable(self) -> None:
        """A recommender needs users with at least two training items (query and positive).

        Raises:
            ValueError: naming the dataset when no user has two items.
        """
        if self.history is None or self.history.shape[1] < 2:
            raise ValueError(f"dataset {self.name!r}: every user needs at least 2 training "
                             f"items (raise interactions_log2)")


def is_recsys(dataset: Any) -> bool:
    """Whether ``dataset`` is a user-item dataset a recommender trains on."""
    return isinstance(dataset, RecsysDataset)


def _params(kw: dict) -> dict:
    """The keys given over the defaults; ValueError naming an unknown key or a count out of
    range."""
    unknown = set(kw) - set(USERITEM_KEYS)
    if unknown:
        raise ValueError(f"unknown key {sorted(unknown)[0]!r}; known keys: "
                         f"{', '.join(USERITEM_KEYS)}")
    p = {**USERITEM_KEYS, **kw}
    for k in ("users_log2", "items_log2", "interactions_log2"):
        if not 1 <= int(p[k]) <= 30:
            raise ValueError(f"{k} must lie in [1, 30], got {p[k]!r}")
    return p


def estimate_bytes(**kw: Any) -> int:
    """Peak host bytes :func:`useritem_dataset` allocates, from the keys alone (nothing is
    generated).

    With ``U`` users, ``I`` items and ``M`` interactions kept (``U * (M // U)``): a chunk of
    planted logits (``12`` bytes per entry: logits, noise, top-k; at least one user's row of
    ``I``), ``12 * 33`` bytes per vertex for the feature rows (items and users, ``feat_dim``
    32 plus the degree) and their copies, the latents, and ``180 M`` for the interactions
    (draws, history, both edge directions, the typed and the homogeneous CSR). Measured peaks
    (resident set growth, 2026-11-27) were 0.6-0.65 of it.

    Raises:
        ValueError: an unknown key or a count out of range, as :func:`useritem_dataset`.
    """
    p = _params(kw)
    u, i = 1 << int(p["users_log2"]), 1 << int(p["items_log2"])
    m = max(u * ((1 << int(p["interactions_log2"])) // u), u)
    chunk = min(u, max(1, _CHUNK_ELEMS // i)) * i
    return 12 * chunk + (12 * 33 + 8 * int(p["dim"]) + 24) * (u + i) + 180 * m


def useritem_dataset(**kw: Any) -> RecsysDataset:
    """Generate the planted user-item graph (keys: :data:`USERITEM_KEYS`) as a
    :class:`RecsysDataset`.

    Raises:
        ValueError: an unknown key or a value the generator refuses, naming it.
    """
    p = _params(kw)
    data = user_item_graph(1 << int(p["users_log2"]), 1 << int(p["items_log2"]),
                           1 << int(p["interactions_log2"]), dim=int(p["dim"]),
                           affinity=float(p["affinity"]),
                           popularity_exponent=float(p["popularity_exponent"]),
                           feat_noise=float(p["feat_noise"]), seed=int(p["seed"]))
    n_i, n_u = data.num_items, data.num_users
    ei = data.graph.edge_index(UI)  # (user, item)
    users = ei[0] + n_i
    both = torch.stack([torch.cat([users, ei[1]]), torch.cat([ei[1], users])])
    graph = CSRGraph.from_edge_index(both, num_nodes=n_i + n_u, index_dtype=torch.int32)
    deg = torch.log1p(graph.in_degrees()[:n_i].float())
    deg = (deg - deg.mean()) / deg.std().clamp_min(1e-6)
    x_items = torch.cat([data.graph.features["item"].float(), deg.unsqueeze(1)], 1)
    features = torch.cat([x_items, x_items.new_zeros(n_u, x_items.shape[1])])
    name = (f"useritem-{p['users_log2']}u-{p['items_log2']}i-{p['interactions_log2']}e"
            f"-s{p['seed']}")
    return RecsysDataset(name, graph, features, torch.zeros(n_i + n_u, dtype=torch.int64),
                         torch.arange(n_i, n_i + n_u), torch.zeros(0, dtype=torch.int64),
                         torch.zeros(0, dtype=torch.int64), 2,
                         {"source": "synthetic", "generator": "user_item_graph", "params": p},
                         False, num_items=n_i, history=data.history, heldout=data.heldout,
                         planted=data)

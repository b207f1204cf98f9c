"""PinSAGE as a recommender through the factored runtime (``task="recsys"``).

A user-item dataset (:class:`~fgnn.data.useritem.RecsysDataset`, ``useritem:...``) is one id
space, items first. The runtime's parts do what they do for link prediction (the job's
task is a :class:`RecsysTask`); this module supplies what differs:

* **Driver** (:class:`RecsysTask`): the training items are the users (each task is a
  mini-batch of users); an evaluation split's items are all the items, whose embeddings the
  executors compute. The users are split into validation and test users (``VAL_SHARE``,
  seeded by ``train.seed``); :meth:`RecsysTask.metrics` ranks each user's unseen items by
  ``<normalised mean history embedding, item> + item bias`` and scores recall@K (= Hits@K: one
  held-out item per user) next to the planted ceiling and the popularity baseline of the same
  users. Validation recall picks the weights.
* **Samplers** (:class:`RecsysSampling`): from the task's own generator
  (:func:`~fgnn.executors.common.task_generator`) each user of the task gives one example,
  a positive item and ``query_items`` other items of its history (the query is their mean
  embedding), all read from the user's row of the topology, which holds training interactions
  only: a held-out item is never drawn. The task also draws its shared uniform negatives; then
  PinSAGE's item -> user -> item random-walk neighbourhoods of every item involved
  (:meth:`~fgnn.sampling.walks_hetero.ItemWalkSampler.on_topology`). The sample carries its examples in
  ``Sample.pairs`` (:class:`~fgnn.models.pinsage_rec.PinSAGERecModel`).
* **Caches** (:class:`RecsysCachePlanner`): the homogeneous planner over the item rows;
  degree hotness counts an item's users, and user rows (never read) rank below every item.
  PreSC counts the items the samples visit (a user is never an input). Hits and misses are in
  every epoch's report.
* **Trainers**: extract the item inputs through the feature cache, embed, compute the
  max-margin loss with each query's hardest shared negatives (``pairs_loss``) and exchange
  gradients like any job; an evaluation chunk returns its items' embeddings and biases
  (``pairs_record``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

import numpy as np
import torch

from fgnn.config import JobConfig
from fgnn.data.useritem import RecsysDataset
from fgnn.models.pinsage_rec import EMBED, NEGATIVE, POSITIVE, QUERY, PinSAGERecModel
from fgnn.sampling.base import Sample
from fgnn.sampling.task_sampling import SamplingSpec
from fgnn.tasks.checks import check_recsys
from fgnn.tasks.link import PAIR_STEP
from fgnn.tasks.recsys_inprocess import RecConfig, popularity_recall, recall_at_k

__all__ = ["RecsysTask", "RecsysSampling", "build_model", "K", "VAL_SHARE", "REC"]

#: recall@K of the evaluation (= Hits@K, one held-out item per user).
K = 10
#: Share of the users whose held-out item is validation (the rest is test).
VAL_SHARE = 0.2
REC = RecConfig()  # query_items, hardest, margin, item bias and bias_lr of the recipe


def build_model(config: JobConfig, dataset: RecsysDataset) -> PinSAGERecModel:
    """The recommender of ``config``: PinSAGE embedder (``sampler.num_layers`` layers,
    ``model.hidden`` wide, 64-d unit-norm output), the degree bias moving at
    ``RecConfig.bias_lr`` under the job's learning rate, the recipe's margin and hardest."""
    log_degree = dataset.features[:dataset.num_items, -1].float()
    return PinSAGERecModel(int(dataset.feat_dim), REC.out_dim, config.sampler.num_layers,
                           config.model.hidden, log_degree, REC.margin, REC.hardest,
                           REC.bias_lr / config.train.lr, REC.item_bias)


def _ceiling_per_user(dataset: RecsysDataset, k: int) -> torch.Tensor:
    """``(U,)`` each user's expected recall@k under the planted ranking (the ceiling of
    :meth:`~fgnn.data.bipartite.UserItemData.recall_ceiling`, per user)."""
    data = dataset.planted
    out = torch.empty(dataset.num_users, dtype=torch.float64)
    step = max(1, (1 << 24) // max(dataset.num_items, 1))
    for lo in range(0, dataset.num_users, step):
        users = torch.arange(lo, min(lo + step, dataset.num_users))
        logits = data.planted_logits(users).double()
        logits.scatter_(1, data.history[users], float("-inf"))
        out[users] = torch.softmax(logits, dim=1).topk(k, dim=1).values.sum(1)
    return out


@dataclass
class RecsysTask:
    """The driver's side of a recommender job (module docstring).

    Attributes:
        num_items: items I.
        users: ``(T,)`` user vertex ids that give training examples (at least two items).
        history, heldout: the dataset's (user-indexed).
        split_users: ``"val"``/``"test"`` -> user indices scored by that split.
        references: split -> ``{"ceiling@K", "popularity@K"}`` of its users.
        walks: ``{"num_walks", "hops", "top_k", "num_layers"}`` of the Samplers.
        negatives: shared uniform negatives per task.
    """

    num_items: int
    users: torch.Tensor
    history: torch.Tensor
    heldout: torch.Tensor
    split_users: dict[str, torch.Tensor]
    references: dict[str, dict[str, float]]
    walks: dict[str, int]
    negatives: int
    select: str = f"recall@{K}"

    @classmethod
    def build(cls, config: JobConfig, dataset: RecsysDataset) -> "RecsysTask":
        """Split the users, compute the references, read the walk settings.

        Raises:
            TypedJobError: on a dataset or setting
                :func:`~fgnn.tasks.checks.check_recsys` refuses.
        """
        check_recsys(config, dataset)
        n_u, n_i = dataset.num_users, dataset.num_items
        gen = torch.Generator().manual_seed(config.train.seed + 104729)
        perm = torch.randperm(n_u, generator=gen)
        n_val = max(1, int(round(VAL_SHARE * n_u)))
        split_users = {"val": perm[:n_val].sort().values, "test": perm[n_val:].sort().values}
        ceiling = _ceiling_per_user(dataset, K)
        refs = {s: {f"ceiling@{K}": float(ceiling[u].mean()),
                    f"popularity@{K}": popularity_recall(dataset.history[u],
                                                         dataset.heldout[u], n_i, K)}
                for s, u in split_users.items()}
        deg = dataset.graph.degrees()[n_i:]
        users = torch.nonzero(deg >= 2).squeeze(1) + n_i
        s = config.sampler
        walks = {"num_walks": s.num_walks, "hops": max(1, s.walk_length // 2),
                 "top_k": s.top_k, "num_layers": s.num_layers}
        return cls(n_i, users, dataset.history, dataset.heldout, split_users, refs, walks,
                   REC.negatives_for(n_i))

    def training_dataset(self, dataset: RecsysDataset) -> RecsysDataset:
        """The Samplers walk the whole training topology (no held-out item is in it)."""
        return dataset

    def size(self, split: str) -> int:
        """Items of ``split``: users giving examples (train), or the items to embed."""
        return int(self.users.numel()) if split == "train" else self.num_items

    def payload(self) -> dict[str, Any]:
        """What every Sampler needs beside the topology."""
        return {"num_items": self.num_items, "users": self.users.numpy(),
                "query_items": REC.query_items, "negatives": self.negatives, **self.walks}

    name = "recsys"
    #: The validation score that picks the weights, as plots and tables name it.
    metric = f"recall@{K}"
    step = PAIR_STEP

    def items(self, split: str, dataset: Any = None) -> torch.Tensor:
        """Ids of ``split``'s items: indices of the users giving examples (train), or items."""
        return torch.arange(self.size(split), dtype=torch.int64)

    def sampling(self) -> SamplingSpec:
        """Every Sampler's :class:`RecsysSampling` over :meth:`payload`."""
        return SamplingSpec(RecsysSampling, self.payload())

    def build_model(self, config: JobConfig, dataset: RecsysDataset,
                    num_layers: int) -> PinSAGERecModel:
        """The recommender of ``config`` (:func:`build_model`)."""
        return build_model(config, dataset)

    def validation(self, scored: Any) -> tuple[float, dict[str, float]]:
        """Validation recall@K picks the weights."""
        r = self.metrics("val", *scored.pairs["val"])[self.select]
        return r, {"val_acc": r}

    def final_splits(self, known_val: Optional[float]) -> tuple[str, ...]:
        """Validation and test users."""
        return ("val", "test")

    def final_scores(self, scored: Any, known_val: Optional[float]) -> dict[str, float]:
        """``{val,test}_recall@K`` with the ceiling, popularity and ratio of each split."""
        return {f"{s}_{k}": v for s in ("val", "test")
                for k, v in self.metrics(s, *scored.pairs[s]).items()}

    def identity(self) -> dict[str, Any]:
        """A recommender records no relation."""
        return {"task": self.name, "link": {"edge_type": None}}

    def metrics(self, split: str, scores: np.ndarray, labels: np.ndarray) -> dict[str, float]:
        """``recall@K``, the ceiling and popularity of ``split``'s users, and the ratio
        ``recall / ceiling``, from the chunks' item embeddings and biases (``scores``
        ``(I, D + 1)``, ``labels`` their item ids).

        Raises:
            ValueError: when the chunks do not cover every item once, in order.
        """
        if len(labels) != self.num_items or not np.array_equal(labels,
                                                               np.arange(self.num_items)):
            raise ValueError(f"{split}: {len(labels)} item embeddings for {self.num_items} "
                             f"items")
        s = torch.from_numpy(np.asarray(scores, dtype=np.float32))
        u = self.split_users[split]
        r = recall_at_k(s[:, :-1], self.history[u], self.heldout[u], K, s[:, -1], True)
        ref = self.references[split]
        return {f"recall@{K}": r, **ref,
                "ratio_to_ceiling": r / max(ref[f"ceiling@{K}"], 1e-12)}


class RecsysSampling:
    """A Sampler's recommender samples: training examples of users, evaluation items.

    Args:
        payload: :meth:`RecsysTask.payload`.
        sampler: the job's sampler (unused: the walks are :class:`ItemWalkSampler`'s).
        device: the sampling device.
    """

    def __init__(self, payload: dict[str, Any], sampler: Any = None,
                 device: torch.device | str = "cpu") -> None:
        self.device = torch.device(device)
        self.num_items = int(payload["num_items"])
        self.users = torch.as_tensor(np.asarray(payload["users"])).long().to(self.device)
        self.k, self.negatives = int(payload["query_items"]), int(payload["negatives"])
        self.walk_args = {a: int(payload[a]) for a in ("num_walks", "hops", "top_k",
                                                       "num_layers")}
        self._walker: Any = None

    def walker(self, graph: Any) -> Any:
        """PinSAGE's walks on the Sampler's topology (built once)."""
        if self._walker is None:
            from fgnn.sampling.walks_hetero import ItemWalkSampler

            self._walker = ItemWalkSampler.on_topology(graph, self.num_items, 0,
                                                       **self.walk_args)
        return self._walker

    def examples(self, graph: Any, users: torch.Tensor,
                 generator: Optional[torch.Generator] = None
                 ) -> tuple[torch.Tensor, torch.Tensor]:
        """``(queries (B, k), positives (B,))``: per user a positive and ``k`` other items of
        its row (with replacement), all training interactions."""
        deg = (graph.indptr[users + 1] - graph.indptr[users]).long().unsqueeze(1).cpu()
        b = users.numel()
        pos = (torch.rand(b, 1, generator=generator) * deg).long().clamp_max(deg - 1)
        oth = (torch.rand(b, self.k, generator=generator) * (deg - 1)).long().clamp_max(deg - 2)
        oth = oth + (oth >= pos).long()
        start = graph.indptr[users].long().unsqueeze(1).cpu()
        idx = graph.indices.cpu()
        return idx[start + oth].long(), idx[start + pos].squeeze(1).long()

    def train_sample(self, graph: Any, ids: torch.Tensor,
                     generator: Optional[torch.Generator] = None) -> Sample:
        """The sample of training users ``users[ids]``: their examples, the task's shared
        negatives and the walk neighbourhoods of every item involved."""
        users = self.users[ids.to(self.device).long()]
        q, p = self.examples(graph, users, generator)
        e = torch.randint(self.num_items, (self.negatives,), generator=generator)
        items = torch.cat([q.reshape(-1), p, e])
        seeds, inv = torch.unique(items, return_inverse=True)
        sample = self.walker(graph).sample(seeds.to(self.device), generator)
        b, k = p.numel(), self.k
        example = torch.cat([torch.arange(b).repeat_interleave(k), torch.arange(b),
                             torch.full((e.numel(),), -1)])
        role = torch.cat([torch.full((b * k,), QUERY), torch.full((b,), POSITIVE),
                          torch.full((e.numel(),), NEGATIVE)])
        sample.pairs = torch.stack([inv, example, role, items]).long().to(sample.seeds.device)
        return sample

    def eval_sample(self, graph: Any, split: str, ids: torch.Tensor,
                    generator: Optional[torch.Generator] = None) -> Sample:
        """The sample of items ``ids`` to embed (any evaluation split)."""
        items = ids.to(self.device).long()
        sample = self.walker(graph).sample(items, generator)
        n = items.numel()
        sample.pairs = torch.stack([torch.arange(n, device=items.device),
                                    torch.full((n,), -1, device=items.device),
                                    torch.full((n,), EMBED, device=items.device), items])
        return sample

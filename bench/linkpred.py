"""Peer benchmark: Cora link prediction with fgnn and with PyG's ``LinkNeighborLoader``, same
encoder, graph, splits and negatives, in one run (issue 20).

Both sides train the GAE setting of ``bench/link_gae.py``: an 85/5/10 edge split
(:func:`fgnn.link.random_link_split`, split seed = run seed, one fixed negative per validation
and test edge), a 2-layer GCN encoder (hidden 32, embeddings 16, no dropout), a dot-product
decoder, BCE, Adam at lr 0.01, 200 epochs, batches of 512 training edges with one uniform
negative each (destination replaced, filtered against the known edges), fanouts 1000,1000 (the
full neighbourhood of Cora; fgnn draws with frontier ``new`` as the ``gae`` recipe does,
``--fgnn-frontier all`` for DGL's, the same GCN at these fanouts), one intra-op thread. Validation AUC after every epoch picks the
weights the test is scored with (full-neighbour embeddings over each stage's message graph).

What is shared, so that only the training pipelines differ:

* the split: one :class:`~fgnn.link.split.LinkSplit` object; PyG's ``Data.edge_index`` is the
  training message graph of that split (both directions), its validation and test graphs are
  those of the split;
* the negatives' law and ratio: PyG's batches are built by :func:`epoch_batches` with fgnn's
  :func:`~fgnn.link.negatives.uniform_negatives` and given to the loader as labelled edges
  (``--pyg-negatives native`` uses PyG's own ``neg_sampling_ratio`` instead: uniform random
  pairs, unfiltered);
* the initial weights: the PyG encoder (:func:`pyg_encoder`) has the parameter names of
  :class:`fgnn.models.GCN` and loads its initial ``state_dict``;
* the metrics: :func:`fgnn.link.metrics.roc_auc`, ``average_precision`` and ``mrr`` (each test
  positive against ``--mrr-negatives`` fixed filtered negatives of its source).

The GCN math is the same on both sides (``--pyg-conv mean``, the default): fgnn's
:class:`~fgnn.models.gcn.GCNConv` is ``W · mean(h_v, h_u for u in N(v)) + b``, the
right-normalised, self-looped sum; on the PyG side that is ``SimpleConv(aggr="mean",
combine_root="self_loop")`` after the linear map. PyG's ``GCNConv`` normalises symmetrically
(``1/sqrt((d_u + 1)(d_v + 1))``); ``--pyg-conv gcn`` runs that (``gcn_norm`` weights, a sum,
then the bias) for comparison. One difference stays: fgnn excludes each batch's seed edges
(both directions) from the sampled neighbourhood (``--fgnn-exclude``, default ``reverse``);
PyG's ``LinkNeighborLoader`` has no such option, so its batches keep their targets as message
edges (PyG's usual ``RandomLinkSplit`` practice with ``disjoint_train_ratio=0``).

Epoch time is the training steps of one epoch (negatives, sampling, features, forward, backward,
step); the evaluation after each epoch is not in it. Wall and thread CPU time are both reported
(medians over the epochs); on a shared machine the CPU time is the steadier of the two.

PyG's neighbour sampler needs ``torch_sparse`` (or its compiled ``neighbor_sample`` op) or
``pyg-lib``; without them (or without ``torch_geometric``) the script stops with one line,
unless ``--fgnn-only``.

Examples::

    PYTHONPATH=. python bench/linkpred.py --data-root ../shared/data/planetoid --seeds 0,1,2 \\
        --json linkpred.json
    PYTHONPATH=. python bench/linkpred.py --data-root ../shared/data/planetoid --fgnn-only \\
        --epochs 5
"""

from __future__ import annotations

import argparse
import copy
import importlib.util
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Callable, Optional

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.link_gae import add_gae_arguments  # noqa: E402
from fgnn.config import TrainConfig  # noqa: E402
from fgnn.data import load_dataset  # noqa: E402
from fgnn.link import LinkNeighborSampler, build_decoder, fit_link, random_link_split  # noqa
from fgnn.link.edges import EdgeSet  # noqa: E402
from fgnn.models.losses import bce_loss  # noqa: E402
from fgnn.link.metrics import average_precision, mrr, roc_auc  # noqa: E402
from fgnn.link.negatives import uniform_negatives  # noqa: E402
from fgnn.link.split import LinkSplit  # noqa: E402
from fgnn.link.training import embed_all  # noqa: E402
from fgnn.models import GCN  # noqa: E402

Batch = tuple[torch.Tensor, torch.Tensor]  # (2, P + K) scored pairs, (P + K,) float labels


# ------------------------------------------------------------------ shared by both sides
def pyg_missing() -> Optional[str]:
    """``None`` when PyG's ``LinkNeighborLoader`` can sample here, else why not (one line).
    The backend check is ``bench/sampling.py``'s :func:`pyg_backend`: pyg-lib, torch-sparse,
    or torch-sparse's compiled ``neighbor_sample`` op loaded on its own."""
    spec = importlib.util.spec_from_file_location("bench_sampling_backend",
                                                  Path(__file__).with_name("sampling.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    backend, why = mod.pyg_backend()
    return None if backend else why


def make_split(graph: Any, seed: int) -> LinkSplit:
    """The GAE split both sides train on: 85/5/10, split seed = ``seed``."""
    return random_link_split(graph, val=0.05, test=0.10, seed=seed)


def message_edge_index(split: LinkSplit, stage: str) -> torch.Tensor:
    """``(2, M)`` message edges of ``stage`` as PyG's ``edge_index`` (``[source, target]``,
    both directions): the edges of fgnn's CSR graph of that stage (``u`` in row ``v`` is the
    message ``u -> v``)."""
    return split.graph(stage).edge_index()


def epoch_batches(split: LinkSplit, known: Optional[EdgeSet], batch_size: int, neg_ratio: int,
                  gen: torch.Generator) -> list[Batch]:
    """One epoch of labelled training pairs, as fgnn's loop draws them: the training edges
    shuffled and cut into ``batch_size`` positives, each batch followed by ``neg_ratio``
    uniform negatives per positive (the destination replaced, never a ``known`` edge)."""
    order = torch.randperm(split.train_pos.shape[1], generator=gen)
    out = []
    for start in range(0, order.numel(), batch_size):
        pos = split.train_pos[:, order[start:start + batch_size]]
        neg = uniform_negatives(pos[0], split.num_nodes, neg_ratio, gen, known)
        pairs = torch.cat([pos, torch.stack([neg.src, neg.dst])], dim=1)
        out.append((pairs, torch.cat([torch.ones(pos.shape[1]), torch.zeros(neg.src.numel())])))
    return out


def ranking_negatives(split: LinkSplit, k: int, seed: int) -> Optional[torch.Tensor]:
    """``(P_test, k)`` destinations for MRR: ``k`` uniform negatives per test positive's
    source, never an edge of the graph; ``None`` if the filter left one short."""
    gen = torch.Generator().manual_seed(10_007 + seed)
    neg = uniform_negatives(split.test_pos[0], split.num_nodes, k, gen,
                            split.known_edges("test"))
    p = split.test_pos.shape[1]
    return neg.dst.view(p, k) if neg.dst.numel() == p * k else None


def scores_of(h: torch.Tensor, split: LinkSplit, stage: str,
              rank_neg: Optional[torch.Tensor] = None) -> dict[str, float]:
    """AUC / AP of the fixed ``stage`` pairs from embeddings ``h`` (dot decoder), and MRR
    against ``rank_neg`` when given."""
    pos, neg = getattr(split, f"{stage}_pos"), getattr(split, f"{stage}_neg")
    s_pos = (h[pos[0]] * h[pos[1]]).sum(-1)
    s_neg = (h[neg[0]] * h[neg[1]]).sum(-1)
    out = {"auc": roc_auc(s_pos, s_neg), "ap": average_precision(s_pos, s_neg)}
    if rank_neg is not None:
        out["mrr"] = mrr(s_pos, (h[pos[0]].unsqueeze(1) * h[rank_neg]).sum(-1))
    return out


def init_encoder(feat_dim: int, args: argparse.Namespace, seed: int) -> GCN:
    """fgnn's encoder with the run's initial weights (``torch.manual_seed(seed)``)."""
    torch.manual_seed(seed)
    return GCN(feat_dim, args.dim, num_layers=2, hidden=args.hidden, dropout=0.0)


def _summary(side: str, scores: dict, wall: list[float], cpu: list[float], best: int) -> dict:
    return {"side": side, "test_auc": scores["auc"], "test_ap": scores["ap"],
            "test_mrr": scores.get("mrr"), "best_epoch": best,
            "epoch_wall_s": statistics.median(wall), "epoch_cpu_s": statistics.median(cpu),
            "epochs": len(wall)}


# ------------------------------------------------------------------ fgnn
def run_fgnn(ds: Any, split: LinkSplit, init: dict, args: argparse.Namespace, seed: int,
             rank_neg: Optional[torch.Tensor]) -> dict:
    """Train with :func:`fgnn.link.fit_link` (the single-process link loop)."""
    enc = GCN(ds.feat_dim, args.dim, num_layers=2, hidden=args.hidden, dropout=0.0)
    enc.load_state_dict(init)
    hist = fit_link(ds.features, split, enc, build_decoder("dot", args.dim),
                    LinkNeighborSampler(args.fanouts, neg_ratio=args.neg_ratio,
                                        exclude=args.fgnn_exclude,
                                        frontier=args.fgnn_frontier),
                    TrainConfig(epochs=args.epochs, batch_size=args.batch_size, lr=args.lr,
                                seed=seed))
    h = embed_all(enc, ds.features, split.graph("test"))
    return _summary("fgnn", scores_of(h, split, "test", rank_neg), hist.epoch_time_s,
                    hist.epoch_cpu_s, hist.best_epoch)


# ------------------------------------------------------------------ PyG
def pyg_encoder(feat_dim: int, args: argparse.Namespace) -> nn.Module:
    """A 2-layer GCN in PyG with the parameter names of :class:`fgnn.models.GCN`
    (``layers.i.linear.weight``, ``layers.i.bias``). ``--pyg-conv mean``: fgnn's math
    (self-looped mean, ``SimpleConv``); ``gcn``: ``GCNConv``'s symmetric normalisation."""
    from torch_geometric.nn import SimpleConv
    from torch_geometric.nn.conv.gcn_conv import gcn_norm

    class Layer(nn.Module):
        def __init__(self, d_in: int, d_out: int) -> None:
            super().__init__()
            self.linear = nn.Linear(d_in, d_out, bias=False)
            self.bias = nn.Parameter(torch.zeros(d_out))
            self.conv = (SimpleConv(aggr="mean", combine_root="self_loop")
                         if args.pyg_conv == "mean" else SimpleConv(aggr="sum"))

        def forward(self, x: torch.Tensor, edge_index: torch.Tensor) -> torch.Tensor:
            h = self.linear(x)
            if args.pyg_conv == "mean":
                return self.conv(h, edge_index) + self.bias
            ei, w = gcn_norm(edge_index, None, h.shape[0], add_self_loops=True)
            return self.conv(h, ei, w) + self.bias

    class Encoder(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.layers = nn.ModuleList([Layer(feat_dim, args.hidden), Layer(args.hidden,
                                                                             args.dim)])

        def forward(self, x: torch.Tensor, edge_index: torch.Tensor) -> torch.Tensor:
            return self.layers[1](torch.relu(self.layers[0](x, edge_index)), edge_index)

    return Encoder()


def _pyg_loader(data: Any, split: LinkSplit, known: EdgeSet, args: argparse.Namespace,
                gen: torch.Generator) -> Any:
    from torch_geometric.loader import LinkNeighborLoader

    if args.pyg_negatives == "native":
        return LinkNeighborLoader(data, num_neighbors=list(args.fanouts),
                                  edge_label_index=split.train_pos,
                                  neg_sampling_ratio=float(args.neg_ratio),
                                  batch_size=args.batch_size, shuffle=True)
    batches = epoch_batches(split, known, args.batch_size, args.neg_ratio, gen)
    return LinkNeighborLoader(data, num_neighbors=list(args.fanouts),
                              edge_label_index=torch.cat([b[0] for b in batches], dim=1),
                              edge_label=torch.cat([b[1] for b in batches]),
                              batch_size=(1 + args.neg_ratio) * args.batch_size, shuffle=False)


def run_pyg(ds: Any, split: LinkSplit, init: dict, args: argparse.Namespace, seed: int,
            rank_neg: Optional[torch.Tensor]) -> dict:
    """The same training with PyG's ``LinkNeighborLoader`` and :func:`pyg_encoder`."""
    from torch_geometric.data import Data

    x = torch.as_tensor(ds.features).float()
    data = Data(x=x, edge_index=message_edge_index(split, "train"), num_nodes=split.num_nodes)
    graphs = {s: message_edge_index(split, s) for s in ("val", "test")}
    enc = pyg_encoder(ds.feat_dim, args)
    enc.load_state_dict(init)
    torch.manual_seed(seed)
    opt = torch.optim.Adam(enc.parameters(), lr=args.lr)
    known = split.known_edges("train")
    wall, cpu, best = [], [], (-1.0, 0, None)
    for epoch in range(args.epochs):
        tick, tick_cpu = time.perf_counter(), time.thread_time()
        gen = torch.Generator().manual_seed(seed * 100_003 + epoch)
        enc.train()
        for batch in _pyg_loader(data, split, known, args, gen):
            opt.zero_grad(set_to_none=True)
            h = enc(batch.x, batch.edge_index)
            eli = batch.edge_label_index
            bce_loss((h[eli[0]] * h[eli[1]]).sum(-1), batch.edge_label.float()).backward()
            opt.step()
        wall.append(time.perf_counter() - tick)
        cpu.append(time.thread_time() - tick_cpu)
        with torch.no_grad():
            enc.eval()
            auc = scores_of(enc(x, graphs["val"]), split, "val")["auc"]
        if auc > best[0]:
            best = (auc, epoch, copy.deepcopy(enc.state_dict()))
    enc.load_state_dict(best[2])
    with torch.no_grad():
        enc.eval()
        test = scores_of(enc(x, graphs["test"]), split, "test", rank_neg)
    return _summary(f"PyG ({args.pyg_conv}, {args.pyg_negatives} negatives)", test, wall, cpu,
                    best[1])


# ------------------------------------------------------------------ driver
def _print_rows(rows: list[dict]) -> None:
    print("seed | side | test AUC | test AP | test MRR | best epoch | epoch wall ms | "
          "epoch CPU ms")
    for r in rows:
        m = "-" if r["test_mrr"] is None else f"{r['test_mrr']:.4f}"
        print(f"{r['seed']} | {r['side']} | {r['test_auc']:.4f} | {r['test_ap']:.4f} | {m} | "
              f"{r['best_epoch']} | {1e3 * r['epoch_wall_s']:.1f} | "
              f"{1e3 * r['epoch_cpu_s']:.1f}", flush=True)


def _means(rows: list[dict]) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    for side in dict.fromkeys(r["side"] for r in rows):
        mine = [r for r in rows if r["side"] == side]
        out[side] = {k: statistics.fmean(r[k] for r in mine)
                     for k in ("test_auc", "test_ap", "epoch_wall_s", "epoch_cpu_s")}
        if all(r["test_mrr"] is not None for r in mine):
            out[side]["test_mrr"] = statistics.fmean(r["test_mrr"] for r in mine)
    return out


def run(args: argparse.Namespace) -> dict:
    """Both sides per seed; the JSON report."""
    ds = load_dataset(args.dataset, args.data_root)
    sides: list[Callable[..., dict]] = [run_fgnn] + ([] if args.fgnn_only else [run_pyg])
    rows = []
    for seed in args.seeds:
        split = make_split(ds.graph, seed)
        init = copy.deepcopy(init_encoder(ds.feat_dim, args, seed).state_dict())
        rank_neg = ranking_negatives(split, args.mrr_negatives, seed)
        for side in sides:
            rows.append({"seed": seed, **side(ds, split, init, args, seed, rank_neg)})
            _print_rows(rows[-1:])
    means = _means(rows)
    print(f"mean of {len(args.seeds)} seeds:")
    for side, m in means.items():
        print(f"  {side}: test AUC {m['test_auc']:.4f} AP {m['test_ap']:.4f}"
              + (f" MRR {m['test_mrr']:.4f}" if "test_mrr" in m else "")
              + f", epoch {1e3 * m['epoch_wall_s']:.1f} ms wall / "
                f"{1e3 * m['epoch_cpu_s']:.1f} ms CPU")
    if len(means) == 2:
        (fs, f), (ps, p) = means.items()
        print(f"fgnn - PyG: AUC {100 * (f['test_auc'] - p['test_auc']):+.2f} points; epoch time "
              f"fgnn / PyG: {f['epoch_wall_s'] / p['epoch_wall_s']:.2f}x wall, "
              f"{f['epoch_cpu_s'] / p['epoch_cpu_s']:.2f}x CPU")
    return {"bench": "linkpred", "dataset": args.dataset,
            "args": {k: v for k, v in vars(args).items() if k != "json"},
            "runs": rows, "mean": means}


def parse_args(argv: Optional[list[str]] = None) -> argparse.Namespace:
    """The command line (see the module docstring)."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_gae_arguments(p, graph="Cora")
    p.add_argument("--neg-ratio", type=int, default=1, help="negatives per training edge")
    p.add_argument("--fgnn-exclude", choices=("none", "self", "reverse"), default="reverse",
                   help="fgnn's exclusion of seed edges (PyG has none)")
    p.add_argument("--fgnn-frontier", choices=("all", "new"), default="new",
                   help="fgnn's KHop frontier (default new: the gae recipe's and PyG's loader's; "
                        "at full fanouts 'all' computes the same GCN)")
    p.add_argument("--pyg-conv", choices=("mean", "gcn"), default="mean",
                   help="mean: fgnn's GCN math; gcn: GCNConv's symmetric normalisation")
    p.add_argument("--pyg-negatives", choices=("shared", "native"), default="shared",
                   help="shared: fgnn's filtered uniform negatives as labelled edges; "
                        "native: LinkNeighborLoader's neg_sampling_ratio")
    p.add_argument("--mrr-negatives", type=int, default=100,
                   help="fixed negatives per test edge for MRR")
    p.add_argument("--fgnn-only", action="store_true", help="run fgnn's half only (no PyG)")
    p.add_argument("--json", default=None, help="write the report here")
    return p.parse_args(argv)


def main(argv: Optional[list[str]] = None) -> int:
    args = parse_args(argv)
    if not args.fgnn_only:
        why = pyg_missing()
        if why is not None:
            print(f"bench/linkpred.py: cannot run PyG's half: {why}; pass --fgnn-only for "
                  f"fgnn's half", file=sys.stderr)
            return 2
    torch.set_num_threads(1)
    out = run(args)
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())

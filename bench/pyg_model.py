"""PyG's ``GATConv`` through a ``Job`` against fgnn's GAT, on Cora, side by side (issue 39).

Both sides are the same :class:`fgnn.Job` with the same config: ``--model gat`` on Cora, so the
``velickovic`` recipe fills every setting (2 layers, 8 heads x 8 features, 1 output head,
dropout 0.6 on the input, between the layers and on the attention coefficients, lr 0.005,
weight decay 5e-4, 200 epochs, full neighbourhood, one batch of the training split), and the
seed given. fgnn's side builds its own :class:`fgnn.models.GAT` from that config; PyG's passes
``model=PyGGAT(...)``, two ``torch_geometric.nn.GATConv`` layers (their default self loops)
built from the same resolved settings and called on each block as PyG's layers are called,
bipartite: ``conv((h, h[:b.num_dst]), b.edge_index, size=b.size)`` (docs/api.md). The same
runtime samples, trains, validates (picking the best epoch) and scores the test split for both.

Prints one line per seed and side, the means and their gap (goal: PyG within 2 points of fgnn),
and one JSON object (``--json PATH`` writes it too). Without an importable ``torch_geometric``
it says so in one line and exits 1; it never substitutes anything.

Example (PyG installed in a folder of its own, not in the project's environment)::

    PYTHONPATH=.:PYG_SITE .venv/bin/python bench/pyg_model.py \\
        --data-root ../shared/data/planetoid --seeds 0,1,2,3,4 --json runs/pyg_gat.json
"""

from __future__ import annotations

import argparse
import io
import json
import sys
import time
from pathlib import Path
from typing import Any, Optional, Sequence

import torch
from torch import nn
from torch.nn import functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import fgnn  # noqa: E402
from fgnn.config import JobConfig, ModelConfig, RuntimeConfig, TrainConfig  # noqa: E402
from fgnn.recipes import resolve_recipe  # noqa: E402

REPO = Path(__file__).resolve().parents[1]


class PyGGAT(nn.Module):
    """Veličković et al.'s GAT of PyG's own ``GATConv`` layers on fgnn's sampled blocks: hidden
    layers of ``heads`` concatenated heads of ``hidden`` features (ELU after), an output layer
    of ``out_heads`` averaged heads of class logits; dropout ``input_dropout`` on the raw
    features, ``dropout`` on the hidden layers' input and on the attention coefficients."""

    def __init__(self, in_dim: int, num_classes: int, hidden: int = 8, heads: int = 8,
                 num_layers: int = 2, dropout: float = 0.6, input_dropout: float = 0.6,
                 out_heads: int = 1) -> None:
        super().__init__()
        from torch_geometric.nn import GATConv

        dims = [in_dim] + [hidden * heads] * (num_layers - 1)
        self.convs = nn.ModuleList(
            [GATConv(d, hidden, heads=heads, concat=True, dropout=dropout) for d in dims[:-1]]
            + [GATConv(dims[-1], num_classes, heads=out_heads, concat=False, dropout=dropout)])
        self.dropout, self.input_dropout = dropout, input_dropout

    def forward(self, blocks: Sequence[Any], x: torch.Tensor) -> torch.Tensor:
        """``x`` ``(M, F)`` features of the sample's input nodes -> ``(B, C)`` logits."""
        h = x
        for i, (conv, b) in enumerate(zip(self.convs, blocks)):
            h = F.dropout(h[:b.num_src], self.input_dropout if i == 0 else self.dropout,
                          self.training)
            h = conv((h, h[:b.num_dst]), b.edge_index, size=b.size)
            if i < len(self.convs) - 1:
                h = F.elu(h)
        return h


def gat_config(data_root: str, seed: int, epochs: Optional[int] = None,
               devices: int = 1) -> JobConfig:
    """The job of both sides: ``--model gat`` on Cora with ``seed`` (and ``epochs`` when
    given), the recipe resolved (``velickovic``)."""
    train = TrainConfig(seed=seed) if epochs is None else TrainConfig(seed=seed, epochs=epochs)
    return resolve_recipe(JobConfig(dataset="cora", data_root=data_root,
                                    model=ModelConfig(name="gat"), train=train,
                                    runtime=RuntimeConfig(devices=devices)))


def pyg_model_for(cfg: JobConfig, in_dim: int, num_classes: int) -> PyGGAT:
    """A :class:`PyGGAT` with the resolved settings of ``cfg`` (those fgnn's GAT is built
    with: :func:`fgnn.models.build_model`)."""
    m = cfg.model
    return PyGGAT(in_dim, num_classes, hidden=m.hidden, heads=m.heads,
                  num_layers=len(cfg.sampler.fanouts), dropout=m.dropout,
                  input_dropout=m.input_dropout)


def run_side(side: str, cfg: JobConfig) -> dict[str, Any]:
    """One job of ``side`` (``fgnn``: its GAT; ``pyg``: :class:`PyGGAT`) on a freshly loaded
    ``cfg.dataset`` (a job settles the dataset it runs on); its test and validation accuracy,
    the model the report names, and seconds."""
    from fgnn.data import load_dataset

    dataset = load_dataset(cfg.dataset, cfg.data_root)
    torch.manual_seed(cfg.train.seed)  # the PyG model's initial weights
    model = pyg_model_for(cfg, dataset.feat_dim, dataset.num_classes) if side == "pyg" else None
    t0 = time.perf_counter()
    job = fgnn.Job(cfg, model=model, dataset=dataset, progress=False, out=io.StringIO())
    result = job.run()
    return {"side": side, "seed": cfg.train.seed, "test_acc": float(result.final["test_acc"]),
            "val_acc": float(result.final["val_acc"]), "model": result.allocation.get("model"),
            "recipe": job.config.recipe, "seconds": round(time.perf_counter() - t0, 2)}


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Both sides for every seed; the table, the means, the gap and the JSON."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data-root", default=str(REPO.parent / "shared" / "data" / "planetoid"),
                    help="folder of the Planetoid files ind.cora.* (default: %(default)s)")
    ap.add_argument("--seeds", default="0,1,2,3,4", help="comma-separated (default: %(default)s)")
    ap.add_argument("--epochs", type=int, default=None,
                    help="override the recipe's 200 epochs (a quick check)")
    ap.add_argument("--json", default=None, help="also write the JSON object here")
    a = ap.parse_args(argv)
    try:
        import torch_geometric
    except ImportError as e:
        print(f"bench/pyg_model.py: torch_geometric is not importable ({e}); install it (e.g. "
              f"pip install --target DIR torch_geometric) and put DIR on PYTHONPATH")
        return 1
    seeds = [int(s) for s in a.seeds.split(",") if s.strip()]
    rows: list[dict[str, Any]] = []
    first = gat_config(a.data_root, seeds[0], a.epochs)
    print(f"Cora, {first.recipe} recipe: hidden {first.model.hidden} x {first.model.heads} heads, "
          f"dropout {first.model.dropout}/{first.model.input_dropout}, lr {first.train.lr}, "
          f"weight decay {first.train.weight_decay}, {first.train.epochs} epochs, fanouts "
          f"{','.join(map(str, first.sampler.fanouts))}, batch {first.train.batch_size}; "
          f"torch_geometric {torch_geometric.__version__}", flush=True)
    for seed in seeds:
        cfg = gat_config(a.data_root, seed, a.epochs)
        for side in ("fgnn", "pyg"):
            row = run_side(side, cfg)
            rows.append(row)
            print(f"seed {seed}  {side:4}  test {100 * row['test_acc']:.2f}  val "
                  f"{100 * row['val_acc']:.2f}  model {row['model']}  ({row['seconds']} s)",
                  flush=True)
    mean = {s: sum(r["test_acc"] for r in rows if r["side"] == s) / len(seeds)
            for s in ("fgnn", "pyg")}
    gap = round(100 * (mean["pyg"] - mean["fgnn"]), 2)
    print(f"mean test accuracy over seeds {a.seeds}: fgnn GAT {100 * mean['fgnn']:.2f}, PyG "
          f"GATConv through a Job {100 * mean['pyg']:.2f}; gap {gap:+.2f} points "
          f"({'within' if abs(gap) <= 2 else 'NOT within'} 2)")
    out = {"dataset": "cora", "recipe": first.recipe, "seeds": seeds,
           "epochs": first.train.epochs, "torch_geometric": torch_geometric.__version__,
           "runs": rows, "mean_test_acc": mean, "gap_points": round(gap, 2)}
    print(json.dumps(out))
    if a.json:
        Path(a.json).parent.mkdir(parents=True, exist_ok=True)
        Path(a.json).write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

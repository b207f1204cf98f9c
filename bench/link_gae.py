"""Link prediction in the GAE setting with the single-process loop (:func:`fgnn.link.fit_link`).

GAE (Kipf & Welling, 2016): the raw (binary) Planetoid features unless the spec says
``:normalize_features=true`` (as the ``gae`` recipe, :func:`gae_spec`), an 85/5/10 edge split, one
fixed negative per validation and test edge, a 2-layer GCN encoder (hidden 32, embeddings 16, no
dropout), a dot-product decoder, Adam with lr 0.01, 200 epochs. Training batches of edges draw one
filtered uniform negative each and sample the endpoints' full neighbourhood with the batch's edges
(both directions) excluded. Validation AUC picks the epoch; the test is scored with full-neighbour
embeddings over the training and validation edges. The GAE paper reports AUC 91.0 and AP 92.0 on
Cora, 89.5 and 89.9 on CiteSeer. One intra-op thread.

``--sample-cost`` times only the Sample stage of one training epoch with and without the
exclusion of seed edges, same batches and seeds, and prints the exclusion's cost as a share of
the stage (a column of issue 20) for each of ``--cost-fanouts`` and ``--cost-frontiers``.

Examples::

    PYTHONPATH=. python bench/link_gae.py --dataset cora --data-root ../shared/data/planetoid \\
        --seeds 0,1,2,3,4 --json out.json
    PYTHONPATH=. python bench/link_gae.py --data-root ../shared/data/planetoid --sample-cost \\
        --cost-fanouts '1000,1000;10,10;15,10,5' --json cost.json
"""

from __future__ import annotations

import argparse
import importlib
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Optional

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fgnn.config import TrainConfig  # noqa: E402
from fgnn.data import load_dataset  # noqa: E402
from fgnn.link import LinkNeighborSampler, build_decoder, fit_link, random_link_split  # noqa
from fgnn.models import GCN  # noqa: E402
from fgnn.monitor.dispatch_count import count_dispatch  # noqa: E402
from fgnn.recipes import GAE_RECIPE, recipe_for, with_spec_options  # noqa: E402


def gae_spec(spec: str) -> str:
    """``spec`` with the GAE recipe's dataset options on a Planetoid spec (the raw bag of words,
    ``cora`` -> ``cora:normalize_features=false``, as ``launch.py --task link``); others as
    given. Options typed in the spec win."""
    if recipe_for(spec, "gcn", "link") is GAE_RECIPE:
        return with_spec_options(spec, GAE_RECIPE.spec_options)
    return spec


def run(args: argparse.Namespace) -> dict:
    """Train once per seed (the split's seed too); the JSON report."""
    ds = load_dataset(gae_spec(args.dataset), args.data_root)
    rows = []
    for seed in args.seeds:
        start = time.perf_counter()
        split = random_link_split(ds.graph, val=0.05, test=0.10, seed=seed)
        torch.manual_seed(seed)
        enc = GCN(ds.feat_dim, args.dim, num_layers=2, hidden=args.hidden, dropout=0.0)
        hist = fit_link(ds.features, split, enc, build_decoder(args.decoder, args.dim),
                        LinkNeighborSampler(args.fanouts, exclude=args.exclude),
                        TrainConfig(epochs=args.epochs, batch_size=args.batch_size, lr=args.lr,
                                    seed=seed))
        rows.append({"seed": seed, "test_auc": hist.test_auc, "test_ap": hist.test_ap,
                     "best_epoch": hist.best_epoch, "time_s": time.perf_counter() - start})
        print(f"seed {seed}: test AUC {hist.test_auc:.4f} AP {hist.test_ap:.4f} "
              f"(best epoch {hist.best_epoch}, {rows[-1]['time_s']:.0f} s)", flush=True)
    mean = {k: sum(r[k] for r in rows) / len(rows) for k in ("test_auc", "test_ap")}
    print(f"mean of {len(rows)} seeds: test AUC {mean['test_auc']:.4f} AP {mean['test_ap']:.4f}")
    return {"dataset": gae_spec(args.dataset), "args": {k: v for k, v in vars(args).items()
                                              if k != "json"}, "runs": rows, "mean": mean}


def _best_epoch(samplers: dict, graph, pos: torch.Tensor, known, batch: int, reps: int,
                slots: Optional[dict] = None) -> dict[tuple[str, str], float]:
    """Per arm and clock (``cpu``: thread CPU time, ``wall``), the Sample stage of one epoch as
    the sum over its batches of each batch's best of ``reps`` rounds. Every batch runs in every
    arm back to back with the same generator seed (same negatives and draws), so a burst of
    load on the shared machine spoils one batch's round, not a whole epoch of one arm."""
    starts = range(0, pos.shape[1], batch)
    clocks = {"cpu": time.thread_time, "wall": time.perf_counter}
    best = {(m, c, i): float("inf") for m in samplers for c in clocks for i in starts}
    for _ in range(reps):
        for i in starts:
            for mode, sampler in samplers.items():
                for c, clock in clocks.items():
                    gen = torch.Generator().manual_seed(i)
                    t = clock()
                    sl = slots.get(mode)
                    sampler.sample(graph, pos[:, i:i + batch], gen, known,
                                   **({} if sl is None else {"slots": sl[i:i + batch]}))
                    best[mode, c, i] = min(best[mode, c, i], clock() - t)
    return {(m, c): sum(best[m, c, i] for i in starts) for m in samplers for c in clocks}


def sampler_at(ref: str) -> type:
    """``LinkNeighborSampler`` of ``fgnn/link/sampler.py``, ``_exclude.py`` and ``_fused.py``
    (where it exists) as of git ``ref`` (the rest of fgnn as checked out), for a before/after
    run of ``--sample-cost``."""
    repo, tmp = Path(__file__).resolve().parents[1], Path(tempfile.mkdtemp())
    tag = "ref_" + "".join(c if c.isalnum() else "_" for c in ref)
    for name in ("_exclude", "_fused", "sampler"):
        got = subprocess.run(["git", "-C", str(repo), "show", f"{ref}:fgnn/link/{name}.py"],
                             capture_output=True, text=True)
        if got.returncode != 0 and name == "_fused":  # before the in-draw exclusion
            continue
        got.check_returncode()
        src = got.stdout
        for mod in ("_exclude", "_fused"):
            src = src.replace(f"from fgnn.link.{mod} import", f"from {tag}_{mod} import")
        (tmp / f"{tag}_{name}.py").write_text(src)
    sys.path.insert(0, str(tmp))
    return importlib.import_module(f"{tag}_sampler").LinkNeighborSampler


def sample_cost(args: argparse.Namespace) -> dict:
    """The Sample stage of one training epoch (negatives included) with the seed edges
    excluded (``reverse``) and without, same batches and seeds, interleaved batch by batch
    over ``--reps`` rounds, each batch's best round per arm, summed (:func:`_best_epoch`); the
    exclusion's cost is the difference as a share of the
    stage without it. Timed in thread CPU time (the sampler runs on one thread; on a shared
    machine wall time mostly measures the other tenants), wall time alongside."""
    ds = load_dataset(args.dataset, args.data_root)
    split = random_link_split(ds.graph, val=0.05, test=0.10, seed=0)
    graph, known = split.graph("train"), split.known_edges("train")
    rows = []
    for fanouts, frontier in [(f, fr) for fr in args.cost_frontiers for f in args.cost_fanouts]:
        samplers = {m: LinkNeighborSampler(fanouts, exclude=m, frontier=frontier)
                    for m in ("reverse", "none")}
        if args.compare_ref:
            samplers["ref"] = sampler_at(args.compare_ref)(fanouts, exclude="reverse",
                                                           frontier=frontier)
        t = time.thread_time()  # once per split, like the graph: the training edges' slots
        slots = {"reverse": samplers["reverse"].slots(graph, split.train_pos)}
        slots_s = time.thread_time() - t
        best = _best_epoch(samplers, graph, split.train_pos, known, args.batch_size, args.reps,
                           slots)
        row = {"fanouts": list(fanouts), "frontier": frontier, "slots_once_cpu_s": slots_s}
        for mode, sampler in samplers.items():  # deterministic: tensor ops of the first batch
            pos = split.train_pos[:, :args.batch_size]
            kw = {} if slots.get(mode) is None else {"slots": slots[mode][:args.batch_size]}
            row[f"{mode}_ops"] = count_dispatch(sampler.sample, graph, pos,
                                                torch.Generator().manual_seed(0), known,
                                                **kw)[1].ops
        for c in ("cpu", "wall"):
            row[f"exclude_{c}_s"], row[f"none_{c}_s"] = best["reverse", c], best["none", c]
            row[f"cost_{c}_pct"] = 100.0 * (best["reverse", c] / best["none", c] - 1.0)
            if "ref" in samplers:
                row[f"ref_{c}_s"] = best["ref", c]
                row[f"ref_cost_{c}_pct"] = 100.0 * (best["ref", c] / best["none", c] - 1.0)
        rows.append(row)
    print(f"Sample stage of one epoch ({args.dataset}, {split.train_pos.shape[1]} training edges,"
          f" batches of {args.batch_size}, 1 negative each), best of {args.reps}; thread CPU ms")
    head = ("fanouts", "frontier", "with exclusion", "without", "exclusion cost, % of Sample stage",
            "(wall ms: with / without / %)", "tensor ops per batch: with / without / %")
    print(" | ".join(head))
    for r in rows:
        print(f"{','.join(map(str, r['fanouts']))} | {r['frontier']} | "
              f"{1e3 * r['exclude_cpu_s']:.2f} | "
              f"{1e3 * r['none_cpu_s']:.2f} | {r['cost_cpu_pct']:+.1f}% | "
              f"{1e3 * r['exclude_wall_s']:.2f} / {1e3 * r['none_wall_s']:.2f} / "
              f"{r['cost_wall_pct']:+.1f}% | {r['reverse_ops']} / {r['none_ops']} / "
              f"{100.0 * (r['reverse_ops'] / r['none_ops'] - 1):+.1f}%"
              + (f" | at {args.compare_ref}: {1e3 * r['ref_cpu_s']:.2f} ms CPU, "
                 f"{r['ref_cost_cpu_pct']:+.1f}%, {r['ref_ops']} ops" if "ref_ops" in r else ""))
    return {"bench": "link_exclusion_cost", "dataset": args.dataset,
            "compare_ref": args.compare_ref,
            "batch_size": args.batch_size, "reps": args.reps, "rows": rows}


def add_gae_arguments(p: argparse.ArgumentParser, graph: str = "Planetoid") -> None:
    """The GAE setting's flags (data, seeds, epochs, batch, lr, sizes, fanouts), shared by this
    bench and ``bench/linkpred.py``; ``graph`` names whose full neighbourhood the fanouts cover."""
    p.add_argument("--dataset", default="cora")
    p.add_argument("--data-root", default=None)
    p.add_argument("--seeds", type=lambda s: [int(x) for x in s.split(",")], default=[0])
    p.add_argument("--epochs", type=int, default=200)
    p.add_argument("--batch-size", type=int, default=512, help="training edges per step")
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--hidden", type=int, default=32)
    p.add_argument("--dim", type=int, default=16, help="embedding size")
    p.add_argument("--fanouts", type=lambda s: tuple(int(x) for x in s.split(",")),
                   default=(1000, 1000), help=f"default: the full neighbourhood of {graph}")


def main(argv: Optional[list[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_gae_arguments(p)
    p.add_argument("--decoder", choices=("dot", "mlp"), default="dot")
    p.add_argument("--exclude", choices=("none", "self", "reverse"), default="reverse")
    p.add_argument("--sample-cost", action="store_true",
                   help="only time the Sample stage with and without seed-edge exclusion")
    p.add_argument("--reps", type=int, default=20, help="rounds of --sample-cost")
    p.add_argument("--cost-fanouts", default=[(1000, 1000), (10, 10), (15, 10, 5)],
                   type=lambda s: [tuple(int(x) for x in f.split(",")) for f in s.split(";")],
                   help="--sample-cost: fanouts to time, ';'-separated (default "
                        "'1000,1000;10,10;15,10,5')")
    p.add_argument("--cost-frontiers", default=["all"], type=lambda s: s.split(","),
                   help="--sample-cost: KHop frontiers to time, ','-separated (default 'all'; "
                        "'all,new' adds PyG's frontier, where only the seeds' hop is checked)")
    p.add_argument("--compare-ref", default=None,
                   help="--sample-cost: also time the exclusion of fgnn/link/sampler.py and "
                        "_exclude.py as of this git ref (a before/after in one run)")
    p.add_argument("--json", default=None, help="write the report here")
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    out = sample_cost(args) if args.sample_cost else run(args)
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Layer-wise full-graph inference against per-vertex full-neighbour evaluation, side by side.

Example::

    python bench/inference.py \\
        --dataset rmat:scale=20,edge_factor=16,feat_dim=128,num_classes=16,seed=0 \\
        --model sage --hidden 256 --json out.json

Runs :func:`fgnn.inference.layerwise_inference` for every vertex of the graph (an untrained model
with seeded weights: the cost does not depend on the weights) and reports its wall time and the
process's peak resident memory (``resource.getrusage``, the dataset included). The baseline is
what inference costs without it: per-vertex evaluation (``FullNeighborSampler`` + model forward,
:mod:`fgnn.training`) of ``--check`` random vertices, in batches of ``--check-batch``. Its time is
extrapolated to all vertices for the ratio, and its logits are compared with the layer-wise ones
(max abs diff).
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fgnn.config import ModelConfig  # noqa: E402
from fgnn.data import load_dataset  # noqa: E402
from fgnn.inference import layerwise_inference  # noqa: E402
from fgnn.models import build_model  # noqa: E402
from fgnn.sampling.fixed_walk import FixedRandomWalk  # noqa: E402
from fgnn.training import FullNeighborSampler, extract_features  # noqa: E402

GIB = 2 ** 30


def peak_rss_bytes() -> int:
    """This process's peak resident set (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def current_rss_bytes() -> int:
    """This process's resident set now."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize()


def run(args: argparse.Namespace) -> dict:
    torch.set_num_threads(args.threads)
    t0 = time.perf_counter()
    ds = load_dataset(args.dataset)
    load_s = time.perf_counter() - t0
    rss_load, peak_load = current_rss_bytes(), peak_rss_bytes()
    layers = args.layers or {"gcn": 3, "sage": 2, "pinsage": 3}[args.model]
    torch.manual_seed(0)
    model = build_model(ModelConfig(args.model, hidden=args.hidden), ds.feat_dim,
                        ds.num_classes, layers).eval()

    t0 = time.perf_counter()
    logits = layerwise_inference(model, ds.graph, ds.features, batch_size=args.batch_size,
                                 memory_budget=int(args.memory_budget_gib * GIB),
                                 progress=args.progress)
    infer_s = time.perf_counter() - t0
    peak_infer = peak_rss_bytes()

    gen = torch.Generator().manual_seed(1)
    check = torch.randperm(ds.num_nodes, generator=gen)[:args.check]
    sampler = (FixedRandomWalk(num_layers=layers) if args.model == "pinsage"
               else FullNeighborSampler(layers))
    t0 = time.perf_counter()
    with torch.no_grad():
        ref = torch.cat([model(s.blocks, extract_features(ds.features, s.input_nodes))
                         for s in (sampler.sample(ds.graph, c)
                                   for c in torch.split(check, args.check_batch))])
    per_vertex_s = time.perf_counter() - t0
    per_vertex_all_s = per_vertex_s / check.numel() * ds.num_nodes
    return {
        "dataset": args.dataset, "nodes": ds.num_nodes, "edges": ds.graph.num_edges,
        "model": args.model, "layers": layers, "hidden": args.hidden,
        "batch_size": args.batch_size, "memory_budget_gib": args.memory_budget_gib,
        "threads": args.threads, "load_s": load_s, "rss_after_load_gib": rss_load / GIB,
        "peak_rss_after_load_gib": peak_load / GIB, "layerwise_s": infer_s,
        "peak_rss_gib": peak_infer / GIB, "logits_shape": list(logits.shape),
        "check_vertices": int(check.numel()), "per_vertex_s": per_vertex_s,
        "per_vertex_all_extrapolated_s": per_vertex_all_s,
        "speedup_vs_per_vertex": per_vertex_all_s / infer_s,
        "max_abs_diff": float((logits[check] - ref).abs().max()),
    }


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--dataset", default="rmat:scale=20,edge_factor=16,feat_dim=128,"
                                        "num_classes=16,seed=0")
    p.add_argument("--model", default="sage", choices=("gcn", "sage", "pinsage"))
    p.add_argument("--layers", type=int, default=None,
                   help="default: 3 for gcn and pinsage, 2 for sage (FGNN §7.1)")
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--batch-size", type=int, default=4096)
    p.add_argument("--memory-budget-gib", type=float, default=1.0)
    p.add_argument("--threads", type=int, default=1,
                   help="intra-op threads (1: the CI cores are shared; more spin under load)")
    p.add_argument("--check", type=int, default=64, help="vertices scored per vertex")
    p.add_argument("--check-batch", type=int, default=16)
    p.add_argument("--progress", action="store_true")
    p.add_argument("--json", default=None, help="write the results here")
    args = p.parse_args(argv)
    result = run(args)
    print(f"{result['nodes']:,} nodes, {result['edges']:,} edges, {args.model} "
          f"{result['layers']} layers hidden {args.hidden}")
    print(f"layer-wise: {result['layerwise_s']:.1f}s for all vertices, peak RSS "
          f"{result['peak_rss_gib']:.2f} GiB (after load {result['rss_after_load_gib']:.2f} GiB)")
    print(f"per-vertex: {result['per_vertex_s']:.2f}s for {result['check_vertices']} vertices, "
          f"{result['per_vertex_all_extrapolated_s']:.0f}s extrapolated to all -> layer-wise "
          f"{result['speedup_vs_per_vertex']:.1f}x faster; max |diff| "
          f"{result['max_abs_diff']:.2e}")
    print(json.dumps(result))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())

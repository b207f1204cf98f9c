"""Sample-stage throughput: fgnn's samplers, and its k-hop sampler against PyG's NeighborLoader.

Measures sampled edges per second over the whole Sample stage (neighbour selection + dedup +
remap to local ids) for one epoch of ``--num-seeds`` seeds in batches of ``--batch-size``:

* ``fgnn``: the ``--sampler`` (``khop``: :class:`fgnn.sampling.KHop`; ``weighted``: edge-weight
  proportional k-hop; ``walk``: PinSAGE random walks, FGNN §7.1's 4 walks of length 3, top 5,
  3 layers; ``locality``: Song & Jiang's locality-aware k-hop with the ``--local-frac``
  highest-degree vertices as the local set and scale ``--scale``) at ``--threads`` torch threads
  (default 1, as PyG's sampler runs one thread per loader). On CPU tensors this is the twin
  :func:`fgnn.sampling.kernels.kernel_for` picks (``fgnn_kernel``): the compiled one (numba)
  when it is installed, else the vectorised CPU twin;
* ``fgnn_vectorised_twin``: the same with the vectorised CPU twin forced (``use_kernel("cpu")``);
* ``fgnn_thread_curve``: the same at each thread count of ``--thread-curve`` (default 1,2; the
  count equal to all of torch's threads is also ``fgnn_max_threads``);
* ``fgnn_cuda_twin``: the same sampler with the CUDA twin of the kernels forced on the CPU
  (``use_kernel("cuda")``, at ``--threads``): what the CPU would run with the GPU-minded
  kernels, the figure of the CPU sampler before the twins were split (issue 28);
* ``pyg``: ``torch_geometric.loader.NeighborLoader`` on the same graph, fanouts and batches, for
  ``--sampler khop`` only. Without torch_geometric and a sampling backend (pyg-lib or
  torch-sparse) the bench stops with the reason; ``--no-pyg`` measures fgnn alone;
* the machine's limit: random reads of the CSR ``indices`` per second (a gather at random
  positions), every sampled edge needing at least one; fgnn's rate is reported as a fraction;
* launches and host syncs (what bounds a sampler on a GPU), counted on one batch with
  :class:`fgnn.monitor.dispatch_count.DispatchCounter` for the CUDA twin (``dispatch``; budget
  for k-hop 15,10,5: at most 300 ops and 2 syncs per hop) and the vectorised CPU twin
  (``dispatch_cpu_twin``);
* ``weighted_selection``: the weighted neighbour selection alone
  (:func:`fgnn.sampling.khop.sample_weighted`) with the compiled twin and with the vectorised
  CPU twin forced, at ``--threads``, on the rows and fanouts of every hop of weighted k-hop
  samples of the first ``WEIGHTED_BATCHES`` batches, alternating for ``--rounds`` rounds: edges
  per second of each (best round) and ``compiled_over_vectorised``; ``null`` with the reason
  when the graph has no edge weights or numba is not installed;
* ``fanout_1000_hop_s``: one uniform hop at fanout 1000 from the 100 highest-degree vertices,
  best of ``--rounds`` (budget 0.05 s on a 2-core CPU, ``fanout_1000_hop_over_budget``: the
  work per hop in Python must not grow with the fanout);
* ``huge_fanout``: a two-hop k-hop sample at fanout 100000 on both hops (far above every
  degree: each vertex keeps all of its neighbours) of the first 140 seeds, best of
  ``--rounds``, its edges, and its rate as a share of the headline figure's
  (``huge_fanout_rate_over_fgnn``: a fanout the degree clamps costs what its edges cost; the old
  sampler ran for minutes at fanout 100000 on Cora).

The machine may be shared, so fgnn (each thread count, each twin) and PyG alternate for
``--rounds`` rounds in one run and the best round of each is compared (all rounds are in the
JSON, with CPU seconds beside the wall clock).

Usage::

    PYTHONPATH=. python bench/sampling.py --dataset rmat:scale=20,edge_factor=16,feat_dim=1 \\
        --fanouts 15,10,5 --batch-size 8000 --num-seeds 80000 --json out.json
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from typing import Any, Callable, Optional

import torch

from fgnn.data import load_dataset
from fgnn.graph import CSRGraph
from fgnn.sampling import KHop, LocalityAwareKHop, RandomWalk, Sampler
from fgnn.sampling.kernels import kernel_for, use_kernel

DEFAULT_SPEC = "rmat:scale=20,edge_factor=16,feat_dim=1,seed=0"


def _timed(fn: Callable[[], int]) -> dict[str, float]:
    wall, cpu = time.perf_counter(), time.process_time()
    edges = fn()
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    return {"edges": int(edges), "seconds": wall, "cpu_seconds": cpu,
            "edges_per_s": edges / wall if wall > 0 else float("nan")}


SAMPLERS = ("khop", "weighted", "walk", "locality")


def make_sampler(kind: str, fanouts: list[int], graph: CSRGraph, local_frac: float = 0.1,
                 scale: float = 2.0) -> Sampler:
    """The fgnn sampler ``kind`` names (see the module docstring).

    Raises:
        ValueError: an unknown kind, or ``weighted`` on a graph without edge weights.
    """
    if kind == "khop":
        return KHop(fanouts)
    if kind == "weighted":
        if graph.weights is None:
            raise ValueError("--sampler weighted needs edge weights; the dataset has none")
        return KHop(fanouts, weighted=True)
    if kind == "walk":
        return RandomWalk()
    if kind == "locality":
        k = int(local_frac * graph.num_nodes)
        local = torch.argsort(graph.degrees(), descending=True, stable=True)[:k]
        return LocalityAwareKHop(fanouts, local=local, scale=scale)
    raise ValueError(f"--sampler must be one of {', '.join(SAMPLERS)}, got {kind!r}")


def fgnn_epoch(graph: CSRGraph, seeds: torch.Tensor, fanouts: list[int], batch_size: int,
               seed: int, sampler: Optional[Sampler] = None) -> int:
    """Sample one epoch (``sampler``, KHop by default); return the number of sampled edges."""
    sampler = sampler if sampler is not None else KHop(fanouts)
    gen = torch.Generator().manual_seed(seed)
    edges = 0
    for lo in range(0, seeds.numel(), batch_size):
        edges += sampler.sample(graph, seeds[lo:lo + batch_size], gen).num_edges
    return edges


def pyg_backend() -> tuple[Optional[str], str]:
    """``("pyg-lib" | "torch-sparse" | ..., "")`` when NeighborLoader can sample, else
    ``(None, why not)``.

    When the ``torch_sparse`` package is installed but its Python module cannot be imported (it
    needs ``torch_scatter``, which the peer install script does not build), its compiled
    ``neighbor_sample`` op is loaded directly and PyG is told torch-sparse is present:
    NeighborLoader then runs the very same C++ kernel (``"torch-sparse (ops only)"``).
    """
    try:
        import torch_geometric.typing as tgt
    except Exception as err:  # noqa: BLE001 - any import failure means "not available"
        return None, f"torch_geometric cannot be imported ({type(err).__name__}: {err})"
    if getattr(tgt, "WITH_PYG_LIB", False):
        return "pyg-lib", ""
    if getattr(tgt, "WITH_TORCH_SPARSE", False):
        return "torch-sparse", ""
    import glob
    import importlib.util
    import os

    spec = importlib.util.find_spec("torch_sparse")
    if spec is None or not spec.submodule_search_locations:
        return None, "torch_geometric has no sampling backend (neither pyg-lib nor torch-sparse)"
    libs = glob.glob(os.path.join(list(spec.submodule_search_locations)[0],
                                  "_neighbor_sample_cpu*.so"))
    if not libs:
        return None, "torch-sparse has no compiled neighbor_sample op"
    try:
        torch.ops.load_library(libs[0])
        torch.ops.torch_sparse.neighbor_sample  # noqa: B018 - raises if not registered
    except Exception as err:  # noqa: BLE001
        return None, f"torch-sparse's neighbor_sample op cannot be loaded ({err})"
    tgt.WITH_TORCH_SPARSE = True
    return "torch-sparse (ops only)", ""


def make_pyg_loader(graph: CSRGraph, seeds: torch.Tensor, fanouts: list[int],
                    batch_size: int) -> Any:
    """A NeighborLoader over a ``Data`` holding the same graph (row = destination)."""
    from torch_geometric.data import Data
    from torch_geometric.loader import NeighborLoader

    data = Data(edge_index=graph.edge_index(), num_nodes=graph.num_nodes)
    return NeighborLoader(data, num_neighbors=list(fanouts), batch_size=batch_size,
                          input_nodes=seeds, shuffle=False, num_workers=0)


def pyg_epoch(loader: Any) -> int:
    """Iterate the loader once; return the number of sampled edges."""
    return sum(int(batch.edge_index.size(1)) for batch in loader)


def gather_rate(graph: CSRGraph, n: int = 10_000_000, seed: int = 0, rounds: int = 3) -> float:
    """Random reads of ``graph.indices`` per second (best of ``rounds``)."""
    gen = torch.Generator().manual_seed(seed)
    pos = torch.randint(0, max(graph.num_edges, 1), (n,), generator=gen)
    best = 0.0
    for _ in range(rounds):
        t = time.perf_counter()
        graph.indices.index_select(0, pos)
        best = max(best, n / (time.perf_counter() - t))
    return best


def dispatch_counts(sampler: Sampler, graph: CSRGraph, seeds: torch.Tensor,
                    seed: int, kernel: Optional[str] = "cuda") -> dict[str, Any]:
    """Aten ops and host syncs of one ``sampler.sample`` of ``seeds``, per sample and per hop,
    with the ``kernel`` twin (default the CUDA one, whose launches and syncs are budgeted)."""
    from fgnn.monitor.dispatch_count import count_dispatch

    with use_kernel(kernel):
        sample, c = count_dispatch(sampler.sample, graph, seeds,
                                   torch.Generator().manual_seed(seed))
    hops = max(sample.num_layers, 1)
    return {"seeds": int(seeds.numel()), "hops": sample.num_layers, "ops": c.ops,
            "syncs": c.syncs, "ops_per_hop": c.ops / hops, "syncs_per_hop": c.syncs / hops,
            "sync_ops": dict(c.sync_ops)}


def fanout_hop_seconds(graph: CSRGraph, fanout: int = 1000, rows: int = 100,
                       rounds: int = 3) -> float:
    """Best time of one uniform hop at ``fanout`` from the ``rows`` highest-degree vertices."""
    from fgnn.sampling.khop import sample_uniform

    top = torch.argsort(graph.degrees(), descending=True, stable=True)[:rows]
    best = float("inf")
    for r in range(rounds):
        t = time.perf_counter()
        sample_uniform(graph, top, fanout, torch.Generator().manual_seed(r))
        best = min(best, time.perf_counter() - t)
    return best


#: Batches whose hops ``weighted_selection`` replays.
WEIGHTED_BATCHES = 4


def weighted_selection(graph: CSRGraph, seeds: torch.Tensor, fanouts: list[int],
                       batch_size: int, seed: int, rounds: int) -> dict[str, Any]:
    """Edges per second of :func:`~fgnn.sampling.khop.sample_weighted` alone with the
    compiled and the vectorised CPU twin, on the ``(rows, fanout)`` of every hop of weighted
    k-hop samples of the first :data:`WEIGHTED_BATCHES` batches of ``seeds`` (best of
    ``rounds``, the twins alternating); ``{"skipped": why}`` when it cannot run."""
    from fgnn.sampling import khop_compiled
    from fgnn.sampling.khop import row_max_weights, sample_weighted

    if graph.weights is None:
        return {"skipped": "the graph has no edge weights"}
    if not khop_compiled.available():
        return {"skipped": "numba is not installed (or FGNN_COMPILED=0): no compiled twin"}
    gen = torch.Generator().manual_seed(seed)
    sampler = KHop(fanouts, weighted=True)
    hops = []
    for lo in range(0, min(seeds.numel(), WEIGHTED_BATCHES * batch_size), batch_size):
        sample = sampler.sample(graph, seeds[lo:lo + batch_size], gen)
        for block, k in zip(sample.blocks, reversed(fanouts)):  # blocks[0]: the last hop
            hops.append((sample.input_nodes[: block.num_dst].clone(), k))
    row_max = row_max_weights(graph)

    def epoch() -> int:
        return sum(int(sample_weighted(graph, rows, k, torch.Generator().manual_seed(i),
                                       row_max)[0].numel())
                   for i, (rows, k) in enumerate(hops))

    runs: dict[str, list[dict[str, float]]] = {"compiled": [], "cpu": []}
    for r in range(rounds + 1):  # round 0 warms up (numba's compile or cache load)
        for kernel, out in runs.items():
            with use_kernel(kernel):
                res = _timed(epoch)
            if r:
                out.append(res)
    best = {k: _best(v) for k, v in runs.items()}
    return {"hops": len(hops), "rows": int(sum(h[0].numel() for h in hops)),
            "compiled": best["compiled"], "vectorised": best["cpu"],
            "compiled_over_vectorised": (best["compiled"]["edges_per_s"]
                                         / best["cpu"]["edges_per_s"])}


#: The ``fanout_1000_hop_s`` budget on a 2-core CPU (seconds).
FANOUT_1000_HOP_BUDGET_S = 0.05


def huge_fanout_sample(graph: CSRGraph, seeds: torch.Tensor, fanout: int = 100_000,
                       rounds: int = 3) -> dict[str, Any]:
    """Best time of a two-hop k-hop sample of ``seeds`` at ``fanout`` on both hops, with its
    edges and edges per second."""
    sampler = KHop([fanout, fanout])
    best, edges = float("inf"), 0
    for r in range(rounds):
        t = time.perf_counter()
        edges = sampler.sample(graph, seeds, torch.Generator().manual_seed(r)).num_edges
        best = min(best, time.perf_counter() - t)
    return {"fanouts": [fanout, fanout], "seeds": int(seeds.numel()), "seconds": best,
            "edges": int(edges), "edges_per_s": edges / best if best > 0 else float("nan")}


def _per_cpu_s(r: dict[str, float]) -> float:
    """Edges per CPU second of a measurement (steadier than the wall clock on a shared box)."""
    return r["edges"] / r["cpu_seconds"] if r["cpu_seconds"] > 0 else float("nan")


def _best(rounds: list[dict[str, float]]) -> dict[str, Any]:
    top = max(rounds, key=lambda r: r["edges_per_s"])
    return {**top, "rounds": rounds}


def main(argv: Optional[list[str]] = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--dataset", default=DEFAULT_SPEC, help="dataset spec (fgnn.data.load_dataset)")
    p.add_argument("--root", default=None, help="data root for file-based specs")
    p.add_argument("--fanouts", default="15,10,5", help="comma-separated, seeds' hop first")
    p.add_argument("--batch-size", type=int, default=8000)
    p.add_argument("--num-seeds", type=int, default=80000)
    p.add_argument("--rounds", type=int, default=3, help="alternating fgnn/PyG epochs")
    p.add_argument("--threads", type=int, default=1,
                   help="torch intra-op threads of the headline fgnn figure (default 1)")
    p.add_argument("--thread-curve", default="1,2",
                   help="comma-separated torch thread counts to measure fgnn at (default 1,2)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--sampler", choices=SAMPLERS, default="khop",
                   help="fgnn sampler to measure (PyG is compared for khop only)")
    p.add_argument("--local-frac", type=float, default=0.1,
                   help="locality: share of vertices (highest degree) in the local set")
    p.add_argument("--scale", type=float, default=2.0, help="locality: scale factor s >= 1")
    p.add_argument("--no-pyg", action="store_true", help="measure fgnn alone (no PyG)")
    p.add_argument("--json", default=None, help="write the results here")
    args = p.parse_args(argv)

    fanouts = [int(f) for f in args.fanouts.split(",") if f.strip()]
    if not fanouts or any(f <= 0 for f in fanouts):
        p.error(f"--fanouts must be positive ints, got {args.fanouts!r}")
    for name in ("batch_size", "num_seeds", "rounds"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
    if args.threads < 1:
        p.error(f"--threads must be >= 1, got {args.threads}")
    try:
        curve = sorted({int(t) for t in args.thread_curve.split(",") if t.strip()})
    except ValueError:
        curve = [0]
    if not curve or curve[0] < 1:
        p.error(f"--thread-curve must be positive ints, got {args.thread_curve!r}")
    max_threads = torch.get_num_threads()
    threads = args.threads

    t = time.perf_counter()
    ds = load_dataset(args.dataset, root=args.root) if args.root else load_dataset(args.dataset)
    graph = ds.graph
    load_s = time.perf_counter() - t
    if args.num_seeds > graph.num_nodes:
        p.error(f"--num-seeds {args.num_seeds} exceeds the graph's {graph.num_nodes} nodes")
    seeds = torch.randperm(graph.num_nodes, generator=torch.Generator().manual_seed(args.seed))
    seeds = seeds[: args.num_seeds]
    print(f"{ds.name}: {graph}  (loaded in {load_s:.1f}s); threads={threads}/{max_threads}",
          flush=True)

    if args.sampler != "khop" and not args.no_pyg:
        p.error(f"PyG is compared for --sampler khop only; pass --no-pyg to measure "
                f"--sampler {args.sampler}")
    sampler = make_sampler(args.sampler, fanouts, graph, args.local_frac, args.scale)
    backend = None
    if not args.no_pyg:
        backend, why = pyg_backend()
        if backend is None:
            p.error(f"PyG NeighborLoader unavailable: {why}; install it or pass --no-pyg")
    loader = None
    if backend is not None:
        t = time.perf_counter()
        loader = make_pyg_loader(graph, seeds, fanouts, args.batch_size)
        print(f"PyG NeighborLoader ({backend}) built in {time.perf_counter() - t:.1f}s",
              flush=True)

    def run_fgnn(nthreads: int, kernel: Optional[str] = None) -> dict[str, float]:
        prev = torch.get_num_threads()
        torch.set_num_threads(nthreads)
        try:
            with use_kernel(kernel):
                return _timed(lambda: fgnn_epoch(graph, seeds, fanouts, args.batch_size,
                                                 args.seed, sampler))
        finally:
            torch.set_num_threads(prev)

    # warm-up (allocates the remap scratch array, faults pages of the topology in)
    fgnn_epoch(graph, seeds[: args.batch_size], fanouts, args.batch_size, args.seed, sampler)
    if loader is not None:
        next(iter(loader))
    with use_kernel("cuda"):  # the CUDA twin's warm-up
        fgnn_epoch(graph, seeds[: args.batch_size], fanouts, args.batch_size, args.seed, sampler)
    if kernel_for(seeds, work=args.batch_size * fanouts[0]) == "compiled":
        with use_kernel("compiled"):  # its warm-up: numba's import and compile (or cache load)
            fgnn_epoch(graph, seeds[: args.batch_size], fanouts, args.batch_size, args.seed,
                       sampler)
    ours, theirs, twin, vec = [], [], [], []
    by_threads: dict[int, list[dict[str, float]]] = {n: [] for n in curve}
    for r in range(args.rounds):
        ours.append(run_fgnn(threads))
        for n in curve:
            by_threads[n].append(ours[-1] if n == threads else run_fgnn(n))
        twin.append(run_fgnn(threads, "cuda"))
        vec.append(run_fgnn(threads, "cpu"))
        if loader is not None:
            prev = torch.get_num_threads()
            torch.set_num_threads(threads)  # same threads as the headline fgnn figure
            try:
                theirs.append(_timed(lambda: pyg_epoch(loader)))
            finally:
                torch.set_num_threads(prev)
        print(f"round {r}: fgnn {ours[-1]['edges_per_s'] / 1e6:.2f} M edges/s"
              + "".join(f", fgnn@{n} threads {v[-1]['edges_per_s'] / 1e6:.2f}"
                        for n, v in by_threads.items() if n != threads)
              + f", vectorised CPU twin {vec[-1]['edges_per_s'] / 1e6:.2f}"
              + f", CUDA twin on CPU {twin[-1]['edges_per_s'] / 1e6:.2f}"
              + (f", PyG {theirs[-1]['edges_per_s'] / 1e6:.3f}" if theirs else ""), flush=True)
    prev = torch.get_num_threads()
    torch.set_num_threads(threads)
    reads = gather_rate(graph)
    counts = dispatch_counts(sampler, graph, seeds[: args.batch_size], args.seed)
    counts_cpu = dispatch_counts(sampler, graph, seeds[: args.batch_size], args.seed, "cpu")
    hop_1000 = fanout_hop_seconds(graph, rounds=args.rounds)
    weighted = weighted_selection(graph, seeds, fanouts, args.batch_size, args.seed,
                                  args.rounds)
    huge = huge_fanout_sample(graph, seeds[:140], rounds=args.rounds)
    torch.set_num_threads(prev)

    res_fgnn = _best(ours)
    res_curve = {str(n): _best(v) for n, v in by_threads.items()}
    res_fgnn1 = res_curve.get(str(max_threads))
    res_twin = _best(twin)
    res_vec = _best(vec)
    kernel = kernel_for(seeds)  # the twin of the large hops (small ones: the vectorised one)
    res_pyg = _best(theirs) if theirs else None
    ratio = (res_fgnn["edges_per_s"] / res_pyg["edges_per_s"]) if res_pyg else None
    result: dict[str, Any] = {
        "bench": "sampling",
        "dataset": args.dataset,
        "sampler": args.sampler,
        "sampler_repr": repr(sampler),
        "num_nodes": graph.num_nodes,
        "num_edges": graph.num_edges,
        "fanouts": fanouts,
        "batch_size": args.batch_size,
        "num_seeds": args.num_seeds,
        "threads": threads,
        "max_threads": max_threads,
        "fgnn": res_fgnn,
        "fgnn_max_threads": res_fgnn1,
        "fgnn_thread_curve": res_curve,
        "fgnn_kernel": kernel,
        "fgnn_vectorised_twin": res_vec,
        "fgnn_cuda_twin": res_twin,
        "fgnn_over_vectorised_twin": res_fgnn["edges_per_s"] / res_vec["edges_per_s"],
        "cpu_twin_over_cuda_twin": res_fgnn["edges_per_s"] / res_twin["edges_per_s"],
        "cpu_twin_over_cuda_twin_cpu_s": _per_cpu_s(res_fgnn) / _per_cpu_s(res_twin),
        "pyg": res_pyg,
        "pyg_backend": backend,
        "ratio_fgnn_over_pyg": ratio,
        "batch_time_ratio_pyg_over_fgnn": (res_pyg["seconds"] / res_fgnn["seconds"]
                                           if res_pyg else None),
        "random_reads_per_s": reads,
        "fgnn_fraction_of_random_reads": res_fgnn["edges_per_s"] / reads,
        "dispatch": counts,
        "dispatch_cpu_twin": counts_cpu,
        "weighted_selection": None if "skipped" in weighted else weighted,
        "weighted_selection_skipped": weighted.get("skipped"),
        "fanout_1000_hop_s": hop_1000,
        "fanout_1000_hop_over_budget": hop_1000 / FANOUT_1000_HOP_BUDGET_S,
        "huge_fanout": huge,
        "huge_fanout_rate_over_fgnn": huge["edges_per_s"] / res_fgnn["edges_per_s"],
        "machine": {"python": platform.python_version(), "torch": torch.__version__,
                    "platform": platform.platform(), "cpus": torch.get_num_threads()},
    }

    name = type(sampler).__name__
    rows = ([(f"fgnn {name} ({threads} thr)", res_fgnn)]
            + [(f"fgnn {name} ({n} thr)", res_curve[str(n)]) for n in curve if n != threads]
            + [(f"fgnn {name}, vectorised CPU twin ({threads} thr)", res_vec),
               (f"fgnn {name}, CUDA twin ({threads} thr)", res_twin),
               (f"PyG NeighborLoader ({backend or 'n/a'})", res_pyg)])
    nb = -(-args.num_seeds // args.batch_size)
    print(f"\n{'sampler':34s} {'edges':>12s} {'wall s':>8s} {'cpu s':>8s} {'M edges/s':>10s} "
          f"{'batches/s':>10s}")
    for name, r in rows:
        if r is None:
            if name.startswith("PyG"):
                print(f"{name:38s} {'null':>12s}")
            continue
        print(f"{name:38s} {r['edges']:12d} {r['seconds']:8.2f} {r['cpu_seconds']:8.2f} "
              f"{r['edges_per_s'] / 1e6:10.2f} {nb / r['seconds']:10.2f}")
    print(f"ratio fgnn / PyG (edges/s): {'null' if ratio is None else f'{ratio:.1f}x'}"
          + ("" if res_pyg is None else f"; batches/s: "
             f"{res_pyg['seconds'] / res_fgnn['seconds']:.1f}x"))
    print("(fgnn re-samples every vertex of the sample at each hop, DGL/GNNLab blocks; PyG "
          "samples each vertex once, so its batches hold fewer edges)")
    print(f"random reads of indices: {reads / 1e6:.1f} M/s; fgnn at "
          f"{result['fgnn_fraction_of_random_reads']:.1%} of it")
    print(f"fgnn ({kernel} twin) / CUDA twin on this CPU: "
          f"{result['cpu_twin_over_cuda_twin']:.2f}x (edges/s), "
          f"{result['cpu_twin_over_cuda_twin_cpu_s']:.2f}x (edges per CPU second); / vectorised "
          f"CPU twin: {result['fgnn_over_vectorised_twin']:.2f}x")
    for twin_name, c in (("CUDA", counts), ("vectorised CPU", counts_cpu)):
        print(f"{twin_name} twin, per sample of {c['seeds']} seeds: {c['ops']} aten ops, "
              f"{c['syncs']} host syncs ({c['ops_per_hop']:.0f} ops, {c['syncs_per_hop']:.1f} "
              f"syncs per hop: {c['sync_ops']})")
    if "skipped" in weighted:
        print(f"weighted selection, compiled vs vectorised twin: skipped ({weighted['skipped']})")
    else:
        wc, wv = weighted["compiled"], weighted["vectorised"]
        print(f"weighted selection alone ({weighted['hops']} hops, {weighted['rows']} rows, "
              f"{wc['edges']} edges): compiled twin {wc['edges_per_s'] / 1e6:.2f} M edges/s, "
              f"vectorised CPU twin {wv['edges_per_s'] / 1e6:.2f}: "
              f"{weighted['compiled_over_vectorised']:.2f}x")
    print(f"one hop at fanout 1000 from the 100 highest-degree vertices: {hop_1000:.4f} s "
          f"({result['fanout_1000_hop_over_budget']:.2f}x the {FANOUT_1000_HOP_BUDGET_S} s "
          f"budget)")
    print(f"two hops at fanout 100000 (every neighbour) from {huge['seeds']} seeds: "
          f"{huge['seconds']:.4f} s, {huge['edges']} edges, "
          f"{huge['edges_per_s'] / 1e6:.2f} M edges/s "
          f"({result['huge_fanout_rate_over_fgnn']:.2f}x the headline rate)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=2)
    return result


if __name__ == "__main__":
    main(sys.argv[1:])

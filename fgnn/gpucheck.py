"""One command for a lent GPU: ``python -m fgnn.gpucheck --out DIR``.

Runs, in at most 8 minutes on one H100, every check the CUDA path has and writes
``DIR/gpucheck.json``, ``DIR/gpucheck.md`` (rows for ``docs/benchmarks.md``) and
``DIR/trace.json`` (a torch.profiler Chrome trace):

1. ``gpu_tests``: the ``gpu``-marked tests (``pytest -m gpu``), when the repository's tests are
   next to the package and pytest is installed;
2. ``sampler``: k-hop sampling (fanouts 15,10,5) on R-MAT scale 20 on the device over batches
   that are never empty (:func:`batch_seeds`): edges/s beside the device's own random-gather
   rate of ``indices`` (the limit), and the aten ops / host syncs of one sample
   (:mod:`fgnn.monitor.dispatch_count`);
3. ``extract``: feature-store gathers from the device cache (hits) and from host memory
   (misses), GB/s each, timed apart from the host-side split, and a 30% cache's hit rate on the
   sampled batches;
4. ``executors``: a :class:`~fgnn.executors.sampler.SamplerExecutor` and a
   :class:`~fgnn.executors.trainer.TrainerExecutor` built in this process on the device (plain
   classes: no Ray), sampling, extracting and training a few tasks, with the extraction of the
   next task in a thread on the copy stream as the Trainer does it, under torch.profiler: the
   trace and the seconds of copy/compute overlap;
5. ``epochs``: single, time-sharing and factored epochs through ``launch.py`` with
   ``--gpus-per-device 0.5`` (one GPU holds every device), only where Ray is installed.

Parts 2-4 need only torch and numpy. Without CUDA the command exits 2 with one line, unless
``--device cpu``: a dry run of parts 2-4 on the CPU on a smaller graph (CI runs it with
``--quick``). Every part records its own error instead of stopping the others; the exit status
is 1 when any part failed.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import platform
import subprocess
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Optional

import numpy as np
import torch

if TYPE_CHECKING:
    from fgnn.executors.task_record import TaskRecord

__all__ = ["batch_seeds", "check_extract", "check_peer", "check_sampler", "main",
           "seed_pool"]

REPO = Path(__file__).resolve().parents[1]
FANOUTS = (15, 10, 5)
MODES = ("single", "time-sharing", "factored")
HEAVY = ("ray", "scipy", "pandas", "matplotlib")
BUDGET_S = 470.0  # the whole command within 8 minutes


def _sizes(device: torch.device, quick: bool) -> dict[str, int]:
    """Graph and loop sizes: the issue's R-MAT scale 20 on CUDA, a small graph on the CPU."""
    if device.type == "cuda":
        return {"scale": 20, "feat_dim": 128, "batch": 8000, "batches": 10, "reads": 10_000_000,
                "tasks": 6}
    if quick:
        return {"scale": 12, "feat_dim": 32, "batch": 500, "batches": 2, "reads": 200_000,
                "tasks": 3}
    return {"scale": 14, "feat_dim": 64, "batch": 1000, "batches": 4, "reads": 1_000_000,
            "tasks": 4}


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _best_seconds(fn: Callable[[], Any], device: torch.device, rounds: int = 3) -> float:
    best = float("inf")
    for _ in range(rounds):
        _sync(device)
        t = time.perf_counter()
        fn()
        _sync(device)
        best = min(best, time.perf_counter() - t)
    return best


# ------------------------------------------------------------------ parts
def check_gpu_tests(device: torch.device, timeout_s: float) -> dict[str, Any]:
    """``pytest -m gpu`` in a subprocess: exit status and pytest's summary line."""
    if device.type != "cuda":
        return {"skipped": "--device cpu (the gpu tests need CUDA)"}
    tests = REPO / "tests"
    if not tests.is_dir():
        return {"skipped": f"no tests/ next to the package ({tests})"}
    if importlib.util.find_spec("pytest") is None:
        return {"skipped": "pytest is not installed"}
    t = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-m", "gpu", str(tests)],
                          cwd=REPO, capture_output=True, text=True, timeout=timeout_s)
    lines = [ln for ln in proc.stdout.splitlines() if ln.strip()]
    return {"rc": proc.returncode, "summary": lines[-1] if lines else proc.stderr[-500:],
            "seconds": time.perf_counter() - t, "ok": proc.returncode == 0}


def batch_seeds(order: torch.Tensor, batch: int, i: int) -> torch.Tensor:
    """The ``i``-th batch of ``batch`` distinct seeds of ``order``: each pass over ``order``
    (pass 0 in its order, later ones reshuffled) is cut into ``len(order) // batch`` full
    batches, its remainder dropped, so no batch is empty or short whatever the split's size
    (10 batches of 8000 from a 10,486-id split were 1 full batch, 1 partial and 8 empty ones).

    Raises:
        ValueError: ``batch`` is not in ``[1, len(order)]``.
    """
    n = int(order.numel())
    if not 1 <= batch <= n:
        raise ValueError(f"batch must be in [1, {n}] (the seeds available), got {batch!r}")
    per_pass = n // batch
    r, j = divmod(int(i), per_pass)
    if r == 0:
        return order[j * batch:(j + 1) * batch]
    perm = torch.randperm(n, generator=torch.Generator().manual_seed(r))
    return order[perm[j * batch:(j + 1) * batch].to(order.device)]


def seed_pool(train_idx: torch.Tensor, num_nodes: int, batch: int) -> tuple[torch.Tensor, str]:
    """Where a sampler benchmark of ``batch`` seeds draws them: the training split when it
    holds ``batch`` ids, else every vertex (32000 seeds exceed R-MAT scale 20's 10,486 training
    ids); ``(ids shuffled, "train" or "all vertices")``."""
    gen = torch.Generator().manual_seed(0)
    if train_idx.numel() >= batch:
        return train_idx[torch.randperm(train_idx.numel(), generator=gen)], "train"
    return torch.randperm(num_nodes, generator=gen), "all vertices"


def check_sampler(graph: Any, train_idx: torch.Tensor, device: torch.device,
                  sizes: dict[str, int], batch: Optional[int] = None) -> dict[str, Any]:
    """Sampled edges/s over ``sizes["batches"]`` never-empty batches of ``batch`` seeds
    (default ``sizes["batch"]``), the device's random-gather rate of ``indices``, ops and
    syncs of one sample."""
    from fgnn.monitor.dispatch_count import count_dispatch
    from fgnn.sampling import KHop
    from fgnn.sampling.kernels import use_kernel

    sampler = KHop(list(FANOUTS))
    gen = torch.Generator(device).manual_seed(0)
    b = int(sizes["batch"] if batch is None else batch)
    order, pool = seed_pool(train_idx, graph.num_nodes, b)
    order = order.to(device)
    seeds = [batch_seeds(order, b, i) for i in range(sizes["batches"])]
    sampler.sample(graph, seeds[0], gen)  # warm-up: scratch array, allocator, kernels
    _sync(device)
    t = time.perf_counter()
    per_batch = [sampler.sample(graph, s, gen).num_edges for s in seeds]
    _sync(device)
    seconds = time.perf_counter() - t
    edges = sum(int(e) for e in per_batch)
    pos = torch.randint(0, max(graph.num_edges, 1), (sizes["reads"],), device=device,
                        generator=torch.Generator(device).manual_seed(1))
    reads = sizes["reads"] / _best_seconds(lambda: graph.indices.index_select(0, pos), device)
    with use_kernel("cuda"):  # the budgeted twin, also in the CPU dry run
        sample, counter = count_dispatch(sampler.sample, graph, seeds[0], gen)
    return {"fanouts": list(FANOUTS), "batch_size": b, "batches": len(seeds),
            "train_ids": int(train_idx.numel()), "seed_pool": pool,
            "edges_per_batch": [int(e) for e in per_batch],
            "edges": edges, "seconds": seconds, "edges_per_s": edges / seconds,
            "random_reads_per_s": reads, "fraction_of_random_reads": edges / seconds / reads,
            "ops_per_sample": counter.ops, "syncs_per_sample": counter.syncs,
            "sync_ops": dict(counter.sync_ops), "hops": sample.num_layers}


def check_extract(features: torch.Tensor, inputs: list[torch.Tensor],
                  device: torch.device) -> dict[str, Any]:
    """Feature extraction of a 30% cache (rows 0 .. 0.3 N cached), timed apart from the
    host-side split of a batch into tiers: hits (rows gathered from the device cache, positions
    already on the device), misses (host rows gathered and copied to the device) and the split
    (ids checked and looked up on the host, :meth:`FeatureStore.count`), each alone, beside a
    whole :meth:`FeatureStore.gather` of each kind; and the cache's hit rate over the sampled
    batches' input vertices."""
    from fgnn.cache.feature_store import FeatureStore, load_cache, upload

    n = features.shape[0]
    hot = torch.zeros(n)
    hot[: int(0.3 * n)] = 1.0
    store = FeatureStore.single(features, load_cache(hot, 0.3, features, device), device)
    cached = int(0.3 * n)
    rows = min(cached, n - cached, 200_000)
    gen = torch.Generator().manual_seed(2)
    hit_ids = torch.randint(0, cached, (rows,), generator=gen)
    miss_ids = cached + torch.randint(0, n - cached, (rows,), generator=gen)
    row_bytes = features.shape[1] * features.element_size()
    gb = rows * row_bytes / 1e9
    buf = store.buffers[store.local]
    hit_pos = upload(store.lookup.positions(store.local, hit_ids), device)
    times = {"hit": _best_seconds(lambda: buf.index_select(0, hit_pos), device),
             "miss": _best_seconds(lambda: store._read_host(miss_ids), device),
             "split": _best_seconds(lambda: store.count(hit_ids), device),
             "gather_hit": _best_seconds(lambda: store.gather(hit_ids), device),
             "gather_miss": _best_seconds(lambda: store.gather(miss_ids), device)}
    store.reset_stats()
    for ids in inputs:
        store.count(ids.cpu())
    st = store.reset_stats()
    total = st.hits + st.peer + st.misses
    return {"rows": rows, "row_bytes": row_bytes, "cache_ratio": 0.3,
            "hit_gb_per_s": gb / times["hit"], "miss_gb_per_s": gb / times["miss"],
            "split_rows_per_s": rows / times["split"],
            "gather_hit_gb_per_s": gb / times["gather_hit"],
            "gather_miss_gb_per_s": gb / times["gather_miss"],
            "seconds": times, "batches": len(inputs),
            "hit_rate": (st.hits + st.peer) / total if total else None}


def _peer_reader(handle: Any, spec: dict[str, Any], conn: Any) -> None:
    """The reading side of :func:`check_peer`, in a spawned process: open the exported buffer
    on ``spec["device"]``, check its bytes, and time random-row gathers from it beside the
    same gathers from a host matrix (the miss path: host gather, pinned upload) and from a
    copy on this device (a local hit)."""
    from fgnn.cache.feature_store import FeatureStore
    from fgnn.cache.peer_share import PeerShareError, open_buffer

    try:
        dev = torch.device(spec["device"])
        if dev.type == "cuda":
            torch.cuda.set_device(dev)
        t = time.perf_counter()
        try:
            buf = open_buffer(handle)
        except PeerShareError as err:
            conn.send({"refused": str(err)})
            return
        opened_s = time.perf_counter() - t
        rows, batch = buf.shape[0], spec["batch"]
        ids = torch.randint(0, rows, (batch,), generator=torch.Generator().manual_seed(3))
        pos = ids.to(buf.device)
        same = bool(torch.equal(buf.index_select(0, pos[:1000])[:, 0].cpu(),
                                ids[:1000].to(buf.dtype)))
        host = torch.zeros(rows, buf.shape[1], dtype=buf.dtype)
        miss = FeatureStore.single(host, None, dev)
        local = buf.to(dev, copy=True)
        gb = batch * buf.shape[1] * buf.element_size() / 1e9
        fns = {"peer": lambda: buf.index_select(0, pos), "host": lambda: miss._read_host(ids),
               "local": lambda: local.index_select(0, pos)}
        for fn in fns.values():  # warm up (thread pools, allocator, first page faults)
            _best_seconds(fn, dev, 2)
        times = {k: float("inf") for k in fns}
        for _ in range(5):  # the three take turns: a loaded host's drift hits them alike
            for k, fn in fns.items():
                times[k] = min(times[k], _best_seconds(fn, dev, 1))
        conn.send({"same_bytes": same, "open_s": opened_s, "reader": str(dev),
                   "mapped_on": str(buf.device), "seconds": times,
                   **{f"{k}_gb_per_s": gb / v for k, v in times.items()}})
    except Exception as err:  # noqa: BLE001 - reported by the exporter
        conn.send({"error": f"{type(err).__name__}: {err}"})


def check_peer(device: torch.device, rows: int, dim: int, batch: int,
               timeout_s: float = 120.0) -> dict[str, Any]:
    """The peer tier across two processes (:mod:`fgnn.cache.peer_share`): this process
    exports a ``(rows, dim)`` float32 buffer on ``device`` (CUDA IPC; on the CPU a
    shared-memory segment), a spawned process opens it (on a second GPU when there is one:
    NVLink or PCIe peer access, else on the same GPU) and gathers ``batch`` random rows: GB/s
    beside the same gather from host memory with its upload (the miss path) and from a local
    copy. A refused open is the result, with its reason."""
    import multiprocessing as mp

    from fgnn.cache.peer_share import export_buffer, release, shared_empty

    buf = shared_empty((rows, dim), torch.float32, device)
    buf.copy_(torch.arange(rows, dtype=torch.float32, device=device)[:, None].expand(rows, dim))
    _sync(device)
    handle = export_buffer(buf)
    reader = device
    if device.type == "cuda" and torch.cuda.device_count() > 1:
        reader = torch.device("cuda", (device.index or 0) + 1 if (device.index or 0) + 1
                              < torch.cuda.device_count() else 0)
    ctx = mp.get_context("spawn")
    ours, theirs = ctx.Pipe()
    proc = ctx.Process(target=_peer_reader, args=(handle, {"device": str(reader),
                                                           "batch": batch}, theirs))
    t = time.perf_counter()
    proc.start()
    try:
        got = (ours.recv() if ours.poll(timeout_s) else
               {"error": f"the reader did not answer in {timeout_s:.0f} s"})
    finally:
        proc.join(30)
        if proc.is_alive():
            proc.kill()
        release(handle)
    got.update({"kind": handle.kind, "exporter": str(device), "rows": rows, "dim": dim,
                "batch": batch, "same_gpu": reader == device,
                "wall_s": time.perf_counter() - t})
    return got


def _overlap_seconds(events: list[Any]) -> Optional[float]:
    """Seconds in which a device copy (memcpy) and a compute kernel ran at once."""
    copies, kernels = [], []
    for e in events:
        if getattr(e, "device_type", None) != torch.autograd.DeviceType.CUDA:
            continue
        span = (e.time_range.start, e.time_range.end)
        (copies if "memcpy" in e.name.lower() else kernels).append(span)
    if not copies or not kernels:
        return None
    return _intersection(_union(copies), _union(kernels)) / 1e6


def _union(spans: list[tuple[float, float]]) -> list[tuple[float, float]]:
    out: list[list[float]] = []
    for a, b in sorted(spans):
        if out and a <= out[-1][1]:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return [(a, b) for a, b in out]


def _intersection(x: list[tuple[float, float]], y: list[tuple[float, float]]) -> float:
    i = j = 0
    total = 0.0
    while i < len(x) and j < len(y):
        total += max(0.0, min(x[i][1], y[j][1]) - max(x[i][0], y[j][0]))
        if x[i][1] < y[j][1]:
            i += 1
        else:
            j += 1
    return total


def _executor_pair(ds: Any, device: torch.device, batch: int
                   ) -> tuple[Any, Any, Callable[[int], Any], Callable[[Any], float]]:
    """``(sampler, trainer, fetch, train)`` for :func:`check_executors`: ``fetch(task)``
    samples and extracts a task, ``train(batch)`` runs one Adam step on it (returns the loss)."""
    import torch.nn.functional as F

    from fgnn.executors.sampler import SamplerExecutor
    from fgnn.executors.task_record import TaskRecord
    from fgnn.executors.trainer import TrainerExecutor
    from fgnn.models import GCN
    from fgnn.sampling import KHop

    smp = SamplerExecutor(ds.graph, KHop(list(FANOUTS)), ds.train_idx, batch, seed=0,
                          device=str(device))
    model = GCN(ds.feat_dim, ds.num_classes, num_layers=len(FANOUTS), hidden=64)
    trn = TrainerExecutor(ds.features, ds.labels, model, None, 0, ps=None, queue=None,
                          device=str(device))
    opt = torch.optim.Adam(trn.model.parameters(), lr=1e-3)

    def fetch(task: int) -> Any:
        sample, s, m = smp.sample(0, task)
        return trn._extract(task, sample, TaskRecord(S=s, M=m))

    def train(batch: Any) -> float:
        trn.copies.wait(batch.ready, batch.tensors())
        opt.zero_grad()
        loss = F.cross_entropy(trn.model(batch.sample.blocks, batch.x), batch.labels)
        loss.backward()
        opt.step()
        return float(loss.detach())

    return smp, trn, fetch, train


def _pipelined_steps(fetch: Callable[[int], Any], train: Callable[[Any], float], tasks: int
                     ) -> tuple[list[float], list[TaskRecord]]:
    """Train tasks ``0 .. tasks - 1`` while a thread fetches the next one (the Trainer's
    prefetch); ``(losses, per-batch records)``."""
    losses, recs = [], []
    batch = fetch(0)
    for task in range(1, tasks + 1):
        nxt: dict[str, Any] = {}

        def prefetch(i: int = task, into: dict[str, Any] = nxt) -> None:
            try:
                into["batch"] = fetch(i)
            except BaseException as err:  # noqa: BLE001 - re-raised in this thread
                into["error"] = err

        worker = threading.Thread(target=prefetch)
        worker.start()  # the Trainer's prefetch: extract task i while task i - 1 trains
        losses.append(train(batch))
        recs.append(batch.rec)
        worker.join()
        if "error" in nxt:
            raise nxt["error"]
        batch = nxt["batch"]
    return losses, recs


def check_executors(ds: Any, device: torch.device, sizes: dict[str, int],
                    out: Path) -> dict[str, Any]:
    """A Sampler and a Trainer executor in this process on ``device``: tasks sampled,
    extracted (next task in a thread on the copy stream) and trained, under torch.profiler."""
    from torch.profiler import ProfilerActivity, profile

    tasks = sizes["tasks"]
    batch = max(1, min(sizes["batch"], ds.train_idx.numel() // (tasks + 1)))  # tasks + 1 fit
    smp, trn, fetch, train = _executor_pair(ds, device, batch)
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    t = time.perf_counter()
    with profile(activities=acts) as prof:
        losses, recs = _pipelined_steps(fetch, train, tasks)
        _sync(device)
    seconds = time.perf_counter() - t
    trace = out / "trace.json"
    prof.export_chrome_trace(str(trace))
    overlap = _overlap_seconds(list(prof.events())) if device.type == "cuda" else None
    return {"device": str(trn.device), "sampler_device": str(smp.device), "batch_size": batch,
            "tasks": tasks, "seconds": seconds, "losses": losses,
            "extract_s": [r.extract_s for r in recs],
            "trace": trace.name, "copy_compute_overlap_s": overlap,
            "overlap_note": (None if device.type == "cuda"
                             else "CPU dry run: no device streams, overlap not measured")}


def check_epochs(device: torch.device, spec: str, out: Path, deadline: float
                 ) -> dict[str, Any]:
    """single, time-sharing and factored epochs through launch.py on one GPU (Ray only), each
    given an equal share of the time left before ``deadline`` (``time.perf_counter()``)."""
    if device.type != "cuda":
        return {"skipped": "--device cpu (the Ray epochs run on a GPU)"}
    if importlib.util.find_spec("ray") is None:
        return {"skipped": "no ray"}
    launch = REPO / "launch.py"
    if not launch.is_file():
        return {"skipped": f"no launch.py next to the package ({launch})"}
    res: dict[str, Any] = {}
    for left, mode in zip(range(len(MODES), 0, -1), MODES):
        timeout_s = (deadline - time.perf_counter()) / left
        if timeout_s < 20:
            res[mode] = {"skipped": "out of the 8-minute budget"}
            continue
        devices = "1" if mode == "single" else "2"
        report = out / f"epochs-{mode}.json"
        cmd = [sys.executable, str(launch), "--dataset", spec, "--mode", mode,
               "--devices", devices, "--gpus-per-device", "0.5", "--epochs", "2",
               "--no-progress", "--report", str(report)]
        t = time.perf_counter()
        try:
            proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True,
                                  timeout=timeout_s)
        except subprocess.TimeoutExpired:
            res[mode] = {"error": f"timed out after {timeout_s:.0f} s", "cmd": cmd}
            continue
        entry: dict[str, Any] = {"rc": proc.returncode, "wall_s": time.perf_counter() - t,
                                 "ok": proc.returncode == 0}
        if report.is_file():
            epochs = json.loads(report.read_text()).get("epochs", [])
            entry["epoch_s"] = [e.get("time_s") for e in epochs]
        else:
            entry["tail"] = (proc.stdout + proc.stderr)[-800:]
        res[mode] = entry
    return res


def _batch_inputs(graph: Any, train_idx: torch.Tensor, batch: int, i: int) -> torch.Tensor:
    """Input vertices of the ``i``-th k-hop sample of ``batch`` training seeds (never empty:
    :func:`batch_seeds`)."""
    from fgnn.sampling import KHop

    order, _ = seed_pool(train_idx, graph.num_nodes, batch)
    seeds = batch_seeds(order.to(graph.device), batch, i)
    return KHop(list(FANOUTS)).sample(graph, seeds,
                                      torch.Generator(graph.device).manual_seed(i)).input_nodes


# ------------------------------------------------------------------ report
def _run(results: dict[str, Any], name: str, fn: Callable[[], dict[str, Any]]) -> None:
    t = time.perf_counter()
    print(f"gpucheck: {name} ...", flush=True)
    try:
        results[name] = fn()
    except Exception as err:  # noqa: BLE001 - one part's failure must not stop the others
        results[name] = {"error": f"{type(err).__name__}: {err}",
                         "traceback": traceback.format_exc()[-2000:]}
    results[name]["part_s"] = time.perf_counter() - t


def _fmt(x: Any, spec: str) -> str:
    return "n/a" if x is None else format(x, spec)  # n/a: not measured (CPU dry run)


def markdown(results: dict[str, Any]) -> str:
    """Markdown rows of ``results`` for docs/benchmarks.md."""
    env = results["environment"]
    lines = [f"gpucheck {env['date']} on {env['device_name']} (torch {env['torch']}, "
             f"{results['dataset']})", "", "| check | result |", "|---|---|"]

    def row(name: str, text: str) -> None:
        lines.append(f"| {name} | {text} |")

    for part in ("gpu_tests", "sampler", "extract", "executors", "epochs"):
        r = results.get(part, {})
        if "error" in r:
            row(part, f"error: {r['error']}")
        elif "skipped" in r:
            row(part, f"skipped: {r['skipped']}")
        elif part == "gpu_tests":
            row(part, r["summary"])
        elif part == "sampler":
            row("sampler edges/s", f"{r['edges_per_s'] / 1e6:.2f} M "
                f"({r['fraction_of_random_reads']:.1%} of {r['random_reads_per_s'] / 1e6:.0f} M "
                f"random reads/s of indices); {r['ops_per_sample']} ops, "
                f"{r['syncs_per_sample']} syncs per sample of {r['batch_size']} seeds")
        elif part == "extract":
            row("extract GB/s", f"hit {r['hit_gb_per_s']:.3g}, miss {r['miss_gb_per_s']:.3g} "
                f"(split apart: {r['split_rows_per_s'] / 1e6:.3g} M rows/s; whole gather: hit "
                f"{r['gather_hit_gb_per_s']:.3g}, miss {r['gather_miss_gb_per_s']:.3g}); "
                f"hit rate {_fmt(r['hit_rate'], '.1%')} at cache ratio {r['cache_ratio']}")
        elif part == "executors":
            row("executors in process", f"{r['tasks']} tasks on {r['device']} in "
                f"{r['seconds']:.2f} s; copy/compute overlap "
                f"{_fmt(r['copy_compute_overlap_s'], '.4f')} s (trace: {r['trace']})")
        else:
            for mode in MODES:
                e = r.get(mode, {})
                text = (f"error: {e['error']}" if "error" in e else
                        f"skipped: {e['skipped']}" if "skipped" in e else
                        f"rc {e.get('rc')}, epoch seconds {e.get('epoch_s', e.get('tail'))}")
                row(f"epochs {mode} (--gpus-per-device 0.5)", text)
    return "\n".join(lines) + "\n"


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m fgnn.gpucheck",
                                description="Every check of the CUDA path on one lent GPU.")
    p.add_argument("--out", required=True, metavar="DIR", help="where the JSON, markdown and "
                   "profiler trace go (created)")
    p.add_argument("--device", default="cuda:0", help="cuda:N (default cuda:0), or cpu: a dry "
                   "run of the in-process parts on the CPU")
    p.add_argument("--quick", action="store_true", help="smallest sizes (CI's CPU dry run)")
    p.add_argument("--skip-tests", action="store_true", help="do not run pytest -m gpu")
    p.add_argument("--skip-epochs", action="store_true", help="do not run the Ray epochs")
    return p


def main(argv: Optional[list[str]] = None) -> int:
    """Run the checks; returns 0 (all ran or were skipped), 1 (a part failed), 2 (no CUDA)."""
    args = _parser().parse_args(argv)
    try:
        device = torch.device(args.device)
    except RuntimeError as err:
        print(f"gpucheck: bad --device {args.device!r}: {err}", file=sys.stderr)
        return 2
    if device.type != "cpu" and not torch.cuda.is_available():
        print(f"gpucheck: no CUDA device (torch {torch.__version__}: "
              f"torch.cuda.is_available() is False); pass --device cpu for a dry run",
              file=sys.stderr)
        return 2
    if device.type not in ("cpu", "cuda"):
        print(f"gpucheck: --device must be cuda[:N] or cpu, got {args.device!r}",
              file=sys.stderr)
        return 2
    if device.type == "cpu":
        torch.set_num_threads(1)  # as the executors do: spinning threads stall a shared CPU
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    sizes = _sizes(device, args.quick)
    spec = f"rmat:scale={sizes['scale']},edge_factor=16,feat_dim={sizes['feat_dim']},seed=0"
    results: dict[str, Any] = {
        "environment": {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                        "device": str(device), "python": platform.python_version(),
                        "torch": torch.__version__, "numpy": np.__version__,
                        "device_name": (torch.cuda.get_device_name(device)
                                        if device.type == "cuda" else platform.processor()
                                        or platform.machine()),
                        "ray_installed": importlib.util.find_spec("ray") is not None},
        "dataset": spec, "sizes": sizes}
    t0 = time.perf_counter()
    if args.skip_tests:
        results["gpu_tests"] = {"skipped": "--skip-tests"}
    else:
        _run(results, "gpu_tests", lambda: check_gpu_tests(device, 150.0))

    from fgnn.data import load_dataset

    ds = load_dataset(spec)
    graph = ds.graph.to(device)
    _run(results, "sampler", lambda: check_sampler(graph, ds.train_idx, device, sizes))
    inputs = [_batch_inputs(graph, ds.train_idx, sizes["batch"], i) for i in range(3)]
    _run(results, "extract", lambda: check_extract(ds.features, inputs, device))
    _run(results, "executors", lambda: check_executors(ds, device, sizes, out))
    results["heavy_modules_in_process"] = [m for m in HEAVY if m in sys.modules]
    if args.skip_epochs:
        results["epochs"] = {"skipped": "--skip-epochs"}
    else:
        _run(results, "epochs", lambda: check_epochs(device, spec, out, t0 + BUDGET_S))
    results["seconds"] = time.perf_counter() - t0
    failed = [k for k, v in results.items() if isinstance(v, dict) and "error" in v]
    results["failed"] = failed
    (out / "gpucheck.json").write_text(json.dumps(results, indent=2, default=str))
    (out / "gpucheck.md").write_text(markdown(results))
    print(markdown(results), end="")
    print(f"gpucheck: wrote {out / 'gpucheck.json'} and {out / 'gpucheck.md'} "
          f"in {results['seconds']:.0f} s" + (f"; failed: {', '.join(failed)}" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

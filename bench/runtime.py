"""Side-by-side benchmark of the runtime's modes: factored vs time-sharing vs single (FGNN §7),
and of the feature placements across Trainers: replicate vs Song & Jiang Algorithm 1.

Runs each mode (and each placement, ``--placements``) on the same dataset and device-memory
budget in one process and prints, per run, the epoch time, the bytes moved host→device per epoch
(feature rows read from the host tier *plus* the samples: factored and single mode copy every
sample from the host-memory queue to the Trainer's device, time-sharing samples on the device),
the rows served per tier (the Trainer's own cache, a peer device's cache, host memory) and the
stage times (Sample = S + M + C, Extract, Train), then the ratios against the first run. It also
reports the factored design's own overheads (FGNN Table 5 / §7.3): M + C on the Samplers and the
part of the Trainers' queue calls and sample fetches that their prefetch did not hide
(``overhead``: the mean of the two per-executor fractions of the epoch), apart from time a
Trainer starved waiting for samples (``starve``, a pipeline imbalance rather than an overhead).
A second table (and ``overheads`` in the JSON) breaks this down per epoch: M, C, the Trainers'
queue calls and queue waits, the part of the waits spent while the pipeline fills at the start
of the epoch, and each as a share of executor-time (:func:`epoch_overheads`).

Examples::

    .venv/bin/python bench/runtime.py --dataset rmat:scale=16,edge_factor=16,feat_dim=128 \\
        --devices 4 --modes factored,time-sharing,single --device-memory 0.03 --epochs 3 \\
        --json runs/bench_runtime.json
    .venv/bin/python bench/runtime.py --devices 4 --samplers 1 --modes factored \\
        --placements replicate,algorithm1 --json runs/bench_placement.json

On CPU the devices are Ray logical GPUs sharing the host's cores, so absolute times are those of
the CPU; bytes host→device, rows per tier and the overhead fractions are the meaningful
comparisons. A "peer" read is counted where the placement puts the row on another Trainer's
device; the CPU emulation serves it from the host copy (the same bytes).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path
from typing import Any, Optional

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

import ray  # noqa: E402

from fgnn.config import (MODES, PLACEMENTS, CacheConfig, JobConfig,  # noqa: E402
                         ModelConfig, RuntimeConfig, SamplerConfig, TrainConfig)
from fgnn.data import load_dataset  # noqa: E402
from fgnn.runtime.driver import Runtime  # noqa: E402
from fgnn.raystart import local_system_config  # noqa: E402

__all__ = ["run_mode", "summarize", "main"]


def _job(args: argparse.Namespace, mode: str, placement: str = "replicate") -> JobConfig:
    return JobConfig(
        dataset=args.dataset, data_root=args.root,
        model=ModelConfig(args.model, hidden=args.hidden, dropout=0.0),
        sampler=SamplerConfig(fanouts=tuple(args.fanouts)),
        cache=CacheConfig(policy=args.cache_policy, device_memory_gib=args.device_memory,
                          cache_ratio=args.cache_ratio, placement=placement,
                          peer_cost=args.peer_cost),
        train=TrainConfig(epochs=args.epochs, batch_size=args.batch_size, lr=0.003, seed=0),
        runtime=RuntimeConfig(mode=mode, devices=args.devices, samplers=args.samplers,
                              queue_size=args.queue_size, switching=not args.no_switching))


def summarize(result: Any, details: list[dict[str, Any]], skip_first: bool) -> dict[str, Any]:
    """Mean per-epoch numbers of a run (the first epoch left out when ``skip_first`` and more
    than one epoch ran: actor warm-up)."""
    epochs = [e for e in result.epochs if not e.warmup]  # the warm-up epochs run uncached
    dets = [d for d in details if not d["warmup"]]
    if skip_first and len(epochs) > 1:
        epochs, dets = epochs[1:], dets[1:]
    n = len(epochs)

    def mean(xs: list[float]) -> float:
        return sum(xs) / len(xs) if xs else float("nan")

    t = mean([e.time_s for e in epochs])
    a = result.allocation
    n_s = max(1, a["samplers"])
    n_t = max(1, a["trainers"]) if result.mode != "single" else 1
    mc = mean([e.sample.M + e.sample.C for e in epochs])
    rpc = mean([d["exposed_queue_s"] for d in dets])
    starve = mean([e.queue_wait_s for e in epochs])
    if result.mode == "single":  # one device does both halves one after the other
        overhead_frac = (mc + rpc) / t
        starve_frac = starve / t
    else:
        overhead_frac = 0.5 * (mc / (n_s * t) + rpc / (n_t * t))
        starve_frac = starve / (n_t * t)
    # the cache ratio the Trainers of this mode ran with (a device holding the topology: less)
    alpha = a.get("alpha_resident" if result.mode in ("time-sharing", "single") else "alpha",
                  float("nan"))
    rows = {t: mean([e.tier_rows[t] for e in epochs]) for t in ("local", "peer", "host")}
    lookups = sum(rows.values())
    return {
        "mode": result.mode, "placement": a.get("placement"), "epochs_measured": n,
        "allocation": a, "alpha": alpha,
        "epoch_time_s": t,
        # host -> device per epoch: feature rows from the host tier plus the samples
        "bytes_host_to_device": mean([e.bytes_host_to_device for e in epochs]),
        "feature_bytes_host_to_device": mean([e.tier_bytes["host"] for e in epochs]),
        "sample_bytes_host_to_device": mean([e.sample_bytes for e in epochs]),
        "tier_rows": rows,
        "tier_share": {t: (r / lookups if lookups else float("nan")) for t, r in rows.items()},
        "tier_bytes": {t: mean([e.tier_bytes[t] for e in epochs]) for t in rows},
        "hit_rate": mean([e.hit_rate for e in epochs]),
        "sample_s": {"total": mean([e.sample.total for e in epochs]),
                     "S": mean([e.sample.S for e in epochs]),
                     "M": mean([e.sample.M for e in epochs]),
                     "C": mean([e.sample.C for e in epochs])},
        "extract_s": mean([e.extract_s for e in epochs]),
        "train_s": mean([e.train_s for e in epochs]),
        "grad_sync_s": mean([d["sync_s"] for d in dets]),
        "queue_rpc_and_fetch_s": mean([d["rpc_s"] + d["fetch_s"] for d in dets]),
        "exposed_queue_s": rpc,
        "stall_s": mean([d["stall_s"] for d in dets]),
        "starve_s": starve,
        "overhead_frac": overhead_frac,
        "starve_frac": starve_frac,
        "switches": mean([e.switches for e in epochs]),
        "standby_batches": mean([sum(d["standby_batches"].values()) for d in dets]),
        "batches": mean([e.batches for e in epochs]),
        "preprocess": result.preprocess,
    }


def epoch_overheads(result: Any, details: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per trained epoch: the factored design's overheads in seconds and as shares of the epoch.

    Seconds are summed over executors: ``M``, ``C`` over the Samplers; ``queue_call_s`` (the
    Trainers' queue RPCs and sample fetches, hidden or not by their prefetch), ``queue_wait_s``
    (Trainers waiting in the queue for samples) and its ``fill_wait_s`` part (before each
    Trainer's first mini-batch of the epoch: the pipeline filling) over the Trainers. Shares
    divide by executor-time of the role (``N_s · T`` for M and C, ``N_t · T`` for the Trainer
    parts, ``T`` the epoch time; single mode: ``T``); ``total_share`` adds them, and
    ``total_share_no_fill`` leaves the fill wait out. ``exposed_share`` counts, on the Trainer
    side, only what the prefetch did not hide (``exposed_queue_call_s``, ``exposed_wait_s``).
    """
    dets = [d for d in details if not d["warmup"]]
    single = result.mode == "single"
    rows = []
    for e, d in zip([e for e in result.epochs if not e.warmup], dets):
        t = e.time_s
        n_s = 1 if single else max(1, e.samplers)
        n_t = 1 if single else max(1, e.trainers)
        calls = d["rpc_s"] + d["fetch_s"]
        fill = d.get("fill_wait_s", 0.0)
        row = {"epoch": e.epoch, "time_s": t, "batches": e.batches, "samplers": n_s,
               "trainers": n_t, "M_s": e.sample.M, "C_s": e.sample.C, "queue_call_s": calls,
               "exposed_queue_call_s": d["exposed_queue_s"], "queue_wait_s": e.queue_wait_s,
               "fill_wait_s": fill, "sampler_backpressure_s": d.get("sampler_queue_wait_s", 0.0)}
        row["M_share"] = e.sample.M / (n_s * t)
        row["C_share"] = e.sample.C / (n_s * t)
        row["queue_call_share"] = calls / (n_t * t)
        row["queue_wait_share"] = e.queue_wait_s / (n_t * t)
        row["fill_wait_share"] = fill / (n_t * t)
        row["total_share"] = (row["M_share"] + row["C_share"] + row["queue_call_share"]
                              + row["queue_wait_share"])
        row["total_share_no_fill"] = row["total_share"] - row["fill_wait_share"]
        # what the Trainers idled on: queue calls and waits their prefetch did not hide
        row["exposed_wait_s"] = d.get("exposed_wait_s", e.queue_wait_s)
        row["exposed_share"] = (row["M_share"] + row["C_share"]
                                + (d["exposed_queue_s"] + row["exposed_wait_s"]) / (n_t * t))
        row["exposed_share_no_fill"] = row["exposed_share"] - row["fill_wait_share"]
        rows.append(row)
    return rows


def _mean_rows(rows: list[dict[str, Any]]) -> dict[str, float]:
    keys = [k for k in (rows[0] if rows else {}) if k not in ("epoch",)]
    return {k: sum(r[k] for r in rows) / len(rows) for k in keys} if rows else {}


def run_mode(args: argparse.Namespace, dataset: Any, mode: str,
             placement: str = "replicate") -> dict[str, Any]:
    """Run one mode with one placement across its Trainers and summarise it."""
    cfg = _job(args, mode, placement)
    t0 = time.perf_counter()
    rt = Runtime(cfg, dataset, evaluate=False)
    result = rt.run()
    out = summarize(result, rt.details, skip_first=not args.keep_first)
    out["label"] = mode if len(args.placement_list) == 1 else f"{mode}/{placement}"
    out["wall_s"] = time.perf_counter() - t0
    out["epochs"] = [e.to_dict() for e in result.epochs]
    per_epoch = epoch_overheads(result, rt.details)
    out["overheads"] = {"per_epoch": per_epoch, "mean_all": _mean_rows(per_epoch),
                        "mean_after_first": _mean_rows(per_epoch[1:])}
    return out


def _fmt_bytes(b: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(b) < 1024 or unit == "GiB":
            return f"{b:.1f}{unit}"
        b /= 1024
    return f"{b:.1f}GiB"


def _print_table(rows: list[dict[str, Any]]) -> None:
    head = (f"{'run':<22}{'Ns/Nt':>7}{'epoch s':>9}{'h2d':>11}{'hit%':>7}{'alpha':>7}"
            f"{'S':>8}{'M':>7}{'C':>7}{'extract':>9}{'train':>8}{'ovh%':>7}{'starve%':>8}"
            f"{'standby':>8}")
    print(head)
    for r in rows:
        a, s = r["allocation"], r["sample_s"]
        print(f"{r['label']:<22}{a['samplers']:>3}/{a['trainers']:<3}{r['epoch_time_s']:>9.3f}"
              f"{_fmt_bytes(r['bytes_host_to_device']):>11}{100 * r['hit_rate']:>7.1f}"
              f"{r['alpha']:>7.3f}{s['S']:>8.3f}{s['M']:>7.3f}{s['C']:>7.3f}"
              f"{r['extract_s']:>9.3f}{r['train_s']:>8.3f}{100 * r['overhead_frac']:>7.2f}"
              f"{100 * r['starve_frac']:>8.2f}{r['standby_batches']:>8.1f}")


def _print_tiers(rows: list[dict[str, Any]]) -> None:
    print("rows per tier and bytes host->device per epoch (features from the host tier + "
          "samples copied to the Trainers)")
    print(f"{'run':<22}{'placement':>11}{'covered':>9}{'local%':>8}{'peer%':>7}{'host%':>7}"
          f"{'feat h2d':>11}{'sample h2d':>12}{'total h2d':>11}")
    for r in rows:
        sh = r["tier_share"]
        print(f"{r['label']:<22}{str(r['placement']):>11}"
              f"{r['allocation'].get('covered_rows', 0):>9}{100 * sh['local']:>8.1f}"
              f"{100 * sh['peer']:>7.1f}{100 * sh['host']:>7.1f}"
              f"{_fmt_bytes(r['feature_bytes_host_to_device']):>11}"
              f"{_fmt_bytes(r['sample_bytes_host_to_device']):>12}"
              f"{_fmt_bytes(r['bytes_host_to_device']):>11}")


def _print_overheads(rows: list[dict[str, Any]]) -> None:
    print("overheads per epoch (seconds summed over executors; % of executor-time: "
          "M, C / (N_s T), queue / (N_t T))")
    print(f"{'run':<22}{'epoch':>6}{'T s':>8}{'batch':>6}{'M s':>7}{'C s':>7}{'call s':>8}"
          f"{'wait s':>8}{'fill s':>8}{'M%':>6}{'C%':>6}{'call%':>7}{'wait%':>7}{'fill%':>7}"
          f"{'total%':>8}{'-fill%':>8}{'xwait s':>8}{'xtot%':>7}{'x-fill%':>8}")
    for r in rows:
        ov = r.get("overheads", {})
        lines = [(str(x["epoch"]), x) for x in ov.get("per_epoch", [])]
        lines += [(lbl, ov[k]) for lbl, k in (("mean", "mean_all"), ("mean>0", "mean_after_first"))
                  if ov.get(k)]
        for lbl, x in lines:
            print(f"{r['label']:<22}{lbl:>6}{x['time_s']:>8.3f}{x['batches']:>6.0f}{x['M_s']:>7.3f}"
                  f"{x['C_s']:>7.3f}{x['queue_call_s']:>8.3f}{x['queue_wait_s']:>8.3f}"
                  f"{x['fill_wait_s']:>8.3f}{100 * x['M_share']:>6.2f}{100 * x['C_share']:>6.2f}"
                  f"{100 * x['queue_call_share']:>7.2f}{100 * x['queue_wait_share']:>7.2f}"
                  f"{100 * x['fill_wait_share']:>7.2f}{100 * x['total_share']:>8.2f}"
                  f"{100 * x['total_share_no_fill']:>8.2f}{x['exposed_wait_s']:>8.3f}"
                  f"{100 * x['exposed_share']:>7.2f}{100 * x['exposed_share_no_fill']:>8.2f}")


def ratios(rows: list[dict[str, Any]], base: Optional[str] = None
           ) -> dict[str, dict[str, float]]:
    """``label -> {bytes, feature bytes, epoch_time}`` ratios of each run over ``base`` (a run
    label; default the first run). ``bytes_host_to_device`` counts features and samples,
    ``feature_bytes_host_to_device`` features only (what earlier versions reported)."""
    by = {r["label"]: r for r in rows}
    base = base if base is not None else (rows[0]["label"] if rows else None)
    if base not in by:
        return {}
    b = by[base]

    def ratio(key: str, r: dict[str, Any]) -> float:
        return r[key] / b[key] if b[key] else math.inf

    return {label: {"bytes_host_to_device": ratio("bytes_host_to_device", r),
                    "feature_bytes_host_to_device": ratio("feature_bytes_host_to_device", r),
                    "epoch_time": ratio("epoch_time_s", r)}
            for label, r in by.items() if label != base}


def _parse(argv: Optional[list[str]]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dataset", default="rmat:scale=16,edge_factor=16,feat_dim=128,"
                                        "train_frac=0.05,seed=0")
    p.add_argument("--root", default=None, help="data root (Planetoid files)")
    p.add_argument("--devices", type=int, default=4)
    p.add_argument("--modes", default="factored,time-sharing,single")
    p.add_argument("--device-memory", type=float, default=None,
                   help="device memory budget in GiB (sets the cache ratio)")
    p.add_argument("--cache-ratio", type=float, default=None,
                   help="cached share of vertices (without --device-memory: a device that also "
                        "holds the topology gives up its bytes)")
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--batch-size", type=int, default=1000)
    p.add_argument("--fanouts", type=int, nargs="+", default=[10, 5])
    p.add_argument("--model", default="sage")
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--cache-policy", default="presc")
    p.add_argument("--placements", default="replicate",
                   help=f"comma-separated placements across Trainers, each run per mode "
                        f"(some of {', '.join(PLACEMENTS)})")
    p.add_argument("--peer-cost", type=float, default=0.2,
                   help="C_gpu/C_cpu of Song & Jiang Eq. 3/7 (algorithm1, auto)")
    p.add_argument("--samplers", type=int, default=None)
    p.add_argument("--queue-size", type=int, default=16)
    p.add_argument("--no-switching", action="store_true")
    p.add_argument("--keep-first", action="store_true",
                   help="average over every epoch (default: drop the first, warm-up)")
    p.add_argument("--json", default=None, help="write the results here")
    args = p.parse_args(argv)
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    for m in modes:
        if m not in MODES:
            p.error(f"--modes: unknown mode {m!r}, expected some of {', '.join(MODES)}")
    args.mode_list = modes
    placements = [x.strip() for x in args.placements.split(",") if x.strip()]
    for x in placements:
        if x not in PLACEMENTS:
            p.error(f"--placements: unknown placement {x!r}, expected some of "
                    f"{', '.join(PLACEMENTS)}")
    if not placements:
        p.error("--placements: give at least one placement")
    args.placement_list = placements
    if args.devices < 1:
        p.error(f"--devices must be >= 1, got {args.devices}")
    return args


def main(argv: Optional[list[str]] = None) -> dict[str, Any]:
    """Run the benchmark; returns what ``--json`` writes."""
    args = _parse(argv)
    t0 = time.perf_counter()
    ds = load_dataset(args.dataset, args.root)
    load_s = time.perf_counter() - t0
    print(f"dataset {ds!r} loaded in {load_s:.1f}s; graph {_fmt_bytes(ds.graph.nbytes())}, "
          f"features {_fmt_bytes(ds.num_nodes * ds.feature_row_bytes)}", flush=True)
    ray.init(address="local", num_cpus=max(4, args.devices), num_gpus=args.devices,
             include_dashboard=False, log_to_driver=False, _system_config=local_system_config())
    rows = []
    try:
        for m in args.mode_list:
            for placement in args.placement_list:
                print(f"--- {m} ({placement})", flush=True)
                rows.append(run_mode(args, ds, m, placement))
    finally:
        ray.shutdown()
    _print_table(rows)
    _print_tiers(rows)
    _print_overheads(rows)
    rat = ratios(rows)
    for m, r in rat.items():
        print(f"{m} / {rows[0]['label']}: bytes host->device (features + samples) "
              f"x{r['bytes_host_to_device']:.2f}, features only "
              f"x{r['feature_bytes_host_to_device']:.2f}, epoch time x{r['epoch_time']:.2f}")
    out = {"dataset": args.dataset, "num_nodes": ds.num_nodes, "num_edges": ds.graph.num_edges,
           "graph_bytes": ds.graph.nbytes(), "feature_bytes": ds.num_nodes * ds.feature_row_bytes,
           "devices": args.devices, "device_memory_gib": args.device_memory,
           "cache_ratio": args.cache_ratio, "placements": args.placement_list,
           "argv": sys.argv[1:] if argv is None else argv, "modes": rows, "ratios": rat}
    if args.json:
        path = Path(args.json)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(out, indent=2, default=str))
        print(f"wrote {path}")
    return out


if __name__ == "__main__":
    main()

"""Twins of GNNLab's datasets at their own sizes, each job inside one memory cgroup: fgnn's
``launch.py`` (single mode and factored on logical devices) beside PyG's standard
``NeighborLoader`` script (``bench/scale_pyg.py``), in one run, with JSON.

Every job runs in a fresh cgroup v1 memory group of ``--cgroup-bytes`` (22 GiB by default) that
holds the whole job, Ray's processes included (they are children of the job). The group's
``memory.stat`` is sampled every 0.2 s: the peak of anonymous plus shared memory (``rss +
shmem``) and of everything charged (``usage``, page cache included) are reported, with the
group's OOM kills. Per row: steps run and steps/s of the training epochs, the epoch time
extrapolated from them (``epoch_s_extrapolated``: marked as such unless whole epochs ran), the
disk bytes read per step (``/proc/diskstats`` over the job) against the disk's random 4 KiB
read rate measured on the feature file, the last epoch's cache hit rate, every process's peak
RSS (the report's ``memory.processes``) and the memory plan's total.

Needs root (cgroup v1 under ``/sys/fs/cgroup/memory``) and the twin built (the first job builds
it into ``$FGNN_DATASET_CACHE`` when absent, outside the timed rows: ``--build`` first).

Usage::

    python bench/scale.py --dataset pa-like:feat_dtype=float16 --layouts single:1,factored:8 \\
        --models sage --steps 50 --json runs/scale-pa.json
    python bench/scale.py --dataset pr-like --layouts single:1 --models sage --epochs 3 \\
        --pyg-python /path/to/pyg/bin/python --json runs/scale-pr.json
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

#: GNNLab §7.1: GraphSAGE 25,10 and GCN 15,10,5, hidden 256, batch 8000.
MODELS = {"sage": ("sage", "25,10"), "gcn": ("gcn", "15,10,5")}
CGROUP_ROOT = Path("/sys/fs/cgroup/memory")


class Cgroup:
    """A cgroup v1 memory group for one job, its ``memory.stat`` sampled in a thread."""

    def __init__(self, name: str, limit: int) -> None:
        self.path = CGROUP_ROOT / name
        self.path.mkdir(exist_ok=True)
        (self.path / "memory.limit_in_bytes").write_text(str(limit))
        self.peak = {"rss_shmem": 0, "usage": 0}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def enter(self) -> None:
        """Move the calling process in (a child's ``preexec_fn``)."""
        (self.path / "cgroup.procs").write_text(str(os.getpid()))

    def _stat(self) -> dict[str, int]:
        out = {}
        for line in (self.path / "memory.stat").read_text().splitlines():
            k, v = line.split()
            out[k] = int(v)
        return out

    def _sample(self) -> None:
        while not self._stop.wait(0.2):
            try:
                st = self._stat()
                usage = int((self.path / "memory.usage_in_bytes").read_text())
            except OSError:
                continue
            self.peak["rss_shmem"] = max(self.peak["rss_shmem"],
                                         st.get("total_rss", 0) + st.get("total_shmem", 0))
            self.peak["usage"] = max(self.peak["usage"], usage)

    def __enter__(self) -> "Cgroup":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        oom = (self.path / "memory.oom_control").read_text()
        self.oom_kills = int(oom.split("oom_kill ")[1].split()[0]) if "oom_kill " in oom else 0
        self.max_usage = int((self.path / "memory.max_usage_in_bytes").read_text())
        for _ in range(50):  # the job's processes may take a moment to leave
            try:
                self.path.rmdir()
                return
            except OSError:
                time.sleep(0.2)


def disk_read_bytes() -> int:
    """Bytes read from the block devices so far (``/proc/diskstats``, whole disks)."""
    total = 0
    for line in Path("/proc/diskstats").read_text().splitlines():
        f = line.split()
        if len(f) > 5 and not f[2][-1].isdigit() and not f[2].startswith(("loop", "ram")):
            total += int(f[5]) * 512
    return total


def random_read_rate(path: Path, seconds: float = 3.0) -> dict[str, float]:
    """Random 4 KiB reads of ``path`` with ``O_DIRECT`` (past the page cache): reads/s and
    bytes/s, single thread."""
    size = path.stat().st_size
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECT", 0))
    import mmap

    buf = mmap.mmap(-1, 4096)
    n, t0 = 0, time.perf_counter()
    try:
        while time.perf_counter() - t0 < seconds:
            os.preadv(fd, [buf], random.randrange(0, max(1, size // 4096)) * 4096)
            n += 1
    finally:
        os.close(fd)
    dt = time.perf_counter() - t0
    return {"reads_per_s": n / dt, "bytes_per_s": 4096 * n / dt}


def dataset_dir(spec: str) -> Path:
    """The built twin's directory (built now when absent, outside any timed row; nothing of
    it is loaded in this process)."""
    from fgnn.data.outofcore import ensure_built
    from fgnn.data.spec import builder_recipe

    built = ensure_built(builder_recipe(spec),
                         log=lambda m: print(f"scale: {m}", file=sys.stderr, flush=True))
    return built.path


def run_job(name: str, cmd: list[str], limit: int, env: dict) -> dict:
    """Run ``cmd`` in a fresh cgroup of ``limit`` bytes: exit status, wall time, peaks."""
    before = disk_read_bytes()
    with Cgroup(name, limit) as cg:
        t0 = time.perf_counter()
        proc = subprocess.run(cmd, preexec_fn=cg.enter, env=env, cwd=REPO,
                              capture_output=True, text=True)
        wall = time.perf_counter() - t0
    tail = (proc.stdout + proc.stderr).strip().splitlines()[-3:]
    return {"cmd": " ".join(cmd), "exit": proc.returncode, "wall_s": wall,
            "cgroup_limit": limit, "peak_rss_shmem": cg.peak["rss_shmem"],
            "peak_usage": cg.peak["usage"], "max_usage": cg.max_usage,
            "oom_kills": cg.oom_kills, "disk_read_bytes": disk_read_bytes() - before,
            "tail": tail}


def fgnn_row(args, layout: str, devices: int, model: str, report: Path, limit: int,
             env: dict) -> dict:
    name, fan = MODELS[model]
    cmd = [sys.executable, "launch.py", "--dataset", args.dataset, "--model", name,
           "--fanouts", fan, "--hidden", "256", "--batch-size", str(args.batch_size),
           "--epochs", str(args.epochs), "--no-progress", "--report", str(report),
           "--seed", "0", *args.extra.split()]
    cmd += ["--mode", "single"] if layout == "single" else ["--devices", str(devices)]
    if args.steps:
        cmd += ["--steps-per-epoch", str(args.steps)]
    row = run_job(f"fgnn-scale-{os.getpid()}-{layout}-{model}", cmd, limit, env)
    row.update(side="fgnn", layout=f"{layout}:{devices}", model=model)
    if row["exit"] == 0 and report.is_file():
        row.update(_from_report(json.loads(report.read_text()), args))
    return row


def _from_report(rep: dict, args) -> dict:
    epochs = rep["epochs"]
    tasks = max(1, int(rep["allocation"].get("devices", 1))) if rep["mode"] != "single" else 1
    steps = sum(int(e["batches"]) for e in epochs) / tasks
    train_s = sum(float(e["time_s"]) for e in epochs)
    cfg = rep["config"]
    import numpy as np

    n_train = int(np.load(args.directory / "train_idx.npy", mmap_mode="r").shape[0])
    per_epoch = -(-n_train // int(cfg["train"]["batch_size"]))
    mem = rep.get("memory", {})
    return {"steps": steps, "train_s": train_s, "steps_per_s": steps / train_s if train_s else
            None, "steps_per_epoch": per_epoch,
            "epoch_s": train_s / len(epochs) if not args.steps else None,
            "epoch_s_extrapolated": per_epoch * train_s / steps if args.steps and steps else None,
            "hit_rate": epochs[-1].get("hit_rate"), "final": rep.get("final"),
            "timeline": rep.get("timeline", {}).get("parts"),
            "preprocess": rep.get("preprocess"),
            "processes": [{k: p.get(k) for k in ("name", "peak_rss", "rss")}
                          for p in mem.get("processes", [])],
            "topology": mem.get("topology"), "plan_total": mem.get("plan", {}).get("total")}


def pyg_row(args, directory: Path, limit: int, env: dict, out: Path) -> dict:
    name, fan = MODELS["sage"]
    cmd = [args.pyg_python, str(REPO / "bench" / "scale_pyg.py"), str(directory),
           "--fanouts", fan, "--batch-size", str(args.batch_size), "--epochs",
           str(args.epochs), "--json", str(out)]
    if args.steps:
        cmd += ["--steps", str(args.steps)]
    row = run_job(f"fgnn-scale-{os.getpid()}-pyg", cmd, limit, env)
    row.update(side="pyg", layout="single:1", model="sage")
    if row["exit"] == 0 and out.is_file():
        row.update(json.loads(out.read_text()))
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dataset", required=True, help="a twin spec, e.g. pa-like:feat_dtype=float16")
    ap.add_argument("--layouts", default="single:1,factored:8")
    ap.add_argument("--models", default="sage,gcn")
    ap.add_argument("--steps", type=int, default=0, help="steps per epoch (0: whole epochs)")
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--batch-size", type=int, default=8000)
    ap.add_argument("--cgroup-bytes", type=float, default=22 * 2 ** 30)
    ap.add_argument("--extra", default="", help="more launch.py flags for the fgnn rows")
    ap.add_argument("--pyg-python", default=None, help="an interpreter with PyG: add its row")
    ap.add_argument("--no-fgnn", action="store_true")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    env = dict(os.environ, PYTHONPATH=str(REPO))
    directory = args.directory = dataset_dir(args.dataset)
    rate = random_read_rate(directory / "features.npy")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        if not args.no_fgnn:
            for lay in args.layouts.split(","):
                layout, devices = lay.split(":")
                for model in args.models.split(","):
                    rows.append(fgnn_row(args, layout, int(devices), model,
                                         Path(tmp) / f"r-{layout}-{model}.json",
                                         int(args.cgroup_bytes), env))
                    _print(rows[-1], rate)
        if args.pyg_python:
            rows.append(pyg_row(args, directory, int(args.cgroup_bytes), env,
                                Path(tmp) / "pyg.json"))
            _print(rows[-1], rate)
    out = {"dataset": args.dataset, "directory": str(directory), "random_read": rate,
           "load": os.getloadavg(), "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
           "rows": rows}
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(out, indent=2))


def _print(r: dict, rate: dict) -> None:
    gib = 2 ** 30
    steps = r.get("steps") or 0
    disk = r["disk_read_bytes"] / steps if steps else None
    ep = r.get("epoch_s") or r.get("epoch_s_extrapolated")
    mark = "" if r.get("epoch_s") else " (extrapolated)"
    print(f"{r['side']:5s} {r['layout']:11s} {r['model']:5s} exit {r['exit']:>3} "
          f"wall {r['wall_s']:7.1f}s steps {steps:5.0f} "
          f"{(r.get('steps_per_s') or 0):6.3f} steps/s epoch "
          f"{(ep or 0):8.1f}s{mark} peak rss+shm {r['peak_rss_shmem'] / gib:5.2f} GiB "
          f"(charged {r['max_usage'] / gib:5.2f}) oom {r['oom_kills']} "
          f"disk/step {(disk or 0) / 2**20:7.1f} MiB (random 4K: "
          f"{rate['bytes_per_s'] / 2**20:.1f} MiB/s) hit {r.get('hit_rate')}", flush=True)
    if r["exit"] != 0:
        print("      " + " | ".join(r["tail"]), flush=True)


if __name__ == "__main__":
    main()

"""Soak: does any process of a job grow over a long run? (issue 40)

Runs ``launch.py`` for ``--epochs`` epochs (Cora, 2 devices by default) and, every
``--every`` epochs (read from the one progress line a pipe gets per epoch), the resident set
(``VmRSS``) of the driver and of every process below it: Ray's ``gcs_server``, ``raylet``,
dashboard and agents, and the job's actors (``ray::TrainerExecutor`` and the like). Prints each
process's growth per 100 epochs, the slope of a least-squares line through its samples after
the first ``--warmup`` epochs, and a JSON object (``--json`` also writes it). The goal of issue
40: every process under 2 MiB per 100 epochs over 1,000 epochs.

Example::

    PYTHONPATH=. .venv/bin/python bench/soak.py --data-root /work/shared/data/planetoid \\
        --epochs 1000 --json runs/soak.json
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Optional

REPO = Path(__file__).resolve().parent.parent
_EPOCH = re.compile(r"\bepoch\s+(\d+)/(\d+)")


def _children() -> dict[int, list[int]]:
    kids: dict[int, list[int]] = {}
    for path in Path("/proc").glob("[0-9]*/stat"):
        try:
            ppid = int(path.read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        kids.setdefault(ppid, []).append(int(path.parent.name))
    return kids


def _tree(root: int) -> list[int]:
    """``root`` and every process below it."""
    kids, out, todo = _children(), [root], [root]
    while todo:
        for child in kids.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def _name(pid: int, root: int) -> Optional[str]:
    """What a process is: ``driver``, ``gcs_server``, ``ray::TrainerExecutor`` (Ray's title
    without the method it runs now), ``agent.py``, ``python -c``..."""
    if pid == root:
        return "driver"
    try:
        argv = [a.decode(errors="replace")
                for a in Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0") if a]
    except OSError:
        return None
    if not argv:
        return None
    if argv[0].startswith("ray::"):
        return argv[0].split()[0].split(".")[0]
    if len(argv) == 1 and " -c " in argv[0]:  # a child that set its title: one string
        return "forkserver child" if "forkserver" in argv[0] else "python -c"
    if "-c" in argv[1:4]:
        code = argv[argv.index("-c") + 1] if argv.index("-c") + 1 < len(argv) else ""
        return "forkserver" if "forkserver" in code else "python -c"
    scripts = [os.path.basename(a) for a in argv[:4] if a.endswith(".py")]
    return scripts[0] if scripts else os.path.basename(argv[0])


def _rss(pid: int) -> Optional[int]:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def sample(root: int) -> dict[int, tuple[str, int]]:
    """``pid -> (name, RSS)`` of ``root``'s tree."""
    out: dict[int, tuple[str, int]] = {}
    for pid in sorted(_tree(root)):
        name, rss = _name(pid, root), _rss(pid)
        if name is not None and rss is not None:
            out[pid] = (name, rss)
    return out


def slope_per_100(points: list[tuple[int, int]]) -> Optional[float]:
    """MiB per 100 epochs of a least-squares line through ``(epoch, bytes)``; None under two
    points."""
    if len(points) < 2:
        return None
    n = len(points)
    mx = sum(e for e, _ in points) / n
    my = sum(b for _, b in points) / n
    var = sum((e - mx) ** 2 for e, _ in points)
    if var == 0:
        return None
    cov = sum((e - mx) * (b - my) for e, b in points)
    return cov / var * 100 / 2 ** 20


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Run the job, sampling as it goes; the result object."""
    cmd = [sys.executable, str(REPO / "launch.py"), "--dataset", args.dataset,
           "--epochs", str(args.epochs), "--devices", str(args.devices),
           "--dashboard-host", args.dashboard_host, *args.extra]
    if args.data_root:
        cmd += ["--data-root", args.data_root]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    t0 = time.time()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env=env, bufsize=1)
    series: dict[int, list[tuple[int, int]]] = {}
    names: dict[int, str] = {}
    for line in proc.stdout:
        m = _EPOCH.search(line)
        if not m or "loss" not in line:
            continue
        epoch = int(m.group(1))
        if epoch % args.every and epoch != args.epochs:
            continue
        for pid, (name, rss) in sample(proc.pid).items():
            names.setdefault(pid, name)
            series.setdefault(pid, []).append((epoch, rss))
    status = proc.wait()
    procs = {}
    for pid, pts in sorted(series.items(), key=lambda kv: (names[kv[0]], kv[0])):
        late = [(e, b) for e, b in pts if e > args.warmup]
        procs[f"{names[pid]} (pid {pid})"] = {
            "first_mib": pts[0][1] / 2 ** 20, "last_mib": pts[-1][1] / 2 ** 20,
            "samples": len(late), "mib_per_100_epochs": slope_per_100(late)}
    worst = max((p["mib_per_100_epochs"] for p in procs.values()
                 if p["mib_per_100_epochs"] is not None), default=None)
    return {"command": " ".join(cmd[1:]), "exit": status, "epochs": args.epochs,
            "warmup": args.warmup, "wall_s": time.time() - t0, "processes": procs,
            "worst_mib_per_100_epochs": worst,
            "goal_met": worst is not None and worst < args.goal}


def main(argv: Optional[list[str]] = None) -> int:
    """Parse flags, run, print the table and the JSON."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dataset", default="cora")
    p.add_argument("--data-root", default=None)
    p.add_argument("--devices", type=int, default=2)
    p.add_argument("--epochs", type=int, default=1000)
    p.add_argument("--every", type=int, default=10, help="sample every N epochs")
    p.add_argument("--warmup", type=int, default=100, help="epochs left out of the slope")
    p.add_argument("--goal", type=float, default=2.0, help="MiB per 100 epochs")
    p.add_argument("--dashboard-host", default="127.0.0.1")
    p.add_argument("--json", default=None)
    p.add_argument("extra", nargs="*", help="more launch.py flags (after --)")
    args = p.parse_args(argv)
    args.warmup = min(args.warmup, args.epochs // 4)
    out = run(args)
    for name, row in out["processes"].items():
        slope = row["mib_per_100_epochs"]
        print(f"{name:<40} {row['first_mib']:8.1f} -> {row['last_mib']:8.1f} MiB  "
              f"{'n/a' if slope is None else f'{slope:+.2f}'} MiB/100 epochs")
    print(json.dumps(out, indent=2))
    if args.json:
        tmp = Path(args.json).with_suffix(".tmp")
        tmp.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_text(json.dumps(out, indent=2) + "\n")
        tmp.replace(args.json)
    return 0 if out["exit"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())

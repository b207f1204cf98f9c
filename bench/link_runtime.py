"""Link prediction through ``launch.py`` and the factored runtime, over seeds and device counts.

Runs ``launch.py --dataset DATASET --task link --devices N --seed S --report ...`` once per
``(N, S)`` (the GAE recipe applies on Planetoid with no other flag; ``--extra`` adds flags),
reads each report and prints the test AUC / AP per run, the mean per device count, and the
largest gap between device counts.

Example::

    PYTHONPATH=. python bench/link_runtime.py --data-root ../shared/data/planetoid \\
        --devices 2 --seeds 0,1,2,3,4 --json out.json
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Optional

ROOT = Path(__file__).resolve().parents[1]


def _ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",")]


def one_run(args: argparse.Namespace, devices: int, seed: int, out: Path) -> dict:
    """One ``launch.py`` run; its test AUC / AP, best epoch and wall time."""
    report = out / f"link_d{devices}_s{seed}.json"
    cmd = [sys.executable, str(ROOT / "launch.py"), "--dataset", args.dataset, "--task", "link",
           "--devices", str(devices), "--seed", str(seed), "--report", str(report),
           "--no-progress", "--dashboard-host", "off"]
    if args.data_root:
        cmd += ["--data-root", args.data_root]
    cmd += args.extra.split() if args.extra else []
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({proc.returncode}): {proc.stderr[-2000:]}")
    rep = json.loads(report.read_text())
    fin = rep["final"]
    aucs = [e.get("val_auc") for e in rep["epochs"]]
    best = max((a, i) for i, a in enumerate(aucs) if a is not None)[1] if any(aucs) else None
    row = {"devices": devices, "seed": seed, "test_auc": fin["test_auc"],
           "test_ap": fin["test_ap"], "val_auc": fin["val_auc"], "best_epoch": best,
           "wall_s": wall, "recipe": rep["config"]["recipe"]}
    print(f"devices {devices} seed {seed}: test AUC {row['test_auc']:.4f} AP "
          f"{row['test_ap']:.4f} (best epoch {best}, {wall:.0f} s, recipe {row['recipe']})",
          flush=True)
    return row


def main(argv: Optional[list[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--dataset", default="cora")
    p.add_argument("--data-root", default=None)
    p.add_argument("--devices", type=_ints, default=[1, 2, 4, 8])
    p.add_argument("--seeds", type=_ints, default=[0, 1, 2, 3, 4])
    p.add_argument("--extra", default="", help="more launch.py flags, e.g. '--epochs 50'")
    p.add_argument("--json", default=None, help="write the results here")
    args = p.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for s in args.seeds:  # seed-major: a cut-short sweep still covers every device count
            for d in args.devices:
                rows.append(one_run(args, d, s, Path(tmp)))
    means = {}
    for d in args.devices:
        mine = [r for r in rows if r["devices"] == d]
        means[d] = {k: sum(r[k] for r in mine) / len(mine) for k in ("test_auc", "test_ap")}
        print(f"devices {d}: mean test AUC {means[d]['test_auc']:.4f} AP "
              f"{means[d]['test_ap']:.4f} over {len(mine)} seeds")
    gap = {k: max(m[k] for m in means.values()) - min(m[k] for m in means.values())
           for k in ("test_auc", "test_ap")}
    print(f"largest gap between device counts: AUC {gap['test_auc']:.4f} AP {gap['test_ap']:.4f}")
    if args.json:
        Path(args.json).write_text(json.dumps({"args": vars(args), "runs": rows,
                                               "means": means, "gap": gap}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())

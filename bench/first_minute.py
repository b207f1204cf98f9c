"""The first minute as a user sees it (issue 39): the README's Cora run, line by line.

Runs a command (by default the README's ``launch.py --dataset cora ... --model sage --devices 2
--report r.json``) as a subprocess with stdout and stderr merged, and stamps each line (or each
``\\r``-ended progress update) with the seconds since the start. Prints every line with its
stamp, then the whole run's wall time, the longest silence (the largest gap between two lines,
or between the start and the first line) with the lines on either side, and the time of
``launch.py --help``; the load average before and after, and one JSON object (``--json PATH``
writes it too).

Goals of issue 39: the Cora run under 25 s wall on a quiet machine, no silence over 5 s,
``--help`` under 1 s.

Example::

    PYTHONPATH=. .venv/bin/python bench/first_minute.py --data-root ../shared/data/planetoid \\
        --json runs/first_minute.json
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Optional, Sequence

REPO = Path(__file__).resolve().parents[1]


def readme_command(data_root: str, report: str) -> list[str]:
    """The README's Cora run (GraphSAGE, 2 devices, a report) with this interpreter."""
    return [sys.executable, str(REPO / "launch.py"), "--dataset", "cora", "--data-root",
            data_root, "--model", "sage", "--devices", "2", "--report", report]


def stamped_lines(cmd: Sequence[str], cwd: Optional[str] = None,
                  timeout: float = 600.0) -> tuple[list[tuple[float, str]], float, int]:
    """Run ``cmd``; returns ``([(seconds since start, line), ...], wall seconds, exit
    status)``. A line ends at ``\\n`` or ``\\r`` (a progress bar's update counts as output)."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    t0 = time.perf_counter()
    p = subprocess.Popen(list(cmd), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, cwd=cwd,
                         env=env, bufsize=0)
    lines: list[tuple[float, str]] = []
    buf = b""
    assert p.stdout is not None
    while True:
        if time.perf_counter() - t0 > timeout:
            p.kill()
            break
        chunk = p.stdout.read1(65536) if hasattr(p.stdout, "read1") else p.stdout.read(1)
        if not chunk:
            break
        now = time.perf_counter() - t0
        buf += chunk
        while True:
            cut = min((i for i in (buf.find(b"\n"), buf.find(b"\r")) if i >= 0), default=-1)
            if cut < 0:
                break
            text = buf[:cut].decode(errors="replace").strip()
            buf = buf[cut + 1:]
            if text:
                lines.append((now, text))
    if buf.strip():
        lines.append((time.perf_counter() - t0, buf.decode(errors="replace").strip()))
    rc = p.wait()
    return lines, time.perf_counter() - t0, rc


def longest_silence(lines: Sequence[tuple[float, str]], wall: float) -> dict[str, Any]:
    """The largest gap between the start, each line and the exit: its seconds and the lines
    before and after it (``"(start)"`` / ``"(exit)"`` at the ends)."""
    stamps = [(0.0, "(start)"), *lines, (wall, "(exit)")]
    best = max(range(1, len(stamps)), key=lambda i: stamps[i][0] - stamps[i - 1][0])
    return {"seconds": round(stamps[best][0] - stamps[best - 1][0], 2),
            "after": stamps[best - 1][1][:120], "before": stamps[best][1][:120],
            "at": round(stamps[best - 1][0], 2)}


def help_seconds(repeats: int = 3) -> float:
    """The fastest of ``repeats`` runs of ``launch.py --help`` (whole process, seconds)."""
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        subprocess.run([sys.executable, str(REPO / "launch.py"), "--help"], check=True,
                       stdout=subprocess.DEVNULL, cwd=REPO)
        best = min(best, time.perf_counter() - t0)
    return best


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Measure the run and ``--help``; print the stamped lines, the summary and the JSON."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data-root", default=str(REPO.parent / "shared" / "data" / "planetoid"),
                    help="folder of the Planetoid files ind.cora.* (default: %(default)s)")
    ap.add_argument("--json", default=None, help="also write the JSON object here")
    ap.add_argument("--no-help", action="store_true", help="do not time launch.py --help")
    ap.add_argument("command", nargs="*",
                    help="a command to time instead of the README's run (after --)")
    a = ap.parse_args(argv)
    load_before = os.getloadavg()
    help_s = None if a.no_help else help_seconds()
    with tempfile.TemporaryDirectory() as tmp:
        cmd = a.command or readme_command(a.data_root, str(Path(tmp) / "r.json"))
        lines, wall, rc = stamped_lines(cmd, cwd=tmp)
    load_after = os.getloadavg()
    for t, text in lines:
        print(f"{t:7.2f}  {text}")
    gap = longest_silence(lines, wall)
    result = {"command": " ".join(cmd), "exit": rc, "wall_s": round(wall, 2),
              "lines": len(lines), "longest_silence": gap,
              "help_s": None if help_s is None else round(help_s, 3),
              "load_before": [round(x, 2) for x in load_before],
              "load_after": [round(x, 2) for x in load_after]}
    print(f"\nwall {wall:.2f} s (goal < 25 s quiet), exit {rc}; longest silence "
          f"{gap['seconds']:.2f} s at {gap['at']:.2f} s (goal <= 5 s), after: {gap['after']!r}, "
          f"before: {gap['before']!r}")
    if help_s is not None:
        print(f"launch.py --help: {help_s:.3f} s (goal < 1 s)")
    print(f"load average before {load_before[0]:.2f}, after {load_after[0]:.2f}")
    print(json.dumps(result))
    if a.json:
        Path(a.json).parent.mkdir(parents=True, exist_ok=True)
        Path(a.json).write_text(json.dumps(result, indent=1) + "\n")
    return 0 if rc == 0 else 1


if __name__ == "__main__":
    sys.exit(main())

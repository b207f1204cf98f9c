"""GPU evidence in one run: ``make gpu-evidence`` (``python3 bench/gpu_evidence.py --out DIR``).

On a GPU host (one H100 or H200, Python 3.12, torch with CUDA, no Ray needed), in at most
``--budget-s`` seconds (default 360), everything under ``--out``:

1. ``tests``: the ``gpu``-marked tests and every test parametrised on ``cuda:0``
   (``pytest.log``);
2. ``sampler``: k-hop 15,10,5 edges/s at batches of 1000, 8000 and 32000 seeds over batches
   that are never empty (:func:`fgnn.gpucheck.batch_seeds`), beside the device's own
   random-gather rate of ``indices`` (the limit; the goal is 25% of it);
3. ``extract``: feature extraction GB/s for cache hits and misses, each timed apart from the
   host-side split (:func:`fgnn.gpucheck.check_extract`);
4. ``peer``: the feature cache's peer tier across two processes
   (:func:`fgnn.gpucheck.check_peer`): one exports a buffer (CUDA IPC; on the CPU a
   shared-memory segment), a spawned one opens it (on a second GPU when there is one: NVLink)
   and gathers random rows: GB/s beside a host-to-device gather of the same rows;
5. ``nccl``: a probe with 1 and 2 ranks, each rank its own process: a raw NCCL all-reduce (2 ranks
   on one GPU is what NCCL refuses: the refusal is the expected result there), and fgnn's own
   group (:func:`fgnn.exchange.groups.new_group`: NCCL on distinct GPUs, gloo on a shared one);
6. ``epochs``: where Ray is importable, or a slim Ray is found in ``--wheels`` (with any other
   wheel there, e.g. pytest's, installed into ``DIR/site`` with ``pip --no-index --no-deps``
   when Ray or pytest is missing; ``ray-slim.tar.xz`` extracted there, :func:`prepare_site`),
   ``launch.py`` on ``rmat:scale=20,edge_factor=16,feat_dim=128`` in the single, time-sharing
   and factored modes with ``--gpus-per-device 0.5``, for both sample transports, keeping each
   report JSON (``epochs-<mode>-<transport>.json``).

It writes ``evidence.json`` (every number) and ``summary.md`` (one table ready for
docs/benchmarks.md) and prints the table. ``--device cpu`` is a dry run on a small graph in
seconds (the test suite runs it): what needs CUDA is skipped with its reason in the table. Exit
status 0 when every part ran or was skipped, 1 when one failed.
"""

from __future__ import annotations

import argparse
import datetime
import importlib.util
import json
import os
import platform
import subprocess
import sys
import tarfile
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any, Callable, Optional

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

import torch  # noqa: E402

from fgnn import gpucheck  # noqa: E402

MODES = ("single", "time-sharing", "factored")
TRANSPORTS = ("object_store", "cuda_ipc")
GOAL = 0.25  # sampled edges/s as a share of the device's random-gather rate of indices
SIZES = {"cuda": {"scale": 20, "feat_dim": 128, "batches_of": (1000, 8000, 32000),
                  "batches": 8, "reads": 20_000_000,
                  "peer": {"rows": 2_000_000, "dim": 128, "batch": 250_000}},
         "cpu": {"scale": 12, "feat_dim": 32, "batches_of": (64, 256, 512), "batches": 2,
                 "reads": 100_000, "peer": {"rows": 20_000, "dim": 32, "batch": 2000}}}


# ------------------------------------------------------------------ parts
def part_tests(device: torch.device, out: Path, timeout_s: float,
               env: Optional[dict[str, str]] = None) -> dict[str, Any]:
    """``pytest -m gpu`` and the tests parametrised on ``cuda:0``, one pytest run each
    (``env``: with the wheels' folder on ``PYTHONPATH``, :func:`prepare_site`)."""
    if device.type != "cuda":
        return {"skipped": "--device cpu: these tests need CUDA"}
    if _importable("pytest", env) is None:
        return {"skipped": "pytest is not importable (bring its wheels in --wheels)"}
    py = [sys.executable, "-m", "pytest"]
    t0 = time.perf_counter()
    collect = subprocess.run(py + ["--collect-only", "-q", "tests"], cwd=REPO, text=True,
                             env=env, capture_output=True, timeout=timeout_s / 3)
    cuda_ids = [ln.strip() for ln in collect.stdout.splitlines() if "cuda:0" in ln]
    res: dict[str, Any] = {"cuda_param_tests": len(cuda_ids)}
    for name, args in (("gpu_marker", ["-m", "gpu", "tests"]), ("cuda_params", cuda_ids)):
        if not args:
            res[name] = {"skipped": "no test is parametrised on cuda:0"}
            continue
        left = timeout_s - (time.perf_counter() - t0)
        try:
            proc = subprocess.run(py + ["-q", "-p", "no:cacheprovider"] + args, cwd=REPO,
                                  env=env, text=True, capture_output=True,
                                  timeout=max(left, 10))
        except subprocess.TimeoutExpired:
            res[name] = {"error": f"timed out after {left:.0f} s"}
            continue
        with open(out / "pytest.log", "a") as log:
            log.write(f"== {name}\n{proc.stdout}\n{proc.stderr}\n")
        lines = [ln for ln in proc.stdout.splitlines() if ln.strip()]
        res[name] = {"rc": proc.returncode, "summary": lines[-1] if lines else "",
                     "ok": proc.returncode == 0}
    res["seconds"] = time.perf_counter() - t0
    return res


def part_sampler(ds: Any, graph: Any, device: torch.device, size: dict[str, Any]
                 ) -> dict[str, Any]:
    """Edges/s at each batch size, over never-empty batches."""
    out = {}
    for b in size["batches_of"]:
        r = gpucheck.check_sampler(graph, ds.train_idx, device,
                                   {"batches": size["batches"], "reads": size["reads"]}, b)
        r["goal_met"] = r["fraction_of_random_reads"] >= GOAL
        out[str(b)] = r
    return out


def _probe_cmd(mode: str, rank: int, size: int, device: str, store: str, timeout_s: float
               ) -> list[str]:
    spec = json.dumps({"mode": mode, "rank": rank, "size": size, "device": device,
                       "store": store, "timeout_s": timeout_s})
    return [sys.executable, str(Path(__file__).resolve()), "--probe", spec]


def probe_rank(spec: dict[str, Any]) -> dict[str, Any]:
    """One rank of an all-reduce probe (run in its own process): ``mode`` ``nccl`` (a raw
    ``ProcessGroupNCCL``) or ``fgnn`` (:func:`~fgnn.exchange.groups.new_group`)."""
    import torch.distributed as dist

    from fgnn.exchange import groups as _groups

    device = torch.device(spec["device"])
    if device.type == "cuda":
        torch.cuda.set_device(device)
    store = dist.FileStore(spec["store"], spec["size"])
    timeout = datetime.timedelta(seconds=spec["timeout_s"])
    t = time.perf_counter()
    if spec["mode"] == "nccl":
        pg = _groups.nccl_group(store, spec["rank"], spec["size"], timeout, device)
    else:
        pg = _groups.new_group(store, 0, spec["rank"], spec["size"], device, spec["timeout_s"])
    buf = torch.full((1 << 20,), float(spec["rank"] + 1), device=device)
    got = _groups.group_sum(pg, buf, spec["timeout_s"])
    want = spec["size"] * (spec["size"] + 1) / 2
    return {"backend": "nccl" if _groups.is_nccl(pg) else "gloo",
            "ok": bool(torch.all(got == want)), "seconds": time.perf_counter() - t}


def _probe_threads(mode: str, devices: list[str], timeout_s: float) -> dict[str, Any]:
    """:func:`_probe` with the ranks as threads of this process (the CPU dry run: no process
    start-up on a loaded CI machine)."""
    import threading

    ranks: list[dict[str, Any]] = [{"error": "did not finish"}] * len(devices)
    with tempfile.TemporaryDirectory() as tmp:
        def rank(r: int) -> None:
            spec = {"mode": mode, "rank": r, "size": len(devices), "device": devices[r],
                    "store": str(Path(tmp) / "store"), "timeout_s": timeout_s}
            try:
                ranks[r] = probe_rank(spec)
            except Exception as err:  # noqa: BLE001 - reported per rank
                ranks[r] = {"error": f"{type(err).__name__}: {err}"}

        threads = [threading.Thread(target=rank, args=(r,)) for r in range(len(devices))]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout_s + 30)
    return {"devices": devices, "ranks": ranks, "ok": all(r.get("ok") for r in ranks),
            "in_process": True}


def _probe(mode: str, devices: list[str], timeout_s: float) -> dict[str, Any]:
    """Ranks on ``devices`` (one process each): each rank's result or error."""
    with tempfile.TemporaryDirectory() as tmp:
        store = str(Path(tmp) / "store")
        procs = [subprocess.Popen(_probe_cmd(mode, r, len(devices), d, store, timeout_s),
                                  cwd=REPO, text=True, stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT) for r, d in enumerate(devices)]
        ranks = []
        for p in procs:
            try:
                text, _ = p.communicate(timeout=timeout_s + 30)
            except subprocess.TimeoutExpired:
                p.kill()
                text, _ = p.communicate()
                ranks.append({"error": f"timed out after {timeout_s + 30:.0f} s"})
                continue
            last = [ln for ln in text.splitlines() if ln.startswith("{")]
            ranks.append(json.loads(last[-1]) if last else {"error": text.strip()[-600:]})
    return {"devices": devices, "ranks": ranks,
            "ok": all(r.get("ok") for r in ranks)}


def part_nccl(device: torch.device, timeout_s: float = 60.0) -> dict[str, Any]:
    """All-reduce probes with 1 and 2 ranks (raw NCCL and fgnn's group)."""
    if device.type != "cuda":
        return {"nccl 1 rank": {"skipped": "--device cpu: NCCL needs CUDA"},
                "nccl 2 ranks": {"skipped": "--device cpu: NCCL needs CUDA"},
                "fgnn group 2 ranks": _probe_threads("fgnn", ["cpu", "cpu"], timeout_s)}
    n = torch.cuda.device_count()
    two = ["cuda:0", "cuda:1"] if n >= 2 else ["cuda:0", "cuda:0"]
    res = {"nccl 1 rank": _probe("nccl", ["cuda:0"], timeout_s),
           "nccl 2 ranks": _probe("nccl", two, timeout_s),
           "fgnn group 2 ranks": _probe("fgnn", two, timeout_s)}
    if n < 2:  # NCCL refuses two ranks on one GPU: the refusal is what this layout must show
        r = res["nccl 2 ranks"]
        r["expected"] = "refused: NCCL allows one rank per GPU (1 GPU here)"
        r["ok"] = not r["ok"]
    return res


def _importable(module: str, env: Optional[dict[str, str]] = None) -> Optional[str]:
    """The version of ``module`` as a subprocess with ``env`` imports it, or None."""
    proc = subprocess.run([sys.executable, "-c", f"import {module}; "
                           f"print(getattr({module}, '__version__', '?'))"],
                          env=env, text=True, capture_output=True)
    return proc.stdout.strip() if proc.returncode == 0 else None


def prepare_site(wheels: Path, site: Path, modules: tuple[str, ...] = ("ray", "pytest")
                 ) -> dict[str, Any]:
    """What a GPU host lacks of ``modules`` (Ray for the launch.py runs, pytest for the
    tests), from the files brought in ``wheels``: every ``*.whl`` installed into ``site`` with
    ``pip install --no-index --no-deps``, every ``ray*.tar.xz`` (a slim Ray) extracted there.
    ``{"missing", "pythonpath" (site, or None: nothing installed), "env"}``, and ``error`` or
    ``note`` when the install failed or found nothing."""
    missing = [m for m in modules if importlib.util.find_spec(m) is None]
    info: dict[str, Any] = {"missing": missing, "pythonpath": None, "env": None}
    whls, tars = sorted(wheels.glob("*.whl")), sorted(wheels.glob("ray*.tar.xz"))
    if not missing:
        return info
    if not whls and not tars:
        info["note"] = (f"{', '.join(missing)} not importable and {wheels} holds no *.whl or "
                        f"ray*.tar.xz (build a slim Ray with slim-ray.sh: docs/gpu.md)")
        return info
    site.mkdir(parents=True, exist_ok=True)
    if whls:
        pip = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-index",
                              "--no-deps", "-t", str(site)] + [str(w) for w in whls],
                             text=True, capture_output=True)
        if pip.returncode:
            info["error"] = f"pip install of {len(whls)} wheels failed: {pip.stderr[-600:]}"
            return info
    for tar in tars:
        with tarfile.open(tar) as tf:
            tf.extractall(site, filter="data")
    info["pythonpath"] = str(site)
    info["env"] = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(REPO)])}
    info["installed"] = [p.name for p in whls + tars]
    return info


def _launch(mode: str, transport: str, spec: str, out: Path, env: dict[str, str],
            timeout_s: float) -> dict[str, Any]:
    report = out / f"epochs-{mode}-{transport}.json"
    cmd = [sys.executable, str(REPO / "launch.py"), "--dataset", spec, "--mode", mode,
           "--devices", "1" if mode == "single" else "2", "--gpus-per-device", "0.5",
           "--sample-transport", transport, "--epochs", "1", "--no-progress",
           "--dashboard-host", "off", "--report", str(report)]
    t = time.perf_counter()
    try:
        proc = subprocess.run(cmd, cwd=REPO, env=env, text=True, capture_output=True,
                              timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout_s:.0f} s", "cmd": " ".join(cmd)}
    (out / f"epochs-{mode}-{transport}.log").write_text(proc.stdout + proc.stderr)
    entry: dict[str, Any] = {"rc": proc.returncode, "wall_s": time.perf_counter() - t,
                             "ok": proc.returncode == 0}
    if report.is_file():
        entry["report"] = report.name
        entry["epoch_s"] = [e.get("time_s") for e in json.loads(report.read_text())
                            .get("epochs", [])]
    else:
        entry["tail"] = (proc.stdout + proc.stderr).strip().splitlines()[-1:]
    return entry


def part_epochs(device: torch.device, spec: str, out: Path, env: Optional[dict[str, str]],
                deadline: float) -> dict[str, Any]:
    """launch.py in every mode for both transports (``env``: :func:`prepare_site`'s), each
    given an equal share of the time left before ``deadline``."""
    if device.type != "cuda":
        return {"skipped": "--device cpu: the launch.py runs need a GPU"}
    version = _importable("ray", env)
    if version is None:
        return {"skipped": "Ray is not importable (bring a slim Ray in --wheels: docs/gpu.md)"}
    runs = [(m, t) for m in MODES for t in TRANSPORTS]
    res: dict[str, Any] = {"ray": version}
    for left, (mode, transport) in zip(range(len(runs), 0, -1), runs):
        share = (deadline - time.perf_counter()) / left
        key = f"{mode} {transport}"
        res[key] = ({"skipped": f"out of the time budget ({share:.0f} s left for it)"}
                    if share < 25 else
                    _launch(mode, transport, spec, out, env or dict(os.environ), share))
    return res


# ------------------------------------------------------------------ summary
def _state(r: dict[str, Any]) -> Optional[str]:
    if "error" in r:
        return f"error: {r['error']}"
    if "skipped" in r:
        return f"skipped: {r['skipped']}"
    return None


def _rank_text(rank: int, r: dict[str, Any]) -> str:
    if "error" in r:
        return f"rank {rank} error: {' '.join(r['error'].split())[-200:]}"
    return (f"rank {rank} {r['backend']} {'sum ok' if r['ok'] else 'WRONG SUM'} "
            f"{r['seconds']:.2f} s")


def _peer_text(r: dict[str, Any]) -> str:
    where = f"{r['kind']} from {r['exporter']} to {r.get('reader', '?')}"
    if "refused" in r:
        return f"{where}: refused, peers read from the host: {r['refused']}"
    return (f"{where}: peer {r['peer_gb_per_s']:.3g}, host-to-device {r['host_gb_per_s']:.3g}, "
            f"local copy {r['local_gb_per_s']:.3g} ({r['batch']} rows of {r['dim']} float32); "
            f"{'same bytes' if r['same_bytes'] else 'WRONG BYTES'}")


def _summary_rows(res: dict[str, Any]) -> list[tuple[str, str]]:
    rows: list[tuple[str, str]] = []
    parts = res["parts"]
    site = res.get("site", {})
    rows.append(("modules from --wheels", _state(site) or site.get("note") or
                 (f"installed {', '.join(site['installed'])} for {', '.join(site['missing'])}"
                  if site.get("installed") else "none needed")))
    tests = parts.get("tests", {})
    for key in ("gpu_marker", "cuda_params"):
        r = tests.get(key, tests)
        rows.append((f"tests {key}", _state(r) or f"rc {r['rc']}: {r['summary']}"))
    for b, r in (parts.get("sampler") or {}).items():
        if b == "part_s":
            continue
        if not isinstance(r, dict) or "edges_per_s" not in r:
            rows.append(("sampler", _state(parts["sampler"]) or str(r)))
            break
        rows.append((f"sampler edges/s, batch {b}",
                     f"{r['edges_per_s'] / 1e6:.3g} M = {r['fraction_of_random_reads']:.1%} of "
                     f"{r['random_reads_per_s'] / 1e6:.4g} M random reads/s (goal {GOAL:.0%}: "
                     f"{'met' if r['goal_met'] else 'not met'}); seeds from {r['seed_pool']}, "
                     f"min {min(r['edges_per_batch'])} edges a batch"))
    pr = parts.get("peer", {})
    rows.append(("peer tier GB/s (2 processes)", _state(pr) or _peer_text(pr)))
    e = parts.get("extract", {})
    rows.append(("extract GB/s", _state(e) or
                 f"hit {e['hit_gb_per_s']:.3g}, miss {e['miss_gb_per_s']:.3g}; split apart "
                 f"{e['split_rows_per_s'] / 1e6:.3g} M rows/s; whole gather hit "
                 f"{e['gather_hit_gb_per_s']:.3g}, miss {e['gather_miss_gb_per_s']:.3g}"))
    for name, r in (parts.get("nccl") or {}).items():
        if not isinstance(r, dict) or name == "part_s":
            continue
        text = _state(r) or (f"{'ok' if r['ok'] else 'FAILED'} on {', '.join(r['devices'])}: "
                             + "; ".join(_rank_text(i, x) for i, x in enumerate(r["ranks"]))
                             + (f" ({r['expected']})" if r.get("expected") else ""))
        rows.append((name, text))
    ep = parts.get("epochs", {})
    if _state(ep):
        rows.append(("launch.py epochs", _state(ep)))
    for key, r in ep.items():
        if key in ("ray", "part_s") or not isinstance(r, dict):
            continue
        rows.append((f"launch.py {key} (--gpus-per-device 0.5)", _state(r) or
                     f"rc {r['rc']}, epoch s {r.get('epoch_s', r.get('tail'))}"))
    return rows


def summary(res: dict[str, Any]) -> str:
    """The markdown table of ``res`` for docs/benchmarks.md."""
    env = res["environment"]
    head = (f"GPU evidence {env['date']} on {env['device_name']} (torch {env['torch']}, "
            f"{res['dataset']}, {res['seconds']:.0f} s)")
    lines = [head, "", "| part | result |", "|---|---|"]
    lines += [f"| {a} | {b.replace('|', '/')} |" for a, b in _summary_rows(res)]
    return "\n".join(lines) + "\n"


# ------------------------------------------------------------------ main
def _run(res: dict[str, Any], name: str, fn: Callable[[], dict[str, Any]]) -> None:
    print(f"gpu-evidence: {name} ...", flush=True)
    t = time.perf_counter()
    try:
        res["parts"][name] = fn()
    except Exception as err:  # noqa: BLE001 - one part's failure must not stop the others
        res["parts"][name] = {"error": f"{type(err).__name__}: {err}",
                              "traceback": traceback.format_exc()[-2000:]}
    res["parts"][name]["part_s"] = time.perf_counter() - t


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="bench/gpu_evidence.py", description=__doc__.split("\n")[0])
    p.add_argument("--out", metavar="DIR", help="where everything goes (required)")
    p.add_argument("--device", default="cuda:0", help="cuda:0 (default), or cpu: a dry run")
    p.add_argument("--wheels", default=str(REPO / ".whl"), metavar="DIR",
                   help="where a Ray wheel (*.whl) or ray-slim.tar.xz waits (default .whl)")
    p.add_argument("--budget-s", type=float, default=360.0, help="the whole run's seconds")
    p.add_argument("--probe", help=argparse.SUPPRESS)
    return p


def main(argv: Optional[list[str]] = None) -> int:
    """Run every part; 0 when each ran or was skipped, 1 when one failed, 2 without CUDA."""
    args = _parser().parse_args(argv)
    if args.probe:
        print(json.dumps(probe_rank(json.loads(args.probe))), flush=True)
        return 0
    if not args.out:
        _parser().error("the following arguments are required: --out")
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        print(f"gpu-evidence: no CUDA device (torch {torch.__version__}); pass --device cpu "
              f"for a dry run", file=sys.stderr)
        return 2
    t0 = time.perf_counter()
    deadline = t0 + args.budget_s
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    size = SIZES[device.type]
    spec = f"rmat:scale={size['scale']},edge_factor=16,feat_dim={size['feat_dim']},seed=0"
    res: dict[str, Any] = {"environment": {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "device": str(device),
        "device_name": (torch.cuda.get_device_name(device) if device.type == "cuda"
                        else platform.machine()),
        "gpus": torch.cuda.device_count() if device.type == "cuda" else 0,
        "python": platform.python_version(), "torch": torch.__version__},
        "dataset": spec, "parts": {}}
    if device.type == "cpu":
        torch.set_num_threads(1)
    site: dict[str, Any] = {"skipped": "--device cpu: nothing is installed in a dry run"}
    if device.type == "cuda":
        site = prepare_site(Path(args.wheels), out / "site")
    res["site"] = {k: v for k, v in site.items() if k != "env"}
    env = site.get("env")
    _run(res, "tests", lambda: part_tests(device, out, min(120.0, args.budget_s / 3), env))
    from fgnn.data import load_dataset

    ds = load_dataset(spec)
    graph = ds.graph.to(device)
    _run(res, "sampler", lambda: part_sampler(ds, graph, device, size))
    inputs = [gpucheck._batch_inputs(graph, ds.train_idx, size["batches_of"][0], i)
              for i in range(3)]
    _run(res, "extract", lambda: gpucheck.check_extract(ds.features, inputs, device))
    _run(res, "peer", lambda: gpucheck.check_peer(device, **size["peer"]))
    _run(res, "nccl", lambda: part_nccl(device))
    _run(res, "epochs", lambda: part_epochs(device, spec, out, env, deadline))
    res["seconds"] = time.perf_counter() - t0
    failed = [k for k, v in res["parts"].items() if "error" in v]
    res["failed"] = failed
    (out / "evidence.json").write_text(json.dumps(res, indent=2, default=str))
    table = summary(res)
    (out / "summary.md").write_text(table)
    print(table, end="")
    print(f"gpu-evidence: wrote {out}/evidence.json and summary.md in {res['seconds']:.0f} s"
          + (f"; failed: {', '.join(failed)}" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

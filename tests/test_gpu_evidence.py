"""``bench/gpu_evidence.py`` (``make gpu-evidence``): its CPU dry run and its Ray install from a
wheels folder, as a GPU host without Ray would use them."""

from __future__ import annotations

import importlib.util
import json
import sys
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _module():
    spec = importlib.util.spec_from_file_location("gpu_evidence", REPO / "bench" /
                                                  "gpu_evidence.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_the_cpu_dry_run_writes_every_part_under_one_folder(tmp_path, capsys):
    ev = _module()
    out = tmp_path / "ev"
    assert ev.main(["--device", "cpu", "--out", str(out), "--wheels", str(tmp_path)]) == 0
    res = json.loads((out / "evidence.json").read_text())
    parts = res["parts"]
    assert res["failed"] == [] and res["environment"]["device"] == "cpu"
    assert "skipped" in parts["tests"] and "skipped" in parts["epochs"]
    for b in ev.SIZES["cpu"]["batches_of"]:
        s = parts["sampler"][str(b)]
        assert s["batch_size"] == b and min(s["edges_per_batch"]) > 0  # never empty
        assert s["random_reads_per_s"] > 0 and 0 < s["fraction_of_random_reads"]
    e = parts["extract"]
    assert e["hit_gb_per_s"] > 0 and e["miss_gb_per_s"] > 0 and e["split_rows_per_s"] > 0
    peer = parts["peer"]  # the shared-memory twin of the peer tier, across two processes
    assert peer["kind"] == "shm" and peer["same_bytes"], peer
    assert peer["peer_gb_per_s"] > 0 and peer["host_gb_per_s"] > 0
    assert "skipped" in parts["nccl"]["nccl 1 rank"]
    group = parts["nccl"]["fgnn group 2 ranks"]  # two processes sum through fgnn's group
    assert group["ok"] and [r["backend"] for r in group["ranks"]] == ["gloo", "gloo"]
    table = (out / "summary.md").read_text()
    assert table in capsys.readouterr().out
    for row in ("| tests gpu_marker | skipped: --device cpu", "| sampler edges/s, batch 64 |",
                "| extract GB/s |", "| peer tier GB/s (2 processes) | shm from cpu to cpu:",
                "| nccl 2 ranks | skipped:",
                "| launch.py epochs | skipped: --device cpu"):
        assert row in table, table


def test_ray_comes_from_a_wheel_in_the_given_folder_when_it_is_not_importable(tmp_path,
                                                                              monkeypatch):
    """A GPU host without Ray: the wheel brought along is installed with --no-index
    --no-deps into the run's folder, and the launch.py runs import it from there."""
    ev = _module()
    wheels = tmp_path / "whl"
    wheels.mkdir()
    with zipfile.ZipFile(wheels / "ray-0.0.1-py3-none-any.whl", "w") as z:
        z.writestr("ray/__init__.py", "__version__ = '0.0.1-test'\n")
        z.writestr("ray-0.0.1.dist-info/METADATA",
                   "Metadata-Version: 2.1\nName: ray\nVersion: 0.0.1\n")
        z.writestr("ray-0.0.1.dist-info/WHEEL",
                   "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\n"
                   "Tag: py3-none-any\n")
        z.writestr("ray-0.0.1.dist-info/RECORD", "")
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "ray" else real(name, *a))
    got = ev.prepare_site(wheels, tmp_path / "site")
    assert got["missing"] == ["ray"] and got["pythonpath"] == str(tmp_path / "site")
    assert (tmp_path / "site" / "ray" / "__init__.py").is_file()
    assert ev._importable("ray", got["env"]) == "0.0.1-test"  # what launch.py runs import
    empty = tmp_path / "none"
    empty.mkdir()
    assert "no *.whl" in ev.prepare_site(empty, tmp_path / "site2")["note"]
    monkeypatch.setattr(importlib.util, "find_spec", real)
    assert ev.prepare_site(wheels, tmp_path / "site3")["pythonpath"] is None  # nothing missing

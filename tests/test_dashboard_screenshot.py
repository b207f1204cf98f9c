"""A real browser shows the fgnn panels with live data of a running job.

A ``launch.py`` job runs with the Ray dashboard on; Debian's ``prometheus`` scrapes the job's Ray
processes (the discovery file Ray writes in the session directory) every second and serves the
fgnn dashboard as a console page (:func:`fgnn.monitor.dashboard.console_html`, the panels of
``fgnn/monitor/grafana/fgnn.json``); headless Chromium renders the page. The test reads the
rendered DOM (every panel has a legend entry and a drawn line of many points) and the screenshot's
pixels (coloured series lines, not an empty page). ``FGNN_UPDATE_SCREENSHOT=1`` copies the
screenshot to ``docs/img/dashboard-prometheus.png``.

``.ci/run`` installs ``prometheus`` and ``chromium`` from Debian; without them the test skips.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from fgnn.monitor.dashboard import CONSOLE_NAME, console_html, load_dashboard

REPO = Path(__file__).resolve().parents[1]
DOC_IMAGE = REPO / "docs" / "img" / "dashboard-prometheus.png"
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update",
                  "--disable-sync", "--hide-scrollbars"]

pytestmark = pytest.mark.slow


def _need(*programs: str) -> dict[str, str]:
    found = {p: shutil.which(p) for p in programs}
    missing = [p for p, path in found.items() if path is None]
    if missing:
        pytest.skip(f"{', '.join(missing)} not on PATH (`apt-get install prometheus chromium`, "
                    f"as .ci/run does)")
    return found  # type: ignore[return-value]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _query(base: str, expr: str) -> list:
    url = f"{base}/api/v1/query?{urllib.parse.urlencode({'query': expr})}"
    with urllib.request.urlopen(url, timeout=10) as r:
        return json.load(r)["data"]["result"]


def _chromium(chromium: str, profile: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([chromium, *CHROMIUM_FLAGS, f"--user-data-dir={profile}",
                           "--virtual-time-budget=20000", *args],
                          capture_output=True, text=True, timeout=180)


def _colour_pixels(png: Path) -> int:
    """Pixels of a saturated colour (the series lines; the page itself is grey on white)."""
    import matplotlib.image as mpimg
    import numpy as np

    rgb = mpimg.imread(png)[..., :3]
    spread = rgb.max(axis=-1) - rgb.min(axis=-1)
    return int(np.count_nonzero(spread > 0.25))


def _panels(dom: str) -> dict[int, str]:
    parts = re.split(r'<div id="fgnn-panel-(\d+)"', dom)
    return {int(parts[i]): parts[i + 1] for i in range(1, len(parts) - 1, 2)}


def test_browser_shows_fgnn_panels_with_live_job_data(tmp_path):
    tools = _need("prometheus", "chromium")
    env = {**os.environ, "PYTHONPATH": str(REPO), "RAY_metrics_report_interval_ms": "1000"}
    err = open(tmp_path / "job.err", "w")
    job = subprocess.Popen(
        [sys.executable, str(REPO / "launch.py"), "--model", "sage", "--devices", "2",
         "--batch-size", "64", "--epochs", "25", "--cache-ratio", "0.3",
         "--report", str(tmp_path / "run" / "report.json")],
        cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=err,
        text=True)
    prom = None
    try:
        # the job's own session: Ray names it after the driver's pid
        deadline = time.monotonic() + 240
        discovery = None
        while discovery is None and time.monotonic() < deadline and job.poll() is None:
            hits = list(Path("/tmp/ray").glob(f"session_*_{job.pid}/"
                                              f"prom_metrics_service_discovery.json"))
            discovery = hits[0] if hits else None
            time.sleep(0.5)
        assert discovery is not None, "the job's Ray session wrote no discovery file"
        config = tmp_path / "prometheus.yml"
        config.write_text("global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
                          "scrape_configs:\n- job_name: ray\n  file_sd_configs:\n"
                          f"  - files: ['{discovery}']\n")
        consoles = tmp_path / "consoles"
        consoles.mkdir()
        (consoles / CONSOLE_NAME).write_text(console_html(duration_s=300))
        port = _free_port()
        base = f"http://127.0.0.1:{port}"
        prom = subprocess.Popen(
            [tools["prometheus"], f"--config.file={config}",
             f"--storage.tsdb.path={tmp_path / 'tsdb'}", f"--web.listen-address=127.0.0.1:{port}",
             f"--web.console.templates={consoles}"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        out, _ = job.communicate(timeout=600)
        assert job.returncode == 0, out + (tmp_path / "job.err").read_text()[-3000:]
        assert "Ray dashboard at http" in out  # the job ran with its dashboard

        # Prometheus holds the job's series under Ray's prefix (ray_fgnn_*, not fgnn_*); the job
        # has ended, so its series are stale now: ask for their last sample
        for name in ("ray_fgnn_batches_total", "ray_fgnn_stage_seconds_total",
                     "ray_fgnn_queue_depth", "ray_fgnn_cache_hit_rate",
                     "ray_fgnn_bytes_host_to_device_total"):
            assert _query(base, f"last_over_time({name}[10m])"), f"Prometheus has no {name}"
        assert not _query(base, "last_over_time(fgnn_batches_total[10m])")

        url = f"{base}/consoles/{CONSOLE_NAME}"
        dom = _chromium(tools["chromium"], tmp_path / "profile-dom", "--dump-dom", url).stdout
        panels = _panels(dom)
        titles = [p["title"] for p in load_dashboard()["panels"]]
        assert len(panels) == len(titles) == 6
        for pid, body in panels.items():
            legend = re.findall(r'<span class="label">([^<]+)</span>', body)
            lines = [d for d in re.findall(r'<path class="path" d="([^"]+)"', body)
                     if d.count("L") >= 5]
            assert legend and lines, f"panel {titles[pid - 1]!r} shows no data"
        stages = set(re.findall(r'<span class="label">([^<]+)</span>', panels[3]))
        assert {"sample", "mark", "copy", "extract", "train"} <= stages

        png = tmp_path / "dashboard.png"
        shot = _chromium(tools["chromium"], tmp_path / "profile-png", "--window-size=1400,1100",
                         f"--screenshot={png}", url)
        assert png.is_file(), shot.stderr[-2000:]
        assert _colour_pixels(png) > 3000  # drawn series, not an empty page
        if os.environ.get("FGNN_UPDATE_SCREENSHOT") == "1":
            DOC_IMAGE.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(png, DOC_IMAGE)
    finally:
        err.close()
        for proc in (job, prom):
            if proc is not None and proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    proc.kill()

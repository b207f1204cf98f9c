"""The fgnn Grafana dashboard, its install next to Ray's dashboards, and the Ray start helpers."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from fgnn import raystart
from fgnn.monitor import dashboard as dash
from fgnn.monitor.metrics import EXPORT_PREFIX, METRIC_NAMES, STAGES

REPO = Path(__file__).resolve().parents[1]


def _metric_names(expr: str) -> set[str]:
    return set(re.findall(r"\b(ray_fgnn_\w+|fgnn_\w+)\b", expr))


def test_panels_cover_the_issue_list_with_exported_names():
    model = dash.load_dashboard()
    titles = " ".join(p["title"].lower() for p in model["panels"])
    for word in ("queue", "per second", "stage", "hit rate", "bytes"):
        assert word in titles
    exported = {EXPORT_PREFIX + n for n in METRIC_NAMES}
    used = set().union(*(_metric_names(e) for _, e in dash.panel_queries()))
    assert used and used <= exported  # Ray adds its ray_ prefix; never the bare fgnn_ name
    assert {"ray_fgnn_queue_depth", "ray_fgnn_batches_per_second",
            "ray_fgnn_stage_seconds_total", "ray_fgnn_cache_hit_rate",
            "ray_fgnn_bytes_host_to_device_total"} <= used
    stage = next(p for p in model["panels"] if "stage" in p["title"].lower())
    assert "by (stage)" in stage["targets"][0]["expr"]
    assert all(s[0].upper() in stage["title"] for s in STAGES)  # S, M, C, E, T


def test_panel_queries_fill_the_session_variable():
    all_q = dash.panel_queries()
    one = dash.panel_queries("session_2025-01-01_00-00-00_1_42")
    assert all('SessionName=~".+"' in e for _, e in all_q)
    assert all(r'session_2025\-01\-01_00\-00\-00_1_42' in e for _, e in one)
    assert not any("$" in e for _, e in all_q + one)


def test_install_puts_the_dashboard_beside_rays(tmp_path, monkeypatch):
    monkeypatch.delenv("RAY_METRICS_GRAFANA_DASHBOARD_OUTPUT_DIR", raising=False)
    folder = tmp_path / "metrics" / "grafana" / "dashboards"
    folder.mkdir(parents=True)
    (folder / "default_grafana_dashboard.json").write_text("{}")
    dest = dash.install(tmp_path)
    assert dest == folder / dash.INSTALLED_NAME
    assert json.loads(dest.read_text())["uid"] == "fgnn"
    other = tmp_path / "elsewhere"
    other.mkdir()
    monkeypatch.setenv("RAY_METRICS_GRAFANA_DASHBOARD_OUTPUT_DIR", str(other))
    assert dash.install(tmp_path) == other / dash.INSTALLED_NAME  # Ray's own override


def test_install_without_a_session_is_one_line_exit_2(tmp_path, monkeypatch, capsys):
    monkeypatch.delenv("RAY_METRICS_GRAFANA_DASHBOARD_OUTPUT_DIR", raising=False)
    assert dash.main(["install", "--session-dir", str(tmp_path / "none")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "is not a directory" in err
    assert not (tmp_path / "none").exists()  # nothing created


def test_console_page_and_url_carry_every_panel_query():
    page = dash.console_html()
    for title, expr in dash.panel_queries():
        assert json.dumps(expr) in page
    assert page.count("new PromConsole.Graph(") == len(dash.load_dashboard()["panels"])
    assert "{{" not in page.replace("{{ pathPrefix }}", "")  # only the one Go template action
    url = dash.prometheus_graph_url("http://h:9", range_input="5m")
    assert url.startswith("http://h:9/graph?") and "g5.expr=" in url and "g6.expr" not in url


def test_package_data_is_declared():
    assert '"fgnn.monitor" = ["grafana/*.json"]' in (REPO / "pyproject.toml").read_text()


# ---------------------------------------------------------------------- Ray start helpers
def test_explicit_token_auth_only_when_the_user_set_no_mode(monkeypatch):
    import ray._private.authentication.authentication_token_setup as setup

    calls = []
    monkeypatch.setattr(setup, "_enable_token_auth", lambda: calls.append(1))
    monkeypatch.delenv("RAY_AUTH_MODE", raising=False)
    assert raystart.explicit_token_auth() == "token" and calls == [1]
    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")
    assert raystart.explicit_token_auth() == "disabled" and calls == [1]


class _FakeRay:
    """ray.init that fails in a function named like Ray's dashboard start, once."""

    def __init__(self, error_in: str) -> None:
        self.calls: list[dict] = []
        self.error_in = error_in
        self.shutdowns = 0

    def init(self, **kwargs):
        self.calls.append(kwargs)
        if kwargs.get("include_dashboard"):
            return self._fail()
        return "ctx"

    def _fail(self):
        ns: dict = {}
        exec(f"def {self.error_in}():\n    import logging\n"
             f"    logging.getLogger('ray._private.services').error('Failed to start the "
             f"dashboard , return code 1')\n    raise Exception('last lines of the log')", ns)
        ns[self.error_in]()

    def shutdown(self):
        self.shutdowns += 1


def test_failed_dashboard_start_retries_without_it(monkeypatch, caplog):
    import ray

    fake = _FakeRay("start_api_server")
    monkeypatch.setattr(ray, "init", fake.init)
    monkeypatch.setattr(ray, "shutdown", fake.shutdown)
    with caplog.at_level("DEBUG", logger="ray._private.services"):
        ctx, why = raystart.init_with_dashboard(num_cpus=2, dashboard_host="127.0.0.1")
    assert ctx == "ctx" and why == "Failed to start the dashboard, return code 1"
    assert [c.get("include_dashboard") for c in fake.calls] == [True, False]
    assert "dashboard_host" not in fake.calls[1] and fake.calls[1]["num_cpus"] == 2
    assert fake.shutdowns == 1
    assert not caplog.records  # Ray's error lines are held back, the caller prints one line


def test_other_start_failures_are_not_mistaken_for_the_dashboard(monkeypatch):
    import ray

    fake = _FakeRay("start_gcs_server")
    monkeypatch.setattr(ray, "init", fake.init)
    monkeypatch.setattr(ray, "shutdown", fake.shutdown)
    with pytest.raises(Exception, match="last lines"):
        raystart.init_with_dashboard(num_cpus=2)
    assert len(fake.calls) == 1


def test_up_serves_the_fgnn_console_on_rays_config(tmp_path):
    import shutil
    import signal
    import socket
    import subprocess
    import sys
    import time
    import urllib.request

    if shutil.which("prometheus") is None:
        pytest.skip("prometheus not on PATH (`apt-get install prometheus`, as .ci/run does)")
    (tmp_path / "metrics" / "prometheus").mkdir(parents=True)
    (tmp_path / "metrics" / "prometheus" / "prometheus.yml").write_text(
        "global: {scrape_interval: 10s}\nscrape_configs: []\n")
    (tmp_path / "metrics" / "grafana" / "dashboards").mkdir(parents=True)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {k: v for k, v in os.environ.items() if k not in (
        "RAY_METRICS_GRAFANA_DASHBOARD_OUTPUT_DIR", "PATH")}
    env["PATH"] = str(Path(shutil.which("prometheus")).parent)  # no grafana: a Prometheus alone
    env["PYTHONPATH"] = str(REPO)
    proc = subprocess.Popen([sys.executable, "-m", "fgnn.monitor.dashboard", "up",
                             "--session-dir", str(tmp_path), "--data-dir", str(tmp_path / "tsdb"),
                             "--prometheus-listen", f"127.0.0.1:{port}"],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        page, deadline = "", time.monotonic() + 60
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/consoles/fgnn.html",
                                            timeout=5) as r:
                    page = r.read().decode()
                break
            except OSError:
                time.sleep(0.5)
        assert "new PromConsole.Graph(" in page and "ray_fgnn_queue_depth" in page
        assert (tmp_path / "metrics" / "grafana" / "dashboards" / dash.INSTALLED_NAME).is_file()
    finally:
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0
    assert "Grafana not started" in out


class _Stop(Exception):
    """Raised by a fake ``ray.init`` once it has recorded its arguments."""


def _ray_init_kwargs(monkeypatch, starter: str) -> dict:
    """The keyword arguments ``starter`` (``job``, ``job-with-dashboard`` or ``runtime``) gives
    ``ray.init`` when it starts Ray for a 2-device job (a fake ``ray.init`` stops it there)."""
    import types

    import ray

    from fgnn.config import JobConfig, RuntimeConfig
    from fgnn.runtime.driver import Runtime
    from fgnn.job import Job

    calls: list[dict] = []

    def init(**kwargs):
        calls.append(kwargs)
        raise _Stop

    monkeypatch.setattr(ray, "init", init)
    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    host = "127.0.0.1" if starter == "job-with-dashboard" else None
    cfg = JobConfig(runtime=RuntimeConfig(devices=2, dashboard_host=host))
    with pytest.raises(_Stop):
        if starter == "runtime":
            Runtime._init_ray(types.SimpleNamespace(config=cfg))
        else:
            Job(cfg)._init_ray()
    return calls[0]


@pytest.mark.parametrize("starter", ["job-with-dashboard", "job", "runtime"])
def test_a_local_job_starts_its_own_node_while_another_cluster_runs_here(monkeypatch, starter):
    """With a ``ray start`` cluster on this machine, Ray's ``ray.init()`` without an address
    joins it (``/tmp/ray/ray_current_cluster``) and then refuses ``num_cpus``/``num_gpus``:
    "When connecting to an existing cluster, num_cpus and num_gpus must not be provided." The
    address fgnn passes must make Ray's own ``canonicalize_bootstrap_address`` start a new node
    (return None) even when its cluster lookup finds one."""
    from ray._private import services

    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.setattr(services, "find_gcs_addresses", lambda: ["192.0.2.2:45207"])
    monkeypatch.setattr(services, "find_bootstrap_address", lambda temp_dir=None: "192.0.2.2:45207")
    address = _ray_init_kwargs(monkeypatch, starter).get("address")
    assert services.canonicalize_bootstrap_address(address) is None, address


@pytest.mark.parametrize("starter", ["job-with-dashboard", "job", "runtime"])
def test_a_ray_fgnn_starts_passes_objects_up_to_4_mib_inline(monkeypatch, starter):
    """Gradient pushes and weights (296 KiB for GraphSAGE 128-256-16) cross on every task; Ray's
    100 KiB default sends them through the object store."""
    monkeypatch.delenv(raystart.TASK_EVENTS_ENV, raising=False)
    calls = [_ray_init_kwargs(monkeypatch, starter)]
    assert calls[0]["_system_config"] == {"max_direct_call_object_size": 4 * 1024 * 1024,
                                          "task_events_report_interval_ms": 0}
    assert raystart.INLINE_OBJECT_BYTES == 4 * 1024 * 1024


def test_a_ray_fgnn_starts_keeps_no_task_events_unless_asked(monkeypatch):
    """Ray's GCS grew 15.4 MiB per 100 epochs keeping an event of every task (issue 40's soak);
    a user's ``RAY_task_events_report_interval_ms`` is left to Ray."""
    monkeypatch.delenv(raystart.TASK_EVENTS_ENV, raising=False)
    assert raystart.local_system_config()["task_events_report_interval_ms"] == 0
    monkeypatch.setenv(raystart.TASK_EVENTS_ENV, "1000")
    assert "task_events_report_interval_ms" not in raystart.local_system_config()

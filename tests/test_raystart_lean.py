"""The local node fgnn starts: its API server (the dashboard) alongside the raylet unless the
machine is busy, the dashboard's dependencies looked up rather than imported, no log monitor, and
a shutdown that does not wait a second for the autoscaler monitor.
``ray.init`` and Ray's node are faked: no Ray starts."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
import types
from pathlib import Path

import pytest

ray = pytest.importorskip("ray")

from ray._private.node import Node  # noqa: E402

from fgnn import raystart  # noqa: E402

URL = "127.0.0.1:9999"
REPO = Path(__file__).resolve().parents[1]


class FakeNode:
    """What ``init_local`` reads of Ray's node: the dashboard URL its API server recorded."""

    webui_url = None


class FakeStart:
    """Ray's ``Node.start_api_server`` (a dashboard that takes ``delay`` seconds to come up)
    and a ``ray.init`` that calls it, then starts the raylet; the order is recorded."""

    def __init__(self, monkeypatch, delay: float = 0.3, fail: bool = False) -> None:
        self.events: list[str] = []
        self.calls: list[dict] = []
        self.delay, self.fail = delay, fail

        def start_api_server(node, *, include_dashboard, raise_on_failure):
            time.sleep(self.delay)
            if self.fail and include_dashboard:
                raise Exception("Failed to start the dashboard")
            node.webui_url = URL if include_dashboard else None
            self.events.append("api server up")

        monkeypatch.setattr(Node, "start_api_server", start_api_server)
        monkeypatch.setattr(ray, "init", self.init)
        monkeypatch.setattr(ray, "shutdown", lambda: None)

    def init(self, **kw):
        self.calls.append(kw)
        Node.start_api_server(FakeNode(), include_dashboard=kw.get("include_dashboard"),
                              raise_on_failure=bool(kw.get("include_dashboard")))
        self.events.append("raylet started")
        return types.SimpleNamespace(dashboard_url=None)


def _load(monkeypatch, load: float) -> None:
    monkeypatch.setattr(os, "getloadavg", lambda: (load, load, load))


def test_the_api_server_starts_alongside_the_raylet_and_is_waited_for(monkeypatch):
    fake = FakeStart(monkeypatch)
    _load(monkeypatch, 0.0)
    ctx = raystart.init_local(include_dashboard=True, dashboard_host="127.0.0.1")
    # the raylet did not wait for the API server, and init_local did
    assert fake.events == ["raylet started", "api server up"]
    assert ctx.dashboard_url == URL
    assert Node.start_api_server.__name__ == "start_api_server"  # Ray's own again
    assert not any(t.name == "fgnn-api-server-start" for t in threading.enumerate())


def test_on_a_busy_machine_ray_starts_the_api_server_first(monkeypatch):
    fake = FakeStart(monkeypatch)
    _load(monkeypatch, (raystart.ALONGSIDE_LOAD_PER_CORE + 1) * (os.cpu_count() or 1))
    raystart.init_local(include_dashboard=True)
    assert fake.events == ["api server up", "raylet started"]


def test_a_dashboard_that_fails_alongside_is_left_out_of_a_restart(monkeypatch):
    fake = FakeStart(monkeypatch, fail=True)
    _load(monkeypatch, 0.0)
    ctx, why = raystart.init_with_dashboard(num_cpus=2, dashboard_host="127.0.0.1")
    assert why is not None and "Failed to start the dashboard" in why
    assert [c.get("include_dashboard") for c in fake.calls] == [True, False]
    assert ctx.dashboard_url is None


def test_the_log_monitor_is_left_out_of_a_head_node_whose_driver_takes_no_output(monkeypatch):
    built = []
    monkeypatch.setattr(Node, "__init__", lambda self, ray_params, head=False, **kw:
                        built.append((head, ray_params.include_log_monitor)))
    with raystart._lean_node():
        Node(ray_params=types.SimpleNamespace(include_log_monitor=None), head=True)
        Node(types.SimpleNamespace(include_log_monitor=None), head=False)
    with raystart._lean_node(log_monitor=True):
        Node(ray_params=types.SimpleNamespace(include_log_monitor=None), head=True)
    assert built == [(True, False), (False, None), (True, None)]


def test_dashboard_dependencies_are_looked_up_not_imported(monkeypatch):
    code = ("import sys; from fgnn import raystart; "
            "assert raystart.dashboard_dependency_error() is None; "
            "print(sorted(m for m in ('aiohttp', 'opentelemetry.sdk', 'pydantic') "
            "if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert out.stdout.strip() == "[]"
    monkeypatch.setattr(raystart, "_DASHBOARD_MODULES", ("json", "fgnn_no_such_module"))
    err = raystart.dashboard_dependency_error()
    assert isinstance(err, ImportError) and err.name == "fgnn_no_such_module"


def test_shutdown_kills_the_monitor_that_ignores_sigterm_first(monkeypatch):
    class Proc:
        def __init__(self) -> None:
            self.killed = False

        def poll(self):
            return 0 if self.killed else None

        def kill(self) -> None:
            self.killed = True

    monitor, dashboard, order = Proc(), Proc(), []
    node = types.SimpleNamespace(all_processes={
        "monitor": [types.SimpleNamespace(process=monitor)],
        "dashboard": [types.SimpleNamespace(process=dashboard)]})
    monkeypatch.setattr(raystart, "local_head_node", lambda: node)
    monkeypatch.setattr(ray, "shutdown", lambda: order.append(monitor.killed))
    raystart.shutdown()
    assert order == [True] and not dashboard.killed  # the rest is Ray's to stop, in order

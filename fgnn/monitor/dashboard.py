"""The fgnn Grafana dashboard and the Prometheus + Grafana set-up around Ray's own files.

Ray writes, for each session, a Prometheus config (``<session>/metrics/prometheus/prometheus.yml``,
scraping every Ray process listed in ``<session>/prom_metrics_service_discovery.json``) and a
Grafana config (``<session>/metrics/grafana/grafana.ini`` with a provisioned Prometheus
datasource and the dashboards folder ``<session>/metrics/grafana/dashboards``). This module adds
fgnn's dashboard (``fgnn/monitor/grafana/fgnn.json``: queue depth, batches/s per executor,
S/M/C/E/T seconds, hit rate, bytes) to that folder and starts the servers on those configs.

Command line (``python -m fgnn.monitor.dashboard --help``)::

    python -m fgnn.monitor.dashboard up        # install fgnn.json, start Prometheus (+ Grafana)
    python -m fgnn.monitor.dashboard install   # only copy fgnn.json next to Ray's dashboards
    python -m fgnn.monitor.dashboard url       # Prometheus graph page of the fgnn queries

Without Grafana, ``up`` also serves the same panels as a Prometheus console page
(``/consoles/fgnn.html``, :func:`console_html`), drawn by Prometheus's own console library.

Metric names: ``ray.util.metrics`` series reach Prometheus with Ray's ``ray_`` prefix, so
``fgnn_queue_depth`` is queried as ``ray_fgnn_queue_depth`` (see :mod:`fgnn.monitor.metrics`).
"""

from __future__ import annotations

import argparse
import html
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, Optional, Sequence
from urllib.parse import urlencode

from fgnn.atomic import atomic_open

__all__ = ["DASHBOARD_JSON", "INSTALLED_NAME", "load_dashboard", "panel_queries",
           "session_dir", "dashboards_dir", "install", "prometheus_graph_url", "console_html",
           "write_console", "CONSOLE_NAME", "prometheus_command",
           "grafana_command", "main"]

#: The fgnn Grafana dashboard shipped as package data.
DASHBOARD_JSON = Path(__file__).with_name("grafana") / "fgnn.json"
#: File name of the installed copy, beside Ray's ``default_grafana_dashboard.json``.
INSTALLED_NAME = "fgnn_grafana_dashboard.json"
#: Ray's default root of session directories (``ray.init(_temp_dir=...)`` changes it).
RAY_TEMP_DIR = Path("/tmp/ray")
# Ray reads this variable to put its generated dashboards elsewhere (metrics_head.py).
_DASHBOARD_DIR_ENV = "RAY_METRICS_GRAFANA_DASHBOARD_OUTPUT_DIR"


def load_dashboard(path: Path = DASHBOARD_JSON) -> dict[str, Any]:
    """The Grafana dashboard model (``panels[*].targets[*].expr`` are PromQL)."""
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def panel_queries(session: Optional[str] = None,
                  dashboard: Optional[dict[str, Any]] = None) -> list[tuple[str, str]]:
    """``(panel title, PromQL)`` of every panel target, Grafana variables filled in.

    Args:
        session: Ray session name (``session_2025-...``) for ``$SessionName``; ``None``: all.
        dashboard: the model; defaults to :func:`load_dashboard`.
    """
    dash = dashboard if dashboard is not None else load_dashboard()
    value = re.escape(session) if session else ".+"
    out = []
    for panel in dash["panels"]:
        for target in panel["targets"]:
            out.append((panel["title"], target["expr"].replace("$SessionName", value)))
    return out


def session_dir(temp_dir: Path = RAY_TEMP_DIR) -> Path:
    """The latest Ray session directory (``<temp_dir>/session_latest`` resolved)."""
    return (Path(temp_dir) / "session_latest").resolve()


def dashboards_dir(session: Optional[Path] = None) -> Path:
    """Folder Grafana provisions Ray's dashboards from (Ray's own rule: the session's
    ``metrics/grafana/dashboards``, or ``$RAY_METRICS_GRAFANA_DASHBOARD_OUTPUT_DIR``)."""
    env = os.environ.get(_DASHBOARD_DIR_ENV)
    if env:
        return Path(env)
    return Path(session if session is not None else session_dir()) / "metrics" / "grafana" \
        / "dashboards"


def install(session: Optional[Path] = None) -> Path:
    """Copy the fgnn dashboard next to the dashboards Ray generated for ``session``.

    Ray rewrites that folder when its dashboard starts, so install after the job's Ray is up.

    Returns:
        The installed file.

    Raises:
        FileNotFoundError: the folder does not exist (no Ray session with a dashboard there).
    """
    folder = dashboards_dir(session)
    if not folder.is_dir():
        raise FileNotFoundError(f"{folder} is not a directory: start a job with the Ray "
                                f"dashboard on first (Ray writes its Grafana files there)")
    dest = folder / INSTALLED_NAME
    with atomic_open(dest, "w") as f:
        f.write(DASHBOARD_JSON.read_text(encoding="utf-8"))
    return dest


def prometheus_graph_url(base: str = "http://localhost:9090", session: Optional[str] = None,
                         range_input: str = "15m") -> str:
    """A Prometheus graph page (``/graph``) showing every fgnn panel query, one graph each."""
    params: dict[str, str] = {}
    for i, (_, expr) in enumerate(panel_queries(session)):
        params.update({f"g{i}.expr": expr, f"g{i}.tab": "0", f"g{i}.range_input": range_input})
    return f"{base.rstrip('/')}/graph?{urlencode(params)}"


# Prometheus console-library assets the console page loads (served by every Prometheus 2.x).
_CONSOLE_ASSETS = (
    ("css", "rickshaw/rickshaw.min.css"), ("css", "bootstrap4/css/bootstrap.min.css"),
    ("css", "css/prom_console.css"), ("js", "d3/d3.min.js"), ("js", "rickshaw/rickshaw.min.js"),
    ("js", "jquery/jquery.min.js"), ("js", "js/prom_console.js"))
# Grafana unit -> (PromConsole y-axis formatter, y units, y max)
_CONSOLE_UNITS = {"s": ("humanize", "s", "undefined"), "bytes": ("humanize1024", "B", "undefined"),
                  "percentunit": ("humanizeNoSmallPrefix", "", "1")}
#: File name of the Prometheus console page (``/consoles/fgnn.html``).
CONSOLE_NAME = "fgnn.html"


def console_html(dashboard: Optional[dict[str, Any]] = None, duration_s: int = 900) -> str:
    """The fgnn dashboard as a Prometheus console page: the same panels, queries and legends,
    drawn by Prometheus's own console library (for a set-up without Grafana)."""
    dash = dashboard if dashboard is not None else load_dashboard()
    head = "\n".join(
        f'<link rel="stylesheet" href="{{{{ pathPrefix }}}}/classic/static/{a}">' if kind == "css"
        else (f'<script src="{{{{ pathPrefix }}}}/classic/static/{a}"></script>' if a !=
              "js/prom_console.js" else '<script>var PATH_PREFIX = "{{ pathPrefix }}";</script>\n'
              f'<script src="{{{{ pathPrefix }}}}/classic/static/{a}"></script>')
        for kind, a in _CONSOLE_ASSETS)
    cells = []
    for panel in dash["panels"]:
        fmt, units, ymax = _CONSOLE_UNITS.get(panel["fieldConfig"]["defaults"].get("unit"),
                                              ("humanize", "", "undefined"))
        exprs = [t["expr"].replace("$SessionName", ".+") for t in panel["targets"]]
        names = [re.sub(r"{{\s*(\w+)\s*}}", r"[[\1]]", t.get("legendFormat") or "")
                 for t in panel["targets"]]
        pid = f"fgnn-panel-{panel['id']}"
        cells.append(
            f'<div class="col-6 mb-4"><h5>{html.escape(panel["title"])}</h5>'
            f'<p class="text-muted small">{html.escape(panel.get("description", ""))}</p>'
            f'<div id="{pid}"></div><script>new PromConsole.Graph({{'
            f'node: document.querySelector("#{pid}"), expr: {json.dumps(exprs)}, '
            f'name: {json.dumps(names)}, duration: {int(duration_s)}, height: 220, '
            f'yUnits: {json.dumps(units)}, max: {ymax}, '
            f'yAxisFormatter: PromConsole.NumberFormatter.{fmt}}});</script></div>')
    title = html.escape(dash["title"])
    return (f'<!doctype html>\n<html lang="en">\n<head>\n<title>{title}</title>\n'
            f'{head}\n</head>\n<body>\n<div class="container-fluid">\n'
            f'<h3 class="mt-3">{title}</h3>\n'
            f'<p class="text-muted">{html.escape(dash.get("description", ""))}</p>\n'
            f'<div class="row">\n' + "\n".join(cells) + "\n</div>\n</div>\n</body>\n</html>\n")


def write_console(folder: Path) -> Path:
    """Write :func:`console_html` as ``folder/fgnn.html`` (pass ``folder`` to Prometheus as
    ``--web.console.templates``); returns the file."""
    dest = Path(folder) / CONSOLE_NAME
    with atomic_open(dest, "w") as f:
        f.write(console_html())
    return dest


def prometheus_command(config: Path, data_dir: Path, listen: str = "127.0.0.1:9090",
                       consoles: Optional[Path] = None,
                       binary: Optional[str] = None) -> list[str]:
    """Command line of a Prometheus server on Ray's config (``binary`` defaults to the one on
    PATH, e.g. Debian's ``prometheus`` package); ``consoles`` serves the console pages there."""
    exe = binary or shutil.which("prometheus")
    if exe is None:
        raise FileNotFoundError("no prometheus on PATH: `apt-get install prometheus` (Debian), "
                                "or `ray metrics launch-prometheus` downloads one")
    cmd = [exe, f"--config.file={config}", f"--storage.tsdb.path={data_dir}",
           f"--web.listen-address={listen}", "--web.enable-lifecycle"]
    if consoles is not None:
        cmd.append(f"--web.console.templates={consoles}")
    return cmd


def grafana_command(session: Path, homepath: Path = Path("/usr/share/grafana")) -> list[str]:
    """Command line of Grafana on Ray's generated ``grafana.ini`` (datasource + dashboards)."""
    exe = shutil.which("grafana") or shutil.which("grafana-server")
    if exe is None:
        raise FileNotFoundError("no grafana or grafana-server on PATH (install Grafana from "
                                "grafana.com; no Debian package ships it)")
    ini = Path(session) / "metrics" / "grafana" / "grafana.ini"
    cmd = [exe] + (["server"] if Path(exe).name == "grafana" else [])
    return cmd + [f"--homepath={homepath}", f"--config={ini}"]


def _up(args: argparse.Namespace) -> int:
    session = Path(args.session_dir) if args.session_dir else session_dir()
    print(f"fgnn: fgnn dashboard installed at {install(session)}")
    config = session / "metrics" / "prometheus" / "prometheus.yml"
    data = Path(args.data_dir or tempfile.mkdtemp(prefix="fgnn-prometheus-"))
    consoles = write_console(data / "consoles").parent
    procs = [subprocess.Popen(prometheus_command(config, data, args.prometheus_listen,
                                                 consoles))]
    print(f"fgnn: Prometheus on http://{args.prometheus_listen} (Ray's config {config}); "
          f"fgnn panels: http://{args.prometheus_listen}/consoles/{CONSOLE_NAME}")
    try:
        procs.append(subprocess.Popen(grafana_command(session)))
        print("fgnn: Grafana on http://localhost:3000 (Ray's grafana.ini; dashboard 'fgnn')")
    except FileNotFoundError as e:
        print(f"fgnn: Grafana not started: {e}")
    print("fgnn: Ctrl-C stops them")
    signal.signal(signal.SIGTERM, signal.default_int_handler)  # `kill` stops them as Ctrl-C does
    try:
        return max(p.wait() for p in procs)
    except KeyboardInterrupt:
        for p in procs:
            p.terminate()
        for p in procs:
            p.wait()
        return 0


def build_parser() -> argparse.ArgumentParser:
    """The ``python -m fgnn.monitor.dashboard`` parser."""
    ap = argparse.ArgumentParser(prog="python -m fgnn.monitor.dashboard",
                                 description="fgnn's Grafana dashboard on Ray's metric files.")
    sub = ap.add_subparsers(dest="cmd", required=True)
    for name, text in (("up", "install the fgnn dashboard, then run Prometheus (and Grafana "
                              "if installed) on the configs Ray wrote for the session"),
                       ("install", "copy fgnn.json next to the Grafana dashboards Ray wrote"),
                       ("url", "print a Prometheus graph URL with every fgnn panel query")):
        p = sub.add_parser(name, help=text, description=text)
        p.add_argument("--session-dir", metavar="DIR",
                       help="Ray session directory (default: /tmp/ray/session_latest)")
        if name == "up":
            p.add_argument("--prometheus-listen", default="127.0.0.1:9090", metavar="HOST:PORT")
            p.add_argument("--data-dir", metavar="DIR",
                           help="Prometheus storage (default: a new temporary directory)")
        if name == "url":
            p.add_argument("--prometheus", default="http://localhost:9090", metavar="URL")
    return ap


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Entry point; returns the exit status (2 on a missing file or program)."""
    args = build_parser().parse_args(argv)
    try:
        if args.cmd == "install":
            session = Path(args.session_dir) if args.session_dir else None
            print(install(session))
        elif args.cmd == "url":
            name = Path(args.session_dir).resolve().name if args.session_dir else None
            print(prometheus_graph_url(args.prometheus, name))
        else:
            return _up(args)
    except FileNotFoundError as e:
        print(f"python -m fgnn.monitor.dashboard {args.cmd}: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())

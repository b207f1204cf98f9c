"""Starting a local Ray for a job: token authentication stated explicitly, an optional dashboard,
and larger inline objects.

Five things Ray does on a plain ``ray.init()`` that a training job should not inherit:

* With ``RAY_AUTH_MODE`` unset, Ray turns token authentication on for a new local cluster and
  logs a WARNING saying so on every run. :func:`explicit_token_auth` turns it on the same way
  (same mode, same token file ``~/.ray/auth_token``), stated explicitly, so Ray has nothing to
  warn about. A user's own ``RAY_AUTH_MODE`` (``token`` or ``disabled``) is left as it is.
* With ``include_dashboard=True``, a dashboard that does not come up (a busy or slow machine,
  an address it cannot bind) makes ``ray.init`` raise after the rest of the node has started.
  :func:`init_with_dashboard` stops that half-started node and starts Ray again without the
  dashboard, returning the reason in one line for the caller to print.
* Ray passes a task argument or return value inline only up to 100 KiB; anything larger goes
  through the shared-memory object store (a put, a fetch and a release per call). A Trainer's
  gradient push and the weights that come back are larger than that for most models (296 KiB
  for GraphSAGE 128-256-16) and cross on every task. :func:`local_system_config` raises the
  limit to :data:`INLINE_OBJECT_BYTES` for a cluster fgnn starts itself (``bench/ps.py`` times
  the exchange; docs/benchmarks.md). A cluster fgnn joins keeps its own setting.
* On Linux, Ray runs a node on the machine's routable address even when asked for
  ``127.0.0.1`` (``ray._private.services.resolve_ip_for_localhost``), and its processes listen
  there or on every interface: the DashboardAgent's and the dashboard head's ``/metrics``
  (no authentication), the agents' HTTP and gRPC ports, the GCS, raylet and worker gRPC ports.
  :func:`init_local` starts a local node on :data:`LOOPBACK` instead, so every port of the job
  listens on loopback only (``tests/adversarial/test_ray_endpoints.py`` checks each one); only
  the dashboard itself follows ``--dashboard-host``.
* A plain ``ray.init`` starts a node's processes one after the other, on the critical path of
  every job: the API server (the dashboard) is started and waited for before the raylet, the
  driver imports the dashboard's whole dependency tree (aiohttp, opentelemetry, pydantic) only
  to learn that it is installed, and a log monitor starts that forwards worker output to
  drivers, which in fgnn ask for none (``log_to_driver=False``). :func:`init_local` starts
  the API server alongside the raylet unless the machine is busy (waited for before
  ``ray.init``'s return is handed on), checks the dependencies by looking them up, and leaves
  the log monitor out (:func:`_lean_node`); :func:`shutdown` does not wait a second for the
  autoscaler monitor.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import signal
import threading
from contextlib import contextmanager
from typing import Any, Callable, Iterator, Optional, TypeVar

from fgnn.reaper import end_processes, ray_descendants

__all__ = ["AUTH_MODE_ENV", "INLINE_OBJECT_BYTES", "LOOPBACK", "explicit_token_auth",
           "join_errors", "token_auth_enabled", "token_hint", "init_local", "init_with_dashboard",
           "local_system_config", "retry_startup", "shutdown", "startup_timed_out",
           "RayStartError", "GCS_PORT_WAIT_S", "ALONGSIDE_LOAD_PER_CORE", "local_head_node",
           "local_node_processes", "stop_interrupted_start"]

#: Largest task argument or return value a Ray that fgnn starts passes inline (Ray's default is
#: 100 KiB); it covers the gradients and weights of models up to a million parameters.
INLINE_OBJECT_BYTES = 4 * 1024 * 1024

#: The address a local node that fgnn starts runs on: every port of the job listens here.
LOOPBACK = "127.0.0.1"

#: Environment variable that selects Ray's authentication mode (``token`` or ``disabled``).
AUTH_MODE_ENV = "RAY_AUTH_MODE"

#: A local node's API server starts alongside its raylet below this 1-minute load average per
#: core (on a first try; above it, and on the retry, Ray starts it first and waits for it).
ALONGSIDE_LOAD_PER_CORE = 2.0

#: Seconds a local start waits for the GCS to come up (Ray's default is 30).
GCS_PORT_WAIT_S = 120
#: Ray's variable for that wait (a value the user set is left as it is).
GCS_WAIT_ENV = "RAY_gcs_server_port_wait_time_s"
# Ray's messages for a node start that ran out of its wait.
_STARTUP_TIMEOUTS = ("timed out during startup", "while waiting for node to startup")

T = TypeVar("T")

# Ray's name of a node's autoscaler monitor process (ray_constants.PROCESS_TYPE_MONITOR).
_MONITOR = "monitor"

# Ray's loggers whose records about a failed dashboard start are replaced by one fgnn line.
_DASHBOARD_LOGGER = "ray._private.services"


#: Ray's setting of how often each process sends its task events to the GCS; 0 sends none.
TASK_EVENTS_ENV = "RAY_task_events_report_interval_ms"


def local_system_config() -> dict[str, Any]:
    """The ``_system_config`` of a local Ray that fgnn starts (``ray.init(_system_config=...)``):
    larger inline objects (:data:`INLINE_OBJECT_BYTES`), and no task events unless the user's
    ``RAY_task_events_report_interval_ms`` asks for them.

    Ray's GCS keeps an event of every task (up to 100,000, and then the ids of those it drops)
    for the dashboard's task list and ``ray list tasks``; a job's driver polls its queue and
    its Trainers claim steps many times an epoch, so the GCS would grow with every epoch
    (``bench/soak.py`` measures it). fgnn's own metrics and the actors' list do not come from
    task events."""
    config: dict[str, Any] = {"max_direct_call_object_size": INLINE_OBJECT_BYTES}
    if TASK_EVENTS_ENV not in os.environ:
        config["task_events_report_interval_ms"] = 0
    return config


def explicit_token_auth() -> str:
    """Enable Ray's token authentication for a local start unless ``RAY_AUTH_MODE`` is set.

    Call before ``ray.init`` starts a new local cluster. Ray itself sets ``RAY_AUTH_MODE=token``
    in this case and then warns that it did; setting it here first (and refreshing Ray's cached
    config, as Ray does) gives the same secure default without the warning.

    Returns:
        The mode in force: ``token`` or the user's own ``RAY_AUTH_MODE``.
    """
    mode = os.environ.get(AUTH_MODE_ENV)
    if mode is not None:
        return mode.lower()
    try:
        from ray._private.authentication.authentication_token_setup import _enable_token_auth
    except ImportError:  # a Ray without token auth: nothing to state
        return "disabled"
    _enable_token_auth()
    return "token"


def join_errors() -> tuple[type, ...]:
    """The errors of a ``ray.init(address=...)`` that could not join the cluster: no answer,
    or (a Ray with token authentication) a token that is missing or wrong."""
    try:
        from ray.exceptions import AuthenticationError
    except ImportError:
        return (ConnectionError, TimeoutError)
    return (ConnectionError, TimeoutError, AuthenticationError)


def token_hint() -> str:
    """``; the cluster may require token authentication: ...`` for a failed join while this
    process does not use Ray's token authentication (``RAY_AUTH_MODE`` is not ``token``); empty
    when it does (the token, not the mode, is then what to check)."""
    if os.environ.get(AUTH_MODE_ENV, "").lower() == "token":
        return ("; check that the token in RAY_AUTH_TOKEN, or in the file RAY_AUTH_TOKEN_PATH "
                "names (default ~/.ray/auth_token), is the cluster's (ray get-auth-token)")
    return (f"; the cluster may require token authentication (a cluster started with "
            f"{AUTH_MODE_ENV}=token): set {AUTH_MODE_ENV}=token and the cluster's token in "
            f"RAY_AUTH_TOKEN, or in the file ~/.ray/auth_token (ray get-auth-token on the "
            f"cluster prints it)")


def local_head_node() -> Any:
    """Ray's node object of the node this process started (``ray.init`` of a new local node);
    None when it joined a cluster or Ray is not started."""
    try:
        import ray._private.worker as ray_worker
    except ImportError:
        return None
    node = getattr(ray_worker, "_global_node", None)
    return node if node is not None and getattr(node, "head", False) else None


def local_node_processes() -> Optional[set[int]]:
    """The processes of the Ray node this process started (``ray.init`` of a new local node):
    its GCS, raylet, dashboard and the like; None when it joined a cluster or Ray is not
    started."""
    node = local_head_node()
    if node is None:
        return None
    pids = {int(info.process.pid) for infos in node.all_processes.values() for info in infos
            if getattr(info, "process", None) is not None}
    return pids


def shutdown() -> None:
    """``ray.shutdown()``, with the autoscaler monitor of the local node this process started
    killed first: it does not exit on Ray's SIGTERM, and Ray waits a whole second for it
    before it kills it (a second of every job's shutdown; the monitor keeps no state)."""
    import ray

    node = local_head_node()
    for info in (node.all_processes.get(_MONITOR, ()) if node is not None else ()):
        process = getattr(info, "process", None)
        if process is not None and process.poll() is None:
            try:
                process.kill()
            except OSError:
                pass
    ray.shutdown()


def token_auth_enabled() -> bool:
    """Whether this process talks to Ray with token authentication (after ``ray.init``)."""
    try:
        from ray._private.authentication.authentication_utils import is_token_auth_enabled
    except ImportError:
        return False
    return bool(is_token_auth_enabled())


class _Swallow(logging.Filter):
    """Holds back the records of a logger while a dashboard start is tried."""

    def __init__(self) -> None:
        super().__init__()
        self.records: list[logging.LogRecord] = []

    def filter(self, record: logging.LogRecord) -> bool:  # noqa: D102
        self.records.append(record)
        return False


def _frames(tb: Any) -> list[Any]:
    out = []
    while tb is not None:
        out.append(tb.tb_frame)
        tb = tb.tb_next
    return out


def _from_dashboard_start(err: BaseException) -> bool:
    """Whether ``err`` was raised while Ray started its dashboard (``start_api_server``)."""
    return any(f.f_code.co_name == "start_api_server" for f in _frames(err.__traceback__))


def _stop_half_started(err: BaseException) -> Optional[str]:
    """Stop what the failed ``ray.init`` had started; returns its log directory if known."""
    from ray._private.node import Node

    logs = None
    for frame in _frames(err.__traceback__):
        node = frame.f_locals.get("self")
        info = frame.f_locals.get("process_info")
        if frame.f_code.co_name == "start_api_server" and info is not None:
            try:  # the dashboard process: started, but not yet owned by the node
                info.process.kill()
            except Exception:
                pass
        if isinstance(node, Node):
            logs = getattr(node, "_logs_dir", logs)
            try:
                node.kill_all_processes(check_alive=False, allow_graceful=True, wait=True)
            except Exception:
                pass
    return logs


def _reason(err: BaseException, records: list[logging.LogRecord]) -> str:
    """One line: Ray's first error about the dashboard, else the exception's first line."""
    errors = [r.getMessage() for r in records if r.levelno >= logging.ERROR]
    lines = errors[:1] or [ln for ln in str(err).splitlines() if ln.strip()][:1]
    why = " ".join(lines[0].split()).replace(" ,", ",") if lines else type(err).__name__
    return why if len(why) <= 200 else why[:197] + "..."


@contextmanager
def _loopback_node() -> Iterator[None]:
    """While ``ray.init`` starts a node: let it keep :data:`LOOPBACK` as the node address.

    Ray swaps a loopback node address for the routable one unless its (private) switch for
    machines without clusters is off (``ray_constants.ENABLE_RAY_CLUSTER``, read when the node
    starts); it is turned off for the start only. A Ray without the switch is left as it is
    (the endpoint test then shows what listens where).
    """
    try:
        import ray._private.ray_constants as constants
    except ImportError:
        yield
        return
    old = getattr(constants, "ENABLE_RAY_CLUSTER", None)
    if old is None:
        yield
        return
    constants.ENABLE_RAY_CLUSTER = False
    try:
        yield
    finally:
        constants.ENABLE_RAY_CLUSTER = old


class RayStartError(RuntimeError):
    """Ray's local node did not start in time, on the retry either (a machine too loaded)."""


def startup_timed_out(err: BaseException) -> bool:
    """Whether ``err`` is Ray's node start running out of its fixed wait (30 s for the raylet
    to register, ``The current node timed out during startup``)."""
    text = str(err)
    return any(mark in text for mark in _STARTUP_TIMEOUTS)


def _load_text() -> str:
    """``load average 17.2 on 2 cores`` (empty where the system does not say)."""
    try:
        load = os.getloadavg()[0]
    except (AttributeError, OSError):
        return ""
    return f"load average {load:.1f} on {os.cpu_count() or 1} cores"


def _say_stdout(line: str) -> None:
    print(line, flush=True)


def retry_startup(start: Callable[[], T], say: Optional[Callable[[str], None]] = None) -> T:
    """``start()`` (a ``ray.init`` of a new local node), once more when Ray's node start timed
    out (:func:`startup_timed_out`), after stopping what the first try had started.

    Ray waits a fixed 30 s for a new node's raylet to register (no setting changes it); on a
    loaded machine that wait runs out although the node would have come up. The retry is said
    on the console through ``say`` (default: standard output).

    Raises:
        RayStartError: the retry timed out too, in one line with the machine's load.
        Exception: whatever else ``start`` raises.
    """
    started, value = _try_start(start)
    if started:
        return value
    load = _load_text()
    (say or _say_stdout)(f"fgnn: warning: Ray's node did not start in time"
                         f"{f' ({load})' if load else ''}; starting it once more")
    started, value = _try_start(start)
    if started:
        return value
    why = _load_text() or "Ray waits a fixed 30 s for its raylet"
    raise RayStartError(f"Ray's local node did not start in time, twice ({why}); the machine "
                        f"is too busy for Ray to start: try again when it is less "
                        f"loaded") from value


def _try_start(start: Callable[[], T]) -> tuple[bool, Any]:
    """``(True, start())``; ``(False, error)`` when Ray's node start timed out, after stopping
    what the try had started. Any other error is raised."""
    try:
        return True, start()
    except Exception as err:
        if not startup_timed_out(err):
            raise
        _stop_timed_out(err)
        return False, err


def _stop_timed_out(err: BaseException) -> None:
    """Stop what a ``ray.init`` that timed out had started, and Ray's state in this process."""
    import ray

    _stop_half_started(err)
    ray.shutdown()


def init_local(say: Optional[Callable[[str], None]] = None, **kwargs: Any) -> Any:
    """``ray.init(**kwargs)`` of a new local node on :data:`LOOPBACK`: Ray's processes listen
    on loopback only (the dashboard on its ``dashboard_host``). A start that times out on a
    loaded machine is tried once more (:func:`retry_startup`), and the GCS gets
    :data:`GCS_PORT_WAIT_S` to come up unless ``RAY_gcs_server_port_wait_time_s`` says. The
    node is a lean one (:func:`_lean_node`): its API server starts alongside the raylet on a
    first try below :data:`ALONGSIDE_LOAD_PER_CORE`, and without ``log_to_driver`` it has no
    log monitor.

    Args:
        say: prints the retry's line (default: standard output).
        **kwargs: the ``ray.init`` arguments of a new local cluster (no ``address`` other than
            ``local``).

    Returns:
        Ray's context.

    Raises:
        RayStartError: the node did not start in time, twice.
    """
    import ray

    tries: list[int] = []

    def start() -> Any:
        # the API server alongside the raylet on a first try on a machine not too busy only:
        # else it would take the CPU the raylet needs to register within Ray's fixed 30 s
        alongside = not tries and _cpu_to_spare()
        tries.append(1)
        # the log monitor only for a driver that asks for its executors' output
        log_monitor = bool(kwargs.get("log_to_driver", True))
        with _loopback_node(), _patient_gcs(), _lean_node(alongside, log_monitor) as api_server:
            try:
                ctx = ray.init(_node_ip_address=LOOPBACK, **kwargs)
            except BaseException:
                api_server.join()  # its process is the node's before the node is stopped
                raise
        api_server.join(raise_error=True)
        if getattr(ctx, "dashboard_url", None) is None and api_server.url:
            ctx.dashboard_url = api_server.url  # known once the API server is up
        return ctx

    with _interruptible_start():
        return retry_startup(start, say)


@contextmanager
def _interruptible_start() -> Iterator[None]:
    """While a local node starts: ``SIGTERM`` raises fgnn's :class:`~fgnn.sigterm.Terminated`
    (Ray's own handler, a ``sys.exit(15)`` installed at the top of ``ray.init``, is kept out),
    and an interrupt (Ctrl-C, ``SIGTERM``, an exit) ends what the start had started, its agents
    included (:func:`stop_interrupted_start`), before it goes on.

    A signal whose exception Python swallowed (raised inside a callback whose errors it only
    prints, e.g. ``logging``'s at-fork hook while Ray starts a process: ``Exception ignored in
    <function _releaseLock>``) is noted all the same: once the start returns, the node is
    stopped and the interrupt raised."""
    before = ray_descendants()
    received: list[int] = []
    restore = _note_signals(received)
    try:
        with _no_ray_sigterm_handler():
            yield
    except (KeyboardInterrupt, SystemExit):
        stop_interrupted_start(before)
        raise
    except Exception:
        if not received:
            raise
        stop_interrupted_start(before)  # an error after a swallowed signal: the signal wins
        raise _interrupt_of(received[0]) from None
    else:
        if received:  # the signal's exception was swallowed: raise it now
            stop_interrupted_start(before)
            raise _interrupt_of(received[0])
    finally:
        restore()


def _interrupt_of(signum: int) -> KeyboardInterrupt:
    """The exception a signal raises in a job: :class:`~fgnn.sigterm.Terminated` for
    ``SIGTERM``, ``KeyboardInterrupt`` for Ctrl-C."""
    from fgnn.sigterm import Terminated

    if signum == signal.SIGTERM:
        return Terminated(f"received {signal.Signals(signum).name}")
    return KeyboardInterrupt()


def _note_signals(received: list[int]) -> Callable[[], None]:
    """Handlers of ``SIGINT`` and ``SIGTERM`` (unless ignored) that append the signal to
    ``received`` and raise its interrupt (:func:`_interrupt_of`); returns what puts the
    previous handlers back (a no-op outside the main thread, where Python sets no handlers)."""
    if threading.current_thread() is not threading.main_thread():
        return lambda: None

    def on_signal(signum: int, frame: Any) -> None:
        received.append(signum)
        raise _interrupt_of(signum)

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)
                if signal.getsignal(sig) is not signal.SIG_IGN}  # an ignored signal stays so

    def restore() -> None:
        for sig, handler in previous.items():
            if handler is not None:
                signal.signal(sig, handler)

    return restore


@contextmanager
def _no_ray_sigterm_handler() -> Iterator[None]:
    """Keep ``ray.init`` from installing its ``SIGTERM`` handler (``sys.exit``: exit 15 and no
    line); a Ray without the hook is left as it is."""
    try:
        import ray._private.utils as ray_utils
    except ImportError:
        yield
        return
    original = getattr(ray_utils, "set_sigterm_handler", None)
    if original is None:
        yield
        return
    ray_utils.set_sigterm_handler = lambda handler: None
    try:
        yield
    finally:
        ray_utils.set_sigterm_handler = original


def stop_interrupted_start(before: set[int] = frozenset()) -> set[int]:
    """End a local node whose start was interrupted: the Ray processes this process started
    since (not in ``before``), their descendants and what its raylet started (the
    ``DashboardAgent`` and ``RuntimeEnvAgent`` lived about 61 s more otherwise), killed at
    once; then Ray's state in this process is reset (``ray.shutdown``). Returns the processes
    killed."""
    import ray

    if ray.is_initialized():  # the start had finished: Ray's own shutdown first
        try:
            shutdown()
        except Exception:
            pass
    killed = end_processes(ray_descendants() - set(before))
    try:
        ray.shutdown()
    except Exception:
        pass
    return killed


#: The modules ``ray.dashboard.optional_deps`` imports to learn that the dashboard can start.
_DASHBOARD_MODULES = ("aiohttp", "aiohttp_cors", "grpc", "opencensus", "opentelemetry",
                      "opentelemetry.exporter.prometheus", "opentelemetry.proto",
                      "prometheus_client", "pydantic")


def dashboard_dependency_error() -> Optional[ImportError]:
    """Ray's ``get_dashboard_dependency_error`` by looking the modules up instead of importing
    them (an import of aiohttp, opentelemetry and pydantic in the driver, about a second of CPU,
    only to learn that they are installed): None when every module the dashboard needs is
    found, else the ImportError naming the first one missing."""
    for name in _DASHBOARD_MODULES:
        try:
            found = importlib.util.find_spec(name) is not None
        except (ImportError, ValueError):
            found = False
        if not found:
            return ImportError(f"No module named {name!r}", name=name)
    return None


class _ApiServerStart:
    """The node's API server (the dashboard) starting in a thread of its own, alongside the
    raylet, while ``ray.init`` goes on (:func:`_lean_node`)."""

    def __init__(self) -> None:
        self.thread: Optional[threading.Thread] = None
        self.node: Any = None
        self.error: Optional[BaseException] = None

    def start(self, start: Callable[[], Any], node: Any) -> None:
        """Run ``start()`` (Ray's ``Node.start_api_server``) in a thread."""
        def run() -> None:
            try:
                start()
            except BaseException as err:  # handed to the caller of ray.init by join
                self.error = err

        self.node = node
        self.thread = threading.Thread(target=run, name="fgnn-api-server-start", daemon=True)
        self.thread.start()

    def join(self, raise_error: bool = False) -> None:
        """Wait until the API server is up or has failed (Ray gives it
        ``RAY_DASHBOARD_STARTUP_TIMEOUT_S``); with ``raise_error``, raise its failure."""
        if self.thread is not None:
            self.thread.join()
        if raise_error and self.error is not None:
            err, self.error = self.error, None
            raise err

    @property
    def url(self) -> Optional[str]:
        """The dashboard URL Ray recorded (None before it is up, or without a dashboard)."""
        return getattr(self.node, "webui_url", None) or None


def _cpu_to_spare() -> bool:
    """Whether the machine is not too busy to start the API server alongside the raylet: a
    1-minute load average below :data:`ALONGSIDE_LOAD_PER_CORE` per core (True where the system
    does not say)."""
    try:
        return os.getloadavg()[0] < ALONGSIDE_LOAD_PER_CORE * (os.cpu_count() or 1)
    except (AttributeError, OSError):
        return True


@contextmanager
def _lean_node(alongside: bool = True, log_monitor: bool = False
               ) -> Iterator[_ApiServerStart]:
    """While ``ray.init`` starts a local node: with ``alongside``, start its API server in a
    thread alongside the raylet (the caller joins the yielded :class:`_ApiServerStart` after
    ``ray.init``; without, Ray starts it before the raylet and waits for it), check the
    dashboard's dependencies by lookup (:func:`dashboard_dependency_error`), and, without
    ``log_monitor``, leave out the log monitor (it forwards worker output to drivers, and
    fgnn's drivers ask for none: ``log_to_driver=False``; the dashboard reads the log files
    through its agent).

    A Ray whose private hooks moved is left as it is (each hook is checked on its own).
    """
    api = _ApiServerStart()
    patches: list[tuple[Any, str, Any]] = []
    try:
        import ray._private.utils as ray_utils
        from ray._private.node import Node
    except ImportError:
        yield api
        return
    if hasattr(ray_utils, "get_dashboard_dependency_error"):
        patches.append((ray_utils, "get_dashboard_dependency_error",
                        dashboard_dependency_error))
    start_api_server = getattr(Node, "start_api_server", None)
    if alongside and start_api_server is not None:
        def start_alongside(node: Any, *args: Any, **kwargs: Any) -> None:
            api.start(lambda: start_api_server(node, *args, **kwargs), node)
        patches.append((Node, "start_api_server", start_alongside))
    node_init = Node.__init__

    def lean_init(node: Any, ray_params: Any, *args: Any, **kwargs: Any) -> None:
        if not log_monitor and kwargs.get("head", args[0] if args else False) and \
                hasattr(ray_params, "include_log_monitor"):
            ray_params.include_log_monitor = False
        node_init(node, ray_params, *args, **kwargs)
    patches.append((Node, "__init__", lean_init))
    saved = [(obj, name, getattr(obj, name)) for obj, name, _ in patches]
    for obj, name, value in patches:
        setattr(obj, name, value)
    try:
        yield api
    finally:
        for obj, name, value in saved:
            setattr(obj, name, value)


@contextmanager
def _patient_gcs() -> Iterator[None]:
    """While a node starts: wait :data:`GCS_PORT_WAIT_S` for the GCS (Ray's default, 30 s,
    runs out on a loaded machine), unless the user set Ray's own variable."""
    if GCS_WAIT_ENV in os.environ:
        yield
        return
    os.environ[GCS_WAIT_ENV] = str(GCS_PORT_WAIT_S)
    try:
        yield
    finally:
        os.environ.pop(GCS_WAIT_ENV, None)


def init_with_dashboard(**kwargs: Any) -> tuple[Any, Optional[str]]:
    """``ray.init(include_dashboard=True, **kwargs)``, or Ray without a dashboard if it fails.

    Args:
        **kwargs: the other ``ray.init`` arguments of a new local cluster, and ``say`` of
            :func:`init_local`.

    Returns:
        ``(context, why)``: Ray's context, and ``None`` when the dashboard started, else one line
        saying why it did not (Ray's own error lines about it are held back).

    Raises:
        Exception: whatever ``ray.init`` raises for a reason other than the dashboard.
    """
    import ray

    swallow = _Swallow()
    log = logging.getLogger(_DASHBOARD_LOGGER)
    log.addFilter(swallow)
    try:
        try:
            ctx = init_local(include_dashboard=True, **kwargs)
        except Exception as err:
            if not _from_dashboard_start(err):
                raise
            logs = _stop_half_started(err)
            why = _reason(err, swallow.records)
        else:
            log.removeFilter(swallow)
            for record in swallow.records:  # nothing failed: let Ray's records through
                log.handle(record)
            return ctx, None
        ray.shutdown()
        rest = {k: v for k, v in kwargs.items() if not k.startswith("dashboard_")}
        ctx = init_local(include_dashboard=False, **rest)
    finally:
        log.removeFilter(swallow)  # (Ray's API server without the dashboard may complain too)
    where = f"; Ray's log: {logs}/dashboard.log" if logs else ""
    return ctx, f"{why}{where}"

"""The third hostile trial (issue 40), a signal while Ray starts: SIGINT 2 s after
``fgnn: starting Ray`` exited 130 but left Ray's ``DashboardAgent`` and ``RuntimeEnvAgent``
alive about 61 s more; SIGTERM at the same moment exited 15 with no fgnn line (Ray's own
handler, ``sys.exit(15)``, installed at the top of ``ray.init``). Both must end the half-started
node, its agents included, and exit 130 / 143 with fgnn's line.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import descendants

REPO = Path(__file__).resolve().parents[2]
TINY = "rmat:scale=7,edge_factor=4,feat_dim=8,num_classes=3,train_frac=0.4,seed=0"


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except OSError:
        return False


def _started_by(raylets: set[int]) -> set[int]:
    """Processes whose environment names one of ``raylets`` (Ray's agents and workers)."""
    marks = {f"RAY_RAYLET_PID={p}".encode() for p in raylets}
    out = set()
    for path in Path("/proc").glob("[0-9]*/environ"):
        try:
            if set(path.read_bytes().split(b"\0")) & marks:
                out.add(int(path.parent.name))
        except OSError:
            continue
    return out


def _left(tree: set[int]) -> set[int]:
    """What of ``tree`` (and what its raylets started) is still alive."""
    return {pid for pid in tree | _started_by(tree) if _alive(pid)}


@pytest.fixture
def sigint_default():
    """Ctrl-C raising in this process, as at a terminal: a suite started in the background
    (``nohup``, ``&``) inherits SIGINT ignored, which fgnn rightly leaves ignored."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


def _sigint_default() -> None:
    """A child's ``preexec_fn``: SIGINT at its default, whatever the suite inherited."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _watch(proc: subprocess.Popen, delay: float) -> set[int]:
    """Wait ``delay`` s after the ``starting Ray`` line, noting the driver's descendants as
    they come; returns them."""
    for line in proc.stdout:
        if "starting Ray" in line:
            break
    tree: set[int] = set()
    end = time.monotonic() + delay
    while time.monotonic() < end:
        tree |= set(descendants(proc.pid))
        time.sleep(0.05)
    return tree | set(descendants(proc.pid))


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.skipif(not os.path.isdir("/proc"), reason="reads /proc")
@pytest.mark.parametrize("sig, status, line", [
    (signal.SIGINT, 130, "interrupted"), (signal.SIGTERM, 143, "terminated (SIGTERM)")])
@pytest.mark.parametrize("delay", [0.5, 2.0])
def test_a_signal_while_ray_starts_ends_the_node_and_says_so(tmp_path, sig, status, line,
                                                            delay):
    pytest.importorskip("ray")
    cmd = [sys.executable, str(REPO / "launch.py"), "--dataset", TINY, "--fanouts", "4,4",
           "--batch-size", "16", "--epochs", "50", "--devices", "2", "--no-progress"]
    proc = subprocess.Popen(cmd, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env={**os.environ, "PYTHONPATH": str(REPO)},
                            preexec_fn=_sigint_default)
    tree: set[int] = set()
    try:
        tree = _watch(proc, delay)
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == status, err
        assert f"launch.py: {line}; no report written" in err.splitlines(), err
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and _left(tree):
            time.sleep(0.2)
        left = {pid: Path(f"/proc/{pid}/cmdline").read_bytes()[:80] for pid in _left(tree)}
        assert not left, f"the half-started node outlived its driver: {left}"
    finally:
        if proc.poll() is None:
            proc.kill()
        for pid in _left(tree):
            os.kill(pid, signal.SIGKILL)


class _SignalInDel:
    """Sends ``sig`` to this process from ``__del__``, where Python only prints an exception
    (``Exception ignored in ...``), as in ``logging``'s at-fork hook while Ray starts a
    process: the interrupt's exception is swallowed there."""

    def __init__(self, sig: int) -> None:
        self.sig = sig

    def __del__(self) -> None:
        os.kill(os.getpid(), self.sig)
        time.sleep(0.5)  # the handler runs here, and its exception is swallowed


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_whose_exception_python_swallowed_still_stops_the_start(monkeypatch, sig,
                                                                        sigint_default):
    from fgnn import raystart
    from fgnn.sigterm import Terminated

    stopped = []
    monkeypatch.setattr(raystart, "stop_interrupted_start", lambda before: stopped.append(1))
    went_on = []
    with pytest.raises(Terminated if sig == signal.SIGTERM else KeyboardInterrupt):
        with raystart._interruptible_start():
            _SignalInDel(sig)  # dropped at once: __del__ runs, the interrupt is swallowed
            went_on.append(1)  # the start went on as Ray's did
    assert went_on == [1] and stopped == [1]
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # handlers restored

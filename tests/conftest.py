"""Shared fixtures: device parametrisation, the Planetoid data root, seeded random graphs, and one
local Ray cluster of logical GPUs shared by the modules that ask for it."""

from __future__ import annotations

import glob
import importlib.util
import os
from pathlib import Path

import pytest
import torch

from fgnn.graph import CSRGraph
from fgnn.raystart import local_system_config, retry_startup

REPO = Path(__file__).resolve().parents[1]
PLANETOID_ROOT = Path(os.environ.get("FGNN_PLANETOID_ROOT",
                                     REPO.parent / "shared" / "data" / "planetoid"))


def load_bench(name: str):
    """The module of ``bench/NAME.py`` (the bench scripts are not a package)."""
    path = Path(__file__).resolve().parents[1] / "bench" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"bench_{name}", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _devices() -> list[str]:
    devs = ["cpu"]
    if torch.cuda.is_available():
        devs.append("cuda:0")
    return devs


@pytest.fixture(params=_devices())
def device(request) -> str:
    """Every device-aware test runs on CPU and, when present, on the first GPU."""
    return request.param


#: Logical GPUs of the shared test cluster: room for the largest job of the suite (8 devices).
RAY_GPUS = 8
_shared_ray = {"up": False, "starts": 0}
_ray_modules: set = set()


@pytest.fixture(scope="module")
def ray_cluster():
    """A local Ray with ``RAY_GPUS`` logical GPUs. Started once and kept for every module that
    asks for it (a Ray start costs seconds); shut down before a module that does not, so those
    start their own or none."""
    import ray

    if ray.is_initialized() and not _shared_ray["up"]:
        ray.shutdown()  # a Ray some test started with other resources
    if not ray.is_initialized():
        retry_startup(lambda: ray.init(  # a loaded machine: once more, not a failed test
            address="local", num_cpus=4, num_gpus=RAY_GPUS, include_dashboard=False,
            log_to_driver=False, _system_config=local_system_config()))
        _shared_ray["up"] = True
        _shared_ray["starts"] += 1
    yield


def _stop_shared_ray() -> None:
    if _shared_ray["up"]:
        import ray

        ray.shutdown()
        _shared_ray["up"] = False


def _ray_groups(items) -> dict:
    """Module name -> 0: a module that starts no Ray in this process; 1: one with a test that
    starts a Ray of its own (marked ``own_ray``: other resources, or Ray's start-up is what it
    tests); 2: a module on the shared cluster (a test of it asks for ``ray_cluster``)."""
    groups: dict = {}
    for item in items:
        name = item.module.__name__
        if "ray_cluster" in getattr(item, "fixturenames", ()):
            groups[name] = 2
        elif item.get_closest_marker("own_ray") is not None:
            groups[name] = max(groups.get(name, 0), 1)
        else:
            groups.setdefault(name, 0)
    return groups


def pytest_collection_modifyitems(session, config, items) -> None:
    """The modules on the shared cluster run last and contiguously, so the cluster starts once;
    the modules that start a Ray of their own run just before them. A stable sort by module:
    the collection's order is kept within each group and each module stays whole."""
    groups = _ray_groups(items)
    _ray_modules.update(name for name, group in groups.items() if group == 2)
    items.sort(key=lambda item: groups[item.module.__name__])


def pytest_runtest_setup(item) -> None:
    module = getattr(item, "module", None)
    if module is not None and module.__name__ not in _ray_modules:
        _stop_shared_ray()


def pytest_sessionfinish(session, exitstatus) -> None:
    _stop_shared_ray()


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:
    if _shared_ray["starts"]:
        terminalreporter.write_line(f"the shared Ray cluster started {_shared_ray['starts']} "
                                    f"time(s) for {len(_ray_modules)} modules")


@pytest.fixture
def planetoid_root() -> Path:
    """Directory with the raw Planetoid files; skips with the reason when absent."""
    if not (PLANETOID_ROOT / "ind.cora.graph").exists():
        pytest.skip(f"Planetoid files not found under {PLANETOID_ROOT} "
                    f"(set FGNN_PLANETOID_ROOT)")
    return PLANETOID_ROOT


def random_graph(num_nodes: int, num_edges: int, seed: int = 0,
                 weighted: bool = False) -> CSRGraph:
    """A seeded uniform random directed graph (test helper)."""
    g = torch.Generator().manual_seed(seed)
    ei = torch.randint(0, num_nodes, (2, num_edges), generator=g)
    w = torch.rand(num_edges, generator=g) + 0.1 if weighted else None
    return CSRGraph.from_edge_index(ei, num_nodes=num_nodes, weights=w)


def descendants(root: int) -> list[int]:
    """Process ids below ``root`` in the process tree (read from /proc; test helper)."""
    kids: dict[int, list[int]] = {}
    for f in glob.glob("/proc/[0-9]*/stat"):
        try:
            ppid = int(open(f).read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        kids.setdefault(ppid, []).append(int(f.split("/")[2]))
    out, todo = [], [root]
    while todo:
        for c in kids.get(todo.pop(), []):
            out.append(c)
            todo.append(c)
    return out


@pytest.fixture
def cli_error(capsys):
    """``cli_error(argv)``: run ``launch.py``'s ``main(argv)`` (no progress, no dashboard),
    require exit 2 with exactly one line on stderr, and return that line."""
    def run(argv: list[str]) -> str:
        from fgnn.cli import main

        with pytest.raises(SystemExit) as e:
            main(list(argv) + ["--no-progress", "--dashboard-host", "off"])
        assert e.value.code == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1, err
        return err[0]

    return run


@pytest.fixture
def fake_cuda():
    """A recording fake of two GPUs swapped in for :mod:`fgnn.gpu` (``tests/fake_cuda.py``);
    at the end, no pinned buffer was overwritten under an in-flight copy."""
    from fake_cuda import FakeCuda, install

    with install(FakeCuda(gpus=2)) as fake:
        yield fake
        fake.check()

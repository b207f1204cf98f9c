"""Sizes checked before anything is allocated: host memory limits, synthetic spec estimates,
logical device counts, empty training splits and a missing Planetoid directory -- each one line,
exit 2, no report, and Ray never started."""

from __future__ import annotations

import inspect
import resource
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import fgnn.data.memory as memory
import fgnn.data.synthetic as synthetic
from fgnn.cli import main
from fgnn.config import JobConfig, RuntimeConfig
from fgnn.data import load_dataset
from fgnn.data.memory import MemoryLimit, check_fits, format_bytes, host_memory_limit
from fgnn.data.spec import check_spec_memory, estimate_spec_bytes
from fgnn.data.synthetic import estimate_bytes, rmat_dataset, uniform_dataset
from fgnn.job import Job, JobConfigError

REPO = Path(__file__).resolve().parents[1]
HUGE = "rmat:scale=31,feat_dim=4096"                           # ~50 TiB: no machine holds it
GIB = 1 << 30


# ---------------------------------------------------------------------------- host memory


def _files(tmp_path: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        p = tmp_path / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    return tmp_path


def _limit(tmp_path: Path, **files) -> MemoryLimit | None:
    root = _files(tmp_path, {k.replace("__", "/").replace("_dot_", "."): v
                             for k, v in files.items()})
    return host_memory_limit(meminfo=str(root / "meminfo"), cgroup_root=str(root / "cg"),
                             status=str(root / "status"), proc_cgroup=str(root / "self_cgroup"))


def test_meminfo_available(tmp_path):
    lim = _limit(tmp_path, meminfo="MemTotal: 9000 kB\nMemFree: 1 kB\nMemAvailable: 2048 kB\n")
    assert lim == MemoryLimit(2 << 20, f"MemAvailable in {tmp_path / 'meminfo'}")


def test_cgroup_v2_limit_is_tighter(tmp_path):
    lim = _limit(tmp_path, meminfo="MemAvailable: 10485760 kB\n",     # 10 GiB
                 cg__memory_dot_max=str(4 * GIB), cg__memory_dot_current=str(3 * GIB),
                 cg__memory_dot_stat=f"anon 1\ninactive_file {GIB}\n")
    assert lim.bytes == 2 * GIB                                  # 4 - (3 - 1 reclaimable)
    assert "cgroup memory limit 4.0 GiB" in lim.source and "memory.max" in lim.source


def test_cgroup_v1_and_unlimited(tmp_path):
    v1 = _limit(tmp_path / "a", meminfo="MemAvailable: 10485760 kB\n",
                cg__memory__memory_dot_limit_in_bytes=str(GIB),
                cg__memory__memory_dot_usage_in_bytes=str(GIB // 4))
    assert v1.bytes == GIB - GIB // 4 and "memory.limit_in_bytes" in v1.source
    free = _limit(tmp_path / "b", meminfo="MemAvailable: 1024 kB\n",
                  cg__memory_dot_max="max", cg__memory_dot_current="5",
                  cg__memory__memory_dot_limit_in_bytes="9223372036854771712")
    assert free.source.startswith("MemAvailable")                # "max" / 2**63: no limit


def test_the_process_own_v1_group_and_its_parents(tmp_path):
    """The limit is read where /proc/self/cgroup puts this process, not at the mount's top:
    a job inside a 2 GiB group sees 2 GiB; a tighter parent wins over a looser own group."""
    files = dict(meminfo="MemAvailable: 10485760 kB\n",
                 self_cgroup="4:memory:/jobs/a1\n0::/\n",
                 cg__memory__memory_dot_limit_in_bytes="9223372036854771712",
                 cg__memory__jobs__a1__memory_dot_limit_in_bytes=str(2 * GIB),
                 cg__memory__jobs__a1__memory_dot_usage_in_bytes=str(GIB),
                 # mapped or cached file pages, active or not, are the kernel's to reclaim
                 cg__memory__jobs__a1__memory_dot_stat=f"total_rss 1\ntotal_active_file "
                                                       f"{GIB // 4}\ntotal_inactive_file "
                                                       f"{GIB // 4}\n")
    own = _limit(tmp_path / "own", **files)
    assert own.bytes == 2 * GIB - GIB // 2 and own.total == 2 * GIB
    assert "jobs/a1/memory.limit_in_bytes" in own.source
    parent = _limit(tmp_path / "parent", **files,
                    cg__memory__jobs__memory_dot_limit_in_bytes=str(GIB),
                    cg__memory__jobs__memory_dot_usage_in_bytes=str(GIB // 2))
    assert parent.bytes == GIB // 2 and "jobs/memory.limit_in_bytes" in parent.source


def test_the_process_own_v2_group(tmp_path):
    lim = _limit(tmp_path, meminfo="MemAvailable: 10485760 kB\n", self_cgroup="0::/user/job\n",
                 cg__cgroup_dot_controllers="memory cpu",
                 cg__user__job__memory_dot_max=str(3 * GIB),
                 cg__user__job__memory_dot_current=str(GIB))
    assert lim.bytes == 2 * GIB and "user/job/memory.max" in lim.source


def test_rlimit_as_minus_mapped(tmp_path, monkeypatch):
    monkeypatch.setattr(memory.resource, "getrlimit", lambda _: (3 * GIB, resource.RLIM_INFINITY))
    lim = _limit(tmp_path, meminfo="MemAvailable: 104857600 kB\n",
                 status="Name:\tpython\nVmSize:\t 1048576 kB\n")
    assert lim.bytes == 2 * GIB and lim.source.startswith("RLIMIT_AS 3.0 GiB")


def test_nothing_readable_means_no_limit(tmp_path, monkeypatch):
    monkeypatch.setattr(memory.resource, "getrlimit",
                        lambda _: (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
    assert _limit(tmp_path) is None
    monkeypatch.setattr(memory, "host_memory_limit", lambda: None)
    check_fits(1 << 62, "anything")                             # no limit known: no refusal


def test_check_fits_message():
    lim = MemoryLimit(GIB, "MemAvailable in /proc/meminfo")
    check_fits(GIB, "x", lim)                                    # equal fits
    with pytest.raises(ValueError) as e:
        check_fits(3 * GIB, "dataset spec 'rmat:scale=9'", lim)
    assert str(e.value) == ("dataset spec 'rmat:scale=9' needs about 3.0 GiB of host memory, "
                            "more than the 1.0 GiB this machine can give (MemAvailable in "
                            "/proc/meminfo)")
    assert format_bytes(512) == "512 B" and format_bytes(5 << 40) == "5.0 TiB"


# ---------------------------------------------------------------------------- spec estimates


def test_estimate_takes_the_generators_defaults():
    est = inspect.signature(estimate_bytes).parameters
    for gen in (rmat_dataset, uniform_dataset):
        for name, p in inspect.signature(gen).parameters.items():
            if name != "name":
                assert est[name].default == p.default, (gen.__name__, name)


@pytest.mark.parametrize("spec", [
    "rmat:scale=10,edge_factor=8,feat_dim=16",
    "rmat:scale=9,edge_factor=16,feat_dim=8,dedup=true,self_loops=false,weighted=false",
    "uniform:scale=10,edge_factor=4,feat_dim=64,feat_dtype=float16",
])
def test_estimate_covers_what_the_dataset_holds(spec):
    ds = load_dataset(spec)
    held = (ds.graph.nbytes() + ds.features.numel() * ds.features.element_size()
            + 8 * (ds.labels.numel() + ds.train_idx.numel() + ds.val_idx.numel()
                   + ds.test_idx.numel()))
    assert held <= estimate_spec_bytes(spec) <= 4 * held + (200 << 20)


def test_estimate_grows_with_every_size_parameter():
    base = estimate_bytes(20)
    assert estimate_bytes(21) > base and estimate_bytes(20, 32) > base
    assert estimate_bytes(20, feat_dim=256) > base
    assert estimate_bytes(20, feat_dtype="float16") < base
    assert estimate_bytes(20, 64, dedup=True, self_loops=False) > estimate_bytes(20, 64)
    assert estimate_spec_bytes("cora") is None and estimate_spec_bytes("ondisk:x") is None


def test_spec_refused_before_generation(monkeypatch):
    def boom(*a, **k):
        raise AssertionError("the generator ran")
    monkeypatch.setattr(synthetic, "_rmat_keys", boom)
    monkeypatch.setattr(memory, "host_memory_limit", lambda: MemoryLimit(64 << 20, "test limit"))
    with pytest.raises(ValueError, match=r"'rmat:scale=16' needs about .* more than the 64.0 MiB "
                                         r"this machine can give \(test limit\)"):
        load_dataset("rmat:scale=16")
    check_spec_memory("rmat:scale=4")                            # small specs pass
    with pytest.raises(ValueError, match="scale must be an integer in"):
        check_spec_memory("rmat:scale=40")                      # range error, not a size


# ---------------------------------------------------------------------------- through the CLI


@pytest.fixture
def no_ray(monkeypatch):
    """Any path that would start Ray fails the test."""
    def refuse(self):
        raise AssertionError("Ray would start")
    monkeypatch.setattr(Job, "_init_ray", refuse)


def _cli_error(argv: list[str], capsys, tmp_path: Path) -> str:
    report = tmp_path / "r.json"
    with pytest.raises(SystemExit) as e:
        main(argv + ["--report", str(report), "--dashboard-host", "off"])
    assert e.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert not report.exists() and not report.with_suffix(".png").exists()
    return err[0]


def test_cli_huge_spec(no_ray, capsys, tmp_path):
    line = _cli_error(["--dataset", HUGE], capsys, tmp_path)
    assert line.startswith("launch.py: error: argument --dataset: ")
    assert "TiB of host memory, more than the" in line and "this machine can give" in line


def test_cli_too_many_logical_devices(no_ray, capsys, tmp_path, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(memory, "host_memory_limit", lambda: MemoryLimit(4 * GIB, "test limit"))
    import fgnn.cores
    monkeypatch.setattr(fgnn.cores, "usable_cores", lambda: 10 ** 6)  # memory, not cores, binds
    line = _cli_error(["--devices", "100000"], capsys, tmp_path)
    assert line.startswith("launch.py: error: argument --devices: 100000 Ray logical GPUs need "
                           "at least 100002 executor processes of about 300.0 MiB each")
    assert "more than the 4.0 GiB this machine can give (test limit); at most 11 devices fit" \
        in line and "Received --devices=100000." in line
    # single mode runs on one device whatever --devices says; a cluster keeps its own check
    Job(JobConfig(runtime=RuntimeConfig(mode="single", devices=100000))).validate()


def test_cli_empty_training_split(no_ray, capsys, tmp_path):
    line = _cli_error(["--dataset", "rmat:scale=6,edge_factor=2,feat_dim=4,train_frac=0"],
                      capsys, tmp_path)
    assert "argument --dataset: dataset 'rmat-6' has an empty training split" in line


def test_job_given_dataset_without_training_nodes(no_ray):
    ds = load_dataset("rmat:scale=5,edge_factor=2,feat_dim=4")
    ds.train_idx = ds.train_idx[:0]
    with pytest.raises(JobConfigError, match="empty training split"):
        Job(JobConfig(), dataset=ds).run()


def test_cli_planetoid_without_data_root(no_ray, capsys, tmp_path, monkeypatch):
    monkeypatch.delenv("FGNN_PLANETOID_ROOT", raising=False)
    line = _cli_error(["--dataset", "cora"], capsys, tmp_path)
    assert line.startswith("launch.py: error: argument --data-root: ")
    assert "--data-root DIR" in line and "data_root=DIR" in line and "ind.cora.*" in line


def test_cli_planetoid_files_missing(no_ray, capsys, tmp_path):
    line = _cli_error(["--dataset", "cora", "--data-root", str(tmp_path)], capsys, tmp_path)
    assert "ind.cora.x is missing" in line and "--data-root" in line and "data_root=" in line


# ---------------------------------------------------------------------------- real process


def _guarded_launch(args: list[str], tmp_path: Path) -> subprocess.CompletedProcess:
    """launch.py under a 4 GiB address-space guard: a check that came too late would die of
    MemoryError with a traceback (exit 1), not exit 2 with one line."""
    def guard():
        resource.setrlimit(resource.RLIMIT_AS, (4 * GIB, 4 * GIB))
    return subprocess.run([sys.executable, str(REPO / "launch.py"), *args,
                           "--report", str(tmp_path / "r.json"), "--dashboard-host", "off"],
                          capture_output=True, text=True, timeout=300, cwd=REPO,
                          preexec_fn=guard)


@pytest.mark.parametrize("args, flag", [
    (["--dataset", "rmat:scale=30"], "--dataset"),
    (["--devices", "100000"], "--devices"),
])
def test_launch_refuses_under_memory_guard(tmp_path, args, flag):
    proc = _guarded_launch(args, tmp_path)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert len(lines) == 1 and lines[0].startswith(f"launch.py: error: argument {flag}: ")
    from fgnn.cores import check_device_cores
    if flag == "--devices" and check_device_cores(100000) is not None:
        assert "CPU core" in lines[0]  # the cores bind first (tests/test_cores.py)
    else:
        assert "this machine can give" in lines[0]
    assert not (tmp_path / "r.json").exists()

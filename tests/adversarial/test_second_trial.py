"""The second hostile trial (issue 30), items 1, 3, 4, 6 and 7, without Ray.

1. the collective's rendezvous store listens on loopback (or the node's address) only, its keys
   under a secret; 3. ``--resume`` refuses a checkpoint of another graph of the same sizes (a
   permuted copy); 4. two jobs writing the same report or checkpoint directory: the second is
   refused before Ray; 6. every synthetic spec is sized before it allocates; 7. a ``Job`` runs
   once.
"""

from __future__ import annotations

import datetime
import pickle
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

import fgnn.data.memory as memory
from fgnn.cli import main
from fgnn.config import JobConfig, RuntimeConfig
from fgnn.data import load_dataset
from fgnn.data.memory import MemoryLimit
from fgnn.data.spec import check_spec_memory, estimate_spec_bytes
from fgnn.job import Job, JobConfigError
from fgnn.outputs import output_paths

TINY = "rmat:scale=8,edge_factor=4,feat_dim=16,num_classes=4,train_frac=0.3,seed=1"
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def no_ray(monkeypatch):
    """Any path that would start Ray fails the test."""
    def refuse(self):
        raise AssertionError("Ray would start")
    monkeypatch.setattr(Job, "_init_ray", refuse)


def _cli_refusal(argv: list[str], capsys) -> str:
    """The one stderr line of a launch.py run that exits 2."""
    with pytest.raises(SystemExit) as e:
        main(argv + ["--no-progress", "--dashboard-host", "off"])
    assert e.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    return err[0]


# ---------------------------------------------------------------------------- 1: the store


def _non_loopback_address() -> str | None:
    """An IPv4 address of this host that is not loopback, or None."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect(("192.0.2.1", 9))  # no packet is sent: picks the outgoing interface
            ip = s.getsockname()[0]
    except OSError:
        return None
    return None if ip.startswith("127.") else ip


def _ledger(host):
    from fgnn.exchange.step_ledger import Event, StepLedger

    ledger = StepLedger(serve_store=True, store_host=host, alive=lambda m: True)
    ledger._append(Event("end", 0, ("t0",)))  # an event a member would read: key fgnn-ev0
    return ledger


def test_store_of_a_one_host_job_refuses_the_hosts_other_addresses():
    """As the runtime starts it for a job on one node: bound to loopback, nothing else."""
    from fgnn.exchange.store import LOOPBACK, connect_store

    ip = _non_loopback_address()
    if ip is None:
        pytest.skip("this host has no non-loopback IPv4 address")
    ledger = _ledger(LOOPBACK)
    addr = ledger.store_address()
    assert addr.host == LOOPBACK
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection((ip, addr.port), timeout=5).close()
    member = connect_store(addr, 5.0)  # the job's own members (the secret from Ray) read it
    assert pickle.loads(member.get("fgnn-ev0")).kind == "end"


def test_store_on_the_nodes_address_hides_every_key_without_the_secret():
    """Members on several nodes: the node's own address, and the keys under a random secret
    that only the ledger's Ray replies carry."""
    import torch.distributed as dist

    from fgnn.exchange.store import connect_store

    ip = _non_loopback_address()
    if ip is None:
        pytest.skip("this host has no non-loopback IPv4 address")
    ledger = _ledger(ip)
    addr = ledger.store_address()
    assert addr.host == ip and len(addr.secret) == 32
    stranger = dist.TCPStore(ip, addr.port, is_master=False,
                             timeout=datetime.timedelta(seconds=1))
    assert not stranger.check(["fgnn-ev0"])
    with pytest.raises(RuntimeError):  # DistStoreError: a timeout, the key is not there
        stranger.get("fgnn-ev0")
    assert pickle.loads(connect_store(addr, 5.0).get("fgnn-ev0")).kind == "end"
    assert _ledger(ip).store_address().secret != addr.secret  # a new secret per job


# ---------------------------------------------------------------------------- 3: fingerprint


def _permuted(data, seed: int = 0):
    """The same graph with its node ids permuted (rows sorted, as the on-disk format wants):
    every size equal, every array different."""
    from fgnn.data.dataset import Dataset
    from fgnn.graph import CSRGraph

    perm = torch.randperm(data.num_nodes, generator=torch.Generator().manual_seed(seed))
    g = CSRGraph.from_edge_index(perm[data.graph.edge_index()], num_nodes=data.num_nodes,
                                 weights=data.graph.weights,
                                 index_dtype=data.graph.indices.dtype)
    x, y = torch.empty_like(data.features), torch.empty_like(data.labels)
    x[perm], y[perm] = data.features, data.labels
    return Dataset(data.name, g, x, y, perm[data.train_idx], perm[data.val_idx],
                   perm[data.test_idx], data.num_classes)


def test_content_digest_sees_a_permutation_but_not_a_reload():
    from fgnn.data.fingerprint import content_digest

    data = load_dataset(TINY)
    same = content_digest(load_dataset(TINY))
    assert content_digest(data) == same
    moved = content_digest(_permuted(data))
    assert all(moved[p] != same[p] for p in ("graph", "features", "labels", "splits"))


def test_content_digest_of_a_large_array_is_sampled(monkeypatch, tmp_path):
    """Past FULL_BYTES the arrays are read by blocks (bounded cost), and a permutation still
    shows; a memory-mapped copy of the features hashes as the tensor does."""
    import fgnn.data.fingerprint as fp
    from fgnn.data.fingerprint import content_digest

    monkeypatch.setattr(fp, "FULL_BYTES", 4096)
    data = load_dataset(TINY)
    path = tmp_path / "x.npy"
    np.save(path, data.features.numpy())
    mapped = np.load(path, mmap_mode="r")
    h1, h2 = (fp._digest([("x", a)]) for a in (data.features, mapped))
    assert h1 == h2
    assert content_digest(_permuted(data))["features"] != content_digest(data)["features"]


def test_resume_on_a_permuted_copy_is_refused_before_ray(tmp_path, no_ray, capsys):
    from fgnn.checkpoint import save_checkpoint
    from fgnn.cli import build_parser, config_from_args
    from fgnn.data.ondisk import save_dataset
    from fgnn.runtime.driver import CHECKPOINT_NAME, Runtime

    data = load_dataset(TINY)
    cfg = config_from_args(build_parser().parse_args(["--model", "sage", "--dataset", TINY]))
    rt = Runtime(cfg, data)
    ck = tmp_path / "ck"
    save_checkpoint(ck / CHECKPOINT_NAME, rt.model, torch.optim.Adam(rt.model.parameters()), 0,
                    extra=rt.checkpointer.extra(0))
    save_dataset(_permuted(data), tmp_path / "other")
    line = _cli_refusal(["--dataset", f"ondisk:{tmp_path / 'other'}", "--model", "sage",
                         "--epochs", "3", "--resume", "--checkpoint-dir", str(ck)], capsys)
    assert line.startswith("launch.py: error: argument --checkpoint-dir: ")
    assert f"checkpoint {ck / CHECKPOINT_NAME} was trained on other data" in line
    assert f"--dataset ondisk:{tmp_path / 'other'}" in line
    assert "graph, features, labels, splits differ" in line


# ---------------------------------------------------------------------------- 4: locks


def test_a_second_lock_on_the_same_outputs_is_refused(tmp_path):
    """flock locks belong to an open file description: a second open in this process
    conflicts as a second process would; released, the outputs can be locked again."""
    from fgnn.outputs import lock_outputs

    (tmp_path / "out").mkdir()
    outs = output_paths(str(tmp_path / "out" / "r.json"), None, str(tmp_path / "ck"))
    first = lock_outputs(outs, JobConfigError)
    with pytest.raises(JobConfigError, match=r"another running job is writing this report "
                                             r"\(it holds the lock .*/r\.json-\w+\.lock\)"):
        lock_outputs(outs, JobConfigError)
    # another spelling of the same paths is the same lock
    same = output_paths(str(tmp_path / "ck" / ".." / "out" / "r.json"), None, None)
    with pytest.raises(JobConfigError, match="writing this report"):
        lock_outputs(same, JobConfigError)
    only_ck = output_paths(None, None, str(tmp_path / "ck") + "/")
    with pytest.raises(JobConfigError, match="writing this checkpoint directory"):
        lock_outputs(only_ck, JobConfigError)
    assert list((tmp_path / "out").iterdir()) == [] and not (tmp_path / "ck").exists()
    first.release()
    lock_outputs(outs, JobConfigError).release()


_HOLD = """
import sys, time
from fgnn.job import JobConfigError
from fgnn.outputs import lock_outputs, output_paths
locks = lock_outputs(output_paths(sys.argv[1], None, sys.argv[2]), JobConfigError)
print("locked", flush=True)
time.sleep(60)
"""


def test_a_second_job_on_the_same_report_is_refused_before_ray(tmp_path, no_ray, capsys):
    report, ck = tmp_path / "r.json", tmp_path / "ck"
    holder = subprocess.Popen([sys.executable, "-c", _HOLD, str(report), str(ck)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO)
    try:
        assert holder.stdout.readline().strip() == "locked", holder.stderr.read()
        line = _cli_refusal(["--dataset", TINY, "--epochs", "1", "--report", str(report),
                             "--checkpoint-dir", str(ck)], capsys)
        assert line.startswith("launch.py: error: argument --report: another running job is "
                               "writing this report")
        assert str(report) in line and not report.exists()
    finally:
        holder.kill()
        holder.wait()
    # the lock died with its process: the job now gets past the locks (to the Ray stub)
    assert main(["--dataset", TINY, "--epochs", "1", "--report", str(report),
                 "--checkpoint-dir", str(ck), "--no-progress", "--dashboard-host", "off",
                 "--ray"]) == 1
    assert "Ray would start" in capsys.readouterr().err


# ---------------------------------------------------------------------------- 6: sizes


def _no_generators(monkeypatch) -> None:
    """A generator that runs fails the test (instead of allocating terabytes)."""
    import fgnn.data.synthetic_hetero as hetero
    import fgnn.data.useritem as useritem

    def boom(*a, **k):
        raise AssertionError("the generator ran")
    monkeypatch.setattr(hetero, "typed_synthetic", boom)
    monkeypatch.setattr(useritem, "useritem_dataset", boom)


@pytest.mark.parametrize("spec,field", [
    ("hetero:papers=2000000000", "papers=2000000000"),
    ("hetero:feat_dim=100000000", "feat_dim=100000000"),
    ("useritem:users_log2=30,interactions_log2=30", "users_log2=30"),
    ("useritem:items_log2=30", "items_log2=30"),
])
def test_every_synthetic_spec_is_sized_before_it_allocates(spec, field, monkeypatch):
    _no_generators(monkeypatch)
    monkeypatch.setattr(memory, "host_memory_limit", lambda: MemoryLimit(8 << 30, "test limit"))
    with pytest.raises(ValueError, match=rf"dataset spec '{spec}' needs about .* of host memory, "
                                         rf"more than the 8.0 GiB this machine can give \(test "
                                         rf"limit\); lower its size field {field}$"):
        load_dataset(spec)


@pytest.mark.parametrize("spec", ["hetero", "hetero:papers=5000,cites_per_paper=8",
                                  "useritem:users_log2=10,items_log2=8,interactions_log2=13"])
def test_hetero_and_useritem_estimates_cover_what_the_dataset_holds(spec):
    ds = load_dataset(spec)
    g = ds.graph
    rels = getattr(g, "relations", {"": g})
    held = sum(r.indptr.numel() * 8 + r.indices.numel() * r.indices.element_size()
               for r in rels.values())
    feats = g.features.values() if hasattr(g, "relations") else [ds.features]
    held += sum(x.numel() * x.element_size() for x in feats)
    assert held <= estimate_spec_bytes(spec) <= 40 * held + (600 << 20)
    check_spec_memory(spec)


def test_cli_huge_hetero_spec_is_refused_before_ray(no_ray, capsys, tmp_path, monkeypatch):
    _no_generators(monkeypatch)
    line = _cli_refusal(["--dataset", "hetero:papers=2000000000", "--report",
                         str(tmp_path / "r.json")], capsys)
    assert line.startswith("launch.py: error: argument --dataset: ")
    assert "this machine can give" in line and "lower its size field papers=2000000000" in line
    assert not (tmp_path / "r.json").exists()


# ---------------------------------------------------------------------------- 7: run once


def test_a_job_runs_once(no_ray, tmp_path, monkeypatch):
    """A second run() would start from the first run's weights and data: it is refused, even
    after a first run that failed once it had started."""
    job = Job(JobConfig(dataset=TINY, report=str(tmp_path / "r.json"),
                        runtime=RuntimeConfig(ray=True)), progress=False)
    with pytest.raises(AssertionError, match="Ray would start"):
        job.run()
    with pytest.raises(RuntimeError, match=r"this Job has run already.*create a new fgnn\.Job"):
        job.run()


def test_a_refused_job_may_run_after_the_refusal(tmp_path, no_ray):
    """A refusal before anything ran (validation) changes nothing: the same Job may run."""
    job = Job(JobConfig(dataset=TINY, report=str(tmp_path), runtime=RuntimeConfig(ray=True)),
              progress=False)  # the report path is a directory
    with pytest.raises(JobConfigError):
        job.run()
    job.config = JobConfig(dataset=TINY, report=str(tmp_path / "r.json"),
                           runtime=RuntimeConfig(ray=True))
    with pytest.raises(AssertionError, match="Ray would start"):
        job.run()

"""launch.py flags: defaults, mapping onto configs, one-line errors before Ray starts, docs."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest

from fgnn.cli import FLAG_FIELDS, build_parser, config_from_args, flags_markdown, main
from fgnn.config import DEFAULT_FANOUTS, JobConfig

REPO = Path(__file__).resolve().parents[1]


def _config(*argv: str) -> JobConfig:
    return config_from_args(build_parser().parse_args(list(argv)))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_defaults_are_the_config_defaults():
    cfg = _config()
    ref = JobConfig()
    assert cfg.dataset == ref.dataset and cfg.report is None
    assert cfg.runtime == ref.runtime
    assert cfg.cache == ref.cache
    assert cfg.model == ref.model
    assert cfg.train == ref.train
    assert cfg.sampler.fanouts == DEFAULT_FANOUTS["gcn"]


@pytest.mark.parametrize("model", ["gcn", "sage", "pinsage"])
def test_fanouts_default_per_model(model):
    cfg = _config("--model", model)
    assert cfg.sampler.kind == ("random_walk" if model == "pinsage" else "khop")
    if model != "pinsage":
        assert cfg.sampler.fanouts == DEFAULT_FANOUTS[model]


def test_flags_map_onto_config(tmp_path):
    cfg = _config("--dataset", "cora", "--data-root", str(tmp_path), "--model", "sage",
                  "--devices", "8", "--samplers", "2", "--mode", "factored",
                  "--cache-policy", "wrpr", "--presample-epochs", "3", "--cache-ratio", "0.25",
                  "--device-memory", "4.5", "--fanouts", "5,4", "--batch-size", "64",
                  "--epochs", "7", "--lr", "0.01", "--hidden", "32", "--seed", "3",
                  "--address", "10.0.0.1:6379", "--dashboard-host", "0.0.0.0",
                  "--checkpoint-dir", str(tmp_path / "ck"), "--resume", "--no-switching",
                  "--report", str(tmp_path / "r.json"))
    assert (cfg.dataset, cfg.data_root) == ("cora", str(tmp_path))
    assert (cfg.model.name, cfg.model.hidden) == ("sage", 32)
    rt = cfg.runtime
    assert (rt.devices, rt.samplers, rt.mode, rt.switching) == (8, 2, "factored", False)
    assert (rt.address, rt.dashboard_host) == ("10.0.0.1:6379", "0.0.0.0")
    c = cfg.cache
    assert (c.policy, c.presample_epochs, c.cache_ratio, c.device_memory_gib) == \
        ("wrpr", 3, 0.25, 4.5)
    assert cfg.sampler.fanouts == (5, 4)
    t = cfg.train
    assert (t.batch_size, t.epochs, t.lr, t.seed, t.resume) == (64, 7, 0.01, 3, True)
    assert t.checkpoint_dir == str(tmp_path / "ck")
    assert cfg.report == str(tmp_path / "r.json")
    assert _config("--samplers", "auto", "--cache-ratio", "auto").runtime.samplers is None
    cfg = _config("--placement", "algorithm1", "--peer-cost", "0.5", "--sampler", "locality",
                  "--locality-lt", "0.1", "--locality-ut", "0.3", "--locality-max-scale", "4")
    assert (cfg.cache.placement, cfg.cache.peer_cost) == ("algorithm1", 0.5)
    s = cfg.sampler
    assert (s.kind, s.locality_lt, s.locality_ut, s.locality_max_scale) == \
        ("locality", 0.1, 0.3, 4.0)
    assert _config("--dashboard-host", "off").runtime.dashboard_host is None
    assert _config().sampler.frontier == "all"
    assert _config("--frontier", "new").sampler.frontier == "new"


def test_help_documents_every_flag_with_default(capsys):
    with pytest.raises(SystemExit) as e:
        build_parser().parse_args(["--help"])
    assert e.value.code == 0
    out = " ".join(capsys.readouterr().out.split())
    parser = build_parser()
    for action in parser._actions:
        if action.dest == "help":
            continue
        assert max(action.option_strings, key=len) in out
        assert "default" in action.help, action.dest
    for flag in FLAG_FIELDS:
        assert flag in out


def _bad(argv: list[str], capsys, tmp_path: Path) -> str:
    """Run main with a bad flag; it must exit 2 with one stderr line and write no report."""
    import ray
    report = tmp_path / "r.json"
    with pytest.raises(SystemExit) as e:
        main(argv + ["--report", str(report)])
    assert e.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert not report.exists() and not report.with_suffix(".png").exists()
    assert not ray.is_initialized()
    return err[0]


@pytest.mark.parametrize("argv, flag, value", [
    (["--dataset", "nosuchdata"], "--dataset", "nosuchdata"),
    (["--dataset", "rmat:scale=oops"], "--dataset", "scale=oops"),
    (["--model", "gin"], "--model", "gin"),
    (["--devices", "0"], "--devices", "0"),
    (["--devices", "-3"], "--devices", "-3"),
    (["--devices", "4", "--samplers", "4"], "--samplers", "4"),
    (["--devices", "2", "--samplers", "0"], "--samplers", "0"),
    (["--fanouts", "15,,5"], "--fanouts", "15,,5"),
    (["--fanouts", "15,0"], "--fanouts", "15,0"),
    (["--fanouts", "a,b"], "--fanouts", "a,b"),
    (["--cache-ratio", "1.5"], "--cache-ratio", "1.5"),
    (["--cache-ratio", "-0.1"], "--cache-ratio", "-0.1"),
    (["--mode", "fast"], "--mode", "fast"),
    (["--cache-policy", "lru"], "--cache-policy", "lru"),
    (["--epochs", "0"], "--epochs", "0"),
    (["--lr", "0"], "--lr", "0"),
    (["--device-memory", "0"], "--device-memory", "0"),
    (["--address", "no-port-here"], "--address", "no-port-here"),
    (["--resume"], "--resume", "True"),
    (["--model", "pinsage", "--fanouts", "5,5"], "--fanouts", "5,5"),
    (["--placement", "spread"], "--placement", "spread"),
    (["--peer-cost", "-1"], "--peer-cost", "-1"),
    (["--stall-timeout", "0"], "--stall-timeout", "0"),
    (["--locality-ut", "1.5"], "--locality-ut", "1.5"),
    (["--locality-lt", "0.5", "--locality-ut", "0.2"], "--locality-lt", "0.5"),
    (["--locality-max-scale", "0.5"], "--locality-max-scale", "0.5"),
    (["--sampler", "locality", "--cache-policy", "none"], "--sampler", "locality"),
    (["--sampler", "locality", "--frontier", "new"], "--frontier", "new"),
])
def test_bad_flag_one_line(argv, flag, value, capsys, tmp_path):
    line = _bad(argv, capsys, tmp_path)
    assert line.startswith("launch.py: error: ")
    assert flag in line and value in line, line


def test_unreadable_data_root(capsys, tmp_path):
    missing = tmp_path / "nowhere"
    line = _bad(["--dataset", "cora", "--data-root", str(missing)], capsys, tmp_path)
    assert "--data-root" in line and str(missing) in line
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o000)
    try:
        import os
        if os.access(locked, os.R_OK):  # root ignores permissions
            pytest.skip("running as root: permissions are not enforced")
        line = _bad(["--dataset", "cora", "--data-root", str(locked)], capsys, tmp_path)
        assert "--data-root" in line and "not readable" in line
    finally:
        locked.chmod(0o755)


def test_data_root_without_files(capsys, tmp_path):
    """A readable root that lacks the dataset's files fails on load, before Ray starts."""
    line = _bad(["--dataset", "cora", "--data-root", str(tmp_path)], capsys, tmp_path)
    assert "--data-root" in line or "--dataset" in line


def test_unreachable_address_fails_fast(capsys, tmp_path):
    addr = f"127.0.0.1:{_free_port()}"  # nothing listens there
    line = _bad(["--address", addr], capsys, tmp_path)
    assert "--address" in line and addr in line and "cannot reach" in line


def test_launch_py_exit_status(tmp_path):
    """The real script: non-zero status, one line on stderr, no report."""
    report = tmp_path / "r.json"
    proc = subprocess.run([sys.executable, str(REPO / "launch.py"), "--devices", "0",
                           "--report", str(report)],
                          capture_output=True, text=True, timeout=120, cwd=REPO)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "launch.py: error: argument --devices: must be an integer >= 1, got '0'"]
    assert not report.exists()


def test_cli_docs_match_parser():
    """docs/cli.md carries the generated flag table (regenerate: python -m fgnn.cli --markdown)."""
    doc = (REPO / "docs" / "cli.md").read_text()
    begin, end = "<!-- BEGIN FLAGS (python -m fgnn.cli --markdown) -->\n", "<!-- END FLAGS -->"
    assert begin in doc and end in doc
    table = doc.split(begin, 1)[1].split(end, 1)[0]
    assert table == flags_markdown(), "docs/cli.md is stale: python -m fgnn.cli --markdown"


def test_a_misspelt_flag_gets_a_suggestion(cli_error):
    line = cli_error(["--batchsize", "64"])
    assert line.startswith("launch.py: error: unrecognized arguments: --batchsize 64")
    assert "did you mean --batch-size?" in line
    assert "did you mean" not in cli_error(["--zzzzzz"])  # nothing close: no guess

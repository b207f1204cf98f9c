"""bench/first_minute.py stamps each output line and finds the longest silence (issue 39), and
bench/pyg_model.py says in one line when PyG is missing instead of substituting anything."""

from __future__ import annotations

import sys

from conftest import load_bench


def test_lines_are_stamped_and_the_longest_silence_is_found():
    fm = load_bench("first_minute")
    code = ("import sys, time\nprint('a', flush=True)\ntime.sleep(0.6)\n"
            "sys.stdout.write('bar 1\\rbar 2\\r'); sys.stdout.flush()\nprint('b', flush=True)")
    lines, wall, rc = fm.stamped_lines([sys.executable, "-c", code])
    assert rc == 0 and [t for _, t in lines] == ["a", "bar 1", "bar 2", "b"]
    gap = fm.longest_silence(lines, wall)
    assert gap["after"] == "a" and gap["before"] == "bar 1" and gap["seconds"] >= 0.5
    assert fm.longest_silence([], 2.0) == {"seconds": 2.0, "after": "(start)",
                                           "before": "(exit)", "at": 0.0}


def test_the_pyg_bench_says_when_pyg_is_missing(monkeypatch, capsys):
    bench = load_bench("pyg_model")
    monkeypatch.setitem(sys.modules, "torch_geometric", None)   # import -> ImportError
    assert bench.main(["--seeds", "0"]) == 1
    out = capsys.readouterr().out.strip().splitlines()
    assert len(out) == 1 and "torch_geometric is not importable" in out[0]

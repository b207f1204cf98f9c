"""The package's public names resolve on first use, and the light actors start without torch.

``fgnn`` and ``fgnn.executors`` import their names lazily (PEP 562): the global queue's and the
argument store's actor processes import only their own modules, so each starts without paying
for torch (about 2 CPU-seconds a process, and a job starts a dozen processes).
"""

from __future__ import annotations

import importlib
import subprocess
import sys
from pathlib import Path

import pytest

import fgnn
import fgnn.executors


@pytest.mark.parametrize("package", [fgnn, fgnn.executors], ids=lambda p: p.__name__)
def test_every_public_name_resolves_to_its_module(package):
    lazy = set(package._EXPORTS)
    assert set(package.__all__) - {"__version__"} == lazy
    for name in lazy:
        assert getattr(package, name) is getattr(
            importlib.import_module(package._EXPORTS[name]), name)
    assert lazy <= set(dir(package))


def test_an_unknown_name_is_an_attribute_error_naming_it():
    with pytest.raises(AttributeError, match="no_such_name"):
        fgnn.no_such_name  # noqa: B018
    with pytest.raises(ImportError):
        exec("from fgnn.executors import NoSuchThing", {})


@pytest.mark.parametrize("module", ["fgnn.executors.queue", "fgnn.executors._argstore"])
def test_the_light_actors_modules_import_without_torch(module):
    code = f"import sys, {module}; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False", f"importing {module} imported torch"


def test_help_prints_without_importing_torch():
    """``launch.py --help`` builds the parser from the configs and recipes only: importing torch
    (about 1 s of a 2-core machine's time) is left to the run (issue 39: --help under 1 s)."""
    code = ("import sys, runpy; sys.argv = ['launch.py', '--help']\n"
            "try:\n    runpy.run_path('launch.py', run_name='__main__')\n"
            "except SystemExit as e:\n    code = e.code\n"
            "print('HELP-EXIT', code, sorted(m for m in ('torch', 'numpy', 'ray') "
            "if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, cwd=Path(__file__).resolve().parents[1])
    assert out.returncode == 0, out.stderr
    assert "usage: launch.py" in out.stdout and "--devices" in out.stdout
    assert out.stdout.strip().splitlines()[-1] == "HELP-EXIT 0 []", out.stdout[-300:]

"""What is not a test imports without the test dependencies (issue 47): ``python -m benchmarks --help``
failed where pytest is not installed, because the benchmarks' helpers from ``replaybuf_core.testing``
(``files``, ``crash``, ``lerobot_writer``...) made the package import its conformance suite, which
imports pytest.  Checked in a fresh interpreter where ``import pytest`` and ``import hypothesis`` fail,
as on a machine without them."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

#: the conformance kit proper: test code for backend authors, which may need pytest and hypothesis
KIT = ("conformance", "stateful")

_PROBE = r"""
import importlib, json, pkgutil, runpy, sys
sys.modules["pytest"] = None      # `import pytest` now fails as where it is not installed
sys.modules["hypothesis"] = None
needs = {}
for package in ("replaybuf_core", "benchmarks"):
    root = importlib.import_module(package)
    for info in pkgutil.walk_packages(root.__path__, package + "."):
        if info.name.endswith("__main__"):
            continue
        try:
            importlib.import_module(info.name)
        except ModuleNotFoundError as exc:
            if exc.name in ("pytest", "hypothesis"):
                needs[info.name] = exc.name
        except Exception:  # noqa: BLE001 - an optional dependency this machine lacks: not the question here
            pass
sys.argv = ["benchmarks", "--help"]
try:
    runpy.run_module("benchmarks", run_name="__main__")
except SystemExit as exc:
    help_exit = exc.code
print(json.dumps({"needs": needs, "help_exit": help_exit}))
"""


def test_nothing_but_the_conformance_kit_needs_pytest_and_the_benchmarks_start():
    run = subprocess.run([sys.executable, "-c", _PROBE], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    result = json.loads(run.stdout.strip().splitlines()[-1])
    assert result["help_exit"] in (0, None), run.stderr[-3000:]
    assert "usage:" in run.stdout
    outside_the_kit = {m: dep for m, dep in result["needs"].items()
                       if not (m.startswith("replaybuf_core.testing.") and m.rsplit(".", 1)[1].endswith(KIT))}
    assert outside_the_kit == {}

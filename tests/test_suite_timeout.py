"""The suite's per-test timeout (issue 47 item 1): a hung test fails by name and the run goes on.

Runs pytest with this project's own configuration (``pyproject.toml``: pytest-timeout's thread
method, under xdist) on a file holding a test that waits for ever, with the limit lowered to 3 s.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("pytest_timeout")

ROOT = Path(__file__).resolve().parents[1]


def test_a_hung_test_fails_by_name_and_the_others_still_run(tmp_path):
    (tmp_path / "test_hang.py").write_text(
        "import threading\n"
        "def test_before():\n    pass\n"
        "def test_waits_for_ever():\n    threading.Event().wait()\n"
        "def test_after():\n    pass\n")
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-c", str(ROOT / "pyproject.toml"), "--rootdir", str(tmp_path),
         "-p", "no:cacheprovider", "-n", "1", "-q", "-o", "timeout=3", "test_hang.py"],
        cwd=tmp_path, capture_output=True, text=True, timeout=120)
    out = run.stdout + run.stderr
    assert run.returncode == 1, out
    assert "FAILED test_hang.py::test_waits_for_ever" in out, out
    assert "1 failed, 2 passed" in out, out

"""The scripts under examples/ run as a user runs them, and say what they promise."""
from __future__ import annotations

import subprocess
import sys

import pytest

from retbench.support.paths import ROOT


@pytest.mark.slow
def test_own_model_example_prints_a_verdict_for_a_function_wrapping_a_model(tmp_path):
    done = subprocess.run([sys.executable, str(ROOT / "examples" / "own_model.py"), str(tmp_path / "out")],
                          cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.splitlines()
    assert lines[0].startswith("best on the held-out queries: ") and lines[0].endswith("test queries)")
    assert any(line.startswith("│ my-model/flat") for line in lines) and any("bm25:bm25" in line for line in lines)
    assert (tmp_path / "out" / "report.html").is_file()

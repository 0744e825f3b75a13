"""Argument checks of the experiment scripts that need no measurement."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("since", ["yesterday", "2026-12-3", "2026-12-03T1"])
def test_model_accuracy_refuses_a_since_it_cannot_compare(since):
    """--since is compared with the rows' timestamps as text, so only a zero-padded
    prefix of YYYY-MM-DDTHH:MM:SS is taken; anything else is a one-line error."""
    out = subprocess.run([sys.executable, str(ROOT / "experiments" / "model_accuracy.py"),
                          "report", "--since", since], capture_output=True, text=True,
                         cwd=ROOT, timeout=120)
    assert out.returncode == 2
    assert f"--since {since!r}" in out.stderr and "YYYY-MM-DD" in out.stderr

"""The examples run as a user would run them (briefly) and say what they promise."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.integration
@pytest.mark.parametrize("space", ["nasbench201", "mobilenetv2"])
def test_nas_search_respects_the_budget_and_draws_the_front(space, tmp_path):
    plot = tmp_path / "front.png"
    p = subprocess.run(
        [sys.executable, str(REPO / "examples" / "nas_search.py"), "--space", space,
         "--seconds", "3", "--population", "32", "--plot", str(plot), "--json"],
        capture_output=True, text=True, timeout=600, env={**os.environ})
    assert p.returncode == 0, p.stderr[-2000:]
    out = json.loads(p.stdout)
    assert out["candidates_scored"] >= 32 and 0 < out["feasible"] <= out["candidates_scored"]
    assert out["best"]["upper_ms"] <= out["budget_ms"]
    front = out["pareto"]
    assert front and all(a["upper_ms"] <= b["upper_ms"] and a["flops"] < b["flops"]
                         for a, b in zip(front, front[1:]))
    assert plot.read_bytes()[:4] == b"\x89PNG"

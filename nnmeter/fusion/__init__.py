"""Fusion-rule detection on real backends, and the rules it produces.

- :func:`load_rules` — validated :class:`FusionRules` of a backend id or file;
- :func:`detect_fusion` — measure the crafted test cases on a backend and decide;
- :func:`build_testcases` — the test cases (three IR models per op pair, plus the
  multi-output, multi-input and block tests).
"""

from __future__ import annotations

from nnmeter.fusion.detect import detect_fusion, decide_pair
from nnmeter.fusion.rules import (
    BLOCKS, SCHEMA_VERSION, FusionRules, Pattern, load_rules, rules_dir, rules_path,
)
from nnmeter.fusion.testcases import TestCase, TestShapes, build_testcases

__all__ = [
    "load_rules", "detect_fusion", "decide_pair", "FusionRules", "Pattern", "BLOCKS",
    "SCHEMA_VERSION", "rules_dir", "rules_path", "TestCase", "TestShapes", "build_testcases",
]

"""The layout rules against the installed ONNX Runtime: which single-kernel models run
blocked (NCHWc) and which reorder their input, as ORT's own profiler shows.

The rules describe the device the shipped ort-cpu data was measured on (AVX-512, a
16-float NCHWc block); on a CPU without AVX-512 ORT uses another block and the test is
skipped.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from nnmeter.kernels import KERNEL_TYPES
from nnmeter.predictors.facts import device_facts, local_cpu_facts
from nnmeter.predictors.layout import reorder_elements

CASES = [
    ("conv-bn-relu", dict(h=14, w=14, cin=24, cout=58, kernel=1)),  # any cout
    ("conv-bn-relu", dict(h=14, w=14, cin=116, cout=116, kernel=1)),  # cin % 4
    ("conv-bn-relu", dict(h=14, w=14, cin=58, cout=58, kernel=1)),  # plain FusedConv
    ("conv-bn-relu", dict(h=14, w=14, cin=12, cout=24, kernel=3)),  # reads NCHW
    ("conv-bn-relu", dict(h=14, w=14, cin=64, cout=64, kernel=3, groups=4)),
    ("conv-bn-relu", dict(h=14, w=14, cin=48, cout=48, kernel=3, groups=2)),
    ("dwconv-bn", dict(h=14, w=14, cin=20, kernel=3)),
    ("dwconv-bn", dict(h=14, w=14, cin=58, kernel=3)),
    ("maxpool", dict(h=14, w=14, cin=32, kernel=3, stride=2)),
    ("maxpool", dict(h=14, w=14, cin=24, kernel=3, stride=2)),
]


def _avx512() -> bool:
    try:
        return " avx512f" in Path("/proc/cpuinfo").read_text()
    except OSError:
        return False


def test_blocked_kernels_and_input_reorders_match_ort():
    pytest.importorskip("onnxruntime")
    if not _avx512():
        pytest.skip("the rules are those of an AVX-512 CPU (16-float NCHWc block)")
    from nnmeter.backends import Profiler

    block = device_facts({"runtime": "onnxruntime", **local_cpu_facts()}).layout_block
    assert block == 16
    with Profiler("ort-cpu") as prof:
        for name, cfg in CASES:
            kt = KERNEL_TYPES.get(name)
            config = kt.config_cls(**cfg)
            ops = [n.op_type for n in prof.profile(kt.build_graph(config), runs=1)]
            n_in, n_out = reorder_elements(kt, config, block)
            runs_blocked = any(o.endswith("ReorderOutput") for o in ops)
            reorders_input = any(o.endswith("ReorderInput") for o in ops)
            assert runs_blocked == bool(n_out), (name, cfg, ops)
            assert reorders_input == bool(n_in), (name, cfg, ops)

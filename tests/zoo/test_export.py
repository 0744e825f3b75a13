"""Zoo variants export to runnable ONNX (and TFLite) files that compute the IR's shapes."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest

from nnmeter.zoo import FAMILY_NAMES, base_variant, sample_variants

pytestmark = pytest.mark.integration

#: Random weights for VGG/AlexNet variants reach 1 GB; the unit test exports the first
#: variants under this size (the experiment script exports all of them).
_PARAMS_LIMIT = 20_000_000


def _pick(family: str, k: int = 3):
    variants = sample_variants(family, 50, seed=0)
    sized = [(v, v.build().cost().params) for v in variants]
    small = [v for v, p in sized if p <= _PARAMS_LIMIT]
    if len(small) < k:
        small += [v for v, _ in sorted(sized, key=lambda t: t[1]) if v not in small]
    return small[:k]


def _run_onnx(path, graph):
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    sess = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
    name = sess.get_inputs()[0].name
    x = np.random.default_rng(0).random(graph.shape_of(graph.input_names[0]),
                                        dtype=np.float32)
    return sess.run(None, {name: x})


@pytest.mark.parametrize("family", FAMILY_NAMES)
def test_variants_export_to_onnx_and_run(family, tmp_path):
    from nnmeter.exporters.onnx import export_onnx

    for v in _pick(family):
        g = v.build(validate=True)
        path = export_onnx(g, tmp_path / f"{v.name}.onnx", seed=0)
        (out,) = _run_onnx(path, g)
        assert out.shape == g.shape_of(g.outputs[0])
        assert np.isfinite(out).all()


def test_examples_match_the_base_configs():
    from pathlib import Path

    from nnmeter.ir import ModelGraph

    root = Path(__file__).resolve().parents[2] / "examples"
    for name in ("mobilenetv2", "resnet18"):
        g = ModelGraph.from_json(str(root / f"{name}.json"))
        g.validate()
        from nnmeter.zoo import get_variant

        assert g.structurally_equal(get_variant(name).build())


@pytest.mark.skipif(importlib.util.find_spec("ai_edge_litert") is None,
                    reason="ai_edge_litert is not installed")
def test_variants_export_to_tflite_and_run(runs_as_tflite):
    for v in (base_variant("mobilenetv2"), _pick("shufflenetv2", 1)[0],
              _pick("nasbench201", 1)[0]):
        runs_as_tflite(v.build(validate=True), v.name)

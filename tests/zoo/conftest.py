"""Fixtures shared by the zoo's tests."""

from __future__ import annotations

import numpy as np
import pytest


@pytest.fixture
def runs_as_tflite(tmp_path):
    """A check: a graph exported to ``.tflite`` runs once in LiteRT on random input and
    gives a finite output of the graph's first output's size. Skips without the exporter."""
    try:
        from nnmeter.exporters.tflite import export_tflite
    except ImportError as err:  # exporter not built yet in this checkout
        pytest.skip(f"nnmeter.exporters.tflite unavailable: {err}")
    from ai_edge_litert.interpreter import Interpreter

    def check(graph, name: str) -> None:
        path = export_tflite(graph, tmp_path / f"{name}.tflite", seed=0)
        interp = Interpreter(model_path=str(path), num_threads=1)
        interp.allocate_tensors()
        inp = interp.get_input_details()[0]
        interp.set_tensor(inp["index"],
                          np.random.default_rng(0).random(inp["shape"], dtype=np.float32))
        interp.invoke()
        out = interp.get_tensor(interp.get_output_details()[0]["index"])
        assert out.size == int(np.prod(graph.shape_of(graph.outputs[0])))
        assert np.isfinite(out).all()

    return check

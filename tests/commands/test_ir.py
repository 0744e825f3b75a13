"""Tests of `nnmeter ir`."""

from __future__ import annotations

import json

from nnmeter.cli import main
from nnmeter.exporters.onnx import export_onnx
from nnmeter.ir import GraphBuilder


def _model(tmp_path):
    b = GraphBuilder("m", (1, 3, 8, 8))
    y = b.relu(b.conv(b.x, 4, bias=False, name="c"), name="r")
    return export_onnx(b.build([y]), tmp_path / "m.onnx")


def test_table_and_totals(tmp_path, capsys):
    assert main(["ir", str(_model(tmp_path))]) == 0
    out = capsys.readouterr().out
    assert "conv" in out and "1x3x8x8" in out and "1x4x8x8" in out
    assert "MACs           6,912" in out  # 4·3·3·3 weights × 8·8 outputs
    assert "params         108" in out
    assert "unknown ops    none" in out


def test_json_matches_the_graph(tmp_path, capsys):
    assert main(["ir", str(_model(tmp_path)), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert [o["op"] for o in report["ops"]] == ["input", "conv", "relu"]
    assert report["ops"][1]["flops"] == 2 * 6912
    assert report["totals"]["macs"] == 6912 and report["totals"]["unknown_ops"] == []
    assert report["inputs"] == {"input": [1, 3, 8, 8]}


def test_input_shape_option_and_save(tmp_path, capsys):
    path = _model(tmp_path)
    saved = tmp_path / "ir.json"
    assert main(["ir", str(path), "--input-shape", "input=1,3,8,8", "--save", str(saved),
                 "--json"]) == 0
    assert json.loads(saved.read_text())["schema_version"] == 1


def test_errors_are_one_line_and_exit_2(tmp_path, capsys):
    assert main(["ir", str(tmp_path / "none.onnx")]) == 2
    err = capsys.readouterr().err
    assert "does not exist" in err and "Traceback" not in err
    assert main(["ir", str(_model(tmp_path)), "--input-shape", "bogus=1,3,8,8"]) == 2
    assert "'bogus'" in capsys.readouterr().err

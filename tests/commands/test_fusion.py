"""Tests of `nnmeter kernels` and `nnmeter detect-fusion`."""

from __future__ import annotations

import json

import pytest

from nnmeter.cli import main
from nnmeter.fusion import FusionRules
from nnmeter.ir import GraphBuilder


def _model(tmp_path):
    b = GraphBuilder("m", (1, 3, 16, 16))
    y = b.relu(b.bn(b.conv(b.x, 8, name="c"), name="b"), name="r")
    y = b.flatten(b.gap(b.maxpool(y, name="p"), name="g"), name="f")
    path = tmp_path / "m.json"
    b.build([b.fc(y, 10, name="fc")]).to_json(str(path))
    return path


def _rules(tmp_path):
    r = FusionRules.from_decisions("toy-cpu", pairs={("conv", "bn"): True, ("bn", "relu"): True,
                                                     ("gap", "reshape"): True})
    path = tmp_path / "toy-cpu.json"
    r.to_json(path)
    return path


def test_kernels_table(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("NNMETER_FUSION_RULES_DIR", str(tmp_path))
    _rules(tmp_path)
    assert main(["kernels", str(_model(tmp_path)), "--backend", "toy-cpu"]) == 0
    out = capsys.readouterr().out
    assert "conv-bn-relu" in out and "maxpool" in out and "fc" in out
    assert "8 nodes -> 4 kernels on toy-cpu" in out


def test_kernels_json(tmp_path, capsys):
    assert main(["kernels", str(_model(tmp_path)), "--backend", "toy-cpu",
                 "--rules", str(_rules(tmp_path)), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    types = [k["type"] for k in report["kernels"]]
    assert types == ["conv-bn-relu", "maxpool", "gap", "fc"]
    conv = report["kernels"][0]
    assert conv["nodes"] == ["c", "b", "r"] and conv["config"]["cout"] == 8
    assert conv["flops"] == 2 * 8 * 3 * 9 * 16 * 16 + 3 * 8 * 16 * 16
    assert report["kernels"][2]["features"]["H"] == 8  # gap sees its input height


def test_kernels_without_rules_says_how_to_detect(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("NNMETER_FUSION_RULES_DIR", str(tmp_path))
    assert main(["kernels", str(_model(tmp_path)), "--backend", "ort-cpu"]) == 2
    err = capsys.readouterr().err
    assert "no fusion rules for backend 'ort-cpu'" in err
    assert "nnmeter detect-fusion --backend ort-cpu" in err


@pytest.mark.integration
def test_detect_fusion_command_on_ort(tmp_path, capsys):
    pytest.importorskip("onnxruntime", reason="onnxruntime is not installed")
    out = tmp_path / "ort.json"
    assert main(["detect-fusion", "--backend", "ort-cpu", "--only", "relu->maxpool",
                 "--hw", "14", "--out", str(out), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["pair"]["tested"] == 1 and report["out"] == str(out)
    assert json.loads(out.read_text())["shapes"]["hw"] == 14


@pytest.mark.integration
def test_detect_fusion_command_turns_the_corrections_off(tmp_path, capsys):
    pytest.importorskip("onnxruntime", reason="onnxruntime is not installed")
    out = tmp_path / "ort.json"
    assert main(["detect-fusion", "--backend", "ort-cpu", "--only", "relu->maxpool",
                 "--out", str(out), "--no-edge-correction", "--no-handoff-correction",
                 "--json"]) == 0
    capsys.readouterr()
    data = json.loads(out.read_text())
    assert data["detection"]["edge_correction"] is False
    assert data["detection"]["handoff_correction"] is False
    assert data["detection"]["profiles"] == 0  # nothing asked the runtime's profiler
    (p,) = data["patterns"]
    assert "handoff_ms" not in p["extra"] and "skipped" in p["extra"]["edge"]

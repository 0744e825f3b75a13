"""The ``nnmeter zoo`` subcommand: list, sample (files + manifest), show; all with --json."""

from __future__ import annotations

import json

import pytest

from nnmeter.cli import main
from nnmeter.zoo import FAMILY_NAMES, variant_from_record


def _json(capsys, argv):
    assert main(argv) == 0
    return json.loads(capsys.readouterr().out)


def test_list_json(capsys):
    rows = _json(capsys, ["zoo", "list", "--json"])
    assert sorted(r["family"] for r in rows) == sorted(FAMILY_NAMES)
    mbv2 = next(r for r in rows if r["family"] == "mobilenetv2")
    assert mbv2["params"] == 3_504_872
    assert mbv2["input_shape"] == [1, 3, 224, 224]


def test_list_table(capsys):
    assert main(["zoo", "list"]) == 0
    out = capsys.readouterr().out
    assert "nasbench201" in out and "MACs (G)" in out


def test_sample_json_format_writes_models_and_manifest(tmp_path, capsys):
    out = _json(capsys, ["zoo", "sample", "squeezenet", "-n", "3", "--seed", "4",
                         "--out", str(tmp_path), "--format", "json", "--json"])
    lines = (tmp_path / "manifest.jsonl").read_text().splitlines()
    assert len(lines) == 3 == len(out["variants"])
    from nnmeter.ir import ModelGraph

    for line in lines:
        rec = json.loads(line)
        g = ModelGraph.from_json(str(tmp_path / rec["file"]))
        assert g.structurally_equal(variant_from_record(rec).build())
        assert rec["macs"] == g.cost().macs


@pytest.mark.integration
def test_sample_onnx(tmp_path, capsys):
    assert main(["zoo", "sample", "nasbench201", "-n", "2", "--out", str(tmp_path)]) == 0
    assert len(list(tmp_path.glob("*.onnx"))) == 2
    assert "wrote 2 models" in capsys.readouterr().out


def test_show_variant_and_preset(capsys):
    from nnmeter.zoo import sample_variants

    v = sample_variants("mobilenetv3", 2, seed=42)[1]
    s = _json(capsys, ["zoo", "show", v.name, "--json"])
    assert s["name"] == v.name and s["config_hash"] == v.config_hash
    assert s["macs"] == v.build().cost().macs
    s = _json(capsys, ["zoo", "show", "resnet50", "--json"])
    assert s["params"] == 25_557_032
    assert main(["zoo", "show", "googlenet"]) == 0
    assert "6.625 M params" in capsys.readouterr().out


def test_show_unknown_name_exits_2(capsys):
    assert main(["zoo", "show", "lenet"]) == 2
    assert "not a zoo family" in capsys.readouterr().err


def test_sample_unknown_family_exits_2(tmp_path, capsys):
    assert main(["zoo", "sample", "lenet", "--out", str(tmp_path)]) == 2
    assert "known zoo families" in capsys.readouterr().err

"""``nnmeter devices`` and ``nnmeter predict --device``."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from nnmeter import cli

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "devices"))
from test_datasets import device_of, make_dataset  # noqa: E402


@pytest.fixture
def two_devices(tmp_path, monkeypatch):
    import nnmeter.devices.datasets as dsets

    zen4, zen3 = device_of("epyc-zen4-avx512"), device_of("epyc-zen3-avx2")
    d4 = make_dataset(tmp_path, zen4, rows=40)
    make_dataset(tmp_path, zen3, rows=5)
    (d4 / "accuracy.json").write_text(json.dumps({"zoo seed 1000": {"acc10": 0.97}}))
    (d4 / "builds.jsonl").write_text(json.dumps({"minutes": 12.5}) + "\n{torn")
    monkeypatch.setenv("NNMETER_DATA", str(tmp_path))
    monkeypatch.setattr(dsets, "local_device", lambda backend_id: zen3)
    return zen4, zen3


def test_devices_json_lists_every_device_and_this_machine(two_devices, capsys):
    zen4, zen3 = two_devices
    assert cli.main(["devices", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert {"name", "isa", "caches", "cores", "vendor"} <= set(out["this_machine"])
    rows = {r["device"]: r for r in out["backends"]["ort-cpu"]}
    assert set(rows) == {zen4.name, zen3.name}
    assert rows[zen4.name]["measurements"] == 40 and rows[zen4.name]["build_minutes"] == 12.5
    assert rows[zen4.name]["accuracy"]["zoo seed 1000"]["acc10"] == 0.97
    assert rows[zen3.name]["used_here"] and rows[zen3.name]["this_machine"]
    assert not rows[zen4.name]["used_here"] and rows[zen3.name]["selection"] == "this machine"


def test_a_dataset_no_build_run_ended_on_is_unfinished(two_devices, capsys):
    zen4, zen3 = two_devices  # zen3's dataset has rows and no builds.jsonl: a build running
    assert cli.main(["devices", "--json"]) == 0
    rows = {r["device"]: r for r in json.loads(capsys.readouterr().out)["backends"]["ort-cpu"]}
    assert rows[zen3.name]["build_minutes"] is None and not rows[zen3.name]["finished"]
    assert rows[zen4.name]["finished"]
    assert cli.main(["devices"]) == 0
    text = capsys.readouterr().out
    line = next(x for x in text.splitlines() if "epyc-zen3-avx2-2c" in x and "ort-cpu" in x)
    assert "unfinished" in line and "rerun the same `nnmeter build`" in text


def test_devices_text_marks_the_one_used_here(two_devices, capsys):
    assert cli.main(["devices"]) == 0
    text = capsys.readouterr().out
    assert "this machine:" in text and "epyc-zen4-avx512-2c" in text and "*" in text


def test_predict_with_an_unknown_device_lists_the_known(two_devices, capsys):
    example = Path(__file__).resolve().parents[2] / "examples" / "mobilenetv2.json"
    assert cli.main(["predict", str(example), "-b", "ort-cpu", "--device", "nosuch"]) == 2
    err = capsys.readouterr().err
    assert "nosuch" in err and "epyc-zen4-avx512-2c" in err and "epyc-zen3-avx2-2c" in err


def test_build_transfer_from_reaches_the_transfer_build(monkeypatch, capsys):
    import nnmeter.builder
    from nnmeter.builder import TransferResult

    seen = {}

    def fake(backend_id, source, **kw):
        seen.update(kw, backend_id=backend_id, source=source)
        return TransferResult(backend_id, "/d/ort-cpu@here", "ort-cpu@there", measurements=7,
                              phases={"measure": 1.0})

    monkeypatch.setattr(nnmeter.builder, "build_by_transfer", fake)
    assert cli.main(["build", "-b", "ort-cpu", "--transfer-from", "there",
                     "--budget-minutes", "10", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["measurements"] == 7 and out["source"] == "ort-cpu@there"
    assert seen["source"] == "there" and seen["budget_minutes"] == 10.0
    assert cli.main(["build", "-b", "ort-cpu", "--transfer-from", "there"]) == 0
    assert "7 kernel measurements here" in capsys.readouterr().out
    assert seen["in_model_variants"] is None
    # more in-model models: passed on; without a transfer, or below 1, a usage error
    assert cli.main(["build", "-b", "ort-cpu", "--transfer-from", "there",
                     "--in-model-variants", "10", "--json"]) == 0
    assert seen["in_model_variants"] == 10
    capsys.readouterr()
    assert cli.main(["build", "-b", "ort-cpu", "--in-model-variants", "10"]) == 2
    assert "--in-model-variants goes with --transfer-from" in capsys.readouterr().err
    assert cli.main(["build", "-b", "ort-cpu", "--transfer-from", "there",
                     "--in-model-variants", "0"]) == 2
    assert "at least 1, not 0" in capsys.readouterr().err


def test_build_transfer_from_an_unknown_device_lists_the_known(two_devices, capsys):
    assert cli.main(["build", "-b", "ort-cpu", "--transfer-from", "pixel-7",
                     "--budget-minutes", "10"]) == 2
    err = capsys.readouterr().err
    assert "pixel-7" in err and "epyc-zen4-avx512-2c" in err

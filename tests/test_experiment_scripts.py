"""Argument checks of the experiment scripts that need no measurement."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
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


def _real_set():
    import importlib.util

    spec = importlib.util.spec_from_file_location("real_set", ROOT / "experiments" / "real_set.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules["real_set"] = mod  # its dataclasses look their module up
    spec.loader.exec_module(mod)
    return mod


def test_the_transformer_set_lists_keras_hub_backbones_for_litert():
    """The transformer set holds keras-hub backbones written by the TFLite converter,
    which only the LiteRT backends read, in the families of the ONNX entries."""
    rs = _real_set()
    es = rs.entries("transformers")
    hub = [e for e in es if e.name.startswith("keras-hub-")]
    assert len(hub) >= 8 and "keras-hub-bert-mini" in {e.name for e in hub}
    assert all(e.exporter == "tflite-converter" and e.source.startswith("keras_hub.models.")
               for e in hub)
    assert {e.family for e in hub} <= {e.family for e in es if e.name.startswith("hf-")}
    info = {"exporter": "tflite-converter"}
    assert rs._applies(info, "litert-cpu") and not rs._applies(info, "ort-cpu")
    assert len({e.name for e in es}) == len(es)


@pytest.mark.parametrize("seeds", ["2000", "1000,2000", "a,b"])
def test_model_accuracy_refuses_training_baselines_on_the_reported_set(seeds):
    """--train-seeds names other measured sets; the reported one (or a malformed list)
    is a one-line error before anything is loaded."""
    out = subprocess.run([sys.executable, str(ROOT / "experiments" / "model_accuracy.py"),
                          "report", "--seed", "2000", "--train-seeds", seeds],
                         capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert out.returncode == 2
    assert f"--train-seeds {seeds}" in out.stderr or f"--train-seeds {seeds!r}" in out.stderr


def test_model_accuracy_records_its_figures_where_nnmeter_devices_reads_them(tmp_path,
                                                                              monkeypatch):
    import argparse
    import importlib.util
    import json
    from types import SimpleNamespace

    import nnmeter.predictors.dataset as dataset_mod
    from nnmeter.commands.devices import _acc_text, _accuracy

    spec = importlib.util.spec_from_file_location("model_accuracy",
                                                  ROOT / "experiments" / "model_accuracy.py")
    ma = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ma)
    monkeypatch.setattr(dataset_mod, "kernel_dataset_dir", lambda ds_id, root=None: tmp_path)
    (tmp_path / "accuracy.json").write_text(json.dumps({"zoo seed 1000": {"acc10": 0.5}}))
    pred = SimpleNamespace(resolution=SimpleNamespace(
        dataset=SimpleNamespace(dataset_id="ort-cpu@dev")))
    out = {"device": "dev", "date": "2026-12-05", "overall": {
        "predictor": {"acc10": 0.966, "acc5": 0.773, "mape_percent": 3.7, "n": 88},
        "repeatability_acc10": 1.0}}
    args = argparse.Namespace(backend="ort-cpu", seed=2000, since=None, families=None)
    ma._record_accuracy(args, pred, {"resnet", "vgg"}, out)
    acc = _accuracy(tmp_path)
    assert acc["zoo seed 1000"] == {"acc10": 0.5}           # kept
    assert acc["zoo seed 2000"]["acc10"] == 0.966 and acc["zoo seed 2000"]["n"] == 88
    assert "--seed 2000" in acc["zoo seed 2000"]["command"]
    assert "zoo seed 2000 97%" in _acc_text(acc)
    args.seed, args.families = 5000, "vit,bert"
    ma._record_accuracy(args, pred, {"vit", "bert"}, out)
    assert "transformers seed 5000" in _accuracy(tmp_path)


def _model_accuracy_module():
    import importlib.util

    spec = importlib.util.spec_from_file_location("model_accuracy",
                                                  ROOT / "experiments" / "model_accuracy.py")
    ma = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ma)
    return ma


def test_model_accuracy_measures_litert_in_a_chain_of_child_processes(monkeypatch, capsys):
    """Each child measures up to N models and exits (the .tflite converter's memory goes
    with it); a child killed after some rows is followed by another; the chain stops at
    the first child without a new row, and is an error if that child failed."""
    import argparse

    ma = _model_accuracy_module()
    rows: list[int] = []
    # rows each child adds and its exit status: a full chunk, one killed for memory
    # after two rows, the last few, then nothing left
    script = [(3, 0), (2, -9), (1, 0), (0, 0)]
    calls = []

    def fake_run(argv, **kw):
        calls.append(argv)
        new, rc = script[len(calls) - 1]
        rows.extend([0] * new)
        return subprocess.CompletedProcess(argv, rc)

    monkeypatch.setattr(subprocess, "run", fake_run)
    monkeypatch.setattr(ma, "_rows", lambda backend, seed, device: list(rows))
    monkeypatch.setattr(sys, "argv", ["model_accuracy.py", "measure", "-b", "litert-cpu"])
    args = argparse.Namespace(backend="litert-cpu", seed=11000, device=None)
    ma.measure_in_children(args, 3)
    assert len(calls) == 4 and len(rows) == 6
    assert all(c[-2:] == ["--limit", "3"] and "measure" in c for c in calls)
    assert "status -9 after 2 new rows" in capsys.readouterr().out
    rows.clear()
    calls.clear()
    script[:] = [(0, 1)]
    with pytest.raises(SystemExit, match="status 1 before its first measurement"):
        ma.measure_in_children(args, 3)


def _benchmark(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / "experiments" / "benchmark.py"), *argv],
                          capture_output=True, text=True, cwd=ROOT, timeout=120)


def test_benchmark_names_the_devices_and_backends_its_protocol_has():
    """An unknown device or backend is a one-line error that lists what the protocol
    (experiments/protocol.json) declares."""
    import json

    protocol = json.loads((ROOT / "experiments" / "protocol.json").read_text())["devices"]
    out = _benchmark("--device", "no-such-device")
    assert out.returncode == 1 and "no-such-device" in out.stderr
    assert all(d in out.stderr for d in protocol)
    device = sorted(protocol)[0]
    out = _benchmark("--device", device, "--backends", "no-such-backend")
    assert out.returncode == 1 and "no-such-backend" in out.stderr
    assert all(b in out.stderr for b in protocol[device])


def test_benchmark_readme_keeps_the_backends_another_run_wrote(tmp_path):
    """The device README is assembled from every backend's section, in the protocol's
    order, so a run for one backend does not drop the others' tables."""
    sys.path.insert(0, str(ROOT / "experiments"))
    import benchmark as bm

    bm.section_file(tmp_path, "mnn-cpu").write_text("## mnn-cpu\n\ntable m\n")
    bm.section_file(tmp_path, "ort-cpu").write_text("## ort-cpu\n\ntable o\n")
    text = bm.write_readme(tmp_path, ["ort-cpu", "litert-cpu", "mnn-cpu"],
                           ["# Benchmark tables: dev", ""]).read_text()
    assert text.index("## ort-cpu") < text.index("## mnn-cpu")
    assert "litert-cpu" not in text and text.startswith("# Benchmark tables: dev")
    # a later run for mnn-cpu alone rewrites its section and keeps ort-cpu's
    bm.section_file(tmp_path, "mnn-cpu").write_text("## mnn-cpu\n\ntable m2\n")
    text = bm.write_readme(tmp_path, ["ort-cpu", "litert-cpu", "mnn-cpu"], ["# h"]).read_text()
    assert "table o" in text and "table m2" in text and "table m\n" not in text


def test_speed_effect_splits_pairs_by_how_far_the_set_ran_from_its_build(tmp_path):
    """speed_effect.py: pairs whose set ran more than 5 % away from their build's speed
    are summarised apart, with their error as predicted and at the set's speed; an
    unknown device is a one-line error naming the declared ones."""
    sys.path.insert(0, str(ROOT / "experiments"))
    import speed_effect as se

    def row(speed, ratio, acc, acc_s):
        return {"backend": "ort-cpu", "dataset": "ort-cpu@d", "seed": 1000, "models": 10,
                "median_ratio": ratio, "set_over_build": speed, "acc10": acc,
                "median_ratio_at_set_speed": ratio * speed, "acc10_at_set_speed": acc_s}

    rows = [row(1.2, 1 / 1.2, 0.2, 0.8), row(0.85, 1 / 0.85, 0.3, 0.7), row(1.01, 1.0, 0.9, 0.9),
            {**row(1.0, 1.0, 0.5, 0.5), "set_over_build": None}]
    lines = se.summary(rows)
    assert lines[0].startswith("3 predictor-set pairs with probes")
    far = next(x for x in lines if x.startswith("set more than 5 %"))
    assert "2 pairs" in far and "0.000 at the set's speed" in far and "25.0 -> 75.0 %" in far
    near = next(x for x in lines if x.startswith("set within 5 %"))
    assert "1 pairs" in near and "90.0 -> 90.0 %" in near
    assert "no probes" in se._line(rows[-1])
    assert se.plot(rows, tmp_path / "s.png", "d").stat().st_size > 0
    with pytest.raises(SystemExit, match="no-such-device.*epyc-zen4-avx512-2c"):
        se.main(["--device", "no-such-device"])


def test_the_protocol_declares_each_reported_set_apart_from_its_training_sets():
    """A reported set is never a development or baseline-training set of its backend."""
    import json

    protocol = json.loads((ROOT / "experiments" / "protocol.json").read_text())["devices"]
    for device, backends in protocol.items():
        for backend, entry in backends.items():
            seed = entry["reported"]["seed"]
            assert seed not in entry["development"], (device, backend)
            assert seed not in entry["baseline_training"], (device, backend)
            assert entry["reported"]["passes"] >= 2 and entry["reported"]["declared"]
            check = entry.get("gcn_check")
            if check:
                assert check["seed"] != seed and check["n"] > check["train"] + check["validation"]


def test_gcn_paper_check_says_which_set_to_measure_when_it_has_none(tmp_path):
    env = {**__import__("os").environ, "NNMETER_DATA": str(tmp_path)}
    out = subprocess.run([sys.executable, str(ROOT / "experiments" / "gcn_paper_check.py"),
                          "--device", "no-such-device", "--seed", "12345"],
                         capture_output=True, text=True, cwd=ROOT, timeout=120, env=env)
    assert out.returncode == 1
    assert "seed12345.jsonl" in out.stderr and "measure" in out.stderr


def _backend_selection_module():
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "backend_selection", ROOT / "experiments" / "backend_selection.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_backend_selection_over_thread_counts_is_a_run_of_its_own(tmp_path, monkeypatch):
    """--threads 1,2: every f32 backend at each count is a candidate, OpenVINO's bf16 is
    measured beside at one thread only, the files carry the counts, and a run without
    its set says which step makes it."""
    import argparse

    bs = _backend_selection_module()
    ns = argparse.Namespace(threads="2,1", candidates=None, device="dev")
    assert bs._threads(ns) == (1, 2)
    cands = bs._candidates(ns)
    assert cands[:len(bs.F32)] == bs.F32 and cands[len(bs.F32):] == tuple(
        f"{b}-t2" for b in bs.F32)
    measured = bs._measured((1, 2))
    assert "openvino-cpu" in measured and "openvino-cpu-t2" not in measured
    assert set(cands) <= set(measured)
    assert "litert-cpu-t2" not in bs._onnx_backends(measured)
    assert bs._suffix((1,)) == "" and bs._suffix((1, 2)) == "_threads1-2"
    for bad in ("two", "0,1"):
        with pytest.raises(SystemExit, match="--threads"):
            bs._threads(argparse.Namespace(threads=bad))
    monkeypatch.setattr(bs, "_dir", lambda device: tmp_path)
    with pytest.raises(SystemExit, match="'choose' with --threads 2,1 first"):
        bs._run(ns)


def test_backend_selection_probes_the_speed_reference_per_backend(tmp_path, monkeypatch):
    """A selection run records each backend's speed-reference probes beside its rows
    (tagged per backend: each runs the reference at its own speed), before its first
    model and again when one is due, and resumes without measuring again."""
    import types

    import nnmeter.backends

    bs = _backend_selection_module()
    measured = []

    class FakeProfiler:
        def __init__(self, backend):
            self.backend = backend

        def measure(self, model, on_error="record"):
            measured.append((self.backend, getattr(model, "name", model)))
            return types.SimpleNamespace(ok=True, latency_ms=1.0, spread=0.01, error=None,
                                         device=types.SimpleNamespace(fingerprint_id="f"))

        def close(self):
            """Nothing to stop."""

    monkeypatch.setattr(nnmeter.backends, "Profiler", FakeProfiler)
    items = [(f"m{i}", "fam", lambda b, i=i: f"file{i}") for i in range(3)]
    out = tmp_path / "truth.jsonl"
    bs._measure_items(items, ("ort-cpu", "mnn-cpu"), 2, out, "truth")
    rows = [json.loads(x) for x in out.read_text().splitlines()]
    assert len(rows) == 12 and all(r["ok"] for r in rows)
    probes = [json.loads(x) for x in (tmp_path / "speed_reference.jsonl").read_text().splitlines()]
    assert sorted(p["set"] for p in probes) == ["truth-mnn-cpu", "truth-ort-cpu"]
    assert all(p["phase"] == "truth pass 0" for p in probes)
    n = len(measured)
    bs._measure_items(items, ("ort-cpu", "mnn-cpu"), 2, out, "truth")  # all done: resumes
    assert len(measured) == n and len(out.read_text().splitlines()) == 12


def test_backend_selection_run_speed_is_the_runs_probes_over_each_build(tmp_path,
                                                                       monkeypatch):
    """The report's speed factor per candidate: the run's probes of that backend over
    the probes of the build of the predictor that ranks it; None where either has none."""
    import types

    import nnmeter.predictors
    from nnmeter.devices.reference import REFERENCE_FILE
    from nnmeter.predictors.dataset import append_jsonl

    bs = _backend_selection_module()
    run = tmp_path / "run"
    builds = {b: tmp_path / b for b in ("ort-cpu", "mnn-cpu", "litert-cpu")}
    for d in (run, *builds.values()):
        d.mkdir()
    for ms in (0.50, 0.52, 0.60):  # median 0.52
        append_jsonl(builds["ort-cpu"] / REFERENCE_FILE, {"latency_ms": ms})
    append_jsonl(builds["mnn-cpu"] / REFERENCE_FILE, {"latency_ms": 0.40})
    for b, ms in (("ort-cpu", 0.65), ("litert-cpu", 0.3)):
        append_jsonl(run / REFERENCE_FILE, {"latency_ms": ms, "set": f"truth-{b}"})
    monkeypatch.setattr(nnmeter.predictors, "load_predictor",
                        lambda b, device=None: types.SimpleNamespace(dataset_dir=builds[b]))
    got = bs._run_speed(run / "truth.jsonl", ("ort-cpu", "mnn-cpu", "litert-cpu"), None)
    assert got["ort-cpu"] == pytest.approx(0.65 / 0.52)
    assert got["mnn-cpu"] is None  # the run never probed it
    assert got["litert-cpu"] is None  # its build recorded no probe


def test_zoo_rows_refuses_a_device_without_a_build(tmp_path):
    """The zoo rows extend a device's own build; with none (an empty data folder) the
    script says so in one line and measures nothing."""
    import os

    env = {**os.environ, "NNMETER_DATA": str(tmp_path)}
    out = subprocess.run([sys.executable, str(ROOT / "experiments" / "zoo_rows.py"),
                          "--backend", "ort-cpu"], capture_output=True, text=True,
                         cwd=ROOT, timeout=120, env=env)
    assert out.returncode != 0
    assert "holds no build of ort-cpu" in out.stderr and "nnmeter build -b ort-cpu" in out.stderr
    assert not any(tmp_path.rglob("*.jsonl"))


def test_in_model_size_scores_the_spread_apart_from_the_level(capsys):
    """in_model_size.py: the level (median predicted/measured) is taken out before the
    spread and the share within ±10 % at that level; a device or backend without
    development sets, or an unknown dataset, is a one-line error."""
    sys.path.insert(0, str(ROOT / "experiments"))
    import in_model_size as ims

    true = np.array([1.0, 2.0, 4.0, 8.0])
    s = ims.score(true * np.array([1.3, 1.3, 1.3, 1.3]), true)
    assert s["acc10"] == 0.0 and s["acc10_at_level"] == 1.0 and s["spread"] < 1e-12
    s = ims.score(true * np.array([1.0, 1.0, 1.5, 1.0]), true)
    assert s["level"] == pytest.approx(1.0) and s["acc10"] == 0.75
    assert s["spread"] == pytest.approx(np.log(1.5) / 2)
    with pytest.raises(SystemExit, match="no development sets for ort-cpu on no-such"):
        ims.development_seeds("no-such-device", "ort-cpu")
    with pytest.raises(SystemExit):
        ims.main(["--backend", "ort-cpu", "--device", "xeon-f6m167-amx-2c",
                  "--datasets", "ort-cpu@no-such-dataset"])
    assert "no dataset 'ort-cpu@no-such-dataset'" in capsys.readouterr().err


def test_memory_contention_refuses_negative_lengths():
    out = subprocess.run([sys.executable, str(ROOT / "experiments" / "memory_contention.py"),
                          "--minutes", "-1", "--out", "/tmp/never"], capture_output=True,
                         text=True, cwd=ROOT, timeout=120)
    assert out.returncode == 2 and "--minutes and --set must be >= 0" in out.stderr


@pytest.mark.integration
def test_memory_contention_writes_its_rows_and_report(tmp_path):
    stem = tmp_path / "mc"
    out = subprocess.run([sys.executable, str(ROOT / "experiments" / "memory_contention.py"),
                          "--minutes", "0.05", "--set", "1", "--max-gflops", "0.5",
                          "--out", str(stem)], capture_output=True, text=True, cwd=ROOT,
                         timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    rows = [json.loads(x) for x in (tmp_path / "mc.jsonl").read_text().splitlines()]
    ab = [r for r in rows if r["part"] == "ab"]
    # one variant, two passes, the gate off and on
    assert len(ab) == 4 and {r["memory_gate"] for r in ab} == {False, True}
    assert all(r["ok"] and r["latency_ms"] > 0 for r in ab)
    assert any(r["part"] == "timeline" and r["worker_probe_ratio"] >= 1.0 for r in rows)
    report = (tmp_path / "mc.txt").read_text()
    assert "memory gate off: 1 models" in report and "memory gate on : 1 models" in report


def _script(name):
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, ROOT / "experiments" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_block_context_cuts_a_model_into_its_named_blocks():
    from nnmeter import zoo

    blocks = _script("block_context").blocks_of(zoo.get_variant("resnet18").build())
    # no stage of ResNet18 holds over a quarter of its nodes: cut at the first name
    assert list(blocks) == ["conv1", "maxpool", "layer1", "layer2", "layer3", "layer4",
                            "avgpool", "classifier"]
    every = [n for nodes in blocks.values() for n in nodes]
    assert len(every) == len(set(every))  # each node in one block
    g = zoo.get_variant("mobilenetv3").build()
    blocks = _script("block_context").blocks_of(g)
    # MobileNetV3 keeps most nodes under "features": cut one level deeper
    assert "features" not in blocks and any(k.startswith("features.") for k in blocks)
    assert sum(map(len, blocks.values())) == len(g.topological_order()) - 1  # no input


def test_block_context_refuses_an_unknown_model():
    out = subprocess.run([sys.executable, str(ROOT / "experiments" / "block_context.py"),
                          "--backend", "ort-cpu", "--models", "nope-s1-i0"],
                         capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert out.returncode == 2 and "--models" in out.stderr and "nope-s1-i0" in out.stderr

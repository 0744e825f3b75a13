"""`nnmeter predict`, `build` and `select-backend` through the CLI entry point."""

from __future__ import annotations

import json
import pathlib

import pytest

from nnmeter import cli
from nnmeter.backends.base import DeviceInfo, Measurement
from nnmeter.builder import build_predictor
from nnmeter.fusion.rules import FusionRules

REPO = pathlib.Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "mobilenetv2.json"
RULES = FusionRules.from_decisions("ort-cpu", pairs={("conv", "bn"): True, ("bn", "relu"): True,
                                                    ("dwconv", "bn"): True})


class _Fake:
    """A stand-in profiler of the runtime a backend runs (its device facts matter)."""

    def __init__(self, runtime):
        self.device = DeviceInfo(cpu_model="fake cpu", cores=2, runtime=runtime,
                                 runtime_version="1", settings={"threads": 1})

    def measure(self, graph, on_error="record", **protocol):
        c = graph.cost()
        ms = 0.01 + 2e-8 * c.flops + 1e-7 * c.memory_bytes
        return Measurement(latency_ms=ms, median_ms=ms, min_ms=ms, std_ms=0.0, spread=0.0,
                           rounds=1, runs=1, device=self.device)


@pytest.fixture()
def fake_env(tmp_path, monkeypatch):
    prior = {"conv-bn": [{"h": h, "w": h, "cin": c, "cout": 2 * c, "kernel": k, "stride": 1,
                          "groups": 1, "pads": None}
                         for h, c in ((56, 16), (28, 32), (14, 64), (7, 160)) for k in (1, 3)],
             "dwconv-bn": [{"h": h, "w": h, "cin": c, "kernel": 3, "stride": s, "pads": None}
                           for h, c in ((112, 32), (56, 96), (28, 144), (14, 384)) for s in (1, 2)]}
    for backend, runtime in (("ort-cpu", "onnxruntime"), ("mnn-cpu", "mnn")):
        build_predictor(backend, dataset=backend, budget_minutes=5, root=tmp_path, profiler=_Fake(runtime),
                        rules=RULES,
                        prior_configs=prior, progress=False, train=False,
                        max_samples_per_type=30, rounds=1, regressor_params={"n_estimators": 5})
        RULES.to_json(tmp_path / f"{backend}.json")
    monkeypatch.setenv("NNMETER_DATA", str(tmp_path))
    monkeypatch.setenv("NNMETER_FUSION_RULES_DIR", str(tmp_path))
    monkeypatch.setenv("NNMETER_CACHE", str(tmp_path / "cache"))
    return tmp_path


def test_predict_json_on_example(fake_env, capsys):
    assert cli.main(["predict", str(EXAMPLE), "--backend", "ort-cpu", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["total_ms"] > 0 and out["backend_id"] == "ort-cpu"
    # every kernel has a time, or says which kernel ORT runs it inside
    assert all(r["predicted_ms"] > 0 or r["estimated_by"].startswith("absorbed:")
               for r in out["rows"])
    assert any(r["estimated_by"] == "absorbed:conv-bn" and r["type"] == "relu6"
               for r in out["rows"])  # these rules leave conv -> relu6 split
    assert {"conv-bn", "dwconv-bn"} <= {r["type"] for r in out["rows"]}
    assert out["uncovered"]  # relu6, add, fc... have no data here: listed, not zero
    # every composition term by name, in order, and the total adds up exactly
    names = [t["name"] for t in out["terms"]]
    assert names[0] == "overhead" and "absorbed" in names
    assert out["total_ms"] == sum(r["predicted_ms"] for r in out["rows"]) + \
        sum(t["ms"] for t in out["terms"])
    assert all("absorbed" in r["terms"] for r in out["rows"]
               if r["estimated_by"].startswith("absorbed:"))


def test_predict_table(fake_env, capsys):
    assert cli.main(["predict", str(EXAMPLE), "--backend", "ort-cpu"]) == 0
    text = capsys.readouterr().out
    assert "predicted total:" in text and "conv-bn" in text


def test_predict_unknown_backend_data_is_a_clean_error(fake_env, capsys):
    assert cli.main(["predict", str(EXAMPLE), "--backend", "openvino-cpu"]) == 2
    assert "nnmeter build" in capsys.readouterr().err


def test_select_backend_ranks(fake_env, capsys):
    assert cli.main(["select-backend", str(EXAMPLE), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert {r["backend_id"] for r in out["ranking"]} == {"ort-cpu", "mnn-cpu"}
    ms = [r["predicted_ms"] for r in out["ranking"]]
    assert ms == sorted(ms) and out["predicted_best"] == out["ranking"][0]["backend_id"]
    assert all("interval_ms" in r and "device" in r for r in out["ranking"])
    best = ms[0]
    assert out["near_ties"] == [r["backend_id"] for r in out["ranking"][1:]
                                if r["predicted_ms"] <= best * (1 + out["near_tie_tolerance"])]


def test_select_backend_measure_scores_the_pick_and_its_regret(fake_env, capsys, monkeypatch):
    from nnmeter.commands import predict as cmd

    def fake_measure(args, graph, backend_id):  # the predicted-slower backend is faster
        ms = {"ort-cpu": 10.0, "mnn-cpu": 10.0}
        assert cli.main(["select-backend", str(EXAMPLE), "--json"]) == 0
        ranking = json.loads(capsys.readouterr().out)["ranking"]
        ms[ranking[0]["backend_id"]] = 12.0
        return Measurement(latency_ms=ms[backend_id], median_ms=1, min_ms=1, std_ms=0,
                           spread=0.0, rounds=1, runs=1, device=None), "file"
    monkeypatch.setattr(cmd, "_measure", fake_measure)
    assert cli.main(["select-backend", str(EXAMPLE), "--measure", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["pick_right"] is False and out["regret"] == pytest.approx(0.2)
    assert out["within_5_percent"] is False and out["measured_best"] != out["predicted_best"]


def test_predict_measure_says_when_the_machine_runs_slower_than_its_build(
        fake_env, capsys, monkeypatch):
    """On the predictor's own device, ``--measure`` measures the speed reference too and
    names how much slower than during the build this machine runs now."""
    import nnmeter.backends as backends
    from nnmeter.commands import predict as cmd
    from nnmeter.devices.reference import REFERENCE_FILE
    from nnmeter.predictors.dataset import append_jsonl, kernel_dataset_dir

    d = kernel_dataset_dir("ort-cpu", fake_env)
    for ms in (0.50, 0.52):
        append_jsonl(d / REFERENCE_FILE, {"timestamp": "t", "phase": "start", "latency_ms": ms})
    dev = _Fake("onnxruntime").device

    def timed(ms):
        return Measurement(latency_ms=ms, median_ms=ms, min_ms=ms, std_ms=0.0, spread=0.0,
                           rounds=1, runs=1, device=dev)

    monkeypatch.setattr(cmd, "_measure", lambda args, graph, b: (timed(5.0), "the file"))
    seen = []
    monkeypatch.setattr(backends, "measure",
                        lambda graph, b, **kw: seen.append(graph.name) or timed(0.65))
    assert cli.main(["predict", str(EXAMPLE), "-b", "ort-cpu", "--measure", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert seen == ["speed-reference"]
    speed = out["speed_reference"]
    assert speed["build_ms"] == pytest.approx(0.51) and speed["ratio"] == pytest.approx(0.65 / 0.51)
    assert any("slower" in w and "this predictor's build" in w for w in out["warnings"])
    monkeypatch.setattr(backends, "measure", lambda graph, b, **kw: timed(0.52))
    assert cli.main(["predict", str(EXAMPLE), "-b", "ort-cpu", "--measure"]) == 0
    captured = capsys.readouterr()
    assert "speed reference: 0.52 ms now, 0.51 ms while the predictor was built (1.02x)" \
        in captured.out and "this predictor's build" not in captured.err


def test_select_backend_probe_speed_scales_each_backend_by_its_build(
        fake_env, capsys, monkeypatch):
    """``--probe-speed`` measures the speed reference once per backend and scales that
    backend's prediction by now over its build's probes; a backend whose build recorded
    none is left as predicted and named."""
    import nnmeter.backends as backends
    from nnmeter.devices.reference import REFERENCE_FILE
    from nnmeter.predictors.dataset import append_jsonl, kernel_dataset_dir
    from nnmeter.predictors.model import LatencyPredictor

    assert cli.main(["select-backend", str(EXAMPLE), "--json"]) == 0
    plain = {r["backend_id"]: r["predicted_ms"]
             for r in json.loads(capsys.readouterr().out)["ranking"]}
    append_jsonl(kernel_dataset_dir("ort-cpu", fake_env) / REFERENCE_FILE,
                 {"timestamp": "t", "phase": "start", "latency_ms": 0.5})
    dev = _Fake("onnxruntime").device
    seen = []

    def timed(graph, b, **kw):
        seen.append((graph.name, b))
        return Measurement(latency_ms=0.6, median_ms=0.6, min_ms=0.6, std_ms=0.0,
                           spread=0.0, rounds=1, runs=1, device=dev)
    monkeypatch.setattr(backends, "measure", timed)
    # another device's predictor is never scaled by this machine's speed
    assert cli.main(["select-backend", str(EXAMPLE), "--probe-speed", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)["ranking"]
    assert seen == [] and all(r["speed_ratio"] is None and "not this machine's" in
                              r["speed_reference"]["why"] for r in out)
    # the fake data as this machine's own
    monkeypatch.setattr(LatencyPredictor, "check_device", lambda self: (False, ()))
    assert cli.main(["select-backend", str(EXAMPLE), "--probe-speed", "--json"]) == 0
    out = {r["backend_id"]: r for r in json.loads(capsys.readouterr().out)["ranking"]}
    assert seen == [("speed-reference", "ort-cpu")]  # mnn-cpu's build has no probe
    assert out["ort-cpu"]["speed_ratio"] == pytest.approx(1.2)
    assert out["ort-cpu"]["predicted_ms"] == pytest.approx(1.2 * plain["ort-cpu"])
    assert out["ort-cpu"]["speed_reference"]["build_ms"] == pytest.approx(0.5)
    assert out["mnn-cpu"]["speed_ratio"] is None
    assert out["mnn-cpu"]["predicted_ms"] == pytest.approx(plain["mnn-cpu"])
    assert "no speed-reference probe" in out["mnn-cpu"]["speed_reference"]["why"]
    assert cli.main(["select-backend", str(EXAMPLE), "--probe-speed"]) == 0
    captured = capsys.readouterr()
    assert "ort-cpu: speed reference 0.6 ms now, 0.5 ms in its build: predictions x 1.200" \
        in captured.out
    assert "mnn-cpu: not scaled for the host's speed" in captured.err


@pytest.mark.skipif(not list((REPO / "datasets" / "kernels").glob("ort-cpu@*")),
                    reason="the shipped ort-cpu kernel data is not in this checkout")
def test_shipped_ort_predictor_on_example(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("NNMETER_CACHE", str(tmp_path / "cache"))
    assert cli.main(["predict", str(EXAMPLE), "--backend", "ort-cpu", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert 0.5 < out["total_ms"] < 500 and all(r["predicted_ms"] > 0 for r in out["rows"])


def test_build_cli_with_fake_profiler(tmp_path, monkeypatch, capsys):
    import nnmeter.backends
    import nnmeter.builder

    prior = {"relu": [{"h": h, "w": h, "cin": c} for h, c in ((56, 16), (28, 32), (14, 64))]}
    monkeypatch.setattr(nnmeter.builder, "kernel_prior_from_zoo", lambda rules, **kw: prior)
    monkeypatch.setattr(nnmeter.backends, "Profiler", lambda backend_id, **kw: _FakeCtx())
    RULES.to_json(tmp_path / "ort-cpu.json")
    monkeypatch.setenv("NNMETER_DATA", str(tmp_path))
    monkeypatch.setenv("NNMETER_FUSION_RULES_DIR", str(tmp_path))
    monkeypatch.setenv("NNMETER_CACHE", str(tmp_path / "cache"))
    # relu only: its data has no blocked kernel, so the layout calibration (which needs a
    # real runtime) skips, as the fake cannot run it
    assert cli.main(["build", "--backend", "ort-cpu", "--budget-minutes", "0.05",
                     "--rounds", "1", "--kernels", "relu", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["types"]["relu"]["samples"] > 0 and out["measurements"] > 0
    from nnmeter.devices.cpu import local_cpu

    # a build writes this machine's own dataset, <backend>@<device name>
    mine = f"ort-cpu@{local_cpu().short_name()}"
    assert (tmp_path / "datasets" / "kernels" / mine / "relu.jsonl").exists()


class _FakeCtx(_Fake):
    def __init__(self, runtime="onnxruntime"):
        super().__init__(runtime)

    def close(self):
        """Nothing to free: no worker process."""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def test_measure_runs_the_users_own_file_when_the_backend_takes_its_format(tmp_path):
    import argparse

    from nnmeter.commands.predict import _measured_source

    onnx_file = tmp_path / "m.onnx"
    onnx_file.write_bytes(b"x")
    graph = object()
    args = argparse.Namespace(model=str(onnx_file), input_shape=[])
    assert _measured_source(args, graph, "ort-cpu") == (onnx_file, "the model file")
    # LiteRT takes .tflite: the ONNX model is measured through nnmeter's export
    model, what = _measured_source(args, graph, "litert-cpu")
    assert model is graph and "export" in what
    # --input-shape changes the model: the file as written is not what was predicted
    args = argparse.Namespace(model=str(onnx_file), input_shape=["1,3,64,64"])
    assert _measured_source(args, graph, "ort-cpu")[0] is graph
    args = argparse.Namespace(model=str(tmp_path / "g.json"), input_shape=[])
    assert _measured_source(args, graph, "ort-cpu")[0] is graph


def test_json_errors_reach_stdout_as_json_and_a_list_is_not_a_graph(tmp_path, capsys):
    bad = tmp_path / "list.json"
    bad.write_text("[1, 2]")
    assert cli.main(["predict", str(bad), "--backend", "ort-cpu", "--json"]) == 2
    captured = capsys.readouterr()
    out = json.loads(captured.out)
    assert out["kind"] == "ModelLoadError" and "list.json" in out["error"]
    assert "not a graph object" in captured.err


def test_a_closed_pipe_ends_quietly(monkeypatch):
    import nnmeter.cli as cli_mod

    def closed(args):
        raise BrokenPipeError(32, "Broken pipe")

    quieted = []
    monkeypatch.setattr(cli_mod, "_quiet_stdout", lambda: quieted.append(True))
    parser = cli_mod.build_parser()
    args = parser.parse_args(["devices", "--json"])
    monkeypatch.setattr(cli_mod, "build_parser", lambda: parser)
    monkeypatch.setattr(parser, "parse_args", lambda argv=None: args)
    args.func = closed
    assert cli_mod.main(["devices", "--json"]) == 0 and quieted == [True]

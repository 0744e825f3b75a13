"""The Ray runner on a real local cluster (a head and two worker nodes on this machine,
one offering ort-cpu and one litert-cpu): builds end to end, one killed actor, the
model-level measurement path and the errors a user meets."""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest

from nnmeter.builder import build_predictor
from nnmeter.farm import RunnerSpec, use_runner
from nnmeter.predictors.dataset import kernel_dataset_dir

pytest.importorskip("ray", reason='Ray is not installed: pip install -e ".[farm]"')
pytest.importorskip("onnxruntime", reason="onnxruntime is not installed")

def test_two_devices_build_through_ray_as_they_do_locally(ray_cluster, local_build, small,
                                                           small_prior, rows_of, keys_of,
                                                           tmp_path):
    spec = RunnerSpec("ray", address=ray_cluster)
    with use_runner(spec):
        build_predictor("ort-cpu", dataset="ort-cpu", root=tmp_path / "ray", **small)
        build_predictor("litert-cpu", dataset="litert-cpu", root=tmp_path / "ray",
                        **{**small, "prior_configs": {"relu": small_prior["relu"]}})
    want, got = local_build, rows_of(tmp_path / "ray", "ort-cpu", "ort-cpu")
    assert keys_of(got) == keys_of(want) and set(got) == {"conv-bn-relu", "relu"}
    fps = {r["fingerprint_id"] for rs in got.values() for r in rs}
    assert fps == {r["fingerprint_id"] for rs in want.values() for r in rs}
    assert all(r["ok"] and r["latency_ms"] > 0 for rs in got.values() for r in rs)
    lite = rows_of(tmp_path / "ray", "litert-cpu", "litert-cpu")
    assert lite["relu"] and all(r["ok"] for r in lite["relu"])
    assert {r["fingerprint_id"] for r in lite["relu"]}.isdisjoint(fps)  # another device


def test_a_killed_actor_loses_no_row_and_duplicates_none(ray_cluster, local_build, small,
                                                          rows_of, keys_of, tmp_path,
                                                          actor_pids):
    spec = RunnerSpec("ray", address=ray_cluster)
    ds_dir = kernel_dataset_dir("ort-cpu", tmp_path)
    killed: list[int] = []

    def kill_after_rows(n: int) -> None:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline:
            path = ds_dir / "conv-bn-relu.jsonl"
            if path.exists() and len(path.read_text().splitlines()) >= n:
                for pid in actor_pids():
                    os.kill(pid, signal.SIGKILL)
                    killed.append(pid)
                return
            time.sleep(0.05)

    killer = threading.Thread(target=kill_after_rows, args=(2,))
    killer.start()
    with use_runner(spec):
        build_predictor("ort-cpu", dataset="ort-cpu", root=tmp_path, **small)
    killer.join()
    assert killed, "the actor was never killed"
    rows = rows_of(tmp_path, "ort-cpu", "ort-cpu")
    keys = keys_of(rows)
    assert len(keys) == len(set(keys)) and keys == keys_of(local_build)
    # the job that was running when its actor died ran again on the restarted actor
    assert all(r["ok"] for rs in rows.values() for r in rs)


def test_measure_and_profile_through_ray(ray_cluster, tmp_path):
    from nnmeter.backends import Profiler, measure
    from nnmeter.farm.ray_runner import RayProfiler, farm_devices
    from nnmeter.ir import GraphBuilder

    b = GraphBuilder("m", (1, 16, 28, 28))
    g = b.build([b.relu(b.bn(b.conv(b.x, 32)))])
    with use_runner(RunnerSpec("ray", address=ray_cluster)):
        m = measure(g, "ort-cpu", rounds=2, round_ms=5.0)
        with Profiler("ort-cpu") as prof:
            assert isinstance(prof, RayProfiler)
            nodes = prof.profile(g, runs=2)
        rows = farm_devices(ray_cluster)
    assert m.ok and m.latency_ms > 0 and m.extra["runner"] == "ray"
    assert m.extra["farm_overhead_ms"] >= 0 and m.device.runtime == "onnxruntime"
    assert any(n.op_type.endswith("Conv") for n in nodes)
    assert {r["backend_id"] for r in rows} == {"ort-cpu", "litert-cpu"}


def test_a_backend_no_node_offers_is_refused_with_the_fix(ray_cluster):
    from nnmeter.backends import measure
    from nnmeter.errors import BackendUnavailableError

    with use_runner(RunnerSpec("ray", address=ray_cluster)), \
            pytest.raises(BackendUnavailableError, match="nnmeter-openvino-cpu"):
        measure("x.onnx", "openvino-cpu")


def test_farm_commands_list_the_cluster_and_a_node_s_resources(ray_cluster, capsys):
    import json

    from nnmeter import cli

    assert cli.main(["farm", "resources", "--backends", "ort-cpu,litert-cpu"]) == 0
    assert json.loads(capsys.readouterr().out) == {"nnmeter-ort-cpu": 1.0,
                                                   "nnmeter-litert-cpu": 1.0}
    assert cli.main(["farm", "devices", "--address", ray_cluster, "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert sorted(r["backend_id"] for r in rows) == ["litert-cpu", "ort-cpu"]
    assert cli.main(["farm", "resources", "--backends", "nope"]) == 2
    assert "known backends" in capsys.readouterr().err

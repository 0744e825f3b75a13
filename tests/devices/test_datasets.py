"""Which device's data a prediction or a build uses: this machine's, a named one, or the
nearest; and datasets that refuse another device's rows."""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import pytest

import nnmeter.devices.datasets as dsets
from nnmeter.backends.base import DeviceInfo
from nnmeter.devices.cpu import read_cpu
from nnmeter.errors import DatasetError, FingerprintMismatchError, PredictorError
from nnmeter.predictors.dataset import KernelDataset

SAMPLES = Path(__file__).parent / "samples"
SETTINGS = {"threads": 1, "inter_op_threads": 1}


def device_of(sample: str, runtime_version: str = "1.32.0") -> DeviceInfo:
    """The ort-cpu DeviceInfo a machine of a recorded /proc/cpuinfo would have."""
    cpu = read_cpu((SAMPLES / f"{sample}.cpuinfo").read_text(), cache_root="/nonexistent",
                   cores=2)
    return DeviceInfo(cpu.model_name, cpu.cores, "onnxruntime", runtime_version, SETTINGS,
                      cpu.arch, vendor=cpu.vendor, family=cpu.family, model=cpu.model,
                      stepping=cpu.stepping, isa=cpu.isa, caches=dict(cpu.caches),
                      microarch=cpu.microarch(), name=cpu.short_name())


def make_dataset(root: Path, device: DeviceInfo, backend: str = "ort-cpu",
                 rows: int = 3) -> Path:
    d = root / "datasets" / "kernels" / f"{backend}@{device.name}"
    ds = KernelDataset(d, backend)
    ds.check_device(device.as_dict())
    for i in range(rows):
        ds.append("relu", {"kernel_type": "relu", "config": {"h": 8, "w": 8, "cin": 8 + i},
                           "latency_ms": 0.01, "ok": True,
                           "fingerprint_id": device.fingerprint_id})
    return d


@pytest.fixture
def here(monkeypatch):
    """Make this machine look like a recorded one: ``here("epyc-zen3-avx2")``."""
    def set_to(sample: str) -> DeviceInfo:
        dev = device_of(sample)
        monkeypatch.setattr(dsets, "local_device", lambda backend_id: dev)
        return dev
    return set_to


def test_this_machine_uses_its_own_dataset(tmp_path, here):
    zen4 = here("epyc-zen4-avx512")
    make_dataset(tmp_path, zen4)
    make_dataset(tmp_path, device_of("epyc-zen3-avx2"))
    res = dsets.resolve("ort-cpu", root=tmp_path)
    assert res.how == "this machine" and not res.mismatch
    assert res.dataset.dataset_id == f"ort-cpu@{zen4.name}"


def test_an_avx2_machine_falls_back_to_the_nearest_device_and_says_what_differs(tmp_path,
                                                                                here):
    make_dataset(tmp_path, device_of("epyc-zen4-avx512"))
    make_dataset(tmp_path, device_of("graviton2"))
    rome = here("epyc-rome-avx2")
    res = dsets.resolve("ort-cpu", root=tmp_path)
    assert res.how == "nearest" and res.mismatch
    assert res.dataset.device_name == "epyc-zen4-avx512-2c"
    text = " ".join(res.differences)
    assert "data has avx512f" in text and "family" in res.differences
    assert res.as_dict()["this_machine"] == rome.name
    # an AVX2 dataset is nearer to an AVX2 machine than an AVX-512 one
    make_dataset(tmp_path, device_of("epyc-zen3-avx2"))
    assert dsets.resolve("ort-cpu", root=tmp_path).dataset.device_name == "epyc-zen3-avx2-2c"


def test_a_named_device_is_used_wherever_this_runs(tmp_path, here):
    here("epyc-zen4-avx512")
    make_dataset(tmp_path, device_of("epyc-zen4-avx512"))
    arm = device_of("graviton3")
    make_dataset(tmp_path, arm)
    res = dsets.resolve("ort-cpu", arm.name, root=tmp_path)
    assert res.how == "requested" and res.dataset.device_name == arm.name and res.mismatch
    # by dataset id and by fingerprint prefix too
    assert dsets.resolve("ort-cpu", f"ort-cpu@{arm.name}", tmp_path).dataset.device_name == \
        arm.name
    assert dsets.resolve("ort-cpu", arm.fingerprint_id[:8], tmp_path).dataset.device_name == \
        arm.name


def test_an_unknown_device_lists_the_known_ones(tmp_path, here):
    here("epyc-zen4-avx512")
    make_dataset(tmp_path, device_of("epyc-zen4-avx512"))
    with pytest.raises(DatasetError) as err:
        dsets.resolve("ort-cpu", "pixel-7", tmp_path)
    assert "pixel-7" in str(err.value) and "epyc-zen4-avx512-2c" in str(err.value)


def test_no_dataset_at_all_says_how_to_build(tmp_path, here):
    here("epyc-zen4-avx512")
    with pytest.raises(PredictorError, match="nnmeter build --backend ort-cpu"):
        dsets.resolve("ort-cpu", root=tmp_path)


def test_a_malformed_device_record_is_a_clear_error(tmp_path, here):
    here("epyc-zen4-avx512")
    d = make_dataset(tmp_path, device_of("epyc-zen4-avx512"))
    (d / "dataset.json").write_text(json.dumps({"backend_id": "ort-cpu", "device": "abc"}))
    with pytest.raises(DatasetError, match="dataset.json.*'device' must be a JSON object"):
        dsets.device_datasets("ort-cpu", tmp_path)
    (d / "dataset.json").write_text("{not json")
    with pytest.raises(DatasetError, match="not valid JSON"):
        dsets.device_datasets("ort-cpu", tmp_path)


def test_default_dataset_of_a_build(tmp_path, here):
    zen3 = here("epyc-zen3-avx2")
    assert dsets.default_dataset_id("ort-cpu", tmp_path) == f"ort-cpu@{zen3.name}"
    # this machine's dataset under another name is found by fingerprint
    d = make_dataset(tmp_path, zen3)
    d.rename(d.with_name("ort-cpu@mine"))
    assert dsets.default_dataset_id("ort-cpu", tmp_path) == "ort-cpu@mine"
    # a name taken by another device (another runtime version) gets the id appended
    shutil.rmtree(tmp_path / "datasets" / "kernels" / "ort-cpu@mine")
    make_dataset(tmp_path, device_of("epyc-zen3-avx2", runtime_version="1.20.0"))
    got = dsets.default_dataset_id("ort-cpu", tmp_path)
    assert got.startswith(f"ort-cpu@{zen3.name}-") and got.endswith(zen3.fingerprint_id[:6])


def test_a_dataset_refuses_rows_of_another_device_naming_both(tmp_path):
    zen4, zen3 = device_of("epyc-zen4-avx512"), device_of("epyc-zen3-avx2")
    d = make_dataset(tmp_path, zen4)
    ds = KernelDataset(d, "ort-cpu")
    with pytest.raises(FingerprintMismatchError) as err:
        ds.check_device(zen3.as_dict())
    msg = str(err.value)
    assert zen4.name in msg and zen3.name in msg and "isa" in msg
    assert "nnmeter build --backend ort-cpu" in msg and "--transfer-from" in msg
    assert ds.fingerprint_ids == {zen4.fingerprint_id}


def test_a_round1_record_of_the_same_device_is_adopted_not_refused(tmp_path):
    zen4 = device_of("epyc-zen4-avx512")
    old = DeviceInfo(zen4.cpu_model, zen4.cores, zen4.runtime, zen4.runtime_version,
                     zen4.settings, zen4.arch)
    assert not old.has_cpu_facts and old.fingerprint_id != zen4.fingerprint_id
    d = tmp_path / "ort-cpu"
    ds = KernelDataset(d, "ort-cpu")
    d.mkdir()
    (d / "dataset.json").write_text(json.dumps(
        {"backend_id": "ort-cpu", "fingerprint_id": old.fingerprint_id,
         "device": {**old.as_dict(), "isa": list(zen4.isa)}}))
    ds.check_device(zen4.as_dict())
    assert ds.fingerprint_ids == {zen4.fingerprint_id, old.fingerprint_id}
    assert ds.meta()["device"]["name"] == zen4.name
    # but an AVX2 machine of the same name is still refused
    with pytest.raises(FingerprintMismatchError):
        ds.check_device(dataclasses.replace(zen4, isa=("avx2", "fma")).as_dict())


def test_distance_orders_devices_by_what_moves_kernel_times():
    zen4 = device_of("epyc-zen4-avx512").as_dict()
    zen3 = device_of("epyc-zen3-avx2").as_dict()
    rome = device_of("epyc-rome-avx2").as_dict()
    arm = device_of("graviton2").as_dict()
    assert dsets.distance(zen4, zen4) == 0
    assert dsets.distance(rome, zen3) < dsets.distance(rome, zen4) < dsets.distance(rome, arm)


def test_model_sets_live_per_device(tmp_path):
    p = dsets.model_set_path("ort-cpu-t2", 1000, "epyc-zen4-avx512-2c", tmp_path)
    assert p == tmp_path / "datasets/models/ort-cpu-t2@epyc-zen4-avx512-2c/seed1000.jsonl"

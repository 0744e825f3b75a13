"""OpenVINO with oneDNN limited to an ISA is another device: the cap is in its settings
(so in its fingerprint), and a cap without bf16 compiles in f32."""

from __future__ import annotations

import pytest

from nnmeter.backends import openvino


@pytest.mark.parametrize("cap, no_bf16", [("AVX2", True), ("avx2_vnni", True), ("SSE41", True),
                                           ("AVX512_CORE_BF16", False),
                                           ("AVX512_CORE_AMX", False), ("", False)])
def test_which_caps_lose_bf16(monkeypatch, cap, no_bf16):
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", cap)
    assert openvino._isa_cap_without_bf16() is no_bf16


def test_the_cap_is_part_of_the_settings_and_forces_f32(monkeypatch):
    from nnmeter.backends import get_backend

    b = get_backend("openvino-cpu")
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX2")
    cfg = b._config()
    assert cfg["INFERENCE_PRECISION_HINT"] == "f32"
    monkeypatch.delenv("ONEDNN_MAX_CPU_ISA")
    assert "INFERENCE_PRECISION_HINT" not in b._config()


def test_the_f32_backend_is_another_id_held_to_f32_with_openvino_s_rules(monkeypatch):
    from nnmeter.backends import get_backend
    from nnmeter.fusion.rules import load_rules, rules_path

    monkeypatch.delenv("ONEDNN_MAX_CPU_ISA", raising=False)
    b = get_backend("openvino-cpu-f32-t2")
    assert (b.id, b.threads, b.runtime) == ("openvino-cpu-f32-t2", 2, "openvino")
    assert b._config()["INFERENCE_PRECISION_HINT"] == "f32"
    assert b._config(perf_count=True)["PERF_COUNT"] == "YES"
    if rules_path("openvino-cpu").exists():
        assert load_rules("openvino-cpu-f32") == load_rules("openvino-cpu")

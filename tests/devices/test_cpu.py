"""CpuInfo from recorded /proc/cpuinfo blocks and sysfs cache trees: identity, ISA tier,
names, strict round trip."""

from __future__ import annotations

import json
import os
import pickle
import re
from pathlib import Path

import pytest

from nnmeter.devices import DISPATCH_FLAGS, CpuInfo, local_cpu, read_cpu
from nnmeter.devices.cpu import parse_cpuinfo
from nnmeter.errors import DeviceError, NNMeterError

SAMPLES = Path(__file__).parent / "samples"
NO_CACHES = "/nonexistent/nnmeter-test-cache"


def _sample(name: str, *, cores: int = 2, cache_root: str | os.PathLike = NO_CACHES,
            arch: str | None = None) -> CpuInfo:
    text = (SAMPLES / f"{name}.cpuinfo").read_text()
    return read_cpu(text, cache_root=cache_root, cores=cores, arch=arch)


# name, cores, vendor, family, model, stepping, arch, isa, microarch, tier, floats, short
EXPECTED = [
    ("epyc-zen4-avx512", 2, "AuthenticAMD", 25, 17, 1, "x86_64",
     ("sse4_2", "avx", "avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl", "avx512dq",
      "avx512_vnni", "avx512_bf16"),
     "zen4", "avx512", 16, "epyc-zen4-avx512-2c"),
    ("epyc-zen3-avx2", 2, "AuthenticAMD", 25, 1, 0, "x86_64",
     ("sse4_2", "avx", "avx2", "fma", "f16c"), "zen3", "avx2", 8, "epyc-zen3-avx2-2c"),
    ("epyc-rome-avx2", 2, "AuthenticAMD", 23, 49, 0, "x86_64",
     ("sse4_2", "avx", "avx2", "fma", "f16c"), "zen2", "avx2", 8, "epyc-zen2-avx2-2c"),
    ("xeon-spr-amx", 16, "GenuineIntel", 6, 143, 8, "x86_64",
     ("sse4_2", "avx", "avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl", "avx512dq",
      "avx512_vnni", "avx512_bf16", "avx512_fp16", "amx_tile", "amx_bf16", "amx_int8"),
     "sapphirerapids", "amx", 16, "xeon-8480-sapphirerapids-amx-16c"),
    # a KVM guest whose hypervisor reports a model number that names no AMX core (167)
    # and a bare "Intel(R) Xeon(R) Processor": the name falls back to family and model
    ("xeon-kvm-amx", 2, "GenuineIntel", 6, 167, 1, "x86_64",
     ("sse4_2", "avx", "avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl", "avx512dq",
      "avx512_vnni", "avx512_bf16", "avx512_fp16", "amx_tile", "amx_bf16", "amx_int8"),
     "", "amx", 16, "xeon-f6m167-amx-2c"),
    ("graviton2", 2, "ARM", None, 0xD0C, 1, "aarch64",
     ("neon", "asimd", "asimdhp", "asimddp"), "neoverse-n1", "dotprod", 4,
     "neoverse-n1-dotprod-2c"),
    ("graviton3", 4, "ARM", None, 0xD40, 1, "aarch64",
     ("neon", "asimd", "asimdhp", "asimddp", "sve", "i8mm", "bf16"), "neoverse-v1", "sve", 4,
     "neoverse-v1-sve-4c"),
]


@pytest.mark.parametrize(
    "name, cores, vendor, family, model, stepping, arch, isa, micro, tier, floats, short",
    EXPECTED, ids=[e[0] for e in EXPECTED])
def test_sample_identity(name, cores, vendor, family, model, stepping, arch, isa, micro, tier,
                         floats, short):
    cpu = _sample(name, cores=cores)
    assert (cpu.vendor, cpu.family, cpu.model, cpu.stepping) == (vendor, family, model,
                                                                 stepping)
    assert cpu.arch == arch  # inferred from the text, not from this x86 machine
    assert cpu.isa == isa
    assert cpu.microarch() == micro
    assert cpu.isa_tier() == tier
    assert cpu.vector_floats() == floats
    assert cpu.short_name() == short
    assert re.fullmatch(r"[a-z0-9-]+", cpu.short_name())
    assert cpu.cores == cores
    assert cpu.caches == {}


def test_model_names():
    assert _sample("epyc-zen3-avx2").model_name == "AMD EPYC 7B13"
    assert _sample("xeon-spr-amx").model_name == "Intel(R) Xeon(R) Platinum 8480+"
    # arm64 prints no "model name": the part number names the core
    assert _sample("graviton2").model_name == "Neoverse-N1"
    assert _sample("graviton3").model_name == "Neoverse-V1"


def test_isa_keeps_dispatch_order_and_only_dispatch_flags():
    cpu = _sample("xeon-spr-amx")
    assert list(cpu.isa) == [f for f in DISPATCH_FLAGS if f in cpu.isa]
    # avx_vnni (AVX2 VNNI) is another flag than avx512_vnni; sha_ni etc. are not kept
    assert "avx_vnni" not in cpu.isa and "sha_ni" not in cpu.isa


def test_dispatch_flags_match_the_predictors_copy():
    from nnmeter.predictors.facts import DISPATCH_FLAGS as FACTS_FLAGS

    assert DISPATCH_FLAGS == FACTS_FLAGS


def test_same_model_name_stem_different_isa_gets_different_identity():
    zen4, zen3 = _sample("epyc-zen4-avx512"), _sample("epyc-zen3-avx2")
    assert "epyc" in zen4.model_name.lower() and "epyc" in zen3.model_name.lower()
    assert zen4.short_name() != zen3.short_name()
    assert zen4.as_dict() != zen3.as_dict()
    assert zen4.as_dict()["isa"] != zen3.as_dict()["isa"]
    assert zen4 != zen3 and hash(zen4) != hash(zen3)


def test_caches_from_sysfs_tree_skip_instruction_cache():
    cpu = _sample("epyc-zen4-avx512", cache_root=SAMPLES / "cache-zen4")
    assert cpu.caches == {"L1d": 32 * 1024, "L2": 1024 * 1024, "L3": 32 * 1024 * 1024}


def _cache_tree(root: Path, entries) -> Path:
    for i, (level, kind, size) in enumerate(entries):
        d = root / f"index{i}"
        d.mkdir(parents=True)
        (d / "level").write_text(f"{level}\n")
        (d / "type").write_text(f"{kind}\n")
        (d / "size").write_text(f"{size}\n")
    return root


def test_cache_sizes_parse_k_and_m(tmp_path):
    root = _cache_tree(tmp_path / "cache", [(1, "Data", "48K"), (1, "Instruction", "32K"),
                                            (2, "Unified", "2048K"), (3, "Unified", "32M")])
    cpu = read_cpu("", cache_root=root, cores=1, arch="x86_64")
    assert cpu.caches == {"L1d": 48 * 1024, "L2": 2 * 1024 ** 2, "L3": 32 * 1024 ** 2}


def test_unreadable_cache_entries_are_skipped(tmp_path):
    root = _cache_tree(tmp_path / "cache", [(1, "Data", "32K"), (2, "Unified", "lots"),
                                            (3, "Unified", "16M")])
    (root / "index0" / "level").unlink()
    cpu = read_cpu("", cache_root=root, cores=1, arch="x86_64")
    assert cpu.caches == {"L3": 16 * 1024 ** 2}


def test_missing_cache_root_gives_no_caches(tmp_path):
    cpu = read_cpu("", cache_root=tmp_path / "absent", cores=1, arch="x86_64")
    assert cpu.caches == {}


@pytest.mark.parametrize("text", ["", "garbage\n\x00\xff:::\n: :\nmodel\t: not-a-number\n",
                                  "processor\t: 0\n\nprocessor\t: 1\n"])
def test_empty_or_garbage_cpuinfo_gives_empty_fields(text):
    cpu = read_cpu(text, cache_root=NO_CACHES, cores=2, arch="x86_64")
    assert (cpu.vendor, cpu.model_name, cpu.isa) == ("", "", ())
    assert (cpu.family, cpu.model, cpu.stepping) == (None, None, None)
    assert (cpu.microarch(), cpu.isa_tier(), cpu.vector_floats()) == ("", "", 0)
    # unknown parts are dropped, never written "unknown"
    assert cpu.short_name() == "x86-64-2c"


def test_unreadable_proc_cpuinfo_does_not_crash(monkeypatch):
    real_read_text = Path.read_text

    def read_text(self, *args, **kwargs):
        if str(self) == "/proc/cpuinfo":
            raise PermissionError(13, "Permission denied", str(self))
        return real_read_text(self, *args, **kwargs)

    monkeypatch.setattr(Path, "read_text", read_text)
    cpu = read_cpu(cache_root=NO_CACHES, cores=1)
    assert (cpu.vendor, cpu.model_name, cpu.isa) == ("", "", ())


def test_parse_cpuinfo_reads_only_the_first_processor_block():
    text = (SAMPLES / "epyc-zen3-avx2.cpuinfo").read_text()
    other = text.replace("AMD EPYC 7B13", "Other CPU").replace("processor\t: 0",
                                                                "processor\t: 1")
    raw = parse_cpuinfo(text + "\n" + other)
    assert raw["model name"] == "AMD EPYC 7B13"
    assert raw["cpu family"] == "25" and raw["model"] == "1" and raw["stepping"] == "0"
    assert "avx2" in raw["flags"].split()
    assert "cpu mhz" not in raw and "bogomips" not in raw


def test_parse_cpuinfo_arm_fields():
    raw = parse_cpuinfo((SAMPLES / "graviton3.cpuinfo").read_text())
    assert raw["cpu implementer"] == "0x41" and raw["cpu part"] == "0xd40"
    assert raw["cpu revision"] == "1" and raw["cpu variant"] == "0x1"
    assert "sve" in raw["features"].split()


def test_arm_unknown_implementer_and_part_keep_raw_values():
    cpu = read_cpu("processor\t: 0\nFeatures\t: fp asimd\nCPU implementer\t: 0x99\n"
                   "CPU part\t: 0x123\nCPU revision\t: 2\n", cache_root=NO_CACHES, cores=8)
    assert (cpu.vendor, cpu.model_name, cpu.model, cpu.stepping) == ("0x99", "arm-0x123",
                                                                     0x123, 2)
    assert cpu.microarch() == ""
    assert cpu.short_name() == "arm-0x123-neon-8c"


def test_arm_implementer_names():
    names = {"0x61": "Apple", "0x51": "Qualcomm", "0xc0": "Ampere", "0x48": "HiSilicon",
             "0x46": "Fujitsu", "0x4e": "NVIDIA"}
    for code, name in names.items():
        cpu = read_cpu(f"CPU implementer\t: {code}\nCPU part\t: 0x1\n", cache_root=NO_CACHES,
                       cores=1)
        assert cpu.vendor == name


def test_apple_m1_name_collapses_duplicate_microarch():
    cpu = read_cpu("processor\t: 0\nFeatures\t: fp asimd asimdhp asimddp\n"
                   "CPU implementer\t: 0x61\nCPU part\t: 0x023\n", cache_root=NO_CACHES,
                   cores=8)
    assert cpu.microarch() == "apple-m1"
    assert cpu.short_name() == "apple-m1-dotprod-8c"


def _x86(vendor, family, model, stepping=0, name="", isa=("sse4_2", "avx", "avx2", "fma"),
         cores=2):
    return CpuInfo(vendor=vendor, model_name=name, family=family, model=model,
                   stepping=stepping, arch="x86_64", isa=isa, caches={}, cores=cores)


@pytest.mark.parametrize("vendor, family, model, stepping, micro", [
    ("AuthenticAMD", 0x17, 0x01, 2, "zen"), ("AuthenticAMD", 0x17, 0x08, 2, "zen"),
    ("AuthenticAMD", 0x17, 0x31, 0, "zen2"), ("AuthenticAMD", 0x17, 0x71, 0, "zen2"),
    ("AuthenticAMD", 0x19, 0x01, 1, "zen3"), ("AuthenticAMD", 0x19, 0x11, 1, "zen4"),
    ("AuthenticAMD", 0x19, 0x21, 0, "zen3"), ("AuthenticAMD", 0x19, 0x50, 0, "zen3"),
    ("AuthenticAMD", 0x19, 0x61, 2, "zen4"), ("AuthenticAMD", 0x19, 0xA0, 1, "zen4"),
    ("AuthenticAMD", 0x19, 0x30, 0, ""), ("AuthenticAMD", 0x1A, 0x02, 0, "zen5"),
    ("GenuineIntel", 6, 0x3F, 2, "haswell"), ("GenuineIntel", 6, 0x4F, 1, "broadwell"),
    ("GenuineIntel", 6, 0x9E, 10, "skylake"), ("GenuineIntel", 6, 0x55, 4, "skylake-x"),
    ("GenuineIntel", 6, 0x55, 7, "cascadelake"), ("GenuineIntel", 6, 0x55, 11, "cascadelake"),
    ("GenuineIntel", 6, 0x6A, 6, "icelake-sp"), ("GenuineIntel", 6, 0x7E, 5, "icelake"),
    ("GenuineIntel", 6, 0x8F, 8, "sapphirerapids"), ("GenuineIntel", 6, 0xCF, 2,
                                                      "emeraldrapids"),
    ("GenuineIntel", 6, 0xAD, 1, "graniterapids"), ("GenuineIntel", 6, 0x97, 2, "alderlake"),
    ("GenuineIntel", 6, 0xB7, 1, "raptorlake"), ("GenuineIntel", 6, 0x01, 0, ""),
    ("GenuineIntel", 15, 0x06, 0, ""), ("HygonGenuine", 0x18, 0x01, 0, ""),
])
def test_x86_microarch_table(vendor, family, model, stepping, micro):
    assert _x86(vendor, family, model, stepping).microarch() == micro


@pytest.mark.parametrize("part, micro", [
    (0xD0C, "neoverse-n1"), (0xD40, "neoverse-v1"), (0xD49, "neoverse-n2"),
    (0xD4F, "neoverse-v2"), (0xD08, "cortex-a72"), (0xD0B, "cortex-a76"),
    (0xD05, "cortex-a55"), (0xD41, "cortex-a78"), (0xFFF, ""),
])
def test_arm_microarch_table(part, micro):
    cpu = CpuInfo("ARM", "", None, part, 0, "aarch64", ("neon", "asimd"), {}, 1)
    assert cpu.microarch() == micro


@pytest.mark.parametrize("isa, tier, floats", [
    (("sse4_2", "avx", "avx2", "fma", "avx512f", "amx_tile"), "amx", 16),
    (("sse4_2", "avx", "avx2", "fma", "avx512f"), "avx512", 16),
    (("sse4_2", "avx", "avx2", "fma"), "avx2", 8),
    (("sse4_2", "avx"), "avx", 4),
    (("sse4_2",), "sse", 4),
    (("neon", "asimd", "asimddp", "sve", "sve2"), "sve2", 4),
    (("neon", "asimd", "sve"), "sve", 4),
    (("neon", "asimd", "asimddp"), "dotprod", 4),
    (("neon",), "neon", 4),
    ((), "", 0),
])
def test_isa_tier_and_vector_floats(isa, tier, floats):
    cpu = CpuInfo("", "", None, None, None, "", isa, {}, 1)
    assert (cpu.isa_tier(), cpu.vector_floats()) == (tier, floats)


@pytest.mark.parametrize("vendor, name, family, model, short", [
    ("AuthenticAMD", "AMD Ryzen 9 7950X 16-Core Processor", 25, 0x61, "ryzen-zen4-avx2-2c"),
    ("AuthenticAMD", "AMD Ryzen Threadripper PRO 5995WX 64-Cores", 25, 0x08,
     "threadripper-zen3-avx2-2c"),
    ("GenuineIntel", "Intel(R) Core(TM) i7-8700K CPU @ 3.70GHz", 6, 0x9E,
     "core-i7-8700k-skylake-avx2-2c"),
    ("GenuineIntel", "Intel(R) Xeon(R) CPU E5-2686 v4 @ 2.30GHz", 6, 0x4F,
     "xeon-e5-2686-v4-broadwell-avx2-2c"),
    ("GenuineIntel", "Intel(R) Xeon(R) CPU @ 2.20GHz", 6, 0x55, "xeon-skylake-x-avx2-2c"),
    ("GenuineIntel", "Intel Xeon Processor (Cascadelake)", 6, 0x99, "xeon-f6m153-avx2-2c"),
    ("AuthenticAMD", "AMD EPYC", 25, 0x35, "epyc-f25m53-avx2-2c"),
    ("AuthenticAMD", "", 25, 0x11, "x86-64-zen4-avx2-2c"),
])
def test_short_names(vendor, name, family, model, short):
    cpu = _x86(vendor, family, model, name=name)
    assert cpu.short_name() == short
    assert "unknown" not in cpu.short_name()


def test_local_cpu_reads_this_machine():
    cpu = local_cpu()
    assert cpu is local_cpu()  # cached in-process
    assert re.fullmatch(r"[a-z0-9-]+", cpu.short_name())
    assert cpu.cores >= 1
    if hasattr(os, "sched_getaffinity"):
        assert cpu.cores == len(os.sched_getaffinity(0))
    if Path("/proc/cpuinfo").is_file():
        raw = parse_cpuinfo(Path("/proc/cpuinfo").read_text(errors="replace"))
        if "model name" in raw:
            assert cpu.model_name == " ".join(raw["model name"].split())
    assert CpuInfo.from_dict(json.loads(json.dumps(cpu.as_dict()))) == cpu


def test_as_dict_is_json_and_round_trips():
    for name, *_ in EXPECTED:
        cpu = _sample(name, cache_root=SAMPLES / "cache-zen4")
        d = cpu.as_dict()
        assert list(d) == ["vendor", "model_name", "family", "model", "stepping", "arch",
                           "isa", "caches", "cores"]
        assert isinstance(d["isa"], list) and isinstance(d["caches"], dict)
        back = CpuInfo.from_dict(json.loads(json.dumps(d)))
        assert back == cpu and back.as_dict() == d and hash(back) == hash(cpu)


def test_record_is_read_only_picklable_and_hashable():
    cpu = _sample("epyc-zen4-avx512", cache_root=SAMPLES / "cache-zen4")
    with pytest.raises(TypeError):
        cpu.caches["L2"] = 0  # type: ignore[index]
    assert pickle.loads(pickle.dumps(cpu)) == cpu
    assert len({cpu, _sample("epyc-zen4-avx512", cache_root=SAMPLES / "cache-zen4")}) == 1
    assert "mappingproxy" not in repr(cpu) and "'L3': 33554432" in repr(cpu)


def _good() -> dict:
    return _sample("epyc-zen4-avx512", cache_root=SAMPLES / "cache-zen4").as_dict()


@pytest.mark.parametrize("field, value", [
    ("vendor", 3), ("model_name", None), ("arch", b"x86_64"),
    ("family", "25"), ("family", 2.0), ("family", True), ("model", -1), ("stepping", "1"),
    ("isa", "avx2 fma"), ("isa", ["avx2", 3]), ("isa", None),
    ("caches", [["L2", 1024]]), ("caches", {"L2": -1}), ("caches", {"L2": "1M"}),
    ("caches", {2: 1024}), ("caches", {"L2": 1.5}),
    ("cores", 0), ("cores", -2), ("cores", "2"), ("cores", None), ("cores", True),
])
def test_from_dict_rejects_wrong_type_naming_the_field(field, value):
    d = _good()
    d[field] = value
    with pytest.raises(DeviceError, match=f"'{field}'"):
        CpuInfo.from_dict(d)


@pytest.mark.parametrize("field", ["vendor", "isa", "caches", "cores", "family"])
def test_from_dict_rejects_missing_field(field):
    d = _good()
    del d[field]
    with pytest.raises(DeviceError, match=f"lacks field.*'{field}'"):
        CpuInfo.from_dict(d)


def test_from_dict_rejects_unknown_field():
    d = _good()
    d["flags"] = []
    with pytest.raises(DeviceError, match="unknown field.*'flags'"):
        CpuInfo.from_dict(d)


@pytest.mark.parametrize("value", [None, [], "cpu", 3])
def test_from_dict_rejects_non_mapping(value):
    with pytest.raises(DeviceError, match="must be a mapping"):
        CpuInfo.from_dict(value)


def test_device_error_is_an_nnmeter_value_error():
    assert issubclass(DeviceError, NNMeterError) and issubclass(DeviceError, ValueError)


def test_read_cpu_rejects_bad_cores():
    with pytest.raises(DeviceError, match="'cores'"):
        read_cpu("", cache_root=NO_CACHES, cores=0)


def test_explicit_arch_wins_and_aliases_are_normalised():
    text = (SAMPLES / "graviton2.cpuinfo").read_text()
    assert read_cpu(text, cache_root=NO_CACHES, cores=1, arch="arm64").arch == "aarch64"
    assert read_cpu("", cache_root=NO_CACHES, cores=1, arch="AMD64").arch == "x86_64"

"""What a CPU is, read from ``/proc/cpuinfo`` and sysfs, with a stable readable name.

A latency predictor describes one device. Two CPUs sold under one model name ("AMD EPYC",
2 vCPUs) can differ in the ISA their kernels dispatch on (AVX2 against AVX-512 runs
kernels 1.6-1.9x apart), so :class:`CpuInfo` carries what changes kernel speed (vendor,
family/model/stepping, dispatch flags, cache sizes, usable cores) and
:meth:`CpuInfo.short_name` puts the microarchitecture and ISA tier into the name.

The module only reads text files: it imports no runtime and needs neither py-cpuinfo nor
psutil. Nothing is read at import time; :func:`local_cpu` reads this machine on first use.
"""

from __future__ import annotations

import functools
import logging
import os
import platform
import re
import types
from collections.abc import Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from nnmeter.errors import DeviceError

__all__ = ["DISPATCH_FLAGS", "CpuInfo", "parse_cpuinfo", "read_cpu", "local_cpu"]

logger = logging.getLogger(__name__)

#: ISA flags of ``/proc/cpuinfo`` that kernels dispatch on (x86 and ARM), in a fixed
#: order; the same tuple as ``nnmeter.predictors.facts.DISPATCH_FLAGS``, so either may
#: import it from the other.
DISPATCH_FLAGS: tuple[str, ...] = (
    "sse4_2", "avx", "avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl", "avx512dq",
    "avx512_vnni", "avx512_bf16", "avx512_fp16", "amx_tile", "amx_bf16", "amx_int8",
    "neon", "asimd", "asimdhp", "asimddp", "sve", "sve2", "i8mm", "bf16",
)

# /proc/cpuinfo keys (lower-cased, inner whitespace collapsed) that parse_cpuinfo keeps
_FIELDS = frozenset({
    "vendor_id", "model name", "cpu family", "model", "stepping", "flags", "features",
    "cpu implementer", "cpu architecture", "cpu variant", "cpu part", "cpu revision",
})

_AMD = "AuthenticAMD"
_INTEL = "GenuineIntel"

# ARM "CPU implementer" codes (MIDR bits 31:24)
_ARM_IMPLEMENTERS: dict[int, str] = {
    0x41: "ARM", 0x42: "Broadcom", 0x43: "Cavium", 0x46: "Fujitsu", 0x48: "HiSilicon",
    0x4E: "NVIDIA", 0x50: "APM", 0x51: "Qualcomm", 0x61: "Apple", 0x6D: "Microsoft",
    0xC0: "Ampere",
}

# (implementer name, "CPU part") -> model name; the microarch is its slug. Apple's
# efficiency and performance cores of one chip share a name: one die, one predictor.
_ARM_PARTS: dict[tuple[str, int], str] = {
    ("ARM", 0xD03): "Cortex-A53", ("ARM", 0xD04): "Cortex-A35", ("ARM", 0xD05): "Cortex-A55",
    ("ARM", 0xD07): "Cortex-A57", ("ARM", 0xD08): "Cortex-A72", ("ARM", 0xD09): "Cortex-A73",
    ("ARM", 0xD0A): "Cortex-A75", ("ARM", 0xD0B): "Cortex-A76", ("ARM", 0xD0C): "Neoverse-N1",
    ("ARM", 0xD0D): "Cortex-A77", ("ARM", 0xD40): "Neoverse-V1", ("ARM", 0xD41): "Cortex-A78",
    ("ARM", 0xD44): "Cortex-X1", ("ARM", 0xD46): "Cortex-A510", ("ARM", 0xD47): "Cortex-A710",
    ("ARM", 0xD48): "Cortex-X2", ("ARM", 0xD49): "Neoverse-N2", ("ARM", 0xD4A): "Neoverse-E1",
    ("ARM", 0xD4F): "Neoverse-V2",
    ("Apple", 0x022): "Apple M1", ("Apple", 0x023): "Apple M1",
    ("Apple", 0x024): "Apple M1", ("Apple", 0x025): "Apple M1",
    ("Apple", 0x028): "Apple M1", ("Apple", 0x029): "Apple M1",
    ("Apple", 0x032): "Apple M2", ("Apple", 0x033): "Apple M2",
    ("Apple", 0x034): "Apple M2", ("Apple", 0x035): "Apple M2",
    ("Apple", 0x038): "Apple M2", ("Apple", 0x039): "Apple M2",
    ("Fujitsu", 0x001): "A64FX", ("HiSilicon", 0xD01): "TaiShan-v110",
    ("NVIDIA", 0x004): "Carmel",
}

# Intel family 6 model -> microarch (0x55 is split by stepping in CpuInfo.microarch)
_INTEL_FAMILY6: dict[int, str] = {
    0x2A: "sandybridge", 0x2D: "sandybridge", 0x3A: "ivybridge", 0x3E: "ivybridge",
    0x3C: "haswell", 0x3F: "haswell", 0x45: "haswell", 0x46: "haswell",
    0x3D: "broadwell", 0x47: "broadwell", 0x4F: "broadwell", 0x56: "broadwell",
    # Kaby/Coffee/Whiskey/Comet Lake client parts keep the Skylake core
    0x4E: "skylake", 0x5E: "skylake", 0x8E: "skylake", 0x9E: "skylake",
    0xA5: "skylake", 0xA6: "skylake",
    0x6A: "icelake-sp", 0x6C: "icelake-sp", 0x7D: "icelake", 0x7E: "icelake",
    0x8C: "tigerlake", 0x8D: "tigerlake",
    0x8F: "sapphirerapids", 0xCF: "emeraldrapids", 0xAD: "graniterapids",
    0xAE: "graniterapids",
    0x97: "alderlake", 0x9A: "alderlake", 0xB7: "raptorlake", 0xBA: "raptorlake",
    0xBF: "raptorlake", 0xAA: "meteorlake", 0xAC: "meteorlake",
}

# AMD family 0x19 model ranges (inclusive) -> microarch; Bergamo's zen4c counts as zen4
_AMD_FAMILY19: tuple[tuple[int, int, str], ...] = (
    (0x00, 0x0F, "zen3"), (0x10, 0x1F, "zen4"), (0x20, 0x2F, "zen3"), (0x40, 0x5F, "zen3"),
    (0x60, 0x7F, "zen4"), (0xA0, 0xAF, "zen4"),
)

# words of a model name that say nothing about the product
_NOISE_WORDS = frozenset({"intel", "amd", "cpu", "processor"})

_ARCH_ALIASES = {"amd64": "x86_64", "x64": "x86_64", "arm64": "aarch64"}

_SIZE_RE = re.compile(r"^(\d+)\s*([KMG]?)(?:I?B)?$")


@dataclass(frozen=True, repr=False)
class CpuInfo:
    """What one CPU is, as far as kernel speed goes.

    Parameters
    ----------
    vendor : str
        ``vendor_id`` on x86 ("AuthenticAMD", "GenuineIntel"); on ARM the implementer's
        name ("ARM", "Apple", "Ampere", ...) or the raw ``CPU implementer`` value when
        the code is unknown. ``""`` when unknown.
    model_name : str
        ``model name`` ("AMD EPYC 7B13"); on ARM without one, the core's name from its
        part number ("Neoverse-N1") or ``"arm-0x<part>"``. ``""`` when unknown.
    family, model, stepping : int or None
        x86 ``cpu family``, ``model`` and ``stepping``. On ARM ``family`` is None,
        ``model`` is the ``CPU part`` and ``stepping`` the ``CPU revision``.
    arch : str
        ``"x86_64"``, ``"aarch64"``, ...
    isa : tuple of str
        The :data:`DISPATCH_FLAGS` this CPU has, in :data:`DISPATCH_FLAGS` order. A list
        is accepted and stored as a tuple.
    caches : mapping of str to int
        Data and unified cache sizes in bytes, ``{"L1d": ..., "L2": ..., "L3": ...}``;
        stored read-only.
    cores : int
        CPUs this process may run on (at least 1).

    Raises
    ------
    DeviceError
        If a field has the wrong type or is out of range; the message names the field.

    Examples
    --------
    >>> cpu = CpuInfo(vendor="AuthenticAMD", model_name="AMD EPYC 7B13", family=25,
    ...               model=1, stepping=0, arch="x86_64", isa=["sse4_2", "avx", "avx2", "fma"],
    ...               caches={"L1d": 32768, "L2": 524288}, cores=2)
    >>> cpu.microarch(), cpu.isa_tier(), cpu.vector_floats()
    ('zen3', 'avx2', 8)
    >>> cpu.short_name()
    'epyc-zen3-avx2-2c'
    >>> CpuInfo.from_dict(cpu.as_dict()) == cpu
    True
    """

    vendor: str
    model_name: str
    family: int | None
    model: int | None
    stepping: int | None
    arch: str
    isa: tuple[str, ...]
    caches: Mapping[str, int]
    cores: int

    def __post_init__(self) -> None:
        for name in ("vendor", "model_name", "arch"):
            value = getattr(self, name)
            if not isinstance(value, str):
                raise DeviceError(f"CpuInfo field {name!r} must be a str; got "
                                  f"{type(value).__name__} {value!r}")
        for name in ("family", "model", "stepping"):
            value = getattr(self, name)
            if value is not None and (not _is_int(value) or value < 0):
                raise DeviceError(f"CpuInfo field {name!r} must be a non-negative int or "
                                  f"None; got {type(value).__name__} {value!r}")
        isa = self.isa
        if not isinstance(isa, (list, tuple)) or not all(isinstance(f, str) for f in isa):
            raise DeviceError(f"CpuInfo field 'isa' must be a list of flag names (str); "
                              f"got {type(isa).__name__} {isa!r}")
        caches = self.caches
        if not isinstance(caches, Mapping) or not all(
                isinstance(k, str) and _is_int(v) and v >= 0 for k, v in caches.items()):
            raise DeviceError(f"CpuInfo field 'caches' must map cache names (str) to "
                              f"sizes in bytes (non-negative int); got {caches!r}")
        if not _is_int(self.cores) or self.cores < 1:
            raise DeviceError(f"CpuInfo field 'cores' must be a positive int; got "
                              f"{type(self.cores).__name__} {self.cores!r}")
        object.__setattr__(self, "isa", tuple(isa))
        # read-only, so that the record local_cpu() shares cannot be edited in place
        object.__setattr__(self, "caches", types.MappingProxyType(dict(caches)))

    # The dataclass defaults would choke on the mapping proxy: it is unhashable,
    # unpicklable, and prints as "mappingproxy(...)".
    def __hash__(self) -> int:
        return hash(tuple(tuple(sorted(self.caches.items())) if f.name == "caches"
                          else getattr(self, f.name) for f in fields(self)))

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self).from_dict, (self.as_dict(),))

    def __repr__(self) -> str:
        parts = ", ".join(f"{f.name}={getattr(self, f.name)!r}" if f.name != "caches"
                          else f"caches={dict(self.caches)!r}" for f in fields(self))
        return f"{type(self).__name__}({parts})"

    def microarch(self) -> str:
        """The core's microarchitecture, lower case ("zen4", "sapphirerapids",
        "neoverse-n1"), or ``""`` when the vendor/family/model is not in the tables.

        Examples
        --------
        >>> CpuInfo("GenuineIntel", "Intel(R) Xeon(R) Gold 6248", 6, 0x55, 7, "x86_64",
        ...         (), {}, 4).microarch()
        'cascadelake'
        >>> CpuInfo("ARM", "Neoverse-N1", None, 0xd0c, 1, "aarch64", (), {}, 2).microarch()
        'neoverse-n1'
        """
        family, model = self.family, self.model
        if model is None:
            return ""
        if self.vendor == _AMD:
            if family == 0x17:
                return "zen" if model <= 0x2F else "zen2"
            if family == 0x19:
                return next((name for lo, hi, name in _AMD_FAMILY19 if lo <= model <= hi), "")
            if family == 0x1A:
                return "zen5"
            return ""
        if self.vendor == _INTEL:
            if family != 6:
                return ""
            if model == 0x55:
                # one model number for three generations; Cooper Lake (stepping 10+)
                # keeps Cascade Lake's core
                return "cascadelake" if (self.stepping or 0) >= 5 else "skylake-x"
            return _INTEL_FAMILY6.get(model, "")
        if family is None:
            name = _ARM_PARTS.get((self.vendor, model))
            return _slug(name) if name else ""
        return ""

    def isa_tier(self) -> str:
        """The widest ISA class its kernels can dispatch to: x86 ``"amx"``, ``"avx512"``,
        ``"avx2"`` (AVX2 with FMA), ``"avx"``, ``"sse"`` (SSE4.2); ARM ``"sve2"``,
        ``"sve"``, ``"dotprod"`` (asimddp), ``"neon"``; ``""`` when none is known.

        Examples
        --------
        >>> CpuInfo("", "", None, None, None, "x86_64", ("avx2", "fma", "avx512f"), {},
        ...         1).isa_tier()
        'avx512'
        >>> CpuInfo("ARM", "", None, None, None, "aarch64", ("neon", "asimd", "asimddp"),
        ...         {}, 1).isa_tier()
        'dotprod'
        """
        isa = set(self.isa)
        for tier, needs in (("amx", {"amx_tile"}), ("avx512", {"avx512f"}),
                            ("avx2", {"avx2", "fma"}), ("avx", {"avx"}), ("sse", {"sse4_2"}),
                            ("sve2", {"sve2"}), ("sve", {"sve"}), ("dotprod", {"asimddp"})):
            if needs <= isa:
                return tier
        return "neon" if isa & {"neon", "asimd"} else ""

    def vector_floats(self) -> int:
        """float32 lanes per vector register in the kernels the runtimes run here: 16
        with AVX-512F, 8 with AVX2, 4 with SSE4.2 or AVX alone and with NEON/ASIMD, 0
        when no vector ISA is known.

        SVE counts as NEON: ``/proc/cpuinfo`` does not give the SVE vector length, and
        the runtimes' float kernels on ARM are NEON kernels.

        Examples
        --------
        >>> CpuInfo("", "", None, None, None, "x86_64", ("avx2", "fma"), {}, 1).vector_floats()
        8
        """
        isa = set(self.isa)
        if "avx512f" in isa:
            return 16
        if "avx2" in isa:
            return 8
        if isa & {"sse4_2", "avx", "neon", "asimd"}:
            return 4
        return 0

    def short_name(self) -> str:
        """A readable device name, ``<product>-<microarch>-<tier>-<cores>c``, made of
        ``[a-z0-9-]`` only.

        The product is "epyc", "ryzen", "threadripper", "xeon-<model number>",
        "core-<model>", or the slug of the model name (ARM: the core, "neoverse-n1"). An
        unknown x86 microarch is written ``f<family>m<model>``; a microarch the product
        already names is not repeated; unknown parts are left out; with no model name
        the architecture stands in for the product.

        Examples
        --------
        >>> CpuInfo("GenuineIntel", "Intel(R) Xeon(R) Platinum 8480+", 6, 143, 8, "x86_64",
        ...         ("avx512f", "amx_tile"), {}, 16).short_name()
        'xeon-8480-sapphirerapids-amx-16c'
        >>> CpuInfo("ARM", "Neoverse-N1", None, 0xd0c, 1, "aarch64", ("neon", "asimd",
        ...         "asimddp"), {}, 2).short_name()
        'neoverse-n1-dotprod-2c'
        >>> CpuInfo("AuthenticAMD", "AMD EPYC", 25, 0x35, 0, "x86_64", ("avx2", "fma"),
        ...         {}, 2).short_name()
        'epyc-f25m53-avx2-2c'
        """
        product = _product(self.model_name) or _slug(self.arch)
        micro = _slug(self.microarch())
        if not micro and self.family is not None and self.model is not None:
            micro = f"f{self.family}m{self.model}"
        if micro and f"-{micro}-" in f"-{product}-":
            micro = ""
        return "-".join(p for p in (product, micro, self.isa_tier(), f"{self.cores}c") if p)

    def as_dict(self) -> dict[str, Any]:
        """The fields as a JSON-able dict (``isa`` a list, ``caches`` a dict).

        Examples
        --------
        >>> CpuInfo("ARM", "Neoverse-N1", None, 3340, 1, "aarch64", ("asimd",),
        ...         {"L1d": 65536}, 2).as_dict()["isa"]
        ['asimd']
        """
        out: dict[str, Any] = {f.name: getattr(self, f.name) for f in fields(self)}
        out["isa"] = list(self.isa)
        out["caches"] = dict(self.caches)
        return out

    @classmethod
    def from_dict(cls, d: Any) -> CpuInfo:
        """The CpuInfo of an :meth:`as_dict` record, checked strictly.

        Raises
        ------
        DeviceError
            If ``d`` is not a mapping, lacks a field or has an unknown one, or a field
            has the wrong type (the message names the field).

        Examples
        --------
        >>> CpuInfo.from_dict({"vendor": "ARM"})
        Traceback (most recent call last):
        ...
        nnmeter.errors.DeviceError: CpuInfo record lacks field(s) 'model_name', 'family', \
'model', 'stepping', 'arch', 'isa', 'caches', 'cores'; a record holds exactly: 'vendor', \
'model_name', 'family', 'model', 'stepping', 'arch', 'isa', 'caches', 'cores'
        """
        names = [f.name for f in fields(cls)]
        expected = ", ".join(map(repr, names))
        if not isinstance(d, Mapping):
            raise DeviceError(f"a CpuInfo record must be a mapping of the fields {expected};"
                              f" got {type(d).__name__}")
        missing = [n for n in names if n not in d]
        if missing:
            raise DeviceError(f"CpuInfo record lacks field(s) {', '.join(map(repr, missing))};"
                              f" a record holds exactly: {expected}")
        unknown = [k for k in d if k not in names]
        if unknown:
            raise DeviceError(f"CpuInfo record has unknown field(s) "
                              f"{', '.join(map(repr, unknown))}; a record holds exactly: "
                              f"{expected}")
        return cls(**{n: d[n] for n in names})


def parse_cpuinfo(text: str) -> dict[str, Any]:
    """The fields of the first processor block of ``/proc/cpuinfo`` text that describe
    the CPU, as raw strings.

    Keys are lower case with inner whitespace collapsed: ``vendor_id``, ``model name``,
    ``cpu family``, ``model``, ``stepping``, ``flags`` (x86), ``features``,
    ``cpu implementer``, ``cpu architecture``, ``cpu variant``, ``cpu part`` and
    ``cpu revision`` (ARM), each present only if the text has it. Lines before the first
    ``processor : 0`` count too; the block ends where the next processor starts. Text
    that is not cpuinfo gives ``{}``.

    Examples
    --------
    >>> parse_cpuinfo("processor\\t: 0\\nvendor_id\\t: GenuineIntel\\ncpu family\\t: 6\\n"
    ...               "flags\\t\\t: fpu sse4_2 avx\\n\\nprocessor\\t: 1\\nvendor_id\\t: other\\n")
    {'vendor_id': 'GenuineIntel', 'cpu family': '6', 'flags': 'fpu sse4_2 avx'}
    >>> parse_cpuinfo("CPU implementer\\t: 0x41\\nCPU part\\t: 0xd0c\\n")
    {'cpu implementer': '0x41', 'cpu part': '0xd0c'}
    """
    out: dict[str, Any] = {}
    in_block = False
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if not sep:
            continue
        key = " ".join(key.split()).lower()
        value = value.strip()
        # old 32-bit ARM kernels also print "Processor : ARMv7 ..."; only a number
        # starts a block
        if key == "processor" and value.isdigit():
            if in_block:
                break
            in_block = True
        elif key in _FIELDS:
            out.setdefault(key, value)
    return out


def read_cpu(cpuinfo: str | None = None, *,
             cache_root: str | os.PathLike[str] = "/sys/devices/system/cpu/cpu0/cache",
             cores: int | None = None, arch: str | None = None) -> CpuInfo:
    """The :class:`CpuInfo` of ``/proc/cpuinfo`` text and a sysfs cache folder.

    Parameters
    ----------
    cpuinfo : str, optional
        ``/proc/cpuinfo`` text; read from this machine when None. An unreadable file
        counts as empty text: the fields come out empty, nothing is raised.
    cache_root : path, default "/sys/devices/system/cpu/cpu0/cache"
        Folder of ``index*/{level,type,size}`` entries; instruction caches are skipped,
        and a missing folder or unreadable entry gives no caches.
    cores : int, optional
        Usable CPUs; when None, those in this process's affinity mask
        (``os.sched_getaffinity``), else ``os.cpu_count()``.
    arch : str, optional
        Architecture; when None, what the cpuinfo fields show (x86 ``vendor_id``/
        ``cpu family`` -> "x86_64", ARM ``CPU implementer``/``CPU part`` -> "aarch64",
        "armv7l" for ``CPU architecture`` 7 or lower), so text recorded on another
        machine gets its own arch; ``platform.machine()`` when they show neither.
        "amd64"/"arm64" are written "x86_64"/"aarch64".

    Raises
    ------
    DeviceError
        If ``cores`` is not a positive int.

    Examples
    --------
    >>> cpu = read_cpu("processor\\t: 0\\nvendor_id\\t: AuthenticAMD\\ncpu family\\t: 25\\n"
    ...                "model\\t\\t: 17\\nmodel name\\t: AMD EPYC\\nstepping\\t: 1\\n"
    ...                "flags\\t\\t: fpu sse4_2 avx avx2 fma avx512f avx512bw\\n",
    ...                cache_root="/nonexistent", cores=2)
    >>> cpu.arch, cpu.isa, cpu.short_name()
    ('x86_64', ('sse4_2', 'avx', 'avx2', 'fma', 'avx512f', 'avx512bw'), 'epyc-zen4-avx512-2c')
    >>> read_cpu("not a cpuinfo", cache_root="/nonexistent", cores=1, arch="x86_64")
    CpuInfo(vendor='', model_name='', family=None, model=None, stepping=None, \
arch='x86_64', isa=(), caches={}, cores=1)
    """
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text(errors="replace")
        except OSError as err:
            logger.debug("cannot read /proc/cpuinfo (%s); CPU fields stay empty", err)
            cpuinfo = ""
    raw = parse_cpuinfo(cpuinfo)
    flags = set(raw.get("flags", "").split()) | set(raw.get("features", "").split())
    if "asimd" in flags:  # AArch64 calls NEON "asimd"
        flags.add("neon")
    is_arm = "cpu implementer" in raw or "cpu part" in raw
    if is_arm:
        code = raw.get("cpu implementer", "")
        implementer = _int(code)
        vendor = code if implementer is None else _ARM_IMPLEMENTERS.get(implementer, code)
        part = _int(raw.get("cpu part"))
        family, model, stepping = None, part, _int(raw.get("cpu revision"))
        model_name = " ".join(raw.get("model name", "").split())
        if not model_name and part is not None:
            model_name = _ARM_PARTS.get((vendor, part), f"arm-0x{part:03x}")
    else:
        vendor = raw.get("vendor_id", "")
        model_name = " ".join(raw.get("model name", "").split())
        family, model = _int(raw.get("cpu family")), _int(raw.get("model"))
        stepping = _int(raw.get("stepping"))
    if arch is None:
        arch = _arch_of(raw, is_arm) or platform.machine()
    arch = _ARCH_ALIASES.get(arch.lower(), arch.lower())
    return CpuInfo(vendor=vendor, model_name=model_name, family=family, model=model,
                   stepping=stepping, arch=arch,
                   isa=tuple(f for f in DISPATCH_FLAGS if f in flags),
                   caches=_read_caches(Path(cache_root)),
                   cores=_usable_cores() if cores is None else cores)


@functools.lru_cache(maxsize=1)
def local_cpu() -> CpuInfo:
    """The :class:`CpuInfo` of this machine, read once per process (``read_cpu()``).

    The record is cached: a later change of this process's CPU affinity is not seen;
    ``local_cpu.cache_clear()`` forgets it.

    Examples
    --------
    >>> local_cpu() is local_cpu()
    True
    """
    return read_cpu()


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _int(text: str | None) -> int | None:
    """An int from cpuinfo text: hex with ``0x``, else decimal; None if it is neither."""
    if not text:
        return None
    text = text.strip().lower()
    try:
        return int(text, 16) if text.startswith("0x") else int(text, 10)
    except ValueError:
        return None


def _arch_of(raw: Mapping[str, str], is_arm: bool) -> str:
    if is_arm:
        version = _int(raw.get("cpu architecture"))
        return "armv7l" if version is not None and version < 8 else "aarch64"
    if "vendor_id" in raw or "cpu family" in raw:
        return "x86_64"
    return ""


def _parse_size(text: str) -> int:
    """Bytes of a sysfs cache size ("32K", "1024K", "32M", "512"); ValueError otherwise."""
    match = _SIZE_RE.match(text.strip().upper())
    if not match:
        raise ValueError(f"not a cache size: {text!r}")
    return int(match[1]) * {"": 1, "K": 1024, "M": 1024 ** 2, "G": 1024 ** 3}[match[2]]


def _read_caches(root: Path) -> dict[str, int]:
    def index(path: Path) -> int:
        digits = path.name[len("index"):]
        return int(digits) if digits.isdigit() else 1 << 30

    caches: dict[str, int] = {}
    try:
        entries = sorted(root.glob("index*"), key=index)
    except OSError:
        return caches
    for entry in entries:
        try:
            level = int((entry / "level").read_text().strip())
            kind = (entry / "type").read_text().strip()
            size = _parse_size((entry / "size").read_text())
        except (OSError, ValueError) as err:
            logger.debug("skipping cache entry %s: %s", entry, err)
            continue
        if kind == "Instruction":
            continue
        caches.setdefault(f"L{level}" + ("d" if kind == "Data" else ""), size)
    return caches


def _usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0)) or 1
    except (AttributeError, OSError):  # no affinity API (macOS, Windows)
        return os.cpu_count() or 1


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def _product(model_name: str) -> str:
    """The product part of a short name, from a model name; ``""`` when there is none."""
    text = re.sub(r"\((?:r|tm|c)\)", " ", model_name.lower())
    text = re.sub(r"\([^)]*\)", " ", text.split("@")[0])  # clock and "(Cascadelake)"
    words = [w for w in text.split() if w not in _NOISE_WORDS]
    for brand in ("threadripper", "epyc", "ryzen"):
        if brand in words:
            return brand
    if "xeon" in words:
        rest = words[words.index("xeon") + 1:]
        return _slug("-".join(["xeon", *(w for w in rest if any(c.isdigit() for c in w))]))
    if "core" in words:
        return _slug("-".join(words[words.index("core"):]))
    return _slug("-".join(words))

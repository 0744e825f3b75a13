"""Device facts: what the composition terms need to know about the device a dataset
was measured on, read from its device record, never from a table keyed by backend id.

A *device* is one CPU + one runtime version + its settings. Some composition terms
depend on facts of that device:

- **the blocked-layout channel block** (ORT's NCHWc): the CPU's vector width in floats,
  16 with AVX-512, 8 with AVX2, none without AVX2 (ORT then runs plain NCHW kernels);
  only runtimes with such a layout transformer have one (:data:`RUNTIME_FACTS`);
- **the last-level cache size**, past which weights are streamed from memory;
- **which activations the runtime folds** into a preceding convolution and which
  weightless kernels it merges when they repeat on one tensor;
- **whether single-kernel models pay edge conversions** (layout or precision) that a
  whole model pays only at its own inputs and outputs.

The CPU part comes from the device record (``dataset.json``'s ``device``: ``isa`` flags
and ``caches`` in bytes, recorded by :func:`local_cpu_facts` when a dataset is created);
the runtime part from :data:`RUNTIME_FACTS`, keyed by the runtime the record names.

Examples
--------
>>> f = device_facts({"runtime": "onnxruntime", "isa": ["avx2", "fma", "avx512f"]})
>>> f.layout_block, "relu" in f.folded_activations
(16, True)
>>> device_facts({"runtime": "onnxruntime", "isa": ["avx2", "fma"]}).layout_block
8
>>> device_facts({"runtime": "openvino", "isa": ["avx2"]}).edge_conversions
True
>>> device_facts({"runtime": "mnn", "isa": ["avx2"]}).edge_conversions
True
>>> split_dataset_id("ort-cpu@epyc-zen4-avx512-2c")
('ort-cpu', 'epyc-zen4-avx512-2c')
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from nnmeter.errors import DatasetError

__all__ = ["DeviceFacts", "RUNTIME_FACTS", "device_facts", "local_cpu_facts",
           "split_dataset_id"]

logger = logging.getLogger(__name__)

#: activations ORT 1.32 runs as a convolution's epilogue (``nchwc.Conv`` with
#: activation HardSwish, HardSigmoid, Sigmoid, Tanh, LeakyRelu, Clip or Relu; not Gelu,
#: nor Swish, which it turns into QuickGelu)
_ORT_FOLDED = frozenset({"hswish", "hsigmoid", "sigmoid", "tanh", "leakyrelu", "relu",
                         "relu6"})

#: weightless single-op kernel types of which a runtime runs one per input tensor and
#: attributes (activations and poolings): ORT's common-subexpression elimination, and
#: the .tflite converter's when it writes the model (a NASBench-201 variant with 47
#: average pools and 5 relus in its graph: 32 AVERAGE_POOL_2D and 2 RELU in the file)
_WEIGHTLESS = frozenset({"hswish", "hsigmoid", "sigmoid", "tanh", "leakyrelu", "relu",
                         "relu6", "gelu", "swish", "avgpool", "maxpool", "gap"})

#: runtime (``DeviceInfo.runtime``) → what it does to a model, whatever the CPU:
#: ``blocked_layout`` (it runs convolutions in a channel-blocked layout whose block is
#: the CPU's vector width), ``folded`` activations, ``merged`` types, ``edge_conversions``,
#: ``row_edges``, ``row_context``
RUNTIME_FACTS: dict[str, dict[str, Any]] = {
    "onnxruntime": {"blocked_layout": True, "folded": _ORT_FOLDED, "merged": _WEIGHTLESS},
    "litert": {"merged": _WEIGHTLESS},
    # OpenVINO's CPU plugin converts a plain fp32 input into its blocked bf16 layout
    # and back at every model's edges (``Reorder`` nodes)
    # and a single-kernel model's own edges can be ten times its kernel (a 256-channel
    # 128x128 depthwise convolution: 1.5 ms of work, 10 ms of conversions), which no fit
    # on sizes follows: training takes each row's own profiled edges (``row_edges``;
    # development set seed 1000 on epyc-zen4-avx512-2c, openvino-cpu-f32: within ±10 %
    # 48.1 -> 71.2 %, MAPE 18.2 -> 12.4 %)
    # a pooling, activation or multiply kernel alone runs in the plain layout of the
    # model input it is fed, inside a model in the blocked layout of the convolution
    # before it, often several times faster: training takes those rows at their time
    # profiled between two 1x1 convolutions (``row_context``)
    "openvino": {"edge_conversions": True, "row_edges": True, "row_context": True},
    # MNN converts a plain NCHW input into its NC4HW4 layout and back at a model's edges
    # (``Raster`` nodes: 0.08 ms around a 0.18 ms 1x1 convolution of 64x64x16 -> 112)
    # (its rows' own profiles do not help there: mnn-cpu's development set, same
    # device, ±10 % 75.0 -> 75.0 %, ±5 % 53.8 -> 46.2 %, MAPE 7.6 -> 8.1 %)
    "mnn": {"edge_conversions": True, "winograd_weights": True},
}


@dataclass(frozen=True)
class DeviceFacts:
    """What the composition terms know about one device (see the module docstring).

    Attributes
    ----------
    layout_block : int
        Channel block of the runtime's blocked layout on this CPU (0: no blocked layout).
    llc_bytes : int or None
        Last-level cache size in bytes (None: not recorded).
    folded_activations : frozenset of str
        Standalone activation kernel types the runtime runs as a convolution's epilogue.
    merged_types : frozenset of str
        Weightless kernel types the runtime runs once per input tensor and attributes.
    edge_conversions : bool
        Single-kernel models pay layout/precision conversions at their edges.
    row_edges : bool
        Those edges are profiled row by row and each row loses its own in training
        (:func:`nnmeter.predictors.boundary.measure_row_edges`), not the fit's.
    row_context : bool
        Rows of layout-following kernels (pooling, activations...) that ran in the plain
        layout alone are profiled between two convolutions, and training takes that
        time (:func:`nnmeter.predictors.boundary.measure_row_context`).
    """

    layout_block: int = 0
    llc_bytes: int | None = None
    folded_activations: frozenset[str] = field(default_factory=frozenset)
    merged_types: frozenset[str] = field(default_factory=frozenset)
    edge_conversions: bool = False
    row_edges: bool = False
    row_context: bool = False
    winograd_weights: bool = False


def _vector_floats(isa: Any) -> int:
    """Floats per vector register the kernels dispatch on: 16 (AVX-512F), 8 (AVX2), 0."""
    flags = {str(f).lower() for f in isa or ()}
    if "avx512f" in flags:
        return 16
    if "avx2" in flags:
        return 8
    return 0


def device_facts(device: Mapping[str, Any] | None) -> DeviceFacts:
    """The :class:`DeviceFacts` of a device record (a DeviceInfo dict with ``isa`` and
    ``caches`` where they were recorded).

    A runtime with a blocked layout on a record without ISA flags gets no block (and a
    warning): guessing the vector width would silently predict for another CPU.

    Raises
    ------
    DatasetError
        If the record is not a mapping, or ``isa``/``caches`` are of the wrong type.
    """
    if device is None:
        return DeviceFacts()
    if not isinstance(device, Mapping):
        raise DatasetError(f"a device record must be a JSON object; got "
                           f"{type(device).__name__}. Rebuild the dataset's dataset.json")
    isa = device.get("isa")
    if isa is not None and not (isinstance(isa, (list, tuple))
                                and all(isinstance(f, str) for f in isa)):
        raise DatasetError(f"device record 'isa' must be a list of flag names; got {isa!r}")
    caches = device.get("caches") or {}
    if not isinstance(caches, Mapping):
        raise DatasetError(f"device record 'caches' must map a level to bytes; got {caches!r}")
    runtime = RUNTIME_FACTS.get(str(device.get("runtime", "")), {})
    block = 0
    if runtime.get("blocked_layout"):
        block = _vector_floats(isa)
        if isa is None:
            logger.warning("the device record of a %s dataset names no ISA flags; its "
                           "blocked layout (and reorders) are not modelled",
                           device.get("runtime"))
    llc = max((int(v) for v in caches.values()), default=None) if caches else None
    return DeviceFacts(layout_block=block, llc_bytes=llc,
                       folded_activations=frozenset(runtime.get("folded", ())),
                       merged_types=frozenset(runtime.get("merged", ())),
                       edge_conversions=bool(runtime.get("edge_conversions", False)),
                       row_edges=bool(runtime.get("row_edges", False)),
                       row_context=bool(runtime.get("row_context", False)),
                       winograd_weights=bool(runtime.get("winograd_weights", False)))


#: ISA flags of ``/proc/cpuinfo`` that kernels dispatch on (x86 and ARM)
from nnmeter.devices.cpu import DISPATCH_FLAGS  # noqa: E402  (one list, in nnmeter.devices)


def local_cpu_facts(cpuinfo: str | None = None,
                    cache_root: str = "/sys/devices/system/cpu/cpu0/cache") -> dict[str, Any]:
    """``{"isa": [...], "caches": {"L1d": bytes, "L2": ..., "L3": ...}}`` of this machine
    (or of the given ``/proc/cpuinfo`` text), for a new dataset's device record; read by
    :func:`nnmeter.devices.cpu.read_cpu`.

    Examples
    --------
    >>> local_cpu_facts("flags\\t: fpu avx2 fma avx512f\\n", cache_root="/nonexistent")
    {'isa': ['avx2', 'fma', 'avx512f'], 'caches': {}}
    """
    from nnmeter.devices.cpu import local_cpu, read_cpu

    cpu = local_cpu() if cpuinfo is None and cache_root == \
        "/sys/devices/system/cpu/cpu0/cache" else read_cpu(cpuinfo, cache_root=cache_root)
    return {"isa": list(cpu.isa), "caches": dict(cpu.caches)}


def split_dataset_id(dataset_id: str) -> tuple[str, str | None]:
    """(backend id, device name or None) of a dataset id ``backend[@device]``.

    Raises
    ------
    DatasetError
        If either part is empty or the id holds more than one ``@``.
    """
    backend, sep, device = str(dataset_id).partition("@")
    if not backend or (sep and (not device or "@" in device)):
        raise DatasetError(f"dataset id {dataset_id!r} is not of the form BACKEND or "
                           f"BACKEND@DEVICE (for example ort-cpu@epyc-zen4-avx512-2c)")
    return backend, (device or None)

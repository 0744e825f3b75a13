"""Layout reorders: what a single-kernel measurement pays that a whole model may not.

ORT (graph optimisation ALL) runs most convolutions in its blocked NCHWc layout, whose
channel block is the CPU's vector width in floats (16 with AVX-512, the machine the
ort-cpu data was measured on). A *single-kernel* model of such a convolution therefore
executes ``ReorderInput`` + ``Conv`` + ``ReorderOutput``. Inside a whole model,
consecutive blocked convolutions (and the layout-transparent element-wise and pooling
ops between them) stay blocked, and reorders happen only where a blocked tensor meets an
op that needs NCHW (``ReduceMean``, ``Clip``, ``Gemm``…) or leaves the model.

Which kernels run blocked, as ORT 1.32's profiler shows on this machine
(``tests/predictors/test_layout_ort.py`` checks it against the installed runtime):

- **convolution** (one group): any number of output channels (padded up to the block);
  fewer input channels than the block are read in NCHW directly (no ``ReorderInput``),
  more need a multiple of :data:`CHANNEL_ALIGN` (4): 20, 28, 116 run blocked, 18, 58,
  102 run as a plain ``FusedConv``;
- **depthwise convolution**: channels a multiple of :data:`CHANNEL_ALIGN` (116 blocked,
  58 plain ``Conv``);
- **grouped convolution**: input and output channels per group whole blocks;
- **pooling**: channels whole blocks (a MaxPool over 64 or 96 channels runs
  ``nchwc.MaxPool`` between a ReorderInput and a ReorderOutput, over 20 or 24 channels
  plain ``MaxPool``). A NASBench-201 cell's 3x3 average pool over 16 channels at 32x32:
  22 µs as a single-kernel model, 9 µs for its ``nchwc.AveragePool`` node.

So training removes the reorders from the convolutions' and poolings' measured times
(:func:`nnmeter.predictors.train.train_predictor`) and prediction adds back the ones the
whole model really executes (:func:`model_reorders`). On a 1x1 16→16 convolution at
32x32 ORT's profiler shows ReorderInput 6 µs + Conv 8 µs + ReorderOutput 5 µs.

Examples
--------
>>> from nnmeter.kernels import KERNEL_TYPES
>>> kt = KERNEL_TYPES.get("conv-bn")
>>> reorder_elements(kt, kt.config_cls(h=8, w=8, cin=20, cout=6, kernel=1), 16)
(1280, 384)
>>> reorder_elements(kt, kt.config_cls(h=8, w=8, cin=3, cout=12, kernel=1), 16)
(0, 768)
>>> reorder_elements(kt, kt.config_cls(h=8, w=8, cin=58, cout=58, kernel=1), 16)
(0, 0)
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["BLOCKED_FAMILIES", "CHANNEL_ALIGN", "TRANSPARENT_TYPES",
           "reorder_elements", "model_reorders", "layout_pass"]

# The channel block of ORT's NCHWc layout is the CPU's vector width in floats (16 with
# AVX-512, 8 with AVX2): a fact of the device, :attr:`DeviceFacts.layout_block`
# (:mod:`nnmeter.predictors.facts`).

#: a convolution's channels need only be a multiple of this (ORT pads them to the block)
CHANNEL_ALIGN = 4

#: kernel types that keep a blocked input blocked (ORT's NCHWc transformer converts
#: them); any other consumer of a blocked tensor gets a ReorderOutput before it. ORT
#: 1.32's optimised graphs, with the activation's producer feeding a second reader so
#: that it is not folded into the convolution: ``Relu``, ``HardSigmoid``, ``Sigmoid``,
#: ``Gelu`` and hswish's ``HardSigmoid`` + ``Mul`` stay blocked; ``Clip`` (relu6),
#: ``Tanh``, ``LeakyRelu`` and swish's ``QuickGelu`` get a ReorderOutput before them
TRANSPARENT_TYPES = frozenset({"relu", "hswish", "hsigmoid", "sigmoid", "gelu", "add",
                               "add-relu", "avgpool", "maxpool", "bn", "bn-relu"})


#: kernel families ORT may run in the blocked layout
BLOCKED_FAMILIES = ("conv", "gconv", "dwconv", "pool")

def _out_hw(h: int, w: int, k: int, s: int, pads: Any, kw: int | None = None,
            sw: int | None = None) -> tuple[int, int]:
    kw = k if kw is None else kw
    sw = s if sw is None else sw
    if pads is None:
        return -(-h // s), -(-w // sw)
    return (h + pads[0] + pads[2] - k) // s + 1, (w + pads[1] + pads[3] - kw) // sw + 1


def reorder_elements(kernel_type: Any, config: Any, block: int) -> tuple[int, int]:
    """(input, output) elements a single-kernel model of ``config`` reorders into and
    out of a ``block``-channel blocked layout; (0, 0) when it runs unblocked."""
    family = getattr(kernel_type, "family", "")
    if not block or family not in BLOCKED_FAMILIES:
        return 0, 0
    cin = int(config.cin)
    if family == "pool":
        if cin % block:
            return 0, 0
        ho, wo = _out_hw(int(config.h), int(config.w), int(config.kernel),
                         int(config.stride), getattr(config, "pads", None),
                         getattr(config, "kernel_w", None), getattr(config, "stride_w", None))
        return cin * int(config.h) * int(config.w), cin * ho * wo
    cout = int(getattr(config, "cout", cin))
    groups = int(getattr(config, "groups", 1)) if family in ("conv", "gconv") else cin
    if groups == 1:
        reads_nchw = cin < block  # read in NCHW directly, no ReorderInput
        if not reads_nchw and cin % CHANNEL_ALIGN:
            return 0, 0
    elif groups == cin == cout:  # depthwise
        reads_nchw = False
        if cin % CHANNEL_ALIGN:
            return 0, 0
    else:
        reads_nchw = False
        if cin % groups or cout % groups or (cin // groups) % block or (cout // groups) % block:
            return 0, 0
    ho, wo = _out_hw(int(config.h), int(config.w), int(config.kernel), int(config.stride),
                     getattr(config, "pads", None), getattr(config, "kernel_w", None))
    n_in = 0 if reads_nchw else cin * int(config.h) * int(config.w)
    return n_in, cout * ho * wo


def _elements(node_data: dict[str, Any], node: str) -> int:
    try:
        return int(math.prod(int(d) for d in node_data[node]["node"].output_shape))
    except (TypeError, ValueError, AttributeError):  # unknown shape: no reorder counted
        return 0


def _exit_node(succ_of: dict[str, Any], names: Sequence[str]) -> str:
    """The node whose output leaves a kernel of ``names`` (its last such node)."""
    if len(names) == 1:
        return names[0]
    inside = set(names)
    exits = [n for n in names if not succ_of[n] or not succ_of[n].keys() <= inside]
    return exits[-1] if exits else names[-1]


def model_reorders(graph: Any, kernels: Sequence[Any], block: int,
                   memo: dict[Any, tuple[Any, int, int]] | None = None,
                   absorbed: Mapping[int, int] | None = None) -> list[int]:
    """Element counts of the layout reorders ``graph`` executes as a whole, given its
    kernels in topological order (one entry per reorder).

    ``memo`` (optional, kept by the caller across models) maps (kernel type name,
    id of the config, block) to (config, :func:`reorder_elements`); models repeat
    kernel configs, and the partitioner hands out equal configs as one object.
    ``absorbed`` (optional) maps kernels the runtime runs inside an earlier kernel to
    that kernel (:func:`nnmeter.predictors.absorbed.absorbed_kernels`): their output
    is in that kernel's layout and no reorder is counted at their input."""
    if not block:
        return []
    main, at_outputs, _, _ = layout_pass(graph, kernels, block, memo, absorbed)
    return main + at_outputs


def layout_pass(graph: Any, kernels: Sequence[Any], block: int,
                memo: dict[Any, tuple[Any, int, int]] | None = None,
                absorbed: Mapping[int, int] | None = None,
                given: Mapping[int, tuple[bool, bool]] | None = None,
                ) -> tuple[list[int], list[int], list[bool], set[int]]:
    """:func:`model_reorders` in parts: the reorders found kernel by kernel, those of
    blocked tensors that leave the model (:func:`model_reorders` returns the first
    list, then the second), each kernel's layout (True: blocked) and the kernels whose
    output was reordered.

    ``given`` maps kernels whose state was decided elsewhere to (blocked, reordered):
    they are not looked at, only read (a segment's stub for the kernel that produces
    its input, :mod:`nnmeter.predictors.segments`)."""
    absorbed = absorbed or {}
    given = given or {}
    if memo is None:
        memo = {}
    node2k = {n: i for i, k in enumerate(kernels) for n in k.nodes}
    blocked = [False] * len(kernels)
    reordered: set[int] = set()
    out: list[int] = []
    # networkx's adjacency and node dicts, read directly: this runs once per predicted
    # model
    succ_of, pred_of, node_data = graph.nx._succ, graph.nx._pred, graph.nx._node
    # kernel type name -> (KernelType, may run blocked, layout-transparent)
    info: dict[str, tuple[Any, bool, bool]] = {}
    in_kernel = node2k.get
    for i, state in given.items():
        blocked[i] = state[0]
        if state[1]:
            reordered.add(i)
    for i, k in enumerate(kernels):
        if i in given:
            continue
        into = absorbed.get(i)
        if into is not None:
            blocked[i] = blocked[into]
            continue
        # kernels that feed this one (graph inputs are in none); a kernel may appear
        # more than once, which changes nothing below
        producers = [t for n in k.nodes for p in pred_of[n] if (t := in_kernel(p, i)) != i]
        about = info.get(k.type)
        if about is None:
            kt = k.kernel_type
            about = info[k.type] = (kt, getattr(kt, "family", "") in BLOCKED_FAMILIES,
                                    k.type in TRANSPARENT_TYPES)
        kt, may_block, transparent = about
        if may_block:
            # by the config's identity (configs are mostly shared objects; the entry
            # holds the config, so its id is not reused while the entry lives)
            config = k.config
            hit = memo.get((k.type, id(config), block))
            if hit is None or hit[0] is not config:
                if len(memo) > 65536:
                    memo.clear()
                hit = memo[(k.type, id(config), block)] = (
                    config, *reorder_elements(kt, config, block))
            _, n_in, n_out = hit
            if n_out:
                blocked[i] = True
                if n_in:
                    if not (producers and all(blocked[p] for p in producers)):
                        out.append(n_in)
                    continue
                # a blocked convolution over fewer channels than the block reads its
                # input in NCHW: a blocked producer's output is reordered back first
                transparent = False
            else:
                # a pooling kernel that cannot run blocked needs its input in NCHW
                transparent = transparent and kt.family != "pool"
        from_blocked = [p for p in producers if blocked[p]]
        if not from_blocked:
            continue
        if transparent:
            blocked[i] = True
            continue
        for p in sorted(from_blocked):  # in kernel order: the sum adds them in this order
            if p not in reordered:
                reordered.add(p)
                out.append(_elements(node_data, _exit_node(succ_of, kernels[p].nodes)))
    outputs = {str(getattr(r, "node", r)) for r in getattr(graph, "outputs", ())}
    at_outputs: list[int] = []
    for i, k in enumerate(kernels):
        if blocked[i] and i not in reordered and i not in given \
                and not outputs.isdisjoint(k.nodes):
            at_outputs.append(_elements(node_data, _exit_node(succ_of, k.nodes)))
    return out, at_outputs, blocked, reordered

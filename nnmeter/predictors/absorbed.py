"""Kernels a whole model does not execute on their own: the runtime absorbs them.

The partitioner splits a model by the backend's fusion rules, which are detected on
small test graphs whose last op is the graph output. ORT (graph optimisation ALL)
rewrites a whole model further in two ways that such a test graph cannot show:

- **Activation folded into a convolution.** A standalone activation whose input is
  produced by a convolution with no activation of its own (``conv-bn``, ``dwconv-bn``,
  ``conv-bn-add``…), and read by nothing else, runs as that convolution's epilogue
  (``nchwc.Conv`` with ``activation=HardSwish``, or ``Sum`` + ``activation=Relu``).
  ORT does not fold it when the activation's output is a graph output, which is exactly
  the shape of the pair test (``conv->hswish``) and of the single-kernel model: so the
  fusion rules say "split" and the kernel data holds no fused type, while inside
  MobileNetV3 every ``conv-bn`` → ``hswish`` runs as one node. (ORT 1.32 on the
  measurement machine: ``conv → hswish → conv`` runs ``Conv[HardSwish]``, ``conv →
  hswish`` as the output runs ``Conv``, ``HardSigmoid``, ``Mul``.)
- **Duplicates merged.** Two activation or pooling nodes of the same op and attributes
  on the same tensor are one node after ORT's common-subexpression elimination
  (NASBench-201 cells apply ``relu`` to one node sum once per outgoing edge, and may
  average-pool it on two edges: a cell variant with 47 average pools, 32 of them
  distinct, spent 0.0755 ms in them inside the model, against 0.115 ms predicted for
  all 47 and 30 distinct stride-1 pools × 2.55 µs = 0.077 ms).

:func:`absorbed_kernels` names such kernels and the kernel each is absorbed into. The
predictor counts no time for them (a folded epilogue works on data already in
registers) and the layout pass lets the blocked layout flow through them
(:func:`nnmeter.predictors.layout.model_reorders`).

Examples
--------
>>> from nnmeter.ir import GraphBuilder
>>> from nnmeter.fusion.rules import FusionRules
>>> from nnmeter.partition import partition
>>> b = GraphBuilder("m", (1, 16, 8, 8))
>>> t = b.hswish(b.bn(b.conv(b.x, 16, 1, name="c"), name="bn"), name="h")
>>> g = b.build([b.conv(t, 16, 1, name="c2")])
>>> rules = FusionRules.from_decisions("ort-cpu", pairs={("conv", "bn"): True})
>>> ks = partition(g, rules)
>>> [k.type for k in ks]
['conv-bn', 'hswish', 'conv']
>>> from nnmeter.predictors.facts import device_facts
>>> absorbed_kernels(g, ks, device_facts({"runtime": "onnxruntime"}))
{1: 0}
>>> absorbed_kernels(g, ks, device_facts({"runtime": "mnn"}))
{}
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from nnmeter.predictors.facts import DeviceFacts

__all__ = ["absorbed_kernels"]

#: kernel families whose kernels can take a folded activation as their epilogue
_CONV_FAMILIES = ("conv", "gconv", "dwconv")

#: ops of a fused tail that are activations (the epilogue is taken)
_ACT_OPS = frozenset({"relu", "relu6", "hswish", "hsigmoid", "sigmoid", "swish", "tanh",
                      "leakyrelu", "gelu", "clip"})


def _single_input(graph_node: Any) -> Any:
    inputs = getattr(graph_node, "inputs", ())
    return inputs[0] if len(inputs) == 1 else None


def absorbed_kernels(graph: Any, kernels: Sequence[Any], facts: DeviceFacts) -> dict[int, int]:
    """Kernels of ``graph`` that the runtime of a device with ``facts`` runs inside
    another kernel.

    Parameters
    ----------
    graph : ModelGraph
    kernels : sequence of Kernel
        The graph's kernels in topological order (as the partitioner returns them).
    facts : DeviceFacts
        Which activations the runtime folds into convolutions and which weightless
        kernels it merges (:func:`nnmeter.predictors.facts.device_facts`).

    Returns
    -------
    dict
        Index of an absorbed kernel → index of the kernel it runs inside (always an
        earlier one). Empty when the backend absorbs nothing.
    """
    folded_types = facts.folded_activations
    merged_types = facts.merged_types
    if not (folded_types or merged_types):
        return {}
    node_data = graph.nx._node
    succ_of = graph.nx._succ
    outputs = {str(getattr(r, "node", r)) for r in getattr(graph, "outputs", ())}
    node2k = {n: i for i, k in enumerate(kernels) for n in k.nodes}
    absorbed: dict[int, int] = {}
    # (kernel type, its attributes, input tensor) → the kernel that computes it
    first_of: dict[tuple[str, Any], int] = {}
    for i, k in enumerate(kernels):
        if len(k.nodes) != 1 or k.type not in merged_types:
            continue
        name = k.nodes[0]
        ref = _single_input(node_data[name]["node"])
        if ref is None:
            continue
        attrs = getattr(node_data[name]["node"], "attrs", None)
        key = (k.type, attrs, (ref.node, getattr(ref, "port", 0)))
        if key in first_of:
            absorbed[i] = first_of[key]
            continue
        first_of[key] = i
        if k.type not in folded_types or name in outputs:
            continue
        p = node2k.get(ref.node)
        if p is None:
            continue
        producer = kernels[p]
        kt = producer.kernel_type
        if getattr(kt, "family", "") not in _CONV_FAMILIES \
                or _ACT_OPS.intersection(getattr(kt, "tail", ())):
            continue
        if ref.node in outputs:
            continue
        # every reader of the convolution's output (its exit node; a reader inside the
        # kernel fails the test too) is this activation or a duplicate merged into it
        readers = [node2k.get(s) for s in succ_of[ref.node]]
        if all(r is not None and kernels[r].type == k.type and len(kernels[r].nodes) == 1
               for r in readers):
            absorbed[i] = p
    return absorbed

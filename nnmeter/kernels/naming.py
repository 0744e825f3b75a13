"""Naming a fused op sequence: :func:`kernel_type_of`.

Rules, in order:

1. ``identity`` ops are dropped (always free).
2. Known multi-op blocks: squeeze-excite → ``se``; decomposed h-swish
   ``add(+3) → relu6|clip → mul(x) → div|mul(/6)`` (either order of the last two) →
   ``hswish``; decomposed h-sigmoid ``add(+3) → relu6|clip → div|mul`` → ``hsigmoid``;
   ``reshape → transpose → reshape`` → ``channelshuffle``.
3. ``reshape``/``flatten`` that are not the only op are dropped (the backend elided
   them into the kernel that produced their input).
4. The tail grammar ``head[-bn][-act][-add[-act]]`` for heads conv, dwconv,
   convtranspose and fc; ``bn[-act]``; ``add[-act]``; ``mul-add[-act]``.
   A matmul with its scale (``matmul`` → ``mul|div``) → ``matmul-scale``; a residual
   add into a layer norm → ``add-layernorm`` (see :mod:`nnmeter.kernels.attention`).
5. A single op whose type is registered (``relu``, ``maxpool``, ``concat``...).
6. Anything else is ``other``.

Examples
--------
>>> kernel_type_of(("conv", "bn", "relu"))
'conv-bn-relu'
>>> kernel_type_of(("gap", "flatten"))
'gap'
>>> kernel_type_of(("matmul", "mul"))
'matmul-scale'
>>> kernel_type_of(("pad",))
'other'
>>> kernel_type_of(("relu", "maxpool"))
'other'
"""

from __future__ import annotations

from collections.abc import Sequence

from nnmeter.ir.ops import ACTIVATIONS
from nnmeter.kernels._tail import parse_tail

__all__ = ["kernel_type_of", "block_type_of", "bn_equivalent", "TAIL_HEADS"]

TAIL_HEADS = {
    "conv": (True, True),
    "gconv": (True, True),  # a grouped conv's types (named by the predictor, not here)
    "dwconv": (True, True),
    "convtranspose": (True, True),
    "fc": (False, True),
    "bn": (False, False),
    "add": (False, False),
}

_SINGLE_TYPES = frozenset(ACTIVATIONS) | {
    "maxpool", "avgpool", "gap", "mul", "concat", "split", "channelshuffle",
    "reshape", "flatten", "transpose", "identity", "lrn", "matmul", "softmax", "layernorm",
    "gather",
}
_DENSE = ("conv", "fc")
_SIXTH = ("div", "mul")
_RELU6 = ("relu6", "clip")


def block_type_of(ops: Sequence[str]) -> str | None:
    """The block type (se, hswish, hsigmoid, channelshuffle) of ``ops``, or None."""
    ops = tuple(o for o in ops if o != "identity")
    core = tuple(o for o in ops if o not in ("reshape", "flatten"))
    if (len(core) == 6 and core[0] == "gap" and core[-1] == "mul" and core[1] in _DENSE
            and core[3] in _DENSE and core[2] in ACTIVATIONS and core[4] in ACTIVATIONS):
        return "se"
    if (len(core) == 5 and core[0] == "gap" and core[-1] == "mul" and core[1] in _DENSE
            and core[2] in _DENSE and core[3] in ACTIVATIONS):
        return "se"  # no inner activation
    if len(ops) == 4 and ops[0] == "add" and ops[1] in _RELU6 and (
            (ops[2] == "mul" and ops[3] in _SIXTH) or (ops[2] in _SIXTH and ops[3] == "mul")):
        return "hswish"
    if len(ops) == 3 and ops[0] == "add" and ops[1] in _RELU6 and ops[2] in _SIXTH:
        return "hsigmoid"
    if ops == ("reshape", "transpose", "reshape"):
        return "channelshuffle"
    return None


def kernel_type_of(ops: Sequence[str]) -> str:
    """The kernel type name of a fused op sequence (topological order); see module doc."""
    ops = tuple(o for o in ops if o != "identity")
    if not ops:
        return "identity"
    block = block_type_of(ops)
    if block is not None:
        return block
    if len(ops) > 1:
        ops = tuple(o for o in ops if o not in ("reshape", "flatten")) or ops[:1]
    head, rest = ops[0], ops[1:]
    if head == "matmul" and len(ops) == 2 and rest[0] in _SIXTH:
        return "matmul-scale"  # attention scores and their 1/sqrt(d) (a scalar: checked
        # when the config is read)
    if ops == ("add", "layernorm"):
        return "add-layernorm"
    if head == "mul" and rest and rest[0] == "add":
        # a gate's multiply, the residual add and its activation (OpenVINO's element-wise
        # chains); a multiply with an activation alone stays apart
        return "-".join(ops) if parse_tail(rest, allow_bn=False) is not None else "other"
    if head in TAIL_HEADS:
        allow_bn, allow_add = TAIL_HEADS[head]
        if parse_tail(rest, allow_bn=allow_bn, allow_add=allow_add) is not None:
            return "-".join(ops)
        return "other"
    if len(ops) == 1 and head in _SINGLE_TYPES:
        return head
    return "other"


def bn_equivalent(type_name: str) -> str | None:
    """The same kernel with the batch-norm after its head toggled: ``conv-relu6`` ↔
    ``conv-bn-relu6``; None for types without a head that takes one.

    A backend that folds a batch-norm into the preceding convolution at load time runs
    both as one kernel with the same weights and shapes; a model whose exporter already
    folded the norm (torch.onnx in eval mode, the TFLite converter) has the first form,
    nnmeter's own exports the second.

    >>> bn_equivalent("conv-relu6"), bn_equivalent("dwconv-bn"), bn_equivalent("dwconv")
    ('conv-bn-relu6', 'dwconv', 'dwconv-bn')
    >>> bn_equivalent("fc-relu") is None, bn_equivalent("bn-relu") is None
    (True, True)
    """
    parts = type_name.split("-")
    head = parts[0]
    if head not in TAIL_HEADS or not TAIL_HEADS[head][0]:
        return None
    if len(parts) > 1 and parts[1] == "bn":
        return "-".join([head, *parts[2:]])
    return "-".join([head, "bn", *parts[1:]])

"""Building blocks shared by the zoo's families (conv-bn-act, inverted bottlenecks, heads).

Every helper takes a :class:`~nnmeter.ir.builder.GraphBuilder`, an input Ref and a
readable name prefix (``"features.3"``), and returns the output Ref. Convolutions
followed by batch norm carry no bias, as in torchvision.
"""

from __future__ import annotations

from itertools import islice
from typing import Any

import numpy as np

from nnmeter.ir.builder import GraphBuilder
from nnmeter.ir.graph import ModelGraph, Ref

__all__ = ["conv_bn_act", "mbconv", "classifier", "MBBlock", "build_mobile",
           "sample_mb_stages"]

#: One inverted-bottleneck block: (kernel, expanded_channels, out_channels, stride,
#: squeeze_excite, activation). ``expanded == in_channels`` means no expansion conv.
MBBlock = tuple[int, int, int, int, bool, str]


def conv_bn_act(b: GraphBuilder, x: Ref, out_channels: int, kernel: int = 3, stride: int = 1,
                *, name: str, act: str | None = "relu", groups: int = 1, bn: bool = True,
                bn_eps: float = 1e-5, pads: tuple[int, int, int, int] | None = None) -> Ref:
    """conv (or dwconv when ``groups`` equals both channel counts) → bn → activation."""
    cin = b.shape(x)[1]
    if groups > 1 and groups == cin == out_channels:
        y = b.dwconv(x, kernel, stride, bias=not bn, pads=pads, name=f"{name}.conv")
    else:
        y = b.conv(x, out_channels, kernel, stride, groups=groups, bias=not bn, pads=pads,
                   name=f"{name}.conv")
    if bn:
        y = b.bn(y, eps=bn_eps, name=f"{name}.bn")
    if act:
        y = b.act(y, act, name=f"{name}.{act}")
    return y


def squeeze_excite(b: GraphBuilder, x: Ref, squeeze: int, *, name: str,
                   inner: str = "relu", gate: str = "hsigmoid") -> Ref:
    """torchvision's SqueezeExcitation: gap → 1x1 conv → act → 1x1 conv → gate → mul."""
    c = b.shape(x)[1]
    s = b.gap(x, name=f"{name}.gap")
    s = b.conv(s, squeeze, 1, name=f"{name}.fc1")
    s = b.act(s, inner, name=f"{name}.{inner}")
    s = b.conv(s, c, 1, name=f"{name}.fc2")
    s = b.act(s, gate, name=f"{name}.{gate}")
    return b.mul(x, s, name=f"{name}.mul")


def mbconv(b: GraphBuilder, x: Ref, block: MBBlock, *, name: str, bn_eps: float = 1e-5,
           se_divisor: int = 8) -> Ref:
    """Inverted residual block (MobileNetV2/V3, MnasNet, ProxylessNAS).

    expand 1x1 (skipped when expanded == in) → depthwise k×k → [SE] → project 1x1,
    with a residual add when stride is 1 and in == out channels.
    """
    kernel, expanded, out, stride, se, act = block
    cin = b.shape(x)[1]
    y = x
    if expanded != cin:
        y = conv_bn_act(b, y, expanded, 1, name=f"{name}.expand", act=act, bn_eps=bn_eps)
    y = conv_bn_act(b, y, expanded, kernel, stride, groups=expanded, name=f"{name}.dw",
                    act=act, bn_eps=bn_eps)
    if se:
        from nnmeter.zoo.base import make_divisible

        y = squeeze_excite(b, y, make_divisible(expanded // 4, se_divisor), name=f"{name}.se")
    y = conv_bn_act(b, y, out, 1, name=f"{name}.project", act=None, bn_eps=bn_eps)
    if stride == 1 and cin == out:
        y = b.add_(x, y, name=f"{name}.add")
    return y


def classifier(b: GraphBuilder, x: Ref, classes: int, *, hidden: tuple[int, ...] = (),
               hidden_act: str = "relu", name: str = "classifier") -> Ref:
    """flatten → [fc → act]* → fc(classes). Dropout is an identity at inference: omitted."""
    y = b.flatten(x, name=f"{name}.flatten")
    for i, h in enumerate(hidden):
        y = b.fc(y, h, name=f"{name}.fc{i}")
        y = b.act(y, hidden_act, name=f"{name}.{hidden_act}{i}")
    return b.fc(y, classes, name=f"{name}.fc")


#: inverted bottlenecks built before, by everything their nodes depend on:
#: (name, input Ref, input shape, block, bn_eps) -> (their nodes, the output Ref)
_BLOCKS: dict[tuple[Any, ...], tuple[tuple[Any, ...], Ref]] = {}
#: blocks kept before the memo is emptied
BLOCKS_LIMIT = 20_000


def _reused_mbconv(b: GraphBuilder, x: Ref, block: MBBlock, name: str, bn_eps: float) -> Ref:
    """:func:`mbconv` into ``b``, reusing the nodes of a block built before with the same
    name, input and parameters (nodes are immutable, so graphs may share them).

    A search mutates one block of a network at a time: the others come back with the
    same inputs, and inserting their nodes costs a tenth of building them (shape
    inference and a new Node per op); graphs that share nodes are also compared by
    identity in the predictor's memos."""
    g = b.graph
    key = (name, x, g.shape_of(x), block, bn_eps)
    hit = _BLOCKS.get(key)
    if hit is not None and hit[0][0].name not in g:
        for node in hit[0]:
            g._insert(node)
        return hit[1]
    before = len(g)
    out = mbconv(b, x, block, name=name, bn_eps=bn_eps)
    nodes = tuple(islice((d["node"] for d in g.nx._node.values()), before, None))
    if len(_BLOCKS) >= BLOCKS_LIMIT:
        _BLOCKS.clear()
    _BLOCKS[key] = (nodes, out)
    return out


def build_mobile(model_name: str, *, resolution: int, stem_channels: int, stem_act: str,
                 blocks: tuple[MBBlock, ...], last_channels: int, last_act: str,
                 hidden: int = 0, hidden_act: str = "hswish", classes: int = 1000,
                 bn_eps: float = 1e-5) -> ModelGraph:
    """A MobileNetV2-style network: stem conv 3x3/2 → inverted bottlenecks → 1x1 conv →
    global pooling → [fc hidden → act] → fc(classes)."""
    b = GraphBuilder(model_name, (1, 3, resolution, resolution))
    y = conv_bn_act(b, b.x, stem_channels, 3, 2, name="features.0", act=stem_act,
                    bn_eps=bn_eps)
    for i, blk in enumerate(blocks):
        y = _reused_mbconv(b, y, blk, f"features.{i + 1}", bn_eps)
    y = conv_bn_act(b, y, last_channels, 1, name=f"features.{len(blocks) + 1}", act=last_act,
                    bn_eps=bn_eps)
    y = b.gap(y, name="avgpool")
    y = classifier(b, y, classes, hidden=(hidden,) if hidden else (), hidden_act=hidden_act)
    return b.build([y], validate=False)


def sample_mb_stages(rng: np.random.Generator, stages: list[dict[str, Any]], *,
                     in_channels: int, divisor: int = 8, expand_range: tuple[int, int] = (1, 8),
                     kernels: tuple[int, ...] = (3, 5, 7), max_extra_repeats: int = 1,
                     ) -> tuple[MBBlock, ...]:
    """Sample inverted-bottleneck blocks stage by stage.

    Each stage dict has ``out`` (published channels), ``repeats``, ``stride``, ``se``,
    ``act`` and optionally ``fixed_expand`` (keep that expansion ratio, e.g. the t=1
    first stage) and ``fixed_repeats`` (keep ``repeats``). Per stage: channels scaled 0.2-1.8x and snapped to ``divisor``;
    repeats in [max(1, n-1), n+max_extra_repeats]; one kernel from ``kernels`` and one
    expansion ratio from ``expand_range`` per block.
    """
    from nnmeter.zoo.base import sample_scales, scale_channels

    scales = sample_scales(rng, len(stages))
    out: list[MBBlock] = []
    cin = in_channels
    for st, scale in zip(stages, scales):
        cout = scale_channels(st["out"], scale, divisor)
        n = st["repeats"]
        if st.get("fixed_repeats"):
            reps = n
        else:
            reps = int(rng.integers(max(1, n - 1), n + max_extra_repeats + 1))
        for r in range(reps):
            k = int(kernels[int(rng.integers(len(kernels)))])
            if st.get("fixed_expand") is not None:
                t = st["fixed_expand"]
            else:
                t = int(rng.integers(expand_range[0], expand_range[1] + 1))
            expanded = cin if t == 1 else scale_channels(cin * t, 1.0, divisor)
            out.append((k, expanded, cout, st["stride"] if r == 0 else 1, bool(st.get("se")),
                        st["act"]))
            cin = cout
    return tuple(out)

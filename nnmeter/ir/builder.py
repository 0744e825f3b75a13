"""GraphBuilder: write models as code, with shapes inferred as each node is added.

Used by the zoo, the fusion test cases and tests. Every method returns the Ref of
the new tensor, so calls chain like a functional model definition.

Examples
--------
>>> b = GraphBuilder("block", input_shape=(1, 16, 28, 28))
>>> y = b.conv(b.x, 32, kernel=3, stride=2)
>>> y = b.bn(y)
>>> y = b.relu(y)
>>> g = b.build([y])
>>> g[y.node].output_shape
(1, 32, 14, 14)
"""

from __future__ import annotations

from collections.abc import Sequence

from nnmeter.ir.graph import ModelGraph, Node, Ref, as_ref
from nnmeter.ir.ops import (
    ATTRS_BY_OP, BNAttrs, ChannelShuffleAttrs, ClipAttrs, ConcatAttrs, ConvAttrs, EltwiseAttrs,
    FCAttrs, FlattenAttrs, GapAttrs, LayerNormAttrs, NoAttrs, PadAttrs, PoolAttrs,
    ReshapeAttrs, ResizeAttrs, SoftmaxAttrs, SplitAttrs, TransposeAttrs,
)
from nnmeter.ir.shapes import infer_node

__all__ = ["GraphBuilder", "same_pads"]


def _pair(v: int | Sequence[int]) -> tuple[int, int]:
    return (int(v), int(v)) if isinstance(v, int) else (int(v[0]), int(v[1]))


def same_pads(kernel: int | Sequence[int], dilation: int = 1) -> tuple[int, int, int, int]:
    """Symmetric (top, left, bottom, right) pads keeping H, W at stride 1 for odd kernels."""
    kh, kw = _pair(kernel)
    ph, pw = dilation * (kh - 1) // 2, dilation * (kw - 1) // 2
    return (ph, pw, dilation * (kh - 1) - ph, dilation * (kw - 1) - pw)


class _Probe:
    """What shape inference reads of a node, before the node exists (a frozen Node costs
    more to make, and the builder makes the real one once its shapes are known)."""

    __slots__ = ("name", "op", "attrs", "inputs", "input_shapes", "output_shapes")

    def __init__(self, name: str, op: str, attrs: object, inputs: tuple, ins: tuple) -> None:
        self.name, self.op, self.attrs, self.inputs = name, op, attrs, inputs
        self.input_shapes, self.output_shapes = ins, ()


class GraphBuilder:
    """Build a ModelGraph node by node. ``self.x`` is the (first) input."""

    def __init__(self, name: str = "model", input_shape: Sequence[int] | None = (1, 3, 224, 224),
                 *, input_name: str = "input", dtype: str = "float32") -> None:
        self.graph = ModelGraph(name, dtype=dtype)
        self._counts: dict[str, int] = {}
        self.x: Ref | None = None
        if input_shape is not None:
            self.x = self.graph.add_input(input_name, tuple(input_shape))

    def input(self, name: str, shape: Sequence[int]) -> Ref:
        """Add another graph input."""
        return self.graph.add_input(name, tuple(shape))

    def _name(self, op: str, name: str | None) -> str:
        if name:
            return name
        while True:
            k = self._counts.get(op, 0) + 1
            self._counts[op] = k
            cand = f"{op}_{k}"
            if cand not in self.graph:
                return cand

    def add(self, op: str, inputs: Sequence[Ref], attrs=None, *, name: str | None = None,
            ports: int = 1) -> Ref | list[Ref]:
        """Add any op; returns its Ref (or a list of Refs when ``ports`` > 1)."""
        node_name = self._name(op, name)
        g = self.graph
        cls = ATTRS_BY_OP.get(op)
        refs = tuple(as_ref(i) for i in inputs)
        if (cls is None or (attrs is not None and not isinstance(attrs, cls))
                or node_name in g or any(r.node not in g for r in refs)):
            # the slow path, for its errors: add_node says what is wrong
            g.add_node(node_name, op, attrs, refs)
        if attrs is None:
            try:
                attrs = cls()
            except TypeError:
                g.add_node(node_name, op, None, refs)  # raises, naming the attributes
        ins = tuple(g.shape_of(r) for r in refs)
        # shapes first, then one add_node with them (a NAS loop builds many graphs)
        outs = tuple(tuple(int(d) for d in s)
                     for s in infer_node(_Probe(node_name, op, attrs, refs, ins), ins))
        # every add_node check was made above: store it directly
        g._insert(Node(node_name, op, attrs, refs, ins, outs))
        if len(outs) > 1:
            return [Ref(node_name, i) for i in range(len(outs))]
        return Ref(node_name, 0)

    def shape(self, ref: Ref) -> tuple[int, ...]:
        return self.graph.shape_of(ref)

    # -- convolutions and dense ------------------------------------------------
    def conv(self, x: Ref, out_channels: int, kernel: int | Sequence[int] = 3,
             stride: int | Sequence[int] = 1, *, groups: int = 1, bias: bool = True,
             pads: Sequence[int] | None = None, dilation: int = 1,
             name: str | None = None) -> Ref:
        k = _pair(kernel)
        attrs = ConvAttrs(
            out_channels=out_channels, kernel=k, stride=_pair(stride),
            pads=tuple(pads) if pads is not None else same_pads(k, dilation),
            dilation=(dilation, dilation), groups=groups, bias=bias,
        )
        return self.add("conv", [x], attrs, name=name)

    def dwconv(self, x: Ref, kernel: int | Sequence[int] = 3, stride: int | Sequence[int] = 1,
               *, bias: bool = True, pads: Sequence[int] | None = None,
               name: str | None = None) -> Ref:
        c = self.shape(x)[1]
        k = _pair(kernel)
        attrs = ConvAttrs(
            out_channels=c, kernel=k, stride=_pair(stride),
            pads=tuple(pads) if pads is not None else same_pads(k), groups=c, bias=bias,
        )
        return self.add("dwconv", [x], attrs, name=name)

    def convtranspose(self, x: Ref, out_channels: int, kernel: int = 3, stride: int = 2,
                      *, bias: bool = True, name: str | None = None) -> Ref:
        p = (kernel - 1) // 2
        attrs = ConvAttrs(out_channels=out_channels, kernel=(kernel, kernel),
                          stride=(stride, stride), pads=(p, p, p, p), bias=bias,
                          output_padding=(stride - 1, stride - 1) if kernel % 2 else (0, 0))
        return self.add("convtranspose", [x], attrs, name=name)

    def fc(self, x: Ref, out_features: int, *, bias: bool = True, name: str | None = None) -> Ref:
        return self.add("fc", [x], FCAttrs(out_features=out_features, bias=bias), name=name)

    # -- normalisation and activations ----------------------------------------
    def bn(self, x: Ref, *, eps: float = 1e-5, name: str | None = None) -> Ref:
        return self.add("bn", [x], BNAttrs(epsilon=eps), name=name)

    def layernorm(self, x: Ref, *, name: str | None = None) -> Ref:
        return self.add("layernorm", [x], LayerNormAttrs(), name=name)

    def act(self, x: Ref, kind: str, *, name: str | None = None) -> Ref:
        """Any activation from the vocabulary (relu, relu6, hswish, swish, ...)."""
        return self.add(kind, [x], NoAttrs(), name=name)

    def relu(self, x: Ref, *, name: str | None = None) -> Ref:
        return self.act(x, "relu", name=name)

    def relu6(self, x: Ref, *, name: str | None = None) -> Ref:
        return self.act(x, "relu6", name=name)

    def hswish(self, x: Ref, *, name: str | None = None) -> Ref:
        return self.act(x, "hswish", name=name)

    def hsigmoid(self, x: Ref, *, name: str | None = None) -> Ref:
        return self.act(x, "hsigmoid", name=name)

    def sigmoid(self, x: Ref, *, name: str | None = None) -> Ref:
        return self.act(x, "sigmoid", name=name)

    def swish(self, x: Ref, *, name: str | None = None) -> Ref:
        return self.act(x, "swish", name=name)

    def clip(self, x: Ref, lo: float, hi: float, *, name: str | None = None) -> Ref:
        return self.add("clip", [x], ClipAttrs(lo, hi), name=name)

    def softmax(self, x: Ref, axis: int = -1, *, name: str | None = None) -> Ref:
        return self.add("softmax", [x], SoftmaxAttrs(axis=axis), name=name)

    # -- elementwise ----------------------------------------------------------
    def add_(self, a: Ref, b: Ref, *, name: str | None = None) -> Ref:
        """Elementwise a + b (named ``add_`` because :meth:`add` adds any op)."""
        return self.add("add", [a, b], EltwiseAttrs(), name=name)

    def mul(self, a: Ref, b: Ref, *, name: str | None = None) -> Ref:
        return self.add("mul", [a, b], EltwiseAttrs(), name=name)

    def eltwise_const(self, op: str, x: Ref, const_shape: Sequence[int], *,
                      name: str | None = None) -> Ref:
        """add/sub/mul/div of ``x`` with a constant of ``const_shape``."""
        return self.add(op, [x], EltwiseAttrs(const_shape=tuple(const_shape)), name=name)

    # -- pooling --------------------------------------------------------------
    def maxpool(self, x: Ref, kernel: int = 2, stride: int | None = None, *,
                pads: Sequence[int] = (0, 0, 0, 0), ceil_mode: bool = False,
                name: str | None = None) -> Ref:
        attrs = PoolAttrs(kernel=_pair(kernel), stride=_pair(stride or kernel),
                          pads=tuple(pads), ceil_mode=ceil_mode)
        return self.add("maxpool", [x], attrs, name=name)

    def avgpool(self, x: Ref, kernel: int = 2, stride: int | None = None, *,
                pads: Sequence[int] = (0, 0, 0, 0), ceil_mode: bool = False,
                count_include_pad: bool = False, name: str | None = None) -> Ref:
        attrs = PoolAttrs(kernel=_pair(kernel), stride=_pair(stride or kernel),
                          pads=tuple(pads), ceil_mode=ceil_mode,
                          count_include_pad=count_include_pad)
        return self.add("avgpool", [x], attrs, name=name)

    def gap(self, x: Ref, *, keepdims: bool = True, name: str | None = None) -> Ref:
        return self.add("gap", [x], GapAttrs(keepdims=keepdims), name=name)

    # -- data movement --------------------------------------------------------
    def concat(self, xs: Sequence[Ref], axis: int = 1, *, name: str | None = None) -> Ref:
        return self.add("concat", list(xs), ConcatAttrs(axis=axis), name=name)

    def split(self, x: Ref, sizes: Sequence[int], axis: int = 1, *,
              name: str | None = None) -> list[Ref]:
        out = self.add("split", [x], SplitAttrs(axis=axis, sizes=tuple(sizes)), name=name,
                       ports=len(sizes))
        return out if isinstance(out, list) else [out]

    def channelshuffle(self, x: Ref, groups: int = 2, *, name: str | None = None) -> Ref:
        return self.add("channelshuffle", [x], ChannelShuffleAttrs(groups=groups), name=name)

    def reshape(self, x: Ref, shape: Sequence[int], *, name: str | None = None) -> Ref:
        return self.add("reshape", [x], ReshapeAttrs(shape=tuple(shape)), name=name)

    def flatten(self, x: Ref, axis: int = 1, *, name: str | None = None) -> Ref:
        return self.add("flatten", [x], FlattenAttrs(axis=axis), name=name)

    def transpose(self, x: Ref, perm: Sequence[int], *, name: str | None = None) -> Ref:
        return self.add("transpose", [x], TransposeAttrs(perm=tuple(perm)), name=name)

    def pad(self, x: Ref, pads: Sequence[int], *, name: str | None = None) -> Ref:
        return self.add("pad", [x], PadAttrs(pads=tuple(pads)), name=name)

    def resize(self, x: Ref, size: Sequence[int], mode: str = "nearest", *,
               name: str | None = None) -> Ref:
        return self.add("resize", [x], ResizeAttrs(size=_pair(size), mode=mode), name=name)

    # -- common blocks --------------------------------------------------------
    def se(self, x: Ref, reduction: int = 4, *, gate: str = "hsigmoid",
           inner_act: str = "relu", name: str | None = None) -> Ref:
        """Squeeze-excite: gap → conv1x1 → act → conv1x1 → gate → mul with x."""
        c = self.shape(x)[1]
        prefix = name or self._name("se", None)
        s = self.gap(x, name=f"{prefix}_gap")
        s = self.conv(s, max(1, c // reduction), 1, name=f"{prefix}_fc1")
        s = self.act(s, inner_act, name=f"{prefix}_act")
        s = self.conv(s, c, 1, name=f"{prefix}_fc2")
        s = self.act(s, gate, name=f"{prefix}_gate")
        return self.mul(x, s, name=f"{prefix}_mul")

    def build(self, outputs: Sequence[Ref] | None = None, *, validate: bool = True) -> ModelGraph:
        """Finish: declare outputs (default: the last node) and validate."""
        g = self.graph
        if outputs is None:
            last = g.topological_nodes()[-1]
            outputs = [Ref(last.name, 0)]
        g.set_outputs(outputs)
        if validate:
            g.validate()
        return g

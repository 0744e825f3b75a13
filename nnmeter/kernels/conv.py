"""The ``conv`` kernel family: a (grouped) convolution with its fused tail.

Type names carry the tail: ``conv``, ``conv-bn``, ``conv-bn-relu``, ``conv-bn-add-relu``...
(see :mod:`nnmeter.kernels._tail`). Features (nn-Meter's, plus memory traffic and the
tail flags): [H, W, CIN, COUT, K, S, FLOPs, params, bytes, tail flags...], H and W of
the kernel's *input*.

Examples
--------
>>> from nnmeter.kernels import KERNEL_TYPES
>>> kt = KERNEL_TYPES.get("conv-bn-relu")
>>> cfg = kt.config_cls(h=28, w=28, cin=64, cout=128, kernel=3, stride=1)
>>> [float(v) for v in kt.features(cfg)[:6]]
[28.0, 28.0, 64.0, 128.0, 3.0, 1.0]
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from nnmeter.ir.builder import GraphBuilder, same_pads
from nnmeter.ir.graph import Node, Ref
from nnmeter.kernels._tail import HeadCost, TailKernelType, register_family
from nnmeter.kernels.base import conv_output_hw, positive_ints, topo_nodes

__all__ = ["ConvConfig", "ConvKernel", "GroupedConvConfig", "GroupedConvKernel", "is_grouped"]


@dataclass(frozen=True)
class ConvConfig:
    """A convolution on a (1, cin, h, w) input. ``pads`` None means 'same' padding."""

    h: int
    w: int
    cin: int
    cout: int
    kernel: int = 3
    stride: int = 1
    groups: int = 1
    pads: tuple[int, int, int, int] | None = None
    #: the kernel's width when it differs from its height (``kernel``): Inception's
    #: 1x7 and 7x1; None for a square kernel
    kernel_w: int | None = None

    @property
    def kernel_hw(self) -> tuple[int, int]:
        return (self.kernel, self.kernel if self.kernel_w is None else self.kernel_w)


class ConvKernel(TailKernelType):
    family = "conv"
    config_cls = ConvConfig
    head_feature_names = ("H", "W", "CIN", "COUT", "K", "S")

    def head_config(self, head: Node) -> ConvConfig:
        _, cin, h, w = head.input_shape
        a = head.attrs
        pads = tuple(a.pads)
        kh, kw = a.kernel
        return ConvConfig(h=h, w=w, cin=cin, cout=a.out_channels, kernel=kh,
                          stride=a.stride[0], groups=a.groups,
                          pads=None if pads == same_pads(a.kernel) else pads,
                          kernel_w=None if kw == kh else kw)

    def head_features(self, config: ConvConfig) -> list[float]:
        # a kh x kw kernel reads as the square one of the same area (its FLOPs, params
        # and bytes features are exact)
        kh, kw = config.kernel_hw
        k = kh if kh == kw else (kh * kw) ** 0.5
        return [config.h, config.w, config.cin, config.cout, k, config.stride]

    def input_shape(self, config: ConvConfig) -> tuple[int, ...]:
        return (1, config.cin, config.h, config.w)

    def head_cost(self, config: ConvConfig) -> HeadCost | None:
        c = config
        kh, kw = c.kernel_hw
        if not positive_ints(c.h, c.w, c.cin, c.cout, kh, kw, c.stride, c.groups) or \
                c.cin % c.groups:
            return None
        out = conv_output_hw(c.h, c.w, (kh, kw), c.stride, c.pads)
        if out is None:
            return None
        ho, wo = out
        weights = c.cout * (c.cin // c.groups) * kh * kw
        params = weights + c.cout  # with bias
        return 2 * weights * ho * wo, params, params, c.cin * c.h * c.w, (1, c.cout, ho, wo)

    def build_head(self, b: GraphBuilder, config: ConvConfig) -> Ref:
        return b.conv(b.x, config.cout, config.kernel_hw, config.stride, groups=config.groups,
                      pads=config.pads, name="conv")


register_family(ConvKernel, [(), ("bn",), ("relu",), ("bn", "relu"), ("bn", "relu6"),
                             ("bn", "hswish"), ("bn", "swish"), ("bn", "add"),
                             ("bn", "add", "relu"), ("relu6",), ("hswish",), ("add",),
                             ("add", "relu")])



@dataclass(frozen=True)
class GroupedConvConfig:
    """A grouped convolution on a (1, groups * cin_g, h, w) input: ``groups`` groups of
    ``cin_g`` input and ``cout_g`` output channels each (so every sampled config is a
    valid one). ``pads`` None means 'same' padding."""

    h: int
    w: int
    groups: int
    cin_g: int
    cout_g: int
    kernel: int = 3
    stride: int = 1
    pads: tuple[int, int, int, int] | None = None
    kernel_w: int | None = None

    @property
    def cin(self) -> int:
        return self.groups * self.cin_g

    @property
    def cout(self) -> int:
        return self.groups * self.cout_g

    @property
    def kernel_hw(self) -> tuple[int, int]:
        return (self.kernel, self.kernel if self.kernel_w is None else self.kernel_w)

    def dense(self) -> ConvConfig:
        """The same convolution as a :class:`ConvConfig` (with its ``groups``)."""
        return ConvConfig(h=self.h, w=self.w, cin=self.cin, cout=self.cout, kernel=self.kernel,
                          stride=self.stride, groups=self.groups, pads=self.pads,
                          kernel_w=self.kernel_w)

    @classmethod
    def of(cls, c: ConvConfig) -> "GroupedConvConfig":
        """``c`` (a convolution with 1 < groups < cin that divides its channels) as a
        grouped config."""
        g = int(c.groups)
        return cls(h=c.h, w=c.w, groups=g, cin_g=c.cin // g, cout_g=c.cout // g,
                   kernel=c.kernel, stride=c.stride, pads=c.pads, kernel_w=c.kernel_w)


class GroupedConvKernel(ConvKernel):
    """A grouped convolution (1 < groups < channels: RegNet, ResNeXt, ShuffleNet V1,
    Caffe's AlexNet) with its fused tail, for predictors with grouped data of their own.

    The partitioner types every convolution by its ops (``conv-bn-relu``); a predictor
    whose dataset holds ``gconv-*`` rows renames its grouped kernels to these types
    (:meth:`nnmeter.predictors.model.LatencyPredictor.kernels`). Runtimes run a grouped
    convolution as one small dense convolution per group, much slower per MAC than one
    dense convolution when the groups are narrow, so the groups and the channels per
    group are features of their own. The zoo has no grouped convolution: the sampling
    prior of these types is :mod:`nnmeter.sampling.synthetic`."""

    family = "gconv"
    config_cls = GroupedConvConfig
    head_feature_names = ("H", "W", "CIN", "COUT", "K", "S", "G", "CIN_G", "COUT_G")

    def head_config(self, head: Node) -> GroupedConvConfig:
        return GroupedConvConfig.of(super().head_config(head))

    def head_features(self, config: GroupedConvConfig) -> list[float]:
        return super().head_features(config.dense()) + [config.groups, config.cin_g,
                                                        config.cout_g]

    def input_shape(self, config: GroupedConvConfig) -> tuple[int, ...]:
        return (1, config.cin, config.h, config.w)

    def head_cost(self, config: GroupedConvConfig) -> HeadCost | None:
        if not positive_ints(config.groups, config.cin_g, config.cout_g):
            return None
        return super().head_cost(config.dense())

    def build_head(self, b: GraphBuilder, config: GroupedConvConfig) -> Ref:
        return super().build_head(b, config.dense())

    def config_from_nodes(self, graph: Any, names: Any) -> GroupedConvConfig:
        # the IR op of a grouped convolution is ``conv`` (there is no ``gconv`` op)
        return self.head_config(next(n for n in topo_nodes(graph, names) if n.op == "conv"))


#: tails a grouped convolution takes (those of the dense one)
GROUPED_TAILS = [(), ("bn",), ("relu",), ("bn", "relu"), ("bn", "relu6"), ("bn", "add"),
                 ("bn", "add", "relu"), ("relu6",), ("add",), ("add", "relu")]
register_family(GroupedConvKernel, GROUPED_TAILS)


def is_grouped(config: Any) -> bool:
    """True for a convolution config with 1 < groups < cin whose groups divide both
    channel counts (neither dense nor depthwise)."""
    g = int(getattr(config, "groups", 1) or 1)
    cin, cout = int(getattr(config, "cin", 0) or 0), int(getattr(config, "cout", 0) or 0)
    return 1 < g < cin and cin % g == 0 and cout % g == 0

"""MobileViT (Mehta and Rastegari, ICLR 2022), as Apple's ml-cvnets and timm's
``mobilevit_xxs`` / ``_xs`` / ``_s``.

A MobileNetV2 body (inverted residuals with SiLU, written ``swish`` in the IR) whose
last three stages each start with a stride-2 inverted residual followed by a
MobileViT block:

    conv 3x3-bn-swish → conv 1x1 to D (no bias) → unfold → transformer blocks →
    layernorm → fold → conv 1x1 back to C-bn-swish → concat with the block input →
    conv 3x3 (2C → C)-bn-swish

*Unfold* turns the (1, D, H, W) map into P = 2×2 token sets of N = HW/P tokens,
(P, N, D), with the reshapes and transposes of ml-cvnets (every tensor rank 4 or
less): reshape (D·H/2, 2, W/2, 2) → transpose (0, 2, 1, 3) → reshape (1, D, N, P) →
transpose (0, 3, 2, 1) → reshape (P, N, D). *Fold* is the same in reverse. The
transformer blocks are pre-norm with a fused qkv ``fc``, 4 heads and a SiLU MLP of
twice the width (see :mod:`nnmeter.zoo._transformer`). The head is conv 1x1 (4× the
last stage's channels)-bn-swish → global pooling → fc.

Base config: MobileViT-XXS at 256x256: 1,272,033 params and 0.407 G multiply-adds
(timm's model card: 1.3 M params, 0.4 GMACs; paper, Table 1: 1.3 M params); 9 of
those parameters are the attention-scale scalars, one per transformer block.
``presets()`` adds MobileViT-XS (2,317,857 params, 1.03 G multiply-adds; timm: 2.3 M,
1.1 G) and -S (5,578,641, 2.00 G; timm: 5.6 M, 2.0 G).

The resolution must be a multiple of 64: the last stage runs at 1/32 of it and
its 2×2 patches must tile the map (ml-cvnets resizes the map otherwise; the
IR has no such op in this family).

This family is opt-in: it is in :data:`nnmeter.zoo.TRANSFORMER_FAMILIES`, not in the
default CNN list :data:`nnmeter.zoo.FAMILY_NAMES`.

Examples
--------
>>> fam = MobileViTFamily()
>>> g = fam.build(fam.base_config())
>>> g.shape_of(g.outputs[0])
(1, 1000)
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from nnmeter.ir.builder import GraphBuilder
from nnmeter.ir.graph import ModelGraph, Ref
from nnmeter.zoo._blocks import MBBlock, classifier, conv_bn_act, mbconv
from nnmeter.zoo._transformer import encoder_block
from nnmeter.zoo.base import Family, make_divisible

__all__ = ["MobileViTConfig", "MobileViTFamily", "MViTStage"]

#: One MobileViT stage: (expanded channels of its stride-2 inverted residual, out
#: channels C, transformer width D, transformer depth, MLP hidden width).
MViTStage = tuple[int, int, int, int, int]

_ACT = "swish"
_RESOLUTIONS = (192, 256)
_WIDTH_SCALES = (0.75, 1.0, 1.25)
#: Expansion ratios of the published models (XXS 2, XS and S 4).
_EXPAND_RATIOS = (2, 4)

# Published layouts (ml-cvnets configs): expand ratio; (out, repeats) of the two
# MobileNetV2 stages; (out, D, depth) of the three MobileViT stages; last channels.
_LAYOUTS = {
    "mobilevit_xxs": (2, ((16, 1), (24, 3)), ((48, 64, 2), (64, 80, 4), (80, 96, 3)), 320),
    "mobilevit_xs": (4, ((32, 1), (48, 3)), ((64, 96, 2), (80, 120, 4), (96, 144, 3)), 384),
    "mobilevit_s": (4, ((32, 1), (64, 3)), ((96, 144, 2), (128, 192, 4), (160, 240, 3)), 640),
}


def _expanded(cin: int, ratio: int) -> int:
    return make_divisible(cin * ratio, 8)


def _layout(expand: int | tuple[int, ...], mv2: tuple[tuple[int, int], ...],
            vit: tuple[tuple[int, int, int], ...], stem: int = 16,
            ) -> tuple[tuple[MBBlock, ...], tuple[MViTStage, ...]]:
    """Blocks of a layout. ``expand`` is one ratio for every inverted residual, or one
    per inverted residual in order (the MobileNetV2 blocks, then each stage's first)."""
    n_blocks = sum(r for _, r in mv2) + len(vit)
    ratios = (expand,) * n_blocks if isinstance(expand, int) else tuple(expand)
    if len(ratios) != n_blocks:
        raise ValueError(f"{len(ratios)} expand ratios for {n_blocks} inverted residuals")
    it = iter(ratios)
    blocks: list[MBBlock] = []
    cin = stem
    for i, (out, repeats) in enumerate(mv2):
        for r in range(repeats):
            stride = 2 if (i > 0 and r == 0) else 1
            blocks.append((3, _expanded(cin, next(it)), out, stride, False, _ACT))
            cin = out
    stages: list[MViTStage] = []
    for out, dim, depth in vit:
        stages.append((_expanded(cin, next(it)), out, dim, depth, 2 * dim))
        cin = out
    return tuple(blocks), tuple(stages)


_XXS_BLOCKS, _XXS_STAGES = _layout(*_LAYOUTS["mobilevit_xxs"][:3])


@dataclass(frozen=True)
class MobileViTConfig:
    """One MobileViT model.

    Attributes
    ----------
    resolution : int
        Input height and width in pixels; a multiple of 64.
    stem_channels : int
        Output channels of the first 3x3 stride-2 conv.
    mv2_blocks : tuple of MBBlock
        The inverted residuals before the first MobileViT stage (see
        :data:`nnmeter.zoo._blocks.MBBlock`).
    vit_stages : tuple of MViTStage
        Stages of a stride-2 inverted residual and a MobileViT block: (expanded
        channels, out channels, transformer width, depth, MLP hidden width).
    heads : int
        Attention heads of every transformer block.
    patch : int
        Patch side of the unfold (2 in every published model).
    last_channels : int
        Channels of the final 1x1 conv before global pooling.
    num_classes : int
        Classifier outputs.
    """

    resolution: int = 256
    stem_channels: int = 16
    mv2_blocks: tuple[MBBlock, ...] = _XXS_BLOCKS
    vit_stages: tuple[MViTStage, ...] = _XXS_STAGES
    heads: int = 4
    patch: int = 2
    last_channels: int = 320
    num_classes: int = 1000


def _unfold(b: GraphBuilder, x: Ref, patch: int, name: str) -> Ref:
    """(1, D, H, W) → (P, N, D): P = patch² token sets of N = HW/P tokens each."""
    _, d, h, w = b.shape(x)
    nh, nw, p = h // patch, w // patch, patch * patch
    y = b.reshape(x, (d * nh, patch, nw, patch), name=f"{name}.rows")
    y = b.transpose(y, (0, 2, 1, 3), name=f"{name}.swap")
    y = b.reshape(y, (1, d, nh * nw, p), name=f"{name}.patches")
    y = b.transpose(y, (0, 3, 2, 1), name=f"{name}.to_tokens")
    return b.reshape(y, (p, nh * nw, d), name=f"{name}.merge")


def _fold(b: GraphBuilder, x: Ref, h: int, w: int, patch: int, name: str) -> Ref:
    """(P, N, D) → (1, D, H, W), the inverse of :func:`_unfold`."""
    p, n, d = b.shape(x)
    nh, nw = h // patch, w // patch
    y = b.reshape(x, (1, p, n, d), name=f"{name}.split")
    y = b.transpose(y, (0, 3, 2, 1), name=f"{name}.to_channels")
    y = b.reshape(y, (d * nh, nw, patch, patch), name=f"{name}.rows")
    y = b.transpose(y, (0, 2, 1, 3), name=f"{name}.swap")
    return b.reshape(y, (1, d, h, w), name=f"{name}.merge")


def _mobilevit_block(b: GraphBuilder, x: Ref, stage: MViTStage, heads: int, patch: int,
                     name: str) -> Ref:
    _, out, dim, depth, hidden = stage
    _, c, h, w = b.shape(x)
    y = conv_bn_act(b, x, c, 3, name=f"{name}.conv_kxk", act=_ACT)
    y = b.conv(y, dim, 1, bias=False, name=f"{name}.conv_1x1")
    y = _unfold(b, y, patch, f"{name}.unfold")
    for i in range(depth):
        y = encoder_block(b, y, heads=heads, mlp_hidden=hidden, act=_ACT,
                          name=f"{name}.transformer.{i}")
    y = b.layernorm(y, name=f"{name}.norm")
    y = _fold(b, y, h, w, patch, f"{name}.fold")
    y = conv_bn_act(b, y, out, 1, name=f"{name}.conv_proj", act=_ACT)
    y = b.concat([x, y], axis=1, name=f"{name}.concat")
    return conv_bn_act(b, y, out, 3, name=f"{name}.conv_fusion", act=_ACT)


class MobileViTFamily(Family):
    name = "mobilevit"
    config_cls = MobileViTConfig
    description = "MobileViT-XXS (MobileNetV2 stages + MobileViT blocks, SiLU), 256x256"
    ranges = {
        "layout": "channels and depths around XXS, XS or S",
        "expansion": "{2, 4} per inverted residual",
        "channels": "per stage 0.75/1.0/1.25x, multiples of 8",
        "transformer_dim": "per stage 0.75/1.0/1.25x, multiples of 8 (4 heads)",
        "transformer_depth": "published n-1 .. n+1 per stage (at least 1)",
        "mv2_repeats": "second MobileNetV2 stage 2-4",
        "resolution": "{192, 256} (a multiple of 64)",
    }
    reference = {"params": 1_270_000, "macs": 400_000_000,
                 "source": "timm mobilevit_xxs.cvnets_in1k model card: 1.3 M params, "
                           "0.4 GMACs at 256x256 (paper, Table 1: 1.3 M params)"}

    def presets(self) -> dict[str, MobileViTConfig]:
        out = {}
        for name, (expand, mv2, vit, last) in _LAYOUTS.items():
            blocks, stages = _layout(expand, mv2, vit)
            out[name] = MobileViTConfig(mv2_blocks=blocks, vit_stages=stages,
                                        last_channels=last)
        return out

    def build(self, config: MobileViTConfig) -> ModelGraph:
        c = config
        step = 32 * c.patch
        if c.resolution % step:
            raise ValueError(f"MobileViT resolution {c.resolution} is not a multiple of "
                             f"{step}: the last stage's {c.patch}x{c.patch} patches must "
                             f"tile its map; choose a multiple of {step}")
        b = GraphBuilder("mobilevit", (1, 3, c.resolution, c.resolution))
        y = conv_bn_act(b, b.x, c.stem_channels, 3, 2, name="stem", act=_ACT)
        for i, blk in enumerate(c.mv2_blocks):
            y = mbconv(b, y, blk, name=f"mv2.{i}")
        for s, stage in enumerate(c.vit_stages):
            expanded, out = stage[0], stage[1]
            y = mbconv(b, y, (3, expanded, out, 2, False, _ACT), name=f"stage{s}.down")
            y = _mobilevit_block(b, y, stage, c.heads, c.patch, f"stage{s}.mobilevit")
        y = conv_bn_act(b, y, c.last_channels, 1, name="final_conv", act=_ACT)
        y = b.gap(y, name="avgpool")
        y = classifier(b, y, c.num_classes)
        return b.build([y], validate=False)

    def sample(self, rng: np.random.Generator) -> MobileViTConfig:
        names = sorted(_LAYOUTS)
        _, mv2, vit, _ = _LAYOUTS[names[int(rng.integers(len(names)))]]

        def width(ch: int) -> int:
            return make_divisible(ch * float(rng.choice(_WIDTH_SCALES)), 8)

        mv2 = ((width(mv2[0][0]), 1), (width(mv2[1][0]), int(rng.integers(2, 5))))
        vit = tuple((width(out), width(dim), int(rng.integers(max(1, n - 1), n + 2)))
                    for out, dim, n in vit)
        n_blocks = sum(r for _, r in mv2) + len(vit)
        ratios = tuple(int(r) for r in rng.choice(_EXPAND_RATIOS, n_blocks))
        blocks, stages = _layout(ratios, mv2, vit)
        return MobileViTConfig(resolution=int(rng.choice(_RESOLUTIONS)), mv2_blocks=blocks,
                               vit_stages=stages, last_channels=4 * vit[-1][0])

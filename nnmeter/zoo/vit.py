"""Vision Transformer (Dosovitskiy et al., ICLR 2021) and DeiT (Touvron et al., ICML 2021),
as timm's ``vit_*_patch16_224`` / ``deit_*_patch16_224``.

The graph: patch embedding as a conv with kernel = stride = patch → reshape and
transpose to tokens (1, L, D) → class token and position embedding → pre-norm encoder
blocks (see :mod:`nnmeter.zoo._transformer`; one fused qkv ``fc`` and a ``split``,
GELU MLP) → final layernorm → the class token → fc head.

**Class token.** The IR has no constant tensor to concatenate, so the class token is
a ``pad`` that prepends one all-zero token (L → L+1) followed by the ``add`` of the
(1, L+1, D) position embedding constant. At inference this is exact: token 0 becomes
``cls + pos[0]``, a constant, which is what the position embedding's row 0 holds once
the class token is folded into it. The cost model therefore counts the class token's
D parameters inside the position embedding, not on their own (192 fewer parameters
than timm's count for ViT-Tiny); the head reads token 0 with a ``split`` of the token
axis into (1, L), whose second part is left unused.

Base config: ViT-Tiny / DeiT-Tiny (D 192, 3 heads, depth 12, patch 16, 224x224):
5,717,236 params (timm: 5,717,416, the difference being the folded class token and
the 12 attention-scale scalars) and 1.254 G multiply-adds (timm: 1.3 GMACs, DeiT
paper: 1.3 GFLOPs counted as multiply-adds). ``presets()`` adds ViT-Small and
ViT-Base at 224 with patch 16.

This family is opt-in: it is in :data:`nnmeter.zoo.TRANSFORMER_FAMILIES`, not in the
default CNN list :data:`nnmeter.zoo.FAMILY_NAMES`.

Examples
--------
>>> fam = ViTFamily()
>>> g = fam.build(fam.base_config())
>>> g.shape_of(g.outputs[0])
(1, 1000)
>>> round(g.cost().macs / 1e9, 3)
1.254
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from nnmeter.ir.builder import GraphBuilder
from nnmeter.ir.graph import ModelGraph
from nnmeter.zoo._transformer import encoder_block
from nnmeter.zoo.base import Family

__all__ = ["ViTConfig", "ViTFamily"]

#: Sampled widths, head widths, depths, MLP ratios, patches and resolutions.
_DIMS = (192, 256, 320, 384)
_HEAD_DIMS = (32, 64)
_DEPTHS = tuple(range(4, 13))
_MLP_RATIOS = (2, 3, 4)
_PATCHES = (16, 32)
_RESOLUTIONS = (160, 192, 224)


@dataclass(frozen=True)
class ViTConfig:
    """One ViT model.

    Attributes
    ----------
    resolution : int
        Input height and width in pixels; a multiple of ``patch``.
    patch : int
        Patch side in pixels (the patch-embedding conv's kernel and stride).
    dim : int
        Token width D.
    depth : int
        Number of encoder blocks.
    heads : int
        Attention heads; D must be a multiple of it.
    mlp_hidden : int
        Hidden width of each block's MLP (mlp ratio × D).
    num_classes : int
        Classifier outputs.
    """

    resolution: int = 224
    patch: int = 16
    dim: int = 192
    depth: int = 12
    heads: int = 3
    mlp_hidden: int = 768
    num_classes: int = 1000


class ViTFamily(Family):
    name = "vit"
    config_cls = ViTConfig
    description = "ViT-Tiny / DeiT-Tiny (patch 16, pre-norm encoder, class token)"
    ranges = {
        "dim": "{192, 256, 320, 384}",
        "heads": "dim / head width, head width {32, 64}",
        "depth": "4-12",
        "mlp_ratio": "{2, 3, 4}",
        "patch": "{16, 32}",
        "resolution": "{160, 192, 224}",
    }
    reference = {"params": 5_717_416, "macs": 1_260_000_000,
                 "source": "timm deit_tiny_patch16_224: 5.72 M params, 1.3 GMACs "
                           "(DeiT paper, Table 1: 5 M params, 1.3 GFLOPs)"}

    def presets(self) -> dict[str, ViTConfig]:
        return {
            "vit_tiny_patch16_224": ViTConfig(),
            "vit_small_patch16_224": ViTConfig(dim=384, heads=6, mlp_hidden=1536),
            "vit_base_patch16_224": ViTConfig(dim=768, heads=12, mlp_hidden=3072),
        }

    def build(self, config: ViTConfig) -> ModelGraph:
        c = config
        if c.resolution % c.patch:
            raise ValueError(f"ViT resolution {c.resolution} is not a multiple of the patch "
                             f"{c.patch}; choose a resolution divisible by the patch")
        grid = c.resolution // c.patch
        tokens = grid * grid
        b = GraphBuilder("vit", (1, 3, c.resolution, c.resolution))
        y = b.conv(b.x, c.dim, c.patch, c.patch, pads=(0, 0, 0, 0), name="patch_embed.proj")
        y = b.reshape(y, (1, c.dim, tokens), name="patch_embed.flatten")
        y = b.transpose(y, (0, 2, 1), name="patch_embed.to_tokens")
        # the class token: a zero token in front, made cls + pos[0] by the position add
        y = b.pad(y, (0, 1, 0, 0, 0, 0), name="cls_token")
        y = b.eltwise_const("add", y, (1, tokens + 1, c.dim), name="pos_embed")
        for i in range(c.depth):
            y = encoder_block(b, y, heads=c.heads, mlp_hidden=c.mlp_hidden,
                              name=f"blocks.{i}")
        y = b.layernorm(y, name="norm")
        cls, _ = b.split(y, (1, tokens), axis=1, name="cls_select")
        y = b.reshape(cls, (1, c.dim), name="head.flatten")
        y = b.fc(y, c.num_classes, name="head")
        return b.build([y], validate=False)

    def sample(self, rng: np.random.Generator) -> ViTConfig:
        dim = int(rng.choice(_DIMS))
        head_dim = int(rng.choice(_HEAD_DIMS))
        return ViTConfig(
            resolution=int(rng.choice(_RESOLUTIONS)), patch=int(rng.choice(_PATCHES)),
            dim=dim, depth=int(rng.choice(_DEPTHS)), heads=dim // head_dim,
            mlp_hidden=dim * int(rng.choice(_MLP_RATIOS)))

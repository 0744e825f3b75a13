"""MnasNet-A1 1.0 without SE (Tan et al., CVPR 2019), as torchvision's ``mnasnet1_0``.

Base config: depth multiplier 1.0, 224x224, 4,383,312 params and 314.4 M
multiply-adds (torchvision's published figures: 4.38 M / 0.31 G).

Examples
--------
>>> fam = MnasNetFamily()
>>> fam.build(fam.base_config()).cost().params
4383312
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from nnmeter.ir.graph import ModelGraph
from nnmeter.zoo._blocks import MBBlock, build_mobile, sample_mb_stages
from nnmeter.zoo.base import RESOLUTIONS, Family, sample_scale, scale_channels

__all__ = ["MnasNetConfig", "MnasNetFamily"]

# torchvision's stacks: (out, kernel, stride, expansion, repeats); first input 16.
_STACKS = ((24, 3, 2, 3, 3), (40, 5, 2, 3, 3), (80, 5, 2, 6, 3), (96, 3, 1, 6, 2),
           (192, 5, 2, 6, 4), (320, 3, 1, 6, 1))


def _published_blocks() -> tuple[MBBlock, ...]:
    # The stem's separable conv (dw 3x3 on 32 channels, project to 16) is a block
    # without expansion and without residual.
    blocks: list[MBBlock] = [(3, 32, 16, 1, False, "relu")]
    cin = 16
    for out, k, s, t, n in _STACKS:
        for i in range(n):
            blocks.append((k, cin * t, out, s if i == 0 else 1, False, "relu"))
            cin = out
    return tuple(blocks)


@dataclass(frozen=True)
class MnasNetConfig:
    """One MnasNet model.

    Attributes
    ----------
    resolution : int
        Input height and width in pixels.
    stem_channels : int
        Output channels of the first 3x3 stride-2 conv.
    blocks : tuple of MBBlock
        (kernel, expanded, out, stride, squeeze-excite, activation) per block; the first
        is the stem's separable conv (no expansion).
    last_channels : int
        Channels of the final 1x1 conv before global pooling.
    num_classes : int
        Classifier outputs.
    """

    resolution: int = 224
    stem_channels: int = 32
    blocks: tuple[MBBlock, ...] = _published_blocks()
    last_channels: int = 1280
    num_classes: int = 1000


class MnasNetFamily(Family):
    name = "mnasnet"
    config_cls = MnasNetConfig
    description = "MnasNet 1.0 (torchvision mnasnet1_0, no SE)"
    ranges = {
        "resolution": "160-256 step 32",
        "channels": "per stage 0.2-1.8x, multiples of 8",
        "kernel": "{3,5,7} per block",
        "expansion": "1-8 per block (stem separable conv fixed at 1)",
        "repeats": "published n-1 .. n+1 per stage (at least 1)",
    }
    reference = {"params": 4_383_312, "macs": 310_000_000,
                 "source": "torchvision mnasnet1_0 (IMAGENET1K_V1): 4.38 M params, 0.31 GFLOPS"}

    def build(self, config: MnasNetConfig) -> ModelGraph:
        return build_mobile(
            "mnasnet", resolution=config.resolution, stem_channels=config.stem_channels,
            stem_act="relu", blocks=config.blocks, last_channels=config.last_channels,
            last_act="relu", classes=config.num_classes)

    def sample(self, rng: np.random.Generator) -> MnasNetConfig:
        res = int(rng.choice(RESOLUTIONS))
        stem = scale_channels(32, sample_scale(rng), 8)
        stages = [{"out": 16, "repeats": 1, "stride": 1, "act": "relu", "fixed_expand": 1,
                   "fixed_repeats": True}]
        stages += [{"out": o, "repeats": n, "stride": s, "act": "relu"}
                   for o, k, s, t, n in _STACKS]
        blocks = sample_mb_stages(rng, stages, in_channels=stem)
        last = scale_channels(1280, sample_scale(rng), 8)
        return MnasNetConfig(resolution=res, stem_channels=stem, blocks=blocks,
                             last_channels=last)

"""MobileNetV2 (Sandler et al., CVPR 2018), as torchvision's ``mobilenet_v2``.

Base config: width 1.0, 224x224, 3,504,872 params and 300.8 M multiply-adds
(torchvision's published figures: 3.50 M / 0.30 G).

Examples
--------
>>> fam = MobileNetV2Family()
>>> g = fam.build(fam.base_config())
>>> g.cost().params
3504872
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from nnmeter.ir.graph import ModelGraph
from nnmeter.zoo._blocks import MBBlock, build_mobile, sample_mb_stages
from nnmeter.zoo.base import RESOLUTIONS, Family, sample_scale, scale_channels

__all__ = ["MobileNetV2Config", "MobileNetV2Family"]

# (expansion t, channels c, repeats n, stride s) of the paper's Table 2.
_SETTINGS = ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1),
             (6, 160, 3, 2), (6, 320, 1, 1))


def _published_blocks() -> tuple[MBBlock, ...]:
    blocks: list[MBBlock] = []
    cin = 32
    for t, c, n, s in _SETTINGS:
        for i in range(n):
            blocks.append((3, cin * t, c, s if i == 0 else 1, False, "relu6"))
            cin = c
    return tuple(blocks)


@dataclass(frozen=True)
class MobileNetV2Config:
    """One MobileNetV2 model.

    Attributes
    ----------
    resolution : int
        Input height and width in pixels.
    stem_channels : int
        Output channels of the first 3x3 stride-2 conv.
    blocks : tuple of MBBlock
        Inverted residual blocks: (kernel, expanded channels, out channels, stride,
        squeeze-excite, activation); expanded == in channels means no expansion conv.
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


class MobileNetV2Family(Family):
    name = "mobilenetv2"
    config_cls = MobileNetV2Config
    description = "MobileNetV2 1.0 (inverted residuals, linear bottlenecks, ReLU6)"
    ranges = {
        "resolution": "160-256 step 32",
        "channels": "per stage 0.2-1.8x, multiples of 8",
        "kernel": "{3,5,7} per block",
        "expansion": "1-8 per block (first stage fixed at 1)",
        "repeats": "published n-1 .. n+1 per stage (at least 1)",
    }
    reference = {"params": 3_504_872, "macs": 300_000_000,
                 "source": "torchvision mobilenet_v2 (IMAGENET1K_V1): 3.50 M params, 0.30 GFLOPS"}

    def build(self, config: MobileNetV2Config) -> ModelGraph:
        return build_mobile(
            "mobilenetv2", resolution=config.resolution, stem_channels=config.stem_channels,
            stem_act="relu6", blocks=config.blocks, last_channels=config.last_channels,
            last_act="relu6", classes=config.num_classes)

    def sample(self, rng: np.random.Generator) -> MobileNetV2Config:
        res = int(rng.choice(RESOLUTIONS))
        stem = scale_channels(32, sample_scale(rng), 8)
        stages = [{"out": c, "repeats": n, "stride": s, "act": "relu6",
                   "fixed_expand": 1 if i == 0 else None}
                  for i, (t, c, n, s) in enumerate(_SETTINGS)]
        blocks = sample_mb_stages(rng, stages, in_channels=stem)
        last = scale_channels(1280, sample_scale(rng), 8)
        return MobileNetV2Config(resolution=res, stem_channels=stem, blocks=blocks,
                                 last_channels=last)

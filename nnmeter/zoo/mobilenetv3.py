"""MobileNetV3-Large (Howard et al., ICCV 2019), as torchvision's ``mobilenet_v3_large``.

Base config: width 1.0, 224x224, 5,483,032 params and 216.6 M multiply-adds
(torchvision's published figures: 5.48 M / 0.22 G). ``presets()`` adds
MobileNetV3-Small (2,542,856 params, 0.06 G).

Examples
--------
>>> fam = MobileNetV3Family()
>>> fam.build(fam.base_config()).cost().params
5483032
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from nnmeter.ir.graph import ModelGraph
from nnmeter.zoo._blocks import MBBlock, build_mobile, sample_mb_stages
from nnmeter.zoo.base import RESOLUTIONS, Family, sample_scale, scale_channels

__all__ = ["MobileNetV3Config", "MobileNetV3Family"]

# torchvision's inverted residual settings:
# (kernel, expanded, out, squeeze-excite, activation, stride); input of the first is 16.
_LARGE: tuple[MBBlock, ...] = tuple(
    (k, e, o, s, se, "hswish" if a == "HS" else "relu") for k, e, o, se, a, s in (
        (3, 16, 16, False, "RE", 1), (3, 64, 24, False, "RE", 2), (3, 72, 24, False, "RE", 1),
        (5, 72, 40, True, "RE", 2), (5, 120, 40, True, "RE", 1), (5, 120, 40, True, "RE", 1),
        (3, 240, 80, False, "HS", 2), (3, 200, 80, False, "HS", 1),
        (3, 184, 80, False, "HS", 1), (3, 184, 80, False, "HS", 1),
        (3, 480, 112, True, "HS", 1), (3, 672, 112, True, "HS", 1),
        (5, 672, 160, True, "HS", 2), (5, 960, 160, True, "HS", 1),
        (5, 960, 160, True, "HS", 1),
    )
)
_SMALL: tuple[MBBlock, ...] = tuple(
    (k, e, o, s, se, "hswish" if a == "HS" else "relu") for k, e, o, se, a, s in (
        (3, 16, 16, True, "RE", 2), (3, 72, 24, False, "RE", 2), (3, 88, 24, False, "RE", 1),
        (5, 96, 40, True, "HS", 2), (5, 240, 40, True, "HS", 1), (5, 240, 40, True, "HS", 1),
        (5, 120, 48, True, "HS", 1), (5, 144, 48, True, "HS", 1),
        (5, 288, 96, True, "HS", 2), (5, 576, 96, True, "HS", 1), (5, 576, 96, True, "HS", 1),
    )
)

# Stages for sampling: (published out channels, repeats, stride, se, activation).
_STAGES = ((16, 1, 1, False, "relu"), (24, 2, 2, False, "relu"), (40, 3, 2, True, "relu"),
           (80, 4, 2, False, "hswish"), (112, 2, 1, True, "hswish"),
           (160, 3, 2, True, "hswish"))


@dataclass(frozen=True)
class MobileNetV3Config:
    """One MobileNetV3 model.

    Attributes
    ----------
    resolution : int
        Input height and width in pixels.
    stem_channels : int
        Output channels of the first 3x3 stride-2 conv (hswish).
    blocks : tuple of MBBlock
        (kernel, expanded, out, stride, squeeze-excite, activation) per block; the SE
        squeeze width is expanded/4 rounded to a multiple of 8, gated by hsigmoid.
    last_channels : int
        Channels of the final 1x1 conv (hswish) before global pooling.
    hidden : int
        Width of the classifier's hidden fc layer (hswish).
    num_classes : int
        Classifier outputs.
    """

    resolution: int = 224
    stem_channels: int = 16
    blocks: tuple[MBBlock, ...] = _LARGE
    last_channels: int = 960
    hidden: int = 1280
    num_classes: int = 1000


class MobileNetV3Family(Family):
    name = "mobilenetv3"
    config_cls = MobileNetV3Config
    description = "MobileNetV3-Large 1.0 (SE, hswish)"
    ranges = {
        "resolution": "160-256 step 32",
        "channels": "per stage 0.2-1.8x, multiples of 8",
        "kernel": "{3,5,7} per block",
        "expansion": "1-8 per block",
        "repeats": "published n-1 .. n+1 per stage (at least 1)",
        "head": "last conv and hidden fc 0.2-1.8x",
    }
    reference = {"params": 5_483_032, "macs": 220_000_000,
                 "source": "torchvision mobilenet_v3_large (IMAGENET1K_V1): 5.48 M params, "
                           "0.22 GFLOPS"}

    def presets(self) -> dict[str, MobileNetV3Config]:
        return {"mobilenetv3": self.base_config(),
                "mobilenetv3_small": MobileNetV3Config(blocks=_SMALL, last_channels=576,
                                                       hidden=1024)}

    def build(self, config: MobileNetV3Config) -> ModelGraph:
        return build_mobile(
            "mobilenetv3", resolution=config.resolution, stem_channels=config.stem_channels,
            stem_act="hswish", blocks=config.blocks, last_channels=config.last_channels,
            last_act="hswish", hidden=config.hidden, hidden_act="hswish",
            classes=config.num_classes, bn_eps=1e-3)

    def sample(self, rng: np.random.Generator) -> MobileNetV3Config:
        res = int(rng.choice(RESOLUTIONS))
        stem = scale_channels(16, sample_scale(rng), 8)
        stages = [{"out": o, "repeats": n, "stride": s, "se": se, "act": a}
                  for o, n, s, se, a in _STAGES]
        blocks = sample_mb_stages(rng, stages, in_channels=stem)
        head_scale = sample_scale(rng)
        return MobileNetV3Config(
            resolution=res, stem_channels=stem, blocks=blocks,
            last_channels=scale_channels(960, head_scale, 8),
            hidden=scale_channels(1280, head_scale, 8))

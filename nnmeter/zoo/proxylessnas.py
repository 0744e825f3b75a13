"""ProxylessNAS-Mobile (Cai et al., ICLR 2019), the searched network for Pixel 1.

The architecture is the published ``proxyless_mobile`` network (the searched
per-block kernel sizes and expansion ratios; zero blocks dropped): stem conv 3x3/2
32 → MB1 3x3 16 → 2 blocks at 32, 4 at 40, 4 at 80, 4 at 96, 4 at 192, 1 at 320
→ conv 1x1 1280 → global pooling → fc 1000, ReLU6 throughout.

Base config: 224x224, 4,080,512 params and 320.4 M multiply-adds. Reference:
the ProxylessNAS paper reports 4.1 M params and 320 M MACs for ProxylessNAS-Mobile
(its Table 2 / released model), which this reproduces within 0.5 % / 0.2 %.

Examples
--------
>>> fam = ProxylessNASFamily()
>>> 4.07e6 < fam.build(fam.base_config()).cost().params < 4.13e6
True
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from nnmeter.ir.graph import ModelGraph
from nnmeter.zoo._blocks import MBBlock, build_mobile, sample_mb_stages
from nnmeter.zoo.base import RESOLUTIONS, Family, sample_scale, scale_channels

__all__ = ["ProxylessNASConfig", "ProxylessNASFamily"]

# Searched blocks: (out, kernel, expansion, stride) in order, first input 32.
_SEARCHED = (
    (16, 3, 1, 1),
    (32, 5, 3, 2), (32, 3, 3, 1),
    (40, 7, 3, 2), (40, 3, 3, 1), (40, 5, 3, 1), (40, 5, 3, 1),
    (80, 7, 6, 2), (80, 5, 3, 1), (80, 5, 3, 1), (80, 5, 3, 1),
    (96, 5, 6, 1), (96, 5, 3, 1), (96, 5, 3, 1), (96, 5, 3, 1),
    (192, 7, 6, 2), (192, 7, 6, 1), (192, 7, 3, 1), (192, 7, 3, 1),
    (320, 7, 6, 1),
)
# Stages for sampling: (published out channels, repeats, stride).
_STAGES = ((16, 1, 1), (32, 2, 2), (40, 4, 2), (80, 4, 2), (96, 4, 1), (192, 4, 2),
           (320, 1, 1))


def _published_blocks() -> tuple[MBBlock, ...]:
    blocks: list[MBBlock] = []
    cin = 32
    for out, k, t, s in _SEARCHED:
        blocks.append((k, cin * t, out, s, False, "relu6"))
        cin = out
    return tuple(blocks)


@dataclass(frozen=True)
class ProxylessNASConfig:
    """One ProxylessNAS model.

    Attributes
    ----------
    resolution : int
        Input height and width in pixels.
    stem_channels : int
        Output channels of the first 3x3 stride-2 conv.
    blocks : tuple of MBBlock
        (kernel, expanded, out, stride, squeeze-excite, activation) per block.
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


class ProxylessNASFamily(Family):
    name = "proxylessnas"
    config_cls = ProxylessNASConfig
    description = "ProxylessNAS-Mobile (searched MBConv 3/5/7, expansion 3/6, ReLU6)"
    ranges = {
        "resolution": "160-256 step 32",
        "channels": "per stage 0.2-1.8x, multiples of 8",
        "kernel": "{3,5,7} per block",
        "expansion": "1-8 per block (first block fixed at 1)",
        "repeats": "published n-1 .. n+1 per stage (at least 1)",
    }
    reference = {"params": 4_100_000, "macs": 320_000_000,
                 "source": "ProxylessNAS paper (Cai et al., ICLR 2019), ProxylessNAS-Mobile: "
                           "4.1 M params, 320 M MACs"}

    def build(self, config: ProxylessNASConfig) -> ModelGraph:
        return build_mobile(
            "proxylessnas", resolution=config.resolution, stem_channels=config.stem_channels,
            stem_act="relu6", blocks=config.blocks, last_channels=config.last_channels,
            last_act="relu6", classes=config.num_classes, bn_eps=1e-3)

    def sample(self, rng: np.random.Generator) -> ProxylessNASConfig:
        res = int(rng.choice(RESOLUTIONS))
        stem = scale_channels(32, sample_scale(rng), 8)
        stages = [{"out": o, "repeats": n, "stride": s, "act": "relu6",
                   "fixed_expand": 1 if i == 0 else None, "fixed_repeats": i == 0}
                  for i, (o, n, s) in enumerate(_STAGES)]
        blocks = sample_mb_stages(rng, stages, in_channels=stem)
        last = scale_channels(1280, sample_scale(rng), 8)
        return ProxylessNASConfig(resolution=res, stem_channels=stem, blocks=blocks,
                                  last_channels=last)

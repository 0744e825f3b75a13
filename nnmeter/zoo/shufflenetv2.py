"""ShuffleNetV2 (Ma et al., ECCV 2018), as torchvision's ``shufflenet_v2_x1_0``.

Stem conv 3x3/2 24 → max pool 3x3/2 → three stages of units (a stride-2 unit with two
branches, then stride-1 units that split the channels in half, transform one half and
concatenate) each followed by a channel shuffle of 2 groups → conv 1x1 1024 →
global pooling → fc 1000.

Base config: 1.0x, 224x224, 2,278,604 params and 0.15 G multiply-adds (torchvision:
2.28 M / 0.15 G). ``presets()`` adds the 0.5x, 1.5x and 2.0x widths.

Examples
--------
>>> fam = ShuffleNetV2Family()
>>> fam.build(fam.base_config()).cost().params
2278604
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from nnmeter.ir.builder import GraphBuilder
from nnmeter.ir.graph import ModelGraph, Ref
from nnmeter.zoo._blocks import classifier, conv_bn_act
from nnmeter.zoo.base import KERNELS, RESOLUTIONS, Family, sample_scales, scale_channels

__all__ = ["ShuffleNetV2Config", "ShuffleNetV2Family"]

_WIDTHS = {"0.5": (48, 96, 192, 1024), "1.0": (116, 232, 464, 1024),
           "1.5": (176, 352, 704, 1024), "2.0": (244, 488, 976, 2048)}


@dataclass(frozen=True)
class ShuffleNetV2Config:
    """One ShuffleNetV2 model.

    Attributes
    ----------
    resolution : int
        Input height and width in pixels.
    stem_channels : int
        Output channels of the 3x3 stride-2 stem conv.
    stage_channels : tuple of 3 ints
        Output channels of each stage (even).
    repeats : tuple of 3 ints
        Units per stage, the first of each with stride 2.
    kernels : tuple of 3 ints
        Depthwise kernel per stage (3 in the published nets).
    last_channels : int
        Channels of the final 1x1 conv.
    num_classes : int
        Classifier outputs.
    """

    resolution: int = 224
    stem_channels: int = 24
    stage_channels: tuple[int, ...] = (116, 232, 464)
    repeats: tuple[int, ...] = (4, 8, 4)
    kernels: tuple[int, ...] = (3, 3, 3)
    last_channels: int = 1024
    num_classes: int = 1000


def _unit(b: GraphBuilder, x: Ref, out: int, stride: int, k: int, name: str) -> Ref:
    cin = b.shape(x)[1]
    half = out // 2
    if stride == 1:
        keep, x2 = b.split(x, [cin - cin // 2, cin // 2], name=f"{name}.split")
    else:
        keep = conv_bn_act(b, x, cin, k, stride, groups=cin, name=f"{name}.branch1.dw",
                           act=None)
        keep = conv_bn_act(b, keep, half, 1, name=f"{name}.branch1.pw", act="relu")
        x2 = x
    y = conv_bn_act(b, x2, half, 1, name=f"{name}.branch2.pw1", act="relu")
    y = conv_bn_act(b, y, half, k, stride, groups=half, name=f"{name}.branch2.dw", act=None)
    y = conv_bn_act(b, y, out - b.shape(keep)[1], 1, name=f"{name}.branch2.pw2", act="relu")
    y = b.concat([keep, y], name=f"{name}.concat")
    return b.channelshuffle(y, 2, name=f"{name}.shuffle")


class ShuffleNetV2Family(Family):
    name = "shufflenetv2"
    config_cls = ShuffleNetV2Config
    description = "ShuffleNetV2 1.0x (channel split, concat, channel shuffle)"
    ranges = {
        "resolution": "160-256 step 32",
        "channels": "stem and per stage 0.2-1.8x, multiples of 8; last conv 0.2-1.8x",
        "kernel": "{3,5,7} per stage (depthwise)",
        "repeats": "published n-1 .. n+1 per stage (4, 8, 4)",
    }
    reference = {"params": 2_278_604, "macs": 150_000_000,
                 "source": "torchvision shufflenet_v2_x1_0 (IMAGENET1K_V1): 2.28 M params, "
                           "0.15 GFLOPS"}

    def presets(self) -> dict[str, ShuffleNetV2Config]:
        return {f"shufflenetv2_x{w}": ShuffleNetV2Config(stage_channels=c[:3],
                                                         last_channels=c[3])
                for w, c in _WIDTHS.items()}

    def build(self, config: ShuffleNetV2Config) -> ModelGraph:
        b = GraphBuilder("shufflenetv2", (1, 3, config.resolution, config.resolution))
        y = conv_bn_act(b, b.x, config.stem_channels, 3, 2, name="conv1", act="relu")
        y = b.maxpool(y, 3, 2, pads=(1, 1, 1, 1), name="maxpool")
        for s, (out, n, k) in enumerate(zip(config.stage_channels, config.repeats,
                                            config.kernels), start=2):
            for i in range(n):
                y = _unit(b, y, out, 2 if i == 0 else 1, k, f"stage{s}.{i}")
        y = conv_bn_act(b, y, config.last_channels, 1, name="conv5", act="relu")
        y = b.gap(y, name="avgpool")
        y = classifier(b, y, config.num_classes)
        return b.build([y], validate=False)

    def sample(self, rng: np.random.Generator) -> ShuffleNetV2Config:
        scales = sample_scales(rng, 5)
        return ShuffleNetV2Config(
            resolution=int(rng.choice(RESOLUTIONS)),
            stem_channels=scale_channels(24, scales[0], 8),
            stage_channels=tuple(scale_channels(c, s, 8)
                                 for c, s in zip((116, 232, 464), scales[1:4])),
            repeats=tuple(int(rng.integers(max(1, n - 1), n + 2)) for n in (4, 8, 4)),
            kernels=tuple(int(rng.choice(KERNELS)) for _ in range(3)),
            last_channels=scale_channels(1024, scales[4], 8))

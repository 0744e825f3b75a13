"""MobileNetV1 (Howard et al., 2017), width 1.0, as Keras' ``MobileNet``.

Stem conv 3x3/2 32 → 13 depthwise-separable blocks (dw 3x3-BN-ReLU, pw 1x1-BN-ReLU)
→ global pooling → fc 1000. Base config: 224x224, 4,231,976 trainable params and
568.7 M multiply-adds (the paper's Table 8: 4.2 M / 569 M; Keras: 4.23 M trainable).
Keras uses ReLU6; the paper and this base config use ReLU (``activation``).

Examples
--------
>>> fam = MobileNetV1Family()
>>> fam.build(fam.base_config()).cost().params
4231976
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from nnmeter.ir.builder import GraphBuilder
from nnmeter.ir.graph import ModelGraph
from nnmeter.zoo._blocks import classifier, conv_bn_act
from nnmeter.zoo.base import KERNELS, RESOLUTIONS, Family, sample_scales, scale_channels

__all__ = ["MobileNetV1Config", "MobileNetV1Family"]

# Published separable blocks: (out channels, stride).
_BLOCKS = ((64, 1), (128, 2), (128, 1), (256, 2), (256, 1), (512, 2), (512, 1), (512, 1),
           (512, 1), (512, 1), (512, 1), (1024, 2), (1024, 1))
# Stages for sampling: (published out channels, repeats, stride).
_STAGES = ((64, 1, 1), (128, 2, 2), (256, 2, 2), (512, 6, 2), (1024, 2, 2))


@dataclass(frozen=True)
class MobileNetV1Config:
    """One MobileNetV1 model.

    Attributes
    ----------
    resolution : int
        Input height and width in pixels.
    stem_channels : int
        Output channels of the first 3x3 stride-2 conv.
    blocks : tuple of (kernel, out_channels, stride)
        Depthwise-separable blocks: depthwise kernel, pointwise output channels, stride.
    activation : str
        "relu" (paper) or "relu6" (Keras/TFLite).
    num_classes : int
        Classifier outputs.
    """

    resolution: int = 224
    stem_channels: int = 32
    blocks: tuple[tuple[int, int, int], ...] = tuple((3, c, s) for c, s in _BLOCKS)
    activation: str = "relu"
    num_classes: int = 1000


class MobileNetV1Family(Family):
    name = "mobilenetv1"
    config_cls = MobileNetV1Config
    description = "MobileNetV1 1.0 (depthwise-separable convolutions)"
    ranges = {
        "resolution": "160-256 step 32",
        "channels": "per stage 0.2-1.8x, multiples of 8",
        "kernel": "{3,5,7} per stage (depthwise)",
        "repeats": "published n-1 .. n+1 per stage (at least 1)",
        "activation": "{relu, relu6}",
    }
    reference = {"params": 4_231_976, "macs": 569_000_000,
                 "source": "MobileNetV1 paper Table 8 (4.2 M, 569 M mult-adds); Keras "
                           "MobileNet(alpha=1.0): 4,231,976 trainable params"}

    def build(self, config: MobileNetV1Config) -> ModelGraph:
        act = config.activation
        b = GraphBuilder("mobilenetv1", (1, 3, config.resolution, config.resolution))
        y = conv_bn_act(b, b.x, config.stem_channels, 3, 2, name="features.0", act=act)
        for i, (k, out, s) in enumerate(config.blocks, start=1):
            c = b.shape(y)[1]
            y = conv_bn_act(b, y, c, k, s, groups=c, name=f"features.{i}.dw", act=act)
            y = conv_bn_act(b, y, out, 1, name=f"features.{i}.pw", act=act)
        y = b.gap(y, name="avgpool")
        y = classifier(b, y, config.num_classes)
        return b.build([y], validate=False)

    def sample(self, rng: np.random.Generator) -> MobileNetV1Config:
        res = int(rng.choice(RESOLUTIONS))
        scales = sample_scales(rng, len(_STAGES) + 1)
        blocks = []
        for (out, n, s), scale in zip(_STAGES, scales[1:]):
            k = int(rng.choice(KERNELS))
            reps = int(rng.integers(max(1, n - 1), n + 2))
            c = scale_channels(out, scale, 8)
            blocks += [(k, c, s if r == 0 else 1) for r in range(reps)]
        return MobileNetV1Config(
            resolution=res, stem_channels=scale_channels(32, scales[0], 8),
            blocks=tuple(blocks), activation=str(rng.choice(["relu", "relu6"])))

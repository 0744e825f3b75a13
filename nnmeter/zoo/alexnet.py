"""AlexNet (Krizhevsky et al., 2012), as torchvision's ``alexnet`` (the one-GPU variant
with 64-192-384-256-256 channels).

Base config: 224x224, 61,100,840 params and 0.71 G multiply-adds (torchvision:
61.10 M / 0.71 G). The classifier reads the 6x6 feature map (torchvision's adaptive
pooling is an identity at 224), so the resolution is fixed at 224.

Examples
--------
>>> fam = AlexNetFamily()
>>> fam.build(fam.base_config()).cost().params
61100840
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from nnmeter.ir.builder import GraphBuilder
from nnmeter.ir.graph import ModelGraph
from nnmeter.zoo._blocks import classifier
from nnmeter.zoo.base import KERNELS, Family, sample_scales, scale_channels

__all__ = ["AlexNetConfig", "AlexNetFamily"]


@dataclass(frozen=True)
class AlexNetConfig:
    """One AlexNet model.

    Attributes
    ----------
    widths : tuple of 5 ints
        Output channels of the five convs.
    kernels : tuple of 5 ints
        Their kernels (11 stride 4, then 5, 3, 3, 3 in the published net); all but the
        first use "same" padding.
    hidden : int
        Width of the two hidden fc layers.
    resolution : int
        Input height and width (224; the classifier expects a 6x6 map).
    num_classes : int
        Classifier outputs.
    """

    widths: tuple[int, ...] = (64, 192, 384, 256, 256)
    kernels: tuple[int, ...] = (11, 5, 3, 3, 3)
    hidden: int = 4096
    resolution: int = 224
    num_classes: int = 1000


class AlexNetFamily(Family):
    name = "alexnet"
    config_cls = AlexNetConfig
    description = "AlexNet (torchvision one-GPU variant)"
    ranges = {
        "resolution": "224 (fixed by the fc classifier)",
        "channels": "per conv 0.2-1.8x, multiples of 8; hidden fc 0.2-1.8x",
        "kernel": "{3,5,7} for convs 2-5 (conv 1 stays 11x11/4)",
    }
    reference = {"params": 61_100_840, "macs": 710_000_000,
                 "source": "torchvision alexnet (IMAGENET1K_V1): 61.10 M params, 0.71 GFLOPS"}

    def build(self, config: AlexNetConfig) -> ModelGraph:
        b = GraphBuilder("alexnet", (1, 3, config.resolution, config.resolution))
        w, k = config.widths, config.kernels
        y = b.conv(b.x, w[0], k[0], 4, pads=(2, 2, 2, 2), name="features.0.conv")
        y = b.relu(y, name="features.0.relu")
        y = b.maxpool(y, 3, 2, name="features.0.pool")
        y = b.conv(y, w[1], k[1], 1, name="features.1.conv")
        y = b.relu(y, name="features.1.relu")
        y = b.maxpool(y, 3, 2, name="features.1.pool")
        for i in range(2, 5):
            y = b.conv(y, w[i], k[i], 1, name=f"features.{i}.conv")
            y = b.relu(y, name=f"features.{i}.relu")
        y = b.maxpool(y, 3, 2, name="features.4.pool")
        y = classifier(b, y, config.num_classes, hidden=(config.hidden, config.hidden))
        return b.build([y], validate=False)

    def sample(self, rng: np.random.Generator) -> AlexNetConfig:
        scales = sample_scales(rng, 6)
        return AlexNetConfig(
            widths=tuple(scale_channels(w, s, 8)
                         for w, s in zip((64, 192, 384, 256, 256), scales)),
            kernels=(11,) + tuple(int(rng.choice(KERNELS)) for _ in range(4)),
            hidden=scale_channels(4096, scales[5], 8))

"""VGG (Simonyan & Zisserman, ICLR 2015), as torchvision's ``vgg11/13/16/19``.

Base config: VGG-16 without batch norm, 224x224, 138,357,544 params and 15.47 G
multiply-adds (torchvision: 138.36 M / 15.47 G). The classifier's first fc reads the
7x7 feature map (torchvision's adaptive pooling is an identity at 224), so the
resolution is fixed at 224.

Examples
--------
>>> fam = VGGFamily()
>>> fam.build(fam.base_config()).cost().params
138357544
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from nnmeter.ir.builder import GraphBuilder
from nnmeter.ir.graph import ModelGraph
from nnmeter.zoo._blocks import classifier, conv_bn_act
from nnmeter.zoo.base import Family, sample_scales, scale_channels

__all__ = ["VGGConfig", "VGGFamily"]

_DEPTHS = {11: (1, 1, 2, 2, 2), 13: (2, 2, 2, 2, 2), 16: (2, 2, 3, 3, 3), 19: (2, 2, 4, 4, 4)}


@dataclass(frozen=True)
class VGGConfig:
    """One VGG model.

    Attributes
    ----------
    repeats : tuple of 5 ints
        3x3 convs per stage (each stage ends in a 2x2 max pool).
    widths : tuple of 5 ints
        Output channels per stage.
    hidden : int
        Width of the two hidden fc layers.
    batch_norm : bool
        Batch norm after every conv (torchvision's ``vgg*_bn``).
    resolution : int
        Input height and width (224; the classifier expects a 7x7 map).
    num_classes : int
        Classifier outputs.
    """

    repeats: tuple[int, ...] = (2, 2, 3, 3, 3)
    widths: tuple[int, ...] = (64, 128, 256, 512, 512)
    hidden: int = 4096
    batch_norm: bool = False
    resolution: int = 224
    num_classes: int = 1000


class VGGFamily(Family):
    name = "vgg"
    config_cls = VGGConfig
    description = "VGG-16 (3x3 convs, 3 fc layers); variants span VGG-11/13/16/19"
    ranges = {
        "resolution": "224 (fixed by the fc classifier)",
        "depth": "conv layout of VGG-11, -13, -16 or -19",
        "channels": "per stage 0.2-1.8x, multiples of 8; hidden fc 0.2-1.8x",
        "batch_norm": "{no, yes}",
    }
    reference = {"params": 138_357_544, "macs": 15_470_000_000,
                 "source": "torchvision vgg16 (IMAGENET1K_V1): 138.36 M params, 15.47 GFLOPS"}

    def presets(self) -> dict[str, VGGConfig]:
        out = {f"vgg{d}": VGGConfig(repeats=r) for d, r in _DEPTHS.items()}
        out.update({f"vgg{d}_bn": VGGConfig(repeats=r, batch_norm=True)
                    for d, r in _DEPTHS.items()})
        return out

    def build(self, config: VGGConfig) -> ModelGraph:
        b = GraphBuilder("vgg", (1, 3, config.resolution, config.resolution))
        y = b.x
        for s, (n, w) in enumerate(zip(config.repeats, config.widths)):
            for i in range(n):
                y = conv_bn_act(b, y, w, 3, 1, name=f"features.{s + 1}.{i}", act="relu",
                                bn=config.batch_norm)
            y = b.maxpool(y, 2, 2, name=f"features.{s + 1}.pool")
        y = classifier(b, y, config.num_classes, hidden=(config.hidden, config.hidden))
        return b.build([y], validate=False)

    def sample(self, rng: np.random.Generator) -> VGGConfig:
        depth = int(rng.choice(list(_DEPTHS)))
        scales = sample_scales(rng, 6)
        return VGGConfig(
            repeats=_DEPTHS[depth],
            widths=tuple(scale_channels(w, s, 8)
                         for w, s in zip((64, 128, 256, 512, 512), scales)),
            hidden=scale_channels(4096, scales[5], 8),
            batch_norm=bool(rng.integers(2)))

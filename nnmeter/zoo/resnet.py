"""ResNet (He et al., CVPR 2016), as torchvision's ``resnet18/34/50/101/152`` (v1.5:
the stride of a bottleneck sits on its 3x3 conv).

Base config: ResNet-18, 224x224, 11,689,512 params and 1.81 G multiply-adds
(torchvision: 11.69 M / 1.81 G). ``presets()`` adds ResNet-34/50/101/152;
ResNet-50 has 25,557,032 params and 4.09 G multiply-adds (torchvision: 25.56 M / 4.09 G).

Examples
--------
>>> fam = ResNetFamily()
>>> fam.build(fam.base_config()).cost().params
11689512
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from nnmeter.ir.builder import GraphBuilder
from nnmeter.ir.graph import ModelGraph, Ref
from nnmeter.zoo._blocks import classifier, conv_bn_act
from nnmeter.zoo.base import KERNELS, RESOLUTIONS, Family, sample_scales, scale_channels

__all__ = ["ResNetConfig", "ResNetFamily"]

_DEPTHS = {18: ("basic", (2, 2, 2, 2)), 34: ("basic", (3, 4, 6, 3)),
           50: ("bottleneck", (3, 4, 6, 3)), 101: ("bottleneck", (3, 4, 23, 3)),
           152: ("bottleneck", (3, 8, 36, 3))}


@dataclass(frozen=True)
class ResNetConfig:
    """One ResNet model.

    Attributes
    ----------
    resolution : int
        Input height and width in pixels.
    block : str
        "basic" (two 3x3 convs) or "bottleneck" (1x1, kxk, 1x1 with 4x expansion).
    repeats : tuple of 4 ints
        Blocks per stage.
    widths : tuple of 4 ints
        Per-stage width (``planes``; bottleneck outputs are 4x this).
    kernels : tuple of 4 ints
        Kernel of the spatial convs per stage (3 in the published nets).
    stem_channels : int
        Output channels of the 7x7 stride-2 stem conv.
    num_classes : int
        Classifier outputs.
    """

    resolution: int = 224
    block: str = "basic"
    repeats: tuple[int, ...] = (2, 2, 2, 2)
    widths: tuple[int, ...] = (64, 128, 256, 512)
    kernels: tuple[int, ...] = (3, 3, 3, 3)
    stem_channels: int = 64
    num_classes: int = 1000


def _basic(b: GraphBuilder, x: Ref, planes: int, stride: int, k: int, name: str) -> Ref:
    cin = b.shape(x)[1]
    y = conv_bn_act(b, x, planes, k, stride, name=f"{name}.conv1", act="relu")
    y = conv_bn_act(b, y, planes, k, 1, name=f"{name}.conv2", act=None)
    short = x
    if stride != 1 or cin != planes:
        short = conv_bn_act(b, x, planes, 1, stride, name=f"{name}.downsample", act=None)
    y = b.add_(y, short, name=f"{name}.add")
    return b.relu(y, name=f"{name}.relu")


def _bottleneck(b: GraphBuilder, x: Ref, planes: int, stride: int, k: int, name: str) -> Ref:
    cin = b.shape(x)[1]
    out = planes * 4
    y = conv_bn_act(b, x, planes, 1, 1, name=f"{name}.conv1", act="relu")
    y = conv_bn_act(b, y, planes, k, stride, name=f"{name}.conv2", act="relu")
    y = conv_bn_act(b, y, out, 1, 1, name=f"{name}.conv3", act=None)
    short = x
    if stride != 1 or cin != out:
        short = conv_bn_act(b, x, out, 1, stride, name=f"{name}.downsample", act=None)
    y = b.add_(y, short, name=f"{name}.add")
    return b.relu(y, name=f"{name}.relu")


class ResNetFamily(Family):
    name = "resnet"
    config_cls = ResNetConfig
    description = "ResNet-18 (basic blocks); variants span ResNet-18/34/50 layouts"
    ranges = {
        "resolution": "160-256 step 32",
        "depth": "block layout of ResNet-18, -34 or -50",
        "channels": "stem and per stage 0.2-1.8x, multiples of 8",
        "kernel": "{3,5,7} per stage (spatial convs)",
        "repeats": "layout's n-1 .. n+1 per stage (at least 1)",
    }
    reference = {"params": 11_689_512, "macs": 1_820_000_000,
                 "source": "torchvision resnet18 (IMAGENET1K_V1): 11.69 M params, 1.81 GFLOPS"}

    def presets(self) -> dict[str, ResNetConfig]:
        return {f"resnet{d}": ResNetConfig(block=blk, repeats=reps)
                for d, (blk, reps) in _DEPTHS.items()}

    def build(self, config: ResNetConfig) -> ModelGraph:
        if config.block not in ("basic", "bottleneck"):
            raise ValueError(f"ResNet block {config.block!r} is not 'basic' or 'bottleneck'")
        block = _basic if config.block == "basic" else _bottleneck
        b = GraphBuilder("resnet", (1, 3, config.resolution, config.resolution))
        y = conv_bn_act(b, b.x, config.stem_channels, 7, 2, name="conv1", act="relu")
        y = b.maxpool(y, 3, 2, pads=(1, 1, 1, 1), name="maxpool")
        for s, (n, w, k) in enumerate(zip(config.repeats, config.widths, config.kernels)):
            for i in range(n):
                stride = 2 if (s > 0 and i == 0) else 1
                y = block(b, y, w, stride, k, f"layer{s + 1}.{i}")
        y = b.gap(y, name="avgpool")
        y = classifier(b, y, config.num_classes)
        return b.build([y], validate=False)

    def sample(self, rng: np.random.Generator) -> ResNetConfig:
        depth = int(rng.choice([18, 34, 50]))
        blk, reps = _DEPTHS[depth]
        scales = sample_scales(rng, 5)
        return ResNetConfig(
            resolution=int(rng.choice(RESOLUTIONS)), block=blk,
            repeats=tuple(int(rng.integers(max(1, n - 1), n + 2)) for n in reps),
            widths=tuple(scale_channels(w, s, 8)
                         for w, s in zip((64, 128, 256, 512), scales[1:])),
            kernels=tuple(int(rng.choice(KERNELS)) for _ in range(4)),
            stem_channels=scale_channels(64, scales[0], 8))

"""GoogLeNet / Inception v1 (Szegedy et al., CVPR 2015), as torchvision's ``googlenet``.

Every conv is torchvision's BasicConv2d (conv without bias → BN eps 1e-3 → ReLU).
Two details follow torchvision rather than the paper, because the published figures
we check against are torchvision's:

- the "5x5" branch of every Inception module uses a 3x3 kernel (a known quirk kept
  for compatibility with the released weights); the paper's 5x5 is the
  ``googlenet_paper`` preset;
- the auxiliary classifiers are not part of the model. torchvision builds them only
  for training (``aux_logits=True``; they add 6.38 M params) and deletes them when it
  loads the released weights. Its published 6,624,904 params are the model without
  them, which the base config reproduces exactly.

Base config: 224x224, 6,624,904 params and 1.50 G multiply-adds (torchvision:
6.62 M / 1.50 G).

Examples
--------
>>> fam = GoogLeNetFamily()
>>> fam.build(fam.base_config()).cost().params
6624904
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from nnmeter.ir.builder import GraphBuilder
from nnmeter.ir.graph import ModelGraph, Ref
from nnmeter.zoo._blocks import classifier, conv_bn_act
from nnmeter.zoo.base import KERNELS, RESOLUTIONS, Family, sample_scales, scale_channels

__all__ = ["GoogLeNetConfig", "GoogLeNetFamily"]

#: One Inception module: (ch1x1, ch3x3_reduce, ch3x3, ch5x5_reduce, ch5x5, pool_proj,
#: kernel of the "3x3" branch, kernel of the "5x5" branch).
Inception = tuple[int, int, int, int, int, int, int, int]

_SPECS = {
    "3a": (64, 96, 128, 16, 32, 32), "3b": (128, 128, 192, 32, 96, 64),
    "4a": (192, 96, 208, 16, 48, 64), "4b": (160, 112, 224, 24, 64, 64),
    "4c": (128, 128, 256, 24, 64, 64), "4d": (112, 144, 288, 32, 64, 64),
    "4e": (256, 160, 320, 32, 128, 128),
    "5a": (256, 160, 320, 32, 128, 128), "5b": (384, 192, 384, 48, 128, 128),
}
_STAGE_KEYS = (("3a", "3b"), ("4a", "4b", "4c", "4d", "4e"), ("5a", "5b"))


def _published(k5: int = 3) -> tuple[tuple[Inception, ...], ...]:
    return tuple(tuple(_SPECS[key] + (3, k5) for key in keys) for keys in _STAGE_KEYS)


@dataclass(frozen=True)
class GoogLeNetConfig:
    """One GoogLeNet model.

    Attributes
    ----------
    resolution : int
        Input height and width in pixels.
    stem : tuple of 3 ints
        Channels of conv1 (7x7/2), conv2 (1x1) and conv3 (3x3).
    stages : tuple of 3 stages
        Inception modules per stage (see :data:`Inception`); a 3x3/2 max pool (ceil
        mode) precedes stages 2 and 3 (2x2/2 before stage 3, as torchvision).
    num_classes : int
        Classifier outputs.
    """

    resolution: int = 224
    stem: tuple[int, ...] = (64, 64, 192)
    stages: tuple[tuple[Inception, ...], ...] = _published()
    num_classes: int = 1000


def _inception(b: GraphBuilder, x: Ref, spec: Inception, name: str) -> Ref:
    c1, c3r, c3, c5r, c5, pp, k3, k5 = spec
    eps = 1e-3
    b1 = conv_bn_act(b, x, c1, 1, name=f"{name}.branch1", bn_eps=eps)
    b2 = conv_bn_act(b, x, c3r, 1, name=f"{name}.branch2.0", bn_eps=eps)
    b2 = conv_bn_act(b, b2, c3, k3, name=f"{name}.branch2.1", bn_eps=eps)
    b3 = conv_bn_act(b, x, c5r, 1, name=f"{name}.branch3.0", bn_eps=eps)
    b3 = conv_bn_act(b, b3, c5, k5, name=f"{name}.branch3.1", bn_eps=eps)
    b4 = b.maxpool(x, 3, 1, pads=(1, 1, 1, 1), ceil_mode=True, name=f"{name}.branch4.pool")
    b4 = conv_bn_act(b, b4, pp, 1, name=f"{name}.branch4.1", bn_eps=eps)
    return b.concat([b1, b2, b3, b4], name=f"{name}.concat")


class GoogLeNetFamily(Family):
    name = "googlenet"
    config_cls = GoogLeNetConfig
    description = "GoogLeNet (Inception v1, torchvision layout, no auxiliary heads)"
    ranges = {
        "resolution": "160-256 step 32",
        "channels": "stem and per stage 0.2-1.8x, multiples of 8",
        "kernel": "{3,5,7} per stage for each of the two spatial branches",
        "repeats": "Inception modules per stage: published n-1 .. n+1",
    }
    reference = {"params": 6_624_904, "macs": 1_500_000_000,
                 "source": "torchvision googlenet (IMAGENET1K_V1, aux heads removed as "
                           "torchvision does when loading weights): 6.62 M params, 1.50 GFLOPS"}

    def presets(self) -> dict[str, GoogLeNetConfig]:
        return {"googlenet": self.base_config(),
                "googlenet_paper": GoogLeNetConfig(stages=_published(k5=5))}

    def build(self, config: GoogLeNetConfig) -> ModelGraph:
        b = GraphBuilder("googlenet", (1, 3, config.resolution, config.resolution))
        c1, c2, c3 = config.stem
        y = conv_bn_act(b, b.x, c1, 7, 2, name="conv1", bn_eps=1e-3)
        y = b.maxpool(y, 3, 2, ceil_mode=True, name="maxpool1")
        y = conv_bn_act(b, y, c2, 1, name="conv2", bn_eps=1e-3)
        y = conv_bn_act(b, y, c3, 3, name="conv3", bn_eps=1e-3)
        pools = ((3, "maxpool2"), (3, "maxpool3"), (2, "maxpool4"))
        for si, stage in enumerate(config.stages):
            k, pname = pools[si]
            y = b.maxpool(y, k, 2, ceil_mode=True, name=pname)
            for mi, spec in enumerate(stage):
                y = _inception(b, y, spec, f"inception{si + 3}{chr(ord('a') + mi)}")
        y = b.gap(y, name="avgpool")
        y = classifier(b, y, config.num_classes)
        return b.build([y], validate=False)

    def sample(self, rng: np.random.Generator) -> GoogLeNetConfig:
        scales = sample_scales(rng, 4)
        stages = []
        for keys, scale in zip(_STAGE_KEYS, scales[1:]):
            n = len(keys)
            reps = int(rng.integers(max(1, n - 1), n + 2))
            k3, k5 = int(rng.choice(KERNELS)), int(rng.choice(KERNELS))
            specs = [_SPECS[keys[min(i, n - 1)]] for i in range(reps)]
            stages.append(tuple(tuple(scale_channels(c, scale, 8) for c in spec) + (k3, k5)
                                for spec in specs))
        return GoogLeNetConfig(
            resolution=int(rng.choice(RESOLUTIONS)),
            stem=tuple(scale_channels(c, scales[0], 8) for c in (64, 64, 192)),
            stages=tuple(stages))

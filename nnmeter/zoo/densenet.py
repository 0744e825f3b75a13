"""DenseNet (Huang et al., CVPR 2017), as torchvision's ``densenet121/169/201``.

Each dense layer reads the concatenation of every earlier feature map of its block,
in order, exactly as torchvision does (``torch.cat(prev_features, 1)``), and the block
output is the concatenation of all of them.

Base config: DenseNet-121, 224x224, 7,978,856 params and 2.83 G multiply-adds
(torchvision: 7.98 M / 2.83 GFLOPS).

Examples
--------
>>> fam = DenseNetFamily()
>>> fam.build(fam.base_config()).cost().params
7978856
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from nnmeter.ir.builder import GraphBuilder
from nnmeter.ir.graph import ModelGraph
from nnmeter.zoo._blocks import classifier
from nnmeter.zoo.base import RESOLUTIONS, Family, sample_scale, scale_channels

__all__ = ["DenseNetConfig", "DenseNetFamily"]

_LAYOUTS = {121: (6, 12, 24, 16), 169: (6, 12, 32, 32), 201: (6, 12, 48, 32)}


@dataclass(frozen=True)
class DenseNetConfig:
    """One DenseNet model.

    Attributes
    ----------
    resolution : int
        Input height and width in pixels.
    growth_rate : int
        Channels each dense layer adds.
    block_config : tuple of 4 ints
        Dense layers per block.
    init_features : int
        Output channels of the 7x7 stride-2 stem conv.
    bn_size : int
        Bottleneck width of a dense layer's 1x1 conv, in multiples of ``growth_rate``.
    num_classes : int
        Classifier outputs.
    """

    resolution: int = 224
    growth_rate: int = 32
    block_config: tuple[int, ...] = (6, 12, 24, 16)
    init_features: int = 64
    bn_size: int = 4
    num_classes: int = 1000


class DenseNetFamily(Family):
    name = "densenet"
    config_cls = DenseNetConfig
    description = "DenseNet-121 (dense blocks with concatenation, transitions halve channels)"
    ranges = {
        "resolution": "160-256 step 32",
        "growth_rate": "32 x 0.2-1.8, multiples of 4",
        "init_features": "64 x 0.2-1.8, multiples of 8",
        "bn_size": "{2,3,4}",
        "repeats": "per block 0.5-1.5x of DenseNet-121's (6, 12, 24, 16)",
    }
    reference = {"params": 7_978_856, "macs": 2_830_000_000,
                 "source": "torchvision densenet121 (IMAGENET1K_V1): 7.98 M params, "
                           "2.83 GFLOPS"}

    def presets(self) -> dict[str, DenseNetConfig]:
        return {f"densenet{d}": DenseNetConfig(block_config=c) for d, c in _LAYOUTS.items()}

    def build(self, config: DenseNetConfig) -> ModelGraph:
        b = GraphBuilder("densenet", (1, 3, config.resolution, config.resolution))
        y = b.conv(b.x, config.init_features, 7, 2, bias=False, name="features.conv0")
        y = b.bn(y, name="features.norm0")
        y = b.relu(y, name="features.relu0")
        y = b.maxpool(y, 3, 2, pads=(1, 1, 1, 1), name="features.pool0")
        growth, inner = config.growth_rate, config.bn_size * config.growth_rate
        for bi, n in enumerate(config.block_config, start=1):
            feats = [y]
            for li in range(1, n + 1):
                p = f"features.denseblock{bi}.denselayer{li}"
                z = feats[0] if len(feats) == 1 else b.concat(feats, name=f"{p}.concat")
                z = b.bn(z, name=f"{p}.norm1")
                z = b.relu(z, name=f"{p}.relu1")
                z = b.conv(z, inner, 1, bias=False, name=f"{p}.conv1")
                z = b.bn(z, name=f"{p}.norm2")
                z = b.relu(z, name=f"{p}.relu2")
                z = b.conv(z, growth, 3, bias=False, name=f"{p}.conv2")
                feats.append(z)
            y = b.concat(feats, name=f"features.denseblock{bi}.concat")
            if bi < len(config.block_config):
                p = f"features.transition{bi}"
                c = b.shape(y)[1]
                y = b.bn(y, name=f"{p}.norm")
                y = b.relu(y, name=f"{p}.relu")
                y = b.conv(y, c // 2, 1, bias=False, name=f"{p}.conv")
                y = b.avgpool(y, 2, 2, name=f"{p}.pool")
        y = b.bn(y, name="features.norm5")
        y = b.relu(y, name="features.relu5")
        y = b.gap(y, name="avgpool")
        y = classifier(b, y, config.num_classes)
        return b.build([y], validate=False)

    def sample(self, rng: np.random.Generator) -> DenseNetConfig:
        scale = sample_scale(rng)
        return DenseNetConfig(
            resolution=int(rng.choice(RESOLUTIONS)),
            growth_rate=scale_channels(32, scale, 4),
            block_config=tuple(int(rng.integers(max(1, n - n // 2), n + n // 2 + 1))
                               for n in _LAYOUTS[121]),
            init_features=scale_channels(64, sample_scale(rng), 8),
            bn_size=int(rng.integers(2, 5)))

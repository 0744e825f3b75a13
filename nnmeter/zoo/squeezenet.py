"""SqueezeNet 1.1 (Iandola et al., 2016; v1.1 from the authors' repository), as
torchvision's ``squeezenet1_1``.

Stem conv 3x3/2 64 → max pool → 8 Fire modules (squeeze 1x1, then expand 1x1 and
expand 3x3 concatenated) with max pools after the 2nd and 4th → conv 1x1 1000 → ReLU
→ global pooling. No batch norm; convs have biases.

Base config: 224x224, 1,235,496 params and 0.35 G multiply-adds (torchvision:
1.24 M / 0.35 G).

Examples
--------
>>> fam = SqueezeNetFamily()
>>> fam.build(fam.base_config()).cost().params
1235496
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from nnmeter.ir.builder import GraphBuilder
from nnmeter.ir.graph import ModelGraph
from nnmeter.zoo.base import KERNELS, RESOLUTIONS, Family, sample_scales, scale_channels

__all__ = ["SqueezeNetConfig", "SqueezeNetFamily"]

# Fire modules per stage: (squeeze, expand1x1, expand3x3, repeats).
_STAGES = ((16, 64, 64, 2), (32, 128, 128, 2), (48, 192, 192, 2), (64, 256, 256, 2))


def _published() -> tuple[tuple[tuple[int, int, int, int], ...], ...]:
    stages = []
    for s, e1, e3, n in _STAGES:
        stages.append(tuple((s, e1, e3, 3) for _ in range(n)))
    # v1.1 has no pool between its last two stages: merge them into one stage.
    return (stages[0], stages[1], stages[2] + stages[3])


@dataclass(frozen=True)
class SqueezeNetConfig:
    """One SqueezeNet model.

    Attributes
    ----------
    resolution : int
        Input height and width in pixels.
    stem_channels : int
        Output channels of the 3x3 stride-2 stem conv.
    stages : tuple of stages
        Each stage is a tuple of Fire modules (squeeze, expand1x1, expand_kxk, k); a
        3x3/2 max pool (ceil mode) precedes every stage.
    num_classes : int
        Outputs of the final 1x1 conv.
    """

    resolution: int = 224
    stem_channels: int = 64
    stages: tuple[tuple[tuple[int, int, int, int], ...], ...] = _published()
    num_classes: int = 1000


class SqueezeNetFamily(Family):
    name = "squeezenet"
    config_cls = SqueezeNetConfig
    description = "SqueezeNet 1.1 (Fire modules, no batch norm)"
    ranges = {
        "resolution": "160-256 step 32",
        "channels": "stem and per stage 0.2-1.8x (squeeze multiples of 4, expand of 8)",
        "kernel": "{3,5,7} per stage (expand branch)",
        "repeats": "Fire modules per stage: published n-1 .. n+1",
    }
    reference = {"params": 1_235_496, "macs": 350_000_000,
                 "source": "torchvision squeezenet1_1 (IMAGENET1K_V1): 1.24 M params, "
                           "0.35 GFLOPS"}

    def build(self, config: SqueezeNetConfig) -> ModelGraph:
        b = GraphBuilder("squeezenet", (1, 3, config.resolution, config.resolution))
        y = b.conv(b.x, config.stem_channels, 3, 2, pads=(0, 0, 0, 0), name="features.0.conv")
        y = b.relu(y, name="features.0.relu")
        i = 0
        for si, stage in enumerate(config.stages):
            y = b.maxpool(y, 3, 2, ceil_mode=True, name=f"features.pool{si + 1}")
            for s, e1, e3, k in stage:
                i += 1
                p = f"features.fire{i}"
                sq = b.relu(b.conv(y, s, 1, name=f"{p}.squeeze"), name=f"{p}.squeeze_relu")
                a = b.relu(b.conv(sq, e1, 1, name=f"{p}.expand1x1"),
                           name=f"{p}.expand1x1_relu")
                c = b.relu(b.conv(sq, e3, k, name=f"{p}.expand{k}x{k}"),
                           name=f"{p}.expand{k}x{k}_relu")
                y = b.concat([a, c], name=f"{p}.concat")
        y = b.conv(y, config.num_classes, 1, name="classifier.conv")
        y = b.relu(y, name="classifier.relu")
        y = b.gap(y, keepdims=False, name="classifier.avgpool")
        return b.build([y], validate=False)

    def sample(self, rng: np.random.Generator) -> SqueezeNetConfig:
        scales = sample_scales(rng, 5)
        fires = []
        for (s, e1, e3, n), scale in zip(_STAGES, scales[1:]):
            k = int(rng.choice(KERNELS))
            reps = int(rng.integers(max(1, n - 1), n + 2))
            fires.append(tuple((scale_channels(s, scale, 4), scale_channels(e1, scale, 8),
                                scale_channels(e3, scale, 8), k) for _ in range(reps)))
        return SqueezeNetConfig(
            resolution=int(rng.choice(RESOLUTIONS)),
            stem_channels=scale_channels(64, scales[0], 8),
            stages=(fires[0], fires[1], fires[2] + fires[3]))

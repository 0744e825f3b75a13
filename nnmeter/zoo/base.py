"""The Family interface of the zoo and the helpers every family's sampler shares.

A *family* is one published CNN architecture (ResNet, MobileNetV2, ...) together with
a space of variants around it. Each family module defines

- a frozen dataclass ``Config`` that describes one model completely (its default
  values reproduce the published architecture),
- a :class:`Family` subclass with ``build(config) -> ModelGraph`` and
  ``sample(rng) -> Config``.

Configs hold only ints, floats, strings, bools and (nested) tuples of them, so they
round-trip through JSON with :func:`config_to_dict` / :meth:`Family.config_from_dict`.

Variant ranges follow nn-Meter: per-stage channel scaling 0.2-1.8x (on a 0.1 grid;
mobile nets snap channels to multiples of 8), kernel sizes from {3, 5, 7} where the
family has a choice, expansion ratios 1-8 in inverted bottlenecks, block repeats
around the published depth, and input resolution 160-256 in steps of 32 where the
family's classifier allows it.

Examples
--------
>>> import numpy as np
>>> rng = np.random.default_rng(0)
>>> scale = sample_scale(rng)
>>> 0.2 <= scale <= 1.8
True
>>> make_divisible(37.5, 8)
40
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Any, ClassVar

import numpy as np

from nnmeter.ir.graph import ModelGraph

__all__ = [
    "Family",
    "config_to_dict",
    "config_hash",
    "make_divisible",
    "sample_scale",
    "sample_scales",
    "scale_channels",
    "RESOLUTIONS",
    "SCALE_GRID",
    "KERNELS",
]

#: Channel scaling factors, 0.2-1.8 in steps of 0.1 (nn-Meter's grid).
SCALE_GRID: tuple[float, ...] = tuple(round(0.2 + 0.1 * i, 1) for i in range(17))
#: Input resolutions sampled where a family allows it.
RESOLUTIONS: tuple[int, ...] = (160, 192, 224, 256)
#: Kernel sizes sampled where a family has a choice.
KERNELS: tuple[int, ...] = (3, 5, 7)


def make_divisible(value: float, divisor: int = 8, min_value: int | None = None) -> int:
    """Round ``value`` to the nearest multiple of ``divisor``, never below ``min_value``
    (default ``divisor``) and never more than 10 % below ``value`` (the rule used by
    torchvision's MobileNets)."""
    min_value = divisor if min_value is None else min_value
    new = max(min_value, int(value + divisor / 2) // divisor * divisor)
    if new < 0.9 * value:
        new += divisor
    return int(new)


def scale_channels(channels: int, scale: float, divisor: int = 1) -> int:
    """``channels`` × ``scale``, rounded to a multiple of ``divisor`` (at least ``divisor``).

    With ``divisor`` 1 the result is the plain rounded product, at least 1.
    """
    if divisor <= 1:
        return max(1, int(round(channels * scale)))
    return make_divisible(channels * scale, divisor)


def sample_scale(rng: np.random.Generator, grid: Sequence[float] = SCALE_GRID) -> float:
    """One channel-scaling factor drawn uniformly from ``grid`` (0.2-1.8 step 0.1)."""
    return float(grid[int(rng.integers(len(grid)))])


def sample_scales(rng: np.random.Generator, n: int,
                  grid: Sequence[float] = SCALE_GRID) -> tuple[float, ...]:
    """``n`` per-stage channel-scaling factors, each on ``grid`` (0.2-1.8 step 0.1).

    A global factor ``g`` is drawn from the grid, and each stage gets ``g`` times a
    jitter in [0.7, 1.4], snapped back to the grid. Every stage factor stays within
    0.2-1.8 and stages differ, while whole models still range from very thin to very
    wide, which is what spreads the FLOPs of a family over more than an order of
    magnitude (independent per-stage draws average out and would not).
    """
    g = sample_scale(rng, grid)
    lo, hi = grid[0], grid[-1]
    out = []
    for _ in range(n):
        s = g * float(rng.uniform(0.7, 1.4))
        s = min(hi, max(lo, s))
        out.append(float(min(grid, key=lambda v: abs(v - s))))
    return tuple(out)


def _jsonable(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, (tuple, list)):
        return [_jsonable(v) for v in value]
    if isinstance(value, (np.integer,)):
        return int(value)
    if isinstance(value, (np.floating,)):
        return float(value)
    return value


def _tuplify(value: Any) -> Any:
    if isinstance(value, list):
        return tuple(_tuplify(v) for v in value)
    return value


def config_to_dict(config: Any) -> dict[str, Any]:
    """JSON-able dict of a family config (tuples become lists)."""
    return _jsonable(config)


def config_hash(family: str, config: Any) -> str:
    """8 hex digits identifying (family, config); equal configs give equal hashes."""
    text = json.dumps({"family": family, "config": config_to_dict(config)},
                      sort_keys=True, separators=(",", ":"))
    return hashlib.sha1(text.encode()).hexdigest()[:8]


class Family(ABC):
    """One architecture family: its published base config, a builder and a sampler.

    Subclasses set ``name``, ``config_cls``, ``description``, ``ranges`` (what the
    sampler varies, for documentation and tables) and ``reference`` (the published
    figures the base config reproduces), and implement :meth:`build` and
    :meth:`sample`.
    """

    name: ClassVar[str]
    config_cls: ClassVar[type]
    description: ClassVar[str] = ""
    ranges: ClassVar[dict[str, str]] = {}
    #: Published figures of the base config: {"params": ..., "macs": ..., "source": ...}.
    reference: ClassVar[dict[str, Any]] = {}

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        # a family's build makes hundreds of small acyclic objects: with the cyclic
        # collector paused it is several times faster in a process that holds many
        # graphs (a NAS loop); see nnmeter._gc
        if "build" in cls.__dict__ and not getattr(cls.build, "__wrapped__", None):
            from nnmeter._gc import without_collector

            cls.build = without_collector(cls.__dict__["build"])  # type: ignore[method-assign]

    def base_config(self) -> Any:
        """The config that reproduces the published architecture."""
        return self.config_cls()

    def presets(self) -> dict[str, Any]:
        """Named published configs of the family (e.g. resnet18, resnet50); base included."""
        return {self.name: self.base_config()}

    @abstractmethod
    def build(self, config: Any) -> ModelGraph:
        """Build the model ``config`` describes as a shape-inferred ModelGraph.

        Raises
        ------
        nnmeter.errors.ShapeInferenceError
            If the config gives an impossible model (for example a resolution too small).
        """

    @abstractmethod
    def sample(self, rng: np.random.Generator) -> Any:
        """Draw one config from the family's variant space (see ``ranges``)."""

    def config_from_dict(self, data: dict[str, Any]) -> Any:
        """Rebuild a config from :func:`config_to_dict` output.

        Raises
        ------
        TypeError
            If ``data`` has fields the config does not know.
        """
        known = {f.name for f in dataclasses.fields(self.config_cls)}
        extra = sorted(set(data) - known)
        if extra:
            raise TypeError(
                f"{self.name} config has no fields {extra}; known fields: {sorted(known)}"
            )
        return self.config_cls(**{k: _tuplify(v) for k, v in data.items()})

    def __repr__(self) -> str:
        return f"<zoo family {self.name!r}>"

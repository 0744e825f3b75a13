"""The model zoo: 12 ImageNet CNN families and NAS-Bench-201, with seeded variant samplers.

Families (see :data:`FAMILIES`): alexnet, vgg, resnet, densenet, squeezenet, googlenet,
mobilenetv1, mobilenetv2, mobilenetv3, shufflenetv2, mnasnet, proxylessnas,
nasbench201. Each has a published ``base_config()``, ``build(config)`` and
``sample(rng)``; :func:`sample_variants` draws deterministic, distinct variants and
:func:`extract_prior` turns a sample of the zoo into per-op configuration priors.

Examples
--------
>>> from nnmeter import zoo
>>> fam = zoo.get_family("resnet")
>>> fam.build(fam.base_config()).cost().params
11689512
>>> v = zoo.sample_variants("resnet", 2, seed=1)[1]
>>> zoo.get_variant(v.name) == v
True
"""

from __future__ import annotations

from nnmeter.registry import Registry
from nnmeter.zoo.alexnet import AlexNetFamily
from nnmeter.zoo.base import Family, config_hash, config_to_dict
from nnmeter.zoo.densenet import DenseNetFamily
from nnmeter.zoo.googlenet import GoogLeNetFamily
from nnmeter.zoo.mnasnet import MnasNetFamily
from nnmeter.zoo.mobilenetv1 import MobileNetV1Family
from nnmeter.zoo.mobilenetv2 import MobileNetV2Family
from nnmeter.zoo.mobilenetv3 import MobileNetV3Family
from nnmeter.zoo.nasbench201 import NASBench201Family
from nnmeter.zoo.prior import extract_prior, prior_histograms, Histogram, PRIOR_FIELDS
from nnmeter.zoo.proxylessnas import ProxylessNASFamily
from nnmeter.zoo.resnet import ResNetFamily
from nnmeter.zoo.sampler import (
    Variant, base_variant, get_variant, sample_variants, variant_from_record,
)
from nnmeter.zoo.shufflenetv2 import ShuffleNetV2Family
from nnmeter.zoo.squeezenet import SqueezeNetFamily
from nnmeter.zoo.vgg import VGGFamily

__all__ = [
    "FAMILIES", "FAMILY_NAMES", "Family", "Variant", "get_family", "sample_variants",
    "variant_from_record", "get_variant", "base_variant", "extract_prior",
    "prior_histograms", "Histogram", "PRIOR_FIELDS", "config_hash", "config_to_dict",
]

#: Every zoo family by name; third parties add families via the
#: ``nnmeter.zoo_families`` entry-point group (a Family instance).
FAMILIES: Registry[Family] = Registry("zoo families", entry_point_group="nnmeter.zoo_families")
for _cls in (AlexNetFamily, VGGFamily, ResNetFamily, DenseNetFamily, SqueezeNetFamily,
             GoogLeNetFamily, MobileNetV1Family, MobileNetV2Family, MobileNetV3Family,
             ShuffleNetV2Family, MnasNetFamily, ProxylessNASFamily, NASBench201Family):
    FAMILIES.register(_cls.name, _cls())
del _cls

#: The built-in families, in the order of the nn-Meter paper.
FAMILY_NAMES: tuple[str, ...] = (
    "alexnet", "vgg", "resnet", "densenet", "squeezenet", "googlenet", "mobilenetv1",
    "mobilenetv2", "mobilenetv3", "shufflenetv2", "mnasnet", "proxylessnas", "nasbench201",
)


def get_family(name: str) -> Family:
    """The family registered as ``name``.

    Raises
    ------
    nnmeter.errors.UnknownNameError
        If no family has that name; the message lists the families.
    """
    return FAMILIES.get(name)

"""The model zoo: 12 ImageNet CNN families and NAS-Bench-201, with seeded variant samplers,
plus three opt-in transformer families.

Default families (:data:`FAMILY_NAMES`): alexnet, vgg, resnet, densenet, squeezenet,
googlenet, mobilenetv1, mobilenetv2, mobilenetv3, shufflenetv2, mnasnet, proxylessnas,
nasbench201. Opt-in families (:data:`TRANSFORMER_FAMILIES`): vit, bert, mobilevit. All
are registered in :data:`FAMILIES`, so every function that takes a family name takes
them, but only the default ones are walked when no families are named (the priors,
the benchmarks, the golden predictions): name a transformer family to use it.

Each family has a published ``base_config()``, ``build(config)`` and ``sample(rng)``;
:func:`sample_variants` draws deterministic, distinct variants and :func:`extract_prior`
turns a sample of the zoo into per-op configuration priors.

Examples
--------
>>> from nnmeter import zoo
>>> fam = zoo.get_family("resnet")
>>> fam.build(fam.base_config()).cost().params
11689512
>>> v = zoo.sample_variants("resnet", 2, seed=1)[1]
>>> zoo.get_variant(v.name) == v
True
>>> "vit" in zoo.FAMILIES and "vit" not in zoo.default_family_names()
True
"""

from __future__ import annotations

from nnmeter.registry import Registry
from nnmeter.zoo.alexnet import AlexNetFamily
from nnmeter.zoo.base import Family, config_hash, config_to_dict
from nnmeter.zoo.bert import BERTFamily
from nnmeter.zoo.densenet import DenseNetFamily
from nnmeter.zoo.googlenet import GoogLeNetFamily
from nnmeter.zoo.mnasnet import MnasNetFamily
from nnmeter.zoo.mobilenetv1 import MobileNetV1Family
from nnmeter.zoo.mobilenetv2 import MobileNetV2Family
from nnmeter.zoo.mobilenetv3 import MobileNetV3Family
from nnmeter.zoo.mobilevit import MobileViTFamily
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
from nnmeter.zoo.vit import ViTFamily

__all__ = [
    "FAMILIES", "FAMILY_NAMES", "TRANSFORMER_FAMILIES", "default_family_names", "Family",
    "Variant", "get_family", "sample_variants",
    "variant_from_record", "get_variant", "base_variant", "extract_prior",
    "prior_histograms", "Histogram", "PRIOR_FIELDS", "config_hash", "config_to_dict",
]

#: Every zoo family by name; third parties add families via the
#: ``nnmeter.zoo_families`` entry-point group (a Family instance).
FAMILIES: Registry[Family] = Registry("zoo families", entry_point_group="nnmeter.zoo_families")
for _cls in (AlexNetFamily, VGGFamily, ResNetFamily, DenseNetFamily, SqueezeNetFamily,
             GoogLeNetFamily, MobileNetV1Family, MobileNetV2Family, MobileNetV3Family,
             ShuffleNetV2Family, MnasNetFamily, ProxylessNASFamily, NASBench201Family,
             ViTFamily, BERTFamily, MobileViTFamily):
    FAMILIES.register(_cls.name, _cls())
del _cls

#: The built-in families, in the order of the nn-Meter paper.
FAMILY_NAMES: tuple[str, ...] = (
    "alexnet", "vgg", "resnet", "densenet", "squeezenet", "googlenet", "mobilenetv1",
    "mobilenetv2", "mobilenetv3", "shufflenetv2", "mnasnet", "proxylessnas", "nasbench201",
)

#: Opt-in transformer families: registered, but left out of :data:`FAMILY_NAMES` and
#: :func:`default_family_names`, so the CNN benchmarks, priors and golden predictions
#: do not change; name them to use them.
TRANSFORMER_FAMILIES: tuple[str, ...] = ("vit", "bert", "mobilevit")


def default_family_names() -> list[str]:
    """Every registered family except the opt-in :data:`TRANSFORMER_FAMILIES`, sorted:
    the built-in :data:`FAMILY_NAMES` plus any entry-point plugins. What the zoo's
    functions walk when they are given no families."""
    return [n for n in FAMILIES.names() if n not in TRANSFORMER_FAMILIES]


def get_family(name: str) -> Family:
    """The family registered as ``name``.

    Raises
    ------
    nnmeter.errors.UnknownNameError
        If no family has that name; the message lists the families.
    """
    return FAMILIES.get(name)

"""Seeded variant sampling: deterministic, deduplicated model variants of a family.

A :class:`Variant` is (family, config, seed, index). Its ``name`` is stable,
``<family>-s<seed>-i<index:03d>-<8-hex hash of the config>``, and its JSON
:meth:`~Variant.to_record` holds the full config, so :func:`variant_from_record`
rebuilds the identical graph without re-running the sampler. :func:`get_variant`
also accepts a bare name, which it regenerates from the seed.

Examples
--------
>>> vs = sample_variants("mobilenetv2", 3, seed=42)
>>> [v.name.split("-")[:3] for v in vs]
[['mobilenetv2', 's42', 'i000'], ['mobilenetv2', 's42', 'i001'], ['mobilenetv2', 's42', 'i002']]
>>> again = variant_from_record(vs[1].to_record())
>>> again == vs[1] and again.build().structurally_equal(vs[1].build())
True
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import numpy as np

from nnmeter.errors import UnknownNameError
from nnmeter.ir.graph import ModelGraph
from nnmeter.zoo.base import Family, config_hash, config_to_dict

__all__ = ["Variant", "sample_variants", "variant_from_record", "get_variant",
           "base_variant", "RECORD_VERSION"]

#: Version of the variant record layout.
RECORD_VERSION = 1
#: How many draws per wanted variant before giving up on finding new configs.
_MAX_DRAWS_PER_VARIANT = 50
_NAME_RE = re.compile(r"^(?P<family>[a-z0-9_]+)-s(?P<seed>\d+)-i(?P<index>\d+)-(?P<hash>[0-9a-f]{8})$")


def _family(family: str | Family) -> Family:
    if isinstance(family, Family):
        return family
    from nnmeter.zoo import FAMILIES

    return FAMILIES.get(family)


@dataclass(frozen=True)
class Variant:
    """One model of the zoo: a family's config plus where the sampler drew it.

    Attributes
    ----------
    family : str
        Family name (a key of :data:`nnmeter.zoo.FAMILIES`).
    config : object
        The family's frozen config dataclass.
    seed : int
        Sampler seed; -1 for a family's published base config.
    index : int
        Position in the seed's deduplicated sequence; -1 for the base config.
    preset : str
        For a published config, its preset name ("resnet50"); empty for sampled ones.
    """

    family: str
    config: Any
    seed: int
    index: int
    preset: str = ""

    @property
    def config_hash(self) -> str:
        """8 hex digits identifying the config."""
        return config_hash(self.family, self.config)

    @property
    def name(self) -> str:
        """Stable name, e.g. ``mobilenetv2-s42-i007-1a2b3c4d``; the preset name (or the
        family name) for a published config."""
        if self.seed < 0:
            return self.preset or self.family
        return f"{self.family}-s{self.seed}-i{self.index:03d}-{self.config_hash}"

    def build(self, *, validate: bool = False) -> ModelGraph:
        """Build the variant's ModelGraph, named after the variant, with the record in
        ``graph.meta["zoo_variant"]``.

        Raises
        ------
        nnmeter.errors.GraphValidationError
            If ``validate`` is true and the graph is invalid.
        """
        graph = _family(self.family).build(self.config)
        graph.name = self.name
        graph.meta["zoo_variant"] = self.to_record()
        if validate:
            graph.validate()
        return graph

    def to_record(self) -> dict[str, Any]:
        """JSON-able record: everything :func:`variant_from_record` needs."""
        return {
            "record_version": RECORD_VERSION,
            "name": self.name,
            "family": self.family,
            "seed": self.seed,
            "index": self.index,
            "config_hash": self.config_hash,
            "config": config_to_dict(self.config),
            **({"preset": self.preset} if self.preset else {}),
        }


def sample_variants(family: str | Family, n: int, seed: int = 0) -> list[Variant]:
    """The first ``n`` distinct variants of ``family`` for ``seed``.

    Deterministic: the same (family, n, seed) always gives the same list, and the first
    k variants for n > k equal the k variants for n = k. Configs that repeat an
    earlier one are skipped, so no two variants are identical.

    Raises
    ------
    nnmeter.errors.UnknownNameError
        If ``family`` is not a registered family.
    ValueError
        If ``n`` is negative, or the family's space cannot supply ``n`` distinct
        configs (after 50 draws per variant).
    """
    fam = _family(family)
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    rng = np.random.default_rng(seed)
    seen: set[str] = set()
    out: list[Variant] = []
    draws = 0
    while len(out) < n:
        if draws >= _MAX_DRAWS_PER_VARIANT * n:
            raise ValueError(
                f"family {fam.name!r} gave only {len(out)} distinct configs in {draws} "
                f"draws; ask for fewer variants than {n}"
            )
        draws += 1
        config = fam.sample(rng)
        h = config_hash(fam.name, config)
        if h in seen:
            continue
        seen.add(h)
        out.append(Variant(fam.name, config, int(seed), len(out)))
    return out


def base_variant(family: str | Family) -> Variant:
    """The family's published base config as a Variant (seed and index -1)."""
    fam = _family(family)
    return Variant(fam.name, fam.base_config(), -1, -1)


def variant_from_record(record: dict[str, Any]) -> Variant:
    """Rebuild a Variant from :meth:`Variant.to_record` output.

    Raises
    ------
    ValueError
        If the record lacks fields, or its ``config_hash`` does not match its config
        (the record was edited or comes from an incompatible version).
    """
    try:
        fam = _family(record["family"])
        config = fam.config_from_dict(record["config"])
        v = Variant(fam.name, config, int(record.get("seed", -1)), int(record.get("index", -1)),
                    str(record.get("preset", "")))
    except KeyError as err:
        if isinstance(err, UnknownNameError):
            raise
        raise ValueError(
            f"variant record lacks field {err}; it needs family, config, seed and index "
            f"(as written by Variant.to_record)"
        ) from err
    except TypeError as err:
        raise ValueError(f"variant record's config does not fit its family: {err}") from err
    want = record.get("config_hash")
    if want is not None and want != v.config_hash:
        raise ValueError(
            f"variant record {record.get('name')!r} has config_hash {want} but its config "
            f"hashes to {v.config_hash}; the record was edited or comes from another version"
        )
    return v


def get_variant(name_or_record: str | dict[str, Any]) -> Variant:
    """A variant from its record, its name (``family-sSEED-iINDEX-HASH``) or a family
    name (the published base config; also a preset name such as ``resnet50``).

    Raises
    ------
    nnmeter.errors.UnknownNameError
        If the name matches no family, preset or variant; the message says which
        forms are accepted.
    """
    if isinstance(name_or_record, dict):
        return variant_from_record(name_or_record)
    name = str(name_or_record)
    from nnmeter.zoo import FAMILIES

    if name in FAMILIES:
        return base_variant(name)
    for fam_name in FAMILIES.names():
        presets = FAMILIES.get(fam_name).presets()
        if name in presets:
            return Variant(fam_name, presets[name], -1, -1, name)
    m = _NAME_RE.match(name)
    if m is None or m["family"] not in FAMILIES:
        raise UnknownNameError(
            f"{name!r} is not a zoo family, preset or variant name; use a family "
            f"({', '.join(FAMILIES.names())}), a preset such as resnet50, or a variant "
            f"name such as mobilenetv2-s42-i007-1a2b3c4d"
        )
    index = int(m["index"])
    v = sample_variants(m["family"], index + 1, int(m["seed"]))[index]
    if v.config_hash != m["hash"]:
        raise UnknownNameError(
            f"variant {name!r}: seed {m['seed']} index {index} gives config hash "
            f"{v.config_hash}, not {m['hash']}; the sampler changed since the name was made, "
            f"so rebuild it from its manifest record instead"
        )
    return v

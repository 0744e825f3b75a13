"""Kernel-configuration priors computed from the zoo (nn-Meter's "prior from real CNNs").

:func:`extract_prior` builds a seeded sample of every family's variants (plus the
published base configs) and records, for every node, the configuration fields of its
op type. :func:`prior_histograms` turns those lists into 40-bin histograms that the
kernel sampler draws from by inverse CDF. Nothing here is a hand-copied table; the
figures are whatever the zoo's graphs contain.

Fields per op type (H, W and C describe the first input; H, W are 1 for rank-2
tensors):

- conv: H, W, CIN, COUT, K, S, groups
- dwconv: H, C, K, S
- fc: CIN, COUT
- maxpool, avgpool: H, C, K, S
- gap: H, C
- concat: H, C (the list of input channel counts, in order)
- add, mul, bn, channelshuffle, split and every activation: H, C

Examples
--------
>>> prior = extract_prior(n_per_family=1, seed=0, families=["mobilenetv2"])
>>> sorted(prior)[:4]
['add', 'bn', 'conv', 'dwconv']
>>> set(prior["dwconv"][0]) == {"H", "C", "K", "S"}
True
>>> hist = prior_histograms(prior)["conv"]["CIN"]
>>> len(hist.counts), sum(hist.counts) == len(prior["conv"])
(40, True)
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np

from nnmeter.ir.graph import ModelGraph, Node
from nnmeter.ir.ops import ACTIVATIONS

__all__ = ["extract_prior", "graph_prior", "prior_histograms", "Histogram", "PRIOR_FIELDS"]

logger = logging.getLogger(__name__)

_HC = ("H", "C")
#: The fields recorded for each op type.
PRIOR_FIELDS: dict[str, tuple[str, ...]] = {
    "conv": ("H", "W", "CIN", "COUT", "K", "S", "groups"),
    "dwconv": ("H", "C", "K", "S"),
    "fc": ("CIN", "COUT"),
    "maxpool": ("H", "C", "K", "S"),
    "avgpool": ("H", "C", "K", "S"),
    "gap": _HC,
    "concat": _HC,
    "add": _HC, "mul": _HC, "bn": _HC, "channelshuffle": _HC, "split": _HC,
    **{a: _HC for a in sorted(ACTIVATIONS)},
}


def _hw(shape: tuple[int, ...]) -> tuple[int, int]:
    return (shape[2], shape[3]) if len(shape) == 4 else (1, 1)


def _record(node: Node) -> dict[str, Any] | None:
    op = node.op
    if op not in PRIOR_FIELDS or not node.input_shapes:
        return None
    x = node.input_shapes[0]
    h, w = _hw(x)
    a = node.attrs
    if op == "conv":
        return {"H": h, "W": w, "CIN": x[1], "COUT": a.out_channels, "K": a.kernel[0],
                "S": a.stride[0], "groups": a.groups}
    if op == "dwconv":
        return {"H": h, "C": x[1], "K": a.kernel[0], "S": a.stride[0]}
    if op == "fc":
        return {"CIN": x[-1], "COUT": a.out_features}
    if op in ("maxpool", "avgpool"):
        return {"H": h, "C": x[1], "K": a.kernel[0], "S": a.stride[0]}
    if op == "concat":
        return {"H": h, "C": [s[1] for s in node.input_shapes]}
    # H and C of the (first) input: for gap that is the map it averages, never 1; for
    # an SE multiply it is the feature map, not the (N, C, 1, 1) gate.
    return {"H": h, "C": x[1] if len(x) > 1 else 1}


def graph_prior(graph: ModelGraph) -> dict[str, list[dict[str, Any]]]:
    """Per-op-type configuration records of one shape-inferred graph."""
    out: dict[str, list[dict[str, Any]]] = {}
    for node in graph.topological_nodes():
        rec = _record(node)
        if rec is not None:
            out.setdefault(node.op, []).append(rec)
    return out


def extract_prior(n_per_family: int = 20, seed: int = 0, *,
                  families: Iterable[str] | None = None,
                  include_base: bool = True) -> dict[str, list[dict[str, Any]]]:
    """Empirical configurations per op type over a seeded sample of the zoo.

    Parameters
    ----------
    n_per_family : int
        Variants drawn from each family (with :func:`~nnmeter.zoo.sample_variants`).
    seed : int
        Sampler seed; the result is a deterministic function of the arguments.
    families : iterable of str, optional
        Families to walk (default: :func:`~nnmeter.zoo.default_family_names`, every
        registered family but the opt-in transformer ones).
    include_base : bool
        Also walk each family's published base config.

    Returns
    -------
    dict
        ``{op_type: [record, ...]}`` with the fields of :data:`PRIOR_FIELDS`; one
        record per node, duplicates kept (they carry the frequencies).
    """
    from nnmeter.zoo import default_family_names
    from nnmeter.zoo.sampler import base_variant, sample_variants

    names = list(families) if families is not None else default_family_names()
    prior: dict[str, list[dict[str, Any]]] = {}
    for name in names:
        variants = ([base_variant(name)] if include_base else [])
        variants += sample_variants(name, n_per_family, seed)
        for v in variants:
            for op, recs in graph_prior(v.build()).items():
                prior.setdefault(op, []).extend(recs)
        logger.debug("prior: walked %d models of %s", len(variants), name)
    return dict(sorted(prior.items()))


@dataclass(frozen=True)
class Histogram:
    """A 1-D histogram: ``counts[i]`` values fell in [edges[i], edges[i+1])."""

    edges: tuple[float, ...]
    counts: tuple[int, ...]

    @property
    def total(self) -> int:
        return int(sum(self.counts))

    def sample(self, rng: np.random.Generator, size: int = 1) -> np.ndarray:
        """Draw ``size`` values by inverse CDF: a bin by its weight, then uniformly
        inside it. Callers snap the floats to valid values."""
        counts = np.asarray(self.counts, dtype=float)
        if counts.sum() <= 0:
            raise ValueError("cannot sample from an empty histogram")
        cdf = np.cumsum(counts) / counts.sum()
        bins = np.searchsorted(cdf, rng.random(size), side="right")
        bins = np.minimum(bins, len(counts) - 1)
        lo = np.asarray(self.edges[:-1])[bins]
        hi = np.asarray(self.edges[1:])[bins]
        return lo + (hi - lo) * rng.random(size)

    def as_dict(self) -> dict[str, list]:
        return {"edges": list(self.edges), "counts": list(self.counts)}


def prior_histograms(prior: dict[str, list[dict[str, Any]]], bins: int = 40,
                     ) -> dict[str, dict[str, Histogram]]:
    """``{op_type: {field: Histogram}}`` with ``bins`` equal-width bins per field.

    List-valued fields (concat's input channels) contribute every element.
    """
    out: dict[str, dict[str, Histogram]] = {}
    for op, records in prior.items():
        fields = (PRIOR_FIELDS.get(op) or tuple(records[0])) if records else ()
        per_field: dict[str, Histogram] = {}
        for f in fields:
            values: list[float] = []
            for r in records:
                v = r.get(f)
                if isinstance(v, (list, tuple)):
                    values.extend(float(e) for e in v)
                elif v is not None:
                    values.append(float(v))
            if not values:
                continue
            counts, edges = np.histogram(np.asarray(values), bins=bins)
            per_field[f] = Histogram(tuple(float(e) for e in edges),
                                     tuple(int(c) for c in counts))
        out[op] = per_field
    return out

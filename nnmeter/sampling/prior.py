"""Prior distributions of kernel configurations, learned from real architectures.

A :class:`KernelPrior` describes one kernel type's configuration space as seen in
real models (``nnmeter.zoo.extract_prior``):

- **channel fields** (CIN, COUT, features, ...): integers >= 1, modelled by a 40-bin
  histogram and sampled by inverse CDF, as nn-Meter does. Histograms are kept per
  value of the *context* (the spatial size field when there is one), because channels
  and resolution are strongly tied in real CNNs: H=112 layers have 16–64 channels,
  H=7 layers 160–1280. Sampling them independently would spend the budget on
  configurations that no real model has (and that take seconds to run). A context
  seen fewer than ``min_group`` times falls back to the global histogram.
- **choice fields** (kernel size, stride, H, ...): the values seen, sampled jointly as
  the tuples seen (so a 7x7 stride-2 stem stays a stem), weighted by frequency.
- **tied fields**: channel fields equal in every real configuration (dwconv CIN ==
  COUT, add CIN1 == CIN2) are sampled once and kept equal.
- **channel alignment**: real networks round their widths to multiples of 8
  (``make_divisible``), and runtimes take a different, much faster path when every
  channel count is a multiple of their vector block (ORT's NCHWc: 8). A histogram
  sampled uniformly inside its bins almost never lands there (19 of 913 ``conv-bn``
  configurations of the first ort-cpu build, against ~80 % of the zoo's convolutions).
  So the prior keeps :attr:`KernelPrior.aligned_share`, the share of real
  configurations whose channel fields are *all* multiples of :data:`ALIGN`, and snaps
  that share of its draws, jointly, to the nearest multiple of :data:`ALIGN`.

Examples
--------
>>> configs = [{"hw": 56, "cin": c, "cout": 2 * c, "k": 3, "s": 1} for c in range(8, 64)]
>>> prior = KernelPrior.from_configs("conv", configs)
>>> prior.channel_fields
('cin', 'cout')
>>> s = prior.sample(3, rng=np.random.default_rng(0))
>>> all(set(c) == {"hw", "cin", "cout", "k", "s"} and c["cin"] >= 1 for c in s)
True
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = ["KernelPrior", "ChannelHistogram", "is_channel_field", "config_key",
           "CONTEXT_FIELDS", "ALIGN"]

#: Channel multiple that the alignment share counts and snaps to.
ALIGN = 8

#: Field names used as the context of channel histograms (first one present wins).
CONTEXT_FIELDS = ("hw", "h", "H", "height", "input_h", "hin")

_CHANNEL_HINTS = ("cin", "cout", "channel", "feature", "width", "units", "groups_c")


def is_channel_field(name: str) -> bool:
    """True for fields that count channels or features (sampled as integers >= 1)."""
    low = name.lower()
    return low in ("c", "c1", "c2", "n_in", "n_out") or any(h in low for h in _CHANNEL_HINTS)


def _hashable(value: Any) -> Any:
    if isinstance(value, list):
        return tuple(_hashable(v) for v in value)
    return value


def config_key(config: dict[str, Any]) -> str:
    """A canonical, hashable key of a config dict (for deduplication)."""
    return json.dumps(config, sort_keys=True, separators=(",", ":"), default=str)


@dataclass(frozen=True)
class ChannelHistogram:
    """A histogram over a positive integer field: ``len(edges) == len(counts) + 1``."""

    edges: tuple[float, ...]
    counts: tuple[float, ...]

    @classmethod
    def from_values(cls, values: Sequence[float], bins: int = 40) -> "ChannelHistogram":
        v = np.asarray(values, dtype=np.float64)
        lo, hi = float(v.min()), float(v.max())
        if hi <= lo:
            hi = lo + 1.0
        counts, edges = np.histogram(v, bins=bins, range=(lo, hi))
        return cls(tuple(float(e) for e in edges), tuple(float(c) for c in counts))

    def sample(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """``n`` integers >= 1 by inverse CDF: pick a bin by its mass, uniform inside it."""
        counts = np.asarray(self.counts)
        edges = np.asarray(self.edges)
        cdf = np.cumsum(counts) / counts.sum()
        u = rng.random(n)
        b = np.minimum(np.searchsorted(cdf, u, side="right"), len(counts) - 1)
        x = edges[b] + rng.random(n) * (edges[b + 1] - edges[b])
        return np.maximum(1, np.rint(x)).astype(np.int64)


@dataclass(frozen=True)
class KernelPrior:
    """The configuration prior of one kernel type. Build with :meth:`from_configs`."""

    kernel_type: str
    fields: tuple[str, ...]
    channel_fields: tuple[str, ...]
    #: groups of channel fields that are always equal; the first of each is sampled
    ties: tuple[tuple[str, ...], ...]
    choice_fields: tuple[str, ...]
    #: observed tuples of the choice fields and how often each was seen
    choice_tuples: tuple[tuple[Any, ...], ...]
    choice_weights: tuple[float, ...]
    context_field: str | None
    #: field -> histogram over all configs
    histograms: dict[str, ChannelHistogram] = field(default_factory=dict)
    #: (context value, field) -> histogram over configs of that context
    context_histograms: dict[tuple[Any, str], ChannelHistogram] = field(default_factory=dict)
    #: values seen for each field (for reporting and snapping)
    seen: dict[str, tuple[Any, ...]] = field(default_factory=dict)
    n_configs: int = 0
    #: share of real configs whose channel fields are all multiples of ALIGN
    aligned_share: float = 0.0

    @classmethod
    def from_configs(cls, kernel_type: str, configs: Iterable[dict[str, Any]], *,
                     channel_fields: Sequence[str] | None = None, bins: int = 40,
                     min_group: int = 8) -> "KernelPrior":
        """Learn the prior from real configurations (dicts of one kernel type).

        Parameters
        ----------
        channel_fields : sequence of str, optional
            Which fields are channel counts; by default guessed from the names
            (:func:`is_channel_field`).
        bins : int
            Histogram bins per channel field (nn-Meter: 40).
        min_group : int
            Fewest configs a context value needs for its own histograms.

        Raises
        ------
        ValueError
            If ``configs`` is empty or the configs do not share the same fields.
        """
        configs = [{k: _hashable(v) for k, v in c.items()} for c in configs]
        if not configs:
            raise ValueError(f"no configurations for kernel type {kernel_type!r}; the prior "
                             f"needs at least one real configuration")
        fields = tuple(configs[0])
        for c in configs:
            if tuple(c) != fields and set(c) != set(fields):
                raise ValueError(f"{kernel_type}: configs have different fields "
                                 f"({sorted(c)} vs {sorted(fields)})")
        if channel_fields is None:
            channel_fields = [f for f in fields if is_channel_field(f)
                              and all(isinstance(c[f], (int, np.integer)) for c in configs)]
        channel_fields = tuple(f for f in fields if f in set(channel_fields))
        choice_fields = tuple(f for f in fields if f not in channel_fields)
        # ties among channel fields
        ties: list[list[str]] = []
        for f in channel_fields:
            for group in ties:
                if all(c[f] == c[group[0]] for c in configs):
                    group.append(f)
                    break
            else:
                ties.append([f])
        sampled = [g[0] for g in ties]
        tuples = Counter(tuple(c[f] for f in choice_fields) for c in configs)
        ordered = sorted(tuples.items(), key=lambda kv: json.dumps(kv[0], default=str))
        context = next((f for f in CONTEXT_FIELDS if f in choice_fields), None)
        hists = {f: ChannelHistogram.from_values([c[f] for c in configs], bins)
                 for f in sampled}
        ctx_hists: dict[tuple[Any, str], ChannelHistogram] = {}
        if context is not None:
            groups: dict[Any, list[dict]] = {}
            for c in configs:
                groups.setdefault(c[context], []).append(c)
            for value, members in groups.items():
                if len(members) >= min_group:
                    for f in sampled:
                        ctx_hists[(value, f)] = ChannelHistogram.from_values(
                            [c[f] for c in members], bins)
        seen = {f: tuple(sorted({c[f] for c in configs}, key=lambda v: json.dumps(v, default=str)))
                for f in fields}
        aligned = (float(np.mean([all(int(c[f]) % ALIGN == 0 for f in sampled)
                                  for c in configs])) if sampled else 0.0)
        return cls(
            kernel_type=kernel_type, fields=fields, channel_fields=channel_fields,
            ties=tuple(tuple(g) for g in ties), choice_fields=choice_fields,
            choice_tuples=tuple(t for t, _ in ordered),
            choice_weights=tuple(float(w) for _, w in ordered), context_field=context,
            histograms=hists, context_histograms=ctx_hists, seen=seen,
            n_configs=len(configs), aligned_share=aligned,
        )

    def sample(self, n: int, rng: np.random.Generator) -> list[dict[str, Any]]:
        """``n`` configurations (may repeat; see :func:`~nnmeter.sampling.initial.sample_initial`)."""
        w = np.asarray(self.choice_weights, dtype=np.float64)
        picks = rng.choice(len(self.choice_tuples), size=n, p=w / w.sum())
        cfgs = [dict(zip(self.choice_fields, self.choice_tuples[int(i)])) for i in picks]
        for group in self.ties:
            # one vectorised draw per (context, histogram) for speed
            by_hist: dict[int, list[int]] = {}
            hists: dict[int, ChannelHistogram] = {}
            for j, cfg in enumerate(cfgs):
                ctx = cfg.get(self.context_field) if self.context_field else None
                hist = self.context_histograms.get((ctx, group[0]), self.histograms[group[0]])
                by_hist.setdefault(id(hist), []).append(j)
                hists[id(hist)] = hist
            for hid, members in by_hist.items():
                values = hists[hid].sample(len(members), rng)
                for j, v in zip(members, values):
                    for f in group:
                        cfgs[j][f] = int(v)
        if self.aligned_share > 0 and self.ties:
            # one draw per config, so that all its channel fields are aligned together
            snap = rng.random(n) < self.aligned_share
            for j in np.flatnonzero(snap):
                for group in self.ties:
                    v = max(ALIGN, ALIGN * int(round(cfgs[j][group[0]] / ALIGN)))
                    for f in group:
                        cfgs[j][f] = v
        return [{f: cfg[f] for f in self.fields} for cfg in cfgs]

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form (the inverse is :meth:`from_dict`)."""
        return {
            "kernel_type": self.kernel_type, "fields": list(self.fields),
            "channel_fields": list(self.channel_fields), "ties": [list(t) for t in self.ties],
            "choice_fields": list(self.choice_fields),
            "choice_tuples": [list(t) for t in self.choice_tuples],
            "choice_weights": list(self.choice_weights), "context_field": self.context_field,
            "histograms": {f: [list(h.edges), list(h.counts)] for f, h in self.histograms.items()},
            "context_histograms": [[v, f, list(h.edges), list(h.counts)]
                                   for (v, f), h in self.context_histograms.items()],
            "seen": {f: list(v) for f, v in self.seen.items()}, "n_configs": self.n_configs,
            "aligned_share": self.aligned_share,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "KernelPrior":
        def tup(v: Any) -> Any:
            return tuple(v) if isinstance(v, list) else v
        return cls(
            kernel_type=d["kernel_type"], fields=tuple(d["fields"]),
            channel_fields=tuple(d["channel_fields"]),
            ties=tuple(tuple(t) for t in d["ties"]), choice_fields=tuple(d["choice_fields"]),
            choice_tuples=tuple(tuple(tup(x) for x in t) for t in d["choice_tuples"]),
            choice_weights=tuple(d["choice_weights"]), context_field=d["context_field"],
            histograms={f: ChannelHistogram(tuple(e), tuple(c))
                        for f, (e, c) in d["histograms"].items()},
            context_histograms={(tup(v), f): ChannelHistogram(tuple(e), tuple(c))
                                for v, f, e, c in d["context_histograms"]},
            seen={f: tuple(tup(x) for x in v) for f, v in d["seen"].items()},
            n_configs=int(d["n_configs"]),
            aligned_share=float(d.get("aligned_share", 0.0)),  # absent before it existed
        )

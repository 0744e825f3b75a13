"""Initial kernel configurations: drawn from the prior, deduplicated, deterministic.

Examples
--------
>>> from nnmeter.sampling.prior import KernelPrior
>>> prior = KernelPrior.from_configs("fc", [{"cin": c, "cout": 1000} for c in (256, 512, 1024)])
>>> a = sample_initial(prior, 20, seed=1)
>>> a == sample_initial(prior, 20, seed=1), len({str(sorted(c.items())) for c in a}) == len(a)
(True, True)
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

import numpy as np

from nnmeter.sampling.prior import KernelPrior, config_key

__all__ = ["sample_initial", "iter_initial"]

logger = logging.getLogger(__name__)


def iter_initial(prior: KernelPrior, *, seed: int | Sequence[int] = 0,
                 exclude: Iterable[dict[str, Any]] = (),
                 accept: Callable[[dict[str, Any]], bool] | None = None,
                 batch: int = 64, patience: int = 20,
                 transform: Callable[[dict[str, Any], np.random.Generator],
                                     dict[str, Any]] | None = None
                 ) -> Iterator[dict[str, Any]]:
    """Distinct configurations from ``prior``, lazily, in a fixed order for a seed.

    The sequence does not depend on how many items are taken, so ``n`` items are
    always a prefix of ``n + k`` items (a resumed build sees the same list). It ends
    after ``patience`` batches in a row bring nothing new (a small space is exhausted).
    ``transform(config, rng)``, when given, changes each draw before it is deduplicated
    and filtered (e.g. snaps its channels), with the same generator.
    """
    rng = np.random.default_rng(seed)
    taken = {config_key(c) for c in exclude}
    dry = 0
    while dry < patience:
        fresh = 0
        for cfg in prior.sample(batch, rng):
            if transform is not None:
                cfg = transform(cfg, rng)
            key = config_key(cfg)
            if key in taken:
                continue
            taken.add(key)
            if accept is not None and not accept(cfg):
                continue
            fresh += 1
            yield cfg
        dry = 0 if fresh else dry + 1


def sample_initial(prior: KernelPrior, n: int, *, seed: int = 0,
                   exclude: Iterable[dict[str, Any]] = (),
                   accept: Callable[[dict[str, Any]], bool] | None = None) -> list[dict[str, Any]]:
    """Up to ``n`` distinct configurations drawn from ``prior`` (see :func:`iter_initial`).

    Parameters
    ----------
    n : int
        How many to return; fewer when the prior's space is too small to hold ``n``
        distinct configurations that are not in ``exclude``.
    seed : int
        The result is a function of (prior, n, seed, exclude, accept) only.
    exclude : iterable of dict
        Configurations already measured; none of them is returned.
    accept : callable, optional
        A filter, e.g. a cap on FLOPs, so that the budget is not spent on kernels that
        no real model runs.
    """
    out = list(itertools.islice(iter_initial(prior, seed=seed, exclude=exclude, accept=accept), n))
    if len(out) < n:
        logger.info("%s: only %d distinct configurations found of %d asked",
                    prior.kernel_type, len(out), n)
    return out

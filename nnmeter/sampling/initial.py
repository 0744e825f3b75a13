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

import logging
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

from nnmeter.sampling.prior import KernelPrior, config_key

__all__ = ["sample_initial"]

logger = logging.getLogger(__name__)


def sample_initial(prior: KernelPrior, n: int, *, seed: int = 0,
                   exclude: Iterable[dict[str, Any]] = (),
                   accept: Callable[[dict[str, Any]], bool] | None = None,
                   max_tries: int = 50) -> list[dict[str, Any]]:
    """Up to ``n`` distinct configurations drawn from ``prior``.

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
    max_tries : int
        Draw at most ``max_tries * n`` candidates in all.
    """
    rng = np.random.default_rng(seed)
    taken = {config_key(c) for c in exclude}
    out: list[dict[str, Any]] = []
    drawn = 0
    while len(out) < n and drawn < max_tries * max(n, 1):
        batch = prior.sample(max(2 * (n - len(out)), 8), rng)
        drawn += len(batch)
        for cfg in batch:
            key = config_key(cfg)
            if key in taken or (accept is not None and not accept(cfg)):
                continue
            taken.add(key)
            out.append(cfg)
            if len(out) == n:
                break
    if len(out) < n:
        logger.info("%s: only %d distinct configurations found of %d asked",
                    prior.kernel_type, len(out), n)
    return out

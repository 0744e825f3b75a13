"""nnmeter's cache root, in a module light enough for a measurement worker to import.

``$NNMETER_CACHE`` when set, else ``$XDG_CACHE_HOME/nnmeter`` (``~/.cache/nnmeter``).
The predictor cache (:func:`nnmeter.predictors.cache_dir`) and the memory probe's
fastest sample per device (:mod:`nnmeter.backends.worker`) live under it.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["cache_root"]


def cache_root() -> Path:
    """The root folder of nnmeter's caches (not created here)."""
    env = os.environ.get("NNMETER_CACHE")
    if env:
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "nnmeter"

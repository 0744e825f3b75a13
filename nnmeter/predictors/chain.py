"""The chain excess: what a single-kernel measurement still carries beyond the kernel's
time inside a model, once the per-inference overhead and the layout reorders are off.

``experiments/chain_calibration.py`` measures it on the device: chains of n identical
kernels (n = 1, 2, 4, 8) give the kernel's in-model time as the slope of time over n;
the single-kernel model (n = 1) costs that, plus the overhead and its reorders, plus the
excess. The median over the calibration's convolutions is the default; families with
chains of their own (channel shuffle, pooling, activations) get their own median. Both
are stored in ``<dataset>/chain_excess.json`` and training subtracts a kernel's value
from its row (:func:`nnmeter.predictors.train.train_predictor`). It matters only for
models of many tiny kernels (a 0.2 ms NASBench-201 cell has about 30).

Examples
--------
>>> chain_excess_ms(None)
0.0
>>> chain_excess_ms({"excess_ms": 0.0011})
0.0011
>>> chain_excess_ms({"excess_ms": 0.0011, "families": {"pool": 0.003}}, "pool")
0.003
"""

from __future__ import annotations

from typing import Any

__all__ = ["CHAIN_FILE", "read_chain", "chain_excess_ms"]

#: per-dataset calibration file written by experiments/chain_calibration.py
CHAIN_FILE = "chain_excess.json"


def read_chain(dataset: Any) -> dict[str, Any] | None:
    """The dataset's chain calibration record, or None when it has none.

    Raises
    ------
    DatasetError
        If the file is not valid JSON.
    FingerprintMismatchError
        If it was measured on another device fingerprint than the dataset.
    """
    from nnmeter.predictors.dataset import read_calibration

    return read_calibration(dataset, CHAIN_FILE, remedy=(
        "run experiments/chain_calibration.py under the measurement lock"))


def chain_excess_ms(record: dict[str, Any] | None, family: str = "") -> float:
    """The per-kernel excess (ms) of a record for kernels of ``family``: the family's own
    when it was calibrated, else the default; 0 without a record (never negative)."""
    if not record:
        return 0.0
    value = (record.get("families") or {}).get(family, record.get("excess_ms", 0.0))
    return max(0.0, float(value))

"""The points of a calibration in progress, shared by every calibration (chain, weight
stream, reorders, boundary): appended to ``<record stem>.points.jsonl`` as they are
measured, so a stopped calibration loses none of them and the next one resumes."""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Collection
from pathlib import Path
from typing import Any

__all__ = ["CalibrationPoints", "mark_partial", "points_path", "refuse_other_device",
           "write_record"]

logger = logging.getLogger(__name__)


def points_path(dataset_dir: str | os.PathLike, record_file: str) -> Path:
    """Where a calibration keeps its points while it runs:
    ``<dataset_dir>/<record_file stem>.points.jsonl``.

    >>> points_path("/d", "chain_excess.json").as_posix()
    '/d/chain_excess.points.jsonl'
    """
    return Path(dataset_dir) / f"{Path(record_file).stem}.points.jsonl"


def refuse_other_device(dataset: Any, fingerprint_id: str | None) -> None:
    """Refuse to calibrate ``dataset`` (a KernelDataset) on a device whose fingerprint
    is not the dataset's (nor one of its aliases); a dataset or device without a
    fingerprint is not checked.

    Raises
    ------
    FingerprintMismatchError
        If the fingerprints differ.
    """
    from nnmeter.errors import FingerprintMismatchError

    if dataset.fingerprint_id is None or fingerprint_id is None:
        return
    if fingerprint_id not in (getattr(dataset, "fingerprint_ids", None)
                              or {dataset.fingerprint_id}):
        raise FingerprintMismatchError(
            f"dataset {dataset.directory} was measured on fingerprint "
            f"{dataset.fingerprint_id!r}, this device is {fingerprint_id!r}; calibrate on "
            f"the device that measured the dataset")


def mark_partial(record: dict[str, Any], *, planned: int, measured: int) -> dict[str, Any]:
    """``record`` marked as cut short by its deadline: ``partial``, ``points_planned``
    and ``points_measured`` (a later calibration continues it from its points file)."""
    record.update({"partial": True, "points_planned": int(planned),
                   "points_measured": int(measured)})
    return record


class CalibrationPoints:
    """The points of one calibration, appended to :func:`points_path` as they are
    measured so that a stopped calibration loses none of them.

    Each line is one JSON object, ``{"fingerprint_id", "key", "point"}``, flushed to disk
    before :meth:`append` returns; ``key`` names what was measured (a config) and
    ``fingerprint_id`` is the dataset's. :meth:`load` reads back the points of the
    dataset's fingerprints (a torn or invalid line is skipped with a warning). The
    file is removed once the complete record is written (:func:`write_chain` and the
    other calibrations' writers, :func:`nnmeter.builder.calibrate`).

    Parameters
    ----------
    dataset_dir : path
        The dataset directory.
    record_file : str
        The calibration's record (``chain_excess.json``...), which names the file.
    fingerprint_id : str or None
        The dataset's fingerprint, written on every line.
    accepted : collection of str, optional
        Fingerprints whose points :meth:`load` keeps (default: ``fingerprint_id``); a
        dataset's aliases name the same device.

    Examples
    --------
    >>> import tempfile
    >>> log = CalibrationPoints(tempfile.mkdtemp(), "x.json", "f1")
    >>> log.append("a", {"ms": 1.0})
    >>> log.load()
    {'a': {'ms': 1.0}}
    """

    def __init__(self, dataset_dir: str | os.PathLike, record_file: str | None,
                 fingerprint_id: str | None, accepted: Collection[str] | None = None, *,
                 path: str | os.PathLike | None = None) -> None:
        self.path = Path(path) if path is not None else points_path(dataset_dir, record_file)
        self.fingerprint_id = fingerprint_id
        self.accepted = set(accepted or ()) | {fingerprint_id}

    @classmethod
    def at(cls, path: str | os.PathLike, fingerprint_id: str | None,
           accepted: Collection[str] | None = None) -> "CalibrationPoints":
        """Points kept in the file ``path`` itself (a record of its own, never removed)."""
        return cls(Path(path).parent, None, fingerprint_id, accepted, path=path)

    @classmethod
    def of(cls, dataset: Any, record_file: str) -> "CalibrationPoints":
        """The points file of ``record_file`` in ``dataset`` (a KernelDataset), with its
        fingerprint and that fingerprint's aliases."""
        return cls(dataset.directory, record_file, dataset.fingerprint_id,
                   getattr(dataset, "fingerprint_ids", None))

    def load(self) -> dict[str, Any]:
        """key → point of every valid line of the dataset's fingerprints (the last line
        of a key wins); {} without a file."""
        if not self.path.exists():
            return {}
        out: dict[str, Any] = {}
        other = 0
        with open(self.path, encoding="utf-8") as fh:
            for i, line in enumerate(fh, 1):
                line = line.strip()
                if not line:
                    continue
                try:
                    entry = json.loads(line)
                    key, point = entry["key"], entry["point"]
                    fid = entry.get("fingerprint_id")
                except (ValueError, KeyError, TypeError) as err:
                    logger.warning("%s line %d is not a calibration point (%s; an interrupted "
                                   "write?); skipped, it will be measured again",
                                   self.path, i, err)
                    continue
                if fid not in self.accepted:
                    other += 1
                else:
                    out[key] = point
        if other:
            logger.warning("%s: %d points of another device fingerprint than the dataset's "
                           "(%s) are ignored", self.path, other, self.fingerprint_id)
        return out

    def append(self, key: str, point: Any) -> None:
        """Append one point and flush it to disk; a torn last line (a killed write) is
        ended first, so the new point starts a line of its own."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        line = json.dumps({"fingerprint_id": self.fingerprint_id, "key": key, "point": point},
                          sort_keys=True, separators=(",", ":")) + "\n"
        with open(self.path, "a+b") as fh:
            if fh.seek(0, os.SEEK_END) > 0:
                fh.seek(-1, os.SEEK_END)
                if fh.read(1) != b"\n":
                    fh.write(b"\n")
            fh.write(line.encode("utf-8"))
            fh.flush()
            os.fsync(fh.fileno())


def write_record(dataset_dir: str | os.PathLike, record_file: str,
                 record: dict[str, Any]) -> Path:
    """Write a calibration record to ``<dataset_dir>/<record_file>`` atomically; a
    complete record (not ``partial``) removes its points file, a partial one keeps it
    for the next calibration to continue from."""
    from nnmeter.predictors.dataset import write_calibration

    path = write_calibration(dataset_dir, record_file, record)
    if not record.get("partial"):
        points_path(dataset_dir, record_file).unlink(missing_ok=True)
    return path

"""Kernel-measurement datasets: append-only JSONL files, one per kernel type.

Layout (``datasets/kernels/<dataset-id>/``, the dataset id defaulting to the backend id)::

    dataset.json           backend id, DeviceInfo and fingerprint id of every row
    <kernel-type>.jsonl    one row per measured configuration (see ``KernelRow``)
    rounds.jsonl           one row per sampling round: accuracy and cost
    builds.jsonl           one row per build run: types, samples, minutes
    prior.json             the sampling prior used (for the record)

A row holds the kernel type, the config fields, the latency statistics, the
fingerprint id, the origin (``initial`` or ``round<k>``) and a timestamp. Features are
not stored: they are recomputed from the config by the kernel type's single feature
function, so stored data can never disagree with the predictor's features.

Rows are appended and flushed one by one as they are measured; a killed build loses
at most the row being written, and a truncated last line is skipped when reading.
A dataset never mixes device fingerprints: :meth:`KernelDataset.check_device` raises
:class:`~nnmeter.errors.FingerprintMismatchError` before anything is appended.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from nnmeter.devices.reference import REFERENCE_FILE
from nnmeter.errors import DatasetError, FingerprintMismatchError

__all__ = ["KernelDataset", "data_root", "kernel_dataset_dir", "read_calibration", "read_jsonl",
           "append_jsonl",
           "write_calibration"]

logger = logging.getLogger(__name__)


def data_root() -> Path:
    """Root holding ``datasets/`` and ``fusion_rules/``: ``$NNMETER_DATA`` or the checkout."""
    env = os.environ.get("NNMETER_DATA")
    if env:
        return Path(env)
    return Path(__file__).resolve().parents[2]


def kernel_dataset_dir(dataset_id: str, root: str | os.PathLike | None = None) -> Path:
    """``<root>/datasets/kernels/<dataset_id>``."""
    return Path(root or data_root()) / "datasets" / "kernels" / dataset_id


#: per-dataset file of every row's own profiled edges
#: (:func:`nnmeter.predictors.boundary.measure_row_edges`); not kernel rows
ROW_EDGES_FILE = "row_edges.jsonl"

#: per-dataset file of the profiled in-context time of the rows whose single-kernel
#: model ran in the plain layout (:func:`nnmeter.predictors.boundary.measure_row_context`)
ROW_CONTEXT_FILE = "row_context.jsonl"


class KernelDataset:
    """One backend's kernel measurements on one device (a directory of JSONL files).

    Parameters
    ----------
    directory : path
        The dataset directory (created on the first write).
    backend_id : str
        The backend the rows were measured on.
    """

    META = "dataset.json"
    ROUNDS = "rounds.jsonl"
    #: JSONL files of the dataset that are not kernel rows: logs, the speed reference's
    #: probes, every row's profiled edges and in-context times
    LOGS = ("rounds.jsonl", "builds.jsonl", REFERENCE_FILE, ROW_EDGES_FILE, ROW_CONTEXT_FILE)

    def __init__(self, directory: str | os.PathLike, backend_id: str) -> None:
        self.directory = Path(directory)
        self.backend_id = backend_id

    # -- metadata ---------------------------------------------------------------
    def meta(self) -> dict[str, Any] | None:
        """The dataset's metadata, or None for a new dataset."""
        path = self.directory / self.META
        if not path.exists():
            return None
        try:
            return json.loads(path.read_text())
        except ValueError as err:
            raise DatasetError(f"{path} is not valid JSON ({err}); fix or delete it") from err

    @property
    def fingerprint_id(self) -> str | None:
        meta = self.meta()
        return None if meta is None else meta.get("fingerprint_id")

    @property
    def fingerprint_ids(self) -> frozenset[str]:
        """The dataset's fingerprint and its aliases: ids the same device had under an
        older DeviceInfo (``fingerprint_aliases`` in ``dataset.json``; a round-1 id
        hashed fewer fields). Rows and records carrying any of them are the dataset's."""
        meta = self.meta() or {}
        ids = [meta.get("fingerprint_id"), *(meta.get("fingerprint_aliases") or ())]
        return frozenset(str(i) for i in ids if i)

    @property
    def device_name(self) -> str:
        """The readable name of the dataset's device (the part of the directory name
        after ``@``, else its record's ``name``, else "")."""
        meta = self.meta() or {}
        name = (meta.get("device") or {}).get("name") if isinstance(meta.get("device"), dict) \
            else None
        return str(self.directory.name.partition("@")[2] or name or "")

    def check_device(self, device: dict[str, Any]) -> None:
        """Bind a new dataset to ``device`` (a DeviceInfo dict) or check it matches.

        A device of another fingerprint that :meth:`DeviceInfo.differences` finds to be
        the same device (a record written before a field existed) is adopted: its id is
        added to ``fingerprint_aliases`` and the device record gains the new fields.

        Raises
        ------
        FingerprintMismatchError
            If the dataset was measured on another device (CPU, ISA, cores, runtime
            version or settings); measurements of two devices are never mixed. The
            message names both devices and the command that starts a dataset here.
        """
        from nnmeter.backends.base import DeviceInfo

        fid = device.get("fingerprint_id")
        meta = self.meta()
        if meta is None:
            if "isa" not in device:
                # the CPU facts composition terms read (vector width, caches); measured
                # here, on the machine that measures the rows
                from nnmeter.predictors.facts import local_cpu_facts

                device = {**device, **local_cpu_facts()}
            self.directory.mkdir(parents=True, exist_ok=True)
            write_calibration(self.directory, self.META, {
                "backend_id": self.backend_id, "fingerprint_id": fid, "device": device,
                "created": time.strftime("%Y-%m-%dT%H:%M:%S")})
            return
        if fid in self.fingerprint_ids:
            return
        old = meta.get("device") or {}
        try:
            diffs = DeviceInfo.from_dict(device).differences(old)
        except Exception:  # a malformed record: say what differs key by key
            diffs = [k for k in sorted(set(old) | set(device))
                     if k != "fingerprint_id" and old.get(k) != device.get(k)]
        if not diffs and fid:
            # the same device, recorded before some of its fields existed: adopt the id
            aliases = sorted({*(meta.get("fingerprint_aliases") or ()),
                              str(meta.get("fingerprint_id"))} - {fid, "None"})
            merged = {**device, **{k: v for k, v in old.items()
                                   if k not in device and k != "fingerprint_id"}}
            meta = {**meta, "fingerprint_id": fid, "fingerprint_aliases": aliases,
                    "device": merged}
            write_calibration(self.directory, self.META, meta)
            logger.info("%s: device record upgraded (fingerprint %s, aliases %s)",
                        self.directory, fid, aliases)
            return
        here = device.get("name") or fid
        there = old.get("name") or meta.get("fingerprint_id")
        raise FingerprintMismatchError(
            f"dataset {self.directory} belongs to device {there!r}, this machine is "
            f"{here!r} (differs in: {', '.join(diffs) or 'unknown fields'}); measurements "
            f"of two devices are never mixed. Start this machine's own dataset: "
            f"`nnmeter build --backend {self.backend_id}` (or --dataset "
            f"{self.backend_id}@{here}), or adapt the other device's predictor in ten "
            f"minutes: `nnmeter build --backend {self.backend_id} --transfer-from "
            f"{self.directory.name} "
            f"--budget-minutes 10`")

    # -- one writer at a time ------------------------------------------------------
    LOCK = ".build.lock"

    @contextlib.contextmanager
    def writer_lock(self, what: str = "build") -> Iterator[None]:
        """Hold the dataset's inter-process write lock for the block (a build, a
        transfer build): a second writer is refused at once, with a message naming the
        dataset and the process that holds it, instead of interleaving rows.

        Raises
        ------
        DatasetError
            If another process holds the lock.
        """
        import fcntl

        self.directory.mkdir(parents=True, exist_ok=True)
        path = self.directory / self.LOCK
        fh = open(path, "a+")
        try:
            try:
                fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                fh.seek(0)
                holder = fh.read().strip() or "another process"
                raise DatasetError(
                    f"dataset {self.directory} is being written by {holder}; two builds on "
                    f"one dataset would duplicate and interleave rows. Wait for it to end, "
                    f"or build another dataset with --dataset") from None
            fh.seek(0)
            fh.truncate()
            fh.write(f"{what} pid {os.getpid()} since {time.strftime('%Y-%m-%dT%H:%M:%S')}")
            fh.flush()
            yield
        finally:
            fh.close()

    # -- rows -------------------------------------------------------------------
    def path(self, kernel_type: str) -> Path:
        return self.directory / f"{kernel_type}.jsonl"

    def kernel_types(self) -> list[str]:
        """Kernel types with a data file, sorted."""
        if not self.directory.exists():
            return []
        return sorted(p.stem for p in self.directory.glob("*.jsonl") if self._is_rows(p))

    def files(self) -> list[Path]:
        """Every data file (for cache keys), sorted."""
        if not self.directory.exists():
            return []
        return sorted(p for p in self.directory.glob("*.jsonl") if self._is_rows(p))

    @classmethod
    def _is_rows(cls, path: Path) -> bool:
        """A kernel-row file: not a log and not a calibration's points file
        (``<record>.points.jsonl``)."""
        return path.name not in cls.LOGS and not path.name.endswith(".points.jsonl")

    def append(self, kernel_type: str, row: dict[str, Any]) -> None:
        """Append one row and flush it to disk before returning."""
        self.directory.mkdir(parents=True, exist_ok=True)
        _append_line(self.path(kernel_type),
                     json.dumps(row, sort_keys=True, separators=(",", ":")), sync=True)

    def rows(self, kernel_type: str) -> list[dict[str, Any]]:
        """All rows of ``kernel_type`` (a truncated last line is skipped with a warning)."""
        return list(_read_jsonl(self.path(kernel_type)))

    def log_round(self, entry: dict[str, Any]) -> None:
        self.append_raw(self.ROUNDS, entry)

    def rounds(self) -> list[dict[str, Any]]:
        return list(_read_jsonl(self.directory / self.ROUNDS))

    def append_raw(self, name: str, entry: dict[str, Any]) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        _append_line(self.directory / name, json.dumps(entry, sort_keys=True, default=str))


def append_jsonl(path: str | os.PathLike, entry: dict[str, Any]) -> None:
    """Append one JSON object as a line of ``path`` (its folder made if missing), never
    glued onto a torn last line; :func:`read_jsonl` reads it back."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    _append_line(path, json.dumps(entry, sort_keys=True, default=str))


def _append_line(path: Path, line: str, *, sync: bool = False) -> None:
    """Append ``line`` and a newline; a torn last line (a killed write) is ended first,
    so the new row never glues onto the fragment (which readers then skip alone)."""
    with open(path, "a+b") as fh:
        if fh.seek(0, os.SEEK_END) > 0:
            fh.seek(-1, os.SEEK_END)
            if fh.read(1) != b"\n":
                logger.warning("%s ends in a torn line (an interrupted write); the next row "
                               "starts on a new line and the fragment is skipped", path)
                fh.write(b"\n")
        fh.write(line.encode("utf-8") + b"\n")
        fh.flush()
        if sync:
            os.fsync(fh.fileno())


def read_jsonl(path: str | os.PathLike) -> Iterable[dict[str, Any]]:
    """The rows (JSON objects) of an append-only JSON-lines file, in order; none if it
    does not exist. Fragments of interrupted writes are set aside with a warning."""
    path = Path(path)
    if not path.exists():
        return
    with open(path, encoding="utf-8") as fh:
        lines = fh.readlines()
    torn = []
    for i, line in enumerate(lines):
        line = line.strip()
        if not line:
            continue
        try:
            row = json.loads(line)
        except ValueError:
            torn.append((i + 1, len(line)))
            continue
        if isinstance(row, dict):
            yield row
        else:
            torn.append((i + 1, len(line)))
    if torn:
        # fragments of interrupted writes: kept out of every reader, never glued to a row
        logger.warning("%s: %d line(s) set aside as fragments of interrupted writes (lines %s, "
                       "%d bytes); the rows around them are read as usual", path, len(torn),
                       ", ".join(str(n) for n, _ in torn[:5]), sum(b for _, b in torn))


def write_calibration(dataset_dir: str | os.PathLike, name: str, record: dict[str, Any]) -> Path:
    """Write a device calibration record (``boundary.json``, ``reorders.json``, ...) to
    ``<dataset_dir>/<name>``, atomically (a temporary file renamed over it), so a kill
    leaves the old record or the new one, never half of one."""
    from nnmeter.predictors.store import write_atomic

    path = Path(dataset_dir) / name
    write_atomic(path, (json.dumps(record, indent=1, sort_keys=True) + "\n").encode())
    return path


def read_calibration(dataset: Any, name: str, *, remedy: str) -> dict[str, Any] | None:
    """A dataset's device calibration record ``name``, or None when it has none.

    ``remedy`` says how to make the record again (for the error messages).

    Raises
    ------
    DatasetError
        If the file is not valid JSON.
    FingerprintMismatchError
        If the record was measured on another fingerprint than the dataset.
    """
    path = Path(dataset.directory) / name
    if not path.exists():
        return None
    try:
        record = json.loads(path.read_text())
    except ValueError as err:
        raise DatasetError(f"{path} is not valid JSON ({err}); {remedy} or delete it") from err
    ids = getattr(dataset, "fingerprint_ids", None) or {dataset.fingerprint_id}
    if record.get("fingerprint_id") not in ids:
        raise FingerprintMismatchError(
            f"{path} was measured on fingerprint {record.get('fingerprint_id')!r} but the "
            f"dataset was measured on {dataset.fingerprint_id!r}; {remedy} on the dataset's "
            f"device or delete {path.name}")
    return record


_read_jsonl = read_jsonl  # the name the dataset readers use

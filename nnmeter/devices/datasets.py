"""Which device's data a prediction or a build uses.

Every kernel dataset belongs to one device: ``datasets/kernels/<backend>@<device>/``,
``<device>`` being the readable name of the CPU it was measured on
(:meth:`nnmeter.devices.cpu.CpuInfo.short_name`, e.g. ``epyc-zen4-avx512-2c``) and
``dataset.json`` holding the whole :class:`~nnmeter.backends.base.DeviceInfo`. A
directory without ``@`` (round 1, or a test's data root) is a dataset too; its device is
whatever its record says.

- :func:`device_datasets` lists them;
- :func:`local_device` is this machine's DeviceInfo for a backend, without importing
  the runtime;
- :func:`resolve` picks the dataset a prediction uses: the one named by ``device``;
  else this machine's own; else the *nearest* device's (:func:`distance`), flagged as a
  mismatch with what differs, so the caller can say so;
- :func:`default_dataset_id` is where a build on this machine writes.

Examples
--------
>>> distance({"isa": ["avx2", "avx512f"], "cores": 2}, {"isa": ["avx2"], "cores": 2}) > 0
True
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from nnmeter.errors import DatasetError

__all__ = ["DeviceDataset", "Resolution", "device_datasets", "local_device", "resolve",
           "default_dataset_id", "distance", "differences", "model_set_path",
           "kernel_dataset_for", "own_dataset_dir"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class DeviceDataset:
    """One kernel dataset: its id, backend, device and where it lives.

    Attributes
    ----------
    dataset_id : str
        The directory name: ``<backend>@<device>`` (or a round-1 ``<backend>``).
    backend_id : str
    device_name : str
        The device's readable name: the folder's part after ``@`` (the CPU's name, plus
        a suffix where another device of that CPU differs in settings), else the
        record's ``name`` ("" when neither).
    directory : Path
    device : dict
        The device record of ``dataset.json`` ({} when it has none).
    fingerprint_ids : frozenset of str
        Its fingerprint and aliases.
    """

    dataset_id: str
    backend_id: str
    device_name: str
    directory: Path
    device: dict[str, Any] = field(default_factory=dict)
    fingerprint_ids: frozenset[str] = frozenset()

    @property
    def fingerprint_id(self) -> str:
        """The dataset's current fingerprint id ("" when none is recorded)."""
        return str(self.device.get("fingerprint_id") or next(iter(sorted(self.fingerprint_ids)),
                                                             ""))

    def matches(self, name: str) -> bool:
        """Whether ``name`` names this dataset: its device name, its dataset id, or a
        fingerprint id (or a prefix of at least 6 hex digits of one)."""
        if name in (self.device_name, self.dataset_id):
            return True
        return len(name) >= 6 and any(f.startswith(name) for f in self.fingerprint_ids)


@dataclass(frozen=True)
class Resolution:
    """The dataset a prediction uses and why.

    Attributes
    ----------
    dataset : DeviceDataset
    how : str
        ``"this machine"`` (the data is this machine's), ``"requested"`` (named by
        ``device``), or ``"nearest"`` (no data of this machine; the nearest device's).
    differences : tuple of str
        Fields in which the dataset's device differs from this machine (empty for
        ``"this machine"``).
    local : dict
        This machine's DeviceInfo for the backend, as a dict.
    """

    dataset: DeviceDataset
    how: str
    differences: tuple[str, ...] = ()
    local: dict[str, Any] = field(default_factory=dict)

    @property
    def mismatch(self) -> bool:
        """True when the data was measured on another device than this machine."""
        return bool(self.differences)

    def as_dict(self) -> dict[str, Any]:
        return {"dataset": self.dataset.dataset_id, "device": self.dataset.device_name,
                "fingerprint_id": self.dataset.fingerprint_id, "how": self.how,
                "device_mismatch": self.mismatch, "differences": list(self.differences),
                "this_machine": self.local.get("name", "")}


def _kernels_root(root: str | os.PathLike | None) -> Path:
    from nnmeter.predictors.dataset import data_root

    return Path(root or data_root()) / "datasets" / "kernels"


def _read_meta(directory: Path) -> dict[str, Any]:
    path = directory / "dataset.json"
    if not path.exists():
        return {}
    try:
        meta = json.loads(path.read_text())
    except ValueError as err:
        raise DatasetError(f"{path} is not valid JSON ({err}); fix it or delete the "
                           f"dataset folder") from err
    if not isinstance(meta, dict):
        raise DatasetError(f"{path} must hold a JSON object; fix it or delete the dataset "
                           f"folder")
    device = meta.get("device")
    if device is not None and not isinstance(device, dict):
        raise DatasetError(f"{path}: 'device' must be a JSON object (the DeviceInfo the rows "
                           f"were measured on), got {type(device).__name__}")
    if device is not None:
        from nnmeter.backends.base import DeviceInfo
        from nnmeter.errors import DeviceError

        try:
            DeviceInfo.from_dict(device)
        except DeviceError as err:
            raise DatasetError(f"{path}: {err}; fix the record or rebuild the dataset on its "
                               f"device") from err
    return meta


def device_datasets(backend_id: str | None = None,
                    root: str | os.PathLike | None = None) -> list[DeviceDataset]:
    """Every kernel dataset with rows (of ``backend_id`` if given), sorted by id.

    Raises
    ------
    DatasetError
        If a dataset's ``dataset.json`` is not valid JSON or its device record is not
        an object.
    """
    from nnmeter.predictors.dataset import KernelDataset

    base = _kernels_root(root)
    if not base.exists():
        return []
    out = []
    for d in sorted(base.iterdir()):
        if not d.is_dir() or not any(KernelDataset._is_rows(p) for p in d.glob("*.jsonl")):
            continue
        meta = _read_meta(d)
        backend = str(meta.get("backend_id") or d.name.partition("@")[0])
        if backend_id is not None and backend != backend_id:
            continue
        device = dict(meta.get("device") or {})
        if meta.get("fingerprint_id"):
            device.setdefault("fingerprint_id", meta["fingerprint_id"])
        ids = frozenset(str(i) for i in [meta.get("fingerprint_id"),
                                         *(meta.get("fingerprint_aliases") or ())] if i)
        # the folder's device part: unique, where two devices of one CPU differ only in
        # settings (the record's name is the CPU's); the record's for a round-1 folder
        name = d.name.partition("@")[2] or str(device.get("name") or "")
        out.append(DeviceDataset(d.name, backend, name, d, device, ids))
    return out


def _runtime_version(backend: Any) -> str:
    """The runtime's installed version from package metadata (no import of the runtime)."""
    from importlib import metadata

    top = (backend.runtime_module or "").split(".")[0]
    try:
        dists = metadata.packages_distributions().get(top, [])
        return metadata.version(dists[0]) if dists else ""
    except Exception:  # incomplete metadata: the version is then not compared
        return ""


@lru_cache(maxsize=64)
def _local_device_cached(backend_id: str) -> Any:
    from nnmeter.backends import get_backend
    from nnmeter.backends.base import DeviceInfo

    backend = get_backend(backend_id)
    return DeviceInfo.local(backend.runtime, _runtime_version(backend), backend.settings())


def local_device(backend_id: str) -> Any:
    """This machine's :class:`~nnmeter.backends.base.DeviceInfo` for ``backend_id``,
    the runtime version read from package metadata (the runtime is not imported).

    Raises
    ------
    UnknownNameError
        If the backend id is unknown.
    """
    return _local_device_cached(backend_id)


def differences(local: Any, device: Mapping[str, Any]) -> list[str]:
    """What differs between this machine (a DeviceInfo) and a dataset's device record,
    with the ISA flags named (``isa (data has avx512f)``)."""
    diffs = local.differences(device)
    out = []
    for d in diffs:
        if d == "isa":
            mine, theirs = set(local.isa), set(device.get("isa") or ())
            order = {f: i for i, f in enumerate(_flag_order())}
            key = lambda f: (order.get(f, len(order)), f)  # noqa: E731
            parts = []
            if theirs - mine:
                parts.append("data has " + ", ".join(sorted(theirs - mine, key=key)))
            if mine - theirs:
                parts.append("this CPU has " + ", ".join(sorted(mine - theirs, key=key)))
            out.append("isa (" + "; ".join(parts) + ")")
        else:
            out.append(d)
    return out


def _flag_order() -> tuple[str, ...]:
    from nnmeter.devices.cpu import DISPATCH_FLAGS

    return DISPATCH_FLAGS


#: how much a difference in each field moves kernel times (for :func:`distance`)
_WEIGHTS = {"arch": 100.0, "runtime": 50.0, "vector": 12.0, "vendor": 6.0, "settings": 6.0,
            "microarch": 4.0, "cpu_model": 2.0, "cores": 2.0, "isa": 1.0, "caches": 1.0,
            "runtime_version": 1.0}


def _vector(isa: Any) -> int:
    flags = {str(f) for f in isa or ()}
    return 16 if "avx512f" in flags else 8 if "avx2" in flags else \
        4 if flags & {"sse4_2", "neon", "asimd"} else 0


def distance(a: Mapping[str, Any], b: Mapping[str, Any]) -> float:
    """How unlike two device records are, for choosing the nearest device's predictor:
    a weighted count of differing fields, the vector width the kernels use weighing most
    after the architecture and runtime. 0 for one device; fields one side lacks count
    half.

    Examples
    --------
    >>> zen4 = {"arch": "x86_64", "isa": ["avx2", "fma", "avx512f"], "cores": 2}
    >>> zen3 = {"arch": "x86_64", "isa": ["avx2", "fma"], "cores": 2}
    >>> arm = {"arch": "aarch64", "isa": ["asimd"], "cores": 2}
    >>> distance(zen4, zen3) < distance(zen4, arm)
    True
    """
    total = 0.0
    for key, w in _WEIGHTS.items():
        if key == "vector":
            if "isa" in a and "isa" in b and _vector(a["isa"]) != _vector(b["isa"]):
                total += w
            continue
        if key not in a or key not in b:
            total += w / 2 if key in ("isa", "microarch", "vendor") else 0.0
            continue
        x, y = a[key], b[key]
        if key == "isa":
            x, y = set(x or ()), set(y or ())
            if x != y:
                total += w * len(x ^ y) / max(1, len(x | y))
            continue
        if key == "runtime_version":
            sx, sy = str(x), str(y)
            if sx and sy and not (sx.startswith(sy) or sy.startswith(sx)):
                total += w
            continue
        if x != y:
            total += w
    return total


def _rows(ds: DeviceDataset) -> int:
    n = 0
    for p in ds.directory.glob("*.jsonl"):
        from nnmeter.predictors.dataset import KernelDataset

        if KernelDataset._is_rows(p):
            with open(p, "rb") as fh:
                n += sum(1 for _ in fh)
    return n


def _pick(sets: list[DeviceDataset], rank: Any) -> DeviceDataset:
    """The dataset of lowest ``rank``; ties go to the one with most rows, then by id.
    Rows are counted only for a tie (counting reads every row file: not on every load)."""
    best = min(rank(d) for d in sets)
    tied = [d for d in sets if rank(d) == best]
    if len(tied) == 1:
        return tied[0]
    return min(tied, key=lambda d: (-_rows(d), d.dataset_id))


def _has_record(d: DeviceDataset) -> bool:
    """Whether a dataset records the device it was measured on (its CPU and runtime)."""
    return bool(d.device.get("cpu_model") and d.device.get("runtime"))


def resolve(backend_id: str, device: str | None = None,
            root: str | os.PathLike | None = None) -> Resolution:
    """The dataset a prediction for ``backend_id`` uses.

    Parameters
    ----------
    device : str, optional
        A device name (``epyc-zen4-avx512-2c``), a dataset id (``ort-cpu@...``) or a
        fingerprint id (6+ hex digits): predict for that device, wherever this runs.
        None: this machine's dataset, or the nearest device's when it has none.

    Raises
    ------
    PredictorError
        If the backend has no dataset at all (the message says how to build one).
    DatasetError
        If ``device`` names no dataset of the backend (the message lists those there).
    """
    from nnmeter.errors import PredictorError

    sets = device_datasets(backend_id, root)
    local = local_device(backend_id)
    if device is not None:
        hits = [d for d in sets if d.matches(str(device))]
        if not hits:
            known = ", ".join(d.device_name or d.dataset_id for d in sets) or "none"
            raise DatasetError(
                f"no {backend_id} predictor for device {device!r}; devices with one: {known} "
                f"(`nnmeter devices` lists them)")
        if len(hits) > 1:
            raise DatasetError(f"device {device!r} names {len(hits)} {backend_id} datasets "
                               f"({', '.join(d.dataset_id for d in hits)}); pass a dataset id")
        ds = hits[0]
        return Resolution(ds, "requested", tuple(differences(local, ds.device)),
                          local.as_dict())
    if not sets:
        from nnmeter.predictors import available_predictors

        others = available_predictors(root)
        raise PredictorError(
            f"no kernel measurements for backend {backend_id!r} in {_kernels_root(root)}; "
            f"build a predictor with `nnmeter build --backend {backend_id}` (predictors exist "
            f"for: {', '.join(others) or 'none'})")
    own = [d for d in sets if local.fingerprint_id in d.fingerprint_ids
           or (_has_record(d) and not local.differences(d.device))]
    if own:
        # several of this machine's datasets: the one named after it, else the largest
        return Resolution(_pick(own, lambda d: d.device_name != local.name), "this machine",
                          (), local.as_dict())
    here = local.as_dict()
    recorded = [d for d in sets if _has_record(d)]
    if not recorded:
        raise DatasetError(
            f"no {backend_id} dataset records its device ({', '.join(str(d.directory) for d in sets)}"
            f" lack a 'device' in dataset.json), so none can be matched to this machine; "
            f"rebuild one with `nnmeter build --backend {backend_id}`")
    ds = _pick(recorded, lambda d: distance(here, d.device))
    return Resolution(ds, "nearest", tuple(differences(local, ds.device) or ["device"]), here)


def default_dataset_id(backend_id: str, root: str | os.PathLike | None = None, *,
                       device: Any = None) -> str:
    """The dataset a build on this machine writes: ``<backend>@<device name>``, or this
    machine's existing dataset of the backend; a name taken by another device gets the
    fingerprint appended (``...@epyc-zen4-avx512-2c-1a2b3c``). ``device`` (a
    DeviceInfo) names another device than this machine's: the one a remote runner
    (:mod:`nnmeter.farm`) measures on."""
    from nnmeter.errors import UnknownNameError

    if device is not None:
        local = device
    else:
        try:
            local = local_device(backend_id)
        except UnknownNameError:  # a backend registered elsewhere (a test's fake): the CPU
            from nnmeter.devices.cpu import local_cpu

            return f"{backend_id}@{local_cpu().short_name()}"
    sets = device_datasets(backend_id, root)
    for d in sets:
        if local.fingerprint_id in d.fingerprint_ids:
            return d.dataset_id
    name = local.name or local.fingerprint_id
    want = f"{backend_id}@{name}"
    taken = [d for d in sets if d.dataset_id == want]
    if taken and local.differences(taken[0].device):
        return f"{want}-{local.fingerprint_id[:6]}"
    return want


def model_set_path(backend_id: str, seed: int = 1000, device: str | None = None,
                   root: str | os.PathLike | None = None) -> Path:
    """Where a model-level measured set lives: ``datasets/models/<backend>@<device>/
    seed<seed>.jsonl`` (one device per folder, like the kernel datasets). ``device``
    defaults to this machine's name; truth for one device is measured on that device.

    Examples
    --------
    >>> model_set_path("ort-cpu", 2000, "epyc-zen4-avx512-2c", "/d").as_posix()
    '/d/datasets/models/ort-cpu@epyc-zen4-avx512-2c/seed2000.jsonl'
    """
    from nnmeter.predictors.dataset import data_root

    if device is None:
        from nnmeter.devices.cpu import local_cpu

        device = local_cpu().short_name()
    return (Path(root or data_root()) / "datasets" / "models" / f"{backend_id}@{device}"
            / f"seed{int(seed)}.jsonl")


def kernel_dataset_for(backend_id: str, device: str | None = None,
                       root: str | os.PathLike | None = None) -> Path:
    """The kernel dataset folder :func:`resolve` picks for ``backend_id`` (this
    machine's, the named device's, or the nearest)."""
    return resolve(backend_id, device, root).dataset.directory


def own_dataset_dir(backend_id: str, root: str | os.PathLike | None = None) -> Path:
    """This machine's own kernel dataset folder for ``backend_id`` (where a build or a
    calibration measured here writes; never another device's)."""
    from nnmeter.predictors.dataset import kernel_dataset_dir

    return kernel_dataset_dir(default_dataset_id(backend_id, root), root)

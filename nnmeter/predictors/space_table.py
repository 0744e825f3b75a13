"""A predictor's table of a whole finite search space: NAS-Bench-201.

NAS-Bench-201 has 15,625 cells, and only 9,445 distinct networks: cells that differ in
dead edges build one graph (:func:`~nnmeter.zoo.nasbench201.live_cell`). A search over
it scores the same networks again and again, so a predictor keeps, per network
definition (channels, cells per stage, resolution, classes), one row per cell: the
predicted ms, the FLOPs (:mod:`nnmeter.ir.cost`: 2 per multiply-add) and the
parameters. A row is computed the first
time a cell is asked for, once per distinct network, by building that network and
predicting it as :meth:`LatencyPredictor.predict_many` does, so every
figure in the table is the figure ``predict_many`` gives the built graph, to the bit.
After that a cell is a lookup.

The table is stored beside the predictor's cache (``<cache>/spaces/``), as a numpy
array read without pickle, and merged with what is on disk before each write, so two
processes filling it lose nothing. Its name holds the network definition and a digest
of nnmeter's own code: any change to the predictor (a new cache folder) or to the code
that builds, partitions or predicts starts a fresh table. A predictor without a cache
folder keeps its table in memory.

``nnmeter space nasbench201 --backend B`` fills a whole table (about 25 s on one core
of a 2-vCPU EPYC) and prints its summary; ``predict_many`` accepts NAS-Bench-201
configs (or zoo variants of them) and uses the table.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import threading
from pathlib import Path
from typing import Any, Iterable, Sequence

import numpy as np

__all__ = ["NASBench201Table", "code_digest", "nasbench201_config", "table_for", "ROWS",
           "cell_indices", "predict_configs", "live_classes"]

logger = logging.getLogger(__name__)

#: the table's rows, in order
ROWS = ("ms", "flops", "params")
#: file layout version (bump when ROWS or the naming changes)
TABLE_VERSION = 1

_digest: str | None = None
_classes: np.ndarray | None = None
_index: dict[tuple[str, ...], int] | None = None
_lock = threading.Lock()


def code_digest() -> str:
    """16 hex digits over the source of every nnmeter module (computed once a process)."""
    global _digest
    if _digest is None:
        import nnmeter

        root = Path(nnmeter.__file__).parent
        h = hashlib.sha256()
        for p in sorted(root.rglob("*.py")):
            h.update(str(p.relative_to(root)).encode())
            h.update(b"\0")
            h.update(p.read_bytes())
        _digest = h.hexdigest()[:16]
    return _digest


def live_classes() -> np.ndarray:
    """For each of the 15,625 cell indices, the index of its live cell (the
    representative of the cells that build the same network)."""
    global _classes
    if _classes is None:
        from nnmeter.zoo.nasbench201 import NUM_CELLS, cell_from_index, cell_index, live_cell

        _classes = np.array([cell_index(live_cell(cell_from_index(i)))
                             for i in range(NUM_CELLS)], dtype=np.int64)
    return _classes


def nasbench201_config(item: Any) -> Any:
    """The NAS-Bench-201 config ``item`` is (a config, or a zoo variant holding one),
    else None."""
    from nnmeter.zoo.nasbench201 import NASBench201Config

    cfg = getattr(item, "config", item)
    return cfg if isinstance(cfg, NASBench201Config) else None


class NASBench201Table:
    """One predictor's table of one NAS-Bench-201 network definition (see the module
    docstring). ``values`` has one row per name in :data:`ROWS` and one column per cell
    index, NaN where not computed yet; ``path`` is where it is stored (None: memory
    only)."""

    def __init__(self, predictor: Any, network: Any, path: Path | None) -> None:
        from nnmeter.zoo.nasbench201 import NUM_CELLS

        self.predictor = predictor
        #: the network definition: a config whose cell is ignored
        self.network = network
        self.path = path
        self.values = np.full((len(ROWS), NUM_CELLS), np.nan)
        self._merge_disk()

    # -- storage --------------------------------------------------------------------
    def _read(self) -> np.ndarray | None:
        if self.path is None or not self.path.exists():
            return None
        try:
            got = np.load(self.path, allow_pickle=False)
        except (OSError, ValueError) as err:
            logger.warning("ignoring an unreadable NAS-Bench-201 table %s (%s); it will be "
                           "rebuilt", self.path, err)
            return None
        if got.shape != self.values.shape or got.dtype != np.float64:
            logger.warning("ignoring a NAS-Bench-201 table of another layout: %s", self.path)
            return None
        return got

    def _merge_disk(self) -> None:
        got = self._read()
        if got is not None:
            take = np.isnan(self.values[0]) & ~np.isnan(got[0])
            self.values[:, take] = got[:, take]

    def save(self) -> None:
        """Write the table (merged with what another process wrote meanwhile); a folder
        that cannot be written leaves the table in memory, with a warning."""
        if self.path is None:
            return
        import io

        from nnmeter.predictors.store import write_atomic

        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with _lock:
                self._merge_disk()
                buf = io.BytesIO()
                np.save(buf, self.values, allow_pickle=False)
                write_atomic(self.path, buf.getvalue())
        except OSError as err:
            logger.warning("could not store the NAS-Bench-201 table in %s: %s", self.path, err)

    # -- filling --------------------------------------------------------------------
    @property
    def filled(self) -> int:
        """Cells with a computed row."""
        return int((~np.isnan(self.values[0])).sum())

    def fill(self, cells: Iterable[int] | None = None, *, progress: bool = False,
             chunk: int = 256) -> int:
        """Compute the rows of ``cells`` (indices; default: every cell) not in the table
        yet, one network per live cell, in batches of ``chunk`` networks, storing the
        table after each batch. Returns the number of networks built and predicted."""
        classes = live_classes()
        idx = (np.arange(self.values.shape[1]) if cells is None
               else np.unique(np.asarray(list(cells), dtype=np.int64)))
        missing = idx[np.isnan(self.values[0, idx])]
        reps = np.unique(classes[missing])
        if not reps.size:
            return 0
        from tqdm import tqdm

        from nnmeter._gc import collector_paused
        from nnmeter.zoo.nasbench201 import NASBench201Family, cell_from_index

        family = NASBench201Family()
        bar = tqdm(total=int(reps.size), desc="NAS-Bench-201 table", unit="network",
                   disable=not progress)
        try:
            for lo in range(0, reps.size, chunk):
                part = reps[lo:lo + chunk]
                with collector_paused():
                    graphs = [family.build(dataclasses.replace(
                        self.network, cell=cell_from_index(int(r)))) for r in part]
                    # predict_many without its memo of whole graphs: each network comes
                    # once, and the memo would keep every node of every one alive
                    ms = self.predictor._predict_new(graphs)
                    costs = [g.cost() for g in graphs]
                    del graphs
                rows = np.array([ms, [c.flops for c in costs], [c.params for c in costs]],
                                dtype=np.float64)
                # every cell of a computed live cell gets its row
                slot = np.full(self.values.shape[1], -1, dtype=np.int64)
                slot[part] = np.arange(part.size)
                members = slot[classes] >= 0
                self.values[:, members] = rows[:, slot[classes[members]]]
                bar.update(int(part.size))
                self.save()
        finally:
            bar.close()
        return int(reps.size)

    def rows(self, cells: Sequence[int]) -> np.ndarray:
        """The table's rows for ``cells`` (indices), computing the missing ones first:
        an array of shape (len(ROWS), len(cells))."""
        idx = np.asarray(cells, dtype=np.int64)
        if np.isnan(self.values[0, idx]).any():
            self.fill(idx)
        return self.values[:, idx]

    def ms(self, cells: Sequence[int]) -> np.ndarray:
        """Predicted ms of each cell index (computing the missing ones first)."""
        return self.rows(cells)[0]


def _network_key(config: Any) -> tuple[Any, ...]:
    return (tuple(config.channels), config.cells_per_stage, config.resolution,
            config.num_classes)


def _predictor_digest(predictor: Any) -> str:
    """What of a predictor its cache folder does not name: its composition terms (an
    experiment may swap them) and whether it types grouped convolutions."""
    import json

    records = json.dumps(predictor.composition.records(), sort_keys=True, default=repr)
    return hashlib.sha256(f"{records}|{predictor.grouped}".encode()).hexdigest()[:10]


def table_for(predictor: Any, config: Any) -> NASBench201Table:
    """The predictor's table of ``config``'s network definition (created on first use,
    read from the predictor's cache folder when there is one). A predictor whose
    composition changed since gets a new table."""
    key = _network_key(config)
    tables = predictor._space_tables
    held = tables.get(key)
    if held is not None and held[0] is predictor.composition:
        return held[1]
    cache = (predictor.meta or {}).get("cache")
    path = None
    if cache:
        spec = hashlib.sha256(repr(key).encode()).hexdigest()[:10]
        path = (Path(cache) / "spaces" / f"nasbench201-v{TABLE_VERSION}-{spec}-"
                f"{_predictor_digest(predictor)}-{code_digest()}.npy")
    network = dataclasses.replace(config, cell=("none",) * 6)
    table = NASBench201Table(predictor, network, path)
    tables[key] = (predictor.composition, table)
    return table


def cell_indices(configs: Sequence[Any]) -> np.ndarray:
    """The cell index of each NAS-Bench-201 config."""
    global _index
    if _index is None:
        from nnmeter.zoo.nasbench201 import NUM_CELLS, cell_from_index

        _index = {cell_from_index(i): i for i in range(NUM_CELLS)}
    index = _index
    try:
        return np.fromiter((index[c.cell] for c in configs), dtype=np.int64,
                           count=len(configs))
    except KeyError:
        from nnmeter.zoo.nasbench201 import cell_index

        for c in configs:
            cell_index(tuple(c.cell))  # names the bad op
        raise


def predict_configs(predictor: Any, configs: Sequence[Any]) -> list[float]:
    """Predicted ms of NAS-Bench-201 configs, through the predictor's tables."""
    out = np.empty(len(configs))
    groups: dict[tuple[Any, ...], list[int]] = {}
    for i, c in enumerate(configs):
        groups.setdefault(_network_key(c), []).append(i)
    for members in groups.values():
        table = table_for(predictor, configs[members[0]])
        out[members] = table.ms(cell_indices([configs[i] for i in members]))
    return out.tolist()

"""The NAS-Bench-201 table (nnmeter.predictors.space_table): a cell's row is the figure
predict_many gives its built network, to the bit, for cells that build their own
network and for cells that share another's; the table is stored, merged and reread
safely, and a changed predictor or network definition gets its own."""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path

import numpy as np
import pytest

from nnmeter.predictors import load_predictor
from nnmeter.predictors.space_table import (NASBench201Table, cell_indices, live_classes,
                                            table_for)
from nnmeter.zoo.nasbench201 import (NUM_CELLS, NASBench201Config, NASBench201Family,
                                     cell_from_index, live_cell)

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def trained():
    """The committed ort-cpu predictor (cached in the test session's own home)."""
    from nnmeter.devices.datasets import device_datasets

    ids = [d.dataset_id for d in device_datasets(None, ROOT) if d.backend_id == "ort-cpu"]
    if not ids:
        pytest.skip("no committed ort-cpu dataset")
    return load_predictor("ort-cpu", dataset=sorted(ids)[0], root=ROOT)


@pytest.fixture()
def pred(trained):
    """The predictor with no table, in memory or on disk, and its own terms."""
    import shutil

    terms = trained.composition
    shutil.rmtree(Path(trained.meta["cache"]) / "spaces", ignore_errors=True)
    trained._space_tables.clear()
    yield trained
    trained.composition = terms
    trained._space_tables.clear()


def _cells(n: int = 40, seed: int = 3) -> list[int]:
    """Cells that are their own live cell, and cells that share another's network."""
    rng = np.random.default_rng(seed)
    classes = live_classes()
    own = np.flatnonzero(classes == np.arange(NUM_CELLS))
    shared = np.flatnonzero(classes != np.arange(NUM_CELLS))
    return sorted(set(rng.choice(own, n // 2).tolist() + rng.choice(shared, n // 2).tolist()))


def test_live_cells_build_the_same_graph():
    fam = NASBench201Family()
    classes = live_classes()
    assert np.unique(classes).size == 9445
    for i in _cells(30, seed=1):
        cell = cell_from_index(i)
        assert cell_from_index(int(classes[i])) == live_cell(cell)
        a = fam.build(NASBench201Config(cell=cell))
        b = fam.build(NASBench201Config(cell=live_cell(cell)))
        assert a.structurally_equal(b)


def test_configs_predict_as_their_built_graphs(pred):
    fam = NASBench201Family()
    configs = [NASBench201Config(cell=cell_from_index(i)) for i in _cells()]
    via_table = pred.predict_many(configs)
    graphs = [fam.build(c) for c in configs]
    pred._totals = None
    assert via_table == pred.predict_many(graphs)  # to the bit
    # a mixed batch (graphs, configs, zoo variants) keeps its order
    from nnmeter import zoo

    v = zoo.sample_variants("nasbench201", 2, seed=4)
    mixed = [graphs[0], configs[1], v[0], graphs[2], v[1]]
    got = pred.predict_many(mixed)
    assert got[:2] == via_table[:2] and got[3] == via_table[2]
    assert got[2] == pred.predict_many([v[0].build()])[0]
    assert got[4] == pred.predict_many([v[1].build()])[0]


def test_table_is_stored_and_reread(pred):
    cells = _cells(10, seed=5)
    table = table_for(pred, NASBench201Config())
    assert table.path is not None and table.path.parent.name == "spaces"
    assert table.filled == 0
    ms = table.ms(cells)
    assert table.filled >= len(cells)  # every cell of a computed network has its row
    assert table.path.exists()
    again = NASBench201Table(pred, table.network, table.path)
    assert np.array_equal(again.values, table.values, equal_nan=True)
    assert again.ms(cells).tolist() == ms.tolist()
    # nothing is recomputed once it is in the table
    assert again.fill(cells) == 0


def test_two_writers_lose_nothing(pred):
    net = NASBench201Config()
    a = table_for(pred, net)
    b = NASBench201Table(pred, a.network, a.path)  # another process's view of the file
    a.fill([0, 1, 2])
    b.fill([15624])
    merged = NASBench201Table(pred, a.network, a.path)
    for i in (0, 1, 2, 15624):
        assert not np.isnan(merged.values[0, i])


def test_broken_file_is_ignored_with_a_warning(pred, caplog):
    table = table_for(pred, NASBench201Config())
    table.path.parent.mkdir(parents=True, exist_ok=True)
    table.path.write_bytes(b"not a numpy file")
    with caplog.at_level(logging.WARNING):
        fresh = NASBench201Table(pred, table.network, table.path)
    assert "unreadable" in caplog.text and fresh.filled == 0
    fresh.fill([7])
    assert NASBench201Table(pred, table.network, table.path).filled >= 1


def test_each_definition_and_composition_has_its_own_table(pred):
    base = NASBench201Config()
    wide = dataclasses.replace(base, channels=(8, 16, 32))
    t1, t2 = table_for(pred, base), table_for(pred, wide)
    assert t1 is not t2 and t1.path != t2.path
    assert table_for(pred, dataclasses.replace(base, cell=cell_from_index(9))) is t1
    cell = NASBench201Config(cell=cell_from_index(1234))
    assert pred.predict_many([cell]) != pred.predict_many(
        [dataclasses.replace(cell, channels=(8, 16, 32))])
    # a predictor whose terms changed gets a fresh table, at another path
    from nnmeter.predictors.composition import Composition

    pred.composition = Composition(tuple(pred.composition.terms)[:1])
    t3 = table_for(pred, base)
    assert t3 is not t1 and t3.path != t1.path and t3.filled == 0


def test_bad_cell_is_named():
    with pytest.raises(ValueError, match="conv_5x5"):
        cell_indices([NASBench201Config(cell=("conv_5x5",) * 6)])

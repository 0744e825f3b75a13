"""``nnmeter space``: fills a table, prints its spread and its fastest and slowest
networks, ``--json`` for scripts, one-line errors for bad options."""

from __future__ import annotations

import json

import numpy as np
import pytest

from nnmeter.cli import main


def test_bad_options_are_one_line_errors(capsys):
    assert main(["space", "nasbench201", "-b", "ort-cpu", "--channels", "16,x,64"]) != 0
    err = capsys.readouterr().err
    assert "--channels" in err and "Traceback" not in err
    assert main(["space", "nasbench201", "-b", "ort-cpu", "--top", "-1"]) != 0
    assert "--top" in capsys.readouterr().err


def test_summary_of_a_small_space(monkeypatch):
    """The summary over a table filled with known rows (no network is built)."""
    from nnmeter.commands.space import space_summary
    from nnmeter.predictors.space_table import NASBench201Table, live_classes
    from nnmeter.zoo.nasbench201 import NASBench201Config

    class Pred:
        backend_id, device_name, intervals = "ort-cpu", "dev", None

        def interval(self, ms):
            return None

    table = NASBench201Table(Pred(), NASBench201Config(cell=("none",) * 6), None)
    classes = live_classes()
    reps = np.unique(classes)[:4]
    for k, r in enumerate(reps):  # 4 networks, each with all of its cells
        table.values[:, classes == r] = [[1.0 + k], [2e6 * (k + 1)], [1e3]]
    out = space_summary(Pred(), table, top=2)
    assert out["distinct_networks"] == 4
    assert out["filled"] == int(np.isin(classes, reps).sum())
    assert [r["ms"] for r in out["fastest"]] == [1.0, 2.0]
    assert [r["ms"] for r in out["slowest"]] == [4.0, 3.0]
    assert out["fastest"][0]["cells"] == int((classes == reps[0]).sum())
    assert out["ms"] == {"min": 1.0, "median": 2.5, "max": 4.0}
    json.dumps(out)  # JSON-able

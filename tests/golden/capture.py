"""Capture (or check) the golden predictions: every committed dataset predicts the zoo's
variants and the examples; totals and per-kernel times are stored to the last bit.

The goldens are keyed by dataset id (``ort-cpu@epyc-zen4-avx512-2c``), each dataset
loaded by name, so what they check does not depend on which device's predictor this
machine would pick.

Run ``python tests/golden/capture.py`` to rewrite ``predictions.json`` (only in a commit
that explains why a prediction moved), or ``python tests/golden/capture.py DATASET ...``
to (re)capture only those datasets, keeping the others' stored values (a new dataset's
goldens); ``tests/test_golden.py`` checks against it.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
GOLDEN = HERE / "predictions.json"
#: variants per zoo family, and the sampler's seed
PER_FAMILY = 5
SEED = 4242


def golden_graphs():
    """(name, ModelGraph) of every golden model: zoo variants, then the examples."""
    from nnmeter import zoo
    from nnmeter.frontends import load_model

    out = []
    for fam in zoo.FAMILY_NAMES:
        for v in zoo.sample_variants(fam, PER_FAMILY, seed=SEED):
            out.append((v.name, v.build()))
    for path in sorted((ROOT / "examples").glob("*.json")):
        out.append((f"examples/{path.name}", load_model(str(path))))
    return out


def golden_datasets() -> list[str]:
    """Every committed kernel dataset's id."""
    from nnmeter.devices.datasets import device_datasets

    return [d.dataset_id for d in device_datasets(None, ROOT)]


def predictions(dataset_id: str, graphs) -> dict:
    """{model: {"total_ms", "kernels": [[type, ms], ...], "many_ms"}} on one dataset."""
    from nnmeter.devices.datasets import device_datasets
    from nnmeter.predictors import load_predictor

    backend_id = next(d.backend_id for d in device_datasets(None, ROOT)
                      if d.dataset_id == dataset_id)
    pred = load_predictor(backend_id, dataset=dataset_id, root=ROOT)
    many = pred.predict_many([g for _, g in graphs])
    out = {}
    for (name, g), m in zip(graphs, many):
        r = pred.predict(g, check_device=False)
        out[name] = {"total_ms": r.total_ms, "many_ms": m,
                     "kernels": [[row.type, row.predicted_ms] for row in r.rows]}
    return out


def capture(only: list[str] | None = None) -> dict:
    """Every dataset's goldens; with ``only``, those datasets captured anew and the
    other committed datasets' values kept from ``predictions.json``."""
    graphs = golden_graphs()
    ids = golden_datasets()
    unknown = sorted(set(only or ()) - set(ids))
    if unknown:
        raise SystemExit(f"capture.py: no committed dataset {', '.join(unknown)}; "
                         f"datasets: {', '.join(ids)}")
    stored = json.loads(GOLDEN.read_text()) if only and GOLDEN.exists() else {}
    return {d: stored[d] if only and d not in only and d in stored else predictions(d, graphs)
            for d in ids}


if __name__ == "__main__":
    data = capture(sys.argv[1:] or None)
    GOLDEN.write_text(json.dumps(data, indent=0, sort_keys=True) + "\n")
    n = sum(len(v) for v in data.values())
    print(f"wrote {GOLDEN} ({len(data)} datasets, {n} predictions)", file=sys.stderr)

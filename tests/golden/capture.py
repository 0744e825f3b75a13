"""Capture (or check) the golden predictions: every committed dataset predicts the zoo's
variants and the examples; totals and per-kernel times are stored to the last bit.

Run ``python tests/golden/capture.py`` to rewrite ``predictions.json`` (only in a commit
that explains why a prediction moved); ``tests/test_golden.py`` checks against it.
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
    from nnmeter.predictors import available_predictors

    return available_predictors(ROOT)


def predictions(backend_id: str, graphs) -> dict:
    """{model: {"total_ms", "kernels": [[type, ms], ...], "many_ms"}} on one dataset."""
    from nnmeter.predictors import load_predictor

    pred = load_predictor(backend_id, root=ROOT)
    many = pred.predict_many([g for _, g in graphs])
    out = {}
    for (name, g), m in zip(graphs, many):
        r = pred.predict(g, check_device=False)
        out[name] = {"total_ms": r.total_ms, "many_ms": m,
                     "kernels": [[row.type, row.predicted_ms] for row in r.rows]}
    return out


def capture() -> dict:
    graphs = golden_graphs()
    return {b: predictions(b, graphs) for b in golden_datasets()}


if __name__ == "__main__":
    data = capture()
    GOLDEN.write_text(json.dumps(data, indent=0, sort_keys=True) + "\n")
    n = sum(len(v) for v in data.values())
    print(f"wrote {GOLDEN} ({len(data)} datasets, {n} predictions)", file=sys.stderr)

"""Which kernels of transformer models the predictor covers, and how the rest are
estimated (issue: no fallback kernel left; the ones that remain are listed).

Usage:
  python experiments/transformer_coverage.py --backend ort-cpu [--real] [--json out.json]

Models: the base model and 5 seed-1000 variants of each transformer zoo family (vit,
bert, mobilevit), and with ``--real`` the real set's transformer architectures
(``experiments/real_set.py --set transformers`` builds their files; Hugging Face
``transformers`` needed). Nothing is measured: this reads the predictor's report of
every model (``LatencyReport.uncovered``: kernels without a regressor of their own type,
with what estimated them) and prints, per model, its kernels, how many a regressor of
their own type predicted, and per kernel type the ones left to a family regressor or the
FLOPs/bytes fallback, with their share of the predicted time.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter, defaultdict
from pathlib import Path


def _zoo_graphs() -> list:
    from nnmeter import zoo

    graphs = []
    for fam in zoo.TRANSFORMER_FAMILIES:
        graphs.append(zoo.base_variant(fam).build())
        graphs.extend(v.build() for v in zoo.sample_variants(fam, 5, seed=1000))
    return graphs


def _real_graphs(backend: str) -> list:
    """The real transformer set's models that ``backend`` reads (ONNX files for
    ort-cpu, the keras-hub .tflite files for litert-cpu)."""
    import importlib.util

    here = Path(__file__).resolve().parent
    spec = importlib.util.spec_from_file_location("real_set", here / "real_set.py")
    real_set = importlib.util.module_from_spec(spec)
    sys.modules["real_set"] = real_set  # its dataclasses look their module up
    spec.loader.exec_module(real_set)
    from nnmeter.frontends import load_model

    d = real_set.default_dir("transformers")
    man = d / "manifest.json"
    if not man.exists():
        raise SystemExit(f"error: no transformer set in {d}; run "
                         f"'python experiments/real_set.py build --set transformers' first")
    out = []
    for name, info in sorted(json.loads(man.read_text()).items()):
        if not real_set._applies(info, backend):
            continue
        g = load_model(str(d / info["file"]))
        g.name = name
        out.append(g)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--backend", default="ort-cpu")
    ap.add_argument("--device", default=None)
    ap.add_argument("--real", action="store_true", help="also the real transformer set")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    from nnmeter.predictors import load_predictor

    pred = load_predictor(args.backend, device=args.device)
    graphs = _zoo_graphs() + (_real_graphs(args.backend) if args.real else [])
    left: dict[str, Counter] = defaultdict(Counter)
    left_ms: dict[str, float] = defaultdict(float)
    models = []
    print(f"{args.backend} on {pred.device_name}: {len(graphs)} transformer models")
    print(f"{'model':34s} {'kernels':>7s} {'own type':>8s} {'family':>6s} {'fallback':>8s} "
          f"{'fallback ms %':>13s}")
    for g in graphs:
        rep = pred.predict(g, check_device=False)
        fb = [u for u in rep.uncovered if not str(u["estimated_by"]).startswith("family:")]
        fam = [u for u in rep.uncovered if str(u["estimated_by"]).startswith("family:")]
        fb_ms = sum(u["predicted_ms"] for u in fb)
        for u in rep.uncovered:
            key = f"{u['type']} ({u['estimated_by']})"
            left[key][g.name] += 1
            left_ms[key] += u["predicted_ms"]
        n = len(rep.rows)
        models.append({"model": g.name, "kernels": n, "own_type": n - len(rep.uncovered),
                       "family": len(fam), "fallback": len(fb),
                       "fallback_share": fb_ms / rep.total_ms if rep.total_ms else 0.0,
                       "predicted_ms": rep.total_ms})
        print(f"{g.name[:34]:34s} {n:7d} {n - len(rep.uncovered):8d} {len(fam):6d} "
              f"{len(fb):8d} {100 * fb_ms / rep.total_ms:13.2f}")
    print("\nkernels left without a regressor of their own type, over all models:")
    for key, per in sorted(left.items(), key=lambda kv: -sum(kv[1].values())):
        print(f"  {key:40s} {sum(per.values()):5d} kernels in {len(per):3d} models, "
              f"{left_ms[key]:9.3f} ms predicted in all")
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(
            {"backend": args.backend, "device": pred.device_name, "models": models,
             "left": {k: dict(v) for k, v in left.items()}}, indent=1))


if __name__ == "__main__":
    main()

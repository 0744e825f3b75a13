"""Run the ONNX frontend over the test models shipped in the onnx wheel and count outcomes.

Usage::

    python experiments/onnx_test_models.py [-v]

Prints how many of the models under light/, simple/, pytorch-converted/ and
pytorch-operator/ loaded (and how many of those hold ``unknown`` ops), how many were
refused with a clear nnmeter error (by error class), and how many failed in any other
way (that count must be 0).
"""

from __future__ import annotations

import argparse
import collections
import sys
import traceback
from pathlib import Path

import onnx

from nnmeter.errors import NNMeterError
from nnmeter.frontends.onnx import load_onnx

SUBSETS = ("light", "simple", "pytorch-converted", "pytorch-operator")


def model_paths() -> list[Path]:
    data = Path(onnx.__file__).parent / "backend" / "test" / "data"
    paths = sorted((data / "light").glob("light_*.onnx"))
    for sub in SUBSETS[1:]:
        paths += sorted((data / sub).glob("*/model.onnx"))
    return paths


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-v", "--verbose", action="store_true", help="one line per model")
    args = parser.parse_args(argv)
    paths = model_paths()
    loaded = with_unknown = other = 0
    refused: collections.Counter[str] = collections.Counter()
    unknown_types: collections.Counter[str] = collections.Counter()
    for path in paths:
        label = f"{path.parent.name}/{path.stem}" if path.stem == "model" else path.stem
        try:
            graph = load_onnx(path)
        except NNMeterError as err:
            refused[type(err).__name__] += 1
            if args.verbose:
                print(f"refused  {label}: {type(err).__name__}: {str(err).splitlines()[0]}")
            continue
        except Exception:  # noqa: BLE001 - counting the failures that must not happen
            other += 1
            print(f"FAILED   {label}", file=sys.stderr)
            traceback.print_exc()
            continue
        loaded += 1
        unknown = graph.unknown_ops()
        if unknown:
            with_unknown += 1
            unknown_types.update(n.attrs.original_type for n in unknown)
        if args.verbose:
            print(f"loaded   {label}: {len(graph)} nodes, {len(unknown)} unknown")
    print(f"models:                       {len(paths)}")
    print(f"loaded:                       {loaded} ({with_unknown} of them keep unknown ops)")
    print(f"unsupported, clear error:     {sum(refused.values())} {dict(refused)}")
    print(f"anything else (must be 0):    {other}")
    if unknown_types:
        print(f"unknown op types kept:        {dict(unknown_types.most_common())}")
    return 1 if other else 0


if __name__ == "__main__":
    sys.exit(main())

"""Options and output helpers shared by subcommands, so options read the same everywhere."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from nnmeter.errors import NNMeterError

__all__ = ["add_json", "add_backend", "add_input_shape", "parse_input_shapes", "emit_json",
           "print_table"]


def add_json(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print machine-readable JSON")


def add_backend(p: argparse.ArgumentParser, *, required: bool = True,
                default: str | None = None) -> None:
    p.add_argument("--backend", "-b", required=required and default is None, default=default,
                   help="backend id, e.g. ort-cpu, litert-cpu, openvino-cpu, mnn-cpu "
                        "(see `nnmeter backends`)")


def add_input_shape(p: argparse.ArgumentParser) -> None:
    p.add_argument("--input-shape", action="append", default=[], metavar="[NAME=]D0,D1,...",
                   help="shape of a model input in the canonical NCHW layout, e.g. "
                        "1,3,224,224 or input=1,3,224,224; repeat for several inputs; "
                        "needed when the model has dynamic dimensions")


class UsageError(NNMeterError, ValueError):
    """A command-line value that does not parse."""


def parse_input_shapes(values: list[str]) -> dict[str, tuple[int, ...]] | None:
    """Parse repeated --input-shape values into {name: shape}; '' names the first input."""
    if not values:
        return None
    out: dict[str, tuple[int, ...]] = {}
    for v in values:
        name, _, dims = v.rpartition("=")
        try:
            shape = tuple(int(d) for d in dims.replace("x", ",").split(",") if d.strip())
        except ValueError:
            raise UsageError(
                f"--input-shape {v!r} is not a list of integers; write e.g. 1,3,224,224"
            ) from None
        if not shape or any(d <= 0 for d in shape):
            raise UsageError(f"--input-shape {v!r} needs positive dimensions")
        out[name] = shape
    return out


def emit_json(obj: Any) -> None:
    json.dump(obj, sys.stdout, indent=2, default=str)
    sys.stdout.write("\n")


def print_table(headers: list[str], rows: list[list[Any]], *, file=None) -> None:
    """Print an aligned plain-text table (right-aligns numbers)."""
    file = file or sys.stdout
    cells = [[("" if c is None else (f"{c:,.4g}" if isinstance(c, float) else
              (f"{c:,}" if isinstance(c, int) else str(c)))) for c in r] for r in rows]
    widths = [max([len(h)] + [len(r[i]) for r in cells]) for i, h in enumerate(headers)]
    numeric = [all(isinstance(r[i], (int, float)) or r[i] is None for r in rows) and rows
               for i in range(len(headers))]
    def fmt(r: list[str]) -> str:
        return "  ".join(c.rjust(w) if numeric[i] else c.ljust(w)
                         for i, (c, w) in enumerate(zip(r, widths))).rstrip()
    print(fmt(headers), file=file)
    print("  ".join("-" * w for w in widths), file=file)
    for r in cells:
        print(fmt(r), file=file)

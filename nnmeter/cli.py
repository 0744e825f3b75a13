"""The ``nnmeter`` console script: a thin layer over the public API.

Each subcommand lives in ``nnmeter/commands/<name>.py`` and exposes
``register(subparsers)``, which adds its parser and sets ``func`` to a handler
``func(args) -> int``. Errors of ours become one line on stderr and exit code 2;
nothing else is caught here, so real bugs still show their traceback.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys

from nnmeter.errors import NNMeterError

__all__ = ["main", "build_parser", "COMMAND_MODULES"]

#: Subcommand modules under nnmeter.commands, in the order --help lists them.
COMMAND_MODULES = (
    "ir",
    "zoo",
    "backends",
    "fusion",
    "predict",
    "space",
    "devices",
    "farm",
    "xray",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="nnmeter",
        description=(
            "Predict the latency of a DNN on a real inference backend, kernel by kernel; "
            "detect backend fusion rules; measure; and validate deployments."
        ),
    )
    parser.add_argument("-v", "--verbose", action="count", default=0,
                        help="more log output (-v info, -vv debug)")
    from nnmeter import __version__

    parser.add_argument("--version", action="version", version=f"nnmeter {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMAND_MODULES:
        try:
            module = importlib.import_module(f"nnmeter.commands.{name}")
        except ModuleNotFoundError as err:
            if err.name == f"nnmeter.commands.{name}":
                continue  # that area is not built yet
            raise
        module.register(sub)
    return parser


def _quiet_stdout() -> None:
    """Point stdout at /dev/null so that the interpreter's final flush of a closed
    pipe raises nothing."""
    import contextlib
    import os

    with contextlib.suppress(OSError, ValueError):  # no stdout to point anywhere
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=[logging.WARNING, logging.INFO, logging.DEBUG][min(args.verbose, 2)],
        format="%(levelname)s %(name)s: %(message)s",
    )
    if not getattr(args, "func", None):
        parser.print_help()
        return 1
    try:
        return int(args.func(args) or 0)
    except NNMeterError as err:
        msg = str(err).strip().splitlines()
        print(f"nnmeter {args.command}: error: {msg[0] if msg else type(err).__name__}",
              file=sys.stderr)
        for line in msg[1:6]:
            print(f"  {line}", file=sys.stderr)
        if getattr(args, "json", False):
            # a script reading stdout gets the error as JSON too
            import json

            try:
                print(json.dumps({"error": str(err).strip(), "kind": type(err).__name__,
                                  "command": args.command}))
            except BrokenPipeError:
                _quiet_stdout()
        return 2
    except BrokenPipeError:
        # the reader stopped (``nnmeter ... --json | head``): not an error of ours
        _quiet_stdout()
        return 0
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())

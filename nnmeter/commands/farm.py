"""Subcommand ``farm``: the devices of a Ray cluster, and a node's resources."""

from __future__ import annotations

import argparse
import json

from nnmeter.commands._common import add_json, emit_json, print_table

__all__ = ["register"]


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "farm", help="measure on a Ray cluster: its devices, and a node's --resources",
        description="A device farm on Ray: a node offers a backend by holding the resource "
                    "nnmeter-<backend> (one unit); `nnmeter build/measure/profile --runner "
                    "ray --address ADDR` then measure on that node's backend, one job at a "
                    "time. `ray start ... --resources \"$(nnmeter farm resources)\"` adds "
                    "this machine's backends to a cluster.")
    sub = p.add_subparsers(dest="farm_command", metavar="{devices,resources}")
    sub.required = True
    d = sub.add_parser("devices", help="every node of the cluster and the backends it offers")
    d.add_argument("--address", default=None, metavar="ADDR",
                   help="the cluster's address (default: a Ray instance on this machine)")
    add_json(d)
    d.set_defaults(func=_cmd_devices)
    r = sub.add_parser("resources",
                       help="the JSON for `ray start --resources` that offers this "
                            "machine's runnable backends")
    r.add_argument("--backends", default=None, metavar="B1,B2",
                   help="only these backends (default: every one that runs here)")
    r.set_defaults(func=_cmd_resources)


def _cmd_devices(args: argparse.Namespace) -> int:
    from nnmeter.farm.ray_runner import farm_devices

    rows = farm_devices(args.address)
    if args.json:
        emit_json(rows)
        return 0
    if not rows:
        print("no node of this cluster offers a backend: start nodes with "
              "`ray start ... --resources \"$(nnmeter farm resources)\"`")
        return 0
    print_table(["node", "host", "backend"],
                [[r["node_id"][:12], r["host"], r["backend_id"]] for r in rows])
    return 0


def _cmd_resources(args: argparse.Namespace) -> int:
    from nnmeter.farm.ray_runner import node_resources

    ids = [b.strip() for b in args.backends.split(",")] if args.backends else None
    if ids is not None:
        from nnmeter.backends import get_backend

        for b in ids:
            get_backend(b)  # an unknown id fails here, with the known ones listed
    print(json.dumps(node_resources(ids)))
    return 0

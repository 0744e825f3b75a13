"""Subcommand ``devices``: every device with a predictor, and this machine."""

from __future__ import annotations

import argparse
import json
from typing import Any

from nnmeter.commands._common import add_json, emit_json, print_table

__all__ = ["register", "device_table"]


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "devices", help="list the devices with a predictor, per backend, and this machine",
        description="A predictor describes one device: one CPU (its ISA and caches), one "
                    "runtime version, one set of settings. This lists, per backend, every "
                    "device with kernel data (measurements, build minutes, accuracy where "
                    "measured) and this machine's own identity, marking the predictor "
                    "`nnmeter predict` would use here.")
    p.add_argument("--backend", "-b", default=None,
                   help="only this backend (default: every backend with a predictor)")
    add_json(p)
    p.set_defaults(func=_cmd_devices)


def _build_minutes(directory: Any) -> float | None:
    """The minutes of every build run logged in the dataset's ``builds.jsonl``; None
    when no run ever finished (a build still measuring, or one stopped before its end:
    ``nnmeter build`` logs a run when it ends)."""
    path = directory / "builds.jsonl"
    if not path.exists():
        return None
    total, runs = 0.0, 0
    for line in path.read_text().splitlines():
        try:
            total += float(json.loads(line).get("minutes") or 0.0)
            runs += 1
        except (ValueError, TypeError, AttributeError):
            continue  # a torn line of a killed build
    return total if runs else None


def _accuracy(directory: Any) -> dict[str, Any] | None:
    path = directory / "accuracy.json"
    if not path.exists():
        return None
    try:
        return json.loads(path.read_text())
    except ValueError:
        return None


def device_table(backend_id: str | None = None, root: Any = None) -> dict[str, Any]:
    """``{"this_machine": {...}, "backends": {backend: [device rows]}}`` for
    ``nnmeter devices --json``: each row ``dataset``, ``device``, ``fingerprint_id``,
    ``measurements``, ``build_minutes`` (None where no build run has finished: one still
    measuring or stopped), ``finished``, ``transfer_from``, ``accuracy`` (the dataset's
    ``accuracy.json``, None when never measured), ``this_machine`` (bool) and
    ``used_here`` (the one ``nnmeter predict`` picks on this machine)."""
    from nnmeter.devices.cpu import local_cpu
    from nnmeter.devices.datasets import _rows, device_datasets, resolve

    cpu = local_cpu()
    out: dict[str, Any] = {
        "this_machine": {"name": cpu.short_name(), **cpu.as_dict(),
                         "microarch": cpu.microarch(), "isa_tier": cpu.isa_tier(),
                         "vector_floats": cpu.vector_floats()},
        "backends": {}}
    sets = device_datasets(backend_id, root)
    for b in sorted({d.backend_id for d in sets}):
        try:
            res = resolve(b, None, root)
            used, local_fid = res.dataset.dataset_id, res.local.get("fingerprint_id")
            how = res.how
        except Exception:  # an unknown backend id in a data folder: list it anyway
            used, local_fid, how = None, None, ""
        rows = []
        for d in sets:
            if d.backend_id != b:
                continue
            transfer = None
            tpath = d.directory / "transfer.json"
            if tpath.exists():
                try:
                    transfer = json.loads(tpath.read_text()).get("source")
                except ValueError:
                    transfer = "unreadable transfer.json"
            minutes = _build_minutes(d.directory)
            rows.append({
                "dataset": d.dataset_id, "device": d.device_name,
                "fingerprint_id": d.fingerprint_id, "measurements": _rows(d),
                "build_minutes": None if minutes is None else round(minutes, 1),
                "finished": minutes is not None,
                "transfer_from": transfer, "accuracy": _accuracy(d.directory),
                "isa": d.device.get("isa"), "runtime_version": d.device.get("runtime_version"),
                "this_machine": bool(local_fid and local_fid in d.fingerprint_ids)
                or (d.dataset_id == used and how == "this machine"),
                "used_here": d.dataset_id == used, "selection": how if d.dataset_id == used
                else ""})
        out["backends"][b] = rows
    return out


def _acc_text(acc: dict[str, Any] | None) -> str:
    if not acc:
        return ""
    parts = []
    for name, a in sorted(acc.items()):
        if isinstance(a, dict) and a.get("acc10") is not None:
            parts.append(f"{name} {100 * a['acc10']:.0f}%")
    return ", ".join(parts)


def _cmd_devices(args: argparse.Namespace) -> int:
    table = device_table(args.backend)
    if args.json:
        emit_json(table)
        return 0
    me = table["this_machine"]
    print(f"this machine: {me['name']}  ({me['vendor']} {me['model_name']}, family "
          f"{me['family']} model {me['model']}, {me['isa_tier'] or 'no vector ISA'}, "
          f"{me['cores']} cores, L3 {me['caches'].get('L3', 0) // 2**20} MiB)")
    print()
    rows = []
    for b, devs in table["backends"].items():
        for d in devs:
            mark = "*" if d["used_here"] else ""
            # the folder's name: unique, where two devices of one CPU differ in settings
            rows.append([mark, b, d["dataset"].partition("@")[2] or d["device"] or d["dataset"],
                         d["fingerprint_id"],
                         d["measurements"],
                         "unfinished" if d["build_minutes"] is None else d["build_minutes"],
                         d["transfer_from"] or "", _acc_text(d["accuracy"]),
                         "yes" if d["this_machine"] else ""])
    if not rows:
        print("no predictors yet: build one with `nnmeter build --backend ort-cpu`")
        return 0
    print_table(["", "backend", "device", "fingerprint", "measurements", "build min",
                 "transfer from", "±10 % (set)", "this machine"], rows)
    nearest = [(b, d) for b, devs in table["backends"].items() for d in devs
               if d["used_here"] and d["selection"] == "nearest"]
    print("\n* = the predictor `nnmeter predict` uses here")
    if any(not d["finished"] for devs in table["backends"].values() for d in devs):
        print("unfinished = no build run has ended on that dataset (one still measuring, or "
              "stopped: rerun the same `nnmeter build` to resume it)")
    for b, d in nearest:
        print(f"{b}: no predictor for this machine; predictions use {d['dataset']}'s. Build "
              f"one: nnmeter build -b {b} --transfer-from {d['dataset']} --budget-minutes 10")
    return 0

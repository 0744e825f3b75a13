"""kill -9 at random moments of a real build, then resume: is anything lost or doubled?

A small ort-cpu build (two kernel types, a few samples each, every calibration, then
training) runs in a child process on a fresh dataset. The parent follows the child's log
to know the phase, kills it with SIGKILL at a random moment, checks the dataset, and
starts the build again (it resumes), again and again until the build completes; then the
next trial starts on a new dataset, until every phase has ``--per-phase`` kills (or
``--max-minutes`` pass). After every kill:

- every JSON file of the dataset parses (calibrations, the prior, the regressor choice,
  the predictor cache): they are written atomically;
- every row file reads, with at most one fragment (the row in flight) set aside;
- every row on disk at the moment of the kill is still there, in order, after the build
  resumes and completes (nothing lost; a calibration's points file counts as kept once
  its complete record replaces it, as designed);
- no kernel configuration is measured twice for the same purpose (nothing doubled).

Usage::

    python experiments/kill_battery.py [--per-phase 10] [--seed 0] [--json]

Prints a table per phase: kills, rows lost, rows doubled, broken files, fragments.
Measures on this machine (ort-cpu); the figures do not depend on its speed.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

CHILD = r"""
import logging, sys
logging.basicConfig(stream=sys.stderr, level=logging.INFO, format="%(message)s")
from nnmeter.builder import build_predictor
build_predictor("ort-cpu", dataset="ort-cpu@kill", root=sys.argv[1], progress=False,
                kernels=["relu", "conv-bn-relu"], max_samples_per_type=10, rounds=1,
                budget_minutes=1.0, protocol={"rounds": 2, "round_ms": 4.0,
                                              "warmup_ms": 4.0})
print("BUILD-DONE", flush=True)
"""

#: log line -> phase (the last match before the kill names the phase it landed in)
PHASES = [
    (re.compile(r"collecting the kernel prior"), "sampling"),
    (re.compile(r"(initial|power-of-two) samples"), "sampling"),
    (re.compile(r"measuring .*boundary|measuring .*hand", re.I), "calibration:boundary"),
    (re.compile(r"measuring .*weight", re.I), "calibration:weight-stream"),
    (re.compile(r"measuring .*reorder", re.I), "calibration:reorders"),
    (re.compile(r"measuring .*chain", re.I), "calibration:chain"),
    (re.compile(r"measuring "), "calibration:other"),
    (re.compile(r"training"), "training"),
]


class Child:
    """One build process whose log lines are followed in a thread."""

    def __init__(self, root: Path) -> None:
        env = {**os.environ, "PYTHONUNBUFFERED": "1", "NNMETER_CACHE": str(root / "cache")}
        self.proc = subprocess.Popen([sys.executable, "-c", CHILD, str(root)],
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     text=True, env=env)
        self.phase = "start"
        self.t0 = self.since = time.monotonic()
        self.changes: list[tuple[float, str]] = []  # (seconds after start, phase entered)
        self.done = False
        self.lines: list[str] = []
        threading.Thread(target=self._follow, daemon=True).start()

    def _follow(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line.rstrip())
            if "BUILD-DONE" in line:
                self.done = True
            for rx, phase in PHASES:
                if rx.search(line):
                    if phase != self.phase:
                        self.since = time.monotonic()
                        self.changes.append((self.since - self.t0, phase))
                    self.phase = phase
                    break


def snapshot(ds: Path) -> dict[str, list[str]]:
    """Complete lines of every row file (a torn last line is the row in flight)."""
    out = {}
    for f in sorted(ds.glob("*.jsonl")):
        data = f.read_bytes().decode("utf-8", "replace")
        lines = data.split("\n")
        out[f.name] = [ln for ln in lines[:-1] if ln.strip()]  # drop the unterminated tail
    return out


def check_files(ds: Path) -> tuple[list[str], int]:
    """(broken files, fragments) of the dataset and its predictor cache."""
    from nnmeter.predictors.dataset import _read_jsonl

    broken, fragments = [], 0
    cache = ds.parents[2] / "cache"
    for f in [*ds.rglob("*.json"), *cache.rglob("*.json")]:
        try:
            json.loads(f.read_text())
        except ValueError as err:
            broken.append(f"{f.name}: {err}")
    for f in ds.glob("*.jsonl"):
        lines = [ln for ln in f.read_text(errors="replace").split("\n") if ln.strip()]
        good = sum(1 for _ in _read_jsonl(f))
        fragments += len(lines) - good
        if len(lines) - good > 1:
            broken.append(f"{f.name}: {len(lines) - good} fragments")
    return broken, fragments


def doubled(ds: Path) -> int:
    """Rows measuring a configuration again for the same purpose (origin)."""
    from nnmeter.predictors.dataset import _read_jsonl

    n = 0
    for f in ds.glob("*.jsonl"):
        if f.name in ("rounds.jsonl", "builds.jsonl") or f.name.endswith(".points.jsonl"):
            continue
        keys = Counter(json.dumps([r.get("config"), r.get("origin")], sort_keys=True)
                       for r in _read_jsonl(f) if "config" in r)
        n += sum(c - 1 for c in keys.values() if c > 1)
    return n


def lost(before: dict[str, list[str]], after: dict[str, list[str]], ds: Path) -> int:
    """Rows on disk at the kill that the completed build no longer has as its prefix.

    A calibration's points file (``<record>.points.jsonl``) is removed by design once
    its complete record is written: its rows count as kept when the record exists and
    is no longer partial."""
    n = 0
    for name, rows in before.items():
        if name.endswith(".points.jsonl") and name not in after:
            record = ds / name.replace(".points.jsonl", ".json")
            try:
                done = not json.loads(record.read_text()).get("partial")
            except (OSError, ValueError):
                done = False
            n += 0 if done else sum(1 for r in rows if _parses(r))
            continue
        now = after.get(name, [])
        good = [r for r in rows if _parses(r)]
        keep = [r for r in now if _parses(r)]
        n += sum(1 for a, b in zip(good, keep) if a != b) + max(0, len(good) - len(keep))
    return n


def _parses(line: str) -> bool:
    try:
        json.loads(line)
        return True
    except ValueError:
        return False


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--per-phase", type=int, default=10, help="kills wanted in each phase")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--max-minutes", type=float, default=120.0)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    rng = random.Random(args.seed)
    stats: dict[str, Counter] = {}
    t_end = time.monotonic() + 60 * args.max_minutes
    base = Path(tempfile.mkdtemp(prefix="nnmeter-kill-"))
    trial = 0
    # how long the build takes (first, uninterrupted) sets the range of kill moments
    t0 = time.monotonic()
    ref = Child(base / "reference")
    ref.proc.wait()
    full_s = time.monotonic() - t0
    if not ref.done:
        print("\n".join(ref.lines[-20:]), file=sys.stderr)
        raise SystemExit("the reference build failed")
    (base / "reference.log").write_text("\n".join(ref.lines) + "\n")
    ref_ds = base / "reference" / "datasets" / "kernels" / "ort-cpu@kill"
    print(f"reference build: {full_s:.0f} s, {sum(map(len, snapshot(ref_ds).values()))} rows, "
          f"{doubled(ref_ds)} doubled", file=sys.stderr)

    # each phase's length in the reference run: a kill lands at a uniform moment in it
    ends = ref.changes[1:] + [(full_s, "end")]
    length = {ph: t1 - t0 for (t0, ph), (t1, _) in zip(ref.changes, ends)}
    phases = list(dict.fromkeys(ph for _, ph in ref.changes))
    print("reference phases: " + ", ".join(f"{p} {length[p]:.1f} s" for p in phases),
          file=sys.stderr)

    def short() -> list[str]:
        return [p for p in phases if stats.get(p, Counter())["kills"] < args.per_phase]

    while short() and time.monotonic() < t_end:
        # one trial: a fresh dataset; the build is killed once in each phase it reaches
        # (at a random moment of it), resumed each time, until it completes
        trial += 1
        root = base / f"trial{trial}"
        ds = root / "datasets" / "kernels" / "ort-cpu@kill"
        snapshots: list[tuple[str, dict[str, list[str]]]] = []
        killed_in: set[str] = set()
        while time.monotonic() < t_end:
            child = Child(root)
            dwell: dict[str, float] = {}
            victim = None
            while child.proc.poll() is None:
                ph = child.phase
                if ph in phases and ph not in killed_in and ph in short():
                    wait = dwell.setdefault(ph, rng.uniform(0.0, max(0.05, length[ph])))
                    if time.monotonic() - child.since >= wait and child.phase == ph:
                        victim = ph
                        os.kill(child.proc.pid, signal.SIGKILL)
                        break
                time.sleep(0.005)
            child.proc.wait()
            if victim is None:
                break  # ran to the end
            killed_in.add(victim)
            s = stats.setdefault(victim, Counter())
            s["kills"] += 1
            broken, fragments = check_files(ds) if ds.exists() else ([], 0)
            s["broken files"] += len(broken)
            s["fragments"] += fragments
            for b in broken:
                print(f"  broken after a kill in {victim}: {b}", file=sys.stderr)
            snapshots.append((victim, snapshot(ds) if ds.exists() else {}))
            print(f"trial {trial}: killed in {victim} ({child.lines[-1][:90] if child.lines else ''})",
                  file=sys.stderr)
        if not child.done:
            print("\n".join(child.lines[-15:]), file=sys.stderr)
            stats.setdefault("(whole builds)", Counter())["resume failed"] += 1
            continue
        final = snapshot(ds)
        for ph, before in snapshots:
            stats[ph]["rows lost"] += lost(before, final, ds)
        w = stats.setdefault("(whole builds)", Counter())
        w["builds"] += 1
        w["rows doubled"] += doubled(ds)
        broken, _ = check_files(ds)
        w["broken files"] += len(broken)
    rows = [{"phase": p, **dict(c)} for p, c in sorted(stats.items())]
    if args.json:
        print(json.dumps({"reference_s": round(full_s, 1), "phases": rows}, indent=1))
        return 0
    cols = ["kills", "rows lost", "broken files", "fragments"]
    print(f"{'phase':28s} " + " ".join(f"{c:>13s}" for c in cols))
    for r in rows:
        if r["phase"] == "(whole builds)":
            continue
        print(f"{r['phase']:28s} " + " ".join(f"{r.get(c, 0):13d}" for c in cols))
    w = stats.get("(whole builds)", Counter())
    print(f"\n{w['builds']} interrupted builds completed ({w['resume failed']} failed to "
          f"resume); rows measured twice for one purpose: {w['rows doubled']}; broken files "
          f"after completion: {w['broken files']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

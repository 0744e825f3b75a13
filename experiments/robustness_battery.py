"""Bad inputs as a new user would give them: does nnmeter crash, accept them silently, or
say clearly what is wrong?

Each case runs the real CLI in its own process (a C++ abort would kill a process, not
just raise), on a bad model file, argument, dataset, cache or rules file, and is
classified:

- **crash**: a Python traceback or a death by signal;
- **silent**: exit 0 without the warning the case calls for;
- **unclear**: the expected exit, but the message does not carry the words that say what
  is wrong (the file or argument, the field, the fix);
- **clear**: the expected exit and message.

Usage::

    python experiments/robustness_battery.py [--only SUBSTRING] [--json]

Needs the shipped ort-cpu data (it copies it to a temporary root for the dataset and
cache cases). Takes a few minutes: one CLI process per case, and the dataset cases
retrain the predictor on their copy.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
EXAMPLE = REPO / "examples" / "mobilenetv2.json"
DATASET = "ort-cpu@epyc-zen4-avx512-2c"
_MAIN = "import sys; from nnmeter.cli import main; sys.exit(main())"


@dataclass
class Case:
    name: str
    argv: list[str]
    rc: int  # the exit code a user should get
    words: tuple[str, ...]  # each must be in the output (stderr and stdout)
    env: dict[str, str] = field(default_factory=dict)


def _graph_cases(tmp: Path) -> list[Case]:
    base = json.loads(EXAMPLE.read_text())

    def variant(name: str, edit) -> Path:
        d = copy.deepcopy(base)
        edit(d)
        path = tmp / f"{name}.json"
        path.write_text(json.dumps(d))
        return path

    def node(d, i):
        return d["nodes"][i]

    edits = {
        "attribute 'abc'": (lambda d: node(d, 1)["attrs"].update(out_channels="abc"),
                            ("out_channels", "whole number")),
        "stride 'abc'": (lambda d: node(d, 1)["attrs"].update(stride="abc"), ("stride",)),
        "out_channels 1e12 vs stored 32": (
            lambda d: node(d, 1)["attrs"].update(out_channels=10 ** 12), ("inconsistent",)),
        "out_channels 32.7": (lambda d: node(d, 1)["attrs"].update(out_channels=32.7),
                              ("whole number",)),
        "out_channels true": (lambda d: node(d, 1)["attrs"].update(out_channels=True),
                              ("whole number",)),
        "kernel [0, 0]": (lambda d: node(d, 1)["attrs"].update(kernel=[0, 0]),
                          ("kernel=[0, 0] must be at least 1",)),
        "groups 5 on 3 channels": (lambda d: node(d, 1)["attrs"].update(groups=5),
                                   ("divisible",)),
        "input ref to output 7": (lambda d: node(d, 2).update(inputs=[[node(d, 1)["name"], 7]]),
                                  ("port 7",)),
        "cycle": (lambda d: node(d, 1).update(inputs=[[node(d, 3)["name"], 0]]),
                  ("cycle",)),
        "unknown op": (lambda d: node(d, 2).update(op="frobnicate"),
                       ("'frobnicate' is not in the vocabulary",)),
        "no op field": (lambda d: node(d, 1).pop("op"), ("no string 'op'",)),
        "zero-size input dim": (lambda d: node(d, 0).update(output_shapes=[[1, 3, 0, 224]]),
                                ("zero-size", "not a dynamic")),
        "negative input dim": (lambda d: node(d, 0).update(output_shapes=[[1, 3, -5, 224]]),
                               ("negative dimension",)),
        "shape 'abc'": (lambda d: node(d, 1).update(output_shapes="abc"), ("output_shapes",)),
        "duplicate node name": (lambda d: d["nodes"].append(copy.deepcopy(node(d, 1))),
                                ("twice",)),
        "missing output": (lambda d: d.update(outputs=[["nosuch", 0]]), ("nosuch",)),
        "schema version 99": (lambda d: d.update(schema_version=99), ("schema_version 99",)),
        "unknown attribute": (lambda d: node(d, 1)["attrs"].update(colour=1), ("colour",)),
    }
    cases = []
    for name, (edit, words) in edits.items():
        path = variant(name.replace(" ", "_").replace("'", ""), edit)
        cases.append(Case(f"graph JSON: {name}", ["predict", str(path), "-b", "ort-cpu"], 2,
                          (path.name, *words)))
    raw = {"syntax error": (json.dumps(base)[:-20], ("not valid JSON",)),
           "a JSON list": ("[1, 2]", ("JSON list",)),
           "empty file": ("", ("not valid JSON",))}
    for name, (text, words) in raw.items():
        path = tmp / f"{name.replace(' ', '_')}.json"
        path.write_text(text)
        cases.append(Case(f"graph JSON: {name}", ["predict", str(path), "-b", "ort-cpu"], 2,
                          (path.name, *words)))
    return cases


def _file_cases(tmp: Path) -> list[Case]:
    files = {"garbage.onnx": b"\x00\xffgarbage" * 10, "text.onnx": b"hello",
             "empty.onnx": b"", "bad.tflite": b"TFL3" + b"\x00" * 30, "model.xyz": b"x"}
    cases = []
    for name, data in files.items():
        (tmp / name).write_bytes(data)
        cases.append(Case(f"model file: {name}", ["predict", str(tmp / name), "-b", "ort-cpu"],
                          2, (name,)))
    cases.append(Case("model file: missing", ["predict", str(tmp / "none.onnx"), "-b",
                                               "ort-cpu"], 2, ("does not exist",)))
    ex = str(EXAMPLE)
    cases += [
        Case("--backend nosuch", ["predict", ex, "-b", "nosuch"], 2, ("nosuch",)),
        Case("--device nosuch", ["predict", ex, "-b", "ort-cpu", "--device", "nosuch"], 2,
             ("nosuch",)),
        Case("--input-shape 1,3,abc", ["predict", ex, "-b", "ort-cpu", "--input-shape",
                                       "1,3,abc"], 2, ("--input-shape",)),
        Case("--input-shape names no input", ["predict", ex, "-b", "ort-cpu", "--input-shape",
                                              "x=1,3,224,224"], 2, ("not an input",)),
        Case("--input-shape 1,3,1e9,1e9 (warn)", ["predict", ex, "-b", "ort-cpu",
                                                  "--input-shape", "1,3,1000000000,1000000000"],
             0, ("far outside the range",)),
        Case("--json error is JSON", ["predict", str(tmp / "none.onnx"), "-b", "ort-cpu",
                                      "--json"], 2, ('"error"', '"kind"')),
        Case("measure that times out", ["measure", ex, "-b", "ort-cpu", "--timeout", "0.001"],
             2, ("measurement failed (timeout)",)),
    ]
    return cases


def _data_cases(tmp: Path) -> list[Case]:
    """Damaged copies of the shipped dataset, rules and cache."""
    cases = []

    def root_with(name: str, damage) -> dict[str, str]:
        root = tmp / f"root-{name}"
        shutil.copytree(REPO / "datasets" / "kernels" / DATASET,
                        root / "datasets" / "kernels" / DATASET)
        shutil.copytree(REPO / "fusion_rules", root / "fusion_rules")
        damage(root / "datasets" / "kernels" / DATASET, root)
        return {"NNMETER_DATA": str(root), "NNMETER_CACHE": str(root / "cache")}

    def add_row(row: str):
        def damage(ds: Path, root: Path) -> None:
            with open(ds / "relu.jsonl", "a") as fh:
                fh.write(row)
        return damage

    good = json.loads((REPO / "datasets" / "kernels" / DATASET / "relu.jsonl")
                      .read_text().splitlines()[0])
    ex = str(EXAMPLE)
    for name, row, words in [
        ("torn last row", '{"config": {"cin": 8', ("interrupted write",)),
        ("latency 'garbage'", json.dumps({**good, "latency_ms": "garbage"}) + "\n",
         ("latency_ms",)),
        ("latency 1e308", json.dumps({**good, "latency_ms": 1e308}) + "\n", ("latency_ms",)),
    ]:
        cases.append(Case(f"dataset: {name} (warn)", ["predict", ex, "-b", "ort-cpu"], 0, words,
                          root_with(name.replace(" ", "_").replace("'", ""), add_row(row))))

    def bad_meta(ds: Path, root: Path) -> None:
        (ds / "dataset.json").write_text("{broken")

    cases.append(Case("dataset: dataset.json broken", ["predict", ex, "-b", "ort-cpu"], 2,
                      ("dataset.json",), root_with("meta", bad_meta)))

    def bad_rules(ds: Path, root: Path) -> None:
        (root / "fusion_rules" / "ort-cpu.json").write_text('{"patterns": 3}')

    env = root_with("rules", bad_rules)
    env["NNMETER_FUSION_RULES_DIR"] = str(Path(env["NNMETER_DATA"]) / "fusion_rules")
    cases.append(Case("rules: ort-cpu.json broken", ["predict", ex, "-b", "ort-cpu"], 2,
                      ("ort-cpu.json",), env))
    return cases


CACHE_CASE = "cache: corrupt LightGBM text (rebuilt)"


def _cache_case(tmp: Path) -> list[Case]:
    """A predictor cache whose LightGBM text is corrupt (aborted the process once)."""
    env = {"NNMETER_DATA": str(REPO), "NNMETER_CACHE": str(tmp / "cache")}
    warm = subprocess.run([sys.executable, "-c", _MAIN, "predict", str(EXAMPLE), "-b",
                           "ort-cpu"], env={**os.environ, **env}, capture_output=True, text=True)
    if warm.returncode != 0:
        raise SystemExit(f"could not fill the cache: {warm.stderr[-500:]}")
    import numpy as np

    for npz_path in (tmp / "cache").rglob("arrays.npz"):
        with np.load(npz_path) as npz:
            arrays = {k: npz[k] for k in npz.files}
        for k, v in arrays.items():
            if k.endswith("::model_text"):
                text = bytes(v).decode().replace("num_leaves=", "num_leaves=abc", 1)
                arrays[k] = np.frombuffer(text.encode(), dtype=np.uint8)
        np.savez(npz_path, **arrays)
    return [Case(CACHE_CASE, ["predict", str(EXAMPLE), "-b", "ort-cpu"], 0,
                 ("broken predictor cache",), env)]


def run(case: Case) -> tuple[str, int, str, float]:
    t0 = time.monotonic()
    env = {**os.environ, **case.env}
    p = subprocess.run([sys.executable, "-c", _MAIN, *case.argv], env=env,
                       capture_output=True, text=True, timeout=900)
    out = p.stderr + p.stdout
    if p.returncode < 0 or "Traceback (most recent call last)" in out:
        verdict = "crash"
    elif p.returncode != case.rc:
        verdict = "silent" if p.returncode == 0 else "unclear"
    elif all(w in out for w in case.words):
        verdict = "clear"
    else:
        verdict = "silent" if case.rc == 0 else "unclear"
    first = next((ln for ln in p.stderr.splitlines()
                  if "error" in ln or "warning" in ln.lower()), "")
    return verdict, p.returncode, first, time.monotonic() - t0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--only", default="", help="run the cases whose name contains this")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="nnmeter-battery-"))
    os.environ.setdefault("HOME", str(tmp))
    cases = _graph_cases(tmp) + _file_cases(tmp) + _data_cases(tmp)
    if args.only in CACHE_CASE:
        cases += _cache_case(tmp)  # fills a cache first: only when it runs
    cases = [c for c in cases if args.only in c.name]
    results = []
    for i, case in enumerate(cases, 1):
        verdict, rc, first, secs = run(case)
        results.append({"case": case.name, "verdict": verdict, "rc": rc, "message": first})
        print(f"[{i}/{len(cases)}] {verdict:8s} {case.name} ({secs:.0f} s)", file=sys.stderr)
    shutil.rmtree(tmp, ignore_errors=True)
    counts = {v: sum(r["verdict"] == v for r in results)
              for v in ("crash", "silent", "unclear", "clear")}
    if args.json:
        print(json.dumps({"counts": counts, "cases": results}, indent=1))
        return 0
    width = max(len(r["case"]) for r in results)
    for r in results:
        print(f"{r['case']:<{width}s}  {r['verdict']:8s} rc={r['rc']}  {r['message'][:110]}")
    print(f"\n{len(results)} cases: " + ", ".join(f"{n} {v}" for v, n in counts.items()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

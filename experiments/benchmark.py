"""The benchmark tables of one device, from stored data, by one command.

Reads the frozen protocol (``experiments/protocol.json``: per device and backend, the
reported zoo set, the baselines' training sets, the GCN's paper check, the predictors
of the accuracy curve) and writes, under ``experiments/results/benchmark/<device>/``:

- ``<backend>_zoo.{txt,json}``: the nn-Meter table on the reported set: per family n,
  ±5 %, ±10 %, MAPE, RMSE, each baseline's ±10 % (FLOPs line, FLOPs+MAC line, graph
  MLP, the GCN tuned on held-out training models, BRP-NAS's GCN with its paper's
  network and schedule; trained on the protocol's training sets, which the reported set is
  not part of), and the repeatability ceiling (pass 0 against pass 1 of the one run);
  with figures ``_scatter.png`` (predicted against measured per family, log axes, ±10 %
  band) and ``_families.png`` (per-family bars against the baselines);
- ``<backend>_gcn_check.{txt,json,png}``: the GCN against BRP-NAS's own figure
  (``experiments/gcn_paper_check.py``);
- ``<backend>_curve.{txt,png}``: the share of the reported set within ±10 % against
  the kernel measurements of each predictor of this device (transfers, short and full
  builds): the sampling curve at model level; ``<backend>_sampling.png``: the adaptive
  sampler's cross-validated accuracy per kernel type, per round, of the device's full
  build;
- ``README.md``: every table and figure of the device, with the device's name, the
  date and the commands, assembled from each backend's ``<backend>_section.md`` (a run
  for some backends rewrites theirs and keeps the others').

Usage::

  python experiments/benchmark.py [--device epyc-zen4-avx512-2c] [--backends ort-cpu]
      [--no-gcn]

No measurement: truth is what ``model_accuracy.py measure`` stored (the protocol names
the commands). Every step prints as it goes; the GCN trainings show bars with ETAs. The
GCN's paper check trains in a second process from the start (this project's machines
have two cores), its bars in ``<backend>_gcn_check.log``.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "experiments"))

PROTOCOL = ROOT / "experiments" / "protocol.json"


class _Tee(io.TextIOBase):
    """Write to the terminal and keep a copy (a step's printed table)."""

    def __init__(self, out: Any) -> None:
        self.out, self.kept = out, io.StringIO()

    def write(self, s: str) -> int:
        self.out.write(s)
        self.kept.write(s)
        return len(s)

    def flush(self) -> None:
        self.out.flush()


def load_protocol(path: Path = PROTOCOL) -> dict[str, Any]:
    """The protocol's ``devices`` mapping; a clear exit when it is missing or broken."""
    try:
        return json.loads(path.read_text())["devices"]
    except FileNotFoundError:
        sys.exit(f"error: {path}: no protocol; it declares each device's reported sets")
    except (ValueError, KeyError) as err:
        sys.exit(f"error: {path}: not a protocol ({err}); it needs a 'devices' object")


def zoo_table(backend: str, device: str, entry: dict[str, Any], out: Path, gcn: bool) -> dict:
    """The nn-Meter table on the reported set (model_accuracy.py report)."""
    import model_accuracy

    rep = entry["reported"]
    args = argparse.Namespace(
        backend=backend, seed=rep["seed"], device=device, families=None, since=None,
        train_seeds=",".join(str(s) for s in entry["baseline_training"]),
        gcn=gcn,
        record=False, json=str(out.with_suffix(".json")))
    tee = _Tee(sys.stdout)
    with contextlib.redirect_stdout(tee):
        model_accuracy.report(args)
    command = (f"python experiments/model_accuracy.py report --backend {backend} --device "
               f"{device} --seed {rep['seed']} --train-seeds {args.train_seeds}"
               + (" --gcn" if gcn else ""))
    out.with_suffix(".txt").write_text(tee.kept.getvalue() + f"command: {command}\n")
    return json.loads(out.with_suffix(".json").read_text())


def start_gcn_check(backend: str, device: str, entry: dict[str, Any], out: Path
                    ) -> subprocess.Popen:
    """The GCN's paper check (experiments/gcn_paper_check.py) in a process of its own:
    it trains on one core while the tables use the other. Its output goes to
    ``<out>.log``."""
    check = entry["gcn_check"]
    log = open(out.with_suffix(".log"), "w")
    return subprocess.Popen(
        [sys.executable, str(ROOT / "experiments" / "gcn_paper_check.py"), "--backend",
         backend, "--device", device, "--seed", str(check["seed"]), "--out", str(out)],
        stdout=log, stderr=subprocess.STDOUT, cwd=ROOT)


def finish_gcn_check(proc: subprocess.Popen, out: Path) -> str:
    """Wait for :func:`start_gcn_check`'s process; its table, or why there is none."""
    rc = proc.wait()
    if rc != 0:
        return (f"the GCN check failed (exit {rc}); its output: {out.with_suffix('.log')}\n"
                + out.with_suffix(".log").read_text()[-2000:])
    text = out.with_suffix(".txt").read_text()
    print(text, end="")
    return text


def accuracy_curve(backend: str, device: str, entry: dict[str, Any], out: Path) -> str:
    """Share of the reported set within ±10 % for each predictor of the protocol's
    ``accuracy_curve`` list, against its kernel measurements."""
    import model_accuracy

    from nnmeter import zoo
    from nnmeter.commands.devices import device_table
    from nnmeter.devices.datasets import model_set_path
    from nnmeter.devices.reference import set_against_builds
    from nnmeter.evaluate import evaluate
    from nnmeter.plots import accuracy_curve as plot_curve
    from nnmeter.predictors import load_predictor
    from nnmeter.predictors.dataset import kernel_dataset_dir

    rows = {r["dataset"]: r for r in device_table(backend)["backends"].get(backend, [])}
    seed = entry["reported"]["seed"]
    by: dict[str, float] = {}
    for r in model_accuracy._rows(backend, seed, device):
        if r.get("ok") and r.get("latency_ms") and r.get("family") in zoo.FAMILY_NAMES:
            by[r["variant"]] = min(by.get(r["variant"], np.inf), r["latency_ms"])
    names = sorted(by)
    graphs = [zoo.get_variant(n).build() for n in names]
    true = np.array([by[n] for n in names])
    lines = [f"{backend} on {device}: the reported set (seed {seed}, {len(names)} models) "
             f"against each predictor's kernel measurements",
             f"{'predictor dataset':48s} {'measurements':>12s} {'build min':>9s} "
             f"{'±10 %':>6s} {'±5 %':>6s} {'MAPE %':>7s}   diagnostic: set/build speed, "
             f"±10 % at the set's speed"]
    points = []
    for ds in entry.get("accuracy_curve", []):
        if ds not in rows:
            lines.append(f"{ds:48s} (no such dataset here: skipped)")
            continue
        got = np.array(load_predictor(backend, dataset=ds).predict_many(graphs), float)
        m = evaluate(got, true)
        n_meas, minutes = rows[ds]["measurements"], rows[ds]["build_minutes"]
        minutes = "unfinished" if minutes is None else f"{minutes:.1f}"
        # how much slower the set ran than this build (speed-reference probes), and the
        # share within ±10 % were the predictions scaled by it: how much of the miss is
        # the host's speed between the two runs, never the figure itself
        ratio = set_against_builds(model_set_path(backend, seed, device),
                                   {"b": kernel_dataset_dir(ds)})["b"]
        diag = (f"{ratio:.3f}x, {100 * evaluate(got * ratio, true).acc10:5.1f}"
                if ratio else "no probes")
        lines.append(f"{ds:48s} {n_meas:12,d} {minutes:>9s} "
                     f"{100 * m.acc10:6.1f} {100 * m.acc5:6.1f} {m.mape_percent:7.1f}   {diag}")
        points.append((n_meas, m.acc10, ds.split("@", 1)[1].replace(device, "").lstrip("-")
                       or "full build"))
    text = "\n".join(lines)
    print(text)
    out.with_suffix(".txt").write_text(text + "\n")
    if points:
        plot_curve({f"zoo seed {seed}": points}, out.with_suffix(".png"),
                   title=f"{backend} on {device}: accuracy against measurements")
    return text


def sampling_figure(backend: str, device: str, out: Path) -> bool:
    from nnmeter.plots import sampling_curves
    from nnmeter.predictors.dataset import KernelDataset, kernel_dataset_dir

    ds = KernelDataset(kernel_dataset_dir(f"{backend}@{device}"), backend)
    rounds = [r for r in ds.rounds() if "kernel_type" in r]
    try:
        sampling_curves(rounds, out)
    except ValueError:
        return False
    return True


def section_file(out: Path, backend: str) -> Path:
    """A backend's part of the device README (``<backend>_section.md``), which the README
    is assembled from, so a run for some backends keeps the others' tables."""
    return out / f"{backend}_section.md"


def write_readme(out: Path, backends: Any, header: list[str]) -> Path:
    """``out/README.md``: ``header`` and the section of every backend of ``backends`` (the
    protocol's, in its order) whose tables were ever written, not only this run's (a run
    for one backend used to leave the README with that backend alone)."""
    md = list(header)
    for backend in backends:
        f = section_file(out, backend)
        if f.exists():
            md += [*f.read_text().rstrip("\n").split("\n"), ""]
    path = out / "README.md"
    path.write_text("\n".join(md).rstrip("\n") + "\n")
    return path


def _zoo_markdown(z: dict[str, Any]) -> list[str]:
    head = ("| family | n | ±5 % | ±10 % | MAPE % | RMSE ms | FLOPs ±10 % | FLOPs+MAC ±10 % "
            "| graph MLP ±10 % | GCN ±10 % | BRP-NAS ±10 % | repeatability ±10 % |")
    out = [head, "|" + "---|" * 12]

    def pct(d: dict | None) -> str:
        return f"{100 * d['acc10']:.1f}" if d else "–"

    for fam, r in [*sorted(z["families"].items()), ("**all**", z["overall"])]:
        p = r["predictor"]
        out.append(f"| {fam} | {p['n']} | {100 * p['acc5']:.1f} | {100 * p['acc10']:.1f} | "
                   f"{p['mape_percent']:.1f} | {p['rmse_ms']:.3f} | {pct(r['flops'])} | "
                   f"{pct(r['flops_mac'])} | {pct(r['graph_mlp'])} | {pct(r['gcn'])} | "
                   f"{pct(r.get('brpnas'))} | "
                   f"{100 * r['repeatability_acc10']:.1f} |")
    return out


def main() -> int:
    from tqdm import tqdm

    from nnmeter.devices.cpu import local_cpu

    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default=None, help="a device of the protocol (default: "
                    "this machine's)")
    ap.add_argument("--backends", default=None, help="comma-separated (default: every "
                    "backend the protocol lists for the device)")
    ap.add_argument("--no-gcn", action="store_true",
                    help="leave the GCN out (its trainings take most of the time)")
    ap.add_argument("--out", default=None, help="output folder (default experiments/"
                    "results/benchmark/<device>)")
    args = ap.parse_args()
    protocol = load_protocol()
    device = args.device or local_cpu().short_name()
    if device not in protocol:
        sys.exit(f"error: --device {device}: not in {PROTOCOL.name}; devices with a "
                 f"protocol: {', '.join(sorted(protocol))}")
    entries = protocol[device]
    backends = args.backends.split(",") if args.backends else list(entries)
    unknown = [b for b in backends if b not in entries]
    if unknown:
        sys.exit(f"error: --backends {','.join(unknown)}: no protocol on {device}; it has "
                 f"{', '.join(entries)}")
    out = Path(args.out or ROOT / "experiments" / "results" / "benchmark" / device)
    out.mkdir(parents=True, exist_ok=True)
    t_start = time.time()
    md = [f"# Benchmark tables: {device}", "",
          f"Assembled {time.strftime('%Y-%m-%d %H:%M')} from each backend's last run of "
          f"`python experiments/benchmark.py --device {device}` (each section says when and "
          f"how) from stored measurements (protocol: `experiments/protocol.json`). Every "
          f"figure below was measured on {device} only.",
          ""]
    order = ("zoo", "gcn_check", "curve", "sampling")
    checks = {b: start_gcn_check(b, device, entries[b], out / f"{b}_gcn_check")
              for b in backends if "gcn_check" in entries[b] and not args.no_gcn}
    # the checks train in their own processes; their results are collected last
    steps = [(b, s) for b in backends for s in order if s != "gcn_check"] + \
        [(b, "gcn_check") for b in checks]
    sections: dict[tuple[str, str], list[str]] = {}
    bar = tqdm(steps, desc=f"benchmark {device}", unit="step", file=sys.stderr)
    for backend, step in bar:
        bar.set_postfix_str(f"{backend} {step}")
        entry = entries[backend]
        stem = out / f"{backend}_{step}"
        print(f"\n== {backend}: {step} ==", flush=True)
        if step == "zoo":
            z = zoo_table(backend, device, entry, stem, gcn=not args.no_gcn)
            rep = entry["reported"]
            sections[backend, step] = [
                f"## {backend}", "",
                f"Reported set: zoo seed {rep['seed']}, {z['n_models']} models "
                f"({rep['n']} a family), truth the faster of {rep['passes']} passes of one "
                f"run, declared {rep['declared']} before it was measured; no design "
                f"decision was made on it. Baselines trained on {z['baselines_trained_on']}. "
                f"Predictor: `{z['predictor_dataset']}`."
                + (f" **Status: {rep['status']}.**" if rep.get("status") else ""),
                "", *_zoo_markdown(z), "",
                f"![predicted against measured]({stem.name}_scatter.png)",
                f"![per family]({stem.name}_families.png)", ""]
        elif step == "gcn_check":
            text = finish_gcn_check(checks[backend], stem)
            sections[backend, step] = ["### The GCN baseline against its paper", "", "```",
                                       text.rstrip(), "```", "",
                                       f"![GCN check]({stem.name}.png)", ""]
        elif step == "curve":
            text = accuracy_curve(backend, device, entry, stem)
            sections[backend, step] = ["### Accuracy against measurements", "", "```",
                                       text.rstrip(), "```", "",
                                       f"![accuracy curve]({stem.name}.png)", ""]
        elif sampling_figure(backend, device, stem.with_suffix(".png")):
            sections[backend, step] = [f"![adaptive sampling per kernel type]({stem.name}.png)",
                                       ""]
    minutes = (time.time() - t_start) / 60
    for backend in backends:
        part = [s for step in order for s in sections.get((backend, step), [])]
        # the machine that ran the trainings: the Xeon's tables, rewritten on the Zen 4
        # from the same stored data, kept every column but BRP-NAS's (torch), which moved
        # by 2-5 points, so another CPU likely trains it to other weights
        part.append(f"_{backend}'s tables written {time.strftime('%Y-%m-%d %H:%M')} on "
                    f"{local_cpu().short_name()} by `python experiments/benchmark.py --device "
                    f"{device} --backends {backend}` (this run: {', '.join(backends)}, "
                    f"{minutes:.1f} min)._")
        section_file(out, backend).write_text("\n".join(part) + "\n")
    write_readme(out, entries, md)
    print(f"\nwrote {out}/README.md ({(time.time() - t_start) / 60:.1f} min)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

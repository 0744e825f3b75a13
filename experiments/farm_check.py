"""The device farm against local measurement, on this machine (issue 24's figures).

Usage: python experiments/farm_check.py [--models 8] [--passes 2] [--skip-ssh]
       [--json experiments/results/farm_check.json]

Starts a Ray cluster on this machine (a head and two worker nodes: one offers ort-cpu,
one litert-cpu) and, where an sshd can be started, an ssh "remote" on 127.0.0.1. Then:

1. **Same rows.** The same small build (fixed configurations: no adaptive rounds, no
   calibrations) locally, through Ray and over ssh; compares the rows' configurations
   and device fingerprints.
2. **Killed actor.** The build through Ray again, with the device's actor killed
   (SIGKILL) once two rows are written; counts rows lost and duplicated against the
   local build.
3. **Model-level figure and overhead.** ``--models`` zoo base models measured in
   ``--passes`` passes; in each pass the three profilers (local, Ray, ssh) are open
   together and each model is measured by each in turn, the order rotated from model to
   model, one measurement at a time (the timing lock holds the machine). The
   repeatability is local pass 1 against local pass 2; the farm figure is each runner
   against local in the same pass. Overhead per job: the driver's wall time per job
   minus the local one for the same model and pass (medians), and Ray's own share
   (driver wall minus the actor's job wall).

Prints figures and writes JSON. No assertion: this is a benchmark.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "farm"))


def _ratio_stats(pairs: list[tuple[float, float]]) -> dict[str, float]:
    r = [a / b for a, b in pairs if a > 0 and b > 0]
    dev = [abs(x - 1) for x in r]
    return {"n": len(r), "median_ratio": statistics.median(r),
            "within_5": sum(d <= 0.05 for d in dev) / len(r),
            "within_10": sum(d <= 0.10 for d in dev) / len(r),
            "median_abs_dev": statistics.median(dev)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", type=int, default=8)
    ap.add_argument("--passes", type=int, default=2)
    ap.add_argument("--skip-ssh", action="store_true")
    ap.add_argument("--json", default="experiments/results/farm_check.json")
    args = ap.parse_args()
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")

    from conftest import PRIOR, SMALL, Sshd, _actor_pids, _keys_of, _rows_of
    from tqdm import tqdm

    from nnmeter import zoo
    from nnmeter.backends import Profiler
    from nnmeter.builder import build_predictor
    from nnmeter.devices.cpu import local_cpu
    from nnmeter.farm import RunnerSpec, use_runner
    from nnmeter.farm.ray_runner import RayProfiler, local_farm, release_actors
    from nnmeter.farm.ssh import SshProfiler
    from nnmeter.predictors.dataset import kernel_dataset_dir

    import onnxruntime

    out: dict = {"device": local_cpu().short_name(), "backend": "ort-cpu",
                 "runtime_version": onnxruntime.__version__,
                 "date": time.strftime("%Y-%m-%d %H:%M")}
    work = Path(tempfile.mkdtemp(prefix="nnfarm-"))
    stack = contextlib.ExitStack()
    address = stack.enter_context(local_farm((("ort-cpu",), ("litert-cpu",))))
    ray_spec = RunnerSpec("ray", address=address)
    sshd = None
    if not args.skip_ssh and (shutil.which("sshd") or os.path.exists("/usr/sbin/sshd")):
        (work / "sshd").mkdir()
        sshd = Sshd(work / "sshd")
    specs = {"ray": ray_spec}
    if sshd is not None:
        specs["ssh"] = sshd.spec()
    try:
        # 1. the same small build everywhere
        t = time.monotonic()
        build_predictor("ort-cpu", dataset="ort-cpu", root=work / "local", **SMALL)
        minutes = {"local": (time.monotonic() - t) / 60}
        local_rows = _rows_of(work / "local", "ort-cpu", "ort-cpu")
        same = {}
        for name, spec in specs.items():
            t = time.monotonic()
            with use_runner(spec):
                build_predictor("ort-cpu", dataset="ort-cpu", root=work / name, **SMALL)
            minutes[name] = (time.monotonic() - t) / 60
            rows = _rows_of(work / name, "ort-cpu", "ort-cpu")
            same[name] = {
                "rows": len(_keys_of(rows)), "local_rows": len(_keys_of(local_rows)),
                "same_configs": _keys_of(rows) == _keys_of(local_rows),
                "same_fingerprints": {r["fingerprint_id"] for rs in rows.values() for r in rs}
                == {r["fingerprint_id"] for rs in local_rows.values() for r in rs}}
        out["same_rows"] = same
        out["build_minutes"] = minutes

        # 2. one actor killed mid-build
        ds_dir = kernel_dataset_dir("ort-cpu", work / "killed")
        killed: list[int] = []

        def killer() -> None:
            deadline = time.monotonic() + 300
            while time.monotonic() < deadline:
                p = ds_dir / "conv-bn-relu.jsonl"
                if p.exists() and len(p.read_text().splitlines()) >= 2:
                    for pid in _actor_pids():
                        os.kill(pid, signal.SIGKILL)
                        killed.append(pid)
                    return
                time.sleep(0.05)

        th = threading.Thread(target=killer)
        th.start()
        with use_runner(ray_spec):
            build_predictor("ort-cpu", dataset="ort-cpu", root=work / "killed", **SMALL)
        th.join()
        keys = _keys_of(_rows_of(work / "killed", "ort-cpu", "ort-cpu"))
        want = set(_keys_of(local_rows))
        out["killed_actor"] = {"actors_killed": len(killed), "rows": len(keys),
                               "lost": len(want - set(keys)),
                               "duplicated": len(keys) - len(set(keys))}

        # 3. model-level: local, ray, ssh in each pass, one model at a time
        fams = ["mobilenetv2", "resnet", "shufflenetv2", "mnasnet", "squeezenet",
                "mobilenetv1", "proxylessnas", "mobilenetv3", "googlenet", "nasbench201"]
        graphs = [zoo.base_variant(f).build() for f in fams[:args.models]]
        runners = ["local", *specs]
        res: dict[str, list[list[dict]]] = {r: [] for r in runners}
        bar = tqdm(total=args.passes * len(runners) * len(graphs), desc="model passes",
                   unit="job")
        for p in range(args.passes):
            # every runner's profiler open at once; per model, the runners in turn, in
            # an order rotated from model to model (no runner always first or last)
            profs = {"local": Profiler("ort-cpu")}
            if "ray" in specs:
                profs["ray"] = RayProfiler("ort-cpu", spec=specs["ray"])
            if "ssh" in specs:
                profs["ssh"] = SshProfiler("ort-cpu", spec=specs["ssh"])
            for prof in profs.values():
                prof.start()
            rows: dict[str, list[dict]] = {r: [] for r in runners}
            for i, g in enumerate(graphs):
                order = runners[i % len(runners):] + runners[:i % len(runners)]
                for r in order:
                    t0 = time.perf_counter()
                    m = profs[r].measure(g)
                    wall = (time.perf_counter() - t0) * 1000
                    rows[r].append({"model": g.name, "ok": m.ok, "ms": m.latency_ms,
                                    "driver_wall_ms": wall, "order": order.index(r),
                                    "farm_overhead_ms": m.extra.get("farm_overhead_ms")})
                    bar.update()
            for r in runners:
                res[r].append(rows[r])
            for prof in profs.values():
                prof.close()
            release_actors()
        bar.close()
        out["models"] = [g.name for g in graphs]
        out["passes"] = res
        loc = res["local"]
        figs = {"repeatability_local_pass1_vs_pass2": _ratio_stats(
            [(a["ms"], b["ms"]) for a, b in zip(loc[0], loc[1])]) if args.passes > 1 else None}
        for r in specs:
            pairs = [(a["ms"], b["ms"]) for p in range(args.passes)
                     for a, b in zip(res[r][p], loc[p])]
            figs[f"{r}_vs_local_same_pass"] = _ratio_stats(pairs)
            over = [a["driver_wall_ms"] - b["driver_wall_ms"] for p in range(args.passes)
                    for a, b in zip(res[r][p], loc[p])]
            figs[f"{r}_overhead_per_job_ms_median"] = statistics.median(over)
            own = [a["farm_overhead_ms"] for p in range(args.passes) for a in res[r][p]
                   if a["farm_overhead_ms"] is not None]
            if own:
                figs[f"{r}_own_overhead_per_job_ms_median"] = statistics.median(own)
        figs["local_job_wall_ms_median"] = statistics.median(
            a["driver_wall_ms"] for p in loc for a in p)
        out["figures"] = figs
    finally:
        stack.close()
        if sshd is not None:
            sshd.close()
        shutil.rmtree(work, ignore_errors=True)

    print(f"device {out['device']}, ort-cpu (onnxruntime {out['runtime_version']}), "
          f"{out['date']}")
    for name, s in out["same_rows"].items():
        print(f"same small build, {name} vs local: {s['rows']} rows vs {s['local_rows']}; "
              f"same configs {s['same_configs']}, same fingerprints {s['same_fingerprints']}")
    print("build minutes: " + ", ".join(f"{k} {v:.2f}" for k, v in out["build_minutes"].items()))
    k = out["killed_actor"]
    print(f"killed actor: {k['actors_killed']} killed; {k['rows']} rows, {k['lost']} lost, "
          f"{k['duplicated']} duplicated")
    for key, v in out["figures"].items():
        if isinstance(v, dict):
            print(f"{key}: n {v['n']}, median ratio {v['median_ratio']:.4f}, within ±5 % "
                  f"{100 * v['within_5']:.1f} %, within ±10 % {100 * v['within_10']:.1f} %, "
                  f"median |dev| {100 * v['median_abs_dev']:.2f} %")
        elif v is not None:
            print(f"{key}: {v:.1f}")
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(out, indent=1, default=str))
    print(f"wrote {args.json}")


if __name__ == "__main__":
    main()

"""Measure the kernel configurations where the zoo spends its time, into a device's own
dataset: the exact kernels of zoo variants of a seed of their own (13000; not seed 0,
whose variants the in-model calibration measures whole: their kernels in the training
rows would let that fit see near-exact kernel sums; never a development or reported
set), heaviest first, that the dataset has not measured.

The prior samples each channel field from its own histogram, so the corners where the
big models live are thin: mnn-cpu@epyc-zen4-avx512-2c held no 3x3 convolution with more
than 474 input channels at 28x28, and its regressor put a VGG's 920-channel 28x28
convolution at 94 ms where it measures 49 ms alone (128 against 238 GFLOP/s). These
rows fill such corners with configurations real networks use, in the order
:func:`nnmeter.predictors.transfer.plan_configs` gives (each kernel type's share of the
zoo's predicted time), appended as they are measured (``origin: "zoo"``; a stopped run
loses nothing and the next continues).

Usage:
  flock /tmp/nnmeter-cpu.lock python experiments/zoo_rows.py --backend mnn-cpu \
      [--kernels conv-bn-relu,conv-relu] [--limit 300] [--minutes 8] [--variants 3]
"""

from __future__ import annotations

import argparse
import time

#: the zoo seed of these rows (experiments/protocol.json lists every seed's use)
SEED = 13000


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--backend", required=True)
    ap.add_argument("--kernels", default=None,
                    help="only these kernel types (comma-separated; default: every type)")
    ap.add_argument("--limit", type=int, default=300, help="most new configurations")
    ap.add_argument("--minutes", type=float, default=8.0, help="stop measuring after this")
    ap.add_argument("--variants", type=int, default=3, help="zoo variants per family")
    args = ap.parse_args()

    from tqdm import tqdm

    from nnmeter.backends import Profiler
    from nnmeter.builder import measured_keys, profile_configs
    from nnmeter.devices.datasets import own_dataset_dir
    from nnmeter.predictors import load_predictor
    from nnmeter.predictors.dataset import KernelDataset
    from nnmeter.predictors.transfer import plan_configs
    from nnmeter.sampling.prior import config_key

    ds_dir = own_dataset_dir(args.backend)
    ds = KernelDataset(ds_dir, args.backend)
    if ds.meta() is None:
        raise SystemExit(f"{ds_dir} holds no build of {args.backend}; run `nnmeter build -b "
                         f"{args.backend}` first")
    wanted = set(args.kernels.split(",")) if args.kernels else None
    pred = load_predictor(args.backend, dataset=ds_dir.name)
    done = measured_keys(ds)
    plan = plan_configs(pred, ds_dir, args.backend, limit=100_000, n_per_family=args.variants,
                        seed=SEED)
    todo = [(t, c) for t, c, why in plan if why == "zoo" and (t, config_key(c)) not in done
            and (wanted is None or t in wanted)][:args.limit]
    print(f"{ds_dir.name}: {len(todo)} zoo configurations not measured yet "
          f"({len(plan)} planned over {len({t for t, _, _ in plan})} kernel types)")
    deadline = time.monotonic() + 60 * args.minutes
    measured: dict[str, int] = {}
    with ds.writer_lock("zoo rows"), Profiler(args.backend) as prof:
        for t, cfg in tqdm(todo, desc="zoo configurations", unit="cfg"):
            if time.monotonic() >= deadline:
                break
            got = profile_configs(t, [cfg], "zoo", profiler=prof, dataset=ds,
                                  deadline=deadline)
            measured[t] = measured.get(t, 0) + len(got)
    print(f"measured {sum(measured.values())} of {len(todo)}: "
          + ", ".join(f"{t} {n}" for t, n in sorted(measured.items())))


if __name__ == "__main__":
    main()

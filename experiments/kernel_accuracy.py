"""Kernel-level accuracy on held-out configurations, per kernel type and per round.

Usage: python experiments/kernel_accuracy.py [--backend ort-cpu ...] [--json out.json]

Two parts, both from the datasets on disk (no new measurements):
1. the builder's round log: test-split ±10 % accuracy after each sampling round;
2. a fresh evaluation: train on the train+val splits of each type, report ±5/±10 %
   accuracy, MAPE on the test split (configs the sampler never used), for the random
   forest (log time per unit work, the default), the plain log-latency forest and
   LightGBM; and "shipped": the regressor and data source the predictor really uses
   for the type (``predictor.json``: LightGBM or the forest, trained on the type's own
   rows or pooled with its family's, e.g. every ``conv-*`` row), trained the same way
   without the test rows; and "predictor": the whole predictor the way it works, trained
   without any type's test configs (``train_predictor(keep=...)``), predicting each test
   config's single-kernel model as a model (overhead, kernel, layout reorders) plus the
   chain excess that training removed from the rows. "shipped" scores the regressor
   against the raw single-kernel times; "predictor" also scores the corrections.
Next to it, the noise floor of any accuracy figure: the median relative spread between
the protocol's rounds of the stored rows, and, with ``--remeasure N`` (run it under the
measurement lock), the share of up to N test configurations per type whose fresh
measurement (a new worker process, minutes or hours later) repeats the stored one
within ±10 % / ±5 %. ``--repeat-from JSON`` reuses the repeatability columns of an
earlier ``--remeasure`` run.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--backend", nargs="*", default=None)
    ap.add_argument("--json", default="experiments/results/kernel_accuracy.json")
    ap.add_argument("--remeasure", type=int, default=0, metavar="N",
                    help="re-measure up to N test configs per type for repeatability")
    ap.add_argument("--repeat-from", default=None, metavar="JSON",
                    help="take the repeatability columns from an earlier --remeasure run's "
                         "JSON output instead of measuring again")
    args = ap.parse_args()
    earlier = json.loads(Path(args.repeat_from).read_text()) if args.repeat_from else {}
    from nnmeter.evaluate import evaluate
    from nnmeter.kernels import KERNEL_TYPES
    from nnmeter.predictors import available_predictors
    from nnmeter.devices.datasets import kernel_dataset_for
    from nnmeter.predictors.dataset import KernelDataset
    from nnmeter.predictors.regressors import make_regressor
    from nnmeter.predictors.train import load_kernel_data, work_feature
    from nnmeter.predictors.kernel_data import family_of as _family_of
    from nnmeter.predictors.train import CHOICE_FILE
    from nnmeter.sampling.adaptive import split_of

    out = {}
    for b in args.backend or available_predictors():
        ds = KernelDataset(kernel_dataset_for(b), b)
        res = {"rounds": [r for r in ds.rounds() if r.get("round", 0) > 0], "types": {}}
        print(f"\n== {b} ==")
        choice_path = ds.directory / CHOICE_FILE
        choice = json.loads(choice_path.read_text()) if choice_path.exists() else {}
        regressor_of = choice.get("regressor", {})
        source_of = choice.get("source", {})
        print(f"{'kernel type':22s} {'n':>5s} {'test':>5s} {'rf ±10%':>8s} {'rf ±5%':>7s} "
              f"{'MAPE%':>6s} {'rf-raw':>7s} {'lgbm':>6s} {'shipped ±10/±5%':>22s} "
              f"{'predictor':>10s} {'spread%':>8s} {'repeat ±10/±5%':>15s}")
        # the whole predictor, trained without any type's test configs
        from nnmeter.fusion import load_rules
        from nnmeter.predictors.boundary import boundary_elements
        from nnmeter.predictors.chain import chain_excess_ms, read_chain, restored_excess
        from nnmeter.predictors.train import train_predictor

        def held(t: str, c, o: str) -> bool:
            return split_of(KERNEL_TYPES.get(t).config_to_dict(c), o) != "test"

        whole = train_predictor(b, ds.directory, load_rules(b), keep=held)
        chain = read_chain(ds) if whole.meta["settings"].get("chain_correction") else None
        # every type's rows and split, for the family-pooled "shipped" regressors
        loaded = {}
        for t in ds.kernel_types():
            d = load_kernel_data(ds, t)
            if d is None:
                continue
            kt = KERNEL_TYPES.get(t)
            loaded[t] = (d, kt, np.array([split_of(kt.config_to_dict(c), o)
                                          for c, o in zip(d.configs, d.origins)]))
        prof = None
        if args.remeasure:
            from nnmeter.backends import Profiler
            from nnmeter.builder import DEFAULT_PROTOCOL

            prof = Profiler(b)
        for t, (d, kt, split) in loaded.items():
            if len(d) < 20:
                continue
            tr, te = split != "test", split == "test"
            if te.sum() < 3:
                continue
            row = {"n": int(len(d)), "n_test": int(te.sum())}
            for name, reg in (
                ("rf", make_regressor(t, "rf", norm_feature=work_feature(kt))),
                ("rf_raw", make_regressor(t, "rf")),
                ("lgbm", make_regressor(t, "lgbm", norm_feature=work_feature(kt))),
            ):
                pred = reg.fit(d.X[tr], d.y[tr]).predict(d.X[te])
                row[name] = evaluate(pred, d.y[te]).as_dict()
            # as the predictor trains it: the regressor and the data source (own rows, or
            # pooled with the family's other types) that choose_regressors picked,
            # trained on every non-test row
            fam = _family_of(t)
            if source_of.get(t) == "family":
                members = [m for m, (md, _, _) in loaded.items()
                           if _family_of(m) == fam and md.X.shape[1] == d.X.shape[1]]
                kind = fam
            else:
                members, kind = [t], t
            X = np.vstack([loaded[m][0].X[loaded[m][2] != "test"] for m in members])
            y = np.concatenate([loaded[m][0].y[loaded[m][2] != "test"] for m in members])
            reg = make_regressor(kind, regressor_of.get(kind, "rf"),
                                 norm_feature=work_feature(kt))
            row["shipped"] = evaluate(reg.fit(X, y).predict(d.X[te]), d.y[te]).as_dict()
            row["shipped_as"] = f"{regressor_of.get(kind, 'rf')}" + (
                f" on {fam}-*" if source_of.get(t) == "family" else "")
            alone = []
            for i in np.flatnonzero(te):
                c = d.configs[i]
                rep = whole.predict(kt.build_graph(c), check_device=False)
                ex = chain_excess_ms(chain, fam, sum(boundary_elements(kt, c)))
                alone.append(rep.total_ms + restored_excess(
                    sum(r.predicted_ms for r in rep.rows), ex))
            row["predictor"] = evaluate(np.array(alone), d.y[te]).as_dict()
            spreads = [r.get("spread") for r in ds.rows(t) if r.get("spread") is not None]
            row["median_spread_percent"] = 100 * float(np.median(spreads)) if spreads else None
            rep = ""
            if prof is not None:
                idx = np.flatnonzero(te)[:args.remeasure]
                pairs = []
                for i in idx:
                    m = prof.measure(kt.build_graph(d.configs[i]), on_error="record",
                                     **DEFAULT_PROTOCOL)
                    if m.ok:
                        pairs.append((m.latency_ms, float(d.y[i])))
                if pairs:
                    a = np.array(pairs)
                    r = np.abs(a[:, 0] - a[:, 1]) / a[:, 1]
                    row["repeat_acc10"] = float(np.mean(r <= 0.10))
                    row["repeat_acc5"] = float(np.mean(r <= 0.05))
                    row["repeat_n"] = len(pairs)
                    rep = f"{100*row['repeat_acc10']:7.0f}/{100*row['repeat_acc5']:.0f} (n={len(pairs)})"
            elif earlier.get(b, {}).get("types", {}).get(t, {}).get("repeat_n"):
                e = earlier[b]["types"][t]
                for k in ("repeat_acc10", "repeat_acc5", "repeat_n"):
                    row[k] = e[k]
                rep = f"{100*row['repeat_acc10']:7.0f}/{100*row['repeat_acc5']:.0f} (n={row['repeat_n']})"
            res["types"][t] = row
            print(f"{t:22s} {row['n']:5d} {row['n_test']:5d} {100*row['rf']['acc10']:8.1f} "
                  f"{100*row['rf']['acc5']:7.1f} {row['rf']['mape_percent']:6.1f} "
                  f"{100*row['rf_raw']['acc10']:7.1f} {100*row['lgbm']['acc10']:6.1f} "
                  f"{100*row['shipped']['acc10']:5.1f}/{100*row['shipped']['acc5']:4.1f} "
                  f"{row['shipped_as']:>11s} "
                  f"{100*row['predictor']['acc10']:5.1f}/{100*row['predictor']['acc5']:4.1f} "
                  f"{row['median_spread_percent'] or float('nan'):8.2f} {rep:>15s}")
        if prof is not None:
            prof.close()
        out[b] = res
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(out, indent=1, default=str))


if __name__ == "__main__":
    main()

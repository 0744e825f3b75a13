"""Would a model-level composition correction help? (It did not; kept as evidence.)

Fits log(measured / predicted) = X b by ridge on a *separate* set of zoo variants (seed
2000: datasets/models/ort-cpu@<device>/seed2000.jsonl, measured once each), with X from
the prediction itself (log predicted ms, log weight MB, log bytes MB, log kernel count),
and scores the corrected predictor on the test set (seed 1000: .../seed1000.jsonl).
Prints 5-fold CV accuracy on the calibration set and test accuracy for each feature set.

Usage: python experiments/composition_fit.py
"""
import json, sys, numpy as np
from nnmeter import zoo
from nnmeter.predictors import load_predictor
from nnmeter.evaluate import evaluate
from nnmeter.devices.datasets import model_set_path
backend = "ort-cpu"
pred = load_predictor(backend)

def load(path):
    by = {}
    for l in open(path):
        r = json.loads(l)
        if r.get("ok") and r.get("latency_ms"):
            by.setdefault(r["variant"], {"fam": r["family"], "lat": []})["lat"].append(r["latency_ms"])
    return by

def feats(name):
    g = zoo.get_variant(name).build(); rep = pred.predict(g, check_device=False)
    params = bts = 0.0
    for row in rep.rows:
        kt = __import__("nnmeter.kernels", fromlist=["KERNEL_TYPES"]).KERNEL_TYPES.get(row.type)
        fn = kt.feature_names
        if "params" in fn: params += row.features[fn.index("params")]
        if "bytes" in fn: bts += row.features[fn.index("bytes")]
    return rep.total_ms, np.array([1.0, np.log(rep.total_ms), np.log(params * 4 / 1e6 + 0.01), np.log(bts / 1e6 + 0.01), np.log(len(rep.rows))])

cal = load(model_set_path(backend, 2000)); test = load(model_set_path(backend, 1000))
C = [(feats(n), min(e["lat"]), e["fam"]) for n, e in sorted(cal.items())]
T = [(feats(n), min(e["lat"]), e["fam"]) for n, e in sorted(test.items())]
print("calibration models", len(C), "test models", len(T))
sets = {"none": [], "log pred": [0, 1], "+weights": [0, 1, 2], "+bytes": [0, 1, 3], "+weights+bytes": [0, 1, 2, 3], "+all": [0, 1, 2, 3, 4]}
def fit(X, y, lam=1.0):
    A = X.T @ X + lam * np.diag([0] + [1] * (X.shape[1] - 1)); return np.linalg.solve(A, X.T @ y)
for name, cols in sets.items():
    if not cols:
        pt = np.array([p for (p, _), t, f in T]); tt = np.array([t for _, t, _ in T])
        m = evaluate(pt, tt)
        pc = np.array([p for (p, _), t, f in C]); tc = np.array([t for _, t, _ in C])
        mc = evaluate(pc, tc)
        print(f"{name:16s} calib acc10 {mc.acc10:.3f} (uncorrected) | test acc10 {m.acc10:.3f} "
              f"acc5 {m.acc5:.3f} mape {m.mape_percent:.2f}")
        continue
    Xc = np.array([x[cols] for (p, x), t, f in C]); yc = np.array([np.log(t / p) for (p, x), t, f in C])
    # 5-fold CV on the calibration set
    idx = np.arange(len(C)) % 5; cvp = np.empty(len(C))
    for k in range(5):
        b = fit(Xc[idx != k], yc[idx != k]); cvp[idx == k] = Xc[idx == k] @ b
    pc = np.array([p for (p, _), _, _ in C]); tc = np.array([t for _, t, _ in C])
    mc = evaluate(pc * np.exp(cvp), tc)
    b = fit(Xc, yc)
    Xt = np.array([x[cols] for (p, x), t, f in T]); pt = np.array([p for (p, _), _, _ in T]); tt = np.array([t for _, t, _ in T])
    m = evaluate(pt * np.exp(Xt @ b), tt)
    print(f"{name:16s} calib-CV acc10 {mc.acc10:.3f} | test acc10 {m.acc10:.3f} acc5 {m.acc5:.3f} mape {m.mape_percent:.2f} coef {np.round(b,3)}")

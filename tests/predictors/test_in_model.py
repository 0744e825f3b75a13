"""The in-model term: what a kernel of each group costs inside a model per MB it moves,
fitted after the regressors on whole models measured on the device."""

from __future__ import annotations

import json
import time

import numpy as np
import pytest

from nnmeter.backends.base import DeviceInfo, Measurement
from nnmeter.builder import build_predictor
from nnmeter.fusion.rules import FusionRules
from nnmeter.predictors import clear_memo, load_predictor
from nnmeter.predictors.composition import Composition
from nnmeter.predictors.dataset import KernelDataset, kernel_dataset_dir
from nnmeter.predictors.in_model import (GROUPS, IN_MODEL_FILE, calibration_models,
                                         fit_per_mb, group_of, kernel_group,
                                         measure_in_model,
                                         planned_in_model_work)
from nnmeter.predictors.terms import TERMS
from nnmeter.predictors.terms.in_model import InModelTerm
from nnmeter.zoo import get_variant

RULES = FusionRules.from_decisions("ort-cpu", pairs={("conv", "bn"): True, ("bn", "relu"): True})


class LinearProfiler:
    """A fake device: time = a linear cost of the graph plus an overhead."""

    def __init__(self, scale: float = 1.0):
        self.device = DeviceInfo("fake cpu", 2, "onnxruntime", "1", {"threads": 1}, "x86_64",
                                 vendor="Fake", family=1, model=1, stepping=1,
                                 isa=("avx2", "fma"), caches={"L3": 1 << 25}, name="fake")
        self.scale, self.calls = scale, 0

    def close(self):
        """No worker process to stop."""

    def measure(self, graph, on_error="record", **protocol):
        self.calls += 1
        c = graph.cost()
        ms = 0.01 + self.scale * (2e-8 * c.flops + 1e-7 * c.memory_bytes)
        return Measurement(ms, ms, ms, 0.0, 0.0, 1, 1, self.device)


PRIOR = {
    "conv-bn-relu": [{"h": h, "w": h, "cin": c, "cout": c, "kernel": k, "stride": 1,
                      "groups": 1, "pads": None}
                     for h in (7, 14, 28, 56) for c in range(8, 200, 24) for k in (1, 3)],
    "relu": [{"h": h, "w": h, "cin": c} for h in (7, 14, 28, 56) for c in (16, 32, 64, 128)],
}


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """A data root with one small dataset (``ort-cpu@fake``) and its rules."""
    mp = pytest.MonkeyPatch()
    root = tmp_path_factory.mktemp("in_model")
    (root / "rules").mkdir()
    RULES.to_json(root / "rules" / "ort-cpu.json")
    mp.setenv("NNMETER_FUSION_RULES_DIR", str(root / "rules"))
    mp.setenv("NNMETER_CACHE", str(root / "cache"))
    build_predictor("ort-cpu", dataset="ort-cpu@fake", budget_minutes=5, root=root,
                    profiler=LinearProfiler(), rules=RULES, prior_configs=PRIOR,
                    progress=False, train=False, max_samples_per_type=60, rounds=0,
                    initial_fraction=1.0, kernels=list(PRIOR))
    yield root
    mp.undo()
    clear_memo()


def test_groups_cover_every_kernel_type():
    from nnmeter.kernels import KERNEL_TYPES

    assert group_of("conv-bn-relu", 3) == "conv" and group_of("gconv-bn", 1) == "conv"
    assert group_of("conv-bn-relu", 1) == "pointwise"
    assert group_of("dwconv-bn-relu6") == "dwconv" and group_of("fc-relu") == "fc"
    assert {group_of(t) for t in KERNEL_TYPES.names()} <= set(GROUPS)


def test_fit_per_mb_recovers_known_coefficients_and_ridge_pulls_to_zero():
    rng = np.random.default_rng(0)
    B = rng.uniform(1.0, 20.0, size=(30, 3))
    B[:, 2] = 0.0  # a group no model moves bytes in gets 0
    base = rng.uniform(0.5, 5.0, size=30)
    measured = base + B @ np.array([0.03, 0.01, 5.0])
    b = fit_per_mb(B, base, measured, ridge=0.0)
    assert b[0] == pytest.approx(0.03, rel=1e-3) and b[1] == pytest.approx(0.01, rel=1e-3)
    assert b[2] == 0.0
    pulled = fit_per_mb(B, base, measured, ridge=1e4)
    assert 0.0 < pulled[0] < 0.03 and 0.0 < pulled[1] < 0.01
    bounded = fit_per_mb(B, base, base + 10 * B.sum(axis=1), ridge=0.0)
    assert bounded[0] == pytest.approx(0.2) and bounded[1] == pytest.approx(0.2)
    with pytest.raises(ValueError, match="disagree"):
        fit_per_mb(B, base[:3], measured)
    with pytest.raises(ValueError, match="positive"):
        fit_per_mb(B, base, -measured)


def test_the_term_charges_its_groups_per_mb_and_round_trips_through_records():
    t = InModelTerm((("conv", 0.03), ("pointwise", 0.02), ("dwconv", 0.0), ("fc", -0.01),
                     ("other", 0.0)), 12)
    assert t.per_mb("conv-bn-relu", 3) == 0.03 and t.per_mb("fc") == -0.01
    assert t.per_mb("conv-bn-relu", 1) == 0.02 and t.per_mb("relu") == 0.0
    assert t.in_model_ms(1.0, 5e6, 0.03) == pytest.approx(1.15)
    assert t.in_model_ms(0.01, 5e6, -0.01) == pytest.approx(0.005)  # never below half
    back = Composition.from_records(json.loads(json.dumps(Composition((t,)).records())),
                                    TERMS)
    assert back.terms[0].per_mb("conv-bn", 3) == 0.03 and back.terms[0].models == 12
    assert InModelTerm.fit(None) is None  # fitted after the regressors, not in the pass


def test_calibration_models_are_light_seed_zero_variants_round_robin():
    models = calibration_models()
    fams = [m.family for m in models]
    assert len(set(fams)) >= 12 and all(m.seed == 0 for m in models)
    # round-robin: the first models are one of each family
    assert len(set(fams[:len(set(fams))])) == len(set(fams))
    from nnmeter.ir.cost import graph_cost

    assert all(graph_cost(m.build()).flops <= 8e9 for m in models)


def test_measuring_resumes_and_stops_at_its_deadline(world):
    d = kernel_dataset_dir("ort-cpu@fake", world)
    # a dataset without attention kernels cannot predict a transformer: CNN models only
    models = calibration_models(transformers=False)
    assert len(models) < len(calibration_models())
    assert not {m.family for m in models} & {"vit", "bert", "mobilevit"}
    prof = LinearProfiler()
    cut = measure_in_model("ort-cpu", d, profiler=prof, deadline=time.monotonic() - 1)
    assert prof.calls == 1 and cut["partial"] and cut["points_measured"] == 1
    assert planned_in_model_work("ort-cpu", d) == 5 * (len(models) - 1)
    prof2 = LinearProfiler()
    rec = measure_in_model("ort-cpu", d, profiler=prof2)
    assert prof2.calls == len(models) - 1  # the stored point is not redone
    assert not rec.get("partial") and len(rec["points"]) == len(models)
    assert {p["variant"] for p in rec["points"]} == {m.name for m in models}


def test_transformer_models_are_calibrated_where_attention_kernels_were_measured(tmp_path):
    from nnmeter.predictors.dataset import KernelDataset
    from nnmeter.predictors.in_model import wants_transformers

    ds = KernelDataset(tmp_path / "ort-cpu@x", "ort-cpu")
    ds.append("conv-bn-relu", {"config": {}, "latency_ms": 1.0})
    assert not wants_transformers(ds)
    ds.append("matmul", {"config": {}, "latency_ms": 1.0})
    assert wants_transformers(ds)


def test_a_predictor_fits_its_factors_on_the_measured_models(world):
    d = kernel_dataset_dir("ort-cpu@fake", world)
    ds = KernelDataset(d, "ort-cpu")
    plain = load_predictor("ort-cpu", dataset="ort-cpu@fake", root=world, use_cache=False)
    assert "in_model" not in plain.composition.names
    names = [m.name for m in calibration_models() if m.family in ("nasbench201", "resnet",
                                                                  "squeezenet")]
    graphs = [get_variant(n).build() for n in names]
    # inside a model this device pays 0.1 ms per MB a spatial convolution moves
    truth = []
    for g in graphs:
        r = plain.predict(g, check_device=False)
        mb = sum(k.kernel_type.cost(k.config).memory_bytes / 1e6 for k in plain.kernels(g)
                 if kernel_group(k) == "conv")
        truth.append(r.total_ms + 0.1 * mb)
    rec = {"backend_id": "ort-cpu", "fingerprint_id": ds.fingerprint_id,
           "points": [{"variant": n, "latency_ms": ms} for n, ms in zip(names, truth)]}
    (d / IN_MODEL_FILE).write_text(json.dumps(rec))
    try:
        fitted = load_predictor("ort-cpu", dataset="ort-cpu@fake", root=world)
        assert fitted.composition.names[-1] == "in_model"
        per_mb = fitted.meta["in_model"]["ms_per_mb"]
        # the ridge shrinks the coefficients towards 0 and spreads them over correlated
        # groups; what matters is that the models are predicted closer to their truth
        assert per_mb["conv"] > 0 and per_mb["dwconv"] == 0.0, per_mb
        errs = [abs(fitted.predict(g, check_device=False).total_ms / t - 1)
                for g, t in zip(graphs, truth)]
        plain_errs = [abs(plain.predict(g, check_device=False).total_ms / t - 1)
                      for g, t in zip(graphs, truth)]
        assert np.median(errs) < 0.8 * np.median(plain_errs)
        assert fitted.meta["in_model"]["median_error_after"] < \
            fitted.meta["in_model"]["median_error_before"]
        rep = fitted.predict(graphs[0], check_device=False)
        row = next(t for t in rep.terms if t.name == "in_model")
        assert row.kernel_ms > 0 and row.kernels > 0
        assert fitted.predict_many(graphs) == pytest.approx(
            [fitted.predict(g, check_device=False).total_ms for g in graphs], abs=1e-12)
        # the cached predictor reads the term back with the same factors
        clear_memo()
        again = load_predictor("ort-cpu", dataset="ort-cpu@fake", root=world)
        assert again.predict(graphs[0], check_device=False).total_ms == \
            pytest.approx(rep.total_ms, abs=1e-12)
    finally:
        (d / IN_MODEL_FILE).unlink()
        clear_memo()


def test_a_record_without_points_is_a_clear_error(world):
    from nnmeter.errors import DatasetError

    d = kernel_dataset_dir("ort-cpu@fake", world)
    ds = KernelDataset(d, "ort-cpu")
    (d / IN_MODEL_FILE).write_text(json.dumps({"fingerprint_id": ds.fingerprint_id,
                                               "points": []}))
    try:
        with pytest.raises(DatasetError, match="in_model.json holds no 'points'"):
            load_predictor("ort-cpu", dataset="ort-cpu@fake", root=world, use_cache=False)
    finally:
        (d / IN_MODEL_FILE).unlink()


def test_attention_kernels_have_a_group_and_transformers_are_calibration_models():
    from nnmeter.predictors.in_model import GROUPS, calibration_models, group_of

    assert "attention" in GROUPS
    assert {group_of(t) for t in ("matmul", "matmul-scale", "softmax", "layernorm",
                                  "add-layernorm", "transpose", "split-last")} == {"attention"}
    assert group_of("fc") == "fc" and group_of("gelu") == "other"
    families = {v.family for v in calibration_models()}
    assert {"vit", "bert", "mobilevit"} <= families and "resnet" in families


def test_fully_connected_layers_over_many_rows_are_the_gemm_group():
    """A transformer's token projections (fc over rows > 1) get their own coefficient; a
    CNN classifier's batch-1 fc keeps ``fc``; a term fitted before ``gemm`` existed
    gives them the ``fc`` coefficient."""
    from nnmeter.ir import GraphBuilder
    from nnmeter.partition import partition

    b = GraphBuilder("tokens", (1, 16, 32))
    y = b.fc(b.x, 64, name="proj")
    g = b.build([b.fc(b.gap(b.reshape(y, (1, 64, 4, 4)), keepdims=False), 10, name="head")])
    by_node = {k.nodes[0]: kernel_group(k) for k in partition(g, RULES) if k.type == "fc"}
    assert by_node == {"proj": "gemm", "head": "fc"}
    old = InModelTerm((("fc", 0.03), ("conv", 0.0)), 10)
    assert old.per_mb("fc", rows=16) == old.per_mb("fc", rows=1) == 0.03
    new = InModelTerm((("fc", 0.03), ("gemm", 0.01)), 10)
    assert new.per_mb("fc", rows=16) == 0.01 and new.per_mb("fc", rows=1) == 0.03


def test_another_pass_keeps_every_models_fastest_pass(world):
    """add_in_model_pass measures each model again and keeps the fastest of its passes;
    the record on disk holds every pass, and a missing record is a clear error."""
    from nnmeter.errors import DatasetError
    from nnmeter.predictors.in_model import add_in_model_pass, passes_taken

    d = kernel_dataset_dir("ort-cpu@fake", world)
    ds = KernelDataset(d, "ort-cpu")
    with pytest.raises(DatasetError, match="in_model.json"):
        add_in_model_pass("ort-cpu", d, profiler=LinearProfiler())
    assert passes_taken("ort-cpu", d) == 0
    names = [m.name for m in calibration_models() if m.family == "nasbench201"][:2]
    # the first model was measured slow once, the second fast
    rec = {"backend_id": "ort-cpu", "fingerprint_id": ds.fingerprint_id,
           "created": "2026-12-03T10:00:00",
           "points": [{"variant": names[0], "latency_ms": 50.0},
                      {"variant": names[1], "latency_ms": 1e-4}]}
    (d / IN_MODEL_FILE).write_text(json.dumps(rec))
    try:
        prof = LinearProfiler()
        got = add_in_model_pass("ort-cpu", d, profiler=prof)
        assert prof.calls == 2
        on_disk = json.loads((d / IN_MODEL_FILE).read_text())
        assert on_disk["points"] == got["points"]
        slow, fast = on_disk["points"]
        new = [prof.measure(get_variant(n).build()).latency_ms for n in names]
        assert slow["passes"] == [50.0, new[0]] and slow["latency_ms"] == new[0] < 50.0
        assert fast["passes"] == [1e-4, new[1]] and fast["latency_ms"] == 1e-4
        assert slow["passed_at"][0] == "2026-12-03T10:00:00" and len(slow["passed_at"]) == 2
        # a third pass appends again
        add_in_model_pass("ort-cpu", d, profiler=prof)
        assert len(json.loads((d / IN_MODEL_FILE).read_text())["points"][0]["passes"]) == 3
        assert passes_taken("ort-cpu", d) == 3
        # past its deadline a pass measures nothing, and the record keeps what it had
        calls = prof.calls
        add_in_model_pass("ort-cpu", d, profiler=prof, deadline=time.monotonic() - 1)
        assert prof.calls == calls and passes_taken("ort-cpu", d) == 3
        # with below, only the models with fewer passes (a model added later)
        on_disk = json.loads((d / IN_MODEL_FILE).read_text())
        on_disk["points"][1] = {"variant": names[1], "latency_ms": 1e-4, "passes": [1e-4]}
        (d / IN_MODEL_FILE).write_text(json.dumps(on_disk))
        add_in_model_pass("ort-cpu", d, profiler=prof, below=2)
        assert prof.calls == calls + 1
        assert [len(p["passes"]) for p in json.loads((d / IN_MODEL_FILE).read_text())
                ["points"]] == [3, 2]
    finally:
        (d / IN_MODEL_FILE).unlink()
        clear_memo()


def test_the_pull_is_chosen_by_leaving_one_model_out():
    from nnmeter.predictors.in_model import RIDGES, choose_ridge

    rng = np.random.default_rng(0)
    B = rng.uniform(1, 20, size=(12, 2))
    base = rng.uniform(1, 5, size=12)
    # a device that pays 0.05 ms per MB of the first group: the weakest pull fits it
    paid = base + 0.05 * B[:, 0]
    ridge, scores = choose_ridge(B, base, paid)
    assert ridge == RIDGES[0] and set(scores) == set(RIDGES)
    assert scores[RIDGES[0]] < scores[RIDGES[-1]]
    # a device whose models take what their kernels say: every pull scores alike, and
    # the strongest is kept
    ridge, scores = choose_ridge(B, base, base.copy())
    assert ridge == RIDGES[-1] and max(scores.values()) < 1e-6
    # too few models to leave one out: the default pull, no scores
    assert choose_ridge(B[:2], base[:2], paid[:2]) == (RIDGES[0], {})


class _Report:
    def __init__(self, total_ms):
        self.total_ms = total_ms


class _FetchPredictor:
    """A stand-in predictor: each "graph" is (hot ms, fetch ms); a model's total is its
    hot time plus the refetch term's share of its fetch."""

    def __init__(self, term):
        self.composition = Composition((term,))
        self.meta = {}

    def predict(self, graph, check_device=True):
        t = self.composition.get("weight_refetch")
        share = t.gemm_fetch if t.gemm_refetch else 0.0
        return _Report(graph[0] + share * graph[1])


def test_a_devices_share_of_the_matrix_product_fetch_is_fitted_on_whole_models():
    from nnmeter.predictors.terms.in_model import MIN_GEMM_MODELS, fit_gemm_fetch
    from nnmeter.predictors.terms.refetch import RefetchTerm

    term = RefetchTerm(2e7, 32e6, refetch=False, gemm_refetch=True)
    graphs = [(1.0, 0.5), (2.0, 0.4), (4.0, 2.0), (0.5, 0.3), (3.0, 1.5), (1.0, 0.0)]
    rows = [(g, g[0] + 0.4 * g[1]) for g in graphs]   # this device shows 0.4 of it
    fitted = fit_gemm_fetch(_FetchPredictor(term), rows)
    assert fitted.composition.get("weight_refetch").gemm_fetch == pytest.approx(0.4)
    assert fitted.meta["gemm_fetch"]["models"] == 5      # the last one has no fetch
    assert fitted.meta["gemm_fetch"]["median_error_after"] < \
        fitted.meta["gemm_fetch"]["median_error_before"]
    # a backend whose table says "no fetch on top" gets one where whole models show it
    off = fit_gemm_fetch(_FetchPredictor(RefetchTerm(2e7, 32e6, refetch=False)), rows)
    assert off.composition.get("weight_refetch").gemm_refetch
    # too few models the share moves: unchanged, nothing recorded
    few = fit_gemm_fetch(_FetchPredictor(term), rows[:MIN_GEMM_MODELS - 1])
    assert few.composition.get("weight_refetch") == term and "gemm_fetch" not in few.meta


def test_a_kernel_table_floors_each_kernel_and_keeps_models_apart():
    from nnmeter.predictors.in_model import KernelTable

    # two models: kernels (1 ms, 2 MB) and (1 ms, 4 MB) in the first, one (2 ms, 0 MB)
    # in the second, which also holds 0.5 ms of once-per-model terms
    t = KernelTable(np.array([[2.0, 1.0], [4.0, 1.0], [0.0, 1.0]]), np.array([1.0, 1.0, 2.0]),
                    np.array([0, 0, 1]), np.array([0.0, 0.5]))
    assert t.totals(np.array([0.1, 0.0])).tolist() == pytest.approx([2.6, 2.5])
    # a cost that would take a kernel below half its time stops there, kernel by kernel
    assert t.totals(np.array([-1.0, 0.0])).tolist() == pytest.approx([1.0, 2.5])
    assert t.totals(np.array([0.0, 0.01])).tolist() == pytest.approx([2.02, 2.51])
    second = t.take(np.array([False, True]))
    assert second.models == 1 and second.totals(np.zeros(2)).tolist() == [2.5]
    assert t.columns(slice(0, 1)).X.shape == (3, 1)
    with pytest.raises(ValueError, match="positive"):
        KernelTable(np.zeros((1, 1)), np.array([0.0]), np.array([0]), np.array([0.0]))
    with pytest.raises(ValueError, match="disagree"):
        KernelTable(np.zeros((2, 1)), np.array([1.0]), np.array([0]), np.array([0.0]))


def test_a_per_kernel_cost_is_recovered_beside_the_per_mb_one():
    from nnmeter.predictors.in_model import KernelTable, choose_ridge, per_kernel_columns

    rng = np.random.default_rng(1)
    groups, X, ms, model, measured = 2, [], [], [], []
    truth = np.array([0.02, 0.0, 0.04, 0.01])  # ms per MB, then ms per kernel
    for m in range(40):
        total = 0.1
        for _ in range(int(rng.integers(5, 40))):
            g, mb, t = int(rng.integers(0, groups)), rng.uniform(0.1, 3.0), rng.uniform(0.01, 1.0)
            x = np.zeros(2 * groups)
            x[g], x[groups + g] = mb, 1.0
            X.append(x), ms.append(t), model.append(m)
            total += t + x @ truth
        measured.append(total)
    table = KernelTable(np.array(X), np.array(ms), np.array(model), np.full(40, 0.1))
    cols = per_kernel_columns(groups)
    coef = fit_per_mb(table, None, np.array(measured), ridge=0.0, **cols)
    assert coef == pytest.approx(truth.tolist(), abs=2e-4)
    # leaving one model out, the form with the per-kernel columns predicts far better
    _, with_k = choose_ridge(table, None, np.array(measured), ridges=(1e-6,), **cols)
    _, mb_only = choose_ridge(table.columns(slice(0, groups)), None, np.array(measured),
                              ridges=(1e-6,))
    assert with_k[1e-6] < 0.1 * mb_only[1e-6]


def _calibration_world(world, families, variants):
    """(dataset dir, dataset, predictor without the term, calibration model names and
    graphs of ``families``) of the fake world."""
    d = kernel_dataset_dir("ort-cpu@fake", world)
    ds = KernelDataset(d, "ort-cpu")
    plain = load_predictor("ort-cpu", dataset="ort-cpu@fake", root=world, use_cache=False)
    names = [m.name for m in calibration_models(variants=variants) if m.family in families]
    return d, ds, plain, names, [get_variant(n).build() for n in names]


def test_a_predictor_takes_the_per_kernel_form_only_where_models_show_it(world):
    """A device that pays a fixed cost per kernel inside a model gets ``ms_per_kernel``;
    one whose models take what their kernels say keeps the per-megabyte form alone."""
    d, ds, plain, names, graphs = _calibration_world(
        world, ("nasbench201", "resnet", "squeezenet", "mobilenetv2"), 6)

    def record(extra):
        truth = [plain.predict(g, check_device=False).total_ms + extra(plain.kernels(g))
                 for g in graphs]
        rec = {"backend_id": "ort-cpu", "fingerprint_id": ds.fingerprint_id,
               "points": [{"variant": n, "latency_ms": ms} for n, ms in zip(names, truth)]}
        (d / IN_MODEL_FILE).write_text(json.dumps(rec))
        clear_memo()
        return truth

    try:
        # 0.2 ms more for every spatial convolution, whatever it moves
        truth = record(lambda ks: 0.2 * sum(kernel_group(k) == "conv" for k in ks))
        fitted = load_predictor("ort-cpu", dataset="ort-cpu@fake", root=world, use_cache=False)
        meta = fitted.meta["in_model"]
        # a few models whose groups' counts go together: the ridge and the correlated
        # groups share the cost, but the per-kernel form is taken and predicts better
        assert meta["ms_per_kernel"]["conv"] > 0, meta
        assert min(meta["per_kernel_loo_rms_log"].values()) < \
            0.5 * min(meta["ridge_loo_rms_log"].values())
        got = np.array([fitted.predict(g, check_device=False).total_ms for g in graphs])
        plain_got = np.array([plain.predict(g, check_device=False).total_ms for g in graphs])
        rms = lambda p: float(np.sqrt(np.mean(np.log(p / np.array(truth)) ** 2)))  # noqa: E731
        assert rms(got) < 0.5 * rms(plain_got)
        row = next(t for t in fitted.predict(graphs[0], check_device=False).terms
                   if t.name == "in_model")
        assert row.kernels > 0
        # models that take what their kernels say: the per-megabyte form alone, near 0
        record(lambda ks: 0.0)
        fitted = load_predictor("ort-cpu", dataset="ort-cpu@fake", root=world, use_cache=False)
        assert fitted.meta["in_model"]["ms_per_kernel"] == {}
        assert max(map(abs, fitted.meta["in_model"]["ms_per_mb"].values())) < 1e-3
    finally:
        (d / IN_MODEL_FILE).unlink()
        clear_memo()


def test_more_calibration_models_are_added_to_the_record(world):
    """extend_in_model measures the larger set's models the record lacks, after the
    build's own, and keeps what was there; no record is a clear error."""
    from nnmeter.errors import DatasetError
    from nnmeter.predictors.in_model import VARIANTS, extend_in_model

    with pytest.raises(ValueError, match="at least 1"):
        calibration_models(variants=0)
    build_set = [m.name for m in calibration_models(transformers=False)]
    larger = [m.name for m in calibration_models(transformers=False, variants=VARIANTS + 1)]
    assert set(build_set) < set(larger)
    d = kernel_dataset_dir("ort-cpu@fake", world)
    ds = KernelDataset(d, "ort-cpu")
    with pytest.raises(DatasetError, match="in_model.json"):
        extend_in_model("ort-cpu", d, variants=4, profiler=LinearProfiler())
    rec = {"backend_id": "ort-cpu", "fingerprint_id": ds.fingerprint_id,
           "variants_per_family": VARIANTS,
           "points": [{"variant": n, "latency_ms": 1.0} for n in build_set]}
    (d / IN_MODEL_FILE).write_text(json.dumps(rec))
    try:
        # past its deadline nothing is measured, and the record does not claim the
        # larger set
        late = LinearProfiler()
        got = extend_in_model("ort-cpu", d, variants=VARIANTS + 1, profiler=late,
                              deadline=time.monotonic() - 1)
        assert late.calls == 0 and got["variants_per_family"] == VARIANTS
        assert len(got["points"]) == len(build_set)
        prof = LinearProfiler()
        got = extend_in_model("ort-cpu", d, variants=VARIANTS + 1, profiler=prof)
        assert prof.calls == len(larger) - len(build_set)
        on_disk = json.loads((d / IN_MODEL_FILE).read_text())
        assert on_disk == got and on_disk["variants_per_family"] == VARIANTS + 1
        assert [p["variant"] for p in on_disk["points"]][:len(build_set)] == build_set
        assert {p["variant"] for p in on_disk["points"]} == set(larger)
        assert all(p["latency_ms"] == 1.0 for p in on_disk["points"][:len(build_set)])
        added = on_disk["points"][len(build_set):]
        assert all(p["passes"] == [p["latency_ms"]] and p["latency_ms"] > 0 for p in added)
        # nothing left to add: nothing measured
        prof2 = LinearProfiler()
        extend_in_model("ort-cpu", d, variants=VARIANTS + 1, profiler=prof2)
        assert prof2.calls == 0
    finally:
        (d / IN_MODEL_FILE).unlink()
        clear_memo()


def test_an_unknown_op_is_charged_by_the_bytes_its_node_recorded(world):
    """A real model's op nnmeter has no semantics for is predicted by a fallback; the
    in-model term charges it by the bytes its node had (no single-kernel graph exists
    to count them on). It crashed the term where the ``other`` group had a cost."""
    from nnmeter.ir.graph import ModelGraph
    from nnmeter.ir.ops import NoAttrs, UnknownAttrs
    from nnmeter.kernels import KERNEL_TYPES

    shape = (1, 16, 28, 28)
    g = ModelGraph("u")
    g.add_input("x", shape)
    g.add_node("r", "relu", NoAttrs(), ["x"], input_shapes=[shape], output_shapes=[shape])
    g.add_node("elu", "unknown", UnknownAttrs(original_type="onnx:Elu"), ["r"],
               input_shapes=[shape], output_shapes=[shape])
    g.set_outputs(["elu"])
    cfg = KERNEL_TYPES.get("other").config_from_nodes(g, ["elu"])
    cost = KERNEL_TYPES.get("other").cost(cfg)
    assert cfg.op == "unknown" and cost.memory_bytes == cfg.memory_bytes > 0
    pred = load_predictor("ort-cpu", dataset="ort-cpu@fake", root=world, use_cache=False)
    before = pred.predict(g, check_device=False)
    term = InModelTerm((("other", 0.05),), 10)
    pred.composition = Composition(tuple(pred.composition.terms) + (term,))
    after = pred.predict(g, check_device=False)
    unknown = [r for r in after.rows if "elu" in r.nodes][0]
    was = [r for r in before.rows if "elu" in r.nodes][0]
    assert unknown.predicted_ms == pytest.approx(was.predicted_ms + 0.05 * cfg.memory_bytes / 1e6)






@pytest.mark.parametrize("charged", ["transformed", "pointwise"])
def test_winograd_weights_are_charged_only_where_the_models_show_them(world, monkeypatch,
                                                                     charged):
    """On a runtime that keeps Winograd tiles, the fit charges a convolution its
    transformed bytes only where that predicts the calibration models left out clearly
    better than its own bytes do: a device whose models pay for the tiles gets them, one
    whose models pay only for pointwise layers (where the two forms are the same) does
    not."""
    from nnmeter.predictors import facts
    from nnmeter.predictors.terms.in_model import kernel_mb

    monkeypatch.setitem(facts.RUNTIME_FACTS, "onnxruntime",
                        {**facts.RUNTIME_FACTS["onnxruntime"], "winograd_weights": True})
    d, ds, plain, names, graphs = _calibration_world(
        world, ("nasbench201", "resnet", "squeezenet", "googlenet"), 4)
    truth = []
    for g in graphs:
        mb = sum(kernel_mb(k, 0.0, True) for k in plain.kernels(g)
                 if kernel_group(k) == ("conv" if charged == "transformed" else "pointwise"))
        truth.append(plain.predict(g, check_device=False).total_ms + 0.05 * mb)
    rec = {"backend_id": "ort-cpu", "fingerprint_id": ds.fingerprint_id,
           "points": [{"variant": n, "latency_ms": ms} for n, ms in zip(names, truth)]}
    (d / IN_MODEL_FILE).write_text(json.dumps(rec))
    try:
        fitted = load_predictor("ort-cpu", dataset="ort-cpu@fake", root=world, use_cache=False)
        meta = fitted.meta["in_model"]
        assert meta["winograd"] is (charged == "transformed"), meta
        assert fitted.composition.get("in_model").winograd is meta["winograd"]
        assert meta["winograd_loo_rms_log"] is not None
        if charged == "transformed":
            assert meta["winograd_loo_rms_log"] == meta["loo_rms_log"]
    finally:
        (d / IN_MODEL_FILE).unlink()
        clear_memo()


def test_a_runtime_without_winograd_tiles_fits_one_form():
    from nnmeter.predictors.facts import device_facts

    assert not device_facts({"runtime": "onnxruntime", "isa": ["avx2"]}).winograd_weights

"""The composition: terms behind one interface, fitted in training and applied back in
prediction; the report names every term and adds up exactly."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import pytest

from nnmeter.errors import DatasetError, PredictorError
from nnmeter.fusion.rules import FusionRules
from nnmeter.ir import GraphBuilder
from nnmeter.predictors.composition import (
    Composition, FitContext, ModelView, Term, fit_context, remove_floored,
)
from nnmeter.predictors.dataset import KernelDataset
from nnmeter.predictors.facts import device_facts, local_cpu_facts, split_dataset_id
from nnmeter.predictors.terms import TERMS, OverheadTerm
from nnmeter.predictors.train import train_predictor
from nnmeter.registry import Registry

RULES = FusionRules.from_decisions("ort-cpu", pairs={("conv", "bn"): True,
                                                     ("bn", "relu"): True})


def _model():
    b = GraphBuilder("m", (1, 16, 28, 28))
    return b.build([b.relu(b.bn(b.conv(b.x, 32, 3)))])


def test_the_floor_rule_keeps_a_share_of_every_row():
    y = np.array([1.0, 0.2, 0.01])
    assert remove_floored(y, 0.1, keep_share=0.25).tolist() == pytest.approx([0.9, 0.1, 0.0025])
    assert remove_floored(y, np.array([0.5, 0.0, 1.0]), keep_share=0.5).tolist() == \
        pytest.approx([0.5, 0.2, 0.005])


def test_terms_are_registered_in_their_order():
    assert TERMS.ordered() == ["overhead", "weight_refetch", "absorbed", "reorders", "edges",
                               "chain", "in_model"]
    # the floors: one rule, each term's own share
    assert TERMS.get("reorders").keep_share == TERMS.get("edges").keep_share == 0.25
    assert TERMS.get("chain").keep_share == 0.5


def test_report_names_every_term_and_adds_up_exactly(conv_bn_relu_dir):
    pred = train_predictor("ort-cpu", conv_bn_relu_dir, RULES)
    rep = pred.predict(_model(), check_device=False)
    assert tuple(t.name for t in rep.terms) == pred.composition.names
    assert "overhead" in pred.composition.names
    d = rep.as_dict()
    assert d["total_ms"] == sum(r["predicted_ms"] for r in d["rows"]) + \
        sum(t["ms"] for t in d["terms"])
    assert [t["name"] for t in d["terms"]] == list(pred.composition.names)
    assert all({"name", "ms", "kernel_ms", "kernels", "label"} <= set(t) for t in d["terms"])
    assert pred.predict_many([_model()]) == [rep.total_ms]


def test_kernel_rows_say_which_term_adjusted_them(conv_bn_relu_dir, tmp_path):
    import shutil

    from nnmeter.predictors.weight_stream import write_weight_stream

    d = tmp_path / "copy"
    shutil.copytree(conv_bn_relu_dir, d)
    ds = KernelDataset(d, "ort-cpu")
    # a slow memory and no cache: every kernel with weights is lifted to its stream time
    write_weight_stream(d, {"fingerprint_id": ds.fingerprint_id, "bytes_per_ms": 1e3,
                            "llc_bytes": 0, "points": []})
    rep = train_predictor("ort-cpu", d, RULES).predict(_model(), check_device=False)
    row = rep.rows[0]
    assert row.terms == ("weight_refetch",) and row.predicted_ms > row.base_ms
    term = {t.name: t for t in rep.terms}["weight_refetch"]
    assert term.kernels == 1 and term.ms == 0.0
    assert term.kernel_ms == pytest.approx(row.predicted_ms - row.base_ms)


def test_records_round_trip_through_the_cache_form(conv_bn_relu_dir):
    pred = train_predictor("ort-cpu", conv_bn_relu_dir, RULES)
    again = Composition.from_records(pred.composition.records(), TERMS)
    assert again.names == pred.composition.names
    for a, b in zip(again.terms, pred.composition.terms):
        assert a.params() == b.params()


@pytest.mark.parametrize("records, match", [
    ({"name": "overhead"}, "must be a list"),
    ([{"name": "nosuch", "params": {}}], "known terms"),
    ([{"name": "overhead", "params": {"overhead_ms": 1.0, "extra": 2}}], "stale"),
])
def test_malformed_records_are_refused(records, match):
    with pytest.raises(PredictorError, match=match):
        Composition.from_records(records, TERMS)


@dataclass(frozen=True)
class _PerKernelTerm(Term):
    """The docs' example: a fixed cost per kernel, removed from every row and paid once
    per kernel of a model (an idea, not a calibrated term)."""

    ms_per_kernel: float

    name: ClassVar[str] = "per_kernel"
    label: ClassVar[str] = "fixed cost per kernel"

    @classmethod
    def fit(cls, ctx: FitContext) -> "_PerKernelTerm":
        return cls(0.1 * float(min(d.y.min() for d in ctx.data.values())))

    def remove(self, data: dict) -> None:
        for d in data.values():
            d.y = remove_floored(d.y, self.ms_per_kernel, keep_share=0.5)

    def model_ms(self, view: ModelView) -> float:
        return self.ms_per_kernel * len(view.kernels)


def test_a_new_term_is_one_class_and_one_registry_line(conv_bn_relu_dir):
    registry = Registry("composition terms")
    registry.register(OverheadTerm.name, OverheadTerm)
    registry.register(_PerKernelTerm.name, _PerKernelTerm)  # the one line
    ds = KernelDataset(conv_bn_relu_dir, "ort-cpu")
    ctx = fit_context("ort-cpu", ds)
    raw = {t: d.y.copy() for t, d in ctx.data.items()}
    comp = Composition.fit(ctx, registry)
    assert comp.names == ("overhead", "per_kernel")
    over, per = comp.terms
    for t, d in ctx.data.items():  # removed in order, the second on what the first left
        assert np.allclose(d.y, np.maximum(raw[t] - over.overhead_ms - per.ms_per_kernel,
                                           0.5 * (raw[t] - over.overhead_ms)))
    g = _model()
    view = ModelView(g, [object(), object()], [1.0, 2.0])
    assert comp.assemble(view) == [over.overhead_ms, 2 * per.ms_per_kernel]
    assert Composition.from_records(comp.records(), registry).terms == comp.terms


def test_device_facts_come_from_the_record():
    avx512 = device_facts({"runtime": "onnxruntime", "isa": ["avx2", "avx512f"],
                           "caches": {"L2": 1 << 20, "L3": 32 << 20}})
    assert avx512.layout_block == 16 and avx512.llc_bytes == 32 << 20
    assert device_facts({"runtime": "onnxruntime", "isa": ["avx2", "fma"]}).layout_block == 8
    assert device_facts({"runtime": "onnxruntime", "isa": ["sse4_2"]}).layout_block == 0
    # a runtime without a blocked layout has no block on any CPU
    assert device_facts({"runtime": "litert", "isa": ["avx512f"]}).layout_block == 0
    assert device_facts({"runtime": "openvino", "isa": []}).edge_conversions
    assert not device_facts({"runtime": "mnn"}).folded_activations
    with pytest.raises(DatasetError, match="isa"):
        device_facts({"runtime": "onnxruntime", "isa": "avx2"})
    with pytest.raises(DatasetError, match="JSON object"):
        device_facts(["onnxruntime"])


def test_local_cpu_facts_read_flags_and_caches(tmp_path):
    for i, (level, kind, size) in enumerate([(1, "Data", "32K"), (1, "Instruction", "32K"),
                                             (2, "Unified", "1024K"), (3, "Unified", "32M")]):
        d = tmp_path / f"index{i}"
        d.mkdir()
        (d / "level").write_text(f"{level}\n")
        (d / "type").write_text(f"{kind}\n")
        (d / "size").write_text(f"{size}\n")
    info = "processor\t: 0\nflags\t\t: fpu sse4_2 avx avx2 fma avx512f avx512bw\n"
    facts = local_cpu_facts(info, cache_root=str(tmp_path))
    assert facts["isa"] == ["sse4_2", "avx", "avx2", "fma", "avx512f", "avx512bw"]
    assert facts["caches"] == {"L1d": 32 << 10, "L2": 1 << 20, "L3": 32 << 20}
    arm = local_cpu_facts("Features\t: fp asimd asimddp sve\n", cache_root=str(tmp_path / "x"))
    # asimd is ARMv8's name for NEON: both are recorded (nnmeter.devices.cpu)
    assert arm == {"isa": ["neon", "asimd", "asimddp", "sve"], "caches": {}}


def test_dataset_ids_have_one_parser():
    assert split_dataset_id("ort-cpu") == ("ort-cpu", None)
    assert split_dataset_id("ort-cpu@epyc-zen4-avx512-2c") == ("ort-cpu", "epyc-zen4-avx512-2c")
    for bad in ("", "@x", "ort-cpu@", "a@b@c"):
        with pytest.raises(DatasetError, match="BACKEND@DEVICE"):
            split_dataset_id(bad)

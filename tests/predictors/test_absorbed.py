"""Kernels ORT runs inside others: folded activations and merged duplicates."""

from __future__ import annotations

from nnmeter.fusion.rules import FusionRules
from nnmeter.ir import GraphBuilder
from nnmeter.partition import partition
from nnmeter.predictors.absorbed import absorbed_kernels
from nnmeter.predictors.facts import device_facts

from nnmeter.predictors.layout import model_reorders

#: the facts of the runtimes the tests stand for (the CPU does not matter here)
ORT = device_facts({"runtime": "onnxruntime", "isa": ["avx2", "avx512f"]})
LITERT = device_facts({"runtime": "litert", "isa": ["avx2"]})

RULES = FusionRules.from_decisions("ort-cpu", pairs={
    ("conv", "bn"): True, ("bn", "add"): True, ("bn", "relu"): True})


def _types(kernels, idx):
    return {kernels[i].type: kernels[j].type for i, j in idx.items()}


def _conv_bn_hswish(b, x, name, cout=16):
    t = b.bn(b.conv(x, cout, 1, name=f"{name}.conv"), name=f"{name}.bn")
    return b.hswish(t, name=f"{name}.hswish")


def test_activation_after_convolution_is_folded_into_it():
    b = GraphBuilder("m", (1, 16, 8, 8))
    g = b.build([b.conv(_conv_bn_hswish(b, b.x, "a"), 16, 1, name="c2")])
    ks = partition(g, RULES)
    assert [k.type for k in ks] == ["conv-bn", "hswish", "conv"]
    assert absorbed_kernels(g, ks, ORT) == {1: 0}
    assert absorbed_kernels(g, ks, ORT) == {1: 0}
    # other runtimes: nothing known to be absorbed
    assert absorbed_kernels(g, ks, LITERT) == {}


def test_activation_as_graph_output_is_not_folded():
    # ORT keeps HardSigmoid + Mul when the activation's output leaves the model: the
    # single-kernel and pair test graphs have this shape
    b = GraphBuilder("m", (1, 16, 8, 8))
    g = b.build([_conv_bn_hswish(b, b.x, "a")])
    assert absorbed_kernels(g, partition(g, RULES), ORT) == {}


def test_convolution_output_read_twice_keeps_its_activation():
    b = GraphBuilder("m", (1, 16, 8, 8))
    t = b.bn(b.conv(b.x, 16, 1, name="c"), name="bn")
    h = b.hswish(t, name="h")
    g = b.build([b.conv(h, 16, 1, name="c1"), b.conv(t, 16, 1, name="c2")])
    assert absorbed_kernels(g, partition(g, RULES), ORT) == {}


def test_convolution_with_an_activation_of_its_own_takes_no_second():
    b = GraphBuilder("m", (1, 16, 8, 8))
    t = b.relu(b.bn(b.conv(b.x, 16, 1, name="c"), name="bn"), name="r")
    g = b.build([b.conv(b.hswish(t, name="h"), 16, 1, name="c2")])
    ks = partition(g, RULES)
    assert [k.type for k in ks] == ["conv-bn-relu", "hswish", "conv"]
    assert absorbed_kernels(g, ks, ORT) == {}


def test_duplicate_relus_merge_and_fold_into_residual_convolution():
    # a NASBench-201 node sum read by one relu per outgoing edge
    b = GraphBuilder("m", (1, 16, 8, 8))
    t = b.add_(b.bn(b.conv(b.x, 16, 1, name="c"), name="bn"), b.x, name="a")
    r1, r2 = b.relu(t, name="r1"), b.relu(t, name="r2")
    g = b.build([b.conv(r1, 16, 1, name="c1"), b.conv(r2, 16, 1, name="c2")])
    ks = partition(g, RULES)
    assert [k.type for k in ks] == ["conv-bn-add", "relu", "relu", "conv", "conv"]
    assert absorbed_kernels(g, ks, ORT) == {1: 0, 2: 1}


def test_duplicates_of_a_non_convolution_merge_but_do_not_fold():
    b = GraphBuilder("m", (1, 16, 8, 8))
    t = b.add_(b.x, b.x, name="a")
    g = b.build([b.conv(b.relu(t, name="r1"), 16, 1, name="c1"),
                 b.conv(b.relu(t, name="r2"), 16, 1, name="c2")])
    ks = partition(g, RULES)
    assert _types(ks, absorbed_kernels(g, ks, ORT)) == {"relu": "relu"}


def test_folded_activation_adds_no_reorders():
    b = GraphBuilder("m", (1, 16, 8, 8))
    x = _conv_bn_hswish(b, b.x, "a")
    g = b.build([b.conv(_conv_bn_hswish(b, x, "b", cout=32), 32, 1, name="c")])
    ks = partition(g, RULES)
    absorbed = absorbed_kernels(g, ks, ORT)
    assert sorted(absorbed) == [1, 3]
    # into the first convolution, out of the last; nothing around the activations
    assert sorted(model_reorders(g, ks, 16, absorbed=absorbed)) == [16 * 64, 32 * 64]


def test_duplicate_poolings_of_one_tensor_merge_unless_their_attributes_differ():
    b = GraphBuilder("m", (1, 16, 8, 8))
    x = b.relu(b.conv(b.x, 16, 1, name="c"), name="r")
    p1 = b.avgpool(x, 3, 1, pads=(1, 1, 1, 1), name="p1")
    p2 = b.avgpool(x, 3, 1, pads=(1, 1, 1, 1), name="p2")
    p3 = b.avgpool(x, 2, 2, name="p3")  # another pooling of the same tensor: kept
    g = b.build([b.add_(p1, p2, name="s"), p3])
    ks = partition(g, RULES)
    idx = {k.nodes[0]: i for i, k in enumerate(ks) if len(k.nodes) == 1}
    ab = absorbed_kernels(g, ks, ORT)
    assert ab.get(idx["p2"]) == idx["p1"]
    assert idx["p1"] not in ab and idx["p3"] not in ab
    # the .tflite converter merges the same duplicates (but folds no activation)
    assert absorbed_kernels(g, ks, LITERT) == {idx["p2"]: idx["p1"]}

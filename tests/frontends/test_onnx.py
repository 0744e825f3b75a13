"""Tests of the ONNX frontend: the onnx wheel's test models, op mapping, patterns, errors."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from nnmeter.errors import (
    DynamicShapeError, GraphValidationError, InputNameError, ModelLoadError, NNMeterError,
    UnsupportedOpError,
)
from nnmeter.frontends.onnx import load_onnx

DATA = Path(onnx.__file__).parent / "backend" / "test" / "data"
LIGHT = sorted((DATA / "light").glob("light_*.onnx"))
OTHERS = sorted(
    p for sub in ("simple", "pytorch-converted", "pytorch-operator")
    for p in (DATA / sub).glob("*/model.onnx")
)


# ------------------------------------------------------------------ helpers
def _vi(name: str, shape, elem=TensorProto.FLOAT):
    return helper.make_tensor_value_info(name, elem, shape)


def _model(nodes, inputs, outputs, inits=(), opset=17):
    graph = helper.make_graph(nodes, "t", inputs, outputs, initializer=list(inits))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _init(name: str, value) -> onnx.TensorProto:
    return numpy_helper.from_array(np.asarray(value), name)


def _w(name: str, shape) -> onnx.TensorProto:
    return _init(name, np.zeros(shape, dtype=np.float32))


# ------------------------------------------------------------------ the wheel's test models
def test_wheel_holds_the_149_test_models():
    assert len(LIGHT) == 9
    assert len(LIGHT) + len(OTHERS) == 149


@pytest.mark.parametrize("path", LIGHT + OTHERS, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_every_wheel_model_loads_or_fails_clearly(path):
    try:
        graph = load_onnx(path)
    except NNMeterError as err:
        assert str(err)  # a message, and one of ours
        return
    assert graph.lint() == []
    for node in graph.nodes():
        assert node.output_shapes
        if node.op != "input":
            assert node.source["framework"] == "onnx" and node.source["op_type"]


def _file_weight_elements(model: onnx.ModelProto) -> int:
    """Elements of every float constant read by a node: initializers and the
    ConstantOfShape tensors the light models create their weights with."""
    used = {t for n in model.graph.node for t in n.input}
    inits = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    total = sum(v.size for k, v in inits.items() if v.dtype.kind == "f" and k in used)
    for n in model.graph.node:
        if n.op_type == "ConstantOfShape" and n.output[0] in used:
            total += int(np.prod(inits[n.input[0]]))
    return total


@pytest.mark.parametrize("path", LIGHT, ids=lambda p: p.stem)
def test_light_architectures_load_fully(path):
    graph = load_onnx(path)
    assert graph.unknown_ops() == []
    counts = graph.op_counts()
    assert counts.get("conv", 0) > 0
    assert counts.get("fc", 0) + counts.get("gap", 0) > 0
    model = onnx.load(str(path))
    assert graph.cost().stored_weights == _file_weight_elements(model)
    # every Conv and Gemm of the file became a conv-like or fc node with its weights
    onnx_ops = [n.op_type for n in model.graph.node]
    assert counts.get("conv", 0) + counts.get("dwconv", 0) == onnx_ops.count("Conv")
    assert counts.get("fc", 0) == onnx_ops.count("Gemm")


def test_light_resnet50_figures():
    graph = load_onnx(DATA / "light" / "light_resnet50.onnx")
    cost = graph.cost()
    assert cost.params == 25_557_032  # torchvision's count for ResNet-50
    bn_channels = sum(n.input_shape[1] for n in graph.nodes() if n.op == "bn")
    assert cost.stored_weights == cost.params + 2 * bn_channels
    assert 4.0e9 < cost.macs < 4.2e9


def test_light_shufflenet_channel_shuffle_recognised():
    graph = load_onnx(DATA / "light" / "light_shufflenet.onnx")
    counts = graph.op_counts()
    assert counts["channelshuffle"] == 16 and counts["dwconv"] == 16
    assert "transpose" not in counts


# ------------------------------------------------------------------ op mapping
def test_conv_group_equal_to_channels_is_dwconv_and_grouped_stays_conv():
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["a"], name="dw", group=8, pads=[1, 1, 1, 1]),
        helper.make_node("Conv", ["a", "w2", "b2"], ["y"], name="gc", group=2,
                         auto_pad="SAME_UPPER", strides=[2, 2]),
    ]
    m = _model(nodes, [_vi("x", [1, 8, 9, 9])], [_vi("y", None)],
               [_w("w1", (8, 1, 3, 3)), _w("w2", (16, 4, 3, 3)), _w("b2", (16,))])
    g = load_onnx(m)
    assert g["dw"].op == "dwconv" and g["dw"].attrs.groups == 8
    gc = g["gc"]
    assert gc.op == "conv" and gc.attrs.groups == 2 and gc.attrs.bias
    assert gc.attrs.pads == (1, 1, 1, 1) and gc.output_shape == (1, 16, 5, 5)


def test_same_lower_pads_put_the_extra_at_the_start():
    nodes = [helper.make_node("MaxPool", ["x"], ["y"], name="p", kernel_shape=[2, 2],
                              strides=[1, 1], auto_pad="SAME_LOWER")]
    g = load_onnx(_model(nodes, [_vi("x", [1, 2, 5, 5])], [_vi("y", None)]))
    assert g["p"].attrs.pads == (1, 1, 0, 0) and g["p"].output_shape == (1, 2, 5, 5)


def test_gemm_and_matmul_bias_become_fc():
    nodes = [
        helper.make_node("Gemm", ["x", "w", "b"], ["h"], name="g1", transB=1),
        helper.make_node("MatMul", ["h", "w2"], ["m"], name="mm"),
        helper.make_node("Add", ["m", "b2"], ["y"], name="bias"),
    ]
    m = _model(nodes, [_vi("x", [2, 6])], [_vi("y", None)],
               [_w("w", (4, 6)), _w("b", (4,)), _w("w2", (4, 3)), _w("b2", (3,))])
    g = load_onnx(m)
    assert g["g1"].op == "fc" and g["g1"].attrs == g["g1"].attrs.__class__(4, True)
    assert g["mm"].op == "fc" and g["mm"].attrs.bias and g["mm"].output_shape == (2, 3)
    assert "bias" not in g
    assert g.cost().params == 6 * 4 + 4 + 4 * 3 + 3


def test_clip_relu6_old_and_new_opsets():
    old = helper.make_node("Clip", ["x"], ["y"], name="c", min=0.0, max=6.0)
    g = load_onnx(_model([old], [_vi("x", [1, 4])], [_vi("y", None)], opset=9))
    assert g["c"].op == "relu6"
    new = helper.make_node("Clip", ["x", "lo", "hi"], ["y"], name="c")
    g = load_onnx(_model([new], [_vi("x", [1, 4])], [_vi("y", None)],
                         [_init("lo", np.float32(0)), _init("hi", np.float32(6))]))
    assert g["c"].op == "relu6"
    other = helper.make_node("Clip", ["x", "lo"], ["y"], name="c")
    g = load_onnx(_model([other], [_vi("x", [1, 4])], [_vi("y", None)],
                         [_init("lo", np.float32(-1))]))
    assert g["c"].op == "clip" and g["c"].attrs.min_value == -1.0
    assert g["c"].attrs.max_value == math.inf


def test_swish_hswish_and_erf_gelu_patterns():
    c = lambda n, v: _init(n, np.float32(v))  # noqa: E731
    nodes = [
        helper.make_node("Sigmoid", ["x"], ["s"], name="sw"),
        helper.make_node("Mul", ["x", "s"], ["a"], name="sw_mul"),
        helper.make_node("HardSigmoid", ["a"], ["h"], name="hs", alpha=1 / 6, beta=0.5),
        helper.make_node("Mul", ["h", "a"], ["b"], name="hs_mul"),
        helper.make_node("Div", ["b", "sqrt2"], ["d"], name="ge"),
        helper.make_node("Erf", ["d"], ["e"]),
        helper.make_node("Add", ["e", "one"], ["f"]),
        helper.make_node("Mul", ["b", "f"], ["g"]),
        helper.make_node("Mul", ["g", "half"], ["y"]),
    ]
    m = _model(nodes, [_vi("x", [1, 4, 2, 2])], [_vi("y", None)],
               [c("sqrt2", math.sqrt(2)), c("one", 1.0), c("half", 0.5)])
    g = load_onnx(m)
    assert [n.op for n in g.nodes()] == ["input", "swish", "hswish", "gelu"]
    assert [n.name for n in g.nodes()] == ["x", "sw", "hs", "ge"]


def test_sigmoid_with_other_readers_stays_sigmoid():
    nodes = [
        helper.make_node("Sigmoid", ["x"], ["s"], name="sg"),
        helper.make_node("Mul", ["x", "s"], ["a"], name="mul"),
    ]
    g = load_onnx(_model(nodes, [_vi("x", [1, 4])], [_vi("a", None), _vi("s", None)]))
    assert g["sg"].op == "sigmoid" and g["mul"].op == "mul"


def test_shape_gather_concat_chain_folds_into_reshape():
    nodes = [
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("Gather", ["s", "zero"], ["n"], axis=0),
        helper.make_node("Unsqueeze", ["n", "ax0"], ["n1"]),
        helper.make_node("Concat", ["n1", "minus1"], ["shape"], axis=0),
        helper.make_node("Reshape", ["x", "shape"], ["y"], name="flat"),
    ]
    inits = [_init("zero", np.int64(0)), _init("ax0", np.array([0], np.int64)),
             _init("minus1", np.array([-1], np.int64))]
    g = load_onnx(_model(nodes, [_vi("x", [2, 3, 4, 5])], [_vi("y", None)], inits))
    assert [n.op for n in g.nodes()] == ["input", "reshape"]
    assert g["flat"].attrs.shape == (2, 60)


def test_constant_nodes_and_eltwise_with_constant_operand():
    nodes = [
        helper.make_node("Constant", [], ["k"], value=numpy_helper.from_array(
            np.ones((4, 1, 1), np.float32))),
        helper.make_node("Mul", ["x", "k"], ["a"], name="scale"),
        helper.make_node("Sub", ["k", "a"], ["y"], name="rsub"),
    ]
    g = load_onnx(_model(nodes, [_vi("x", [1, 4, 3, 3])], [_vi("y", None)]))
    assert g["scale"].attrs.const_shape == (4, 1, 1)
    assert g["rsub"].meta == {"const_first": True}
    assert g.cost().params == 8


def test_unknown_ops_are_kept_with_shapes_and_attributes():
    nodes = [
        helper.make_node("Relu", ["x"], ["r"], name="r"),
        helper.make_node("Elu", ["r"], ["y"], name="elu", alpha=0.5),
    ]
    g = load_onnx(_model(nodes, [_vi("x", [1, 4])], [_vi("y", None)]))
    (unk,) = g.unknown_ops()
    assert unk.name == "elu" and unk.attrs.original_type == "onnx:Elu"
    assert unk.attrs.fields["alpha"] == 0.5 and unk.output_shape == (1, 4)
    assert g.cost().unknown_nodes == ("elu",)


def test_dropout_and_identity_are_removed():
    nodes = [
        helper.make_node("Dropout", ["x"], ["d"], name="drop"),
        helper.make_node("Identity", ["d"], ["i"], name="id"),
        helper.make_node("Relu", ["i"], ["y"], name="r"),
    ]
    g = load_onnx(_model(nodes, [_vi("x", [1, 4])], [_vi("y", None)]))
    assert [n.name for n in g.nodes()] == ["x", "r"]
    assert g["r"].inputs[0].node == "x"


def test_empty_and_duplicate_node_names_are_made_unique():
    nodes = [
        helper.make_node("Relu", ["x"], ["a"]),
        helper.make_node("Relu", ["a"], ["b"], name="dup"),
        helper.make_node("Relu", ["b"], ["y"], name="dup"),
    ]
    g = load_onnx(_model(nodes, [_vi("x", [1, 4])], [_vi("y", None)]))
    assert [n.name for n in g.nodes()] == ["x", "Relu_0", "dup", "dup_1"]


def test_split_pad_resize_and_reducemean():
    nodes = [
        helper.make_node("Split", ["x", "sizes"], ["a", "b"], name="sp", axis=1),
        helper.make_node("Pad", ["a", "pads"], ["p"], name="pad", mode="reflect"),
        helper.make_node("Resize", ["p", "", "scales"], ["r"], name="up", mode="linear"),
        helper.make_node("ReduceMean", ["b"], ["m"], name="gap", axes=[2, 3], keepdims=0),
    ]
    inits = [_init("sizes", np.array([1, 3], np.int64)),
             _init("pads", np.array([0, 0, 1, 1, 0, 0, 1, 1], np.int64)),
             _init("scales", np.array([1, 1, 2, 2], np.float32))]
    g = load_onnx(_model(nodes, [_vi("x", [1, 4, 4, 4])], [_vi("r", None), _vi("m", None)],
                         inits))
    assert g["sp"].attrs.sizes == (1, 3)
    assert g["pad"].attrs.mode == "reflect" and g["pad"].output_shape == (1, 1, 6, 6)
    assert g["up"].attrs == g["up"].attrs.__class__(size=(12, 12), mode="linear")
    assert g["gap"].op == "gap" and g["gap"].output_shape == (1, 3)


def _halves_model(second_bound_late: bool):
    """x[:, :c/2] and x[:, c/2:] as torch.onnx writes them: the bound c/2 computed from
    Shape -> Gather -> Div, optionally after the first Slice in node order."""
    bound = [
        helper.make_node("Shape", ["x"], ["shp"], name="shape"),
        helper.make_node("Gather", ["shp", "one"], ["c"], name="gather", axis=0),
        helper.make_node("Div", ["c", "two"], ["half"], name="div"),
        helper.make_node("Unsqueeze", ["half", "zero"], ["half1"], name="unsq"),
    ]
    first = helper.make_node("Slice", ["x", "zero", "half1", "one"], ["a"], name="s1")
    second = helper.make_node("Slice", ["x", "half1", "big", "one"], ["b"], name="s2")
    nodes = [first] + bound + [second] if second_bound_late else bound + [first, second]
    nodes.append(helper.make_node("Relu", ["b"], ["rb"], name="r"))
    inits = [_init("zero", np.array([0], np.int64)), _init("one", np.array([1], np.int64)),
             _init("two", np.array(2, np.int64)),
             _init("big", np.array([2 ** 62], np.int64))]
    if second_bound_late:  # the first Slice's end is a plain constant here
        nodes[0] = helper.make_node("Slice", ["x", "zero", "four", "one"], ["a"], name="s1")
        inits.append(_init("four", np.array([4], np.int64)))
    return _model(nodes, [_vi("x", [1, 8, 4, 4])], [_vi("a", None), _vi("rb", None)], inits)


@pytest.mark.parametrize("late", [False, True])
def test_slices_that_tile_an_axis_are_one_split(late):
    g = load_onnx(_halves_model(late))
    splits = [n for n in g.nodes() if n.op == "split"]
    assert len(splits) == 1 and splits[0].attrs.sizes == (4, 4) and splits[0].attrs.axis == 1
    assert splits[0].output_shapes == ((1, 4, 4, 4), (1, 4, 4, 4))
    assert g["r"].input_shapes == ((1, 4, 4, 4),)
    assert not [n for n in g.nodes() if n.op == "unknown"]


def test_a_lone_slice_is_a_split_with_unread_parts_and_a_strided_one_splits_a_reshape():
    nodes = [helper.make_node("Slice", ["x", "st", "en", "ax"], ["y"], name="s"),
             helper.make_node("Relu", ["y"], ["r"], name="r")]
    inits = [_init("st", np.array([2], np.int64)), _init("en", np.array([-2], np.int64)),
             _init("ax", np.array([1], np.int64))]
    g = load_onnx(_model(nodes, [_vi("x", [1, 8, 4, 4])], [_vi("r", None)], inits))
    assert g["s"].op == "split" and g["s"].attrs.sizes == (2, 4, 2)
    assert g["r"].input_shapes == ((1, 4, 4, 4),)
    strided = [helper.make_node("Slice", ["x", "st", "en", "ax", "stp"], ["y"], name="s"),
               helper.make_node("Relu", ["y"], ["r"], name="r")]
    g = load_onnx(_model(strided, [_vi("x", [1, 8, 4, 4])], [_vi("r", None)],
                         inits + [_init("stp", np.array([2], np.int64))]))
    # x[:, 2:6:2]: the range [2, 6) cut out, reshaped to (2, 2), its first of every 2 kept
    assert not g.unknown_ops() and g["r"].input_shapes == ((1, 2, 4, 4),)
    assert [(n.op, n.output_shapes) for n in g.nodes() if n.name.startswith("s")] == [
        ("split", ((1, 2, 4, 4), (1, 4, 4, 4), (1, 2, 4, 4))),
        ("reshape", ((1, 2, 2, 4, 4),)),
        ("split", ((1, 2, 1, 4, 4), (1, 2, 1, 4, 4))),
        ("reshape", ((1, 2, 4, 4),))]



def test_strided_slices_of_two_axes_and_of_an_odd_axis_map_without_unknown_nodes():
    # Swin's patch merging x[:, 1::2, 0::2, :] and LeViT's x[:, ::2, ::2] of 7 x 7
    def sliced(shape, starts):
        nodes = [helper.make_node("Slice", ["x", "st", "en", "ax", "stp"], ["y"], name="s"),
                 helper.make_node("Relu", ["y"], ["r"], name="r")]
        inits = [_init("st", np.array(starts, np.int64)),
                 _init("en", np.array([100, 100], np.int64)),
                 _init("ax", np.array([1, 2], np.int64)),
                 _init("stp", np.array([2, 2], np.int64))]
        return load_onnx(_model(nodes, [_vi("x", shape)], [_vi("r", None)], inits))

    g = sliced([1, 8, 8, 4], [1, 0])
    assert not g.unknown_ops() and g["r"].input_shapes == ((1, 4, 4, 4),)
    assert [n.op for n in g.nodes() if n.name.startswith("s")] == [
        "reshape", "split", "reshape", "split", "reshape"]
    g = sliced([1, 7, 7, 4], [0, 0])
    assert not g.unknown_ops() and g["r"].input_shapes == ((1, 4, 4, 4),)
    assert sum(n.op == "pad" for n in g.nodes()) == 2

# ------------------------------------------------------------------ shapes and errors
def _dynamic_model():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3, 8, 8])
    return _model([helper.make_node("Relu", ["x"], ["y"], name="r")], [x], [_vi("y", None)])


def test_dynamic_dims_need_input_shapes():
    with pytest.raises(DynamicShapeError, match=r"'x'.*dimension 0.*--input-shape"):
        load_onnx(_dynamic_model())
    g = load_onnx(_dynamic_model(), {"x": (2, 3, 8, 8)})
    assert g["r"].output_shape == (2, 3, 8, 8)
    g = load_onnx(_dynamic_model(), {"": (4, 3, 8, 8)})
    assert g["x"].output_shape == (4, 3, 8, 8)


def test_unknown_input_name_lists_real_inputs():
    with pytest.raises(InputNameError, match=r"'nope'.*\['x'\]"):
        load_onnx(_dynamic_model(), {"nope": (1, 3, 8, 8)})


def test_input_model_is_not_modified():
    m = _dynamic_model()
    before = m.SerializeToString()
    load_onnx(m, {"x": (1, 3, 8, 8)})
    assert m.SerializeToString() == before


def test_missing_truncated_and_garbage_files(tmp_path):
    with pytest.raises(ModelLoadError, match="does not exist"):
        load_onnx(tmp_path / "missing.onnx")
    good = LIGHT[0].read_bytes()
    cut = tmp_path / "cut.onnx"
    cut.write_bytes(good[: len(good) // 2])
    with pytest.raises(ModelLoadError):
        load_onnx(cut)
    junk = tmp_path / "junk.onnx"
    junk.write_bytes(b"this is not a model at all")
    with pytest.raises(ModelLoadError):
        load_onnx(junk)


def test_cyclic_and_disconnected_graphs_are_rejected():
    cyc = [helper.make_node("Add", ["x", "b"], ["a"], name="n1"),
           helper.make_node("Relu", ["a"], ["b"], name="n2")]
    with pytest.raises(GraphValidationError, match="cycle"):
        load_onnx(_model(cyc, [_vi("x", [1, 4])], [_vi("b", None)]))
    two = [helper.make_node("Relu", ["x"], ["a"], name="n1"),
           helper.make_node("Relu", ["z"], ["b"], name="n2")]
    with pytest.raises(GraphValidationError, match="disconnected"):
        load_onnx(_model(two, [_vi("x", [1, 4]), _vi("z", [1, 4])],
                         [_vi("a", None), _vi("b", None)]))


def test_op_without_static_shape_is_unsupported():
    nodes = [helper.make_node("NonZero", ["x"], ["y"], name="nz")]
    with pytest.raises(UnsupportedOpError, match="NonZero"):
        load_onnx(_model(nodes, [_vi("x", [1, 4])], [_vi("y", None)]))


def test_conv1d_becomes_conv_with_h_1_between_reshapes():
    nodes = [helper.make_node("Conv", ["x", "w"], ["y"], name="c1d", pads=[1, 1])]
    g = load_onnx(_model(nodes, [_vi("x", [2, 4, 10])], [_vi("y", None)],
                         [_w("w", (6, 4, 3))]))
    assert [(n.name, n.op) for n in g.nodes()] == [
        ("x", "input"), ("c1d/to2d", "reshape"), ("c1d", "conv"), ("c1d/to1d", "reshape")]
    c = g["c1d"]
    assert c.attrs.kernel == (1, 3) and c.attrs.pads == (0, 1, 0, 1)
    assert c.input_shape == (2, 4, 1, 10) and g["c1d/to1d"].output_shape == (2, 6, 10)


def test_qdq_pairs_on_activations_are_removed_and_counted():
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"], name="q"),
        helper.make_node("DequantizeLinear", ["q", "s", "z"], ["d"], name="dq"),
        helper.make_node("Relu", ["d"], ["y"], name="r"),
    ]
    inits = [_init("s", np.float32(0.1)), _init("z", np.int8(0))]
    g = load_onnx(_model(nodes, [_vi("x", [1, 4])], [_vi("y", None)], inits))
    assert [n.name for n in g.nodes()] == ["x", "r"]
    assert g.meta["qdq_nodes_removed"] == 2


def test_a_static_zero_dimension_is_not_called_dynamic():
    from onnx import TensorProto, helper

    from nnmeter.errors import DynamicShapeError

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 0, 4, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    model = helper.make_model(helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"], name="r")], "z", [x], [y]))
    with pytest.raises(ModelLoadError, match="static zero-size dimension, not a dynamic") as e:
        load_onnx(model)
    assert not isinstance(e.value, DynamicShapeError)
    assert load_onnx(model, {"x": (1, 2, 4, 4)})["r"].output_shape == (1, 2, 4, 4)


# ------------------------------------------------------------------ torch's local_response_norm
def _branch(name: str, nodes, out: str):
    return helper.make_graph(nodes, name, [], [helper.make_tensor_value_info(out, TensorProto.FLOAT, None)])


def _torch_lrn_model(cond_true: bool = True):
    """What torch.onnx writes for ``F.local_response_norm`` (the pytorchcv AlexNet's),
    cut down: a 5-D Pad whose pads pass through a Transpose (so whole-model ONNX
    inference loses every shape after it), a 3-D AveragePool, and an ``If`` on a
    condition that folds to a constant, squeezing the pooled tensor back to 4-D."""
    pads = np.array([[0, 0], [0, 0], [2, 2], [0, 0], [0, 0]], np.int64)
    then = _branch("then", [helper.make_node("Constant", [], ["ax"], value=_init("v", np.array([1], np.int64))),
                            helper.make_node("Squeeze", ["ap", "ax"], ["s"])], "s")
    other = _branch("else", [helper.make_node("Identity", ["ap"], ["i"])], "i")
    nodes = [
        helper.make_node("Reshape", ["x", "s5"], ["x5"], name="r5"),
        helper.make_node("Transpose", ["p2"], ["pt"], perm=[1, 0]),
        helper.make_node("Reshape", ["pt", "s10"], ["pads"]),
        helper.make_node("Pad", ["x5", "pads"], ["xp"], name="pad"),
        helper.make_node("AveragePool", ["xp"], ["ap"], kernel_shape=[5, 1, 1], name="pool"),
        helper.make_node("Equal", ["one", "one" if cond_true else "two"], ["cond"]),
        helper.make_node("If", ["cond"], ["sq"], then_branch=then, else_branch=other, name="if"),
        helper.make_node("Reshape", ["sq", "s4"], ["sq4"], name="r4"),
        helper.make_node("Div", ["x", "sq4"], ["y"], name="div"),
    ]
    inits = [_init("s5", np.array([1, 1, 4, 5, 5], np.int64)), _init("p2", pads),
             _init("s10", np.array([10], np.int64)), _init("s4", np.array([1, 4, 5, 5], np.int64)),
             _init("one", np.array([1], np.int64)), _init("two", np.array([2], np.int64))]
    return _model(nodes, [_vi("x", [1, 4, 5, 5])], [_vi("y", [1, 4, 5, 5])], inits)


def test_torch_local_response_norm_imports_with_shapes_from_the_node_alone():
    model = _torch_lrn_model()
    inferred = onnx.shape_inference.infer_shapes(model, data_prop=True)
    lost = {vi.name for vi in inferred.graph.value_info
            if any(not d.HasField("dim_value") for d in vi.type.tensor_type.shape.dim)}
    assert {"xp", "ap"} <= lost  # whole-model inference cannot say; the importer can
    g = load_onnx(model)
    by_name = {n.name: n for n in g.nodes()}
    assert by_name["pad"].output_shapes == ((1, 1, 8, 5, 5),)
    pool = by_name["pool"]
    assert pool.op == "unknown" and pool.attrs.original_type == "onnx:AveragePool"
    assert pool.output_shapes == ((1, 1, 4, 5, 5),)
    assert "reshape" in {n.op for n in g.nodes()}
    assert not [n for n in g.nodes() if n.op == "unknown" and n.attrs.original_type == "onnx:If"]
    assert by_name["div"].output_shapes == ((1, 4, 5, 5),)
    assert g.lint() == []


def test_an_if_on_a_constant_condition_runs_the_branch_it_selects():
    def ops(cond_true):
        return [n.op for n in load_onnx(_torch_lrn_model(cond_true)).topological_nodes()]
    # then: Squeeze (a reshape) before r4's reshape; else: the Identity disappears
    assert ops(True).count("reshape") == ops(False).count("reshape") + 1


def test_a_branch_that_returns_an_outer_tensor_as_it_is_does_not_rename_its_readers():
    """The selected branch returns ``r`` (computed outside it) and also reads it: its
    reader keeps reading ``r``, and the If's output is a copy of it."""
    branch = helper.make_graph([helper.make_node("Sigmoid", ["r"], ["s"], name="sig")], "b", [],
                               [helper.make_tensor_value_info("r", TensorProto.FLOAT, None),
                                helper.make_tensor_value_info("s", TensorProto.FLOAT, None)])
    other = helper.make_graph([helper.make_node("Identity", ["r"], ["i"]),
                               helper.make_node("Identity", ["r"], ["j"])], "o", [],
                              [helper.make_tensor_value_info("i", TensorProto.FLOAT, None),
                               helper.make_tensor_value_info("j", TensorProto.FLOAT, None)])
    model = _model([helper.make_node("Relu", ["x"], ["r"], name="relu"),
                    helper.make_node("Equal", ["one", "one"], ["c"]),
                    helper.make_node("If", ["c"], ["a", "b"], then_branch=branch, else_branch=other),
                    helper.make_node("Add", ["a", "b"], ["y"], name="add")],
                   [_vi("x", [1, 4])], [_vi("y", [1, 4])], [_init("one", np.array([1], np.int64))])
    g = load_onnx(model)
    by_name = {n.name: n for n in g.nodes()}
    assert by_name["sig"].inputs[0].node == "relu"
    assert sorted(r.node for r in by_name["add"].inputs) == ["relu", "sig"]
    assert g.lint() == []


def test_an_if_on_a_computed_condition_stays_one_unknown_node():
    then = _branch("then", [helper.make_node("Relu", ["x"], ["a"])], "a")
    other = _branch("else", [helper.make_node("Sigmoid", ["x"], ["b"])], "b")
    model = _model([helper.make_node("ReduceSum", ["x"], ["s"], keepdims=0),
                    helper.make_node("Greater", ["s", "zero"], ["c"]),
                    helper.make_node("If", ["c"], ["y"], then_branch=then, else_branch=other)],
                   [_vi("x", [1, 4])], [_vi("y", [1, 4])], [_init("zero", np.float32(0))])
    g = load_onnx(model)
    ifs = [n for n in g.nodes() if n.op == "unknown" and n.attrs.original_type == "onnx:If"]
    assert len(ifs) == 1 and ifs[0].output_shapes == ((1, 4),)
    assert not {"relu", "sigmoid"} & {n.op for n in g.nodes()}


def test_node_shapes_reads_a_pad_from_the_values_it_is_given():
    from nnmeter.frontends.onnx.reader import node_shapes

    pad = helper.make_node("Pad", ["x", "p"], ["y"])
    opset = [helper.make_opsetid("", 17)]
    got = node_shapes(pad, opset, {"x": ((1, 3, 4), None),
                                   "p": ((6,), np.array([0, 1, 2, 0, 1, 2], np.int64))})
    assert got == {"y": (1, 5, 8)}
    assert node_shapes(pad, opset, {"x": ((1, 3, 4), None)}) == {}  # an input it lacks
    with_graph = helper.make_node("If", ["c"], ["y"], then_branch=_branch("t", [], "x"),
                                  else_branch=_branch("e", [], "x"))
    assert node_shapes(with_graph, opset, {"c": ((1,), np.array([True]))}) == {}

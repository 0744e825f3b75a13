"""Tests of shape inference, one op at a time, against hand-computed shapes."""

from __future__ import annotations

import pytest

from nnmeter.errors import ShapeInferenceError
from nnmeter.ir import ModelGraph
from nnmeter.ir.ops import (
    ChannelShuffleAttrs, ConcatAttrs, ConvAttrs, EltwiseAttrs, FCAttrs, FlattenAttrs,
    GapAttrs, MatMulAttrs, PadAttrs, PoolAttrs, ReduceAttrs, ReshapeAttrs, ResizeAttrs,
    SplitAttrs, TransposeAttrs, UnknownAttrs,
)
from nnmeter.ir.shapes import broadcast, conv_out_size, infer_shapes, pool_out_size


def _one(op, attrs, *shapes):
    g = ModelGraph()
    names = []
    for i, s in enumerate(shapes):
        g.add_input(f"x{i}", s)
        names.append(f"x{i}")
    g.add_node("n", op, attrs, names)
    g.set_outputs(["n"])
    return infer_shapes(g)["n"].output_shapes


def test_axis_formulas():
    assert conv_out_size(224, 7, 2, 3, 3) == 112
    assert conv_out_size(10, 3, 1, 2, 2, dilation=2) == 10
    assert pool_out_size(112, 3, 2, 1, 1) == 56
    assert pool_out_size(5, 2, 2, 0, 0, ceil_mode=True) == 3
    # ceil gives 4 windows, but the 4th would start in the right padding: 3
    assert pool_out_size(5, 2, 2, 1, 1, ceil_mode=True) == 3
    assert broadcast((4, 1, 3), (5, 1)) == (4, 5, 3)
    with pytest.raises(ShapeInferenceError):
        broadcast((2, 3), (4, 3))


@pytest.mark.parametrize("op,attrs,ins,out", [
    ("conv", ConvAttrs(8, (3, 3), (2, 2), (1, 1, 1, 1)), [(1, 3, 32, 32)], (1, 8, 16, 16)),
    ("conv", ConvAttrs(8, (1, 5), (1, 1), (0, 2, 0, 2)), [(2, 4, 1, 10)], (2, 8, 1, 10)),
    ("dwconv", ConvAttrs(6, (3, 3), (1, 1), (0, 0, 0, 0), groups=6), [(1, 6, 9, 9)],
     (1, 6, 7, 7)),
    ("convtranspose", ConvAttrs(4, (3, 3), (2, 2), (1, 1, 1, 1), output_padding=(1, 1)),
     [(1, 8, 7, 7)], (1, 4, 14, 14)),
    ("fc", FCAttrs(10), [(2, 3, 16)], (2, 3, 10)),
    ("matmul", MatMulAttrs(), [(2, 4, 8), (8, 3)], (2, 4, 3)),
    ("add", EltwiseAttrs(), [(1, 8, 4, 4), (1, 8, 1, 1)], (1, 8, 4, 4)),
    ("mul", EltwiseAttrs(const_shape=(8, 1, 1)), [(1, 8, 4, 4)], (1, 8, 4, 4)),
    ("concat", ConcatAttrs(axis=1), [(1, 3, 4, 4), (1, 5, 4, 4)], (1, 8, 4, 4)),
    ("concat", ConcatAttrs(axis=-1), [(1, 3), (1, 5)], (1, 8)),
    ("channelshuffle", ChannelShuffleAttrs(4), [(1, 8, 4, 4)], (1, 8, 4, 4)),
    ("maxpool", PoolAttrs((3, 3), (2, 2), (1, 1, 1, 1)), [(1, 4, 112, 112)], (1, 4, 56, 56)),
    ("avgpool", PoolAttrs((2, 2), (2, 2), ceil_mode=True), [(1, 4, 5, 5)], (1, 4, 3, 3)),
    ("gap", GapAttrs(), [(1, 16, 7, 7)], (1, 16, 1, 1)),
    ("gap", GapAttrs(keepdims=False), [(1, 16, 7, 7)], (1, 16)),
    ("reshape", ReshapeAttrs((1, 2, 8)), [(1, 4, 4)], (1, 2, 8)),
    ("flatten", FlattenAttrs(1), [(2, 3, 4, 5)], (2, 60)),
    ("transpose", TransposeAttrs((0, 2, 3, 1)), [(1, 3, 4, 5)], (1, 4, 5, 3)),
    ("transpose", TransposeAttrs(), [(2, 3, 4)], (4, 3, 2)),
    ("pad", PadAttrs((0, 0, 1, 2, 0, 0, 3, 4)), [(1, 2, 5, 5)], (1, 2, 9, 11)),
    ("resize", ResizeAttrs((14, 28)), [(1, 2, 7, 7)], (1, 2, 14, 28)),
    ("reducemean", ReduceAttrs((1,), keepdims=False), [(2, 3, 4)], (2, 4)),
    ("reducemean", ReduceAttrs((-1,)), [(2, 3, 4)], (2, 3, 1)),
    ("relu", None, [(3, 5)], (3, 5)),
])
def test_single_op_shapes(op, attrs, ins, out):
    assert _one(op, attrs, *ins) == (out,)


def test_split_gives_one_output_per_size():
    assert _one("split", SplitAttrs(axis=1, sizes=(2, 6)), (1, 8, 4, 4)) == (
        (1, 2, 4, 4), (1, 6, 4, 4))


@pytest.mark.parametrize("op,attrs,ins,match", [
    ("conv", ConvAttrs(8, groups=3), [(1, 4, 8, 8)], "divisible by groups"),
    ("dwconv", ConvAttrs(8, groups=2), [(1, 8, 8, 8)], "must equal input channels"),
    ("conv", ConvAttrs(8, (5, 5), pads=(0, 0, 0, 0)), [(1, 3, 3, 3)], "empty output"),
    ("conv", ConvAttrs(8), [(1, 3, 8)], "rank-4"),
    ("split", SplitAttrs(axis=1, sizes=(2, 2)), [(1, 8, 4, 4)], "do not add up"),
    ("reshape", ReshapeAttrs((3, 3)), [(1, 8)], "cannot reshape"),
    ("concat", ConcatAttrs(axis=1), [(1, 3, 4, 4), (1, 5, 4, 5)], "differ outside"),
    ("matmul", MatMulAttrs(), [(2, 3), (4, 5)], "does not fit"),
    ("channelshuffle", ChannelShuffleAttrs(3), [(1, 8, 4, 4)], "not divisible"),
    ("pad", PadAttrs((1, 1)), [(1, 2, 5, 5)], "pads for a rank-4"),
    ("transpose", TransposeAttrs((0, 1)), [(1, 2, 3)], "does not fit"),
    ("add", EltwiseAttrs(), [(1, 8)], "two operands"),
])
def test_bad_shapes_raise_with_the_node_named(op, attrs, ins, match):
    with pytest.raises(ShapeInferenceError, match=match):
        _one(op, attrs, *ins)


def test_unknown_keeps_recorded_shapes_or_complains():
    g = ModelGraph()
    g.add_input("x", (1, 4))
    g.add_node("u", "unknown", UnknownAttrs("onnx:Elu"), ["x"], output_shapes=[(1, 4)])
    g.add_node("v", "unknown", UnknownAttrs("onnx:Foo"), ["u"])
    g.set_outputs(["v"])
    with pytest.raises(ShapeInferenceError, match="no recorded output shape"):
        infer_shapes(g)


def test_infer_shapes_fills_input_shapes_too():
    g = ModelGraph()
    g.add_input("x", (1, 3, 8, 8))
    g.add_node("c", "conv", ConvAttrs(4), ["x"])
    g.add_node("r", "relu", None, ["c"])
    g.set_outputs(["r"])
    infer_shapes(g)
    assert g["r"].input_shapes == ((1, 4, 8, 8),)
    assert g["c"].input_shapes == ((1, 3, 8, 8),)

"""Tests of the cost metrics against values computed by hand."""

from __future__ import annotations

import pytest

from nnmeter.ir import GraphBuilder, ModelGraph
from nnmeter.ir.cost import bytes_per_element, graph_cost, node_cost
from nnmeter.ir.ops import LRNAttrs, MatMulAttrs, UnknownAttrs


def test_conv_with_bias():
    b = GraphBuilder("c", (1, 3, 8, 8))
    g = b.build([b.conv(b.x, 4, 3, name="c")])
    c = node_cost(g["c"])
    weights = 4 * 3 * 3 * 3
    assert c.params == c.stored_weights == weights + 4
    assert c.macs == weights * 8 * 8 and c.flops == 2 * c.macs
    assert c.input_elements == 3 * 64 and c.output_elements == 4 * 64
    assert c.bytes_read == 4 * 3 * 64 and c.bytes_written == 4 * 4 * 64
    assert c.bytes_weights == 4 * (weights + 4)
    assert c.memory_bytes == c.bytes_read + c.bytes_weights + c.bytes_written


def test_dwconv_grouped_conv_and_convtranspose():
    b = GraphBuilder("c", (2, 8, 6, 6))
    d = b.dwconv(b.x, 3, bias=False, name="dw")
    gc = b.conv(d, 16, 1, groups=4, bias=False, name="gc")
    ct = b.convtranspose(gc, 4, 3, 2, bias=False, name="ct")
    g = b.build([ct])
    assert node_cost(g["dw"]).params == 8 * 9
    assert node_cost(g["dw"]).macs == 8 * 9 * 6 * 6 * 2
    assert node_cost(g["gc"]).params == 16 * 2
    assert node_cost(g["gc"]).macs == 16 * 2 * 6 * 6 * 2
    # convtranspose: every input pixel scatters a C_out/groups × k × k window
    assert node_cost(g["ct"]).params == 16 * 4 * 9
    assert node_cost(g["ct"]).macs == 16 * 4 * 9 * 6 * 6 * 2


def test_fc_matmul_bn_layernorm_and_const_eltwise():
    b = GraphBuilder("f", (2, 5, 6))
    fc = b.fc(b.x, 4, name="fc")
    ln = b.layernorm(fc, name="ln")
    mm = b.add("matmul", [ln, b.input("w", (4, 3))], MatMulAttrs(), name="mm")
    sc = b.eltwise_const("mul", mm, (3,), name="sc")
    g = b.build([sc])
    assert node_cost(g["fc"]).macs == 2 * 5 * 6 * 4 and node_cost(g["fc"]).params == 28
    assert node_cost(g["ln"]).params == 8 and node_cost(g["ln"]).flops == 8 * 40
    assert node_cost(g["mm"]).macs == 2 * 5 * 3 * 4 and node_cost(g["mm"]).params == 0
    assert node_cost(g["sc"]).params == 3 and node_cost(g["sc"]).flops == 30
    b2 = GraphBuilder("b", (1, 16, 4, 4))
    g2 = b2.build([b2.bn(b2.x, name="bn")])
    c = node_cost(g2["bn"])
    assert (c.params, c.stored_weights, c.flops) == (32, 64, 2 * 256)


def test_pools_activations_and_data_movement():
    b = GraphBuilder("p", (1, 2, 4, 4))
    mp = b.maxpool(b.x, 2, name="mp")
    ap = b.avgpool(mp, 2, name="ap")
    gp = b.gap(b.x, name="gp")
    hs = b.hswish(b.x, name="hs")
    sw = b.swish(b.x, name="sw")
    r = b.reshape(hs, (1, 32), name="r")
    lrn = b.add("lrn", [b.x], LRNAttrs(size=5), name="lrn")
    g = b.build([ap, gp, sw, r, lrn])
    assert node_cost(g["mp"]).flops == 8 * 4
    assert node_cost(g["ap"]).flops == 2 * 4 + 2
    assert node_cost(g["gp"]).flops == 32 + 2
    assert node_cost(g["hs"]).flops == 4 * 32
    assert node_cost(g["sw"]).flops == 5 * 32
    assert node_cost(g["r"]).flops == 0
    assert node_cost(g["lrn"]).flops == (2 * 5 + 3) * 32


def test_input_costs_nothing_and_dtype_sets_bytes():
    g = GraphBuilder("i", (1, 4), dtype="float16").build()
    c = node_cost(g["input"], "float16")
    assert c.memory_bytes == 0 and c.flops == 0
    assert bytes_per_element("float16") == 2 and bytes_per_element("int8") == 1


def test_graph_totals_and_unknown_flagged():
    b = GraphBuilder("t", (1, 3, 8, 8))
    y = b.conv(b.x, 4, 3, bias=False, name="c")
    y = b.relu(y, name="r")
    g = b.graph
    g.add_node("u", "unknown", UnknownAttrs("onnx:Elu"), [y],
               input_shapes=[(1, 4, 8, 8)], output_shapes=[(1, 4, 8, 8)])
    g.set_outputs(["u"])
    total = graph_cost(g)
    assert total.macs == 6912 and total.params == 108
    assert total.flops == 2 * 6912 + 256
    assert total.unknown_nodes == ("u",)
    assert total.as_dict()["unknown_nodes"] == ["u"]
    assert total.memory_bytes == sum(node_cost(n).memory_bytes for n in g.nodes())


def test_graph_cost_needs_shapes():
    g = ModelGraph()
    g.add_input("x", (1, 4))
    g.add_node("r", "relu", None, ["x"])
    with pytest.raises(ValueError, match="infer_shapes"):
        graph_cost(g)


def test_an_unknown_op_counts_the_multiply_adds_its_frontend_knows():
    g = ModelGraph()
    x = g.add_input("x", (1, 4, 8, 16))
    plain = g.add_node("u0", "unknown", UnknownAttrs("tflite:GATHER"), [x],
                       output_shapes=[(1, 4, 8, 16)])
    known = g.add_node("u1", "unknown", UnknownAttrs(
        "tflite:BATCH_MATMUL", {"macs": 4 * 8 * 16 * 32, "weights": 32 * 16}), [x],
        output_shapes=[(1, 4, 8, 32)])
    assert node_cost(plain).flops == 0 and node_cost(plain).params == 0
    c = node_cost(known)
    assert c.macs == 4 * 8 * 16 * 32 and c.flops == 2 * c.macs
    assert c.params == c.stored_weights == 32 * 16
    # the constant operand is read like a weight
    assert c.bytes_weights == 4 * 32 * 16 and node_cost(plain).bytes_weights == 0

"""Transformer kernel types: configs read off real layer graphs, closed-form costs equal
to the built graphs', names of the fused sequences."""

from __future__ import annotations

import pytest

from nnmeter.errors import NNMeterError
from nnmeter.ir import GraphBuilder
from nnmeter.ir.ops import MatMulAttrs
from nnmeter.kernels import KERNEL_TYPES, kernel_cost, kernel_from_nodes, kernel_type_of


def _attention(L=10, D=16, heads=2):
    """q @ k^T * scale -> softmax -> @ v over (1, heads, L, dh), then layer norm."""
    dh = D // heads
    b = GraphBuilder("attn", (1, L, D))
    q = b.transpose(b.reshape(b.fc(b.x, D, name="q"), (1, L, heads, dh)), (0, 2, 1, 3))
    k = b.transpose(b.reshape(b.fc(b.x, D, name="k"), (1, L, heads, dh)), (0, 2, 3, 1))
    v = b.transpose(b.reshape(b.fc(b.x, D, name="v"), (1, L, heads, dh)), (0, 2, 1, 3))
    s = b.add("matmul", [q, k], MatMulAttrs(), name="scores")
    s = b.eltwise_const("mul", s, (1,), name="scale")
    p = b.softmax(s, name="sm")
    c = b.add("matmul", [p, v], MatMulAttrs(), name="context")
    y = b.fc(b.reshape(b.transpose(c, (0, 2, 1, 3)), (1, L, D)), D, name="o")
    y = b.layernorm(b.add_(y, b.x, name="res"), name="ln")
    return b.build([y])


def test_configs_read_off_an_attention_layer():
    g = _attention(L=10, D=16, heads=2)
    scores = kernel_from_nodes(g, ["scores", "scale"])
    assert scores.type == "matmul-scale"
    assert (scores.config.batch, scores.config.m, scores.config.k, scores.config.n) == \
        (2, 10, 8, 10)
    context = kernel_from_nodes(g, ["context"])
    assert context.type == "matmul" and context.config.n == 8 and context.config.b_batched
    sm = kernel_from_nodes(g, ["sm"])
    assert sm.type == "softmax" and (sm.config.rows, sm.config.d) == (20, 10)
    ln = kernel_from_nodes(g, ["res", "ln"])
    assert ln.type == "add-layernorm" and (ln.config.rows, ln.config.d) == (10, 16)


def test_a_matmul_with_a_non_scalar_product_is_not_a_scaled_matmul():
    b = GraphBuilder("m", (2, 4, 8))
    y = b.add("matmul", [b.x, b.input("w", (2, 8, 4))], MatMulAttrs(), name="mm")
    y = b.eltwise_const("mul", y, (2, 4, 4), name="mask")
    k = kernel_from_nodes(b.build([y]), ["mm", "mask"])
    assert k.type == "other"


def test_softmax_over_another_axis_is_other():
    b = GraphBuilder("s", (1, 4, 6))
    g = b.build([b.softmax(b.x, axis=1, name="sm")])
    assert kernel_from_nodes(g, ["sm"]).type == "other"


@pytest.mark.parametrize("name,config", [
    ("matmul", dict(batch=3, m=17, k=64, n=17)),
    ("matmul", dict(batch=1, m=197, k=192, n=576, b_batched=False)),
    ("matmul-scale", dict(batch=12, m=128, k=64, n=128)),
    ("softmax", dict(rows=12 * 128, d=128)),
    ("layernorm", dict(rows=197, d=384)),
    ("add-layernorm", dict(rows=128, d=768)),
])
def test_closed_form_cost_equals_the_built_graph(name, config):
    kt = KERNEL_TYPES.get(name)
    cfg = kt.config_cls(**config)
    assert kt.analytic_cost(cfg) == kernel_cost(kt.build_graph(cfg))
    assert kt.config_from_dict(kt.config_to_dict(cfg)) == cfg
    assert len(kt.features(cfg)) == len(kt.feature_names)


def test_single_kernel_graphs_read_back_as_their_own_type():
    for name, cfg in [("matmul-scale", dict(batch=2, m=5, k=4, n=5)),
                      ("add-layernorm", dict(rows=6, d=8)), ("softmax", dict(rows=3, d=7))]:
        kt = KERNEL_TYPES.get(name)
        g = kt.build_graph(kt.config_cls(**cfg))
        names = [n.name for n in g.topological_nodes() if n.op != "input"]
        k = kernel_from_nodes(g, names)
        assert (k.type, k.config) == (name, kt.config_cls(**cfg))


def test_names_of_fused_sequences():
    assert kernel_type_of(("matmul", "mul")) == "matmul-scale"
    assert kernel_type_of(("matmul", "div")) == "matmul-scale"
    assert kernel_type_of(("add", "layernorm")) == "add-layernorm"
    assert kernel_type_of(("layernorm",)) == "layernorm"
    assert kernel_type_of(("matmul", "softmax")) == "other"


def test_a_config_of_the_wrong_type_is_refused():
    with pytest.raises(TypeError, match="RowsConfig"):
        KERNEL_TYPES.get("softmax").features(KERNEL_TYPES.get("matmul").config_cls(1, 2, 3, 4))
    with pytest.raises((NNMeterError, ValueError)):
        KERNEL_TYPES.get("matmul").build_graph(KERNEL_TYPES.get("matmul").config_cls(1, 0, 3, 4))


def test_a_split_of_the_last_axis_of_tokens_is_split_last():
    b = GraphBuilder("qkv", (1, 10, 48))
    g = b.build(b.split(b.x, (16, 16, 16), axis=-1, name="qkv"))
    k = kernel_from_nodes(g, ["qkv"])
    assert k.type == "split-last" and (k.config.rows, k.config.sizes) == (10, (16, 16, 16))
    kt = k.kernel_type
    assert kt.analytic_cost(k.config) == kernel_cost(kt.build_graph(k.config))
    # a channel split keeps its own type; a split of H is neither
    b = GraphBuilder("c", (1, 8, 4, 4))
    g = b.build(b.split(b.x, (4, 4), axis=1, name="s"))
    assert kernel_from_nodes(g, ["s"]).type == "split"
    b = GraphBuilder("h", (1, 8, 4, 4))
    g = b.build(b.split(b.x, (2, 2), axis=2, name="s"))
    assert kernel_from_nodes(g, ["s"]).type == "other"

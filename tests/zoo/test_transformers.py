"""The opt-in transformer families (vit, bert, mobilevit): published sizes, sampling,
their place outside the default family list, and export to ONNX and TFLite."""

from __future__ import annotations

import collections
import importlib.util

import numpy as np
import pytest

from nnmeter import zoo
from nnmeter.ir.builder import GraphBuilder
from nnmeter.zoo import (
    FAMILIES, FAMILY_NAMES, TRANSFORMER_FAMILIES, default_family_names, get_family,
    get_variant, sample_variants,
)
from nnmeter.zoo.bert import BERTConfig
from nnmeter.zoo.mobilevit import MobileViTConfig, _fold, _unfold
from nnmeter.zoo.vit import ViTConfig

# (family, preset or None for the base config, params, multiply-adds or None) as
# published: timm's deit/vit_*_patch16_224 (5,717,416 / 22,050,664 / 86,567,656 params;
# 1.3 / 4.6 / 17.6 GMACs), BERT-base's 12 encoder layers (85,054,464 params, without
# embedding tables and pooler), timm's mobilevit_xxs/xs/s (1.27 / 2.32 / 5.58 M params;
# 0.4 / 1.1 / 2.0 GMACs at 256, rounded on the model cards: no MACs bound for them).
PUBLISHED = [
    ("vit", None, 5_717_416, 1.26e9),
    ("vit", "vit_small_patch16_224", 22_050_664, 4.6e9),
    ("vit", "vit_base_patch16_224", 86_567_656, 17.6e9),
    ("bert", "bert_base", 85_054_464, None),
    ("mobilevit", None, 1.27e6, None),
    ("mobilevit", "mobilevit_xs", 2.32e6, None),
    ("mobilevit", "mobilevit_s", 5.58e6, None),
]


def _ops(graph) -> collections.Counter:
    return collections.Counter(n.op for n in graph.nodes())


def _tiny(family: str):
    """A few-node config of each family, for the slow exporters."""
    return {
        "vit": ViTConfig(resolution=64, patch=16, dim=64, depth=1, heads=2, mlp_hidden=128,
                         num_classes=10),
        "bert": BERTConfig(seq_len=16, hidden=64, layers=1, heads=2, intermediate=256),
        "mobilevit": MobileViTConfig(
            resolution=64, mv2_blocks=((3, 32, 16, 1, False, "swish"),),
            vit_stages=((32, 24, 32, 1, 64),), last_channels=32, num_classes=10),
    }[family]


def test_transformer_families_are_registered_but_opt_in():
    assert set(TRANSFORMER_FAMILIES) <= set(FAMILIES.names())
    assert not set(TRANSFORMER_FAMILIES) & set(FAMILY_NAMES)
    assert not set(TRANSFORMER_FAMILIES) & set(default_family_names())
    assert sorted(default_family_names()) == sorted(FAMILY_NAMES)
    for name in TRANSFORMER_FAMILIES:
        assert get_family(name).name == name
        assert get_variant(name).family == name


def test_zoo_list_shows_transformers_only_with_all(capsys):
    import json

    from nnmeter.cli import main

    assert main(["zoo", "list", "--json"]) == 0
    default = {r["family"] for r in json.loads(capsys.readouterr().out)}
    assert default == set(FAMILY_NAMES)
    assert main(["zoo", "list", "--all", "--json"]) == 0
    every = {r["family"] for r in json.loads(capsys.readouterr().out)}
    assert every == set(FAMILY_NAMES) | set(TRANSFORMER_FAMILIES)


@pytest.mark.parametrize("family", TRANSFORMER_FAMILIES)
def test_base_and_presets_build_and_validate(family):
    fam = get_family(family)
    assert fam.reference["source"] and fam.ranges
    for name, config in fam.presets().items():
        graph = fam.build(config)
        graph.validate()
        assert get_variant(name).config == config
    cost = fam.build(fam.base_config()).cost()
    assert cost.params == pytest.approx(fam.reference["params"], rel=0.01)
    assert cost.macs == pytest.approx(fam.reference["macs"], rel=0.05)


@pytest.mark.parametrize("family,preset,params,macs", PUBLISHED,
                         ids=[p[1] or p[0] for p in PUBLISHED])
def test_published_sizes(family, preset, params, macs):
    fam = get_family(family)
    graph = fam.build(fam.presets()[preset] if preset else fam.base_config())
    cost = graph.cost()
    # the class token folded into the position embedding, the attention-scale
    # scalars and BERT's embedding layernorm move these counts by < 0.01 %
    assert cost.params == pytest.approx(params, rel=0.005)
    if macs is not None:
        assert cost.macs == pytest.approx(macs, rel=0.03)


def test_vit_tiny_shapes_follow_the_paper():
    g = get_family("vit").build(ViTConfig())
    assert g.shape_of("patch_embed.to_tokens") == (1, 196, 192)
    assert g.shape_of("pos_embed") == (1, 197, 192)
    assert g.shape_of("blocks.0.attn.scores") == (1, 3, 197, 197)
    assert g.shape_of("blocks.0.attn.k_t") == (1, 3, 64, 197)
    assert g["blocks.0.attn.softmax"].attrs.axis == -1
    ops = _ops(g)
    assert ops["matmul"] == 24 and ops["softmax"] == 12 and ops["layernorm"] == 25
    assert ops["gelu"] == 12


def test_bert_is_post_norm_with_separate_qkv():
    g = get_family("bert").build(BERTConfig())
    assert g.shape_of(g.input_names[0]) == (1, 128, 256)
    node = g["encoder.layer.0.norm1"]
    assert g[node.inputs[0].node].op == "add"
    assert {"encoder.layer.0.attn.query", "encoder.layer.0.attn.key",
            "encoder.layer.0.attn.value"} <= set(g.nx)
    assert g.shape_of("encoder.layer.0.attn.scores") == (1, 4, 128, 128)


def test_mobilevit_attends_over_patch_token_sets():
    g = get_family("mobilevit").build(MobileViTConfig())
    # stage 0 runs at 32x32 with D 64: 4 token sets of 256 tokens
    assert g.shape_of("stage0.mobilevit.unfold.merge") == (4, 256, 64)
    assert g.shape_of("stage0.mobilevit.transformer.0.attn.scores") == (4, 4, 256, 256)
    assert g.shape_of("stage0.mobilevit.fold.merge") == (1, 64, 32, 32)
    with pytest.raises(ValueError, match="multiple of 64"):
        get_family("mobilevit").build(MobileViTConfig(resolution=224))


@pytest.mark.parametrize("family", TRANSFORMER_FAMILIES)
def test_sampling_is_deterministic_distinct_and_valid(family):
    a = sample_variants(family, 12, seed=3)
    assert a == sample_variants(family, 12, seed=3)
    assert len({v.config_hash for v in a}) == 12
    assert a != sample_variants(family, 12, seed=4)
    assert get_variant(a[5].name) == a[5]
    macs = []
    for v in a:
        g = v.build(validate=True)
        macs.append(g.cost().macs)
    assert max(macs) > 3 * min(macs)


def test_sampled_configs_stay_in_their_ranges():
    rng = np.random.default_rng(0)
    vit, bert = get_family("vit"), get_family("bert")
    for _ in range(30):
        c = vit.sample(rng)
        assert c.dim in (192, 256, 320, 384) and c.dim // c.heads in (32, 64)
        assert 4 <= c.depth <= 12 and c.mlp_hidden // c.dim in (2, 3, 4)
        assert c.patch in (16, 32) and c.resolution in (160, 192, 224)
        b = bert.sample(rng)
        assert b.hidden in (128, 256, 384, 512, 768) and b.hidden // b.heads == 64
        assert 2 <= b.layers <= 12 and b.intermediate == 4 * b.hidden
        assert b.seq_len in (32, 64, 128, 256, 384, 512)


def _run_onnx(path, graph):
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    sess = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
    x = np.random.default_rng(0).random(graph.shape_of(graph.input_names[0]),
                                        dtype=np.float32)
    return x, sess.run(None, {sess.get_inputs()[0].name: x})[0]


@pytest.mark.integration
@pytest.mark.parametrize("family", TRANSFORMER_FAMILIES)
def test_onnx_export_runs_and_round_trips(family, tmp_path):
    from nnmeter.exporters.onnx import export_onnx
    from nnmeter.frontends import load_model

    small = min(sample_variants(family, 8, seed=0), key=lambda v: v.build().cost().macs)
    for v in (zoo.base_variant(family), small):
        g = v.build(validate=True)
        path = export_onnx(g, tmp_path / f"{v.name}.onnx", seed=0)
        _, out = _run_onnx(path, g)
        assert out.shape == g.shape_of(g.outputs[0])
        assert np.isfinite(out).all()
        back = load_model(path)
        back.validate()
        assert _ops(back) == _ops(g)
        assert back.cost().params == g.cost().params
        assert back.cost().macs == g.cost().macs


@pytest.mark.integration
def test_unfold_then_fold_is_the_identity(tmp_path):
    from nnmeter.exporters.onnx import export_onnx

    b = GraphBuilder("fold", (1, 8, 6, 4))
    y = _fold(b, _unfold(b, b.x, 2, "unfold"), 6, 4, 2, "fold")
    g = b.build([y])
    assert g.shape_of("unfold.merge") == (4, 6, 8)
    x, out = _run_onnx(export_onnx(g, tmp_path / "fold.onnx"), g)
    np.testing.assert_array_equal(out, x)
    # token set (i, j) holds pixel (2r + i, 2c + j) of every channel, as ml-cvnets unfolds
    b = GraphBuilder("unfold", (1, 8, 6, 4))
    g = b.build([_unfold(b, b.x, 2, "unfold")])
    x, tokens = _run_onnx(export_onnx(g, tmp_path / "unfold.onnx"), g)
    np.testing.assert_array_equal(tokens[1, 3, :], x[0, :, 2, 3])  # set (0, 1), token (1, 1)


@pytest.mark.integration
@pytest.mark.skipif(importlib.util.find_spec("ai_edge_litert") is None,
                    reason="ai_edge_litert is not installed")
def test_tiny_variants_export_to_tflite_and_run(tmp_path, runs_as_tflite):
    from ai_edge_litert.interpreter import Interpreter

    from nnmeter.exporters.tflite import export_tflite

    for family in TRANSFORMER_FAMILIES:
        g = get_family(family).build(_tiny(family))
        g.validate()
        runs_as_tflite(g, family)

    # the rank-4 reshapes of unfold and fold keep their meaning in the file, whichever
    # layout the exporter gives the rank-4 input and output (tensor_layouts)
    from nnmeter.exporters.tflite import tensor_layouts

    b = GraphBuilder("fold", (1, 8, 6, 4))
    tokens = _unfold(b, b.x, 2, "unfold")
    g = b.build([_fold(b, b.relu(tokens), 6, 4, 2, "fold"), tokens])
    layouts = tensor_layouts(g)
    from nnmeter.ir.graph import Ref

    nhwc_in = layouts.get(Ref(g.input_names[0], 0)) == "NHWC"
    interp = Interpreter(model_path=str(export_tflite(g, tmp_path / "fold.tflite")),
                         num_threads=1)
    interp.allocate_tensors()
    x = np.random.default_rng(0).standard_normal((1, 8, 6, 4)).astype(np.float32)
    interp.set_tensor(interp.get_input_details()[0]["index"],
                      x.transpose(0, 2, 3, 1).copy() if nhwc_in else x)
    interp.invoke()
    outs = {o.ndim: o for o in (interp.get_tensor(d["index"])
                                for d in interp.get_output_details())}
    nhwc_out = layouts.get(g.outputs[0]) == "NHWC"
    np.testing.assert_array_equal(outs[4].transpose(0, 3, 1, 2) if nhwc_out else outs[4],
                                  np.maximum(x, 0))
    np.testing.assert_array_equal(outs[3][1, 3], x[0, :, 2, 3])

"""Transformer architectures exported by torch.onnx (TorchScript exporter, opset 17)
import into the IR with no unknown node, every op canonical and every shape static.

The models are Hugging Face ``transformers`` architectures built from tiny configs
(random weights, nothing downloaded) and ``torch.nn.TransformerEncoderLayer``; torch
and transformers are optional, so the tests skip without them.
"""

from __future__ import annotations

import collections
import math
import warnings

import pytest

torch = pytest.importorskip("torch")
T = pytest.importorskip("transformers")

from nnmeter.frontends.onnx import load_onnx  # noqa: E402

SEQ, HIDDEN, LAYERS = 16, 32, 2
_TEXT = dict(vocab_size=100, num_hidden_layers=LAYERS, num_attention_heads=2,
             hidden_size=HIDDEN, intermediate_size=64, max_position_embeddings=64)
_VISION = dict(image_size=32, patch_size=8, num_hidden_layers=LAYERS, num_attention_heads=2,
               hidden_size=HIDDEN, intermediate_size=64)


class _Hidden(torch.nn.Module):
    """The first output of ``model`` called with ``name=x``: HF models take keyword
    inputs, which the TorchScript exporter does not pass through."""

    def __init__(self, model: torch.nn.Module, name: str) -> None:
        super().__init__()
        self.model, self.name = model, name

    def forward(self, x):
        if self.name == "src":
            return self.model(x, is_causal=False)
        return self.model(**{self.name: x}, return_dict=False)[0]


def _ids():
    return torch.randint(0, 100, (1, SEQ), generator=torch.Generator().manual_seed(0))


def _img(size: int = 32):
    return torch.randn(1, 3, size, size, generator=torch.Generator().manual_seed(0))


_MODELS = {
    "bert": (lambda: T.BertModel(T.BertConfig(**_TEXT), add_pooling_layer=False),
             _ids, "input_ids"),
    "distilbert": (lambda: T.DistilBertModel(T.DistilBertConfig(
        vocab_size=100, n_layers=LAYERS, n_heads=2, dim=HIDDEN, hidden_dim=64,
        max_position_embeddings=64)), _ids, "input_ids"),
    "roberta": (lambda: T.RobertaModel(T.RobertaConfig(**_TEXT), add_pooling_layer=False),
                _ids, "input_ids"),
    "vit": (lambda: T.ViTModel(T.ViTConfig(**_VISION), add_pooling_layer=False),
            _img, "pixel_values"),
    "deit": (lambda: T.DeiTModel(T.DeiTConfig(**_VISION), add_pooling_layer=False),
             _img, "pixel_values"),
    "swin": (lambda: T.SwinModel(T.SwinConfig(image_size=32, patch_size=2, embed_dim=16,
                                              depths=[1, 1], num_heads=[1, 2],
                                              window_size=4)), _img, "pixel_values"),
    "convnext": (lambda: T.ConvNextModel(T.ConvNextConfig(hidden_sizes=[8, 16, 24, 32],
                                                          depths=[1, 1, 1, 1])),
                 _img, "pixel_values"),
    "encoder_layer": (lambda: torch.nn.TransformerEncoderLayer(
        HIDDEN, 2, 64, dropout=0.0, activation="gelu", batch_first=True, norm_first=True),
        lambda: torch.randn(1, SEQ, HIDDEN), "src"),
}


def _export(tmp_path_factory, name: str, opset: int = 17):
    build, example, input_name = _MODELS[name]
    torch.manual_seed(0)
    model = _Hidden(build().eval(), input_name)
    path = tmp_path_factory.mktemp("tf") / f"{name}-{opset}.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, (example(),), str(path), opset_version=opset, dynamo=False,
                          input_names=[input_name])
    return load_onnx(path)


@pytest.fixture(scope="module")
def graphs(tmp_path_factory):
    torch.set_num_threads(1)
    return _Graphs(tmp_path_factory)


class _Graphs(dict):
    def __init__(self, factory) -> None:
        super().__init__()
        self.factory = factory

    def __missing__(self, key):
        name, _, opset = key.partition("@")
        g = _export(self.factory, name, int(opset or 17))
        self[key] = g
        return g


def _ops(g) -> collections.Counter:
    return collections.Counter(n.op for n in g.nodes())


def _outputs(g) -> list[tuple[int, ...]]:
    return [g.shape_of(r) for r in g.outputs]


# name: (layernorm, softmax, gelu, matmul, output shape)
_EXPECTED = {
    "bert": (1 + 2 * LAYERS, LAYERS, LAYERS, 2 * LAYERS, (1, SEQ, HIDDEN)),
    "distilbert": (1 + 2 * LAYERS, LAYERS, LAYERS, 2 * LAYERS, (1, SEQ, HIDDEN)),
    "roberta": (1 + 2 * LAYERS, LAYERS, LAYERS, 2 * LAYERS, (1, SEQ, HIDDEN)),
    "vit": (1 + 2 * LAYERS, LAYERS, LAYERS, 2 * LAYERS, (1, 17, HIDDEN)),
    "deit": (1 + 2 * LAYERS, LAYERS, LAYERS, 2 * LAYERS, (1, 18, HIDDEN)),
    "encoder_layer": (2, 1, 1, 2, (1, SEQ, HIDDEN)),
}


@pytest.mark.parametrize("name", sorted(_EXPECTED))
def test_transformer_imports_without_unknown_nodes(graphs, name):
    g = graphs[name]
    ops = _ops(g)
    assert not g.unknown_ops(), g.unknown_ops()
    ln, sm, gelu, mm, out = _EXPECTED[name]
    assert (ops["layernorm"], ops["softmax"], ops["gelu"], ops["matmul"]) == (ln, sm, gelu, mm)
    assert _outputs(g) == [out]
    # every projection is an fc with constant weights, over the last axis
    assert all(n.output_shape[-1] == n.attrs.out_features for n in g.nodes() if n.op == "fc")
    # the attention scale is a mul or div by a scalar constant (the IR's constant operand)
    scales = [n for n in g.nodes() if n.op in ("mul", "div") and n.attrs.const_shape is not None]
    assert scales and all(math.prod(n.attrs.const_shape) == 1 for n in scales)


def test_text_models_take_embedding_lookups_as_float_inputs(graphs):
    bert = graphs["bert"]
    inputs = [n for n in bert.nodes() if n.op == "input"]
    # input_ids is read by the word-embedding lookup only; token types and positions
    # come from buffers and fold into the constant operand of an add
    assert [(n.output_shape, n.attrs.dtype) for n in inputs] == [((1, SEQ, HIDDEN), "float32")]
    assert inputs[0].meta["embedding_lookup"]["table_shape"] == [100, HIDDEN]
    assert bert.meta["embedding_inputs"] == [inputs[0].name]
    # RoBERTa's position and token-type ids are computed from input_ids: three lookups
    roberta = graphs["roberta"]
    assert sorted(n.source["name"].split("/")[-2] for n in roberta.nodes() if n.op == "input") \
        == ["position_embeddings", "token_type_embeddings", "word_embeddings"]


def test_class_tokens_are_a_pad_of_the_sequence_axis(graphs):
    for name, tokens in (("vit", 1), ("deit", 2)):
        pads = [n for n in graphs[name].nodes() if n.op == "pad"]
        assert len(pads) == 1
        assert pads[0].attrs.pads == (0, tokens, 0, 0, 0, 0)
        assert pads[0].input_shapes == ((1, 16, HIDDEN),)
        assert pads[0].meta["const_concat"]["shapes"] == [[1, 1, HIDDEN]] * tokens


def test_packed_qkv_gathers_share_one_split(graphs):
    g = graphs["encoder_layer"]
    splits = [n for n in g.nodes() if n.op == "split"]
    assert len(splits) == 1 and splits[0].attrs.sizes == (1, 1, 1)
    assert len(splits[0].output_shapes) == 3


def test_swin_patch_merging_and_shifts_map_to_splits(graphs):
    g = graphs["swin"]
    ops = _ops(g)
    assert not g.unknown_ops(), g.unknown_ops()
    assert (ops["layernorm"], ops["softmax"], ops["gelu"], ops["matmul"]) == (7, 2, 2, 4)
    assert ops["split"] >= 4 and ops["concat"] >= 1
    assert _outputs(g) == [(1, 64, 32)]


def test_convnext_gelu_and_layer_scale(graphs):
    g = graphs["convnext"]
    ops = _ops(g)
    assert not g.unknown_ops(), g.unknown_ops()
    assert (ops["layernorm"], ops["gelu"], ops["dwconv"]) == (8, 4, 4)
    assert _outputs(g) == [(1, 32, 1, 1)]


def test_decomposed_layernorm_of_older_opsets_is_one_layernorm(graphs):
    g = graphs["encoder_layer@14"]
    ops = _ops(g)
    assert not g.unknown_ops(), g.unknown_ops()
    assert ops["layernorm"] == 2 and ops["reducemean"] == 0 and "sqrt" not in ops
    assert ops["gelu"] == 1


class _TanhGelu(torch.nn.Module):
    def __init__(self, native: bool) -> None:
        super().__init__()
        self.native = native

    def forward(self, x):
        if self.native:
            return torch.nn.functional.gelu(x, approximate="tanh")
        # the order of products that GPT-2 style code (HF's gelu_new) writes
        return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi)
                                           * (x + 0.044715 * torch.pow(x, 3.0))))


@pytest.mark.parametrize("native", [True, False])
def test_tanh_gelu_is_one_gelu(tmp_path, native):
    path = tmp_path / "g.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(_TanhGelu(native), (torch.randn(1, 4, 8),), str(path),
                          opset_version=17, dynamo=False)
    g = load_onnx(path)
    assert [(n.op, n.output_shape) for n in g.nodes()][1:] == [("gelu", (1, 4, 8))]
    assert [n.meta.get("approximation") for n in g.nodes() if n.op == "gelu"] == ["tanh"]

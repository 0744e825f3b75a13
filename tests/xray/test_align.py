from nnmeter.xray.align import align_layers, blocks_of
from nnmeter.xray.instrument import Layer


def L(name, op, inputs=(), shape=(1, 4, 8, 8), **kw):
    return Layer(name, op, op.upper(), name, tuple(inputs), shape, "NCHW", "float32", **kw)


def onnx_like():
    layers = [L("x", "input", shape=(1, 3, 8, 8)), L("conv1", "conv", ["x"]),
              L("bn1", "bn", ["conv1"]), L("relu1", "relu", ["bn1"]),
              L("pool", "maxpool", ["relu1"], shape=(1, 4, 4, 4)),
              L("gap", "gap", ["pool"], shape=(1, 4, 1, 1)),
              L("flat", "flatten", ["gap"], shape=(1, 4)),
              L("fc", "fc", ["flat"], shape=(1, 5))]
    return {l.name: l for l in layers}


def tflite_like(names=True):
    n = (lambda s: s) if names else (lambda s: f"t{abs(hash(s)) % 1000}_{s[::-1]}")
    layers = [L("in", "input", shape=(1, 3, 8, 8)),
              L("q", "quantize", ["in"], shape=(1, 3, 8, 8)),
              L("pad", "pad", ["q"], shape=(1, 3, 10, 10)),
              L(n("relu1;bn1;conv1"), "conv", ["pad"]),
              L(n("pool"), "maxpool", [n("relu1;bn1;conv1")], shape=(1, 4, 4, 4)),
              L(n("gap"), "gap", [n("pool")], shape=(1, 4)),
              L(n("fc"), "fc", [n("gap")], shape=(1, 5)),
              L("deq", "dequantize", [n("fc")], shape=(1, 5))]
    return {l.name: l for l in layers}


def test_blocks_fold_bn_and_activation_and_skip_plumbing():
    blocks = blocks_of(onnx_like())
    assert [b.op for b in blocks.values()] == ["input", "conv", "maxpool", "gap", "fc"]
    conv = blocks["conv1"]
    assert conv.out == "relu1" and conv.members == ["conv1", "bn1", "relu1"]
    assert blocks["fc"].inputs == ("gap",)  # flatten looked through
    t = blocks_of(tflite_like())
    assert t["relu1;bn1;conv1"].inputs == ("in",)  # quantize + pad looked through


def test_align_by_name_maps_folded_conv_to_relu_output():
    al = align_layers(tflite_like(), onnx_like())
    got = {p.deployed: (p.reference, p.how) for p in al.pairs}
    assert got["relu1;bn1;conv1"] == ("relu1", "name")
    assert got["in"] == ("x", "input")
    assert got["gap"][0] == "gap"  # (1,4) aligned with (1,4,1,1)
    assert al.unaligned_deployed == [] and al.unaligned_reference == []


def test_align_by_structure_when_names_are_gone():
    al = align_layers(tflite_like(names=False), onnx_like())
    hows = {p.reference: p.how for p in al.pairs}
    assert hows["relu1"] == "structure" and hows["fc"] == "structure"
    assert len(al.pairs) == 5


def test_unalignable_layers_are_listed():
    ref = onnx_like()
    dep = tflite_like()
    dep["extra"] = L("extra", "softmax", ["fc"], shape=(1, 5))
    al = align_layers(dep, ref)
    assert al.unaligned_deployed == ["extra"]
    ref.pop("fc")
    al = align_layers(tflite_like(), ref)
    assert "fc" in al.unaligned_deployed

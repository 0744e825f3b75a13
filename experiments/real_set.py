"""The real-architecture set: models nobody in this project wrote, through other exporters.

nnmeter's own zoo is written by nnmeter and exported by nnmeter; a user's model is not.
This set holds architectures from other code, written to files by other tools:

- ``torch.onnx``: ~30 ImageNet CNNs from the pytorchcv model library (random weights,
  eval mode, the TorchScript exporter, opset 17): MobileNet V1/V2/V3, EfficientNet,
  RegNet, ResNet, ResNeXt, SE-ResNet, DenseNet, MnasNet, GhostNet, ShuffleNet V1/V2,
  SqueezeNet, VGG, Inception V3, Xception, ProxylessNAS, FBNet, MixNet, HarDNet,
  PeleeNet, IGCV3, DLA, DARTS, AlexNet.
- ``caffe2``: the onnx wheel's ``backend/test/data/light`` models (AlexNet, DenseNet-121,
  Inception V1/V2, ResNet-50, ShuffleNet, SqueezeNet, VGG-19, ZFNet-512; opset 9, with
  Dropout, LRN, BatchNormalization split into Mul/Add, ConstantOfShape weights).
- ``tflite-converter``: Keras applications (random weights) converted by the TFLite
  converter, for litert-cpu.

No design decision is made on this set: choices are made on the zoo and on a
development set of other pytorchcv architectures and widths (``--set dev``: ResNet-34,
RegNetX-400MF, ResNeXt-26, ShuffleNet g3, BN-Inception, VoVNet...; files under
``$XDG_CACHE_HOME/nnmeter/dev_set``), and this set scores them once per change.

Usage::

  python experiments/real_set.py build [--dir DIR]          # write the model files
  python experiments/real_set.py kernels --backend ort-cpu  # grouping against the runtime
  flock /tmp/nnmeter-measure.lock python experiments/real_set.py measure --backend ort-cpu
  python experiments/real_set.py report --backend ort-cpu [--json] [--session S]
  python experiments/real_set.py kernels --set dev --backend ort-cpu  # the development set

The transformer set (``--set transformers``; files under
``$XDG_CACHE_HOME/nnmeter/transformers_set``) holds Hugging Face architectures at their
published small sizes through the same exporter: BERT-mini/small, DistilBERT, RoBERTa,
ELECTRA-small, ALBERT-base (text, sequence length 128, the embedding lookups as float
inputs), ViT-tiny/small, DeiT-tiny, Swin-tiny, MobileViT-XS/XXS, ConvNeXt-tiny,
SegFormer-B0, LeViT-128S and PoolFormer-S12 (vision). For litert-cpu it also holds
keras-hub backbones (``keras-hub-*``, exporter ``tflite-converter``): the same kinds of
architecture written by another library, built from their constructors at published
sizes (random weights) and converted by the TFLite converter with static shapes:
BERT-mini/small, DistilBERT, RoBERTa-small, ALBERT-base, ELECTRA-small,
DeBERTa-v3-xsmall/small (text: int32 ``token_ids``, ``padding_mask`` and, where the
backbone takes them, ``segment_ids``, all (1, 128)), ViT-tiny/small, DeiT-tiny,
DINOv2-small, Swin-tiny and MiT-B0 (SegFormer's encoder) at 224 px. ``build --set
transformers --only tflite-converter`` writes only those. Its rows go to
``transformers.jsonl``.

``build`` needs the ``real`` extra (``pip install -e ".[real]"``: torch, pytorchcv,
transformers; then ``pip uninstall -y torchvision``, the CUDA build pytorchcv pulls in,
which breaks transformers' import; the keras-hub backbones also need `pip install --no-deps keras-hub==0.32.0`,
see setup.cfg)
and, for the .tflite files, the ``tensorflow`` extra;
files go to ``DIR`` (default ``$XDG_CACHE_HOME/nnmeter/real_set``) with a
``manifest.json`` and are not committed (hundreds of MB of random weights); they are
rebuilt the same way from the same seeds. ``measure`` appends one row per (model, pass)
to ``datasets/models/<backend>@<device>/real.jsonl`` as it goes, each with its session
(``--session``, default the start time; pass the same one to resume, and to measure the
zoo control beside it with ``--control``); ``report`` takes its truth from one session
only (the newest unless told), never the fastest over sessions hours apart.
``kernels`` compares, per model, the kernels nnmeter predicts with the nodes the
runtime reports executing (ORT's optimised graph and profile, OpenVINO's runtime model,
MNN's op callbacks) and writes ``experiments/results/real_set_kernels_<backend>.json``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

OUT = Path(__file__).resolve().parent / "results"


@dataclass(frozen=True)
class Entry:
    name: str          # file stem, unique in the set
    family: str        # architecture family (for per-family tables)
    exporter: str      # torch.onnx | caffe2 | tflite-converter
    source: str        # where the architecture comes from
    size: int = 224    # input resolution


#: (pytorchcv module, constructor, family)
_PYTORCHCV = [
    ("mobilenet", "mobilenet_w1", "mobilenetv1"),
    ("mobilenetv2", "mobilenetv2_w1", "mobilenetv2"),
    ("mobilenetv3", "mobilenetv3_large_w1", "mobilenetv3"),
    ("mobilenetv3", "mobilenetv3_small_w1", "mobilenetv3"),
    ("efficientnet", "efficientnet_b0", "efficientnet"),
    ("efficientnet", "efficientnet_b1", "efficientnet"),
    ("efficientnetedge", "efficientnet_edge_small_b", "efficientnet"),
    ("regnet", "regnetx002", "regnet"),
    ("regnet", "regnety004", "regnet"),
    ("resnet", "resnet18", "resnet"),
    ("resnet", "resnet50", "resnet"),
    ("resnext", "resnext50_32x4d", "resnext"),
    ("seresnet", "seresnet18", "resnet"),
    ("densenet", "densenet121", "densenet"),
    ("mnasnet", "mnasnet_b1", "mnasnet"),
    ("ghostnet", "ghostnet", "ghostnet"),
    ("shufflenetv2", "shufflenetv2_w1", "shufflenet"),
    ("shufflenet", "shufflenet_g1_w1", "shufflenet"),
    ("squeezenet", "squeezenet_v1_1", "squeezenet"),
    ("vgg", "vgg11", "vgg"),
    ("inceptionv3", "inceptionv3", "inception"),
    ("xception", "xception", "inception"),
    ("proxylessnas", "proxylessnas_mobile", "proxylessnas"),
    ("fbnet", "fbnet_cb", "nas"),
    ("mixnet", "mixnet_s", "nas"),
    ("spnasnet", "spnasnet", "nas"),
    ("darts", "darts", "nas"),
    ("hardnet", "hardnet39ds", "hardnet"),
    ("peleenet", "peleenet", "densenet"),
    ("igcv3", "igcv3_w1", "mobilenetv2"),
    ("dla", "dla34", "dla"),
    ("alexnet", "alexnet", "alexnet"),
]

_LIGHT = [("bvlc_alexnet", "alexnet"), ("densenet121", "densenet"),
          ("inception_v1", "inception"), ("inception_v2", "inception"),
          ("resnet50", "resnet"), ("shufflenet", "shufflenet"),
          ("squeezenet", "squeezenet"), ("vgg19", "vgg"), ("zfnet512", "alexnet")]

#: (keras.applications constructor, family)
_KERAS = [("MobileNet", "mobilenetv1"), ("MobileNetV2", "mobilenetv2"),
          ("MobileNetV3Small", "mobilenetv3"), ("MobileNetV3Large", "mobilenetv3"),
          ("EfficientNetB0", "efficientnet"), ("EfficientNetV2B0", "efficientnet"),
          ("ResNet50", "resnet"), ("ResNet50V2", "resnet"), ("DenseNet121", "densenet"),
          ("NASNetMobile", "nas"), ("ResNet101", "resnet"), ("DenseNet169", "densenet"),
          ("ConvNeXtTiny", "convnext"), ("InceptionV3", "inception"),
          ("Xception", "inception"), ("VGG16", "vgg")]


#: The development set: other pytorchcv architectures and widths, through the same
#: exporter. Design choices that need real models (how the runtime groups kernels) are
#: made on it, so that the set above stays held out.
_DEV_PYTORCHCV = [
    ("resnet", "resnet34", "resnet"), ("preresnet", "preresnet18", "resnet"),
    ("sepreresnet", "sepreresnet18", "resnet"), ("seresnet", "seresnet34", "resnet"),
    ("resnext", "resnext26_32x4d", "resnext"), ("regnet", "regnetx004", "regnet"),
    ("regnet", "regnety002", "regnet"), ("regnet", "regnetx006", "regnet"),
    ("mobilenetv2", "mobilenetv2_w3d4", "mobilenetv2"),
    ("mobilenetv3", "mobilenetv3_large_w3d4", "mobilenetv3"),
    ("mobilenetb", "mobilenetb_w1", "mobilenetv1"), ("fdmobilenet", "fdmobilenet_w1", "mobilenetv1"),
    ("efficientnet", "efficientnet_b2", "efficientnet"), ("mnasnet", "mnasnet_a1", "mnasnet"),
    ("mixnet", "mixnet_m", "nas"), ("proxylessnas", "proxylessnas_cpu", "proxylessnas"),
    ("densenet", "densenet169", "densenet"), ("hardnet", "hardnet68ds", "hardnet"),
    ("igcv3", "igcv3_w3d4", "mobilenetv2"), ("squeezenet", "squeezenet_v1_0", "squeezenet"),
    ("vgg", "vgg13", "vgg"), ("shufflenet", "shufflenet_g3_w1", "shufflenet"),
    ("shufflenetv2", "shufflenetv2_w2", "shufflenet"), ("menet", "menet108_8x1_g3", "shufflenet"),
    ("bninception", "bninception", "inception"), ("vovnet", "vovnet27s", "vovnet"),
    ("selecsls", "selecsls42b", "selecsls"), ("dla", "dla46c", "dla"),
]


#: The transformer set (``--set transformers``): Hugging Face ``transformers``
#: architectures at their published small sizes, random weights (seed 0), exported by
#: the TorchScript exporter like the CNNs. name: (model class, config class, config
#: fields, family, input: "text" or "image", sequence length or image size). Text
#: models read ``input_ids`` of shape (1, 128); vision models ``pixel_values``.
_HF: dict[str, tuple[str, str, dict, str, str, int]] = {
    "bert-mini": ("BertModel", "BertConfig", dict(
        num_hidden_layers=4, hidden_size=256, num_attention_heads=4,
        intermediate_size=1024), "bert", "text", 128),
    "bert-small": ("BertModel", "BertConfig", dict(
        num_hidden_layers=4, hidden_size=512, num_attention_heads=8,
        intermediate_size=2048), "bert", "text", 128),
    "distilbert-base": ("DistilBertModel", "DistilBertConfig", dict(), "bert", "text", 128),
    "roberta-small": ("RobertaModel", "RobertaConfig", dict(
        num_hidden_layers=4, hidden_size=512, num_attention_heads=8,
        intermediate_size=2048), "bert", "text", 128),
    "electra-small": ("ElectraModel", "ElectraConfig", dict(
        embedding_size=128, hidden_size=256, num_hidden_layers=12, num_attention_heads=4,
        intermediate_size=1024), "bert", "text", 128),
    "albert-base": ("AlbertModel", "AlbertConfig", dict(
        embedding_size=128, hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
        intermediate_size=3072), "bert", "text", 128),
    "vit-tiny": ("ViTModel", "ViTConfig", dict(
        hidden_size=192, num_hidden_layers=12, num_attention_heads=3,
        intermediate_size=768), "vit", "image", 224),
    "vit-small": ("ViTModel", "ViTConfig", dict(
        hidden_size=384, num_hidden_layers=12, num_attention_heads=6,
        intermediate_size=1536), "vit", "image", 224),
    "deit-tiny": ("DeiTModel", "DeiTConfig", dict(
        hidden_size=192, num_hidden_layers=12, num_attention_heads=3,
        intermediate_size=768), "vit", "image", 224),
    "swin-tiny": ("SwinModel", "SwinConfig", dict(), "swin", "image", 224),
    "mobilevit-xs": ("MobileViTModel", "MobileViTConfig", dict(
        hidden_sizes=[96, 120, 144], neck_hidden_sizes=[16, 32, 48, 64, 80, 96, 384]),
        "mobilevit", "image", 256),
    "mobilevit-xxs": ("MobileViTModel", "MobileViTConfig", dict(
        hidden_sizes=[64, 80, 96], neck_hidden_sizes=[16, 16, 24, 48, 64, 80, 320],
        expand_ratio=2.0), "mobilevit", "image", 256),
    "convnext-tiny": ("ConvNextModel", "ConvNextConfig", dict(), "convnext", "image", 224),
    "segformer-b0": ("SegformerModel", "SegformerConfig", dict(), "segformer", "image", 224),
    "levit-128s": ("LevitModel", "LevitConfig", dict(), "levit", "image", 224),
    "poolformer-s12": ("PoolFormerModel", "PoolFormerConfig", dict(), "poolformer",
                       "image", 224),
}

#: The transformer set's TFLite half: keras-hub backbones (Keras 3 layers, keras-hub's
#: own attention and embeddings) built from their constructors with random weights
#: (seed 0) and written by the TFLite converter, for litert-cpu. Sizes are the published
#: ones, as in ``_HF``: BERT-mini/small from Turc et al. 2019 (the BERT miniatures),
#: ViT-tiny/small and DeiT-tiny from Touvron et al. 2021 (DeiT), MiT-B0 from SegFormer
#: (Xie et al. 2021), ``roberta-small`` as in ``_HF``, and the others the config of the
#: keras-hub preset of that name (``electra_small_discriminator_uncased_en``,
#: ``deberta_v3_extra_small_en``, ``swin_tiny_patch4_window7_224``, ``dinov2_small``...).
#: Where keras-hub 0.32 has a preset, the parameter count equals its ``params`` metadata,
#: except DINOv2 (the preset's position embeddings are for 518 px, these for 224 px) and
#: MiT-B0 (3,319,392 against the preset's 3,321,962).
#: name: (backbone class, constructor arguments, family, input: "text" or "image",
#: sequence length or image size). Text models read int32 ``token_ids`` and
#: ``padding_mask`` (and ``segment_ids`` where the backbone takes them) of shape
#: (1, 128) and give the sequence output; vision models read a float32 (1, size, size, 3)
#: image and give the backbone's output (tokens, or MiT's last feature map).
_KERAS_HUB: dict[str, tuple[str, dict, str, str, int]] = {
    "bert-mini": ("BertBackbone", dict(
        vocabulary_size=30522, num_layers=4, num_heads=4, hidden_dim=256,
        intermediate_dim=1024), "bert", "text", 128),
    "bert-small": ("BertBackbone", dict(
        vocabulary_size=30522, num_layers=4, num_heads=8, hidden_dim=512,
        intermediate_dim=2048), "bert", "text", 128),
    "distilbert-base": ("DistilBertBackbone", dict(
        vocabulary_size=30522, num_layers=6, num_heads=12, hidden_dim=768,
        intermediate_dim=3072), "bert", "text", 128),
    "roberta-small": ("RobertaBackbone", dict(
        vocabulary_size=50265, num_layers=4, num_heads=8, hidden_dim=512,
        intermediate_dim=2048), "bert", "text", 128),
    "albert-base": ("AlbertBackbone", dict(
        vocabulary_size=30000, num_layers=12, num_heads=12, embedding_dim=128,
        hidden_dim=768, intermediate_dim=3072), "bert", "text", 128),
    "electra-small": ("ElectraBackbone", dict(
        vocab_size=30522, num_layers=12, num_heads=4, hidden_dim=256, embedding_dim=128,
        intermediate_dim=1024), "bert", "text", 128),
    "deberta-v3-xsmall": ("DebertaV3Backbone", dict(
        vocabulary_size=128100, num_layers=12, num_heads=6, hidden_dim=384,
        intermediate_dim=1536), "bert", "text", 128),
    "deberta-v3-small": ("DebertaV3Backbone", dict(
        vocabulary_size=128100, num_layers=6, num_heads=12, hidden_dim=768,
        intermediate_dim=3072), "bert", "text", 128),
    "vit-tiny": ("ViTBackbone", dict(
        patch_size=16, num_layers=12, num_heads=3, hidden_dim=192, mlp_dim=768),
        "vit", "image", 224),
    "vit-small": ("ViTBackbone", dict(
        patch_size=16, num_layers=12, num_heads=6, hidden_dim=384, mlp_dim=1536),
        "vit", "image", 224),
    "deit-tiny": ("DeiTBackbone", dict(
        patch_size=16, num_layers=12, num_heads=3, hidden_dim=192, intermediate_dim=768),
        "vit", "image", 224),
    "dinov2-small": ("DINOV2Backbone", dict(
        patch_size=14, num_layers=12, num_heads=6, hidden_dim=384, intermediate_dim=1536),
        "vit", "image", 224),
    "swin-tiny": ("SwinTransformerBackbone", dict(
        embed_dim=96, depths=[2, 2, 6, 2], num_heads=[3, 6, 12, 24], window_size=7,
        patch_size=4), "swin", "image", 224),
    "mit-b0": ("MiTBackbone", dict(
        num_layers=4, hidden_dims=[32, 64, 160, 256], layerwise_depths=[2, 2, 2, 2],
        layerwise_num_heads=[1, 2, 5, 8], layerwise_sr_ratios=[8, 4, 2, 1],
        layerwise_patch_sizes=[7, 3, 3, 3], layerwise_strides=[4, 2, 2, 2],
        max_drop_path_rate=0.1), "segformer", "image", 224),
}


def entries(which: str = "real") -> list[Entry]:
    """The entries of the held-out real-architecture set (``real``), of the
    development set (``dev``, pytorchcv models only) or of the transformer set
    (``transformers``, Hugging Face architectures and keras-hub backbones)."""
    if which == "transformers":
        return ([Entry(f"hf-{n}", fam, "torch.onnx", f"transformers.{cls}", size)
                 for n, (cls, _, _, fam, _, size) in _HF.items()]
                + [Entry(f"keras-hub-{n}", fam, "tflite-converter",
                         f"keras_hub.models.{cls}", size)
                   for n, (cls, _, fam, _, size) in _KERAS_HUB.items()])
    if which == "dev":
        return [Entry(f"torch-{fn}", fam, "torch.onnx", f"pytorchcv.models.{mod}.{fn}")
                for mod, fn, fam in _DEV_PYTORCHCV]
    out = [Entry(f"torch-{fn}", fam, "torch.onnx", f"pytorchcv.models.{mod}.{fn}",
                 299 if fn in ("inceptionv3", "xception") else 224)
           for mod, fn, fam in _PYTORCHCV]
    out += [Entry(f"caffe2-{n}", fam, "caffe2", f"onnx/backend/test/data/light/light_{n}.onnx")
            for n, fam in _LIGHT]
    out += [Entry(f"keras-{fn.lower()}", fam, "tflite-converter",
                  f"keras.applications.{fn}", 299 if fn in ("InceptionV3", "Xception") else 224)
            for fn, fam in _KERAS]
    return out


def default_dir(which: str = "real") -> Path:
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "nnmeter" / f"{which}_set"


def _file_of(e: Entry, d: Path) -> Path:
    return d / (e.name + (".tflite" if e.exporter == "tflite-converter" else ".onnx"))


def _sha(p: Path) -> str:
    h = hashlib.sha256()
    with open(p, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()[:16]


def _build_torch(e: Entry, path: Path) -> None:
    import importlib

    import torch

    if e.source.startswith("transformers."):
        _build_hf(e, path)
        return
    mod, fn = e.source.rsplit(".", 1)
    torch.manual_seed(0)
    model = getattr(importlib.import_module(mod), fn)(pretrained=False).eval()
    x = torch.randn(1, 3, e.size, e.size)
    tmp = path.with_suffix(".part")
    with torch.no_grad():
        torch.onnx.export(model, (x,), str(tmp), dynamo=False, opset_version=17,
                          input_names=["input"], output_names=["output"])
    tmp.replace(path)


def _build_hf(e: Entry, path: Path) -> None:
    """A Hugging Face model from its config (random weights, seed 0), its first output
    (the last hidden state) exported with ``input_ids`` (1, size) or ``pixel_values``
    (1, 3, size, size) as its one input. The TorchScript exporter does not pass keyword
    inputs through, and HF models take them, so a small wrapper names the input."""
    import torch
    import transformers

    class FirstOutput(torch.nn.Module):
        def __init__(self, model: torch.nn.Module, input_name: str) -> None:
            super().__init__()
            self.model, self.input_name = model, input_name

        def forward(self, x):
            return self.model(**{self.input_name: x}, return_dict=False)[0]

    model_cls, config_cls, fields, _, kind, size = _HF[e.name.removeprefix("hf-")]
    torch.manual_seed(0)
    config = getattr(transformers, config_cls)(**fields)
    model = FirstOutput(getattr(transformers, model_cls)(config).eval(),
                        "input_ids" if kind == "text" else "pixel_values")
    gen = torch.Generator().manual_seed(0)
    if kind == "text":
        x = torch.randint(0, config.vocab_size, (1, size), generator=gen)
    else:
        x = torch.randn(1, config.num_channels, size, size, generator=gen)
    tmp = path.with_suffix(".part")
    torch.onnx.export(model, (x,), str(tmp), dynamo=False, opset_version=17,
                      input_names=[model.input_name], output_names=["output"])
    tmp.replace(path)


def _build_light(e: Entry, path: Path) -> None:
    import shutil

    import onnx

    src = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light" / Path(e.source).name
    shutil.copyfile(src, path)


def _build_keras(e: Entry, path: Path) -> None:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    if e.source.startswith("keras_hub."):
        _build_keras_hub(e, path)
        return
    import numpy as np
    import tensorflow as tf

    tf.keras.utils.set_random_seed(0)
    fn = getattr(tf.keras.applications, e.source.rsplit(".", 1)[1])
    model = fn(weights=None, input_shape=(e.size, e.size, 3))
    conv = tf.lite.TFLiteConverter.from_keras_model(model)
    data = conv.convert()
    tmp = path.with_suffix(".part")
    tmp.write_bytes(data)
    tmp.replace(path)
    del model, np


def _build_keras_hub(e: Entry, path: Path) -> None:
    """A keras-hub backbone from its constructor (random weights, seed 0), exported as
    a SavedModel whose one signature has fixed input shapes (batch 1 and the sequence
    length, or a (1, size, size, 3) image) and converted by the TFLite converter
    (built-in ops only). ``from_keras_model`` does the same for one-input models but
    falls back to a tf.keras-only path for the text backbones' dict of inputs, and the
    backbone's own inputs have a free batch (and sequence) axis, which would leave
    dynamic shapes in the .tflite file."""
    os.environ.setdefault("KERAS_BACKEND", "tensorflow")
    import tempfile

    import keras
    import keras_hub
    import tensorflow as tf

    cls, kwargs, _, kind, size = _KERAS_HUB[e.name.removeprefix("keras-hub-")]
    keras.utils.set_random_seed(0)
    if kind == "image":
        kwargs = {**kwargs, "image_shape": (size, size, 3)}
    backbone = getattr(keras_hub.models, cls)(**kwargs)
    shape = (1, size) if kind == "text" else (1, size, size, 3)
    if isinstance(backbone.input, dict):
        spec: object = {k: tf.TensorSpec(shape, t.dtype, name=k)
                        for k, t in backbone.input.items()}
    else:
        spec = tf.TensorSpec(shape, backbone.input.dtype, name="images")

    def serve(x):
        y = backbone(x, training=False)
        # the text backbones' sequence output (BERT's pooled output is left out, as
        # the Hugging Face models' last hidden state is all the ONNX entries give)
        return y["sequence_output"] if isinstance(y, dict) else y

    archive = keras.export.ExportArchive()
    archive.track(backbone)
    archive.add_endpoint("serve", serve, [spec])
    with tempfile.TemporaryDirectory() as saved:
        archive.write_out(saved, verbose=False)
        data = tf.lite.TFLiteConverter.from_saved_model(saved).convert()
    tmp = path.with_suffix(".part")
    tmp.write_bytes(data)
    tmp.replace(path)


def build(args: argparse.Namespace) -> int:
    d = Path(args.dir) if args.dir else default_dir(args.set)
    d.mkdir(parents=True, exist_ok=True)
    man_path = d / "manifest.json"
    manifest = json.loads(man_path.read_text()) if man_path.exists() else {}
    todo = [e for e in entries(args.set)
            if not args.only or e.exporter in args.only.split(",")]
    failed = 0
    for i, e in enumerate(todo, 1):
        p = _file_of(e, d)
        if p.exists() and e.name in manifest:
            continue
        t0 = time.time()
        try:
            {"torch.onnx": _build_torch, "caffe2": _build_light,
             "tflite-converter": _build_keras}[e.exporter](e, p)
        except Exception as err:  # noqa: BLE001 - one architecture failing must not stop the set
            failed += 1
            print(f"[{i}/{len(todo)}] {e.name}: FAILED ({type(err).__name__}: {str(err)[:200]})",
                  flush=True)
            continue
        manifest[e.name] = {"file": p.name, "family": e.family, "exporter": e.exporter,
                            "source": e.source, "size": e.size, "sha256": _sha(p),
                            "bytes": p.stat().st_size}
        tmp = man_path.with_suffix(".tmp")
        tmp.write_text(json.dumps(manifest, indent=1, sort_keys=True))
        tmp.replace(man_path)
        print(f"[{i}/{len(todo)}] {e.name}: {p.stat().st_size / 1e6:.1f} MB "
              f"in {time.time() - t0:.1f} s", flush=True)
    print(f"{len(manifest)} models in {d}" + (f"; {failed} failed" if failed else ""))
    return 1 if failed else 0


def _manifest(args: argparse.Namespace) -> tuple[Path, dict]:
    d = Path(args.dir) if args.dir else default_dir(args.set)
    man_path = d / "manifest.json"
    if not man_path.exists():
        sys.exit(f"error: no {args.set} set in {d}; run "
                 f"'python experiments/real_set.py build --set {args.set}' first")
    return d, json.loads(man_path.read_text())


def _applies(info: dict, backend: str) -> bool:
    tfl = info["exporter"] == "tflite-converter"
    return tfl == backend.startswith("litert")


def _set_path(backend: str, device: str | None = None, which: str = "real") -> Path:
    from nnmeter.devices.datasets import model_set_path

    return model_set_path(backend, 0, device).with_name(f"{which}.jsonl")


def _rows(path: Path) -> list[dict]:
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        try:
            row = json.loads(line)
        except ValueError:
            continue
        # rows written before sessions were named belong to the hour they were taken in
        row.setdefault("session", str(row.get("timestamp", ""))[:13])
        out.append(row)
    return out


def _latest_session(rows: list[dict]) -> str | None:
    """The session whose last row is the newest (the one a report reads by default)."""
    last: dict[str, str] = {}
    for r in rows:
        s, t = r["session"], str(r.get("timestamp", ""))
        if t >= last.get(s, ""):
            last[s] = t
    return max(last, key=last.__getitem__) if last else None


def measure(args: argparse.Namespace) -> int:
    from nnmeter.backends import Profiler

    d, manifest = _manifest(args)
    path = _set_path(args.backend, args.device, args.set)
    path.parent.mkdir(parents=True, exist_ok=True)
    session = args.session or time.strftime("%Y-%m-%dT%H:%M")
    done = {(r["model"], r["pass"]) for r in _rows(path) if r["session"] == session}
    print(f"session {session} (resume it with --session {session})", flush=True)
    names = [n for n in sorted(manifest) if _applies(manifest[n], args.backend)]
    if args.control:
        # the zoo's base models in the same run: the predictor's level on its own
        # exporter's graphs today, beside the real set (drift, a slower host)
        from nnmeter import zoo

        for fam in zoo.FAMILY_NAMES:
            manifest[f"zoo-{fam}"] = {"family": fam, "exporter": "nnmeter", "sha256": None,
                                      "graph": zoo.get_family(fam)}
        names = [f"zoo-{fam}" for fam in zoo.FAMILY_NAMES]
    with Profiler(args.backend) as prof, open(path, "a") as fh:
        for p in range(args.passes):
            for i, n in enumerate(names, 1):
                if (n, p) in done:
                    continue
                info = manifest[n]
                if "graph" in info:
                    fam = info["graph"]
                    m = prof.measure(fam.build(fam.base_config()), on_error="record")
                else:
                    m = prof.measure(d / info["file"], on_error="record")
                row = {"model": n, "family": info["family"], "exporter": info["exporter"],
                       "sha256": info["sha256"], "pass": p,
                       "latency_ms": m.latency_ms if m.ok else None, "spread": m.spread,
                       "ok": m.ok, "error": m.error,
                       "fingerprint_id": m.device.fingerprint_id if m.device else None,
                       "timestamp": time.strftime("%Y-%m-%dT%H:%M:%S"), "session": session}
                fh.write(json.dumps(row) + "\n")
                fh.flush()
                print(f"pass {p} [{i}/{len(names)}] {n:36s} {row['latency_ms']}", flush=True)
    return 0


def kernels(args: argparse.Namespace) -> int:
    from nnmeter.backends import Profiler
    from nnmeter.errors import NNMeterError
    from nnmeter.frontends import load_model
    from nnmeter.fusion import load_rules
    from nnmeter.partition import partition
    from nnmeter.ir.canonical import for_backend
    from nnmeter.partition.truth import compare_with_runtime
    from nnmeter.predictors.absorbed import absorbed_kernels
    from nnmeter.predictors.facts import device_facts

    d, manifest = _manifest(args)
    rules = load_rules(args.rules or args.backend)
    facts = None
    names = [n for n in sorted(manifest) if _applies(manifest[n], args.backend)]
    out = {"backend": args.backend, "created": time.strftime("%Y-%m-%dT%H:%M:%S"),
           "models": {}}
    print(f"{'model':36s} {'kernels':>7s} {'runtime':>7s} {'equal':>6s} {'pred.':>6s}  "
          f"first difference (predictor's grouping)")
    with Profiler(args.backend) as prof:
        for n in names:
            f = d / manifest[n]["file"]
            try:
                g = for_backend(load_model(f), args.backend)
                ks = partition(g, rules)
                executed = prof.profile(f, runs=1)
            except NNMeterError as err:
                out["models"][n] = {"error": str(err)}
                print(f"{n:36s} error: {str(err)[:160]}", flush=True)
                continue
            if facts is None:
                from nnmeter import load_predictor

                facts = device_facts(load_predictor(args.backend, device=args.device).device)
            c = compare_with_runtime(g, ks, executed)
            # the predictor's grouping: kernels it runs inside another count with it
            cp = compare_with_runtime(g, ks, executed, absorbed_kernels(g, ks, facts))
            out["models"][n] = {**c.as_dict(), "predictor": cp.as_dict()}
            print(f"{n:36s} {c.kernels:7d} {c.runtime_compute:7d} {100 * c.share_equal:5.1f}% "
                  f"{100 * cp.share_equal:5.1f}%  {cp.first_difference or '-'}", flush=True)
    ok = [m for m in out["models"].values() if "error" not in m]
    tot = sum(m["runtime_compute"] for m in ok)
    eq = sum(m["runtime_equal"] for m in ok)
    eqp = sum(m["predictor"]["runtime_equal"] for m in ok)
    print(f"total: {eq} of {tot} runtime compute nodes grouped as the runtime groups them "
          f"by the partition ({100 * eq / max(tot, 1):.1f} %), {eqp} by the predictor "
          f"({100 * eqp / max(tot, 1):.1f} %, kernels it runs inside another merged)")
    out["summary"] = {"runtime_compute": tot, "partition_equal": eq, "predictor_equal": eqp}
    OUT.mkdir(exist_ok=True)
    out["rules"] = str(args.rules or f"fusion_rules/{args.backend}.json")
    Path(args.out or OUT / f"{args.set}_set_kernels_{args.backend}.json").write_text(
        json.dumps(out, indent=1))
    return 0


def report(args: argparse.Namespace) -> int:
    import numpy as np

    from nnmeter import load_predictor
    from nnmeter.errors import NNMeterError
    from nnmeter.frontends import load_model

    d, manifest = _manifest(args)
    all_rows = _rows(_set_path(args.backend, args.device, args.set))
    session = args.session or _latest_session(all_rows)
    sessions = sorted({r["session"] for r in all_rows})
    if args.session and args.session not in sessions:
        sys.exit(f"error: no session {args.session!r} for {args.backend}; sessions: "
                 f"{', '.join(sessions) or 'none'}")
    # truth for one report comes from one session (one run on one device), never the
    # fastest over sessions taken hours apart
    rows = [r for r in all_rows if r.get("ok") and r["session"] == session]
    by: dict[str, dict[int, float]] = {}
    for r in rows:
        by.setdefault(r["model"], {})[r["pass"]] = r["latency_ms"]
    pred = load_predictor(args.backend, device=args.device)
    table: list[dict] = []
    failed: dict[str, str] = {}
    control: list[tuple[str, dict]] = []
    for n in sorted(by):
        passes = by[n]
        if n.startswith("zoo-"):
            control.append((n, passes))
            continue
        if n not in manifest:
            continue
        true = min(passes.values())
        rep = None
        if 0 in passes and 1 in passes:
            rep = abs(passes[1] / passes[0] - 1) <= 0.10
        try:
            rpt = pred.predict(load_model(d / manifest[n]["file"]))
        except NNMeterError as err:
            failed[n] = str(err)
            continue
        table.append({"model": n, "family": manifest[n]["family"], "measured_ms": true,
                      "predicted_ms": rpt.total_ms, "error": rpt.total_ms / true - 1,
                      "kernels": len(rpt.rows), "uncovered": len(rpt.uncovered),
                      "repeatable": rep, "interval_ms": rpt.interval_ms,
                      "in_interval": (rpt.interval_ms[0] <= true <= rpt.interval_ms[1])
                      if rpt.interval_ms else None})
    if not table:
        sys.exit(f"error: nothing measured for {args.backend}; run 'measure' first")
    err = np.array([t["error"] for t in table])
    reps = [t["repeatable"] for t in table if t["repeatable"] is not None]
    summary = {"backend": args.backend, "session": session, "device": pred.device_name if hasattr(pred, "device_name")
               else None, "n": len(table),
               "within_10": float(np.mean(np.abs(err) <= 0.10)),
               "within_5": float(np.mean(np.abs(err) <= 0.05)),
               "mape": float(np.mean(np.abs(err))),
               "repeatability_10": float(np.mean(reps)) if reps else None,
               "not_predicted": failed}
    inside = [t["in_interval"] for t in table if t["in_interval"] is not None]
    if inside:
        summary["interval_coverage"] = float(np.mean(inside))
        summary["interval_level"] = pred.intervals.level
    if control:
        from nnmeter import zoo

        cerr = []
        for n, passes in control:
            fam = zoo.get_family(n[4:])
            cerr.append(pred.predict(fam.build(fam.base_config())).total_ms /
                        min(passes.values()) - 1)
        cerr_a = np.abs(np.array(cerr))
        summary["control"] = {"n": len(cerr), "within_10": float(np.mean(cerr_a <= 0.10)),
                              "median_error": float(np.median(cerr))}
    if args.json:
        print(json.dumps({"summary": summary, "models": table}, indent=1))
        return 0
    print(f"# session {session} (sessions on record: {', '.join(sessions)})")
    print(f"{'model':36s} {'family':12s} {'measured':>9s} {'predicted':>9s} {'error':>7s} "
          f"{'kernels':>7s} {'fallback':>8s}")
    for t in table:
        print(f"{t['model']:36s} {t['family']:12s} {t['measured_ms']:9.2f} "
              f"{t['predicted_ms']:9.2f} {100 * t['error']:+6.1f}% {t['kernels']:7d} "
              f"{t['uncovered']:8d}")
    for n, why in failed.items():
        print(f"{n:36s} not predicted: {why[:150]}")
    rep_s = (f"{100 * summary['repeatability_10']:.1f} % of {len(reps)}"
             if reps else "not measured")
    print(f"\n{summary['n']} models: {100 * summary['within_10']:.1f} % within ±10 %, "
          f"{100 * summary['within_5']:.1f} % within ±5 %, MAPE {100 * summary['mape']:.1f} %; "
          f"repeatability (two passes within ±10 %) {rep_s}")
    if inside:
        print(f"{100 * summary['interval_level']:.0f} % prediction interval covers "
              f"{100 * summary['interval_coverage']:.1f} % of the {len(inside)} models")
    if control:
        c = summary["control"]
        print(f"control, the zoo's {c['n']} base models measured in the same session: "
              f"{100 * c['within_10']:.1f} % within ±10 %, median error "
              f"{100 * c['median_error']:+.1f} %")
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    for name in ("build", "measure", "kernels", "report"):
        s = sub.add_parser(name)
        s.add_argument("--dir", default=None, help="where the model files are")
        s.add_argument("--set", choices=("real", "dev", "transformers"), default="real",
                       help="the held-out real-architecture set, the development set "
                            "(other pytorchcv models) that design choices are made on, or "
                            "the transformer set (Hugging Face architectures, keras-hub "
                            "backbones)")
        if name == "build":
            s.add_argument("--only", default=None,
                           help="comma-separated exporters (torch.onnx,caffe2,tflite-converter)")
        else:
            s.add_argument("--backend", default="ort-cpu")
            s.add_argument("--device", default=None)
        if name == "kernels":
            s.add_argument("--rules", default=None,
                           help="score this rules file instead of the backend's own")
            s.add_argument("--out", default=None, help="result JSON (default "
                           "experiments/results/real_set_kernels_<backend>.json)")
        if name == "measure":
            from nnmeter.farm import add_runner_arguments

            add_runner_arguments(s)
            s.add_argument("--passes", type=int, default=2)
            s.add_argument("--control", action="store_true",
                           help="measure the zoo's base models instead (a control)")
        if name in ("measure", "report"):
            s.add_argument("--session", default=None,
                           help="measurement session: measure resumes it (default: a new "
                                "one named by the start time), report reads it (default: "
                                "the newest)")
        if name == "report":
            s.add_argument("--json", action="store_true")
    args = ap.parse_args()
    if args.cmd == "measure":
        # through a farm runner (--runner ray|ssh|adb) the set is the remote device's
        from nnmeter.farm import runner_device, runner_from_args, use_runner

        with use_runner(runner_from_args(args)):
            if args.device is None and args.runner != "local":
                dev = runner_device(args.backend)
                args.device = dev.name or dev.fingerprint_id
            return measure(args)
    return {"build": build, "kernels": kernels, "report": report}[args.cmd](args)


if __name__ == "__main__":
    raise SystemExit(main())

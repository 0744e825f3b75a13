"""Small model pairs and injected deployment faults, to test xray itself.

A *model pair* is one tiny zoo-like CNN (conv-bn-relu, depthwise conv, 1x1 conv, a
residual add, global pooling, fc, softmax) written twice from the same weights: as an
ONNX model in NCHW (the float reference) and as a ``.tflite`` model in NHWC (the
deployment; float or int8). The TFLite converter folds BN into the convolutions and the
activations into the kernels, so the two graphs differ the way real deployments do.

Faults are plain Python: preprocessing functions with one bug each
(:func:`make_preprocess`), and :func:`corrupt_quant_scale`, which rewrites one tensor's
quantization scale inside a ``.tflite`` flatbuffer.

Examples
--------
>>> pair = build_model_pair("/tmp/xray-pair")          # doctest: +SKIP
>>> raw = smooth_images(4, 48, 48, seed=0)             # doctest: +SKIP
>>> bad = make_preprocess(layout="NHWC", channel_order="BGR")  # doctest: +SKIP
"""

from __future__ import annotations

import logging
import pathlib
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from nnmeter.errors import XRayError
from nnmeter.xray.checks import resize_bilinear, resize_nearest, smooth_images

__all__ = ["ModelPair", "build_model_pair", "make_preprocess", "corrupt_quant_scale",
           "smooth_images"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class ModelPair:
    """Paths of one model written as float ONNX (NCHW) and as .tflite (NHWC)."""

    onnx_path: pathlib.Path
    tflite_path: pathlib.Path
    input_hw: tuple[int, int]
    quantize: str | None


def _weights(seed: int, channels: tuple[int, int, int], classes: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    c1, c2, c3 = channels
    w: dict[str, np.ndarray] = {}

    def conv(name: str, cout: int, cin: int, k: int) -> None:
        fan_in = cin * k * k
        w[name + "_w"] = (rng.standard_normal((cout, cin, k, k)) * np.sqrt(2.0 / fan_in)
                          ).astype(np.float32)
        w[name + "_b"] = (0.05 * rng.standard_normal(cout)).astype(np.float32)

    def bn(name: str, c: int) -> None:
        w[name + "_gamma"] = rng.uniform(0.6, 1.4, c).astype(np.float32)
        w[name + "_beta"] = (0.1 * rng.standard_normal(c)).astype(np.float32)
        w[name + "_mean"] = (0.1 * rng.standard_normal(c)).astype(np.float32)
        w[name + "_var"] = rng.uniform(0.5, 1.5, c).astype(np.float32)

    conv("conv1", c1, 3, 3)
    bn("bn1", c1)
    conv("dw2", c1, 1, 3)          # depthwise: (C, 1, 3, 3)
    bn("bn2", c1)
    conv("conv3", c2, c1, 1)
    bn("bn3", c2)
    conv("conv4", c2, c2, 3)
    bn("bn4", c2)
    conv("conv5", c3, c2, 1)
    bn("bn5", c3)
    w["fc_w"] = (rng.standard_normal((classes, c3)) * np.sqrt(1.0 / c3)).astype(np.float32)
    w["fc_b"] = (0.05 * rng.standard_normal(classes)).astype(np.float32)
    return w


# (conv, bn, activation, stride, depthwise) in order; conv4's output is added to conv3's.
_LAYERS = (
    ("conv1", "bn1", "relu", 2, False),
    ("dw2", "bn2", "relu6", 1, True),
    ("conv3", "bn3", "relu", 1, False),
    ("conv4", "bn4", "relu", 1, False),
    ("conv5", "bn5", "relu", 1, False),
)


def _write_onnx(path: pathlib.Path, w: dict[str, np.ndarray], hw: tuple[int, int]) -> None:
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    inits = [numpy_helper.from_array(v, k) for k, v in w.items()]
    inits += [numpy_helper.from_array(np.array(0.0, np.float32), "c0"),
              numpy_helper.from_array(np.array(6.0, np.float32), "c6")]
    nodes = []
    x = "input"
    skip = None
    for conv, bn, act, stride, dw in _LAYERS:
        k = w[conv + "_w"].shape[-1]
        p = k // 2
        attrs = {"kernel_shape": [k, k], "strides": [stride, stride], "pads": [p, p, p, p]}
        if dw:
            attrs["group"] = int(w[conv + "_w"].shape[0])
        nodes.append(helper.make_node("Conv", [x, conv + "_w", conv + "_b"], [conv],
                                      name=conv, **attrs))
        nodes.append(helper.make_node(
            "BatchNormalization",
            [conv, bn + "_gamma", bn + "_beta", bn + "_mean", bn + "_var"], [bn],
            name=bn, epsilon=1e-3))
        out = f"{act}_{conv}"
        if act == "relu6":
            nodes.append(helper.make_node("Clip", [bn, "c0", "c6"], [out], name=out))
        else:
            nodes.append(helper.make_node("Relu", [bn], [out], name=out))
        x = out
        if conv == "conv3":
            skip = out
        if conv == "conv4":
            nodes.append(helper.make_node("Add", [x, skip], ["add4"], name="add4"))
            x = "add4"
    nodes.append(helper.make_node("GlobalAveragePool", [x], ["gap"], name="gap"))
    nodes.append(helper.make_node("Flatten", ["gap"], ["flatten"], name="flatten", axis=1))
    nodes.append(helper.make_node("Gemm", ["flatten", "fc_w", "fc_b"], ["fc"], name="fc",
                                  transB=1))
    nodes.append(helper.make_node("Softmax", ["fc"], ["softmax"], name="softmax", axis=-1))
    classes = w["fc_w"].shape[0]
    graph = helper.make_graph(
        nodes, "xray_pair",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, 3, *hw])],
        [helper.make_tensor_value_info("softmax", TensorProto.FLOAT, [1, classes])],
        initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, str(path))


def _write_tflite(path: pathlib.Path, w: dict[str, np.ndarray], hw: tuple[int, int],
                  quantize: str | None, seed: int) -> None:
    import tensorflow as tf

    consts = {k: tf.constant(v) for k, v in w.items()}

    def forward(x):
        skip = None
        for conv, bn, act, stride, dw in _LAYERS:
            kern = w[conv + "_w"]
            k = kern.shape[-1]
            p = k // 2
            pad = "SAME" if stride == 1 else [[0, 0], [p, p], [p, p], [0, 0]]
            if dw:
                filt = tf.constant(np.transpose(kern, (2, 3, 0, 1)))  # (k, k, C, 1)
                y = tf.nn.depthwise_conv2d(x, filt, [1, stride, stride, 1], pad, name=conv)
            else:
                filt = tf.constant(np.transpose(kern, (2, 3, 1, 0)))  # HWIO
                y = tf.nn.conv2d(x, filt, stride, pad, name=conv)
            y = tf.nn.bias_add(y, consts[conv + "_b"])
            y = tf.nn.batch_normalization(y, consts[bn + "_mean"], consts[bn + "_var"],
                                          consts[bn + "_beta"], consts[bn + "_gamma"], 1e-3,
                                          name=bn)
            y = tf.nn.relu6(y) if act == "relu6" else tf.nn.relu(y, name=f"{act}_{conv}")
            x = y
            if conv == "conv3":
                skip = x
            if conv == "conv4":
                x = tf.add(x, skip, name="add4")
        x = tf.reduce_mean(x, axis=[1, 2], name="gap")
        x = tf.matmul(x, tf.constant(w["fc_w"].T), name="fc") + consts["fc_b"]
        return tf.nn.softmax(x, name="softmax")

    fn = tf.function(forward, input_signature=[tf.TensorSpec([1, *hw, 3], tf.float32)])
    conv_fn = fn.get_concrete_function()
    converter = tf.lite.TFLiteConverter.from_concrete_functions([conv_fn], fn)
    if quantize == "int8":
        calib = smooth_images(16, hw[0], hw[1], seed=seed + 1000).astype(np.float32) / 255.0

        def representative():
            for img in calib:
                yield [img[None]]

        converter.optimizations = [tf.lite.Optimize.DEFAULT]
        converter.representative_dataset = representative
        converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
    elif quantize is not None:
        raise XRayError(f"quantize={quantize!r} is not supported; use None or 'int8'")
    path.write_bytes(converter.convert())


def build_model_pair(directory: str | pathlib.Path, *, seed: int = 0,
                     hw: tuple[int, int] = (32, 32), quantize: str | None = None,
                     channels: tuple[int, int, int] = (8, 16, 24),
                     classes: int = 10) -> ModelPair:
    """Write the same small CNN as ``model.onnx`` (NCHW float) and ``model[-int8].tflite``.

    Both take images scaled to [0, 1]. Imports TensorFlow (about 8 s, once).

    Parameters
    ----------
    directory : path
        Created if missing.
    seed : int
        Weights are deterministic for a seed.
    hw : (int, int)
        Input height and width.
    quantize : None or "int8"
        ``"int8"`` writes a post-training int8 model calibrated on smooth images, with
        float input and output.

    Returns
    -------
    ModelPair
    """
    d = pathlib.Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    w = _weights(seed, channels, classes)
    onnx_path = d / "model.onnx"
    tfl_path = d / ("model-int8.tflite" if quantize else "model.tflite")
    if not onnx_path.exists():
        _write_onnx(onnx_path, w, hw)
    if not tfl_path.exists():
        _write_tflite(tfl_path, w, hw, quantize, seed)
    return ModelPair(onnx_path, tfl_path, hw, quantize)


def make_preprocess(*, layout: str = "NCHW", size: tuple[int, int] = (32, 32),
                    resize: str = "bilinear", value_range: str = "0,1",
                    channel_order: str = "RGB", rotate: int = 0,
                    layout_bug: bool = False) -> Callable[[np.ndarray], dict[str, np.ndarray]]:
    """A preprocessing function for raw HWC uint8 RGB images, with optional bugs.

    The function returns its named steps (``resize``, ``normalize``, ``input``); the last
    one is the model input, batch first, in ``layout``.

    Parameters
    ----------
    layout : "NCHW" or "NHWC"
        Layout the model expects.
    resize : "bilinear" or "nearest"
    value_range : "0,1", "-1,1" or "0,255"
    channel_order : "RGB" or "BGR" (BGR is a bug for RGB-trained models)
    rotate : 0, 90, 180 or 270 degrees (counter-clockwise)
    layout_bug : bool
        Build the other layout and *reshape* it into ``layout`` (the classic NHWC fed as
        NCHW bug).
    """
    def preprocess(raw: np.ndarray) -> dict[str, np.ndarray]:
        img = np.asarray(raw, dtype=np.float32)
        chw = np.transpose(img, (2, 0, 1))
        if channel_order.upper() == "BGR":
            chw = chw[::-1]
        if rotate:
            chw = np.rot90(chw, rotate // 90, axes=(1, 2))
        resizer = resize_nearest if resize == "nearest" else resize_bilinear
        chw = resizer(np.ascontiguousarray(chw), size)
        lo, hi = (float(v) for v in value_range.split(","))
        norm = chw / 255.0 * (hi - lo) + lo
        nchw = norm[None].astype(np.float32)
        if layout.upper() == "NHWC":
            x = np.transpose(nchw, (0, 2, 3, 1))
            if layout_bug:
                x = nchw.reshape(x.shape)
        else:
            x = nchw
            if layout_bug:
                x = np.transpose(nchw, (0, 2, 3, 1)).reshape(nchw.shape)
        return {"resize": chw[None], "normalize": nchw, "input": np.ascontiguousarray(x)}

    return preprocess


def corrupt_quant_scale(src: str | pathlib.Path, dst: str | pathlib.Path, tensor_name: str,
                        factor: float) -> pathlib.Path:
    """Copy a .tflite model, multiplying the quantization scale of one tensor by ``factor``.

    Raises
    ------
    XRayError
        If no tensor is called ``tensor_name`` or it is not quantized; the message lists
        the quantized tensors.
    """
    import flatbuffers
    from ai_edge_litert import schema_py_generated as schema

    buf = pathlib.Path(src).read_bytes()
    model = schema.ModelT.InitFromObj(schema.Model.GetRootAsModel(buf, 0))
    names = []
    for sub in model.subgraphs:
        for t in sub.tensors:
            name = t.name.decode() if isinstance(t.name, bytes) else str(t.name)
            q = t.quantization
            if q is None or q.scale is None or len(q.scale) == 0:
                continue
            names.append(name)
            if name == tensor_name:
                q.scale = [float(s) * factor for s in q.scale]
                builder = flatbuffers.Builder(len(buf) + 1024)
                builder.Finish(model.Pack(builder), file_identifier=b"TFL3")
                out = pathlib.Path(dst)
                out.write_bytes(bytes(builder.Output()))
                return out
    raise XRayError(f"no quantized tensor named {tensor_name!r} in {src}; quantized tensors: "
                    f"{names[:12]}")

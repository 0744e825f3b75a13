"""Tests of nnmeter.frontends.keras: .keras / .h5 / SavedModel through the TFLite converter."""

from __future__ import annotations

import pytest

from nnmeter.errors import DynamicShapeError, ModelLoadError
from nnmeter.frontends.keras import _match_layer, load_keras


def test_match_layer_strips_keras_suffixes():
    layers = {"conv_a", "dw", "head"}
    assert _match_layer("tiny_1/conv_a_1/Relu;tiny_1/conv_a_1/convolution", layers) == "conv_a"
    assert _match_layer("tiny_1/dw_1/depthwise", layers) == "dw"
    assert _match_layer("StatefulPartitionedCall:0", layers) is None


def test_missing_and_wrong_paths(tmp_path):
    with pytest.raises(ModelLoadError, match="no Keras model"):
        load_keras(tmp_path / "absent.keras")
    other = tmp_path / "model.txt"
    other.write_text("hello")
    pytest.importorskip("tensorflow")
    with pytest.raises(ModelLoadError, match="neither"):
        load_keras(other)
    with pytest.raises(ModelLoadError, match="saved_model.pb"):
        load_keras(tmp_path)


@pytest.fixture(scope="module")
def keras_files(tmp_path_factory):
    pytest.importorskip("tensorflow")
    pytest.importorskip("ai_edge_litert")
    from nnmeter.exporters.tflite import _tf

    _tf()
    import keras

    inp = keras.Input((16, 16, 3), name="image")
    x = keras.layers.Conv2D(8, 3, padding="same", activation="relu", name="conv_a")(inp)
    x = keras.layers.BatchNormalization(name="bn_a")(x)
    x = keras.layers.DepthwiseConv2D(3, strides=2, padding="same", name="dw")(x)
    x = keras.layers.ReLU(6.0, name="r6")(x)
    x = keras.layers.GlobalAveragePooling2D(name="gap")(x)
    out = keras.layers.Dense(5, activation="softmax", name="head")(x)
    model = keras.Model(inp, out, name="tiny")
    d = tmp_path_factory.mktemp("keras")
    model.save(d / "tiny.keras")
    model.save(d / "tiny.h5")
    model.export(str(d / "tiny_saved"), verbose=False)
    dyn_in = keras.Input((None, None, 3), name="any")
    dyn = keras.Model(dyn_in, keras.layers.Conv2D(4, 3, name="c")(dyn_in), name="dyn")
    dyn.save(d / "dyn.keras")
    return d


@pytest.mark.integration
@pytest.mark.parametrize("name", ["tiny.keras", "tiny.h5"])
def test_keras_file_loads_with_layer_names(keras_files, name):
    g = load_keras(keras_files / name)
    assert g.name == "tiny"
    assert g.meta["source"]["framework"] == "keras"
    counts = g.op_counts()
    assert counts["conv"] == 1 and counts["dwconv"] == 1 and counts["fc"] == 1
    assert counts["relu"] == 1 and counts["relu6"] == 1 and counts["softmax"] == 1
    assert counts["gap"] == 1
    assert g.input_names == ["image"] and g["image"].output_shape == (1, 3, 16, 16)
    by_op = {n.op: n for n in g.nodes()}
    assert by_op["conv"].source["keras_layer"] == "conv_a"
    assert by_op["conv"].meta["fused_activation"] == "relu"
    assert by_op["dwconv"].source["keras_layer"] == "dw"
    assert by_op["dwconv"].output_shape == (1, 8, 8, 8)
    assert by_op["fc"].source["keras_layer"] == "head"
    assert by_op["softmax"].source["keras_layer"] == "head"
    assert by_op["softmax"].meta["keras_layer_inferred"] is True
    assert by_op["softmax"].output_shape == (1, 5)
    for n in g.nodes():
        assert n.source["framework"] == "keras" and "name" in n.source


@pytest.mark.integration
def test_saved_model_dir_loads(keras_files):
    g = load_keras(keras_files / "tiny_saved")
    assert g.meta["source"]["framework"] == "saved_model"
    assert g.op_counts()["dwconv"] == 1
    assert g.outputs and g.shape_of(g.outputs[0]) == (1, 5)


@pytest.mark.integration
def test_input_shapes_set_the_batch(keras_files):
    g = load_keras(keras_files / "tiny.keras", input_shapes={"image": (3, 3, 16, 16)})
    assert g.shape_of(g.outputs[0]) == (3, 5)


@pytest.mark.integration
def test_dynamic_spatial_dims_need_input_shapes(keras_files):
    with pytest.raises(DynamicShapeError, match="input_shapes"):
        load_keras(keras_files / "dyn.keras")
    g = load_keras(keras_files / "dyn.keras", input_shapes={"any": (1, 3, 10, 12)})
    assert g.shape_of(g.outputs[0]) == (1, 4, 8, 10)


@pytest.mark.integration
def test_corrupt_keras_file_is_model_load_error(keras_files, tmp_path):
    bad = tmp_path / "broken.keras"
    bad.write_bytes((keras_files / "tiny.keras").read_bytes()[:200])
    with pytest.raises(ModelLoadError):
        load_keras(bad)


@pytest.mark.integration
def test_a_keras_model_object_loads_like_its_file(keras_files):
    import keras

    from nnmeter.frontends import load_model

    model = keras.models.load_model(str(keras_files / "tiny.keras"), compile=False)
    g = load_model(model)
    assert g.name == "tiny" and g.meta["source"]["object"] in ("Functional", "Model")
    assert g.op_counts() == load_keras(keras_files / "tiny.keras").op_counts()

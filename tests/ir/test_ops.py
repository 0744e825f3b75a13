"""Tests of the op vocabulary and attribute records."""

from __future__ import annotations

import dataclasses
import json
import math

import pytest

from nnmeter.ir import ops
from nnmeter.ir.ops import (
    ATTRS_BY_OP, OPS, ClipAttrs, ConvAttrs, UnknownAttrs, attrs_class, attrs_from_dict,
    attrs_to_dict,
)


def test_vocabulary_is_closed_and_lowercase():
    assert OPS == frozenset(ATTRS_BY_OP)
    assert all(op == op.lower() for op in OPS)
    for op in ("conv", "dwconv", "fc", "bn", "relu", "hswish", "channelshuffle", "gap",
               "concat", "split", "unknown", "input"):
        assert op in OPS
    assert ops.ACTIVATIONS <= OPS and ops.ELEMENTWISE_BINARY <= OPS


def test_every_attrs_class_is_a_frozen_dataclass():
    for op in OPS:
        cls = attrs_class(op)
        assert dataclasses.is_dataclass(cls)
        assert cls.__dataclass_params__.frozen, op
    with pytest.raises(KeyError):
        attrs_class("nope")


def _sample(cls):
    fields = {f.name: f for f in dataclasses.fields(cls)}
    kwargs = {}
    if "out_channels" in fields:
        kwargs["out_channels"] = 7
    if "out_features" in fields:
        kwargs["out_features"] = 5
    return cls(**kwargs)


@pytest.mark.parametrize("op", sorted(OPS))
def test_attrs_json_round_trip(op):
    attrs = _sample(attrs_class(op))
    data = attrs_to_dict(attrs)
    json.dumps(data)
    assert attrs_from_dict(op, json.loads(json.dumps(data))) == attrs


def test_infinite_clip_bounds_survive_json():
    data = attrs_to_dict(ClipAttrs())
    assert data == {"min_value": "-inf", "max_value": "inf"}
    back = attrs_from_dict("clip", json.loads(json.dumps(data)))
    assert back.min_value == -math.inf and back.max_value == math.inf


def test_tuples_become_lists_and_back():
    a = ConvAttrs(out_channels=8, kernel=(5, 5), pads=(2, 2, 2, 2))
    data = attrs_to_dict(a)
    assert data["kernel"] == [5, 5]
    assert attrs_from_dict("dwconv", data) == a


def test_unknown_attrs_keep_fields_and_compare_by_them():
    a = UnknownAttrs("onnx:Elu", {"alpha": 0.5})
    assert a == UnknownAttrs("onnx:Elu", {"alpha": 0.5})
    assert a != UnknownAttrs("onnx:Elu", {"alpha": 1.0})
    assert attrs_from_dict("unknown", attrs_to_dict(a)) == a

"""The runnable examples in the zoo's docstrings stay true."""

from __future__ import annotations

import doctest
import importlib

import pytest

MODULES = ["base", "sampler", "prior", "alexnet", "vgg", "resnet", "densenet", "squeezenet",
           "googlenet", "mobilenetv1", "mobilenetv2", "mobilenetv3", "shufflenetv2",
           "mnasnet", "proxylessnas", "nasbench201", "_transformer", "vit", "bert", "mobilevit"]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    module = importlib.import_module(f"nnmeter.zoo.{name}")
    result = doctest.testmod(module)
    assert result.failed == 0
    assert result.attempted > 0


def test_package_docstring_example():
    import nnmeter.zoo

    result = doctest.testmod(nnmeter.zoo)
    assert result.failed == 0 and result.attempted > 0

"""The shared base of the op handlers: the handler contract, the registry the families
register on, and the input helpers they all use.

A handler maps one ONNX node onto IR nodes through the importer. It reads the node's
inputs with :func:`act_input`, :func:`scalar`, ``imp.value`` and ``imp.shape``, adds IR
nodes with ``imp.emit``, and raises :class:`Fallback` when the node does not fit the
vocabulary; the importer then removes what the handler added and keeps the node as an
``unknown`` one. A family module registers its handlers with :func:`register`::

    @register("Flatten")
    def flatten(imp: Importer, node: Any, idx: int) -> None:
        ...
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from nnmeter.registry import Registry

if TYPE_CHECKING:
    from nnmeter.frontends.onnx.importer import Importer

__all__ = ["Fallback", "Handler", "HANDLERS", "register", "handler_for", "act_input",
           "scalar"]


class Fallback(Exception):
    """Internal: this node cannot map onto the vocabulary; keep it as ``unknown``."""


#: ``handler(importer, onnx_node, node_index)``: maps one ONNX node (or a pattern that
#: starts at it) onto IR nodes.
Handler = Callable[["Importer", Any, int], None]

#: ONNX op type (default domain) → handler; filled by the family modules of
#: :mod:`nnmeter.frontends.onnx.ops`.
HANDLERS: Registry[Handler] = Registry("ONNX op handlers")


def register(*op_types: str) -> Callable[[Handler], Handler]:
    """Decorator: register the decorated handler for each ONNX op type in ``op_types``.

    Raises
    ------
    ValueError
        If one of ``op_types`` already has another handler.
    """

    def add(handler: Handler) -> Handler:
        for op_type in op_types:
            HANDLERS.register(op_type, handler)
        return handler

    return add


def handler_for(op_type: str) -> Handler | None:
    """The handler of the ONNX op type ``op_type``; None when the IR has no mapping."""
    return HANDLERS.get(op_type) if op_type in HANDLERS else None


def act_input(imp: Importer, node: Any, k: int = 0) -> str:
    if len(node.input) <= k or node.input[k] not in imp.refs:
        raise Fallback(f"input {k} is not an activation")
    return node.input[k]


def scalar(imp: Importer, name: str) -> float | None:
    if not name:
        return None
    v = imp.value(name)
    if v.size != 1:
        raise Fallback(f"{name!r} is not a scalar")
    return float(v.reshape(()))

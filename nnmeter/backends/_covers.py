"""Map the nodes a runtime executed back to the original ONNX nodes they compute.

Runtimes rename, fuse and reorder, but each executed compute node still produces
some tensor of the original model (its *anchor*), possibly under a decorated name
(``y_nchwc``, ``y__before_tr``, ``y/sink_port_0``). Once every executed node has its
anchors, the original nodes it covers are those on the way back from its anchors to
the nearest anchor of another executed node (or a graph input or weight). That
region is exactly the fused group, whatever the runtime called it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from pathlib import Path

__all__ = ["OnnxIndex", "assign_covers"]

_DECORATIONS = re.compile(
    r"(_nchwc|__before_tr|___tr4c|_raster_\d+|/sink_port_\d+|_output_\d+|:\d+)$")


class OnnxIndex:
    """Who produces which tensor in an ONNX model, and in what order."""

    def __init__(self, model_file: str | Path) -> None:
        import onnx

        model = onnx.load(str(model_file), load_external_data=False)
        g = model.graph
        self.order: dict[str, int] = {}
        self.node_inputs: dict[str, list[str]] = {}
        self.node_outputs: dict[str, list[str]] = {}
        self.producer: dict[str, str] = {}
        for i, n in enumerate(g.node):
            name = n.name or f"{n.op_type}_{i}"
            self.order[name] = i
            self.node_inputs[name] = [t for t in n.input if t]
            self.node_outputs[name] = [t for t in n.output if t]
            for t in n.output:
                if t:
                    self.producer[t] = name
        self.graph_inputs = {v.name for v in g.input}
        self.initializers = {t.name for t in g.initializer}

    @property
    def node_names(self) -> set[str]:
        return set(self.order)

    def resolve_tensor(self, name: str) -> str | None:
        """The original tensor a runtime's (possibly decorated) name stands for."""
        seen = set()
        while name and name not in seen:
            if name in self.producer:
                return name
            seen.add(name)
            name = _DECORATIONS.sub("", name)
        return None

    def anchors_of_name(self, name: str) -> set[str]:
        """Anchors named by an original node name or a (decorated) tensor name."""
        if name in self.order:
            return set(self.node_outputs[name])
        t = self.resolve_tensor(name)
        return {t} if t else set()

    def covers(self, anchors: Iterable[str], boundary: set[str]) -> tuple[str, ...]:
        """Original nodes computing ``anchors`` back to ``boundary`` tensors, in order."""
        found: set[str] = set()
        stack = [t for t in anchors if t in self.producer]
        own = set(stack)
        while stack:
            t = stack.pop()
            if (t in boundary and t not in own) or t not in self.producer:
                continue
            n = self.producer[t]
            if n in found:
                continue
            found.add(n)
            stack.extend(self.node_inputs[n])
        return tuple(sorted(found, key=self.order.__getitem__))


def assign_covers(index: OnnxIndex,
                  anchors: Sequence[set[str]]) -> list[tuple[str, ...]]:
    """Covers for each executed node given its anchors (empty set: a layout node)."""
    boundary: set[str] = set().union(*anchors) if anchors else set()
    return [index.covers(a, boundary) if a else () for a in anchors]

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
    r"(_nchwc|_bn|__before_tr|___tr4c|_raster_\d+|/sink_port_\d+|_output_\d+|:\d+)$")

#: ONNX ops a runtime's rebuilt activation (HSwish, HSigmoid, Swish…) is made of
_ELEMENTWISE = frozenset({"Add", "Sub", "Mul", "Div", "Clip", "Relu", "Sigmoid", "HardSigmoid",
                          "HardSwish", "Min", "Max", "Tanh", "Erf", "Pow", "Neg", "Exp"})

#: the name ORT gives a node its graph fusions made: "<original node>/<Kind>Fusion/...";
#: OpenVINO's ONNX reader splits a biased Conv/MatMul/Gemm into "<original node>/WithoutBiases"
#: and the bias add, and a runtime layer that fused the add back keeps only the first name
_FUSION_SUFFIX = re.compile(r"^(.*?)(?:/\w*Fusion(?:/.*)?|/WithoutBiases)$")


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
        self.op_type: dict[str, str] = {}
        self.consumers: dict[str, list[str]] = {}
        for i, n in enumerate(g.node):
            name = n.name or f"{n.op_type}_{i}"
            self.order[name] = i
            self.op_type[name] = n.op_type
            for t in n.input:
                if t:
                    self.consumers.setdefault(t, []).append(name)
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

    def follow(self, tensor: str, op_types: Iterable[str]) -> str | None:
        """The output of the one node reading ``tensor`` when that node's op type is one
        of ``op_types`` (a fused tail the runtime named after its head), else None.

        >>> import onnx
        >>> from onnx import helper as h
        >>> g = h.make_graph([h.make_node("Conv", ["x", "w"], ["c"], name="conv"),
        ...                   h.make_node("Add", ["c", "x"], ["a"], name="add")], "g",
        ...                  [h.make_tensor_value_info("x", 1, None)],
        ...                  [h.make_tensor_value_info("a", 1, None)])
        >>> import tempfile, os
        >>> d = tempfile.mkdtemp(); p = os.path.join(d, "m.onnx")
        >>> onnx.save(h.make_model(g), p)
        >>> OnnxIndex(p).follow("c", {"Add", "Sum"})
        'a'
        """
        users = self.consumers.get(tensor, [])
        if len(users) != 1 or self.op_type[users[0]] not in set(op_types):
            return None
        outs = self.node_outputs[users[0]]
        return outs[0] if outs else None

    def anchors_of_name(self, name: str) -> set[str]:
        """Anchors named by an original node name or a (decorated) tensor name.

        A node one of ORT's fusions made is named after the original node it ends at
        plus the fusion (``.../activ/Mul/QuickGeluFusion/``): that node's outputs.
        """
        if name in self.order:
            return set(self.node_outputs[name])
        m = _FUSION_SUFFIX.match(name)
        if m and m.group(1) in self.order:
            return set(self.node_outputs[m.group(1)])
        t = self.resolve_tensor(name)
        return {t} if t else set()

    def elementwise_tail(self, anchors: Iterable[str], stop: set[str]) -> set[str]:
        """Outputs of the element-wise nodes that follow ``anchors`` and read nothing else
        (besides constants): an activation a runtime rebuilt from its decomposed form
        (``x * clip(x + 3, 0, 6) / 6`` as one ``HSwish``) and fused into the layer that
        produces ``anchors``. Nodes whose output is in ``stop`` (another executed node's)
        end the tail.

        >>> import onnx, tempfile, os
        >>> from onnx import helper as h
        >>> mk = h.make_node
        >>> g = h.make_graph([mk("Conv", ["x", "w"], ["c"], name="conv"),
        ...                   mk("Add", ["c", "k3"], ["a"], name="add"),
        ...                   mk("Clip", ["a"], ["r"], name="clip"),
        ...                   mk("Mul", ["c", "r"], ["m"], name="mul"),
        ...                   mk("Div", ["m", "k6"], ["d"], name="div"),
        ...                   mk("Mul", ["d", "x"], ["y"], name="gate")], "g",
        ...                  [h.make_tensor_value_info("x", 1, None)],
        ...                  [h.make_tensor_value_info("y", 1, None)],
        ...                  [h.make_tensor("k3", 1, [], [3.0]), h.make_tensor("k6", 1, [], [6.0])])
        >>> p = os.path.join(tempfile.mkdtemp(), "m.onnx"); onnx.save(h.make_model(g), p)
        >>> sorted(OnnxIndex(p).elementwise_tail({"c"}, set()))
        ['a', 'd', 'm', 'r']
        """
        inside = set(anchors)
        tail: set[str] = set()
        changed = True
        while changed:
            changed = False
            for t in sorted(inside, key=lambda t: self.order.get(self.producer.get(t, ""), -1)):
                for n in self.consumers.get(t, []):
                    outs = self.node_outputs[n]
                    if (self.op_type[n] not in _ELEMENTWISE or not outs or outs[0] in inside
                            or outs[0] in stop):
                        continue
                    if all(i in inside or self._constant(i) for i in self.node_inputs[n]):
                        inside.add(outs[0])
                        tail.add(outs[0])
                        changed = True
        return tail

    def _constant(self, tensor: str) -> bool:
        return tensor in self.initializers or self.op_type.get(
            self.producer.get(tensor, ""), "") == "Constant"

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

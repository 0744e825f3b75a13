"""Which operand's kernel takes a residual add, read off the runtime's own graph.

When both operands of an ``add`` are computed by convolutions, a runtime fuses the add
into one of them. Timing cannot tell which (the two partitions cost the same), but the
choice decides the kernels a model is split into, and so whether the partition matches
what the runtime executes. A runtime that shows its executed graph answers in one load:
this probe builds ``x → conv A, x → conv B, add → relu`` with B placed first in the
node order, once as ``add(A, B)`` and once as ``add(B, A)``, and reads which convolution
the runtime's node with the add covers.

- ``"first"``: the add joins its first operand's convolution whatever the node order
  (ONNX Runtime 1.32's NCHWc transformer: the first operand whose producer is a
  convolution with no other reader takes it as its ``Sum`` input);
- ``"order"``: it joins the convolution computed first (what the partitioner's
  depth-first walk does without a rule);
- None: no add was fused, or the two probes disagree with both.

The answer is stored in the rules file, on the two-branch ``{conv,conv}->add`` pattern
(``extra.operand``, with ``extra.operand_evidence``); :meth:`FusionRules.join_operand`
reads it and the partitioner follows it.

A third probe asks whether the add still joins the convolution when the other operand
is read again after the add (DLA's trees, whose root concatenates a residual the add
already used): a runtime that sums in place, writing the convolution's result into the
other operand's buffer, cannot (OpenVINO). The answer is ``extra.needs_last_reader``
(:meth:`FusionRules.join_needs_last_reader`): true when the plain probe fused the add
and this one did not.
"""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path
from typing import Any

from nnmeter.fusion.rules import FusionRules, Pattern

__all__ = ["probe_graphs", "last_reader_graphs", "join_operand_from_runtime", "with_join_operand",
           "update_rules_file", "is_conv_add_join"]


def is_conv_add_join(p: Pattern) -> bool:
    """The two-branch pattern of convolutions joined by an add, where the answer lives."""
    return p.kind == "multi_input" and bool(p.ops) and p.ops[0] == "conv" \
        and p.ops[-1] == "add"


def probe_graphs(c: int = 16, hw: int = 14) -> dict[str, Any]:
    """The two probe graphs, keyed by the add's operand order ("AB", "BA")."""
    from nnmeter.ir.builder import GraphBuilder

    out = {}
    for order in ("AB", "BA"):
        b = GraphBuilder(f"join_{order}", (1, c, hw, hw))
        conv_b = b.conv(b.x, c, 3, name="convB")  # first in the node order
        conv_a = b.conv(b.x, c, 3, name="convA")
        ops = {"A": conv_a, "B": conv_b}
        s = b.add_(ops[order[0]], ops[order[1]], name="add")
        y = b.relu(b.relu(s, name="relu"), name="relu_out")
        out[order] = b.build([y])
    return out


def last_reader_graphs(c: int = 16, hw: int = 14) -> dict[str, Any]:
    """A basic residual block, ``src → convB → relu → convA; add(convA, src) → relu``
    (``src`` is not convA's own input: no runtime sums into the tensor it reads), with
    the residual ``src`` read again
    after the add by a concat ("after") or not ("control"). Convolutions before and
    after keep the add away from the model's edges, where a runtime may run its first
    and last layers at another precision (OpenVINO on a bf16 CPU), and a sum across two
    precisions is not fused."""
    from nnmeter.ir.builder import GraphBuilder

    out = {}
    for kind in ("control", "after"):
        b = GraphBuilder(f"join_{kind}", (1, c, hw, hw))
        y = b.relu(b.conv(b.x, c, 3, name="conv_in"), name="relu_in")
        src = b.relu(b.conv(y, c, 3, name="conv0"), name="src")
        body = b.relu(b.conv(src, c, 3, name="convB"), name="reluB")
        s = b.add_(b.conv(body, c, 3, name="convA"), src, name="add")
        y = b.relu(s, name="relu")
        if kind == "after":
            y = b.concat([y, src], name="cat")
        y = b.relu(b.conv(y, c, 1, name="conv_out"), name="relu_out")
        out[kind] = b.build([b.relu(b.conv(y, c, 1, name="conv_last"), name="out")])
    return out


def _host(executed: list[Any]) -> str | None:
    for e in executed:
        cov = set(e.covers)
        if any(c == "add" or c.startswith("add_") or c.startswith("add/") for c in cov):
            for conv in ("convA", "convB"):
                if any(c == conv or c.startswith(conv + "_") or c.startswith(conv + "/")
                       for c in cov):
                    return conv
            return "alone"
    return None


def join_operand_from_runtime(profiler: Any) -> dict[str, Any]:
    """Run the probes through ``profiler.profile`` (one load each, no timing); the
    decision and what each probe showed."""
    seen = {order: _host(profiler.profile(g, runs=1)) for order, g in probe_graphs().items()}
    if seen == {"AB": "convA", "BA": "convB"}:
        operand = "first"
    elif seen == {"AB": "convB", "BA": "convB"}:
        operand = "order"
    else:
        operand = None
    last = {k: _host(profiler.profile(g, runs=1)) for k, g in last_reader_graphs().items()}
    needs_last = last["after"] != "convA" if last["control"] == "convA" else None
    return {"operand": operand, "needs_last_reader": needs_last,
            "evidence": {**{f"add({o[0]}, {o[1]})": host for o, host in seen.items()},
                         "residual read again after the add": last["after"],
                         "residual read by the add last": last["control"]}}


def with_join_operand(rules: FusionRules, result: dict[str, Any]) -> FusionRules:
    """``rules`` with the probe's answer on its ``{conv,conv}->add`` pattern (added as
    an untimed two-branch pattern when the rules have none)."""
    pats = list(rules.patterns)
    extra = {"operand": result.get("operand"), "operand_evidence": result.get("evidence"),
             "needs_last_reader": result.get("needs_last_reader")}
    for i, p in enumerate(pats):
        if is_conv_add_join(p):
            pats[i] = dataclasses.replace(p, extra={**p.extra, **extra})
            break
    else:
        fused = result.get("operand") is not None
        pats.append(Pattern(name="{conv,conv}->add", kind="multi_input",
                            ops=("conv", "conv", "add"), fused=fused, extra=extra))
    return dataclasses.replace(rules, patterns=tuple(pats))


def update_rules_file(path: str | os.PathLike, result: dict[str, Any]) -> FusionRules:
    """Write the probe's answer into an existing rules file, keeping every other field
    (the detection record, failed cases) as it is; atomic. The updated rules."""
    path = Path(path)
    data = json.loads(path.read_text())
    rules = with_join_operand(FusionRules.from_dict(data, where=str(path)), result)
    data["patterns"] = [p.as_dict() for p in rules.patterns]
    from nnmeter.predictors.store import write_atomic

    write_atomic(path, (json.dumps(data, indent=1) + "\n").encode())
    return rules

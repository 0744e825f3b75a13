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
"""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path
from typing import Any

from nnmeter.fusion.rules import FusionRules, Pattern

__all__ = ["probe_graphs", "join_operand_from_runtime", "with_join_operand",
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
    return {"operand": operand,
            "evidence": {f"add({o[0]}, {o[1]})": host for o, host in seen.items()}}


def with_join_operand(rules: FusionRules, result: dict[str, Any]) -> FusionRules:
    """``rules`` with the probe's answer on its ``{conv,conv}->add`` pattern (added as
    an untimed two-branch pattern when the rules have none)."""
    pats = list(rules.patterns)
    extra = {"operand": result.get("operand"), "operand_evidence": result.get("evidence")}
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

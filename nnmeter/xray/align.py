"""Align the layers of a deployed model with the layers of its reference.

Both models are first collapsed into *blocks*: a main op (conv, dwconv, fc, pooling,
add, concat, softmax, ...) together with the per-element ops that follow it alone (bn,
activations, a constant bias add), because converters fold those into the main op
(TFLite's conv carries the BN and the ReLU of the ONNX graph; so the TFLite conv output
is compared with the ONNX ReLU output). Layout and numeric plumbing (reshape, flatten,
transpose, pad, quantize, dequantize, cast, identity) is looked through, never compared.

Blocks are then matched in the deployed model's topological order:

1. by name, where a reference op's name survives in the deployed tensor's name;
2. by structure: same op category, same canonical shape, and inputs that are already
   aligned to each other;
3. by order: the next unmatched reference block of the same category and shape.

All shapes are canonical (NCHW); a deployed NHWC tensor was transposed when recorded.

Examples
--------
>>> al = align_layers(deployed_runner.layers, reference_runner.layers)  # doctest: +SKIP
>>> [(p.deployed_op, p.how) for p in al.pairs][:2]                       # doctest: +SKIP
[('input', 'input'), ('conv', 'name')]
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from nnmeter.xray.instrument import Layer

__all__ = ["Block", "AlignedPair", "Alignment", "blocks_of", "align_layers", "PASS_THROUGH",
           "ABSORBED"]

#: ops that only move, pad or re-encode data: looked through, never compared
PASS_THROUGH = frozenset({"reshape", "flatten", "transpose", "identity", "quantize",
                          "dequantize", "pad"})
#: per-element ops a converter folds into the op before them
ABSORBED = frozenset({"bn", "relu", "relu6", "clip", "sigmoid", "tanh", "hswish", "hsigmoid",
                      "leakyrelu", "gelu", "swish"})
_CONST_ELTWISE = frozenset({"add", "sub", "mul", "div"})
_CATEGORY = {"matmul": "fc", "reducemean": "gap"}


@dataclass
class Block:
    """A main op and the per-element ops folded after it. ``out`` is the compared tensor."""

    id: str
    op: str
    main: str
    out: str
    members: list[str]
    inputs: tuple[str, ...]
    shape: tuple[int, ...]
    order: int

    @property
    def category(self) -> str:
        return _CATEGORY.get(self.op, self.op)


@dataclass(frozen=True)
class AlignedPair:
    """One deployed block matched to one reference block.

    ``deployed``/``reference`` are the compared tensor names; ``how`` is ``input``,
    ``name``, ``structure`` or ``order`` (weakest).
    """

    deployed: str
    reference: str
    deployed_op: str
    reference_op: str
    how: str
    deployed_members: tuple[str, ...] = ()
    reference_members: tuple[str, ...] = ()

    def as_dict(self) -> dict:
        return {"deployed": self.deployed, "reference": self.reference,
                "deployed_op": self.deployed_op, "reference_op": self.reference_op,
                "how": self.how, "deployed_members": list(self.deployed_members),
                "reference_members": list(self.reference_members)}


@dataclass
class Alignment:
    """Aligned pairs in deployed topological order, and what could not be aligned."""

    pairs: list[AlignedPair]
    deployed_blocks: dict[str, Block]
    reference_blocks: dict[str, Block]
    unaligned_deployed: list[str] = field(default_factory=list)
    unaligned_reference: list[str] = field(default_factory=list)

    def pair_of(self, deployed_block: str) -> AlignedPair | None:
        out = self.deployed_blocks[deployed_block].out
        for p in self.pairs:
            if p.deployed == out:
                return p
        return None

    def as_dict(self) -> dict:
        return {"pairs": [p.as_dict() for p in self.pairs],
                "unaligned_deployed": list(self.unaligned_deployed),
                "unaligned_reference": list(self.unaligned_reference)}


def blocks_of(layers: dict[str, Layer]) -> dict[str, Block]:
    """Collapse a model's layers (in topological order) into blocks, keyed by block id."""
    rep: dict[str, str] = {}          # tensor -> producing non-pass-through tensor
    for name, layer in layers.items():
        if layer.op in PASS_THROUGH and layer.inputs:
            rep[name] = rep.get(layer.inputs[0], layer.inputs[0])
        else:
            rep[name] = name
    consumers: dict[str, int] = {}
    for name, layer in layers.items():
        if layer.op in PASS_THROUGH:
            continue
        for i in set(layer.inputs):
            src = rep.get(i, i)
            consumers[src] = consumers.get(src, 0) + 1
    block_of: dict[str, Block] = {}
    blocks: dict[str, Block] = {}
    for name, layer in layers.items():
        if layer.op in PASS_THROUGH and layer.inputs:
            continue
        ins = [rep.get(i, i) for i in layer.inputs]
        absorbable = (layer.op in ABSORBED and len(ins) == 1) or \
            (layer.op in _CONST_ELTWISE and len(ins) == 1)
        if absorbable and ins[0] in block_of:
            b = block_of[ins[0]]
            if b.op != "input" and b.out == ins[0] and consumers.get(ins[0], 0) == 1:
                b.out = name
                b.members.append(name)
                b.shape = layer.shape
                block_of[name] = b
                continue
        b = Block(id=name, op=layer.op, main=name, out=name, members=[name],
                  inputs=tuple(block_of[i].id for i in ins if i in block_of),
                  shape=layer.shape, order=len(blocks))
        blocks[name] = b
        block_of[name] = b
    return blocks


def _squeezed(shape: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(d for d in shape if d != 1)


_TOKEN = re.compile(r"[;/:,\s]+")


def _tokens(names: list[str]) -> set[str]:
    out: set[str] = set()
    for n in names:
        for t in _TOKEN.split(n):
            if t:
                out.add(t.lower())
    return out


def _name_score(dep: Block, ref: Block, ref_layers: dict[str, Layer]) -> int:
    dep_tokens = _tokens(dep.members)
    ref_names = {m.lower() for m in ref.members} | \
        {ref_layers[m].node.lower() for m in ref.members if m in ref_layers}
    # the main op's own name counts most: it is what survives a converter's folding
    main = {ref.main.lower(), ref_layers[ref.main].node.lower()} if ref.main in ref_layers \
        else {ref.main.lower()}
    return 2 * len(dep_tokens & main) + len(dep_tokens & ref_names)


def align_layers(deployed: dict[str, Layer], reference: dict[str, Layer]) -> Alignment:
    """Match the blocks of two models. See the module docstring for the rules.

    Parameters
    ----------
    deployed, reference : dict of Layer
        ``Runner.layers`` of the two models, in topological order.

    Returns
    -------
    Alignment
    """
    dblocks = blocks_of(deployed)
    rblocks = blocks_of(reference)
    matched: dict[str, str] = {}          # deployed block id -> reference block id
    how: dict[str, str] = {}
    used: set[str] = set()
    dins = [b for b in dblocks.values() if b.op == "input"]
    rins = [b for b in rblocks.values() if b.op == "input"]
    for d, r in zip(dins, rins):
        matched[d.id], how[d.id] = r.id, "input"
        used.add(r.id)
    last_ref_order = -1
    for d in dblocks.values():
        if d.op == "input":
            continue
        cands = [r for r in rblocks.values() if r.id not in used and r.op != "input"
                 and r.category == d.category and _squeezed(r.shape) == _squeezed(d.shape)]
        if not cands:
            continue
        choice, kind = None, ""
        scores = {r.id: _name_score(d, r, reference) for r in cands}
        best = max(scores.values())
        if best > 0 and sum(1 for s in scores.values() if s == best) == 1:
            choice = next(r for r in cands if scores[r.id] == best)
            kind = "name"
        if choice is None:
            mapped = sorted(matched.get(i, "?") for i in d.inputs)
            strong = [r for r in cands if sorted(r.inputs) == mapped]
            if strong:
                choice = max(strong, key=lambda r: (scores[r.id], -r.order))
                kind = "structure"
        if choice is None:
            later = [r for r in cands if r.order > last_ref_order]
            if later:
                choice = min(later, key=lambda r: r.order)
                kind = "order"
        if choice is None:
            continue
        matched[d.id], how[d.id] = choice.id, kind
        used.add(choice.id)
        last_ref_order = max(last_ref_order, choice.order)
    pairs = []
    for d in dblocks.values():
        if d.id in matched:
            r = rblocks[matched[d.id]]
            pairs.append(AlignedPair(d.out, r.out, d.op, r.op, how[d.id], tuple(d.members),
                                     tuple(r.members)))
    return Alignment(
        pairs=pairs, deployed_blocks=dblocks, reference_blocks=rblocks,
        unaligned_deployed=[b.out for b in dblocks.values() if b.id not in matched],
        unaligned_reference=[b.out for b in rblocks.values() if b.id not in used],
    )

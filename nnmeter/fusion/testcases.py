"""Crafted fusion test cases (nn-Meter): small IR models whose timings reveal fusion.

Kinds of test case
------------------
``pair`` (op1 → op2)
    Three models: op1 alone, op2 alone (its input shaped like op1's output), and
    op1 → op2. op1 alone and the pair read the same input shapes. Binary ops (add, mul,
    concat) read their second operand from an extra graph input.
``multi_output`` (P → {c1, c2})
    P's output feeds two consumers. Besides the model itself, the single and pair
    models of P, c1, c2 are measured, so the detector can keep the split hypothesis
    (none / P+c1 / P+c2) whose summed time is closest to the measured one.
``multi_input`` ({conv, conv} → add | concat)
    Two computed branches joined by add or concat, against the hypotheses "the join
    runs alone" and "the join fuses into one branch".
``block``
    Multi-op subgraphs the partitioner matches before pairwise fusion: squeeze-excite
    (``se``), decomposed h-swish ``x*relu6(x+3)/6``, decomposed h-sigmoid
    ``relu6(x+3)/6``, decomposed channel shuffle (reshape → transpose → reshape) and
    ``gap`` → flatten. Every op of the block is also measured alone.

Which pairs are skipped, and why
--------------------------------
A. activation → activation: two activations in a row do not occur in real CNNs.
B. gap → anything but conv, fc and reshape: after global pooling the map is 1×1;
   windowed or per-pixel ops on it are not what real models do (SE uses conv/fc,
   classifiers use fc after a flatten).
C. fc → spatial op (conv, dwconv, bn, pools, gap): fc outputs a vector; a spatial op
   needs a reshape in between, which is its own pair.
D. reshape → anything but fc: a reshape (flatten) feeds a classifier; other uses of a
   reshaped tensor are layout tricks covered by the channel-shuffle block.
E. spatial op → fc (other than gap, reshape and the per-element ops on a vector):
   fc reads a vector; the flatten between them is its own pair.
F. bn next to fc: batch norm on vectors is not in the studied CNN families.

Shapes (defaults from nn-Meter): HW = 28, CIN = 64, COUT = 128, kernel 3, stride 1;
pools use kernel 3, stride 2, padding 1; fc width 428; vector pairs read (1, 428).

Balanced shapes (``TestShapes.balanced``, on by default)
--------------------------------------------------------
The rule compares the saving T1 + T2 - T12 with alpha * min(T1, T2). With nn-Meter's
shapes a 3x3 conv takes ~1 ms and the activation after it ~0.015 ms: the margin is
~0.01 ms against ~0.01-0.1 ms of run-to-run noise of the conv alone, so conv -> act
decisions are coin flips; vector ops on (1, 428) take no more than the backend's
per-inference overhead. Fusion depends on the op types, not on their sizes, so the
balanced shapes resize the heavy side until both ops take comparable times:

- a pair of one *heavy* op (conv, fc) and a light one (anything else) uses a 1x1 conv,
  whose free channel side has ``light_channels`` (16) channels: conv as op1 reads
  (1, 16, HW, HW) and writes COUT channels; conv as op2 writes 16 channels;
- fc in such a pair works on a batch of ``vector_batch`` (256) vectors, with
  ``light_channels`` on its free side (fc as op1: (256, 16) -> 428; as op2:
  (256, 428) -> 16); gap -> fc keeps the single pooled vector;
- a pair after a stride-2 pool (pool -> op2) doubles HW, so op2 sees the default plane;
- the multi-output and multi-input conv cases use the same 1x1 conv.

Pairs of two heavy or two light ops keep nn-Meter's shapes. ``balanced=False`` gives
nn-Meter's shapes everywhere.

Examples
--------
>>> cases = build_testcases()
>>> c = next(c for c in cases if c.name == "conv->relu")
>>> sorted(c.models)
['block', 'op1', 'op2']
>>> c.models["op2"].node("op2").input_shape
(1, 128, 28, 28)
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field

from nnmeter.ir.builder import GraphBuilder
from nnmeter.ir.graph import ModelGraph, Ref
from nnmeter.ir.ops import attrs_to_dict

__all__ = [
    "PAIR_OPS", "ACT_OPS", "HEAVY_OPS", "TestShapes", "TestCase", "build_testcases",
    "pair_skip_reason",
    "graph_signature",
]

ACT_OPS = ("relu", "relu6", "hswish", "hsigmoid", "sigmoid", "swish")
PAIR_OPS = ("conv", "dwconv", "fc", "bn", *ACT_OPS, "add", "mul", "concat", "maxpool",
            "avgpool", "gap", "reshape")
_VECTOR_OK = frozenset((*ACT_OPS, "fc", "add", "mul", "concat"))
_SPATIAL_ONLY = frozenset(("conv", "dwconv", "bn", "maxpool", "avgpool", "gap"))


@dataclass(frozen=True)
class TestShapes:
    """Shapes of the test cases (nn-Meter's defaults)."""

    __test__ = False  # not a pytest class

    hw: int = 28
    cin: int = 64
    cout: int = 128
    kernel: int = 3
    stride: int = 1
    pool_kernel: int = 3
    pool_stride: int = 2
    fc_width: int = 428
    balanced: bool = True
    light_channels: int = 16
    vector_batch: int = 256

    def as_dict(self) -> dict[str, int]:
        return asdict(self)

    @classmethod
    def tiny(cls) -> "TestShapes":
        """Small ops (HW 7, CIN 16, COUT 32, fc 64; not balanced) whose times are mostly
        the per-node dispatch cost: the shapes for runtimes whose fused epilogues cost
        as much as the separate op, so that a fusion saves only the dispatch of one node
        (ONNX Runtime's MLAS: a fused Clip or Sigmoid is a second pass over the output)."""
        return cls(hw=7, cin=16, cout=32, fc_width=64, balanced=False)

    @classmethod
    def for_backend(cls, backend_id: str) -> "TestShapes":
        """The detection shapes of a backend id: :meth:`tiny` for ONNX Runtime (``ort-*``),
        nn-Meter's balanced defaults for every other runtime.

        Measured on this machine's CPU for 15 probe pairs against the runtime's executed
        graph: ort-cpu 13/15 right with tiny shapes against 7/9 balanced; openvino-cpu
        13/15 balanced against 7/15 tiny; mnn-cpu 13/15 balanced against 11/15 tiny.
        """
        return cls.tiny() if backend_id.startswith("ort-") else cls()


@dataclass(frozen=True)
class TestCase:
    """One test case: its models by role, and the node names of the parts in ``block``.

    ``models`` roles: pair → op1, op2, block; multi_output → block, p, c1, c2, p+c1,
    p+c2; multi_input → block, branch, join, branch+join; block → block and part:<node>.
    """

    __test__ = False

    name: str
    kind: str
    ops: tuple[str, ...]
    models: dict[str, ModelGraph] = field(hash=False, compare=False)
    roles: dict[str, tuple[str, ...]] = field(default_factory=dict, hash=False, compare=False)
    block: str | None = None


def graph_signature(graph: ModelGraph) -> str:
    """A name-independent hash of a graph's structure (ops, attrs, wiring, shapes).

    Two test models with the same signature are the same model and are measured once.
    """
    nodes = graph.topological_nodes()
    pos = {n.name: i for i, n in enumerate(nodes)}
    rows = [[n.op, attrs_to_dict(n.attrs), [[pos[r.node], r.port] for r in n.inputs],
             [list(s) for s in n.output_shapes]] for n in nodes]
    outs = [[pos[r.node], r.port] for r in graph.outputs]
    text = json.dumps([graph.dtype, rows, outs], sort_keys=True, default=str)
    return hashlib.sha1(text.encode()).hexdigest()[:16]


def pair_skip_reason(op1: str, op2: str) -> str | None:
    """Why the pair op1 → op2 is not tested (a rule letter of the module doc), or None."""
    if op1 in ACT_OPS and op2 in ACT_OPS:
        return "A: two activations in a row do not occur in real CNNs"
    if op1 == "gap" and op2 not in ("conv", "fc", "reshape"):
        return "B: after global pooling only conv, fc or a flatten make sense"
    if op1 == "fc" and op2 in _SPATIAL_ONLY:
        return "C: fc outputs a vector; a spatial op needs a reshape first"
    if op1 == "reshape" and op2 != "fc":
        return "D: a reshape (flatten) feeds fc in real CNNs"
    if op2 == "fc" and op1 not in _VECTOR_OK and op1 not in ("gap", "reshape"):
        return "E: fc reads a vector; the flatten in between is its own pair"
    if "bn" in (op1, op2) and "fc" in (op1, op2):
        return "F: batch norm on vectors is not in the studied CNN families"
    return None


HEAVY_OPS = ("conv", "fc")
_POOLS = ("maxpool", "avgpool")


@dataclass(frozen=True)
class _OpShape:
    """How one op of a test model is sized: output channels/features and kernel."""

    out: int | None = None
    kernel: int | None = None


def _apply(b: GraphBuilder, op: str, x: Ref, s: TestShapes, name: str, *,
           next_op: str | None = None, size: _OpShape | None = None) -> Ref:
    """Add ``op`` reading ``x``; second operands of binary ops come from a new input."""
    shape = b.shape(x)
    size = size or _OpShape()
    if op == "conv":
        kernel = size.kernel or s.kernel
        return b.conv(x, size.out or s.cout, kernel, s.stride, name=name)
    if op == "dwconv":
        return b.dwconv(x, s.kernel, s.stride, name=name)
    if op == "fc":
        return b.fc(x, size.out or s.fc_width, name=name)
    if op == "bn":
        return b.bn(x, name=name)
    if op in ACT_OPS:
        return b.act(x, op, name=name)
    if op in ("add", "mul"):
        other = b.input(f"{name}_in2", shape)
        return b.add_(x, other, name=name) if op == "add" else b.mul(x, other, name=name)
    if op == "concat":
        return b.concat([x, b.input(f"{name}_in2", shape)], name=name)
    if op in ("maxpool", "avgpool"):
        p = (s.pool_kernel - 1) // 2
        pool = b.maxpool if op == "maxpool" else b.avgpool
        return pool(x, s.pool_kernel, s.pool_stride, pads=(p, p, p, p), name=name)
    if op == "gap":
        return b.gap(x, keepdims=next_op not in ("fc", "reshape"), name=name)
    if op == "reshape":
        if len(shape) == 4 and shape[2:] == (1, 1) and next_op == "fc":
            return b.reshape(x, (shape[0], shape[1]), name=name)
        if len(shape) == 2:
            return b.reshape(x, (shape[0], shape[1], 1, 1), name=name)
        flat = 1
        for d in shape[1:]:
            flat *= d
        return b.reshape(x, (shape[0], flat), name=name)
    raise ValueError(f"no test-case builder for op {op!r}; allowed: {PAIR_OPS}")


def _unbalanced(op1: str, op2: str, s: TestShapes) -> str | None:
    """The heavy op of a heavy/light pair to resize, or None."""
    if not s.balanced or (op1 in HEAVY_OPS) == (op2 in HEAVY_OPS):
        return None
    heavy = op1 if op1 in HEAVY_OPS else op2
    if heavy == "fc" and op1 == "gap":
        return None  # the pooled vector is what real models feed fc
    return heavy


def _pair_plan(op1: str, op2: str, s: TestShapes
               ) -> tuple[tuple[int, ...], _OpShape, _OpShape]:
    """Input shape of op1 (and of the pair) and the sizes of op1 and op2."""
    heavy = _unbalanced(op1, op2, s)
    sz1, sz2 = _OpShape(), _OpShape()
    batch = 1
    cin, hw, fc_in = s.cin, s.hw, s.fc_width
    if heavy == "conv":
        if op1 == "conv":
            cin, sz1 = s.light_channels, _OpShape(kernel=1)
        else:
            sz2 = _OpShape(out=s.light_channels, kernel=1)
    elif heavy == "fc":
        batch = s.vector_batch
        if op1 == "fc":
            fc_in = s.light_channels
        else:
            sz2 = _OpShape(out=s.light_channels)
    if s.balanced and op1 in _POOLS:
        hw = 2 * s.hw
    if op1 == "reshape":
        return (batch, s.fc_width, 1, 1), sz1, sz2
    if op1 != "gap" and "fc" in (op1, op2):
        return (batch, fc_in), sz1, sz2
    return (1, cin, hw, hw), sz1, sz2


def _single(op: str, input_shape: tuple[int, ...], s: TestShapes, *, name: str = "op1",
            next_op: str | None = None, size: _OpShape | None = None) -> ModelGraph:
    b = GraphBuilder(f"single_{op}", input_shape)
    return b.build([_apply(b, op, b.x, s, name, next_op=next_op, size=size)])


def _chain(ops: Iterable[str], input_shape: tuple[int, ...], s: TestShapes,
           label: str, sizes: Iterable[_OpShape | None] = ()) -> ModelGraph:
    ops = list(ops)
    sizes = list(sizes) + [None] * len(ops)
    b = GraphBuilder(label, input_shape)
    y = b.x
    for i, op in enumerate(ops):
        y = _apply(b, op, y, s, f"op{i + 1}", next_op=ops[i + 1] if i + 1 < len(ops) else None,
                   size=sizes[i])
    return b.build([y])


def _pair_case(op1: str, op2: str, s: TestShapes) -> TestCase:
    shape, sz1, sz2 = _pair_plan(op1, op2, s)
    block = _chain([op1, op2], shape, s, f"pair_{op1}_{op2}", [sz1, sz2])
    one = _single(op1, shape, s, next_op=op2, size=sz1)
    mid = one.node("op1").output_shape
    two = _single(op2, mid, s, name="op2", size=sz2)
    return TestCase(f"{op1}->{op2}", "pair", (op1, op2),
                    {"op1": one, "op2": two, "block": block},
                    {"op1": ("op1",), "op2": ("op2",)})


def _light(op: str, s: TestShapes) -> tuple[tuple[int, ...], _OpShape | None]:
    """Input shape and size of the producer/branch op of the multi-output/-input cases."""
    if s.balanced and op == "conv":
        return (1, s.light_channels, s.hw, s.hw), _OpShape(kernel=1)
    return (1, s.cin, s.hw, s.hw), None


def _multi_output_case(p: str, c1: str, c2: str, s: TestShapes) -> TestCase:
    shape, size = _light(p, s)
    b = GraphBuilder(f"multi_output_{p}", shape)
    y = _apply(b, p, b.x, s, "op1", size=size)
    o1 = _apply(b, c1, y, s, "op2")
    o2 = _apply(b, c2, y, s, "op3")
    g = b.build([o1, o2])
    mid = g.node("op1").output_shape
    models = {
        "block": g,
        "p": _single(p, shape, s, size=size),
        "c1": _single(c1, mid, s, name="op2"),
        "c2": _single(c2, mid, s, name="op2"),
        "p+c1": _chain([p, c1], shape, s, f"pair_{p}_{c1}", [size]),
        "p+c2": _chain([p, c2], shape, s, f"pair_{p}_{c2}", [size]),
    }
    return TestCase(f"{p}->{{{c1},{c2}}}", "multi_output", (p, c1, c2), models,
                    {"p": ("op1",), "c1": ("op2",), "c2": ("op3",)})


def _multi_input_case(branch: str, join: str, s: TestShapes) -> TestCase:
    shape, size = _light(branch, s)
    b = GraphBuilder(f"multi_input_{join}", shape)
    y1 = _apply(b, branch, b.x, s, "op1", size=size)
    y2 = _apply(b, branch, b.x, s, "op2", size=size)
    if join == "add":
        y = b.add_(y1, y2, name="op3")
    else:
        y = b.concat([y1, y2], name="op3")
    g = b.build([y])
    mid = g.node("op1").output_shape
    models = {
        "block": g,
        "branch": _single(branch, shape, s, size=size),
        "join": _single(join, mid, s, name="op2"),
        "branch+join": _chain([branch, join], shape, s, f"pair_{branch}_{join}", [size]),
    }
    return TestCase(f"{{{branch},{branch}}}->{join}", "multi_input", (branch, branch, join),
                    models, {"branch1": ("op1",), "branch2": ("op2",), "join": ("op3",)})


def _block_graphs(s: TestShapes) -> dict[str, ModelGraph]:
    shape = (1, s.cin, s.hw, s.hw)
    out: dict[str, ModelGraph] = {}
    b = GraphBuilder("block_se", shape)
    out["se"] = b.build([b.se(b.x, 4, gate="hsigmoid", inner_act="relu", name="se")])
    b = GraphBuilder("block_hswish", shape)
    t = b.eltwise_const("add", b.x, (1,), name="hs_add")
    t = b.relu6(t, name="hs_relu6")
    t = b.mul(b.x, t, name="hs_mul")
    out["hswish"] = b.build([b.eltwise_const("div", t, (1,), name="hs_div")])
    b = GraphBuilder("block_hsigmoid", shape)
    t = b.eltwise_const("add", b.x, (1,), name="hsg_add")
    t = b.relu6(t, name="hsg_relu6")
    out["hsigmoid"] = b.build([b.eltwise_const("div", t, (1,), name="hsg_div")])
    b = GraphBuilder("block_channelshuffle", shape)
    g = 2
    t = b.reshape(b.x, (1, g, s.cin // g, s.hw, s.hw), name="cs_reshape1")
    t = b.transpose(t, (0, 2, 1, 3, 4), name="cs_transpose")
    out["channelshuffle"] = b.build([b.reshape(t, shape, name="cs_reshape2")])
    b = GraphBuilder("block_gap", shape)
    t = b.gap(b.x, name="gap_gap")
    out["gap"] = b.build([b.flatten(t, name="gap_flatten")])
    return out


def _block_case(name: str, g: ModelGraph) -> TestCase:
    nodes = [n for n in g.topological_nodes() if n.op != "input"]
    models = {"block": g}
    for n in nodes:
        models[f"part:{n.name}"] = g.subgraph([n.name], name=f"{g.name}_{n.name}")
    return TestCase(f"block:{name}", "block", tuple(n.op for n in nodes), models,
                    {n.name: (n.name,) for n in nodes}, block=name)


def build_testcases(shapes: TestShapes | None = None, *, ops: Iterable[str] = PAIR_OPS,
                    kinds: Iterable[str] = ("pair", "multi_output", "multi_input", "block"),
                    only: Iterable[str] | None = None) -> list[TestCase]:
    """All test cases, deterministic order: pairs, multi-output, multi-input, blocks.

    Parameters
    ----------
    shapes : TestShapes, optional
        Default nn-Meter shapes.
    ops : iterable of str
        The ops whose ordered pairs are tested (default :data:`PAIR_OPS`).
    kinds : iterable of str
        Which kinds of case to build.
    only : iterable of str, optional
        Keep only cases with these names (e.g. ``["conv->relu", "block:se"]``).
    """
    s = shapes or TestShapes()
    kinds = set(kinds)
    ops = list(ops)
    cases: list[TestCase] = []
    if "pair" in kinds:
        for op1 in ops:
            for op2 in ops:
                if pair_skip_reason(op1, op2) is None:
                    cases.append(_pair_case(op1, op2, s))
    if "multi_output" in kinds:
        for p in ("conv", "dwconv", "bn"):
            cases.append(_multi_output_case(p, "relu", "add", s))
    if "multi_input" in kinds:
        for join in ("add", "concat"):
            cases.append(_multi_input_case("conv", join, s))
    if "block" in kinds:
        for name, g in _block_graphs(s).items():
            cases.append(_block_case(name, g))
    if only is not None:
        wanted = set(only)
        cases = [c for c in cases if c.name in wanted]
    return cases

"""NAS-Bench-201 (Dong & Yang, ICLR 2020): the cell-based search space of 15,625 cells.

A cell is a DAG of 4 nodes; each of its 6 edges (j <- i, i < j) holds one of 5
candidate ops: ``none`` (zero), ``skip_connect`` (identity), ``nor_conv_1x1`` and
``nor_conv_3x3`` (ReLU → conv without bias → BN) and ``avg_pool_3x3`` (stride 1,
padding 1, padding excluded from the average). Node j is the sum of its incoming
edges; the cell outputs node 3. 5^6 = 15,625 cells.

The network, as NAS-Bench-201 defines it for CIFAR: 32x32 input → conv 3x3 16 + BN
→ 5 cells at C=16 → residual reduction block → 5 cells at C=32 → reduction → 5 cells
at C=64 → BN → ReLU → global pooling → fc(10). A reduction block is ResNet's basic
block: ReLU-conv3x3/2-BN → ReLU-conv3x3-BN, plus a shortcut avgpool 2x2/2 → conv 1x1.

Inference-time graph: ``none`` edges are dropped; cell nodes that feed nothing alive
(or that only receive zeros) are pruned, as every inference compiler would. A cell
whose output is identically zero is kept as a multiply of its input by a constant,
as NAS-Bench-201's own ``Zero`` op computes ``x.mul(0.)``.

Base config: the all-``nor_conv_3x3`` cell, the largest network of the space:
1,531,546 params and 220.1 M multiply-adds, matching NAS-Bench-201's reported range
(params 0.07-1.53 M, FLOPs 7.8-220.1 M on CIFAR-10, its "FLOPs" being multiply-adds).
The smallest cells (no conv on any live edge) give 7.78 M multiply-adds.

Examples
--------
>>> fam = NASBench201Family()
>>> cell_from_index(cell_index(("nor_conv_3x3",) * 6)) == ("nor_conv_3x3",) * 6
True
>>> arch_str(fam.base_config().cell).count("nor_conv_3x3")
6
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from nnmeter.ir.builder import GraphBuilder
from nnmeter.ir.graph import ModelGraph, Node, Ref
from nnmeter.zoo.base import Family

__all__ = ["NASBench201Config", "NASBench201Family", "CANDIDATE_OPS", "EDGES", "NUM_CELLS",
           "cell_index", "cell_from_index", "arch_str", "parse_arch_str", "live_cell"]

#: The 5 candidate ops, in NAS-Bench-201's order.
CANDIDATE_OPS: tuple[str, ...] = ("none", "skip_connect", "nor_conv_1x1", "nor_conv_3x3",
                                  "avg_pool_3x3")
#: The 6 edges of a cell as (to, from), in the order of NAS-Bench-201's arch strings.
EDGES: tuple[tuple[int, int], ...] = ((1, 0), (2, 0), (2, 1), (3, 0), (3, 1), (3, 2))
#: Number of distinct cells.
NUM_CELLS = len(CANDIDATE_OPS) ** len(EDGES)


def cell_index(cell: tuple[str, ...]) -> int:
    """Index 0..15624 of a cell (base-5 digits over :data:`EDGES`)."""
    if len(cell) != len(EDGES):
        raise ValueError(f"a NAS-Bench-201 cell has {len(EDGES)} ops, got {len(cell)}: {cell!r}")
    idx = 0
    for op in cell:
        if op not in CANDIDATE_OPS:
            raise ValueError(f"NAS-Bench-201 op {op!r} is not one of "
                             f"{', '.join(CANDIDATE_OPS)}")
        idx = idx * len(CANDIDATE_OPS) + CANDIDATE_OPS.index(op)
    return idx


def cell_from_index(index: int) -> tuple[str, ...]:
    """The cell of :func:`cell_index` ``index``.

    Raises
    ------
    ValueError
        If ``index`` is outside 0..15624.
    """
    if not 0 <= index < NUM_CELLS:
        raise ValueError(f"cell index {index} is outside 0..{NUM_CELLS - 1}")
    ops = []
    for _ in EDGES:
        index, d = divmod(index, len(CANDIDATE_OPS))
        ops.append(CANDIDATE_OPS[d])
    return tuple(reversed(ops))


def arch_str(cell: tuple[str, ...]) -> str:
    """NAS-Bench-201's architecture string, e.g. ``|nor_conv_3x3~0|+|...~0|...~1|+|...``."""
    parts: list[list[str]] = [[], [], []]
    for (j, i), op in zip(EDGES, cell):
        parts[j - 1].append(f"{op}~{i}")
    return "+".join("|" + "|".join(p) + "|" for p in parts)


def parse_arch_str(text: str) -> tuple[str, ...]:
    """The cell of NAS-Bench-201's architecture string (the inverse of :func:`arch_str`).

    Raises
    ------
    ValueError
        If ``text`` is not ``|op~0|+|op~0|op~1|+|op~0|op~1|op~2|`` with ops from
        :data:`CANDIDATE_OPS`.
    """
    nodes = text.strip().split("+")
    if len(nodes) != 3:
        raise ValueError(f"not a NAS-Bench-201 arch string (3 nodes joined by '+'): {text!r}")
    cell: list[str] = []
    for j, node in enumerate(nodes, start=1):
        edges = node.strip("|").split("|")
        if not (node.startswith("|") and node.endswith("|")) or len(edges) != j:
            raise ValueError(f"node {j} of {text!r} must list {j} edge(s) as |op~i|...")
        for i, edge in enumerate(edges):
            op, _, src = edge.partition("~")
            if src != str(i) or op not in CANDIDATE_OPS:
                raise ValueError(f"edge {edge!r} of {text!r}: expected op~{i} with op one "
                                 f"of {', '.join(CANDIDATE_OPS)}")
            cell.append(op)
    return tuple(cell)


def live_cell(cell: tuple[str, ...]) -> tuple[str, ...]:
    """``cell`` with every edge the inference graph drops set to ``none``: edges from a
    node that only receives zeros, and edges into a node that feeds nothing alive
    (see the module docstring); an all-``none`` cell when the output is zero.

    Two cells with one live cell build the same graph, so they have one latency: the
    15,625 cells are 9,445 distinct networks.

    >>> live_cell(("skip_connect", "none", "none", "none", "none", "nor_conv_3x3"))
    ('none', 'none', 'none', 'none', 'none', 'none')
    >>> live_cell(("none", "nor_conv_1x1", "none", "skip_connect", "avg_pool_3x3", "none"))
    ('none', 'none', 'none', 'skip_connect', 'none', 'none')
    """
    ops = dict(zip(EDGES, cell))
    nonzero, needed = _liveness(ops)
    if not nonzero[3]:
        return ("none",) * len(EDGES)
    return tuple(op if op != "none" and nonzero[i] and nonzero[j] and needed[j] else "none"
                 for (j, i), op in zip(EDGES, cell))


def _liveness(ops: dict[tuple[int, int], str]) -> tuple[dict[int, bool], dict[int, bool]]:
    """(nonzero, needed) per cell node: a node is non-zero when some live edge brings it
    a non-zero tensor, and needed when it reaches the output through live edges."""
    nonzero = {0: True}
    for j in (1, 2, 3):
        nonzero[j] = any(ops[(j, i)] != "none" and nonzero[i] for i in range(j))
    needed = {3: True}
    for i in (2, 1, 0):
        needed[i] = any(ops[(j, i)] != "none" and needed[j] and nonzero[j]
                        for j in range(i + 1, 4))
    return nonzero, needed


@dataclass(frozen=True)
class NASBench201Config:
    """One NAS-Bench-201 network.

    Attributes
    ----------
    cell : tuple of 6 str
        Op on each edge of :data:`EDGES`, from :data:`CANDIDATE_OPS`.
    channels : tuple of 3 ints
        Channels of the three stages (16, 32, 64 as defined).
    cells_per_stage : int
        N (5 as defined).
    resolution : int
        Input height and width (32 as defined).
    num_classes : int
        Classifier outputs (10: CIFAR-10).
    """

    cell: tuple[str, ...] = ("nor_conv_3x3",) * 6
    channels: tuple[int, ...] = (16, 32, 64)
    cells_per_stage: int = 5
    resolution: int = 32
    num_classes: int = 10


def _relu_conv_bn(b: GraphBuilder, x: Ref, c: int, k: int, s: int, name: str) -> Ref:
    y = b.relu(x, name=f"{name}.relu")
    y = b.conv(y, c, k, s, bias=False, name=f"{name}.conv")
    return b.bn(y, name=f"{name}.bn")


def _cell(b: GraphBuilder, x: Ref, cell: tuple[str, ...], name: str) -> Ref:
    c = b.shape(x)[1]
    ops = {edge: op for edge, op in zip(EDGES, cell)}
    nonzero, needed = _liveness(ops)
    if not nonzero[3]:
        return b.eltwise_const("mul", x, (1, 1, 1, 1), name=f"{name}.zero")
    refs: dict[int, Ref] = {0: x}
    for j in (1, 2, 3):
        if not (nonzero[j] and needed[j]):
            continue
        terms: list[Ref] = []
        for i in range(j):
            op = ops[(j, i)]
            if op == "none" or not nonzero[i]:
                continue
            p = f"{name}.edge{j}_{i}"
            if op == "skip_connect":
                terms.append(refs[i])
            elif op == "nor_conv_1x1":
                terms.append(_relu_conv_bn(b, refs[i], c, 1, 1, p))
            elif op == "nor_conv_3x3":
                terms.append(_relu_conv_bn(b, refs[i], c, 3, 1, p))
            elif op == "avg_pool_3x3":
                terms.append(b.avgpool(refs[i], 3, 1, pads=(1, 1, 1, 1), name=f"{p}.pool"))
            else:
                raise ValueError(f"NAS-Bench-201 op {op!r} is not one of {CANDIDATE_OPS}")
        y = terms[0]
        for t, term in enumerate(terms[1:], start=1):
            y = b.add_(y, term, name=f"{name}.node{j}.add{t}")
        refs[j] = y
    return refs[3]


def _clone_cell(b: GraphBuilder, template: tuple, prefix: str, x: Ref) -> Ref:
    """A copy of the cell ``template`` = (its name prefix, its input, its nodes, its
    output) named ``prefix`` and reading ``x`` (of the template input's shape): the same
    nodes as :func:`_cell` would add, without building and inferring them again."""
    src, x_src, nodes, out = template
    cut = len(src)

    def ref(r: Ref) -> Ref:
        return x if r == x_src else Ref(prefix + r.node[cut:], r.port)

    g = b.graph
    for n in nodes:
        g._insert(Node(prefix + n.name[cut:], n.op, n.attrs, tuple(ref(r) for r in n.inputs),
                       n.input_shapes, n.output_shapes))
    return ref(out)


def _reduction(b: GraphBuilder, x: Ref, c: int, name: str) -> Ref:
    y = _relu_conv_bn(b, x, c, 3, 2, f"{name}.conv_a")
    y = _relu_conv_bn(b, y, c, 3, 1, f"{name}.conv_b")
    s = b.avgpool(x, 2, 2, name=f"{name}.downsample.pool")
    s = b.conv(s, c, 1, bias=False, name=f"{name}.downsample.conv")
    return b.add_(s, y, name=f"{name}.add")


class NASBench201Family(Family):
    name = "nasbench201"
    config_cls = NASBench201Config
    description = "NAS-Bench-201 cells (5 ops on 6 edges, 15,625 cells), CIFAR-10 network"
    ranges = {
        "cell": "uniform over the 15,625 cells (5 ops on each of 6 edges)",
        "network": "fixed as defined: C=16/32/64, N=5, 32x32 input, 10 classes",
    }
    reference = {"params": 1_531_546, "macs": 220_110_000,
                 "source": "NAS-Bench-201 (Dong & Yang, ICLR 2020): largest cell "
                           "(all nor_conv_3x3) 1.53 M params, 220.11 M FLOPs (multiply-adds) "
                           "on CIFAR-10; 15,625 cells"}

    def build(self, config: NASBench201Config) -> ModelGraph:
        r = config.resolution
        b = GraphBuilder("nasbench201", (1, 3, r, r))
        y = b.conv(b.x, config.channels[0], 3, bias=False, name="stem.conv")
        y = b.bn(y, name="stem.bn")
        k = 0
        for s, c in enumerate(config.channels):
            if s > 0:
                y = _reduction(b, y, c, f"cells.{k}")
                k += 1
            template = None
            for _ in range(config.cells_per_stage):
                if template is None:
                    before = len(b.graph)
                    out = _cell(b, y, config.cell, f"cells.{k}")
                    added = list(b.graph.nx._node.values())[before:]  # insertion order
                    template = (f"cells.{k}", y, [d["node"] for d in added], out)
                    y = out
                else:
                    # the stage's other cells are the same cell on the same shapes: copies
                    y = _clone_cell(b, template, f"cells.{k}", y)
                k += 1
        y = b.bn(y, name="lastact.bn")
        y = b.relu(y, name="lastact.relu")
        y = b.gap(y, keepdims=False, name="global_pooling")
        y = b.fc(y, config.num_classes, name="classifier")
        return b.build([y], validate=False)

    def sample(self, rng: np.random.Generator) -> NASBench201Config:
        return NASBench201Config(cell=cell_from_index(int(rng.integers(NUM_CELLS))))

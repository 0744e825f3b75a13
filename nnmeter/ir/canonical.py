"""Canonical passes: rewrite a graph as the runtimes see it after loading it.

A model written by another tool carries ops that every runtime here folds away at load
time (ORT's level-1 and level-2 rewrites, OpenVINO's and MNN's conversions, the TFLite
converter): an exporter's ``Identity`` and ``Dropout``, a batch-norm split into a
``Mul`` and an ``Add`` by per-channel constants, explicit zero ``Pad`` nodes in front of
convolutions, pairs of transposes that cancel. Predicting those ops as kernels predicts
work the runtime never does. Each pass here is a plain function of the graph that
rewrites it in place and returns what it did, one line per rewrite; :func:`canonicalize`
runs the passes every runtime here agrees on and records the lines in
``graph.meta["canonical"]``; :func:`for_backend` adds what only some runtimes do (the
predictor and ``nnmeter kernels`` call it with their backend).

An IR node that takes over an op keeps the op's name in ``meta["absorbed"]``, so that a
runtime's report naming the source op maps back to it
(:func:`nnmeter.partition.truth.ir_name_map`). An op a pass cannot handle stays where
it is.

What the passes leave alone on purpose:

- a scalar constant added to or multiplied with a convolution's output (``x + 3`` of a
  decomposed h-swish): folding it would be exact, but the decomposed h-swish and
  h-sigmoid blocks are recognised by that very ``add`` (:mod:`nnmeter.kernels.naming`);
- a constant affine op after a fully connected layer (ORT's fusion of ``Gemm`` + ``Add``
  happens in the frontend, which maps it to ``fc`` with a bias);
- reshapes and flattens: the partitioner already treats them as views
  (``kernel_type_of`` drops them from fused kernels).

Examples
--------
>>> from nnmeter.ir.builder import GraphBuilder
>>> b = GraphBuilder("m", (1, 8, 8, 8))
>>> y = b.conv(b.x, 8, name="c")
>>> y = b.eltwise_const("mul", y, (1, 8, 1, 1), name="scale")
>>> g = b.build([b.relu(y, name="r")])
>>> canonicalize(g)
[]
>>> g = for_backend(g, "ort-cpu")
>>> g.meta["canonical"]
["folded mul 'scale' (per-channel constant) into conv 'c'"]
>>> [n.op for n in g.topological_nodes()]
['input', 'conv', 'relu']
>>> g.node("c").meta["absorbed"]
['scale']
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from nnmeter.ir.graph import ModelGraph, Node, Ref

__all__ = ["canonicalize", "for_backend", "PASSES", "drop_identity", "fold_constant_affine",
           "fold_constant_affine_into_norm", "split_convs_as_group", "drop_identity_shuffle",
           "merge_pad_into_conv", "cancel_transposes", "clip_as_relu6",
           "scale_matmul_at_output", "activation_as_one_op"]

#: ops that take a per-channel scale and shift into their weights and bias
_AFFINE_HOSTS = frozenset({"conv", "dwconv", "convtranspose", "bn"})
_AFFINE_OPS = frozenset({"mul", "add", "sub", "div"})


def _absorb(g: ModelGraph, host: str, node: Node) -> None:
    """Record ``node`` (and whatever it had absorbed) on ``host`` (a new meta dict: a
    copied graph shares its nodes' dicts with the original)."""
    h = g.node(host)
    names = list(h.meta.get("absorbed", ()))
    for nm in [node.name, (node.source or {}).get("name"), *node.meta.get("absorbed", ())]:
        if nm and nm not in names and nm != host:
            names.append(nm)
    g.replace(host, meta={**h.meta, "absorbed": names})


def _sole_reader(g: ModelGraph, name: str) -> str | None:
    """The one node reading ``name``'s output, None if several, none, or an output."""
    if any(o.node == name for o in g.outputs):
        return None
    readers = g.successors(name)
    return readers[0] if len(readers) == 1 else None


def drop_identity(g: ModelGraph) -> list[str]:
    """Remove ``identity`` ops (an exporter's Identity, an inference Dropout)."""
    done = []
    for name in list(g.topological_order()):
        n = g.node(name)
        if n.op != "identity" or len(n.inputs) != 1:
            continue
        if any(o.node == n.name for o in g.outputs):
            continue  # a graph output keeps its name
        src = n.inputs[0].node
        g.bypass(n.name)
        if g.node(src).op != "input":
            _absorb(g, src, n)
        done.append(f"removed identity {n.name!r}")
    return done


def _per_channel(shape: tuple[int, ...] | None, channels: int) -> bool:
    """A constant broadcast along axis 1 only: (C,1,1), (1,C,1,1), (1,C), (C,)... with
    C equal to the channels (a scalar is left alone: see the module doc)."""
    if not shape:
        return False
    dims = list(shape)
    while dims and dims[0] == 1 and len(dims) > 3:
        dims.pop(0)
    # after dropping leading batch ones: (C,), (C,1), (C,1,1), or (1,C,1,1)-like
    if len(dims) == 4:
        dims = dims[1:] if dims[0] == 1 else dims
    if not dims or dims[0] != channels:
        return False
    return all(d == 1 for d in dims[1:]) and channels > 1


def _folds_into_conv(g: ModelGraph, bn: Node) -> bool:
    """A batch-norm that the runtime folds into the convolution before it."""
    if len(bn.inputs) != 1:
        return False
    p = g.node(bn.inputs[0].node)
    return p.op in ("conv", "dwconv", "convtranspose") and _sole_reader(g, p.name) == bn.name


def fold_constant_affine(g: ModelGraph) -> list[str]:
    """Fold ``mul``/``add``/``sub``/``div`` by a per-channel constant into the
    convolution that produces its input, or the batch-norm folded into one (ORT's
    ConvMulFusion and ConvAddFusion, OpenVINO's and MNN's scale-shift folding). After a
    standalone batch-norm (pre-activation DenseNets) the ops stay: ORT runs them."""
    return _fold_affine(g, into_norm=False)


def fold_constant_affine_into_norm(g: ModelGraph) -> list[str]:
    """:func:`fold_constant_affine`, and a scale or shift after a standalone batch-norm
    joins the norm too: OpenVINO runs ``bn → mul(c) → add(c) → relu`` (Caffe2's
    DenseNets write their batch-norms so) as one element-wise node, the norm's own
    scale and shift with the constants' folded in.

    >>> from nnmeter.ir.builder import GraphBuilder
    >>> b = GraphBuilder("m", (1, 8, 8, 8))
    >>> y = b.bn(b.maxpool(b.x, 2, name="p"), name="n")
    >>> y = b.eltwise_const("add", b.eltwise_const("mul", y, (8, 1, 1), name="s"),
    ...                     (8, 1, 1), name="t")
    >>> g = b.build([b.relu(y, name="r")])
    >>> fold_constant_affine(g), len(fold_constant_affine_into_norm(g))
    ([], 2)
    >>> g.node("n").meta["absorbed"]
    ['s', 't']
    """
    return _fold_affine(g, into_norm=True)


def _fold_affine(g: ModelGraph, *, into_norm: bool) -> list[str]:
    done = []
    changed = True
    while changed:
        changed = False
        for name in list(g.topological_order()):
            if name not in g:
                continue
            n = g.node(name)
            if n.op not in _AFFINE_OPS or len(n.inputs) != 1:
                continue
            const = getattr(n.attrs, "const_shape", None)
            host = n.inputs[0].node
            h = g.node(host)
            if h.op not in _AFFINE_HOSTS or _sole_reader(g, host) != n.name:
                continue
            if h.op == "bn" and not into_norm and not _folds_into_conv(g, h):
                continue  # a standalone norm keeps its scale-shift ops (ORT runs them)
            shape = h.output_shapes[n.inputs[0].port] if h.output_shapes else ()
            if len(shape) < 2 or not _per_channel(const, int(shape[1])):
                continue
            if n.op in ("add", "sub") and h.op != "bn" and not getattr(h.attrs, "bias", True):
                g.replace(host, attrs=dataclasses.replace(h.attrs, bias=True))
            g.bypass(n.name)
            _absorb(g, host, n)
            done.append(f"folded {n.op} {n.name!r} (per-channel constant) into {h.op} {host!r}")
            changed = True
    return done


def merge_pad_into_conv(g: ModelGraph) -> list[str]:
    """Merge a zero ``pad`` of H and W into the convolution that reads it (ORT's
    PadFusion; TensorFlow exporters write ``Pad`` + ``Conv(padding=VALID)``)."""
    done = []
    for name in list(g.topological_order()):
        n = g.node(name)
        if n.op != "pad" or len(n.inputs) != 1:
            continue
        a = n.attrs
        if a.mode != "constant" or float(a.value) != 0.0 or len(a.pads) != 8:
            continue
        begin, end = a.pads[:4], a.pads[4:]
        if any(begin[:2]) or any(end[:2]) or min(a.pads) < 0:
            continue  # pads batch or channels, or crops
        reader = _sole_reader(g, n.name)
        if reader is None:
            continue
        c = g.node(reader)
        if c.op not in ("conv", "dwconv") or c.inputs[0].node != n.name:
            continue
        t, lft, b, r = c.attrs.pads
        pads = (t + begin[2], lft + begin[3], b + end[2], r + end[3])
        g.replace(reader, attrs=dataclasses.replace(c.attrs, pads=pads))
        g.bypass(n.name)
        # the convolution reads the unpadded tensor now
        g.replace(reader, input_shapes=(g.shape_of(g.node(reader).inputs[0]),
                                        *g.node(reader).input_shapes[1:]))
        _absorb(g, reader, n)
        done.append(f"merged pad {n.name!r} into {c.op} {reader!r}")
    return done


def cancel_transposes(g: ModelGraph) -> list[str]:
    """Remove a transpose followed by its inverse (layout round trips that converters
    write around ops they cannot express in the other layout)."""
    done = []
    for name in list(g.topological_order()):
        if name not in g:
            continue
        n = g.node(name)
        if n.op != "transpose" or len(n.inputs) != 1:
            continue
        reader = _sole_reader(g, n.name)
        if reader is None:
            continue
        m = g.node(reader)
        if m.op != "transpose":
            continue
        p, q = tuple(n.attrs.perm), tuple(m.attrs.perm)
        if len(p) != len(q) or tuple(p[i] for i in q) != tuple(range(len(p))):
            continue
        if any(o.node == reader for o in g.outputs):
            continue
        src = n.inputs[0].node
        g.bypass(reader)
        g.bypass(n.name)
        if g.node(src).op != "input":
            _absorb(g, src, n)
            _absorb(g, src, m)
        done.append(f"cancelled transposes {n.name!r} and {reader!r}")
    return done


def clip_as_relu6(g: ModelGraph) -> list[str]:
    """``clip`` to [0, 6] is ``relu6``; to [0, inf) is ``relu``."""
    from nnmeter.ir.ops import NoAttrs

    done = []
    for n in list(g.topological_nodes()):
        if n.op != "clip":
            continue
        lo, hi = float(n.attrs.min_value), float(n.attrs.max_value)
        op = "relu6" if (lo, hi) == (0.0, 6.0) else "relu" if (lo, hi) == (0.0, float("inf")) \
            else None
        if op is None:
            continue
        g.replace(n.name, op=op, attrs=NoAttrs())
        done.append(f"clip {n.name!r} [{lo:g}, {hi:g}] as {op}")
    return done


def _scalar_scale(n: Node) -> bool:
    """A ``mul`` or ``div`` by one scalar constant."""
    if n.op not in ("mul", "div") or len(n.inputs) != 1:
        return False
    shape = getattr(n.attrs, "const_shape", None)
    return shape is not None and all(d == 1 for d in shape)


def scale_matmul_at_output(g: ModelGraph) -> list[str]:
    """A scalar ``mul``/``div`` on an input of a ``matmul`` (and read by nothing else)
    moves to its output: ``(q * a) @ (k * b)`` is ``(q @ k) * (a * b)``. Attention
    exported through ``scaled_dot_product_attention`` scales q and k by sqrt(1/sqrt(d))
    each; ONNX Runtime runs both scales inside the product (``FusedMatMul`` with its
    alpha), as it runs a scale after it, so the pair becomes the ``matmul-scale``
    kernel a scale after the product makes. The scale after the product is the one
    already there (a scalar op that is the product's only reader) or a new ``mul``
    named ``<matmul>/scale``; it lists the moved ops in ``meta["absorbed"]``."""
    from nnmeter.ir.ops import EltwiseAttrs

    done = []
    for n in list(g.topological_nodes()):
        if n.op != "matmul":
            continue
        moved = [g.node(r.node) for r in n.inputs
                 if _scalar_scale(g.node(r.node)) and _sole_reader(g, r.node) == n.name]
        if not moved:
            continue
        for m in moved:
            g.bypass(m.name)
        reader = _sole_reader(g, n.name)
        if reader is not None and _scalar_scale(g.node(reader)):
            host = reader
        else:
            host = f"{n.name}/scale"
            while host in g:
                host += "_"
            readers = g.successors(n.name)
            product, scaled = Ref(n.name, 0), Ref(host, 0)
            out = n.output_shapes[0]
            g.add_node(host, "mul", EltwiseAttrs(const_shape=()), [product],
                       input_shapes=[out], output_shapes=[out])
            for r in readers:
                g.replace(r, inputs=[scaled if ref == product else ref
                                     for ref in g.node(r).inputs])
            g.outputs = [scaled if o == product else o for o in g.outputs]
        for m in moved:
            _absorb(g, host, m)
        names = ", ".join(repr(m.name) for m in moved)
        done.append(f"moved scalar {names} from the inputs of matmul {n.name!r} to its "
                    f"output ({host!r})")
    return done


def activation_as_one_op(g: ModelGraph) -> list[str]:
    """A decomposed h-swish ``x * relu6(x + 3) / 6`` (either order of the last two) is one
    ``hswish`` node, a decomposed h-sigmoid ``relu6(x + 3) / 6`` one ``hsigmoid``, named
    after the last op and absorbing the others: OpenVINO rebuilds both at load time
    (``HSwish``/``HSigmoid``, then fused into the convolution before them like any
    activation) and MNN's converter does (one ``UnaryOp``). The partitioner's block
    matcher (:mod:`nnmeter.partition.blocks`) finds the same ops; where the runtime
    does not rebuild them (ORT) they stay a block of four or three.

    >>> from nnmeter.ir.builder import GraphBuilder
    >>> b = GraphBuilder("m", (1, 8, 4, 4))
    >>> x = b.conv(b.x, 8, name="c")
    >>> r = b.relu6(b.eltwise_const("add", x, (), name="plus3"), name="r6")
    >>> y = b.eltwise_const("div", b.mul(x, r, name="m"), (), name="sixth")
    >>> g = b.build([b.conv(y, 8, name="c2")])
    >>> activation_as_one_op(g)
    ["rebuilt hswish 'sixth' from 'plus3', 'r6', 'm', 'sixth'"]
    >>> [n.op for n in g.topological_nodes()], g.node("sixth").meta["absorbed"]
    (['input', 'conv', 'hswish', 'conv'], ['plus3', 'r6', 'm'])
    """
    from nnmeter.ir.ops import NoAttrs
    from nnmeter.partition.blocks import _match_hswish

    done = []
    # removing a block's inner nodes leaves the others' relative order as it was
    order = {k: i for i, k in enumerate(g.topological_order())}
    for name in list(order):
        if name not in g or g.node(name).op != "add":
            continue
        m = _match_hswish(g, g.node(name))
        if m is None:
            continue
        kind, names = m
        names = tuple(sorted(names, key=order.__getitem__))
        exit_, first = names[-1], g.node(names[0])
        g.replace(exit_, op=kind, attrs=NoAttrs(), inputs=[first.inputs[0]],
                  input_shapes=first.input_shapes[:1])
        for inner in names[:-1]:
            _absorb(g, exit_, g.node(inner))
        for inner in reversed(names[:-1]):
            g.remove(inner)
        done.append(f"rebuilt {kind} {exit_!r} from " + ", ".join(repr(a) for a in names))
    return done


def drop_identity_shuffle(g: ModelGraph) -> list[str]:
    """A reshape → transpose → reshape that gives back its input's shape and moves only
    axes of size one (a channel shuffle of one group: ShuffleNet with ``groups=1``) is no
    op at all; OpenVINO removes it (ORT runs its three ops, MNN one copy). Its names go
    to the one op that reads the result (OpenVINO names that op's node after them), else
    to the op before.

    >>> from nnmeter.ir.builder import GraphBuilder
    >>> b = GraphBuilder("m", (1, 8, 4, 4))
    >>> y = b.reshape(b.relu(b.x, name="r"), (1, 1, 8, 4, 4), name="r1")
    >>> y = b.reshape(b.transpose(y, (0, 2, 1, 3, 4), name="t"), (1, 8, 4, 4), name="r2")
    >>> g = b.build([b.dwconv(y, 3, name="dw")])
    >>> drop_identity_shuffle(g)
    ["dropped 'r1', 't', 'r2' (a reshape, transpose and reshape that move nothing)"]
    >>> [n.op for n in g.topological_nodes()], g.node("dw").meta["absorbed"]
    (['input', 'relu', 'dwconv'], ['r1', 't', 'r2'])
    """
    done = []
    for name in list(g.topological_order()):
        if name not in g:
            continue
        r1 = g.node(name)
        if r1.op not in ("reshape", "flatten") or len(r1.inputs) != 1:
            continue
        t_name = _sole_reader(g, r1.name)
        t = g.node(t_name) if t_name else None
        if t is None or t.op != "transpose" or not r1.output_shapes:
            continue
        r2_name = _sole_reader(g, t.name)
        r2 = g.node(r2_name) if r2_name else None
        if r2 is None or r2.op not in ("reshape", "flatten") or not r1.input_shapes:
            continue
        mid = r1.output_shapes[0]
        perm = tuple(t.attrs.perm) or tuple(reversed(range(len(mid))))
        moved = [i for i in perm if mid[i] > 1]
        if r2.output_shapes[0] != r1.input_shapes[0] or moved != sorted(moved):
            continue
        readers = g.successors(r2.name)
        outputs = {o.node for o in g.outputs}
        src = r1.inputs[0]
        host = readers[0] if len(readers) == 1 and r2.name not in outputs else src.node
        if g.node(host).op == "input":
            continue
        for gone in (r2, t, r1):
            g.bypass(gone.name)
        for gone in (r1, t, r2):
            _absorb(g, host, gone)
        done.append(f"dropped {r1.name!r}, {t.name!r}, {r2.name!r} (a reshape, transpose and "
                    f"reshape that move nothing)")
    return done


def split_convs_as_group(g: ModelGraph) -> list[str]:
    """A channel ``split`` into equal parts, each read by one dense convolution of the
    same kind (kernel, stride, padding, dilation, bias, output channels) and nothing
    else, whose outputs a channel ``concat`` joins in order, is one grouped convolution
    (MixNet's and MixConv's grouped pointwise layers): OpenVINO runs it so, with the
    norm and activation after it fused in. Depthwise parts, or parts of different
    kernels, stay: OpenVINO runs those apart.

    >>> from nnmeter.ir.builder import GraphBuilder
    >>> b = GraphBuilder("m", (1, 8, 8, 8))
    >>> a, c = b.split(b.x, (4, 4), name="s")
    >>> y = b.concat([b.conv(a, 6, kernel=1, name="c0"), b.conv(c, 6, kernel=1, name="c1")],
    ...              name="cat")
    >>> g = b.build([b.relu(y, name="r")])
    >>> split_convs_as_group(g)
    ["grouped convolution 'c0' (2 groups) from 's', 'c0', 'c1', 'cat'"]
    >>> n = g.node("c0"); n.attrs.groups, n.attrs.out_channels, n.output_shape
    (2, 12, (1, 12, 8, 8))
    >>> sorted(n.meta["absorbed"])
    ['c1', 'cat', 's']
    """
    done = []
    for name in list(g.topological_order()):
        if name not in g:
            continue
        cat = g.node(name)
        if cat.op != "concat" or getattr(cat.attrs, "axis", None) != 1 or len(cat.inputs) < 2:
            continue
        convs = [g.node(r.node) for r in cat.inputs]
        first = convs[0]
        if (len({c.name for c in convs}) != len(convs) or first.op != "conv"
                or len(first.inputs) != 1):
            continue
        split = g.node(first.inputs[0].node)
        if (split.op != "split" or getattr(split.attrs, "axis", None) != 1
                or len(split.output_shapes) != len(convs) or not split.input_shapes):
            continue
        sizes = {s[1] for s in split.output_shapes if len(s) == 4}
        keys = {c.attrs for c in convs}
        if (len(sizes) != 1 or len(keys) != 1 or first.attrs.groups != 1
                or any(c.op != "conv" or len(c.inputs) != 1 or c.inputs[0] != Ref(split.name, i)
                       or _sole_reader(g, c.name) != cat.name for i, c in enumerate(convs))
                or len(g.successors(split.name)) != len(convs)
                or any(o.node == split.name for o in g.outputs)):
            continue
        k = len(convs)
        merged = dataclasses.replace(first.attrs, out_channels=first.attrs.out_channels * k,
                                     groups=k)
        g.replace(first.name, attrs=merged, inputs=[split.inputs[0]],
                  input_shapes=(split.input_shapes[0],), output_shapes=cat.output_shapes)
        g.redirect(cat.name, Ref(first.name, 0))
        g.remove(cat.name)
        for c in convs[1:]:
            g.remove(c.name)
        g.remove(split.name)
        for gone in (split, *convs[1:], cat):
            _absorb(g, first.name, gone)
        done.append(f"grouped convolution {first.name!r} ({k} groups) from "
                    + ", ".join(repr(n) for n in (split.name, *(c.name for c in convs), cat.name)))
    return done


#: the passes in the order :func:`canonicalize` runs them: what every runtime here does
PASSES: tuple[Callable[[ModelGraph], list[str]], ...] = (
    drop_identity, clip_as_relu6, cancel_transposes, merge_pad_into_conv,
)

#: the passes only some runtimes do, per backend (by id prefix), in order:
#: :func:`fold_constant_affine` where the runtime folds a per-channel scale and shift
#: into the convolution before it, as its own graph shows (ORT's
#: ConvMulFusion/ConvAddFusion, OpenVINO's; OpenVINO also into a standalone batch-norm,
#: :func:`fold_constant_affine_into_norm`); :func:`scale_matmul_at_output` where it runs
#: a scalar scale of a matmul's input inside the product (ORT's MatMulScaleFusion:
#: FusedMatMul); :func:`activation_as_one_op` where the runtime rebuilds a decomposed
#: h-swish/h-sigmoid as one op (OpenVINO, MNN); :func:`split_convs_as_group` where it
#: runs a split into equal dense convolutions and their concat as one grouped convolution
#: (OpenVINO); :func:`drop_identity_shuffle` where it removes a shuffle that moves nothing
#: (OpenVINO). MNN runs a scale and shift as ops of their
#: own, and LiteRT runs what nnmeter's exporter writes.
_BACKEND_PASSES: dict[str, tuple[Callable[[ModelGraph], list[str]], ...]] = {
    "ort": (fold_constant_affine, scale_matmul_at_output),
    "openvino": (fold_constant_affine_into_norm, activation_as_one_op, split_convs_as_group,
                 drop_identity_shuffle),
    "mnn": (activation_as_one_op,),
}


def _passes_of(backend_id: str | None) -> tuple[Callable[[ModelGraph], list[str]], ...]:
    """The backend-specific passes of ``backend_id`` (by id prefix); None: every one."""
    if backend_id is None:
        return tuple(p for ps in _BACKEND_PASSES.values() for p in ps)
    return _BACKEND_PASSES.get(str(backend_id).split("-", 1)[0], ())


def _rewrite_candidate(g: ModelGraph, backend_id: str | None = None) -> bool:
    """Whether a pass of ``backend_id`` (None: of any backend) may rewrite ``g`` (one scan
    of its nodes): a per-channel constant affine op, a scalar scale read by a matmul, a
    constant add read by a relu6 (a decomposed h-swish/h-sigmoid); a split read by
    convolutions only where :func:`split_convs_as_group` runs, a transpose of a reshape where
    :func:`drop_identity_shuffle` runs. A graph no pass may rewrite keeps the fast paths
    (one scan, no copy; the segment memo of ``predict_many``)."""
    passes = _passes_of(backend_id)
    if not passes:
        return False
    splits = split_convs_as_group in passes
    shuffles = drop_identity_shuffle in passes
    nodes = g.nx._node
    succ, pred = g.nx._succ, g.nx._pred
    for name, n in nodes.items():
        node = n["node"]
        if splits and node.op == "split" and succ[name] and all(
                nodes[r]["node"].op == "conv" for r in succ[name]):
            return True
        if shuffles and node.op == "transpose" and any(
                nodes[p]["node"].op in ("reshape", "flatten") for p in pred[name]):
            return True
        if node.op in _AFFINE_OPS and len(node.inputs) == 1:
            shape = getattr(node.attrs, "const_shape", None)
            if shape and max(shape) > 1:
                return True
            if shape is not None and any(nodes[r]["node"].op == "matmul" for r in succ[name]):
                return True
            if node.op == "add" and any(nodes[r]["node"].op in ("relu6", "clip")
                                        for r in succ[name]):
                return True
    return False


def for_backend(g: ModelGraph, backend_id: str) -> ModelGraph:
    """``g`` as ``backend_id``'s runtime runs it: a copy with the backend-specific
    passes applied (:func:`fold_constant_affine` where the runtime folds scale and
    shift, :func:`scale_matmul_at_output` where it scales a product's inputs inside
    it), or ``g`` itself when they change nothing. Cheap when there is nothing to
    rewrite (one scan of the nodes)."""
    if not _rewrite_candidate(g, backend_id):  # also False for a backend without passes
        return g
    out = g.copy()
    notes = [line for p in _passes_of(backend_id) for line in p(out)]
    if not notes:
        return g
    out.meta = {**(getattr(g, "meta", None) or {})}
    out.meta["canonical"] = [*out.meta.get("canonical", ()), *notes]
    out.validate()
    return out


def canonicalize(g: ModelGraph, passes: Any = PASSES) -> list[str]:
    """Run ``passes`` over ``g`` in place; what they did, also appended to
    ``g.meta["canonical"]``. The graph is validated afterwards."""
    notes: list[str] = []
    for p in passes:
        notes.extend(p(g))
    if notes:
        g.meta = dict(getattr(g, "meta", None) or {})
        g.meta.setdefault("canonical", []).extend(notes)
        g.invalidate()
        g.validate()
    return notes

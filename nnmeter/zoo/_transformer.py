"""Transformer building blocks shared by the zoo's vit, bert and mobilevit families.

Token tensors are rank 3, ``(B, L, D)`` (batch, tokens, features); ``fc`` maps their
last axis. Multi-head attention keeps every tensor at rank 4 or less, the way
PyTorch's exports write it::

    q, k, v  (B, L, D) --reshape--> (B, L, H, dh)
    q, v     --transpose (0, 2, 1, 3)--> (B, H, L, dh)
    k        --transpose (0, 2, 3, 1)--> (B, H, dh, L)
    scores = matmul(q, kᵀ) * dh**-0.5       (B, H, L, L)  (a scalar ``mul`` constant)
    out    = matmul(softmax(scores, -1), v) (B, H, L, dh)
           --transpose (0, 2, 1, 3)--> (B, L, H, dh) --reshape--> (B, L, D) --fc--> (B, L, D)

The scale is a rank-0 constant of an elementwise ``mul``, so the cost model counts
it as one parameter per attention layer (the published counts do not): 12 extra
"parameters" in a 12-block ViT, far below any tolerance.

Examples
--------
>>> from nnmeter.ir.builder import GraphBuilder
>>> b = GraphBuilder("attn", input_shape=(1, 10, 64))
>>> y = encoder_block(b, b.x, heads=4, mlp_hidden=128, name="blocks.0")
>>> b.shape(y)
(1, 10, 64)
"""

from __future__ import annotations

from nnmeter.ir.builder import GraphBuilder
from nnmeter.ir.graph import Ref

__all__ = ["attention", "mlp", "encoder_block"]


def attention(b: GraphBuilder, x: Ref, heads: int, *, name: str, fused_qkv: bool = True) -> Ref:
    """Multi-head self-attention over the tokens of ``x`` (B, L, D), with the output
    projection; returns (B, L, D).

    ``fused_qkv`` computes q, k and v with one ``fc`` to 3·D and a ``split`` (timm's
    ViT, MobileViT); otherwise with three ``fc`` (Hugging Face's BERT).

    Raises
    ------
    ValueError
        If D is not a multiple of ``heads``.
    """
    bsz, length, dim = b.shape(x)
    if heads < 1 or dim % heads:
        raise ValueError(f"{name}: width {dim} is not a multiple of {heads} heads; "
                         f"choose heads that divide the width")
    dh = dim // heads
    if fused_qkv:
        qkv = b.fc(x, 3 * dim, name=f"{name}.qkv")
        q, k, v = b.split(qkv, (dim, dim, dim), axis=2, name=f"{name}.qkv_split")
    else:
        q = b.fc(x, dim, name=f"{name}.query")
        k = b.fc(x, dim, name=f"{name}.key")
        v = b.fc(x, dim, name=f"{name}.value")
    heads_shape = (bsz, length, heads, dh)
    q = b.transpose(b.reshape(q, heads_shape, name=f"{name}.q_heads"), (0, 2, 1, 3),
                    name=f"{name}.q_t")
    k = b.transpose(b.reshape(k, heads_shape, name=f"{name}.k_heads"), (0, 2, 3, 1),
                    name=f"{name}.k_t")
    v = b.transpose(b.reshape(v, heads_shape, name=f"{name}.v_heads"), (0, 2, 1, 3),
                    name=f"{name}.v_t")
    s = b.add("matmul", [q, k], name=f"{name}.scores")
    s = b.eltwise_const("mul", s, (), name=f"{name}.scale")
    p = b.softmax(s, -1, name=f"{name}.softmax")
    o = b.add("matmul", [p, v], name=f"{name}.context")
    o = b.transpose(o, (0, 2, 1, 3), name=f"{name}.context_t")
    o = b.reshape(o, (bsz, length, dim), name=f"{name}.merge_heads")
    return b.fc(o, dim, name=f"{name}.proj")


def mlp(b: GraphBuilder, x: Ref, hidden: int, *, name: str, act: str = "gelu") -> Ref:
    """fc(hidden) → act → fc(back to D) over the last axis of ``x``."""
    dim = b.shape(x)[-1]
    y = b.fc(x, hidden, name=f"{name}.fc1")
    y = b.act(y, act, name=f"{name}.{act}")
    return b.fc(y, dim, name=f"{name}.fc2")


def encoder_block(b: GraphBuilder, x: Ref, *, heads: int, mlp_hidden: int, name: str,
                  pre_norm: bool = True, act: str = "gelu", fused_qkv: bool = True) -> Ref:
    """One transformer encoder layer on (B, L, D) tokens.

    Pre-norm (ViT, MobileViT): x + attn(ln(x)), then x + mlp(ln(x)).
    Post-norm (BERT): ln(x + attn(x)), then ln(x + mlp(x)).
    Dropout is an identity at inference and is omitted.
    """
    if pre_norm:
        y = attention(b, b.layernorm(x, name=f"{name}.norm1"), heads, name=f"{name}.attn",
                      fused_qkv=fused_qkv)
        x = b.add_(x, y, name=f"{name}.add1")
        y = mlp(b, b.layernorm(x, name=f"{name}.norm2"), mlp_hidden, name=f"{name}.mlp",
                act=act)
        return b.add_(x, y, name=f"{name}.add2")
    y = attention(b, x, heads, name=f"{name}.attn", fused_qkv=fused_qkv)
    x = b.layernorm(b.add_(x, y, name=f"{name}.add1"), name=f"{name}.norm1")
    y = mlp(b, x, mlp_hidden, name=f"{name}.mlp", act=act)
    return b.layernorm(b.add_(x, y, name=f"{name}.add2"), name=f"{name}.norm2")

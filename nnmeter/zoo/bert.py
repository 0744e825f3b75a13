"""BERT encoder (Devlin et al., NAACL 2019), as Hugging Face's ``BertModel``, on
already-embedded input.

The graph input is the (1, L, D) sum of the token, position and segment embeddings:
those are table reads (gathers by token id), outside the compute graph, and their
tables are not counted. The graph is the embedding layernorm → post-norm encoder
layers (three ``fc`` for query, key and value, attention → add → layernorm; fc →
GELU → fc → add → layernorm; see :mod:`nnmeter.zoo._transformer`). The output is the
last hidden state (1, L, D); the pooler (a D×D fc and tanh on the first token, used
only for sentence classification) is left out.

Base config: BERT-mini (Turc et al., 2019: 4 layers, D 256, 4 heads) at sequence
length 128: 3,159,556 params, 0.436 G multiply-adds. ``presets()`` adds BERT-tiny,
-small, -medium and BERT-base; BERT-base's encoder has 85,056,012 params here, the
published 85,054,464 of its 12 layers plus the embedding layernorm (1,536) and the 12
attention-scale scalars (BERT-base's 110 M total also holds 23.8 M of embedding
tables and the 0.6 M pooler).

This family is opt-in: it is in :data:`nnmeter.zoo.TRANSFORMER_FAMILIES`, not in the
default CNN list :data:`nnmeter.zoo.FAMILY_NAMES`.

Examples
--------
>>> fam = BERTFamily()
>>> g = fam.build(fam.base_config())
>>> g.shape_of(g.input_names[0]), g.shape_of(g.outputs[0])
((1, 128, 256), (1, 128, 256))
>>> g.cost().params
3159556
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from nnmeter.ir.builder import GraphBuilder
from nnmeter.ir.graph import ModelGraph
from nnmeter.zoo._transformer import encoder_block
from nnmeter.zoo.base import Family

__all__ = ["BERTConfig", "BERTFamily"]

_HIDDEN = (128, 256, 384, 512, 768)
_LAYERS = tuple(range(2, 13))
_SEQ_LENS = (32, 64, 128, 256, 384, 512)
#: Head width of every sampled model, as in all published BERT sizes.
_HEAD_DIM = 64


@dataclass(frozen=True)
class BERTConfig:
    """One BERT encoder.

    Attributes
    ----------
    seq_len : int
        Tokens L of the (1, L, hidden) input.
    hidden : int
        Hidden width D.
    layers : int
        Encoder layers.
    heads : int
        Attention heads; ``hidden`` must be a multiple of it.
    intermediate : int
        Hidden width of each layer's feed-forward part (4·D in BERT).
    """

    seq_len: int = 128
    hidden: int = 256
    layers: int = 4
    heads: int = 4
    intermediate: int = 1024


def _bert(layers: int, hidden: int, seq_len: int = 128) -> BERTConfig:
    return BERTConfig(seq_len=seq_len, hidden=hidden, layers=layers,
                      heads=hidden // _HEAD_DIM, intermediate=4 * hidden)


class BERTFamily(Family):
    name = "bert"
    config_cls = BERTConfig
    description = "BERT-mini encoder (post-norm, GELU) on embedded tokens, L=128"
    ranges = {
        "hidden": "{128, 256, 384, 512, 768}",
        "heads": "hidden / 64",
        "layers": "2-12",
        "intermediate": "4 x hidden",
        "seq_len": "{32, 64, 128, 256, 384, 512}",
    }
    reference = {"params": 3_159_556, "macs": 436_207_616,
                 "source": "google-research/bert BERT-mini (L=4, H=256, A=4; Turc et al. "
                           "2019): 4 encoder layers of 789,760 params (3.16 M) plus the "
                           "embedding layernorm; no published multiply-adds: these are "
                           "counted from the layer shapes at L=128"}

    def presets(self) -> dict[str, BERTConfig]:
        return {"bert_tiny": _bert(2, 128), "bert_mini": _bert(4, 256),
                "bert_small": _bert(4, 512), "bert_medium": _bert(8, 512),
                "bert_base": _bert(12, 768)}

    def build(self, config: BERTConfig) -> ModelGraph:
        c = config
        b = GraphBuilder("bert", (1, c.seq_len, c.hidden), input_name="embeddings")
        y = b.layernorm(b.x, name="embeddings.norm")
        for i in range(c.layers):
            y = encoder_block(b, y, heads=c.heads, mlp_hidden=c.intermediate,
                              name=f"encoder.layer.{i}", pre_norm=False, fused_qkv=False)
        return b.build([y], validate=False)

    def sample(self, rng: np.random.Generator) -> BERTConfig:
        hidden = int(rng.choice(_HIDDEN))
        return _bert(int(rng.choice(_LAYERS)), hidden, int(rng.choice(_SEQ_LENS)))

"""The composition terms, registered in the order training removes them and prediction
applies them (:mod:`nnmeter.predictors.composition`).

Adding a term is one module with a :class:`~nnmeter.predictors.composition.Term`
subclass and one line below; third parties register theirs through the
``nnmeter.composition_terms`` entry-point group (they come after the built-ins).

Order matters: the overhead comes off first (the reorder line is fitted on rows without
it), weight refetch adjusts kernel times before absorbed kernels are set to 0, and the
reorders read which kernels were absorbed. The in-model factor comes last: it is
fitted on the predictor's own estimates of whole models, every other term applied.
"""

from __future__ import annotations

from typing import Any

from nnmeter.predictors.terms.absorbed import AbsorbedTerm
from nnmeter.predictors.terms.chain import ChainTerm
from nnmeter.predictors.terms.edges import EdgesTerm
from nnmeter.predictors.terms.in_model import InModelTerm
from nnmeter.predictors.terms.overhead import OverheadTerm
from nnmeter.predictors.terms.refetch import RefetchTerm
from nnmeter.predictors.terms.reorders import ReordersTerm
from nnmeter.registry import Registry

__all__ = ["TERMS", "composition_before", "OverheadTerm", "RefetchTerm", "AbsorbedTerm", "ReordersTerm",
           "EdgesTerm", "ChainTerm", "InModelTerm"]

TERMS: Registry[type] = Registry("composition terms",
                                 entry_point_group="nnmeter.composition_terms")
TERMS.register(OverheadTerm.name, OverheadTerm)
TERMS.register(RefetchTerm.name, RefetchTerm)
TERMS.register(AbsorbedTerm.name, AbsorbedTerm)
TERMS.register(ReordersTerm.name, ReordersTerm)
TERMS.register(EdgesTerm.name, EdgesTerm)
TERMS.register(ChainTerm.name, ChainTerm)
TERMS.register(InModelTerm.name, InModelTerm)


def composition_before(backend_id: str, dataset_dir: Any, name: str) -> Any:
    """The terms ahead of ``name``, fitted on the dataset in ``dataset_dir``: what
    training removes from a row before term ``name`` sees it (a calibration that
    measures a term's share needs them)."""
    from nnmeter.predictors.composition import Composition, fit_context
    from nnmeter.predictors.dataset import KernelDataset

    ds = KernelDataset(dataset_dir, backend_id)
    return Composition.fit(fit_context(backend_id, ds), TERMS, until=name)

"""A random forest as plain numpy arrays, with a vectorised traversal for prediction.

scikit-learn forests are converted once after training into flat arrays (all trees
concatenated). Prediction walks every (sample, tree) pair at once, one tree level per
numpy step, dropping the walks that have reached a leaf, so predicting one sample costs
a few dozen numpy ops over shrinking arrays rather than one Python call per tree. The
arrays save to ``.npz`` and load with ``allow_pickle=False``: a cached model cannot
execute code when it is loaded.

Examples
--------
>>> import numpy as np
>>> from sklearn.ensemble import RandomForestRegressor
>>> X = np.arange(40, dtype=float).reshape(20, 2); y = X[:, 0] * 2
>>> rf = RandomForestRegressor(n_estimators=5, random_state=0).fit(X, y)
>>> fa = ForestArrays.from_sklearn(rf)
>>> bool(np.allclose(fa.predict(X), rf.predict(X)))
True
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["ForestArrays"]


@dataclass(frozen=True)
class ForestArrays:
    """Flat arrays of a forest of regression trees; the prediction is the tree mean.

    Leaves point to themselves (``left[i] == right[i] == i``): that is how a walk knows
    it has arrived. ``depth`` (the deepest leaf) is kept for the cache format.
    """

    left: np.ndarray  # int32, global node index of the left child
    right: np.ndarray  # int32
    feature: np.ndarray  # int32, 0 at leaves
    threshold: np.ndarray  # float64, go left when x[feature] <= threshold
    value: np.ndarray  # float64, node output
    roots: np.ndarray  # int32, global index of each tree's root
    depth: int

    @classmethod
    def from_sklearn(cls, forest) -> "ForestArrays":
        """Convert a fitted scikit-learn forest or a single fitted tree regressor."""
        estimators = getattr(forest, "estimators_", None) or [forest]
        lefts, rights, feats, thrs, vals, roots = [], [], [], [], [], []
        offset = 0
        depth = 0
        for est in estimators:
            t = est.tree_
            n = t.node_count
            idx = np.arange(n, dtype=np.int64)
            leaf = t.children_left < 0
            lefts.append(np.where(leaf, idx, t.children_left) + offset)
            rights.append(np.where(leaf, idx, t.children_right) + offset)
            feats.append(np.where(leaf, 0, t.feature))
            thrs.append(np.where(leaf, 0.0, t.threshold))
            vals.append(t.value.reshape(n, -1)[:, 0])
            roots.append(offset)
            depth = max(depth, int(t.max_depth))
            offset += n
        return cls(
            left=np.concatenate(lefts).astype(np.int32),
            right=np.concatenate(rights).astype(np.int32),
            feature=np.concatenate(feats).astype(np.int32),
            threshold=np.concatenate(thrs).astype(np.float64),
            value=np.concatenate(vals).astype(np.float64),
            roots=np.asarray(roots, dtype=np.int32),
            depth=depth,
        )

    @property
    def n_trees(self) -> int:
        return int(self.roots.size)

    def predict(self, X: np.ndarray) -> np.ndarray:
        """Mean over trees of the leaf values reached by each row of ``X``."""
        X = np.asarray(X, dtype=np.float64)
        if X.ndim == 1:
            X = X[None, :]
        n, t = X.shape[0], self.roots.size
        # one entry per (row, tree); only the walks not yet at a leaf take each step, so
        # the work is the summed path length, not rows x trees x the deepest leaf
        node = np.tile(self.roots, n)
        row = np.repeat(np.arange(n), t)
        active = np.flatnonzero(self.left[node] != node)
        while active.size:
            nd = node[active]
            go_left = X[row[active], self.feature[nd]] <= self.threshold[nd]
            nxt = np.where(go_left, self.left[nd], self.right[nd])
            node[active] = nxt
            active = active[self.left[nxt] != nxt]
        return self.value[node].reshape(n, t).mean(axis=1)

    def to_arrays(self, prefix: str = "") -> dict[str, np.ndarray]:
        """The fields as a name → array map, for ``np.savez``."""
        return {
            f"{prefix}left": self.left, f"{prefix}right": self.right,
            f"{prefix}feature": self.feature, f"{prefix}threshold": self.threshold,
            f"{prefix}value": self.value, f"{prefix}roots": self.roots,
            f"{prefix}depth": np.asarray(self.depth, dtype=np.int64),
        }

    @classmethod
    def from_arrays(cls, arrays, prefix: str = "") -> "ForestArrays":
        """Inverse of :meth:`to_arrays` (accepts an ``np.load`` result)."""
        return cls(
            left=np.asarray(arrays[f"{prefix}left"], dtype=np.int32),
            right=np.asarray(arrays[f"{prefix}right"], dtype=np.int32),
            feature=np.asarray(arrays[f"{prefix}feature"], dtype=np.int32),
            threshold=np.asarray(arrays[f"{prefix}threshold"], dtype=np.float64),
            value=np.asarray(arrays[f"{prefix}value"], dtype=np.float64),
            roots=np.asarray(arrays[f"{prefix}roots"], dtype=np.int32),
            depth=int(arrays[f"{prefix}depth"]),
        )

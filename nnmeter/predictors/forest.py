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

    @classmethod
    def from_lightgbm_text(cls, text: str) -> "ForestArrays":
        """The trees of a LightGBM regression model's text format (``model_to_string``)
        as flat arrays; the model's prediction is :meth:`predict` times the tree count
        (LightGBM sums its trees; their shrinkage is already in the leaf values).

        Only numerical splits without a zero-as-missing rule are read (what nnmeter
        trains: finite features, LightGBM's defaults); anything else, or text that is
        not such a model, raises ValueError.
        """
        head, _, body = text.partition("\nTree=")
        if "objective=regression" not in head or not body:
            raise ValueError("not a LightGBM regression model text")
        lefts, rights, feats, thrs, vals, roots = [], [], [], [], [], []
        offset = 0
        depth = 0
        for block in ("Tree=" + body).split("\nTree=")[0:]:
            block = block.split("end of trees")[0]
            fields = dict(line.split("=", 1) for line in block.strip().splitlines()
                          if "=" in line)
            if "leaf_value" not in fields:
                continue
            leaves = [float(v) for v in fields["leaf_value"].split()]
            n_leaf = int(fields["num_leaves"])
            if len(leaves) != n_leaf or int(fields.get("num_cat", 0)):
                raise ValueError("categorical splits or an inconsistent tree")
            n_int = n_leaf - 1
            if n_int == 0:
                lefts.append([offset])
                rights.append([offset])
                feats.append([0])
                thrs.append([0.0])
                vals.append(leaves)
                roots.append(offset)
                offset += 1
                continue
            split = [int(v) for v in fields["split_feature"].split()]
            thr = [float(v) for v in fields["threshold"].split()]
            dtype = [int(v) for v in fields["decision_type"].split()]
            lc = [int(v) for v in fields["left_child"].split()]
            rc = [int(v) for v in fields["right_child"].split()]
            if not (len(split) == len(thr) == len(dtype) == len(lc) == len(rc) == n_int):
                raise ValueError("an inconsistent tree")
            if any(d & 1 or (d >> 2) & 3 == 1 for d in dtype):
                raise ValueError("categorical or zero-as-missing splits")

            def node(c: int) -> int:  # LightGBM: c >= 0 an internal node, ~c a leaf
                return offset + (c if c >= 0 else n_int + ~c)

            leaf_ids = [offset + n_int + j for j in range(n_leaf)]
            lefts.append([node(c) for c in lc] + leaf_ids)
            rights.append([node(c) for c in rc] + leaf_ids)
            feats.append(split + [0] * n_leaf)
            thrs.append(thr + [0.0] * n_leaf)
            vals.append([0.0] * n_int + leaves)
            roots.append(offset)
            depth = max(depth, n_int)
            offset += n_int + n_leaf
        if not roots:
            raise ValueError("no trees in the model text")
        return cls(
            left=np.concatenate([np.asarray(a, np.int64) for a in lefts]).astype(np.int32),
            right=np.concatenate([np.asarray(a, np.int64) for a in rights]).astype(np.int32),
            feature=np.concatenate([np.asarray(a, np.int64) for a in feats]).astype(np.int32),
            threshold=np.concatenate([np.asarray(a, float) for a in thrs]),
            value=np.concatenate([np.asarray(a, float) for a in vals]),
            roots=np.asarray(roots, dtype=np.int32), depth=depth,
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

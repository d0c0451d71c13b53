"""Empty k-means clusters moved to the rows farthest from their centres (scikit-learn's KMeans).

After an E-step in which clusters e_1..e_m received no row, the m rows with the largest weighted-in
distance to their own centre, d_n = ||y_n - mu_{c(n)}||^2 (rows of positive weight and d_n > 0),
leave their cluster for an empty one: row n_i joins e_i, so the M-step puts mu_{e_i} = y_{n_i} and
recomputes mu_{c(n_i)} without it. Each move lowers the k-means cost (the row's term goes from d_n to 0
and a mean is the best centre of the rows left), so the free energy stays monotone. The statistics
are corrected on the driver (S0, S1 and S2, the second moment about the E-step's centres) and the
moved rows' K(n) on the workers, so that the next E-step starts from the new assignment. One extra
pass reads the rows, only in iterations that leave a cluster empty.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from ..engine.ops import Chunk
from ..models import SuffStats
from ..names import STATE_K
from ..seeding.passes import chunk_weights


def _far_rows(d2: np.ndarray, chunk: np.ndarray, row: np.ndarray, label: np.ndarray, x: np.ndarray,
              w: np.ndarray, k: int) -> dict[str, np.ndarray]:
    """The ``k`` rows of largest d2 (ties: the lower chunk, then the lower row, first)."""
    order = np.lexsort((row, chunk, -d2))[:k]
    return {"d2": d2[order], "chunk": chunk[order], "row": row[order], "label": label[order], "x": x[order],
            "w": w[order]}


@dataclass
class FarthestRowsOp:
    """The ``k`` rows farthest from their own centre (K(n)[0]) among rows of positive weight with d > 0."""

    means: np.ndarray
    k: int

    def new_acc(self):
        D = self.means.shape[1]
        return {"d2": np.zeros(0), "chunk": np.zeros(0, np.int64), "row": np.zeros(0, np.int64),
                "label": np.zeros(0, np.int32), "x": np.zeros((0, D)), "w": np.zeros(0)}

    def run(self, chunk: Chunk, acc) -> None:
        label = chunk.state[STATE_K][:, 0]
        X = np.asarray(chunk.X, dtype=np.float64)
        diff = X - self.means[label]
        d2 = np.einsum("nd,nd->n", diff, diff)
        w = chunk_weights(chunk)
        keep = np.flatnonzero((w > 0) & (d2 > 0))
        if len(keep) > self.k:
            keep = keep[np.argpartition(-d2[keep], self.k - 1)[:self.k]]
        found = {"d2": d2[keep], "chunk": np.full(len(keep), chunk.index, np.int64), "row": keep.astype(np.int64),
                 "label": label[keep].astype(np.int32), "x": X[keep], "w": w[keep]}
        acc.update(self.merge(dict(acc), found))

    def merge(self, a, b):
        both = {key: np.concatenate([a[key], b[key]]) for key in a}
        return _far_rows(both["d2"], both["chunk"], both["row"], both["label"], both["x"], both["w"], self.k)


@dataclass
class MoveRowsOp:
    """K(n)[0] of the given rows set to their new clusters (``moves``: chunk -> (rows, clusters))."""

    moves: dict
    reads_rows = False

    def new_acc(self):
        return {"moved": np.zeros(1)}

    def run(self, chunk: Chunk, acc) -> None:
        if chunk.index in self.moves:
            rows, clusters = self.moves[chunk.index]
            chunk.state[STATE_K][rows, 0] = clusters
            acc["moved"][0] += len(rows)

    @staticmethod
    def merge(a, b):
        a["moved"] += b["moved"]
        return a


def relocate_empty(engine, stats: SuffStats, means: np.ndarray) -> tuple[SuffStats, int, int]:
    """The E-step's statistics with every empty cluster given the farthest row left (see the module
    docstring), how many rows moved and how many distances the pass evaluated (one per row; no pass,
    and ``stats`` itself, when no cluster is empty)."""
    empty = np.flatnonzero(stats.S0 <= 0)
    if len(empty) == 0:
        return stats, 0, 0
    far = engine.map_reduce(FarthestRowsOp(means, len(empty)))
    n_distances = engine.data.n_samples
    S0, S1, S2 = stats.S0.copy(), stats.S1.copy(), stats.S2.copy()
    if S2.ndim != 1:
        raise ValueError("relocation needs the trace layout of the second moment (k-means)")
    moves: dict[int, tuple[list, list]] = {}
    for cluster, d2, chunk, row, label, x, w in zip(empty, far["d2"], far["chunk"], far["row"], far["label"],
                                                    far["x"], far["w"], strict=False):
        S0[label] -= w
        S1[label] -= w * x
        S2[label] -= w * d2
        S0[cluster], S1[cluster] = w, w * x
        S2[cluster] = w * float(np.dot(x - means[cluster], x - means[cluster]))
        rows, clusters = moves.setdefault(int(chunk), ([], []))
        rows.append(int(row))
        clusters.append(int(cluster))
    if not moves:
        return stats, 0, n_distances
    engine.map_reduce(MoveRowsOp({c: (np.array(r), np.array(k, np.int32)) for c, (r, k) in moves.items()}))
    return replace(stats, S0=S0, S1=S1, S2=S2), sum(len(r) for r, _ in moves.values()), n_distances

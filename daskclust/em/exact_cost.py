"""KMeans' exact inertia at its final centres (scikit-learn's ``inertia_``): one pass, each row's
nearest centre settled from its K(n) where the triangle inequality allows
(:func:`~daskclust.kernels.settle.settle_nearest`), searched among all centres otherwise."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..engine.ops import Chunk, add_arrays
from ..kernels.seeding import weighted_sum
from ..kernels.settle import settle_nearest
from ..names import STATE_K
from ..search.neighbours import exact_neighbours
from ..seeding.passes import NearestCostOp, NearestIndex, search_rows

SETTLE_NEIGHBOURS = 16
"""G of the settling: each guessed row is compared with its guess and the guess's G nearest centres.
Rows of the ``outofcore`` store (400,000 of them, 32-D, KMeans(1000) after 8 iterations, guess = the
nearest centre before the last M-step) settled: 42 % at G = 4, 53 % at 8, 64 % at 16, 75 % at 32,
84 % at 64; the pass over them on one thread took 508, 436 and 405 ns a row at G = 8, 16 and 32,
against 897 searching every row among all centres by matrix products (the same cost to the bit)."""


@dataclass
class SettledCostOp:
    """sum_n w_n min_c ||y_n - mu_c||^2 exactly, the chunks' state untouched: rows whose K(n) settles
    their nearest centre (its first cluster as the guess) take G + 1 distances, the others and chunks
    without K(n) are searched by ``index`` over all centres. Returns the cost and the distances."""

    means: np.ndarray
    neighbours: np.ndarray
    radius: np.ndarray
    index: NearestIndex

    def new_acc(self):
        return {"qe": np.zeros(1), "n_dist": np.zeros(1)}

    def run(self, chunk: Chunk, acc) -> None:
        K = chunk.state.get(STATE_K)
        if K is None or K.shape[1] == 0:  # no guess: every row searched in place, as NearestCostOp does
            NearestCostOp(self.index).run(chunk, acc)
            return
        d2 = np.full(chunk.n_rows, np.inf)
        label = np.zeros(chunk.n_rows, dtype=np.int32)
        guess = K[:, 0]
        settled = settle_nearest(chunk.X, self.means, guess, self.neighbours, self.radius, d2, label)
        acc["n_dist"][0] += np.count_nonzero(guess >= 0) * (1 + self.neighbours.shape[1])
        rest = np.flatnonzero(~settled)
        if len(rest):
            acc["n_dist"][0] += search_rows(self.index, chunk.X, rest, d2, label)
        acc["qe"][0] += weighted_sum(chunk.w, d2)

    merge = staticmethod(add_arrays)


def settling_table(means: np.ndarray, n_neighbours: int = SETTLE_NEIGHBOURS) -> tuple[np.ndarray, np.ndarray, int]:
    """(neighbours (C, G) int32, radius (C,), distances evaluated): each centre's G = min(n_neighbours,
    C - 1) nearest other centres and the distance to the farthest of them, inf when they are all the
    others (then no distance is needed)."""
    C = len(means)
    G = min(n_neighbours, C - 1)
    if G == C - 1:
        others = np.array([[c for c in range(C) if c != b] for b in range(C)], dtype=np.int32).reshape(C, G)
        return others, np.full(C, np.inf), 0
    idx, dist, n_dist = exact_neighbours(means, G + 1)
    return np.ascontiguousarray(idx[:, 1:]), np.ascontiguousarray(dist[:, G]), n_dist


def exact_inertia(engine, means: np.ndarray) -> tuple[float, int]:
    """The data's exact k-means cost at ``means`` and the distances it took (one pass over the rows,
    each chunk's K(n) guessing its rows' nearest centres; the centres' table on the driver)."""
    means = np.ascontiguousarray(means, dtype=np.float64)
    neighbours, radius, n_table = settling_table(means)
    index = NearestIndex.probed(means)
    acc = engine.map_reduce(SettledCostOp(means, neighbours, radius, index))
    return float(acc["qe"][0]), int(acc["n_dist"][0]) + n_table

"""Neighbour tables on the driver: exact centre-centre neighbours (Alg. 1 of Forster & Lücke 2018) and
neighbourhoods estimated from the E-step's pair statistics (Eq. 8 of Forster & Lücke 2018)."""

from __future__ import annotations

import numpy as np
from numba import njit

from ..kernels.balltree import build_ball_tree, tree_neighbours
from ..kernels.estep import insert_sorted
from ..kernels.search import centre_neighbours
from ..threads import driver_threads, over_blocks
from .pairs import PairStats

ROWS_PER_TASK = 256
"""Centres a thread searches at a time (:func:`~daskclust.threads.over_blocks`)."""

TREE_MIN_CENTRES = 1024
"""From this many centres the neighbours are searched through a ball tree where it prunes."""
TREE_PRUNES = 0.25
"""The tree is kept when the first ROWS_PER_TASK centres' searches evaluate at most this share of C
distances each (node centres included); otherwise (many dimensions) every pair is evaluated."""


def exact_neighbours(centres: np.ndarray, n_neighbors: int) -> tuple[np.ndarray, np.ndarray, int]:
    """The ``n_neighbors`` nearest centres of every centre (itself first, then by distance, ties to the
    smaller index), their distances, and the number of distances evaluated.

    Every pair, C (C - 1) distances, O(C^2 D); from TREE_MIN_CENTRES centres, where a ball tree
    prunes (:func:`~daskclust.kernels.balltree.tree_neighbours`, about O(C log C D)), through it. On a
    thread pool either way (the kernels release the GIL).
    """
    C = len(centres)
    k = min(n_neighbors, C)
    idx = np.empty((C, k), dtype=np.int32)
    dist = np.empty((C, k))
    centres = np.ascontiguousarray(centres, dtype=np.float64)
    with driver_threads() as pool:
        if C >= TREE_MIN_CENTRES:
            order, *tree, n_build = build_ball_tree(centres)
            pts = np.ascontiguousarray(centres[order])

            def search(a, b):
                return tree_neighbours(*tree, pts, order, k, a, b, idx, dist)

            first = search(0, min(ROWS_PER_TASK, C))
            if first <= TREE_PRUNES * ROWS_PER_TASK * C:
                rest = over_blocks(search, C, pool, ROWS_PER_TASK, first=ROWS_PER_TASK)
                return idx, dist, int(n_build) + first + rest
            n_tried = int(n_build) + first
        else:
            n_tried = 0
        counts = over_blocks(lambda a, b: centre_neighbours(centres, k, a, b, idx, dist), C, pool, ROWS_PER_TASK)
        return idx, dist, n_tried + counts


@njit(cache=True)
def _estimated_table(prev, tsum, tcnt, keys, sums, counts):
    """Per cluster c: itself, then the G - 1 estimated neighbours of smallest mean distance,
    topped up from the previous G_c. ``keys`` (c * C + c~) are ascending. Returns
    (table, thresholds): the largest mean kept, inf where the table had to be topped up."""
    C, G = prev.shape
    table = np.empty((C, G), dtype=np.int32)
    thresholds = np.full(C, np.inf)
    sel_d = np.empty(max(G - 1, 1))
    sel_c = np.empty(max(G - 1, 1), dtype=np.int64)
    pos = 0
    for c in range(C):
        size = np.int64(0)  # int64 sizes and candidates: the specialisation of insert_sorted the kernels compile
        for g in range(1, G):
            if tcnt[c, g] > 0:
                size = insert_sorted(sel_d, sel_c, size, G - 1, tsum[c, g] / tcnt[c, g], np.int64(prev[c, g]))
        while pos < keys.shape[0] and keys[pos] // C < c:
            pos += 1
        while pos < keys.shape[0] and keys[pos] // C == c:
            if counts[pos] > 0:
                size = insert_sorted(sel_d, sel_c, size, G - 1, sums[pos] / counts[pos], keys[pos] % C)
            pos += 1
        table[c, 0] = c
        for t in range(size):
            table[c, t + 1] = sel_c[t]
        filled = size + 1
        if filled == G and G > 1:
            thresholds[c] = sel_d[size - 1]
        for g in range(1, G):  # top up from the previous neighbourhood
            if filled == G:
                break
            seen = False
            for t in range(filled):
                if table[c, t] == prev[c, g]:
                    seen = True
                    break
            if not seen:
                table[c, filled] = prev[c, g]
                filled += 1
        for t in range(filled, G):  # previous table exhausted too (tiny C): repeat the last entry
            table[c, t] = table[c, filled - 1]
    return table, thresholds


def estimated_neighbours(prev: np.ndarray, tsum: np.ndarray, tcnt: np.ndarray,
                         pairs: PairStats) -> tuple[np.ndarray, np.ndarray]:
    """G_c from the estimates d_cc~ = mean distance of c~ to the points closest to c (Forster & Lücke 2018 Eq. 8).

    ``tsum``/``tcnt`` hold the sums for the pairs (c, prev[c, g]); ``pairs`` the
    other pairs (keys c * C + c~ ascending). Clusters with fewer than
    G - 1 estimates keep entries of their previous G_c (Forster & Lücke 2018: clusters no
    point estimates keep their previous neighbourhood). Returns the table and,
    per cluster, the largest estimate it holds (inf when topped up), the bound
    on centre distances above which the next E-step does not record pairs.
    O(C G + pairs) on the driver.
    """
    return _estimated_table(prev, tsum, tcnt, pairs.keys, pairs.sums, pairs.weights)

"""Neighbour tables on the driver: exact centre-centre neighbours (Alg. 1 of seed 000) and
neighbourhoods estimated from the E-step's pair statistics (Eq. 8 of seed 000)."""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor

import numpy as np
from numba import njit

from ..kernels.search import centre_neighbours

ROWS_PER_TASK = 256


def exact_neighbours(centres: np.ndarray, n_neighbors: int) -> tuple[np.ndarray, np.ndarray]:
    """The ``n_neighbors`` nearest centres of every centre (itself first) and their distances.

    O(C^2 D), on a thread pool (the kernel releases the GIL).
    """
    C = len(centres)
    k = min(n_neighbors, C)
    idx = np.empty((C, k), dtype=np.int32)
    dist = np.empty((C, k))
    centres = np.ascontiguousarray(centres, dtype=np.float64)
    starts = range(0, C, ROWS_PER_TASK)
    with ThreadPoolExecutor(max(1, os.cpu_count() or 1)) as pool:
        list(pool.map(lambda s: centre_neighbours(centres, k, s, min(s + ROWS_PER_TASK, C), idx, dist), starts))
    return idx, dist


@njit(cache=True)
def _select_rows(n_clusters, G, rows, cols, means, prev):
    """Per row: itself, then the G - 1 candidates of smallest mean (rows/means sorted by
    (row, mean)), topped up from the previous table. Returns (table, thresholds)."""
    table = np.empty((n_clusters, G), dtype=np.int32)
    thresholds = np.full(n_clusters, np.inf)
    pos = 0
    n = rows.shape[0]
    for c in range(n_clusters):
        table[c, 0] = c
        size = 1
        largest = 0.0
        while pos < n and rows[pos] < c:
            pos += 1
        while pos < n and rows[pos] == c:
            if size < G and cols[pos] != c:
                table[c, size] = cols[pos]
                largest = means[pos]
                size += 1
            pos += 1
        complete = size == G
        for g in range(1, G):
            if size == G:
                break
            cand = prev[c, g]
            seen = False
            for t in range(size):
                if table[c, t] == cand:
                    seen = True
                    break
            if not seen:
                table[c, size] = cand
                size += 1
        if size < G:  # previous table exhausted too (tiny C): repeat the last entry
            for t in range(size, G):
                table[c, t] = table[c, size - 1]
        if complete:
            thresholds[c] = largest
    return table, thresholds


def estimated_neighbours(prev: np.ndarray, tsum: np.ndarray, tcnt: np.ndarray,
                         pairs: tuple[np.ndarray, np.ndarray, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """G_c from the estimates d_cc~ = mean distance of c~ to the points closest to c (seed 000 Eq. 8).

    ``tsum``/``tcnt`` hold the sums for the pairs (c, prev[c, g]); ``pairs`` the
    other pairs as (c * C + c~, sum, count). Clusters with fewer than G - 1
    estimates keep entries of their previous G_c (seed 000: clusters no point
    estimates keep their previous neighbourhood). Returns the table and, per
    cluster, the largest estimate it holds (inf when topped up), the bound
    above which the next E-step does not record pairs.
    """
    C, G = prev.shape
    has = tcnt[:, 1:] > 0
    rows = np.broadcast_to(np.arange(C)[:, None], (C, G - 1))[has]
    cols = prev[:, 1:][has]
    means = tsum[:, 1:][has] / tcnt[:, 1:][has]
    keys, sums, counts = pairs
    ok = counts > 0
    rows = np.concatenate([rows, keys[ok] // C])
    cols = np.concatenate([cols, keys[ok] % C])
    means = np.concatenate([means, sums[ok] / counts[ok]])
    order = np.lexsort((cols, means, rows))
    return _select_rows(C, G, rows[order].astype(np.int64), cols[order].astype(np.int64), means[order], prev)


def sum_pairs(parts: list[tuple]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Sum the pair statistics of several chunks: (keys unique ascending, sums, weights).

    Chunks' pair lists travel up the merge tree as a list and are summed once,
    on the driver, instead of at every merge.
    """
    parts = [p for p in parts if len(p[0])]
    if not parts:
        return np.empty(0, dtype=np.int64), np.empty(0), np.empty(0)
    keys = np.concatenate([p[0] for p in parts])
    unique, inverse = np.unique(keys, return_inverse=True)
    sums = np.bincount(inverse, weights=np.concatenate([p[1] for p in parts]), minlength=len(unique))
    wts = np.bincount(inverse, weights=np.concatenate([p[2] for p in parts]), minlength=len(unique))
    return unique, sums, wts

"""Nearest-point search by matrix products, for data where triangle-inequality pruning fails.

In many dimensions distances concentrate (all points of a Gaussian blob are
about sqrt(2 D) sigma apart), so the lower bounds of the ball tree prune
nothing and a search degenerates to evaluating every candidate one distance at
a time. Here the candidates are scored in tiles by one matrix product each
(BLAS, several times faster than a scalar loop):
argmin_c ||x - c||^2 = argmax_c [(x - m).(c - m) - ||c - m||^2 / 2], with m the
candidates' mean (centring keeps the cancellation of the expansion small), the
maximum by numpy's vectorised argmax, and the chosen candidate's distance then
computed exactly in float64. A row whose two nearest candidates lie within the
product's round-off of each other (~1e-7 relatively in float32) may take the
second: the search is used for seeding and exact-cost passes, never for E-steps.
"""

from __future__ import annotations

import numpy as np
from numba import njit

TILE_SCORES = 1 << 19
"""Scores per tile of :func:`dense_nearest` (2 MB in float32, an L2 cache here) and of
:func:`dense_neighbours`: their rows are ``TILE_SCORES // candidates``."""


@njit(nogil=True, cache=True)
def _lower_exact(X, cands, chosen, offset, mind2, label):
    """mind2 / label (IN/OUT) lowered with d_i = ||x_i - c_chosen_i||^2 in float64."""
    for i in range(X.shape[0]):
        c = chosen[i]
        d = 0.0
        for k in range(X.shape[1]):
            t = np.float64(X[i, k]) - cands[c, k]
            d += t * t
        if d < mind2[i]:
            mind2[i] = d
            label[i] = offset + c


def dense_nearest(X: np.ndarray, cands: np.ndarray, offset: int, mind2: np.ndarray, label: np.ndarray) -> int:
    """Lower ``mind2`` / ``label`` (IN/OUT) with the nearest of ``cands`` (numbered from ``offset``).

    Returns the number of distances evaluated (all of them).
    """
    n_cands, D = cands.shape
    if n_cands == 0 or X.shape[0] == 0:
        return 0
    dtype = np.float32 if X.dtype == np.float32 else np.float64
    cands = np.ascontiguousarray(cands, dtype=np.float64)
    mean = cands.mean(axis=0)
    centred = cands - mean
    weights = np.empty((D + 1, n_cands), dtype=dtype)  # scores = [x - m, 1] @ weights
    weights[:D] = centred.T
    weights[D] = -0.5 * np.einsum("cd,cd->c", centred, centred)
    rows = max(1, TILE_SCORES // n_cands)
    block = np.ones((min(rows, X.shape[0]), D + 1), dtype=dtype)
    scores = np.empty((block.shape[0], n_cands), dtype=dtype)
    for start in range(0, X.shape[0], rows):
        stop = min(start + rows, X.shape[0])
        n = stop - start
        np.subtract(X[start:stop], mean, out=block[:n, :D], casting="unsafe")
        np.matmul(block[:n], weights, out=scores[:n])
        _lower_exact(X[start:stop], cands, scores[:n].argmax(axis=1), offset, mind2[start:stop], label[start:stop])
    return X.shape[0] * n_cands


@njit(nogil=True, cache=True)
def dense_gains(G, trial_norm, pn, d2, wts, out):
    """out[r] = sum_i w_i max(0, d2_i - ||p_r - p_i||^2), the distances from the cross products
    G (trials x M) and squared norms: what adding trial r as a centre saves. OUT: out."""
    for r in range(G.shape[0]):
        s = 0.0
        for i in range(G.shape[1]):
            d = max(trial_norm[r] + pn[i] - 2.0 * G[r, i], 0.0)
            if d < d2[i]:
                s += wts[i] * (d2[i] - d)
        out[r] = s


@njit(nogil=True, cache=True)
def dense_take_min(g_row, row_norm, pn, d2):
    """d2 = min(d2, ||p - p_i||^2) for the point p of cross products ``g_row``. IN/OUT: d2."""
    for i in range(d2.shape[0]):
        d = max(row_norm + pn[i] - 2.0 * g_row[i], 0.0)
        d2[i] = min(d2[i], d)


@njit(nogil=True, cache=True)
def _nearest_k_update(G, pn, start, out_idx, out_d2):
    """Rows start + i of out_idx / out_d2 (OUT): the k = out_idx.shape[1] points j of smallest
    ||p_i - p_j||^2 = pn_i + pn_j - 2 G_ij for each tile row i, the point itself first (at 0),
    then by distance, ties to the smaller index."""
    k = out_idx.shape[1]
    for i in range(G.shape[0]):
        me = start + i
        out_idx[me, 0] = me
        out_d2[me, 0] = 0.0
        size = 1
        for j in range(G.shape[1]):
            if j == me:
                continue
            d = max(pn[me] + pn[j] - 2.0 * G[i, j], 0.0)
            if size == k and d >= out_d2[me, k - 1]:
                continue
            pos = size if size < k else k - 1
            while pos > 1 and out_d2[me, pos - 1] > d:
                out_idx[me, pos] = out_idx[me, pos - 1]
                out_d2[me, pos] = out_d2[me, pos - 1]
                pos -= 1
            out_idx[me, pos] = j
            out_d2[me, pos] = d
            if size < k:
                size += 1


def dense_neighbours(P: np.ndarray, k: int, start: int, stop: int, pn: np.ndarray, out_idx: np.ndarray,
                     out_d2: np.ndarray) -> int:
    """Rows start .. stop of out_idx (M, k) int32 / out_d2 (M, k) (OUT): the k nearest points of each of
    those points of P (M, D) among P, itself first, by matrix products in tiles of about TILE_SCORES
    (k <= M; ``pn`` the squared norms of P's rows, P best centred: the expansion's cancellation grows
    with the distance from the origin). Returns the distances evaluated."""
    M = P.shape[0]
    rows = max(1, TILE_SCORES // M)
    for first in range(start, stop, rows):
        _nearest_k_update(P[first:min(first + rows, stop)] @ P.T, pn, first, out_idx, out_d2)
    return (stop - start) * M

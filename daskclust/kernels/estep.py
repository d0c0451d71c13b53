"""Truncated E-step kernels and the additive statistics they accumulate.

The kernels are generic over the model family (:mod:`daskclust.kernels.family`:
the family's cost, scale and statistics are compiled in). Written out for the
mean families (Forster & Lücke 2018 Eqs. 1-5, Lücke & Forster 2019 Eq. 7: isotropic equal-weight GMM
with centres mu_c and one variance sigma^2, and k-means with C' = 1): for each
point the kernel keeps the C' closest clusters K(n) among the clusters it
evaluates, computes the truncated responsibilities

    q_c(n) = exp(-d_c(n)^2 / 2 sigma^2) / sum_{c' in K(n)} exp(-d_c'(n)^2 / 2 sigma^2)

with a stable log-sum-exp, and adds to the statistics (all float64, IN/OUT):

    S0[c]  += w_n q_c(n)                    (mass)
    S1[c]  += w_n q_c(n) y_n                (first moment)
    SD2[c] += w_n q_c(n) d_c(n)^2           (second moment about the current centre)
    scal[W]      += w_n
    scal[LSE]    += w_n log sum_{c in K(n)} exp(-d_c(n)^2 / 2 sigma^2)
    scal[QE]     += w_n min_c d_c(n)^2     (over the clusters evaluated)
    scal[NDIST_POINTS]  += point-to-centre distances evaluated
    scal[CHANGED]       += 1 if the best cluster of n changed
    scal[NDIST_CENTRES] += centre-to-centre distances evaluated (the partial E-steps' pair statistics)

From these the driver computes the M-step (Forster & Lücke 2018 Eq. 4) and the free energy
(Lücke & Forster 2019 Eq. 7) without any pass over the data.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from .family import add_point, cost, euclid, scale
from .rng import uniform

# Layout of the scalar accumulator.
W, LSE, QE, NDIST_POINTS, CHANGED, NDIST_CENTRES = 0, 1, 2, 3, 4, 5
N_SCALARS = 6

SHORT_IDS = np.iinfo(np.int16).max
"""The most clusters whose ids the per-row state keeps in 16 bits (:func:`cluster_id_dtype`)."""


def cluster_id_dtype(n_clusters: int) -> np.dtype:
    """The integer type of the cluster ids a chunk keeps per row between passes (its sets K(n), -1 marking
    an unknown member, and the seed labels): int16 while C <= :data:`SHORT_IDS`, else int32.

    That state is N C' ids across the workers, beside rows that are streamed when the data exceed
    the memory: 50 million rows with C' = 5 (a mixture's default) took 500 MB of each of two 1 GiB
    workers in int32, which then paused. The kernels read and write it once per row and pass."""
    return np.dtype(np.int16 if n_clusters <= SHORT_IDS else np.int32)


@njit
def sqdist(x, y):
    """Squared Euclidean distance ||x - y||^2, accumulated in float64."""
    s = 0.0
    for j in range(x.shape[0]):
        t = float(x[j]) - y[j]
        s += t * t
    return s


@njit
def insert_sorted(top_d, top_c, size, k, d, c):
    """Insert (d, c) into the ascending list ``top_d[:size]`` capped at ``k`` entries.

    Returns the new size. Ties keep the earlier entry first, so the result only
    depends on the order in which candidates are offered.
    """
    if size == k and d >= top_d[k - 1]:
        return size
    pos = size if size < k else k - 1
    while pos > 0 and top_d[pos - 1] > d:
        if pos < k:
            top_d[pos] = top_d[pos - 1]
            top_c[pos] = top_c[pos - 1]
        pos -= 1
    top_d[pos] = d
    top_c[pos] = c
    return size + 1 if size < k else size


@njit
def accumulate_point(x, wi, sel_c, sel_d, k, inv_two_s2, params, stats):
    """Add one point's truncated responsibilities to the family's statistics.

    ``sel_d[:k]`` are the costs of the clusters ``sel_c[:k]`` (see
    :mod:`daskclust.kernels.family`), ascending. Returns
    ``log sum_c exp(-cost_c / 2 s)`` over the k clusters.
    """
    dmin = sel_d[0]
    if k == 1:
        add_point(x, wi, sel_c[0], dmin, params, stats)
        return -dmin * inv_two_s2
    z = 0.0
    for t in range(k):
        z += np.exp(-(sel_d[t] - dmin) * inv_two_s2)
    for t in range(k):
        wq = wi * np.exp(-(sel_d[t] - dmin) * inv_two_s2) / z
        if wq == 0.0:
            continue
        add_point(x, wq, sel_c[t], sel_d[t], params, stats)
    return -dmin * inv_two_s2 + np.log(z)


@njit(nogil=True, cache=True)
def estep_full(X, w, params, n_truncated, K, stats, scal):
    """E-step evaluating every cluster for every point (exact search).

    Parameters
    ----------
    X : (n, D) float32 or float64
        The chunk.
    w : (n,) float64 or (0,) float64
        Sample weights; an empty array means weight 1 for every row.
    params : a family's parameters (:mod:`daskclust.kernels.family`), ``params.means`` (C, D)
        float64; for the mean families the variance is floored by the caller
        (:func:`daskclust.models.variance_floor`), so 1 / (2 sigma^2) is finite.
    n_truncated : int
        C', clusters kept per point (1 = k-means, C = exact EM).
    K : (n, C') int32 or (n, 0) int32, IN/OUT
        Truncated sets, best first; replaced by the new sets. With zero columns
        no state is kept (exact EM needs none).
    stats : tuple of float64 arrays, IN/OUT
        The family's statistics (mean families: S0, S1, SD2 of the module docstring).
    scal : float64, IN/OUT
        The scalars of the module docstring.
    """
    n = X.shape[0]
    C = params.means.shape[0]
    k = min(n_truncated, C)
    track = K.shape[1] > 0
    inv_two_s2 = 0.5 / scale(params)
    d2 = np.empty(C)
    sel_d = np.empty(k)
    sel_c = np.empty(k, dtype=np.int64)
    for i in range(n):
        wi = w[i] if w.shape[0] > 0 else 1.0
        x = X[i]
        size = 0
        for c in range(C):
            d2[c] = cost(x, c, params)
        if k == C:
            # exact EM: every cluster kept; sel ordered by distance only for dmin
            best = 0
            for c in range(C):
                sel_c[c] = c
                sel_d[c] = d2[c]
                if d2[c] < d2[best]:
                    best = c
            sel_c[0], sel_c[best] = sel_c[best], sel_c[0]
            sel_d[0], sel_d[best] = sel_d[best], sel_d[0]
            size = C
        else:
            for c in range(C):
                size = insert_sorted(sel_d, sel_c, size, k, d2[c], c)
        lse = accumulate_point(x, wi, sel_c, sel_d, size, inv_two_s2, params, stats)
        if wi > 0.0:  # with a tiny sigma^2 a far zero-weight row has lse = -inf, and 0 * -inf is NaN
            scal[LSE] += wi * lse
        scal[W] += wi
        scal[QE] += wi * euclid(x, sel_c[0], params, sel_d[0])
        scal[NDIST_POINTS] += C
        if track:
            if K[i, 0] != sel_c[0]:
                scal[CHANGED] += 1.0
            for t in range(k):
                K[i, t] = sel_c[t]


@njit(nogil=True, cache=True)
def estep_sets(X, w, params, K, stats, scal):
    """E-step over given truncated sets: row i evaluates only the components K[i] (C' of them, -1 for
    none; at least one per row) and adds its truncated responsibilities over them, as
    :func:`estep_full` with K(n) fixed. The E-step of rows whose sets an exact search found (the
    stepwise EM of a stream, :mod:`daskclust.em.stepwise`). IN/OUT: stats, scal (W, LSE, QE,
    NDIST_POINTS)."""
    k = K.shape[1]
    inv_two_s2 = 0.5 / scale(params)
    sel_d = np.empty(k)
    sel_c = np.empty(k, dtype=np.int64)
    for i in range(X.shape[0]):
        wi = w[i] if w.shape[0] > 0 else 1.0
        x = X[i]
        size = 0
        for t in range(k):
            c = K[i, t]
            if c >= 0:
                size = insert_sorted(sel_d, sel_c, size, k, cost(x, c, params), c)
        lse = accumulate_point(x, wi, sel_c, sel_d, size, inv_two_s2, params, stats)
        if wi > 0.0:
            scal[LSE] += wi * lse
        scal[W] += wi
        scal[QE] += wi * euclid(x, sel_c[0], params, sel_d[0])
        scal[NDIST_POINTS] += size


@njit(nogil=True, cache=True)
def random_responsibility_stats(X, w, params, key, stats, scal):
    """The statistics of random responsibilities (scikit-learn's ``init_params="random"``):
    q_c(n) = u_nc / sum_c' u_nc', u_nc ~ U(0, 1) the (n C + c)-th draw of the stream ``key``, every
    component for every row; ``stats`` are centred on ``params.means`` as the E-step's
    (:func:`~daskclust.kernels.family.add_point` with the row's cost). IN/OUT: stats, scal[W]."""
    C = params.means.shape[0]
    u = np.empty(C)
    for i in range(X.shape[0]):
        wi = w[i] if w.shape[0] > 0 else 1.0
        x = X[i]
        z = 0.0
        for c in range(C):
            u[c] = uniform(key, i * C + c)
            z += u[c]
        for c in range(C):
            add_point(x, wi * u[c] / z, c, cost(x, c, params), params, stats)
        scal[W] += wi
        scal[NDIST_POINTS] += C


@njit(nogil=True, cache=True)
def all_distances(X, centres, out):
    """out[i, c] = ||X[i] - centres[c]|| (Euclidean, for KMeans.transform). OUT: out."""
    for i in range(X.shape[0]):
        for c in range(centres.shape[0]):
            out[i, c] = np.sqrt(sqdist(X[i], centres[c]))

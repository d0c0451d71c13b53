"""Applying a fitted mixture to rows: the components each row evaluates, its C' most responsible ones
and its log-likelihood, generic over the family (:mod:`daskclust.kernels.family`)."""

from __future__ import annotations

import numpy as np
from numba import njit

from .estep import insert_sorted
from .family import cost, scale


@njit(nogil=True, cache=True)
def top_components(X, params, first, table, k, out_idx, out_q, out_lse):
    """Per row: the ``k`` components of smallest cost among its candidates, their responsibilities
    normalised over those k (the truncated posterior of seed 004 Eq. 5), and
    log sum_c exp(-cost_c / 2 s) over all its candidates.

    Candidates of row i: ``table[first[i]]`` (the neighbourhood of its nearest mean), or every
    component when ``table`` has no columns (exact). OUT: out_idx (n, k) int32 (-1 past the
    candidates), out_q (n, k), out_lse (n,). Returns the number of costs evaluated.
    """
    n = X.shape[0]
    C = params.means.shape[0]
    every = table.shape[1] == 0
    m = C if every else table.shape[1]
    inv_two_s = 0.5 / scale(params)
    d = np.empty(m)
    sel_d = np.empty(k)
    sel_c = np.empty(k, dtype=np.int64)
    for i in range(n):
        size = 0
        dmin = np.inf
        for t in range(m):
            c = t if every else table[first[i], t]
            v = cost(X[i], c, params)
            d[t] = v
            dmin = min(dmin, v)
            size = insert_sorted(sel_d, sel_c, size, k, v, c)
        z = 0.0
        for t in range(m):
            z += np.exp(-(d[t] - dmin) * inv_two_s)
        out_lse[i] = -dmin * inv_two_s + np.log(z)
        zk = 0.0
        for t in range(size):
            zk += np.exp(-(sel_d[t] - dmin) * inv_two_s)
        for t in range(k):
            if t < size:
                out_idx[i, t] = sel_c[t]
                out_q[i, t] = np.exp(-(sel_d[t] - dmin) * inv_two_s) / zk
            else:
                out_idx[i, t] = -1
                out_q[i, t] = 0.0
    return n * m

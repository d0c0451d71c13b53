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
    normalised over those k (the truncated posterior of Lücke & Forster 2019 Eq. 5), and
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


@njit
def _cost_of(x, c, params):
    """``cost`` behind a call: bounded_top evaluates it in two places, and numba 0.68 warns about
    scopes when an ``inline="always"`` overload is inlined twice into one function."""
    return cost(x, c, params)


@njit(nogil=True, cache=True)
def bounded_top(X, params, gcent, gmetric, gconst, grad, offsets, members, mdist, mconst, k, log_margin,
                out_idx, out_q, out_lse):
    """Per row, exactly: the ``k`` components of smallest cost, their posterior responsibilities and
    log sum_c exp(-cost_c / 2 s) over all C components, evaluating only the components a lower bound
    cannot rule out.

    The bound (one per family, :meth:`daskclust.models.Family.cost_floor`): for every component c,
    cost_c(x) >= ||x - mu_c||^2_{a_c} + b_c, ||v||^2_a = sum_j a_j v_j^2. Components are grouped in
    balls: group g has centre ``gcent[g]``, metric ``gmetric[g]`` = min over its members of a_c (so
    ||.||_{a_g} <= ||.||_{a_c}), radius ``grad[g]`` (largest ||mu_c - g||_{a_g}) and ``gconst[g]`` =
    min b_c; its members ``members[offsets[g]:offsets[g + 1]]`` are sorted by ``mdist`` =
    ||mu_c - g||_{a_g}, with ``mconst`` = b_c. The triangle inequality in ||.||_{a_g} gives, with
    r = ||x - g||_{a_g},

        cost_c(x) >= max(0, r - rho_g)^2 + min b    (the whole group)
        cost_c(x) >= (r - ||mu_c - g||_{a_g})^2 + b_c   (one member).

    A component is evaluated unless its bound reaches max(the k-th smallest cost so far, the
    smallest cost so far + margin), margin = 2 s ``log_margin``. The group of the smallest bound is
    searched first (starting with its member whose distance to the centre is nearest r), then the
    others. So the k components are exact, and every component left out has cost >= min cost +
    margin: the mass left out is at most C exp(-log_margin) times the largest term, and ``out_lse``
    is below the exact value by at most log(1 + C exp(-log_margin)) (``log_margin`` = inf: every
    component evaluated; 0: only the k best are exact, ``out_lse`` and ``out_q`` then cover only the
    components evaluated). Responsibilities are exp(-(cost_c - cost_min) / 2 s) over that sum (the
    posterior, not renormalised over the k). OUT: out_idx (n, k) int32 (-1 past C), out_q (n, k),
    out_lse (n,). Returns the number of costs evaluated.
    """
    n = X.shape[0]
    D = X.shape[1]
    B = gcent.shape[0]
    C = members.shape[0]
    inv_two_s = 0.5 / scale(params)
    margin = log_margin / inv_two_s
    lbg = np.empty(B)
    dgs = np.empty(B)
    costs = np.empty(C)
    sel_d = np.empty(k)
    sel_c = np.empty(k, dtype=np.int64)
    n_eval = 0
    for i in range(n):
        x = X[i]
        for g in range(B):
            s = 0.0
            for j in range(D):
                t = float(x[j]) - gcent[g, j]
                s += gmetric[g, j] * t * t
            r = np.sqrt(s)
            dgs[g] = r
            gap = max(r - grad[g], 0.0)
            lbg[g] = gap * gap + gconst[g]
        first = np.argmin(lbg)
        # a first threshold: the member of the first group whose distance to its centre is nearest r
        lo, hi = offsets[first], offsets[first + 1]
        while lo < hi:
            mid = (lo + hi) >> 1
            if mdist[mid] < dgs[first]:
                lo = mid + 1
            else:
                hi = mid
        guess = lo if lo < offsets[first + 1] else offsets[first + 1] - 1
        if lo > offsets[first] and dgs[first] - mdist[lo - 1] < mdist[guess] - dgs[first]:
            guess = lo - 1
        v = _cost_of(x, members[guess], params)
        costs[0] = v
        m = 1
        dmin = v
        sel_d[0] = v
        sel_c[0] = members[guess]
        size = 1
        thr = max(v if k == 1 else np.inf, dmin + margin)
        for step in range(B):  # the group of the smallest bound first, then the others
            g = first if step == 0 else (step - 1 if step - 1 < first else step)
            if lbg[g] >= thr:
                continue
            r = dgs[g]
            reach = np.sqrt(thr - gconst[g])  # > 0: lbg[g] < thr
            lo, hi = offsets[g], offsets[g + 1]
            while lo < hi:  # the first member with mdist > r - reach
                mid = (lo + hi) >> 1
                if mdist[mid] <= r - reach:
                    lo = mid + 1
                else:
                    hi = mid
            for p in range(lo, offsets[g + 1]):
                if mdist[p] >= r + reach:
                    break  # members are sorted by mdist: every later one is farther still
                t = r - mdist[p]
                if t * t + mconst[p] >= thr or p == guess:
                    continue
                c = members[p]
                v = _cost_of(x, c, params)
                costs[m] = v
                m += 1
                if v < dmin:
                    dmin = v
                size = insert_sorted(sel_d, sel_c, size, k, v, c)
                thr = max(sel_d[k - 1] if size == k else np.inf, dmin + margin)
                if thr <= gconst[g]:
                    break  # no other member of the group can be below it
                reach = np.sqrt(thr - gconst[g])
        n_eval += m
        z = 0.0
        for t in range(m):
            z += np.exp(-(costs[t] - dmin) * inv_two_s)
        out_lse[i] = -dmin * inv_two_s + np.log(z)
        for t in range(k):
            if t < size:
                out_idx[i, t] = sel_c[t]
                out_q[i, t] = np.exp(-(sel_d[t] - dmin) * inv_two_s) / z
            else:
                out_idx[i, t] = -1
                out_q[i, t] = 0.0
    return n_eval

"""Partial (truncated) E-step kernels: candidates from cluster neighbourhoods or sampled
from a similarity matrix, always joined with the current K(n) (seed 000 Algs. 1-2,
seed 003 Alg. 1), plus the pair statistics that estimate the neighbourhoods.

Every kernel offers each point the union of its candidates and its current
K(n) and keeps the C' closest, so a point's clusters can only get closer: the
free energy cannot decrease (seed 000 / seed 004 Prop. 1). Statistics are
those of :mod:`daskclust.kernels.estep`.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from .estep import CHANGED, LSE, NDIST, QE, W, insert_sorted, sqdist
from .rng import randint, uniform


@njit(nogil=True, cache=True)
def aggregate_pairs(keys, vals, wts, n):
    """Sum ``vals`` and ``wts`` per distinct key over the first n entries (open addressing).

    Returns (unique keys ascending, summed vals, summed wts). O(n) plus a sort
    of the distinct keys only.
    """
    cap = 16
    while cap < 2 * n:
        cap *= 2
    table_key = np.full(cap, -1, dtype=np.int64)
    table_val = np.zeros(cap)
    table_wt = np.zeros(cap)
    mask = cap - 1
    used = 0
    for t in range(n):
        key = keys[t]
        h = (key * 0x5851F42D4C957F2D) & mask
        while table_key[h] != -1 and table_key[h] != key:
            h = (h + 1) & mask
        if table_key[h] == -1:
            table_key[h] = key
            used += 1
        table_val[h] += vals[t]
        table_wt[h] += wts[t]
    out_key = np.empty(used, dtype=np.int64)
    out_val = np.empty(used)
    out_wt = np.empty(used)
    j = 0
    for h in range(cap):
        if table_key[h] != -1:
            out_key[j] = table_key[h]
            j += 1
    out_key.sort()
    for t in range(used):
        key = out_key[t]
        h = (key * 0x5851F42D4C957F2D) & mask
        while table_key[h] != key:
            h = (h + 1) & mask
        out_val[t] = table_val[h]
        out_wt[t] = table_wt[h]
    return out_key, out_val, out_wt


@njit(inline="always")
def _draw_from_row(row_idx, row_cdf, length, u):
    """Index drawn from the first ``length`` entries of a row by its cumulative weights."""
    lo = 0
    hi = length - 1
    target = u * row_cdf[length - 1]
    while lo < hi:
        mid = (lo + hi) // 2
        if row_cdf[mid] > target:
            hi = mid
        else:
            lo = mid + 1
    return row_idx[lo]


NEIGHBOURHOOD, SAMPLED = 0, 1


@njit(nogil=True, cache=True, fastmath={"reassoc", "contract"})
def estep_truncated(X, w, centres, sigma2, K, mode, neighbours, thresholds, row_idx, row_cdf, row_len, n_draws,
                    n_explore, key, collect, S0, S1, SD2, scal, tsum, tcnt, source_row):
    """Partial E-step: each point evaluates candidate clusters joined with its K(n), keeps the C' closest.

    Candidates (``mode``):

    NEIGHBOURHOOD (seed 000 Algs. 1-2): G(n) = union of G_c over c in K(n);
        ``neighbours`` (C, G) int32 holds G_c, c first.
    SAMPLED (D-GMM, seed 003 Alg. 1): ``n_draws`` (R) clusters drawn from the
        similarity row of the best cluster c_bar = K(n)[0] (Eq. 9; clusters already
        taken are redrawn up to 4 times), uniformly when the row has no more
        entries than K(n); rows are sparse: ``row_idx`` (C, L) int32,
        ``row_cdf`` (C, L) cumulative weights, ``row_len`` (C,).

    Both add ``n_explore`` clusters drawn uniformly. All draws come from the
    stream ``key``; row i uses draws r * (4 R + n_explore) onwards, r its row in
    the source (``source_row[i]``, or i when empty), so the draws do not depend
    on the order in which a worker keeps the rows.

    K : (n, C') int32, IN/OUT, best first, -1 = unknown. Statistics S0, S1,
    SD2, scal (IN/OUT) as in :mod:`daskclust.kernels.estep`; ``sigma2`` > 0 (floored by the caller).

    With ``collect`` the kernel also gathers the pair statistics of its strategy:

    NEIGHBOURHOOD, seed 000 Eq. 8: for the point's closest cluster c_o and every
        other evaluated c~, the distance ||y - mu_c~|| weighted by w. Pairs with
        c~ in G_{c_o} are added to ``tsum`` / ``tcnt`` (C, G), IN/OUT, at the
        slot of c~; other pairs are returned, and only when the centres are
        closer than ``thresholds[c_o]`` (the largest estimate in G_{c_o}: the
        mean distance of points of c_o to a farther centre exceeds it, so such
        a pair could not enter G_{c_o}). Deciding per pair, not per point, keeps
        the recorded means unbiased.
    SAMPLED, seed 003 Eq. 12: for every pair i < j among the P = max(C', 2)
        closest evaluated clusters, w exp(-(d_i^2 + d_j^2 - 2 d_min^2) / 2 sigma^2):
        squared distances scaled by 2 sigma^2 and shifted by the point's best,
        so the values cannot underflow.

    Returns the returned pairs aggregated per key i * C + j: (keys ascending, sums, weights).

    The body is written out in one function on purpose: numba's inlined helpers
    taking many arrays made this loop 3-5 times slower, and so did growing the
    pair buffers inside it (hence one buffer sized for the worst case). It is
    compiled with ``fastmath={"reassoc", "contract"}`` (no assumption about NaN
    or inf): sums may be reordered and vectorised, 20 % faster at D = 32; the
    results stay identical wherever the same machine code runs.
    """
    n, D = X.shape
    C = centres.shape[0]
    G = neighbours.shape[1]
    k = K.shape[1]
    P = max(k, 2) if mode == SAMPLED else k
    inv_two_s2 = 0.5 / sigma2
    mark = np.full(C, -1, dtype=np.int64)
    cap = k * (G + 1) + n_draws + n_explore
    cand = np.empty(cap, dtype=np.int64)
    d2 = np.empty(cap)
    sel_d = np.empty(P)
    sel_c = np.empty(P, dtype=np.int64)
    q = np.empty(P)
    draws_per_row = 4 * n_draws + n_explore
    n_pr = 0
    per_row = max(cap, P * (P - 1) // 2) if collect else 0  # at most this many pairs per row
    pr_key = np.empty(n * per_row, dtype=np.int64)
    pr_val = np.empty(n * per_row)
    pr_wt = np.empty(n * per_row)
    tw = tl = tq = 0.0
    nd = ch = 0
    for i in range(n):
        wi = w[i] if w.shape[0] > 0 else 1.0
        counter = (source_row[i] if source_row.shape[0] > 0 else i) * draws_per_row
        # ---- candidates: K(n) always (Prop. 1), then the strategy's, then exploration
        m = 0
        for t in range(k):
            c0 = K[i, t]
            if c0 < 0:
                continue
            if mark[c0] != i:
                mark[c0] = i
                cand[m] = c0
                m += 1
            if mode == NEIGHBOURHOOD:
                for g in range(G):
                    c = neighbours[c0, g]
                    if mark[c] != i:
                        mark[c] = i
                        cand[m] = c
                        m += 1
        if mode == SAMPLED:
            cbar = K[i, 0]
            for r in range(n_draws):
                for attempt in range(4):
                    u = uniform(key, counter)
                    counter += 1
                    if cbar >= 0 and row_len[cbar] > k:
                        c = _draw_from_row(row_idx[cbar], row_cdf[cbar], row_len[cbar], u)
                    else:
                        c = min(int(u * C), C - 1)
                    if mark[c] != i:
                        mark[c] = i
                        cand[m] = c
                        m += 1
                        break
        explore_base = (source_row[i] if source_row.shape[0] > 0 else i) * draws_per_row + 4 * n_draws
        for e in range(n_explore):
            c = randint(key, explore_base + e, C)
            if mark[c] != i:
                mark[c] = i
                cand[m] = c
                m += 1
        # ---- distances, the closest, and for P > 1 the P closest
        best = 0
        size = 0
        for t in range(m):
            c = cand[t]
            s = sqdist(X[i], centres[c])
            d2[t] = s
            if s < d2[best]:
                best = t
            if P > 1:
                size = insert_sorted(sel_d, sel_c, size, P, s, c)
        bc = cand[best]
        bd = d2[best]
        # ---- truncated responsibilities, statistics, new K(n)
        if K[i, 0] != bc:
            ch += 1
        if k == 1:
            S0[bc] += wi
            for j in range(D):
                S1[bc, j] += wi * X[i, j]
            SD2[bc] += wi * bd
            K[i, 0] = bc
            if wi > 0.0:  # see estep_full: a zero-weight row adds nothing, not 0 * -inf
                tl -= wi * bd * inv_two_s2
        else:
            kept = min(size, k)
            z = 0.0
            for t in range(kept):
                q[t] = np.exp(-(sel_d[t] - bd) * inv_two_s2)
                z += q[t]
            for t in range(kept):
                wq = wi * q[t] / z
                c = sel_c[t]
                S0[c] += wq
                for j in range(D):
                    S1[c, j] += wq * X[i, j]
                SD2[c] += wq * sel_d[t]
            for t in range(k):
                K[i, t] = sel_c[t] if t < kept else -1
            if wi > 0.0:
                tl += wi * (-bd * inv_two_s2 + np.log(z))
        tw += wi
        tq += wi * bd
        nd += m
        if not collect:
            continue
        # ---- pair statistics of the strategy
        if mode == NEIGHBOURHOOD:
            for t in range(m):
                c = cand[t]
                if c == bc:
                    continue
                slot = -1
                for g in range(1, G):
                    if neighbours[bc, g] == c:
                        slot = g
                        break
                if slot >= 0:
                    d = np.sqrt(d2[t])
                    tsum[bc, slot] += wi * d
                    tcnt[bc, slot] += wi
                elif sqdist(centres[bc], centres[c]) < thresholds[bc] * thresholds[bc]:
                    pr_key[n_pr] = bc * C + c
                    pr_val[n_pr] = wi * np.sqrt(d2[t])
                    pr_wt[n_pr] = wi
                    n_pr += 1
        else:
            for a in range(size):
                for b in range(a + 1, size):
                    pr_key[n_pr] = min(sel_c[a], sel_c[b]) * C + max(sel_c[a], sel_c[b])
                    pr_val[n_pr] = wi * np.exp(-(sel_d[a] + sel_d[b] - 2.0 * bd) * inv_two_s2)
                    pr_wt[n_pr] = wi
                    n_pr += 1
    scal[W] += tw
    scal[LSE] += tl
    scal[QE] += tq
    scal[NDIST] += nd
    scal[CHANGED] += ch
    return aggregate_pairs(pr_key, pr_val, pr_wt, n_pr)


@njit(nogil=True, cache=True)
def centre_neighbours(centres, n_neighbors, rows_start, rows_stop, out_idx, out_dist):
    """Exact G nearest centres (itself first) of centres[rows_start:rows_stop] (seed 000 Alg. 1).

    out_idx : (C, G) int32 OUT, out_dist : (C, G) float64 OUT (Euclidean distances).
    """
    C = centres.shape[0]
    k = min(n_neighbors, C)
    sel_d = np.empty(k)
    sel_c = np.empty(k, dtype=np.int64)
    for i in range(rows_start, rows_stop):
        size = insert_sorted(sel_d, sel_c, 0, k, 0.0, i)
        for c in range(C):
            if c != i:
                size = insert_sorted(sel_d, sel_c, size, k, sqdist(centres[i], centres[c]), c)
        for t in range(k):
            out_idx[i, t] = sel_c[t]
            out_dist[i, t] = np.sqrt(sel_d[t])

"""Kernels of the seedings: weighted sampling, potentials, AFK-MC2 chains and the k-means|| reduction.

Chunk kernels (``bernoulli_sample``, ``potentials``, ``exponential_keys``) run on
the workers; ``afkmc2_chains`` and the reduction kernels (``greedy_kmeanspp_balls``,
``dense_gains``, ``weighted_means``; see :mod:`daskclust.seeding.reduction`) run on
the driver over the gathered rows. The nearest-candidate searches are in
:mod:`daskclust.kernels.ballindex` and :mod:`daskclust.kernels.dense`.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from .estep import sqdist
from .rng import uniform


@njit(nogil=True, cache=True)
def weighted_sum(w, values):
    """sum_i w_i values_i (w empty = unit weights), in float64."""
    s = 0.0
    if w.shape[0] == 0:
        for i in range(values.shape[0]):
            s += values[i]
    else:
        for i in range(values.shape[0]):
            s += w[i] * values[i]
    return s


@njit(nogil=True, cache=True)
def bernoulli_sample(key, w, mind2, scale):
    """Rows kept independently with probability min(1, scale * w_i * mind2_i) (k-means|| oversampling).

    Returns the kept row indices (int64). Draw i of stream ``key`` decides row i.
    """
    keep = np.empty(mind2.shape[0], dtype=np.int64)
    k = 0
    for i in range(mind2.shape[0]):
        wi = w[i] if w.shape[0] > 0 else 1.0
        if uniform(key, i) < scale * wi * mind2[i]:
            keep[k] = i
            k += 1
    return keep[:k]


@njit(nogil=True, cache=True)
def uniforms_at(key, rows):
    """The draws ``uniform(key, i)`` for i in ``rows``: those ``bernoulli_sample`` compared."""
    out = np.empty(rows.shape[0])
    for t in range(rows.shape[0]):
        out[t] = uniform(key, rows[t])
    return out


@njit(nogil=True, cache=True)
def exponential_keys(key, mass):
    """Keys -log(u_i) / mass_i: the k smallest are a sample of k rows without replacement
    with probabilities proportional to ``mass`` (Efraimidis & Spirakis 2006).
    Rows with zero mass get +inf (never drawn)."""
    out = np.empty(mass.shape[0])
    for i in range(mass.shape[0]):
        if mass[i] > 0.0:
            out[i] = -np.log(1.0 - uniform(key, i)) / mass[i]
        else:
            out[i] = np.inf
    return out


@njit(nogil=True, cache=True)
def potentials(X, w, mind2, cands, out):
    """out[j] += sum_i w_i min(mind2_i, ||x_i - cand_j||^2): the cost if cand_j were added. OUT: out."""
    for i in range(X.shape[0]):
        wi = w[i] if w.shape[0] > 0 else 1.0
        for j in range(cands.shape[0]):
            out[j] += wi * min(mind2[i], sqdist(X[i], cands[j]))


@njit(nogil=True, cache=True)
def take_min(mind2, label, new_d2, new_label):
    """mind2 = min(mind2, new_d2) with label = new_label where it improved. IN/OUT: mind2, label."""
    for i in range(mind2.shape[0]):
        if new_d2[i] < mind2[i]:
            mind2[i] = new_d2[i]
            label[i] = new_label


@njit(nogil=True, cache=True)
def distances_to(X, centre, out):
    """out[i] = ||x_i - centre||^2. OUT: out."""
    for i in range(X.shape[0]):
        out[i] = sqdist(X[i], centre)


@njit(nogil=True, cache=True)
def afkmc2_chains(first, cands, cand_mass, cand_q, n_clusters, chain_length, key):
    """AFK-MC2 (Bachem et al. 2016, Alg. 1) on pre-drawn proposal samples.

    first : (D,) the first centre. cands : (M, D) proposal draws in draw order,
    M >= (n_clusters - 1) * chain_length; cand_mass : (M,) weight w of each draw;
    cand_q : (M,) proposal probability q of each draw. Chain i uses draws
    ``[i*m, (i+1)*m)``: the state moves from x to y with probability
    min(1, (w_y d(y)^2 q(x)) / (w_x d(x)^2 q(y))), d = distance to the nearest
    centre chosen so far. Returns the (n_clusters, D) centres.
    """
    D = first.shape[0]
    centres = np.empty((n_clusters, D))
    centres[0] = first
    m = chain_length
    for i in range(1, n_clusters):
        base = (i - 1) * m
        x = base
        dx = np.inf
        for c in range(i):
            dx = min(dx, sqdist(cands[x], centres[c]))
        for t in range(1, m):
            y = base + t
            dy = np.inf
            for c in range(i):
                dy = min(dy, sqdist(cands[y], centres[c]))
            num = cand_mass[y] * dy * cand_q[x]
            den = cand_mass[x] * dx * cand_q[y]
            if den == 0.0 or uniform(key, y) * den < num:
                x = y
                dx = dy
        centres[i] = cands[x]
    return centres


# --- the k-means|| reduction on the driver: weighted greedy k-means++ and weighted Lloyd ---


@njit
def _draw_position(u, cum):
    """The first position p with cum[p] > u * cum[-1] (a draw in proportion to the increments of ``cum``)."""
    target = u * cum[cum.shape[0] - 1]
    lo, hi = 0, cum.shape[0] - 1
    while lo < hi:
        mid = (lo + hi) >> 1
        if cum[mid] > target:
            hi = mid
        else:
            lo = mid + 1
    return lo


@njit(nogil=True, cache=True)
def draw_trials(key, counter, mass, out):
    """out[t] = a position drawn in proportion to ``mass`` with the draw ``counter + t`` of stream
    ``key`` (positions of zero mass are never drawn while some mass is positive). OUT: out."""
    cum = np.cumsum(mass)
    for t in range(out.shape[0]):
        out[t] = _draw_position(uniform(key, counter + t), cum)


@njit
def _ball_gain(t, gcent, grad, offsets, pts, pdist, wts, d2, gdmax, gsum, apply):
    """(sum_p w_p (d2_p - min(d2_p, ||p - pts[t]||^2)), distances evaluated): what choosing
    pts[t] as a centre saves, over a ball partition of the points (see ``ballindex``).

    ``gdmax[g]`` is the largest sqrt(d2) in group g: no member can gain when
    ||pts[t] - g|| >= rho_g + gdmax[g], and only the band of members with
    | ||pts[t] - g|| - ||p - g|| | < gdmax[g] can. With ``apply`` the new
    distances are stored and the group statistics (gdmax, gsum = sum w d2) updated.
    """
    gain = 0.0
    n = 0
    for g in range(gcent.shape[0]):
        reach = grad[g] + gdmax[g]
        dct2 = sqdist(pts[t], gcent[g])
        n += 1
        if dct2 >= reach * reach:
            continue
        dct = np.sqrt(dct2)
        band = gdmax[g] * (1.0 + 1e-9)  # a margin: the squared test below decides borderline members
        lo, hi = offsets[g], offsets[g + 1]
        if not apply:
            while lo < hi:  # the first member with pdist > dct - band
                mid = (lo + hi) >> 1
                if pdist[mid] <= dct - band:
                    lo = mid + 1
                else:
                    hi = mid
            hi = offsets[g + 1]
        new_max = 0.0
        new_sum = 0.0
        for p in range(lo, hi):
            cur = d2[p]
            gap = dct - pdist[p]
            if not apply and gap <= -band:
                break  # members are sorted by pdist: every later one is farther still
            if gap * gap < cur:
                d = sqdist(pts[p], pts[t])
                n += 1
                if d < cur:
                    gain += wts[p] * (cur - d)
                    if apply:
                        d2[p] = d
                        cur = d
            if apply:
                new_max = max(new_max, cur)
                new_sum += wts[p] * cur
        if apply:
            gdmax[g] = np.sqrt(new_max)
            gsum[g] = new_sum
    return gain, n


@njit(nogil=True, cache=True)
def greedy_kmeanspp_balls(gcent, grad, offsets, pts, pdist, wts, n_clusters, n_trials, key):
    """Weighted greedy k-means++ (scikit-learn's ``_kmeans_plusplus``) over a ball partition of the
    points, exact; returns (chosen positions in partition order, distances evaluated).

    The first centre is drawn in proportion to w; every further step draws
    ``n_trials`` points in proportion to w d^2 (d: distance to the nearest centre
    so far) and keeps the one that lowers sum w d^2 most (the first on ties).
    Draws use stream ``key``, so the result depends on nothing else. The
    partition prunes where the triangle inequality does (low intrinsic
    dimension); elsewhere it costs what scikit-learn's matrix of trials does.
    Serial, like ``ballindex._trial_gains``: numba's parallel threads busy-wait
    between steps and stall on a loaded machine.
    """
    M = pts.shape[0]
    B = gcent.shape[0]
    d2 = np.full(M, np.inf)
    gdmax = np.full(B, np.inf)
    gsum = np.zeros(B)
    chosen = np.empty(n_clusters, dtype=np.int64)
    first = _draw_position(uniform(key, 0), np.cumsum(wts))
    chosen[0] = first
    n_dist = _ball_gain(first, gcent, grad, offsets, pts, pdist, wts, d2, gdmax, gsum, True)[1]
    trials = np.empty(n_trials, dtype=np.int64)
    gains = np.empty(n_trials)
    counts = np.empty(n_trials, dtype=np.int64)
    counter = 1
    for k in range(1, n_clusters):
        gcum = np.cumsum(gsum)
        if gcum[B - 1] <= 0.0:  # every point coincides with a centre: take unchosen ones in order
            chosen[k] = _first_unchosen(chosen, k, M)
            continue
        for t in range(n_trials):  # the group in proportion to its mass, then the member within it
            u = uniform(key, counter)
            counter += 1
            g = _draw_position(u, gcum)
            below = gcum[g - 1] if g > 0 else 0.0
            target = u * gcum[B - 1] - below
            acc = 0.0
            pick = offsets[g + 1] - 1
            for p in range(offsets[g], offsets[g + 1]):
                acc += wts[p] * d2[p]
                if acc > target:
                    pick = p
                    break
            trials[t] = pick
        for t in range(n_trials):
            gains[t], counts[t] = _ball_gain(trials[t], gcent, grad, offsets, pts, pdist, wts, d2, gdmax, gsum, False)
        n_dist += counts.sum()
        best = trials[np.argmax(gains)]
        chosen[k] = best
        n_dist += _ball_gain(best, gcent, grad, offsets, pts, pdist, wts, d2, gdmax, gsum, True)[1]
    return chosen, n_dist


@njit
def _first_unchosen(chosen, k, M):
    for p in range(M):
        taken = False
        for j in range(k):
            if chosen[j] == p:
                taken = True
                break
        if not taken:
            return p
    return 0


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
def weighted_means(P, wts, labels, centres):
    """centres[c] = the w-weighted mean of the points labelled c (the point itself, exactly, when
    it is alone); centres without points keep their value. IN/OUT: centres. Returns the number
    of centres that moved."""
    C, D = centres.shape
    sums = np.zeros((C, D))
    mass = np.zeros(C)
    count = np.zeros(C, dtype=np.int64)
    last = np.zeros(C, dtype=np.int64)
    for i in range(P.shape[0]):
        c = labels[i]
        mass[c] += wts[i]
        count[c] += 1
        last[c] = i
        for j in range(D):
            sums[c, j] += wts[i] * P[i, j]
    moved = 0
    for c in range(C):
        if mass[c] > 0.0:
            changed = False
            for j in range(D):
                value = P[last[c], j] if count[c] == 1 else sums[c, j] / mass[c]
                if value != centres[c, j]:
                    changed = True
                centres[c, j] = value
            moved += changed
    return moved

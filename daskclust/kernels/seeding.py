"""Kernels of the seedings: weighted sampling, AFK-MC2 chains and the k-means|| reduction.

``exponential_keys`` runs on the workers (draws inside a chunk);
``bernoulli_sample`` (the k-means|| rounds, :mod:`daskclust.seeding.rounds`),
``afkmc2_chains`` and the reduction's ``draw_trials`` and ``weighted_means`` (see
:mod:`daskclust.seeding.reduction`) run on the driver over the gathered rows. The nearest-candidate searches and the greedy k-means++ steps
are in :mod:`daskclust.kernels.balltree` (pruned by a ball tree) and
:mod:`daskclust.kernels.dense` (matrix products).
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
def bernoulli_sample(key, w, mind2, scale, ids):
    """Rows kept independently with probability min(1, scale * w_i * mind2_i) (k-means|| oversampling).

    Returns the kept row indices (int64). Draw ids[i] of stream ``key`` decides row i (a row's place
    in the source, so that the rows' order on the worker does not change the draws).
    """
    keep = np.empty(mind2.shape[0], dtype=np.int64)
    k = 0
    for i in range(mind2.shape[0]):
        wi = w[i] if w.shape[0] > 0 else 1.0
        if uniform(key, ids[i]) < scale * wi * mind2[i]:
            keep[k] = i
            k += 1
    return keep[:k]


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
def draw_position(u, cum):
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


@njit(nogil=True)
def local_gain(p, nbr, nd2, wts, d2):
    """sum_j w_j max(0, d2_j - ||p_j - p_p||^2) over the points j = nbr[p, :] nearest to point p
    (squared distances ``nd2[p, :]``): what choosing p as a centre saves within its neighbourhood,
    a lower bound of the whole saving (equal to it when the neighbourhood holds every point)."""
    gain = 0.0
    for j in range(nbr.shape[1]):
        q = nbr[p, j]
        excess = d2[q] - nd2[p, j]
        if excess > 0.0:
            gain += wts[q] * excess
    return gain


@njit(nogil=True, cache=True)
def local_gains(picks, nbr, nd2, wts, d2, out):
    """out[t] = :func:`local_gain` of point picks[t]. OUT: out."""
    for t in range(picks.shape[0]):
        out[t] = local_gain(picks[t], nbr, nd2, wts, d2)


@njit(nogil=True, cache=True)
def draw_trials(key, counter, mass, out):
    """out[t] = a position drawn in proportion to ``mass`` with the draw ``counter + t`` of stream
    ``key`` (positions of zero mass are never drawn while some mass is positive). OUT: out."""
    cum = np.cumsum(mass)
    for t in range(out.shape[0]):
        out[t] = draw_position(uniform(key, counter + t), cum)


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


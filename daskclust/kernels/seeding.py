"""Kernels of the seedings: nearest-candidate updates, weighted sampling, AFK-MC2 chains
and greedy k-means++ on a small weighted candidate set.

Chunk kernels (``update_nearest``, ``bernoulli_sample``, ``potentials``,
``exponential_keys``) run on the workers; ``afkmc2_chains`` and
``greedy_kmeanspp`` run on the driver over the gathered candidates.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from .estep import sqdist
from .rng import uniform


@njit(nogil=True, cache=True)
def update_nearest(X, cands, offset, mind2, label):
    """Lower each row's squared distance to its nearest candidate with new candidates.

    cands : (M, D) float64 new candidates, numbered ``offset + j``.
    mind2 : (n,) float64, IN/OUT; label : (n,) int32, IN/OUT (index of the nearest).
    Returns the number of distances evaluated.
    """
    M = cands.shape[0]
    for i in range(X.shape[0]):
        best = mind2[i]
        arg = -1
        for j in range(M):
            d = sqdist(X[i], cands[j])
            if d < best:
                best = d
                arg = j
        if arg >= 0:
            mind2[i] = best
            label[i] = offset + arg
    return X.shape[0] * M


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


@njit(nogil=True, cache=True)
def greedy_kmeanspp(P, wts, n_clusters, n_trials, key):
    """Weighted greedy k-means++ (Arthur & Vassilvitskii 2007, scikit-learn's variant).

    P : (M, D) points with weights ``wts`` (M,). Each step draws ``n_trials``
    candidates with probability proportional to w d^2 and keeps the one that
    lowers sum w d^2 most. Returns the indices (n_clusters,) of the chosen points.
    """
    M = P.shape[0]
    chosen = np.empty(n_clusters, dtype=np.int64)
    total_w = wts.sum()
    u = uniform(key, 0) * total_w
    acc = 0.0
    first = M - 1
    for i in range(M):
        acc += wts[i]
        if acc > u:
            first = i
            break
    chosen[0] = first
    d2 = np.empty(M)
    for i in range(M):
        d2[i] = sqdist(P[i], P[first])
    cand_d2 = np.empty(M)
    best_d2 = np.empty(M)
    counter = 1
    for k in range(1, n_clusters):
        pot = 0.0
        for i in range(M):
            pot += wts[i] * d2[i]
        best_pot = np.inf
        best = -1
        for t in range(n_trials):
            u = uniform(key, counter) * pot
            counter += 1
            acc = 0.0
            cand = M - 1
            for i in range(M):
                acc += wts[i] * d2[i]
                if acc > u:
                    cand = i
                    break
            p = 0.0
            for i in range(M):
                cand_d2[i] = min(d2[i], sqdist(P[i], P[cand]))
                p += wts[i] * cand_d2[i]
            if p < best_pot:
                best_pot = p
                best = cand
                best_d2[:] = cand_d2
        if best < 0:  # every remaining point coincides with a centre
            best = chosen[k - 1]
        chosen[k] = best
        d2[:] = best_d2 if best_pot < np.inf else d2
    return chosen

"""Exact nearest-point search through a two-level ball partition.

A set of M points is split into B groups, each a ball (centre g, radius rho_g)
holding its members sorted by their distance to g. For a query x and any
member p of group g the triangle inequality gives

    ||x - p|| >= ||x - g|| - rho_g          (skip the whole group)
    ||x - p|| >= | ||x - g|| - ||p - g|| |  (skip one member)

so a query only evaluates the B group centres and the members of the groups
that could hold a point closer than the best found so far (or than a bound the
caller already has). With B ~ sqrt(M) and clustered points this costs
O(sqrt(M)) distances instead of O(M), and the answer is exact. The seedings
use it for k-means|| updates, the nearest-seed assignment and the greedy
k-means++ reduction.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from ..names import STREAM_BALL_INDEX
from .estep import sqdist
from .rng import uniform
from .seeding import draw_position


@njit(nogil=True, cache=True)
def ball_nearest(X, gcent, grad, offsets, pts, pdist, ids, mind2, label):
    """Lower ``mind2`` / ``label`` (IN/OUT) of each row with the nearest indexed point.

    gcent (B, D), grad (B,) : group centres and radii; members of group g are
    ``pts[offsets[g]:offsets[g + 1]]`` with distances ``pdist`` to their centre
    (ascending) and labels ``ids``. Rows keep their value when no indexed point
    is closer than ``mind2``. Returns the number of distances evaluated.

    The group of the nearest centre is scanned first; a group is skipped when
    ||x - g|| >= rho_g + sqrt(best), compared squared so that only scanned
    groups cost a square root. Within a group only the band of members with
    | ||x - g|| - ||p - g|| | < sqrt(best) is evaluated, its start found by
    bisection (a third faster than skipping members one by one on the BIRCH grid).
    """
    B = gcent.shape[0]
    dg2 = np.empty(B)
    n_eval = 0
    for i in range(X.shape[0]):
        best = mind2[i]
        arg = -1
        for g in range(B):
            dg2[g] = sqdist(X[i], gcent[g])
        first = np.argmin(dg2)
        n_eval += B
        sb = np.sqrt(best)
        for step in range(B):  # the nearest group first, then the others
            g = first if step == 0 else (step - 1 if step - 1 < first else step)
            reach = grad[g] + sb
            if dg2[g] >= reach * reach:
                continue
            dg = np.sqrt(dg2[g])
            lo, hi = offsets[g], offsets[g + 1]
            while lo < hi:  # the first member with pdist >= dg - sb
                mid = (lo + hi) >> 1
                if pdist[mid] < dg - sb:
                    lo = mid + 1
                else:
                    hi = mid
            for p in range(lo, offsets[g + 1]):
                if pdist[p] > dg + sb:
                    break  # members are sorted by pdist: every later one is farther still
                d = sqdist(X[i], pts[p])
                n_eval += 1
                if d < best:
                    best = d
                    arg = p
                    sb = np.sqrt(best)
        if arg >= 0:
            mind2[i] = best
            label[i] = ids[arg]
    return n_eval


@njit(nogil=True, cache=True)
def _assign_groups(points, centres, labels):
    for i in range(points.shape[0]):
        best = np.inf
        for g in range(centres.shape[0]):
            d = sqdist(points[i], centres[g])
            if d < best:
                best = d
                labels[i] = g


def build_ball_index(points: np.ndarray, ids: np.ndarray | None = None, n_groups: int | None = None,
                     seed: int = 0, lloyd_steps: int = 3):
    """Partition ``points`` (M, D) into about sqrt(M) balls (a few Lloyd steps from random points).

    Returns the tuple of arrays ``ball_nearest`` takes after X:
    (gcent, grad, offsets, pts, pdist, ids). The grouping only affects speed, never results.
    """
    points = np.ascontiguousarray(points, dtype=np.float64)
    M = len(points)
    ids = np.arange(M, dtype=np.int64) if ids is None else np.asarray(ids, dtype=np.int64)
    B = max(1, min(M, n_groups or int(1.0 * np.sqrt(M))))
    rng = np.random.default_rng([seed, STREAM_BALL_INDEX])
    centres = points[rng.choice(M, B, replace=False)].copy()
    labels = np.zeros(M, dtype=np.int64)
    for _ in range(lloyd_steps):
        _assign_groups(points, centres, labels)
        counts = np.bincount(labels, minlength=B)
        sums = np.zeros_like(centres)
        np.add.at(sums, labels, points)
        filled = counts > 0
        centres[filled] = sums[filled] / counts[filled, None]
    _assign_groups(points, centres, labels)
    dist = np.sqrt(((points - centres[labels]) ** 2).sum(1))
    order = np.lexsort((dist, labels))
    counts = np.bincount(labels, minlength=B)
    offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    radii = np.zeros(B)
    np.maximum.at(radii, labels, dist)
    return centres, radii, offsets, points[order], dist[order], ids[order]


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
    Serial: numba's parallel threads busy-wait
    between steps and stall on a loaded machine.
    """
    M = pts.shape[0]
    B = gcent.shape[0]
    d2 = np.full(M, np.inf)
    gdmax = np.full(B, np.inf)
    gsum = np.zeros(B)
    chosen = np.empty(n_clusters, dtype=np.int64)
    first = draw_position(uniform(key, 0), np.cumsum(wts))
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
            g = draw_position(u, gcum)
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

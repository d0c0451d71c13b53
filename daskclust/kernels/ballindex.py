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
use it for k-means|| updates, the nearest-seed assignment and the Lloyd
steps of the k-means|| reduction (its greedy k-means++ steps use the ball tree
of :mod:`daskclust.kernels.balltree`).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from ..names import STREAM_BALL_INDEX
from .estep import sqdist


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

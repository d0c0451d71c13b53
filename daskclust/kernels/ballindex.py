"""A two-level ball partition of a point set: about sqrt(M) balls found by a few Lloyd steps.

Each group is a ball (centre g, radius rho_g) holding its members sorted by
their distance to g; the partition only affects how much a search prunes,
never its result. The mixture index (:mod:`daskclust.models.inference`) groups
the components' means with it. Nearest-point searches and greedy k-means++ use
the deeper ball tree of :mod:`daskclust.kernels.balltree`.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from ..names import STREAM_BALL_INDEX
from .estep import sqdist


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

    Returns (gcent, grad, offsets, pts, pdist, ids): group centres and radii, each group's members
    ``pts[offsets[g]:offsets[g + 1]]`` sorted by their distance ``pdist`` to it, and their ``ids``. The grouping only affects speed, never results.
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

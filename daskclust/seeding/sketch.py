"""Seeding on sketches (Kightley & Becker 2019 Sec. III): k-means++ on a sample of sketches, then the hard bootstrap.

1. One pass validates every chunk and draws a sample of S = min(N, max(SAMPLE_PER_CLUSTER C,
   MIN_SAMPLE)) sketch rows without replacement in proportion to their weights (exponential keys,
   the draws of :class:`~daskclust.seeding.passes.DrawOp`).
2. On the driver, k-means++ (D^2 sampling, Arthur & Vassilvitskii) over the sample with the
   sketch distance of Eq. 30, ||y_i - R_i^T mu||^2; a chosen row becomes a seed by projecting it
   back to P dimensions, R_i y_i (zero where it kept nothing).
3. One pass gives every row to its nearest seed by Eq. 30 (the state ``seed_label`` from which the
   truncated E-step builds K(n)) and sums the hard statistics, from which the family initialises
   the weights (Eq. 19) and variances (Eq. 28) about the seeds
   (:meth:`~daskclust.models.sketched.SketchedFamily.bootstrap`).

Every distance is counted: S C on the driver, N C in the assignment pass.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
from numba import njit

from ..engine.ops import Chunk
from ..errors import InvalidDataError
from ..kernels.estep import NDIST_POINTS, QE, W, cluster_id_dtype, estep_full
from ..kernels.index_bits import index_at
from ..kernels.rng import stream_key, uniform
from ..models.sketched import SketchedFamily, SketchStats
from ..names import STATE_SEED_LABEL, STREAM_SKETCH_SEEDING
from . import SeedResult
from .passes import DrawOp, FirstPassOp

SAMPLE_PER_CLUSTER = 20
MIN_SAMPLE = 2000


@njit(cache=True)
def sketch_distance(row, centre):
    """||y - R^T mu||^2 of a packed sketch row (values then indices) and a P-dimensional centre (Eq. 30)."""
    Q = row.shape[0] // 2
    s = 0.0
    for q in range(Q):
        t = row[q] - centre[index_at(row[Q + q])]
        s += t * t
    return s


@njit(cache=True)
def lift(row, out):
    """R_i y_i: the sketch row back in P dimensions, zero where it kept nothing."""
    Q = row.shape[0] // 2
    out[:] = 0.0
    for q in range(Q):
        out[index_at(row[Q + q])] = row[q]


@njit(cache=True)
def kmeanspp_sketches(rows, n_clusters, key, centres):
    """k-means++ over packed sketch rows: the first seed uniform, each next one drawn in proportion
    to the Eq. 30 distance to the nearest seed so far. OUT: centres (C, P). Returns the distances
    evaluated and the final sum of nearest distances."""
    n = rows.shape[0]
    mind = np.full(n, np.inf)
    pick = min(int(uniform(key, 0) * n), n - 1)
    n_dist = 0
    for k in range(n_clusters):
        if k > 0:
            total = mind.sum()
            pick = n - 1
            if total > 0.0:
                target = uniform(key, k) * total
                acc = 0.0
                for i in range(n):
                    acc += mind[i]
                    if acc > target:
                        pick = i
                        break
            else:  # every row already on a seed: any row
                pick = min(int(uniform(key, k) * n), n - 1)
        lift(rows[pick], centres[k])
        for i in range(n):
            d = sketch_distance(rows[i], centres[k])
            if d < mind[i]:
                mind[i] = d
        n_dist += n
    return n_dist, mind.sum()


@dataclass
class BootstrapOp:
    """The assignment pass: each row's nearest seed by Eq. 30 (state ``seed_label``) and the hard
    statistics about the seeds (the E-step kernel with unit variances, equal weights and C' = 1)."""

    family: SketchedFamily
    kernel: tuple

    def new_acc(self) -> SketchStats:
        return SketchStats.zeros(*self.kernel.means.shape)

    def run(self, chunk: Chunk, acc: SketchStats) -> None:
        K = np.empty((chunk.n_rows, 1), dtype=cluster_id_dtype(len(self.kernel.means)))
        estep_full(chunk.X, chunk.w, self.kernel, 1, K, acc.arrays(), acc.scal)
        chunk.state[STATE_SEED_LABEL] = K[:, 0].copy()

    @staticmethod
    def merge(a: SketchStats, b: SketchStats) -> SketchStats:
        return a.merge(b)


def seed_sketches(engine, family: SketchedFamily, n_clusters: int, n_features: int, *, seed: int, reg: float,
                  centres: np.ndarray | None = None) -> tuple[SeedResult, object]:
    """Seeds (k-means++ on a sample, or the given preconditioned ``centres``), the hard bootstrap's
    parameters, each row's seed label; returns (SeedResult, initial Params)."""
    t0 = time.perf_counter()
    data = engine.data
    size = min(data.n_samples, max(SAMPLE_PER_CLUSTER * n_clusters, MIN_SAMPLE))
    first = engine.map_reduce(FirstPassOp(data.n_chunks, DrawOp(seed, 0, size, data.n_features)))
    if first["W"].sum() <= 0:
        raise InvalidDataError("sample_weight sums to zero: no row has positive weight")
    n_dist = 0
    method = "array"
    if centres is None:
        sample = first["probe"]["X"][np.argsort(first["probe"]["key"], kind="stable")]
        centres = np.zeros((n_clusters, n_features))
        n_dist, _ = kmeanspp_sketches(np.ascontiguousarray(sample, dtype=np.float64), n_clusters,
                                      stream_key(seed, STREAM_SKETCH_SEEDING), centres)
        method = "k-means++ (sketches)"
    unit = family.kernel_params(family.initial_params(centres, 1.0, 0.0))  # unit variances, equal weights
    stats = engine.map_reduce(BootstrapOp(family, unit))
    n_dist += int(stats.scal[NDIST_POINTS])
    sigma2 = float(stats.scal[QE] / (family.n_kept * stats.scal[W]))
    params = family.bootstrap(stats, centres, sigma2, reg)
    return SeedResult(centres, sigma2, time.perf_counter() - t0, n_dist, method), params

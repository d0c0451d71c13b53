"""scikit-learn's "kmeans" start of a mixture: k-means from the seeds to convergence, then the
family's M-step from the hard assignments.

Each component starts as its k-means cluster: weight n_c / W, mean, and the cluster's covariance in
the family's layout plus ``reg_covar`` (scikit-learn's ``GaussianMixture(init_params="kmeans")``),
instead of the seeds with equal weights and the seeding's variance sigma^2 I. Three steps on the
engine, after the seeding:

1. k-means (the ``kmeans`` family, C' = 1, the estimated search) from the seeds until it converges
   by scikit-learn's KMeans rule (an M-step moves the centres by at most ``KMEANS_TOL`` times the
   data's mean variance in all, sum_c ||mu_c^new - mu_c||^2, or no row changes cluster) or after
   ``KMEANS_MAX_ITER`` iterations; each row's cluster stays in its state K(n).
2. One pass of the mixture family's statistics with every row in its k-means cluster alone (its only
   candidate is its K(n)): S0, S1 and S2 of the hard partition, then the family's M-step.
3. Each row's cluster becomes its seed label, from which the mixture's first E-step builds K(n).

A cluster that k-means left empty starts with the mean covariance of the others and the weight of one
row (a component without weight would stay dropped).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from ..engine.ops import Chunk, add_arrays
from ..kernels.estep import NDIST_POINTS, cluster_id_dtype
from ..models import FAMILIES, Family, Params
from ..names import STATE_K, STATE_SEED_LABEL
from ..search import SearchConfig, make_search
from ..search.payloads import NeighbourhoodPayload
from .estep_op import EStepOp
from .loop import EMSettings, LoopState, run_em

KMEANS_MAX_ITER = 300
KMEANS_TOL = 1e-4
KMEANS_NEIGHBORS = 10
"""The k-means of the start is scikit-learn's ``KMeans(n_init=1)`` (``max_iter=300``, ``tol=1e-4`` of
the data's mean variance on the centres' total squared shift), run as :class:`daskclust.KMeans`'s
estimated search (G = 10, one exploratory cluster per row)."""


@dataclass
class KMeansStart:
    """The mixture's first parameters, and what the start cost: k-means iterations, distances, seconds."""

    params: Params
    iterations: int
    n_distances: int
    seconds: float


@dataclass
class LabelsAsSeedsOp:
    """seed_label = K(n)[0], K(n) dropped: each row's k-means cluster is where the mixture's E-step starts."""

    reads_rows = False

    def new_acc(self):
        return {"rows": np.zeros(1)}

    def run(self, chunk: Chunk, acc) -> None:
        chunk.state[STATE_SEED_LABEL] = np.ascontiguousarray(chunk.state.pop(STATE_K)[:, 0])
        acc["rows"][0] += chunk.n_rows

    merge = staticmethod(add_arrays)


def kmeans_start(engine, centres: np.ndarray, sigma2: float, family: Family, reg: float, seed: int,
                 data_variance: float) -> KMeansStart:
    """Steps 1-3 of the module docstring on ``engine`` (seeded: every chunk holds its seed labels);
    ``data_variance``: the mean over features of the data's variance (the seeding's first pass)."""
    t0 = time.perf_counter()
    C = len(centres)
    kmeans = FAMILIES["kmeans"]
    settings = EMSettings(C, 1, kmeans, KMEANS_MAX_ITER, 0.0, seed=seed, shift_tol=KMEANS_TOL * data_variance)
    search = make_search("estimated", SearchConfig(C, 1, min(KMEANS_NEIGHBORS, C), 1, metric=True,
                                                   n_rows=engine.data.n_samples))
    result = run_em(engine, LoopState(0, kmeans.initial_params(centres, sigma2, 0.0)), settings, search)
    # every row's only candidate is its cluster: equal weights and unit variances make the cost a distance
    hard = family.initial_params(result.params.means, 1.0, 0.0)
    ids = np.arange(C)[:, None]
    alone = NeighbourhoodPayload(ids.astype(cluster_id_dtype(C)), 0, ids.astype(np.int32))
    op = EStepOp(family, family.kernel_params(hard), 1, True, alone, seed, 0)
    stats = engine.map_reduce(op).stats
    params = fill_empty(family.m_step(stats, hard, reg), stats.S0, family)
    engine.map_reduce(LabelsAsSeedsOp())
    n_distances = sum(row["n_distances"] for row in result.history) + int(stats.scal[NDIST_POINTS])
    return KMeansStart(params, result.n_iter, n_distances, time.perf_counter() - t0)


def fill_empty(params: Params, sizes: np.ndarray, family: Family) -> Params:
    """Components without rows get the others' mean covariance and the weight of one row."""
    empty = sizes <= 0
    if not empty.any() or empty.all():
        return params
    cov = family.covariances_for_empty(params.covariances, empty)
    weights = params.weights
    if family.learn_weights:
        weights = np.where(empty, 1.0 / sizes.sum(), weights)
        weights = weights / weights.sum()
    return params.replace(covariances=cov, weights=weights)

"""Seedings: initial centres chosen in a few passes over the chunked data.

Every seeding is weighted when sample weights are given, leaves on each chunk
the state ``seed_label`` (each row's nearest seed centre, approximately so for
k-means||) from which the truncated E-steps start, and returns the initial
variance sum_n w_n ||y_n - mu_seed(n)||^2 / (D sum_n w_n).

Registry (unknown names list the valid ones):

``"k-means||"``  Bahmani et al. 2012: ``init_rounds`` rounds of oversampling
                 l = oversampling_factor * C rows in proportion to w d^2, on the driver over
                 the uniform sample the first pass sends it (:mod:`daskclust.seeding.rounds`),
                 then k-means on the candidates weighted by the rows nearest to them
                 (greedy k-means++ and Lloyd, best of a few restarts where C is small;
                 :mod:`daskclust.seeding.reduction`); two passes over the data. KMeans's
                 default: on the BIRCH grid and the real sets of ``daskclust bench --suite
                 realdata`` Lloyd from it ends below scikit-learn's greedy k-means++.
``"afkmc2"``     Bachem et al. 2016 (Forster & Lücke 2018, Exarchakis et al. 2022): Markov chains of length
                 ``chain_length`` over one pass of proposal draws.
``"k-means++"``  greedy k-means++ (Arthur & Vassilvitskii 2007) as scikit-learn
                 runs it (2 + ln C candidates per centre), on the driver over the
                 rows the first pass draws: every row while that costs little
                 (then it is scikit-learn's seeding), else a weighted sample; two
                 passes whatever C. GaussianMixture's default: a mixture
                 started from k-means from these seeds reaches scikit-learn's
                 held-out likelihood, from k-means|| seeds a lower one.
``"random"``     C distinct rows drawn in proportion to w.
array            (C, D) initial centres given by the caller.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from ..data.ranges import check_not_too_small
from ..errors import InvalidDataError, InvalidParameterError
from .methods import (
    afkmc2,
    assign,
    first_draw_rows,
    kmeans_parallel,
    kmeanspp,
    random_rows,
    round_sample_rate,
    spatial_order,
)
from .passes import DrawOp, FirstPassOp

SEEDINGS = {
    "k-means||": kmeans_parallel,
    "afkmc2": afkmc2,
    "k-means++": kmeanspp,
    "random": random_rows,
}


@dataclass
class SeedResult:
    """Initial centres (C, D) float64, initial variance, seconds and distance evaluations spent, and
    the data's variance: the mean over features of sum_n w_n (x_nj - mean_j)^2 / W, from the first
    pass (None where the rows are not feature vectors: sketches)."""

    centres: np.ndarray
    sigma2: float
    seconds: float
    n_distances: int
    method: str
    data_variance: float | None = None


def check_init(init, n_clusters: int, n_features: int | None = None):
    """Validate ``init`` (name or array) early, before any pass over the data."""
    if isinstance(init, str):
        if init not in SEEDINGS:
            valid = ", ".join(repr(k) for k in SEEDINGS)
            raise InvalidParameterError(f"unknown init {init!r}; valid: {valid} or an array of centres")
        return init
    centres = np.asarray(init, dtype=np.float64)
    if centres.ndim != 2 or centres.shape[0] != n_clusters:
        raise InvalidParameterError(f"The shape of the initial centers {centres.shape} does not match the number "
                                    f"of clusters {n_clusters}.")
    if n_features is not None and centres.shape[1] != n_features:
        raise InvalidParameterError(f"The shape of the initial centers {centres.shape} does not match the number "
                                    f"of features of the data {n_features}.")
    if not np.isfinite(centres).all():
        raise InvalidParameterError("init array contains NaN or inf")
    return centres


def seed(engine, init, n_clusters: int, *, seed: int, oversampling_factor: float = 2.0,
         init_rounds: int = 5, chain_length: int = 5) -> SeedResult:
    """Choose initial centres with ``init`` and leave ``seed_label`` on every chunk."""
    t0 = time.perf_counter()
    data = engine.data
    init = check_init(init, n_clusters, data.n_features)
    draw = DrawOp(seed, 0, first_draw_rows(init, n_clusters, data.n_features, data.n_samples), data.n_features)
    rate = round_sample_rate(init, n_clusters, data.n_features, data.n_samples, oversampling_factor, init_rounds)
    first = engine.map_reduce(FirstPassOp(data.n_chunks, draw, rate))
    if first["W"].sum() <= 0:
        raise InvalidDataError("sample_weight sums to zero: no row has positive weight")
    check_not_too_small(first["max_abs"][0], data.dtype, data.n_features)
    if isinstance(init, str):
        method = SEEDINGS[init]
        centres, qe, W, n_dist = method(engine, n_clusters, seed=seed, oversampling_factor=oversampling_factor,
                                        init_rounds=init_rounds, chain_length=chain_length, probe=first["probe"],
                                        sample=first["sample"])
        name = init
    else:
        name = "array"
        centres, qe, W, n_dist = assign(engine, init, seed, renumber=False)  # the caller's numbering is kept
    sigma2 = float(qe) / (data.n_features * float(W))
    W_all, _, ss = first["moments"]
    return SeedResult(np.ascontiguousarray(centres, dtype=np.float64), sigma2, time.perf_counter() - t0,
                      int(n_dist), name, float(ss.mean() / W_all))


__all__ = ["SEEDINGS", "SeedResult", "check_init", "seed", "spatial_order"]

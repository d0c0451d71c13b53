"""Measurements shared by the suites: exact quantization error and the anchors (scikit-learn, faiss)."""

from __future__ import annotations

import os
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from ..seeding.passes import NearestIndex

ROWS = 32768


def exact_qe(X: np.ndarray, centres: np.ndarray) -> float:
    """sum_n min_c ||x_n - mu_c||^2 over all centres (exact search, row blocks on threads)."""
    index = NearestIndex.probed(centres)
    X = np.ascontiguousarray(X)

    def block(start):
        d2 = np.full(min(ROWS, len(X) - start), np.inf)
        index.search(np.ascontiguousarray(X[start:start + ROWS], dtype=np.float64), d2,
                     np.zeros(len(d2), dtype=np.int32))
        return d2.sum()

    with ThreadPoolExecutor(os.cpu_count() or 1) as pool:
        return float(sum(pool.map(block, range(0, len(X), ROWS))))


def timed(fn, *args, **kwargs):
    t0 = time.perf_counter()
    out = fn(*args, **kwargs)
    return out, time.perf_counter() - t0


def sklearn_kmeans(X, n_clusters: int, algorithm: str, seed: int) -> dict:
    """scikit-learn KMeans(n_init=1): greedy k-means++ then Lloyd or Elkan, timed apart."""
    from sklearn.cluster import KMeans, kmeans_plusplus

    centres, t_seed = timed(kmeans_plusplus, X, n_clusters, random_state=seed)
    centres = centres[0]
    model, t_iter = timed(KMeans(n_clusters, init=centres, n_init=1, algorithm=algorithm).fit, X)
    return {"qe": exact_qe(X, model.cluster_centers_), "seconds": t_seed + t_iter, "seeding_s": t_seed,
            "n_iter": int(model.n_iter_), "iter_ms": 1e3 * t_iter / max(model.n_iter_, 1), "pp_centres": centres}


def faiss_kmeans(X, n_clusters: int, seed: int, init: str | np.ndarray, niter: int = 25) -> dict | None:
    """faiss.Kmeans with its own seeding ("k-means++", "afkmc2") or given centres; None without faiss."""
    try:
        import faiss
    except ImportError:
        return None
    X32 = np.ascontiguousarray(X, dtype=np.float32)
    params = dict(niter=niter, seed=seed, max_points_per_centroid=max(1, len(X) // n_clusters + 1))
    init_centroids = None
    if isinstance(init, str):
        params["init_method"] = {"k-means++": faiss.ClusteringInitMethod_KMEANS_PLUS_PLUS,
                                 "afkmc2": faiss.ClusteringInitMethod_AFK_MC2}[init]
    else:
        init_centroids = np.ascontiguousarray(init, dtype=np.float32)
    km = faiss.Kmeans(X.shape[1], n_clusters, **params)
    _, seconds = timed(km.train, X32, init_centroids=init_centroids)
    return {"qe": exact_qe(X, km.centroids.astype(np.float64)), "seconds": seconds, "n_iter": niter,
            "iter_ms": 1e3 * seconds / niter}


def daskclust_fit(estimator, X, client) -> dict:
    """Fit a daskclust estimator; time is its fit_time_ (data placement, seeding, iterations).

    speedup: N C x iterations / every distance the iterations evaluated (history_'s
    n_distances: point-to-centre and centre-to-centre, the seeds' exact neighbours
    included); speedup_iter: the median iteration's N C / n_distances;
    centre_share: the centre-to-centre part of all distances.
    """
    model = estimator.fit(X, client=client)
    rows = model.history_
    total = sum(r["n_distances"] for r in rows)
    return {"qe": exact_qe(X, model.centres_), "seconds": model.fit_time_, "seeding_s": model.seeding_time_,
            "n_iter": model.n_iter_, "iter_ms": 1e3 * float(np.median([r["seconds"] for r in rows])),
            "speedup": len(X) * model.centres_.shape[0] * len(rows) / total,
            "speedup_iter": float(np.median([r["distance_speedup"] for r in rows])),
            "centre_share": sum(r["n_distances_centres"] for r in rows) / total, "model": model}


def warm_up(X, client) -> None:
    """Load the compiled kernels for this dtype and dimension on the workers before timing."""
    sample = X[: min(len(X), 5000)]
    from .. import GaussianMixture, KMeans

    for estimator in (KMeans(32, random_state=0), GaussianMixture(32, covariance_type="isotropic", random_state=0)):
        estimator.fit(sample, client=client)

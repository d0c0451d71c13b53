"""Throughput in memory: distance evaluations per second per core, against scikit-learn's Lloyd.

BIRCH grid, C = 4096 (N = 409,600), in memory. daskclust runs one kernel
thread per worker (2 workers x 1 thread); scikit-learn uses its OpenMP threads
on the same 2 cores. "points x candidates / s / core" counts the distances an
iteration evaluates (N C for a full search) over its wall-clock and the 2
cores; "points / s / core" is what a user waits for.
"""

from __future__ import annotations

import time

import numpy as np

from .. import KMeans
from .data import birch_array
from .measure import warm_up
from .runner import Table

COMMAND = "daskclust bench --suite throughput"
CLUSTER = {"n_workers": 2, "threads_per_worker": 1}
CORES = 2


def run(client, n_clusters: int = 4096) -> Table:
    from sklearn.cluster import KMeans as SKKMeans

    X, _ = birch_array(n_clusters)
    warm_up(X, client)
    table = Table(
        f"Throughput in memory, BIRCH C = {n_clusters}, N = {len(X):,} (2 cores)",
        ["system", "ms / iteration", "points x candidates / s / core", "points / s / core"],
    )
    for name, est in (("daskclust KMeans(search='full') (Lloyd)", KMeans(n_clusters, search="full", max_iter=5,
                                                                          random_state=0)),
                      ("daskclust KMeans() (var-k-means-S, 5+1)", KMeans(n_clusters, random_state=0))):
        model = est.fit(X, client=client)
        rows = model.history_[1:] or model.history_
        seconds = np.array([r["seconds"] for r in rows])
        evals = np.array([r["n_distances"] for r in rows])
        table.rows.append([name, 1e3 * np.median(seconds), np.median(evals / seconds) / CORES,
                           np.median(len(X) / seconds) / CORES])
    init = X[np.random.default_rng(0).choice(len(X), n_clusters, replace=False)]
    t0 = time.perf_counter()
    sk = SKKMeans(n_clusters, init=init, n_init=1, max_iter=5, tol=0, algorithm="lloyd").fit(X)
    per_iter = (time.perf_counter() - t0) / sk.n_iter_
    table.rows.append(["scikit-learn KMeans (lloyd)", 1e3 * per_iter, len(X) * n_clusters / per_iter / CORES,
                       len(X) / per_iter / CORES])
    table.notes.append("daskclust figures: median over the iterations after the first; scikit-learn: 5 Lloyd "
                       "iterations from random rows, time per iteration")
    return table

"""Seeding quality: Lloyd's k-means (full search) from each seeding, against scikit-learn.

BIRCH grid, C = 1024 (N = 102,400): quantization error at convergence
relative to scikit-learn's KMeans (greedy k-means++, n_init=1, Lloyd), and
the seconds the seeding took. This is the measurement the default
``init="k-means||"`` was chosen from.
"""

from __future__ import annotations

import time

import numpy as np

from .. import KMeans
from .data import birch_array
from .measure import warm_up
from .runner import Table

COMMAND = "daskclust bench --suite seeding"
CLUSTER = {"n_workers": 2, "threads_per_worker": 1}
SEEDINGS = [("k-means||", {}), ("afkmc2", {"chain_length": 5}), ("afkmc2", {"chain_length": 100}),
            ("random", {})]


def run(client, n_clusters: int = 1024, seeds=(0, 1, 2)) -> Table:
    from sklearn.cluster import KMeans as SKKMeans

    X, _ = birch_array(n_clusters)
    warm_up(X, client)
    table = Table(
        f"Seeding quality on the BIRCH grid, C = {n_clusters}, N = {len(X):,}: Lloyd to convergence from each seeding",
        ["seeding", "QE / scikit-learn QE (mean of 3)", "seeding s", "iterations", "fit s"],
    )
    ref = []
    for seed in seeds:
        t0 = time.perf_counter()
        sk = SKKMeans(n_clusters, n_init=1, random_state=seed, algorithm="lloyd").fit(X)
        ref.append((sk.inertia_, time.perf_counter() - t0, sk.n_iter_))
    for name, extra in SEEDINGS:
        runs = [KMeans(n_clusters, search="full", init=name, n_init=1, random_state=seed, **extra).fit(X, client=client)
                for seed in seeds]
        ratio = np.mean([m.inertia_ / r[0] for m, r in zip(runs, ref)])
        label = name + (f" (m={extra['chain_length']})" if extra else "")
        table.rows.append([label, ratio, np.mean([m.seeding_time_ for m in runs]),
                           np.mean([m.n_iter_ for m in runs]), np.mean([m.fit_time_ for m in runs])])
    table.rows.append(["scikit-learn k-means++ (reference)", 1.0, float("nan"), np.mean([r[2] for r in ref]),
                       np.mean([r[1] for r in ref])])
    return table

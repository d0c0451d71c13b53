"""A fit on a laptop: numpy data in memory, no cluster given, so the fit starts an embedded Dask
LocalCluster (one worker in this process, a thread per core) and closes it afterwards.

The data are the BIRCH grid (C clusters of 100 points around the nodes of a square grid, unit
variance), so the report can say how many of the true centres the fit found. At the default size
(C = 4096, 409,600 rows) each iteration evaluates hundreds of times fewer distances than Lloyd's
k-means would.

Run: python examples/laptop_fit.py        (DASKCLUST_EXAMPLE_SMALL=1: a small size, for CI)
"""

import os
import time

import numpy as np
from sklearn.metrics import pairwise_distances_argmin_min

import daskclust
from daskclust.bench.data import birch_array

SMALL = os.environ.get("DASKCLUST_EXAMPLE_SMALL") == "1"
C = 64 if SMALL else 4096


def main() -> None:
    X, true_centres = birch_array(C)  # rows in random order, true centres
    print(f"data: {X.shape[0]:,} x {X.shape[1]} numpy array ({X.nbytes / 1e6:.1f} MB), {C} true clusters")
    t0 = time.perf_counter()
    model = daskclust.KMeans(n_clusters=C, random_state=0, verbose=1).fit(X)  # no client: embedded LocalCluster
    seconds = time.perf_counter() - t0
    _, distance = pairwise_distances_argmin_min(true_centres, model.cluster_centers_)
    sizes = np.bincount(model.labels_, minlength=C)
    print()
    print("report")
    print(f"  iterations          {model.n_iter_} (converged: {model.converged_})")
    print(f"  free energy / point {model.history_[-1]['free_energy']:.6f}")
    print(f"  inertia             {model.inertia_:.6g}, sigma^2 {model.sigma2_:.4f} (true 1.0)")
    print(f"  true centres found  {np.mean(distance <= 1.0):.1%} within distance 1 (median {np.median(distance):.3f})")
    print(f"  distances / iter.   {model.history_[-1]['n_distances']:,} (Lloyd's k-means: N C = {X.shape[0] * C:,})")
    print(f"  cluster sizes       {sizes.min()}-{sizes.max()} rows (true: 100 each); labels_ is a "
          f"{type(model.labels_).__module__.split('.')[0]} array")
    print(f"  time                seeding {model.seeding_time_:.2f} s, fit {model.fit_time_:.2f} s, "
          f"with the cluster's start and stop {seconds:.2f} s")


if __name__ == "__main__":
    main()

"""The kernels a wheel carries: default fits compiled into numba's cache in the build tree.

``pip install .`` builds a wheel on the machine it installs on. ``setup.py`` runs :func:`main` in
the build tree, and the wheel carries the numba caches it leaves there (``__pycache__`` beside
each source, keyed by the source's content, the numba and Python versions and the CPU), so the
first fits after an install load their kernels instead of compiling them. What compiles: a
default ``KMeans`` fit of float64 data (:func:`daskclust.fit.warmup.prepare_kernels`, its units on
two cores: what ``daskclust demo`` runs), then default ``KMeans`` and ``GaussianMixture`` (full
covariances) fits of float64 data with clusters in 2-D and without structure in 16-D (where the
seedings search by matrix products), with ``predict`` and ``score``. Other paths (float32 data,
other covariance types, searches and seedings) compile on their first use, once per machine.
"""

from __future__ import annotations

import logging
import subprocess
import sys
import time
import warnings

import numpy as np

from ..fit.warmup import TINY_CLUSTERS, TINY_ROWS, prepare_kernels, private_client, tiny_data, usable_cores

STRUCTURELESS_FEATURES = 16


def structureless_data(dtype: str = "float64") -> np.ndarray:
    """(TINY_ROWS, 16) independent standard normal rows: no structure for a ball tree to prune, so the
    seedings take their matrix-product paths (:func:`~daskclust.seeding.passes.pruning_test`)."""
    rows = np.random.default_rng(0).standard_normal((TINY_ROWS, STRUCTURELESS_FEATURES))
    return rows.astype(dtype)


def compile_default_fits(dtype: str = "float64") -> None:
    """Default ``KMeans`` and ``GaussianMixture`` fits of the warm-up's tiny data set (25 blobs in 2-D)
    and of :func:`structureless_data`, on a private in-process cluster, each followed by ``predict``
    and ``score``: the kernels they run, compiled."""
    from .gaussian_mixture import GaussianMixture
    from .kmeans import KMeans

    with private_client(usable_cores()) as client, warnings.catch_warnings():
        warnings.simplefilter("ignore")  # e.g. a ConvergenceWarning of a tiny fit
        for X in (tiny_data(dtype), structureless_data(dtype)):
            for model in (KMeans(TINY_CLUSTERS, random_state=0), GaussianMixture(TINY_CLUSTERS, random_state=0)):
                model.fit(X, client=client)
                model.predict(X)
                model.score(X)  # a mixture's runs score_samples


def main() -> int:
    """Compile the default fits' kernels into numba's cache and print what was done. Returns 0 when
    a new process then finds the default fit's kernels in the cache
    (:func:`~daskclust.fit.warmup.kernels_cached`), 1 otherwise (e.g. a cache it could not write)."""
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)  # prepare_kernels logs a failure
    t0 = time.perf_counter()
    prepare_kernels(None, "float64")
    compile_default_fits("float64")
    check = "from daskclust.fit.warmup import kernels_cached; raise SystemExit(0 if kernels_cached('float64') else 1)"
    cached = subprocess.run([sys.executable, "-c", check], stdin=subprocess.DEVNULL).returncode == 0
    print(f"compiled the kernels of default KMeans and GaussianMixture fits of float64 data into numba's cache "
          f"in {time.perf_counter() - t0:.1f} s")
    return 0 if cached else 1

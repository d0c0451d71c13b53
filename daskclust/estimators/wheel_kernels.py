"""The kernels a wheel carries: default fits compiled into numba's cache in the build tree.

``pip install .`` builds a wheel on the machine it installs on. ``setup.py`` runs :func:`main` in
the build tree, and the wheel carries the numba caches it leaves there (``__pycache__`` beside
each source, keyed by the source's content, the numba and Python versions and the CPU), so the
first fits after an install load their kernels instead of compiling them. What compiles: a
default ``KMeans`` fit of float64 data (:func:`daskclust.fit.warmup.prepare_kernels`, its units on
two cores: what ``daskclust demo`` runs), then a default ``GaussianMixture`` fit (full covariances)
of float64 data with ``predict`` and ``score_samples``. Other paths (float32 data, other covariance
types, searches and seedings, many dimensions) compile on their first use, once per machine.
"""

from __future__ import annotations

import logging
import subprocess
import sys
import time
import warnings

from ..fit.warmup import TINY_CLUSTERS, prepare_kernels, tiny_data, usable_cores


def compile_default_mixture(dtype: str = "float64") -> None:
    """A default ``GaussianMixture`` of the warm-up's tiny data set (25 blobs), fitted on a private
    in-process cluster, then its ``predict`` and ``score_samples``: the kernels they run, compiled."""
    from distributed import Client, LocalCluster

    from ..engine.cluster import profiler_off
    from .gaussian_mixture import GaussianMixture

    X = tiny_data(dtype)
    with profiler_off(), LocalCluster(n_workers=1, threads_per_worker=usable_cores(), processes=False,
                                      dashboard_address=None) as cluster, \
            Client(cluster, set_as_default=False) as client, warnings.catch_warnings():
        warnings.simplefilter("ignore")  # e.g. a ConvergenceWarning of the tiny fit
        model = GaussianMixture(TINY_CLUSTERS, random_state=0).fit(X, client=client)
    model.predict(X)
    model.score_samples(X)


def main() -> int:
    """Compile the default fits' kernels into numba's cache and print what was done. Returns 0 when
    a new process then finds the default fit's kernels in the cache
    (:func:`~daskclust.fit.warmup.kernels_cached`), 1 otherwise (e.g. a cache it could not write)."""
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)  # prepare_kernels logs a failure
    t0 = time.perf_counter()
    prepare_kernels(None, "float64")
    compile_default_mixture("float64")
    check = "from daskclust.fit.warmup import kernels_cached; raise SystemExit(0 if kernels_cached('float64') else 1)"
    cached = subprocess.run([sys.executable, "-c", check], stdin=subprocess.DEVNULL).returncode == 0
    print(f"compiled the kernels of default KMeans and GaussianMixture fits of float64 data into numba's cache "
          f"in {time.perf_counter() - t0:.1f} s")
    return 0 if cached else 1

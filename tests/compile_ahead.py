"""Compile the kernels the test suite runs into numba's cache once, before the test processes start.

On an empty numba cache (a fresh clone in CI) every test process compiled the kernels it runs:
both pytest-xdist workers, their Dask worker processes, and the command lines, examples and
scikit-learn's suite that the tests start, mostly the same kernels at the same time. On the
2-core CI machine that made the tests take 1451 s instead of the 810 s they take on a warm cache.

``python tests/compile_ahead.py CLAIMS`` runs :data:`TASKS`, tiny fits of every estimator, family,
search, seeding and transform on float64 and float32 data in an in-process cluster (so that this
process compiles). Two such processes share the list: each takes the next task that neither has
claimed (an empty file in the directory ``CLAIMS``, created exclusively). ``conftest.py`` starts
them when the kernels of a default fit are not cached; on a warm cache it starts nothing.
A task that fails is printed and the others run: the tests then compile what it missed, and the
test of that estimator reports its failure.
"""

from __future__ import annotations

import sys
import time
import traceback
import warnings

import numpy as np

CLUSTERS = 25
"""More clusters than a default neighbourhood (G = 10), so the searches record and merge pairs."""


def kmeans(search="estimated", init="k-means||", **options):
    def task(X, client):
        from daskclust import KMeans

        model = KMeans(CLUSTERS, search=search, init=init, n_init=1, max_iter=4, random_state=0, chunk_rows=128,
                       **options).fit(X)
        model.predict(X)
        model.score(X)
        model.transform(X)
    return task


def gaussian_mixture(covariance_type, search="estimated", cls="GaussianMixture", **options):
    def task(X, client):
        import daskclust

        model = getattr(daskclust, cls)(CLUSTERS, covariance_type=covariance_type, search=search, max_iter=3,
                                        random_state=0, chunk_rows=128, **options).fit(X)
        model.score_samples(X)
        model.predict_proba(X)
    return task


def partial_fit(cls, **options):
    def task(X, client):
        import daskclust

        model = getattr(daskclust, cls)(CLUSTERS, random_state=0, **options)
        for part in np.array_split(X, 3):
            model.partial_fit(part)
        model.predict(X)
    return task


def greedy(X, client):
    from daskclust import GreedyGaussianMixture

    GreedyGaussianMixture(4, covariance_type="diag", max_iter=3, partial_iter=2, random_state=0,
                          chunk_rows=128).fit(X)


def sketched(covariance_type):
    def task(X, client):
        from daskclust import SketchedGaussianMixture

        wide = np.repeat(X, 20, axis=1)[:, :40] + np.random.default_rng(1).standard_normal((len(X), 40))
        model = SketchedGaussianMixture(CLUSTERS, covariance_type=covariance_type, n_kept=0.2, max_iter=3,
                                        random_state=0, chunk_rows=128).fit(wide.astype(X.dtype), client=client)
        model.predict(wide.astype(X.dtype))
    return task


def wide(task):
    """The same task on 40 features (the kernels' many-feature paths)."""
    def run(X, client):
        rng = np.random.default_rng(2)
        task(np.hstack([X] * 20).astype(X.dtype) + rng.standard_normal((len(X), 40)).astype(X.dtype), client)
    return run


def stored(X, client):
    """Fits, predictions into zarr and a saved model, from a zarr store (placed, and streamed)."""
    import tempfile

    import zarr

    import daskclust

    with tempfile.TemporaryDirectory() as folder:
        path = f"{folder}/X.zarr"
        zarr.create_array(path, shape=X.shape, chunks=(128, X.shape[1]), dtype=X.dtype)[:] = X
        model = daskclust.KMeans(CLUSTERS, max_iter=3, random_state=0).fit(path, client=client)
        model.predict(path, output=f"{folder}/labels.zarr")
        model.save(f"{folder}/model.zarr")
        daskclust.load(f"{folder}/model.zarr").predict(X)
        daskclust.KMeans(CLUSTERS, max_iter=3, random_state=0, memory_budget=X.nbytes // 4).fit(path, client=client)
        daskclust.GaussianMixture(CLUSTERS, max_iter=3, random_state=0).fit(path, client=client).score(path)


def sketch_store(X, client):
    """A sketch written to a zarr store from one, and a coreset fit on it (examples/coreset_sketch.py)."""
    import tempfile

    import zarr

    from daskclust import SketchedGaussianMixture
    from daskclust.transforms import Sketch

    wide = np.repeat(X, 32, axis=1) + np.random.default_rng(3).standard_normal((len(X), 64)).astype(X.dtype)
    with tempfile.TemporaryDirectory() as folder:
        zarr.create_array(f"{folder}/X.zarr", shape=wide.shape, chunks=(128, 64), dtype=X.dtype)[:] = wide
        sketch = Sketch(n_kept=8, random_state=0).fit_transform(f"{folder}/X.zarr", client=client,
                                                                  output=f"{folder}/sketch.zarr")
        SketchedGaussianMixture(8, n_kept=8, n_truncated=3, coreset=400, refine_iter=1, max_iter=3,
                                random_state=0).fit(sketch, client=client).predict(sketch)


def warmup_units(X, client):
    """daskclust's own compile-ahead units (daskclust.fit.warmup), on their tiny engine."""
    from daskclust.fit import warmup

    for unit in warmup.UNITS:
        warmup.run_unit(unit, X.dtype.name, make_engine=lambda: warmup._tiny_engine(client, X.dtype.name))


FAMILIES = ("isotropic", "spherical", "diag", "full", "tied")
SEARCHES = ("estimated", "sampled", "exhaustive", "full")
TASKS = {
    **{f"KMeans search={s}": kmeans(s) for s in SEARCHES},
    **{f"KMeans init={i}": kmeans(init=i) for i in ("k-means++", "afkmc2", "random")},
    "KMeans coreset": kmeans(coreset=300, refine_iter=1),
    **{f"GaussianMixture {f} search={s}": gaussian_mixture(f, s) for f in FAMILIES for s in SEARCHES},
    **{f"CellGaussianMixture {f} search={s}": gaussian_mixture(f, s, cls="CellGaussianMixture")
       for f in ("diag", "full") for s in ("estimated", "sampled", "full")},
    "GreedyGaussianMixture": greedy,
    **{f"SketchedGaussianMixture {f}": sketched(f) for f in ("diag", "spherical")},
    "KMeans partial_fit": partial_fit("KMeans"),
    **{f"GaussianMixture {f} partial_fit": partial_fit("GaussianMixture", covariance_type=f) for f in FAMILIES},
    "KMeans 40 features": wide(kmeans()),
    "zarr stores": stored,
    "sketch store and coreset": sketch_store,
    "daskclust's warm-up units": warmup_units,
    **{f"GaussianMixture {f} 40 features": wide(gaussian_mixture(f)) for f in ("diag", "full")},
}
"""Each task, run on float64 and on float32 data."""


def main(claims: str) -> int:
    from distributed import Client, LocalCluster

    from daskclust.fit.warmup import claim

    from conftest import blobs  # this script's folder, tests/, is first on sys.path

    warnings.simplefilter("ignore")
    failed = 0
    with LocalCluster(n_workers=1, threads_per_worker=2, processes=False, dashboard_address=None) as cluster, \
            Client(cluster) as client:  # partial_fit finds it
        for name, task in TASKS.items():
            for dtype in ("float64", "float32"):
                if not claim(claims, f"{name} {dtype}"):
                    continue
                t0 = time.perf_counter()
                try:
                    task(blobs(1000, 2, CLUSTERS)[0].astype(dtype), client)
                except Exception:  # noqa: BLE001 - reported; the tests compile what this missed
                    failed += 1
                    print(f"compile ahead: {name} {dtype} failed:\n{traceback.format_exc()}", file=sys.stderr)
                print(f"{name} {dtype}: {time.perf_counter() - t0:.1f} s", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))

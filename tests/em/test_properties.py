"""Properties that must hold whatever the data: monotone free energy, independence of the cluster layout."""

from __future__ import annotations

import numpy as np
import pytest
import zarr
from sklearn.base import clone

import daskclust

from conftest import assert_non_decreasing, assert_same_model, birch, blobs

MODELS = {
    "kmeans": lambda C, **kw: daskclust.KMeans(C, **kw),
    "gmm-exact": lambda C, **kw: daskclust.GaussianMixture(C, covariance_type="isotropic", init_params="seeding", **kw),
    "gmm-truncated": lambda C, **kw: daskclust.GaussianMixture(C, covariance_type="isotropic", n_truncated=3,
                                                               init_params="seeding", **kw),
}


@pytest.mark.parametrize("model", sorted(MODELS))
@pytest.mark.parametrize("data", ["birch", "blobs"])
@pytest.mark.parametrize("weighted", [False, True])
def test_free_energy_never_decreases(client, model, data, weighted):
    X, _ = birch(36, points=50, seed=7) if data == "birch" else blobs(1500, 8, 12, seed=7)
    C = 36 if data == "birch" else 12
    w = np.random.default_rng(1).uniform(0.2, 3.0, len(X)) if weighted else None
    fitted = MODELS[model](C, init="random", n_init=1, random_state=3, tol=0, max_iter=25).fit(X, sample_weight=w,
                                                                                      client=client)
    assert len(fitted.history_) > 3
    assert_non_decreasing([row["free_energy"] for row in fitted.history_])


def fit_on(client, X, **kw):
    return daskclust.KMeans(30, random_state=11, tol=0, max_iter=15, **kw).fit(X, client=client)


@pytest.mark.parametrize("init", ["k-means||", "afkmc2", "random", "k-means++"])
def test_same_model_on_one_two_workers_and_threads(client, client_one_worker, client_threads, init):
    X, _ = birch(36, points=60, seed=8)
    models = [daskclust.GaussianMixture(30, covariance_type="isotropic", n_truncated=2, init=init, random_state=5, tol=0, max_iter=10,
                                        chunk_rows=150).fit(X, client=c)
              for c in (client, client_one_worker, client_threads)]
    assert_same_model(models[0], models[1])
    assert_same_model(models[0], models[2])


def test_streaming_equals_persisted(client, tmp_path):
    X, _ = birch(36, points=60, seed=9)
    store = str(tmp_path / "X.zarr")
    z = zarr.create_array(store, shape=X.shape, chunks=(200, 2), dtype=X.dtype)
    z[:] = X
    persisted = fit_on(client, store)
    streamed = fit_on(client, store, memory_budget=1)  # 1 byte: nothing fits, every pass reads zarr
    assert_same_model(persisted, streamed)


def test_weights_equal_repeated_rows(client):
    X, _ = birch(16, points=40, seed=10)
    counts = np.random.default_rng(2).integers(1, 4, len(X))
    init = X[:16]
    model = daskclust.KMeans(16, search="full", init=init, tol=0)
    weighted = clone(model).fit(X, sample_weight=counts.astype(float), client=client)
    repeated = clone(model).fit(np.repeat(X, counts, axis=0), client=client)
    np.testing.assert_allclose(weighted.cluster_centers_, repeated.cluster_centers_, rtol=1e-10)
    np.testing.assert_allclose(weighted.inertia_, repeated.inertia_, rtol=1e-10)


@pytest.mark.parametrize("init", ["k-means||", "afkmc2", "random", "k-means++"])
def test_zero_weight_rows_are_never_seeds(client, init):
    X, _ = birch(9, points=30, seed=12)
    far = np.full((40, 2), 1e4)
    w = np.concatenate([np.ones(len(X)), np.zeros(40)])
    model = daskclust.KMeans(9, init=init, random_state=1, max_iter=0).fit(np.vstack([X, far]), sample_weight=w,
                                                                           client=client)
    assert (np.abs(model.cluster_centers_) < 1e3).all()


@pytest.mark.parametrize("dense, rate", [(False, 1.0), (True, 0.5)])
def test_kmeans_parallel_draws_inside_the_update_pass_equal_a_separate_pass(client, dense, rate):
    """The rows a NearestUpdateOp draws for the next k-means|| round (pruned while the
    tree merges) are exactly those of a separate BernoulliOp pass over the same state."""
    from daskclust.data import as_chunked_data
    from daskclust.engine.engine import Engine
    from daskclust.seeding.passes import BernoulliOp, DrawOp, FirstPassOp, NearestIndex, NearestUpdateOp, drawn_rows

    X, _ = blobs(6000, 5, 30, seed=31)
    w = np.random.default_rng(3).uniform(0.2, 2.0, len(X))
    data = as_chunked_data(X, sample_weight=w, chunk_rows=500)
    ell = 60.0
    with Engine(data, client) as engine:
        engine.map_reduce(FirstPassOp(data.n_chunks, DrawOp(4, 0, 1, 5), rate))  # keeps the rounds' sample
        first = NearestIndex(X[:3], dense=dense)
        out = engine.map_reduce(NearestUpdateOp(first, 3, reset=True, rate=rate, seed=4, oversample=ell, step=1,
                                                n_features=5))
        phi = out["phi"][0]
        fused = drawn_rows(out["draw"], ell / phi)
        separate = engine.map_reduce(BernoulliOp(4, 1, ell / phi, 5, rate))
    assert 20 < len(separate["row"]) < 150
    np.testing.assert_array_equal(fused["row"], separate["row"])
    np.testing.assert_array_equal(fused["X"], separate["X"])


def test_kmeans_parallel_reads_data_beyond_its_budget_twice(client, tmp_path, monkeypatch):
    """Beyond the rounds' budget the first pass keeps a uniform sample for the k-means|| rounds, so a
    streamed store is read twice in all (that pass and the assignment), whatever the intrinsic
    dimension; within it the rounds read every row. Both seedings cover the BIRCH grid alike."""
    from daskclust.data import as_chunked_data
    from daskclust.engine.engine import Engine
    from daskclust.seeding import methods, seed

    X, true = birch(36, points=100, seed=13)
    zarr.create_array(tmp_path / "x.zarr", data=X, chunks=(400, 2))
    data = as_chunked_data(str(tmp_path / "x.zarr"), chunk_rows=400)
    reads = {}
    for budget in (methods.DENSE_BUDGET, 1):
        monkeypatch.setattr(methods, "DENSE_BUDGET", budget)
        with Engine(data, client, persist=False) as engine:
            result = seed(engine, "k-means||", 36, seed=3)
            reads["sample" if budget == 1 else "every row"] = engine.bytes_read() / X.nbytes
        nearest_seed = np.sqrt(((true[:, None, :] - result.centres[None]) ** 2).sum(-1)).min(1)
        assert (nearest_seed < 2.0).sum() >= 34 and result.sigma2 < 1.5  # the grid's clusters have unit variance
    assert methods.round_sample_rate("k-means||", 36, 2, len(X), 2.0, 5) == 32 * 36 / len(X)
    assert reads == {"every row": 8, "sample": 2}  # first pass, 1 + 5 rounds, the seeds' labels


@pytest.mark.parametrize("chunk_rows, k", [(250, 100), (250, 700), (97, 1500), (2000, 2500)])
def test_drawn_rows_are_the_smallest_keys_over_all_chunks(client, chunk_rows, k):
    """A draw (DrawOp) keeps exactly the k rows of smallest exponential key over the whole data,
    whatever the chunking and the merge tree, and never a row of zero weight; an independent
    selection over every row's key is the reference."""
    from daskclust.data import as_chunked_data
    from daskclust.engine.engine import Engine
    from daskclust.kernels.rng import stream_key
    from daskclust.kernels.seeding import exponential_keys
    from daskclust.names import STREAM_DRAW
    from daskclust.seeding.passes import DrawOp

    X, _ = blobs(2000, 3, 5, seed=17)
    w = np.random.default_rng(5).uniform(0.1, 2.0, len(X))
    w[::7] = 0.0
    data = as_chunked_data(X, sample_weight=w, chunk_rows=chunk_rows)
    with Engine(data, client) as engine:
        drawn = engine.map_reduce(DrawOp(9, 2, k, 3))
    starts = range(0, len(X), chunk_rows)
    keys = np.concatenate([exponential_keys(stream_key(9, STREAM_DRAW, 2, i), w[s:s + chunk_rows])
                           for i, s in enumerate(starts)])
    finite = np.flatnonzero(np.isfinite(keys))
    expected = np.sort(finite[np.argsort(keys[finite], kind="stable")[:k]])
    np.testing.assert_array_equal(drawn["row"], expected)
    np.testing.assert_array_equal(drawn["X"], X[expected])
    np.testing.assert_array_equal(drawn["key"], keys[expected])
    assert (w[drawn["row"]] > 0).all()

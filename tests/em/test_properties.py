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


@pytest.mark.parametrize("dense", [False, True])
def test_kmeans_parallel_rounds_draw_what_an_exact_reference_draws(dense, monkeypatch):
    """The driver's k-means|| rounds (ball trees or matrix products, threads over blocks of rows, rows
    sorted in space) keep exactly the rows an independent reference keeps: row i of round r when
    uniform(key_r, row id) < l w_i d_i^2 / phi with d_i the exact distance to every earlier candidate;
    and each candidate's mass is the weight of the rows nearest to it."""
    from daskclust import threads
    from daskclust.kernels.rng import stream_key, uniform
    from daskclust.names import STREAM_BERNOULLI
    from daskclust.seeding import rounds

    X, _ = blobs(8000, 5, 20, seed=31)
    rng = np.random.default_rng(3)
    keep = np.sort(rng.choice(len(X), 5000, replace=False))  # a sample: row ids with gaps
    sample = {"row": keep + 1000, "X": X[keep], "w": rng.uniform(0.2, 2.0, len(keep))}
    ell, n_rounds, seed = 40.0, 4, 5
    monkeypatch.setattr(threads, "ROWS_PER_TASK", 512)  # several blocks of rows on the threads
    got = rounds.oversample(sample, X[7], 20, seed=seed, oversampling_factor=2.0, init_rounds=n_rounds, dense=dense)

    cands = X[7][None, :]
    for r in range(1, n_rounds + 1):
        d2 = ((sample["X"][:, None, :] - cands[None]) ** 2).sum(-1).min(1)
        scale = ell / float(sample["w"] @ d2)
        key = stream_key(seed, STREAM_BERNOULLI, r)
        u = np.array([uniform(key, int(row)) for row in sample["row"]])
        cands = np.concatenate([cands, sample["X"][u < scale * sample["w"] * d2]])
    assert 100 < len(cands) < 250
    np.testing.assert_allclose(got.points, cands, rtol=0, atol=1e-12)
    nearest = ((sample["X"][:, None, :] - cands[None]) ** 2).sum(-1).argmin(1)
    np.testing.assert_allclose(got.mass, np.bincount(nearest, weights=sample["w"], minlength=len(cands)), rtol=1e-9)


def test_a_round_searches_only_the_rows_its_points_can_come_nearer_to(monkeypatch):
    """lower_nearest gives every row the squared distance and label a search of every row gives, bit for
    bit, on rows with duplicates, rows equal to candidates and new points equal to old ones; and it skips
    rows (fewer distances evaluated than the full search), so the test of the bound is exercised."""
    from daskclust import threads
    from daskclust.seeding import rounds
    from daskclust.seeding.passes import NearestIndex, search_in_blocks

    X, _ = blobs(6000, 3, 40, seed=12)
    X = np.vstack([X, X[:300]])  # duplicate rows
    rng = np.random.default_rng(4)
    old = X[rng.choice(len(X), 1000, replace=False)]
    new = np.vstack([X[rng.choice(len(X), 60, replace=False)], old[:10]])  # new points equal to old ones
    monkeypatch.setattr(threads, "ROWS_PER_TASK", 700)
    mind2 = np.full(len(X), np.inf)
    label = np.zeros(len(X), dtype=np.int32)
    with threads.driver_threads() as pool:
        search_in_blocks(NearestIndex(old), X, mind2, label, pool)
        index = NearestIndex(new, len(old))
        full_d2, full_label = mind2.copy(), label.copy()
        n_full = search_in_blocks(index, X, full_d2, full_label, pool)
        n_pruned = rounds.lower_nearest(index, old, X, mind2, label, pool)
    np.testing.assert_array_equal(mind2, full_d2)
    np.testing.assert_array_equal(label, full_label)
    assert (label >= len(old)).any() and (label < len(old)).any()
    assert n_pruned < 0.7 * n_full


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

"""Data placed once for many fits (``daskclust.persist``): every fit, predict and score on the handle is the
one on its input with the same cluster and chunking; the data are placed and validated once; what a
handle cannot serve is refused before any work."""

from __future__ import annotations

import os
import pickle
import signal

import dask.array as da
import numpy as np
import pytest
import xarray as xr
import zarr
from distributed import Client, LocalCluster
from sklearn.base import clone
from sklearn.model_selection import ParameterGrid

import daskclust
from daskclust.engine.engine import Engine
from daskclust.errors import CheckpointError, InvalidDataError, InvalidParameterError, PlacedDataError

from conftest import Interrupt, assert_same_model, birch, interrupt_at

MIXTURES = ("spherical", "diag", "full", "tied", "isotropic")


@pytest.fixture(scope="module")
def data():
    return birch(16, points=100, seed=7)[0]  # 1,600 rows in 7 chunks


@pytest.fixture(scope="module")
def placed(data, client):
    with daskclust.persist(data, client=client) as handle:
        yield handle


@pytest.fixture()
def starts(monkeypatch):
    """How many engines start (each places the data)."""
    started = []
    original = Engine.start
    monkeypatch.setattr(Engine, "start", lambda self: (started.append(self.data.n_samples), original(self))[1])
    return started


def untimed(history: list[dict]) -> list[dict]:
    return [{k: v for k, v in row.items() if k != "seconds"} for row in history]


def assert_same_fit(a, b):
    """The same model, history, labels and record of the data, bit for bit."""
    np.testing.assert_array_equal(a.centres_, b.centres_)
    assert a.sigma2_ == b.sigma2_ and a.n_iter_ == b.n_iter_ and a.converged_ == b.converged_
    assert untimed(a.history_) == untimed(b.history_)
    assert a.training_data_ == b.training_data_
    np.testing.assert_array_equal(np.asarray(a.labels_), np.asarray(b.labels_))


def estimator(kind: str, C: int = 16, **params):
    if kind == "kmeans":
        return daskclust.KMeans(C, random_state=3, **params)
    return daskclust.GaussianMixture(C, covariance_type=kind, random_state=3, max_iter=20, **params)


@pytest.mark.parametrize("kind", ["kmeans", *MIXTURES])
def test_a_fit_on_placed_data_is_the_fit_on_its_input(client, data, placed, kind):
    on_input = estimator(kind).fit(data, client=client)
    on_placed = estimator(kind).fit(placed)
    assert_same_fit(on_placed, on_input)
    assert on_placed.training_data_["fingerprint"] == placed.fingerprint


def test_a_sweep_places_and_validates_the_data_once(client, data, starts):
    grid = ParameterGrid({"n_clusters": [8, 16, 24], "random_state": [0, 1]})
    with daskclust.persist(data, client=client) as handle:
        assert starts == [len(data)]  # placed (and every chunk validated and hashed) by persist
        swept = [daskclust.KMeans(**p).fit(handle) for p in grid]
        mixtures = [estimator(k, 12).fit(handle) for k in ("spherical", "diag")]
        labels = daskclust.GaussianMixture(12, random_state=2, n_init=2, max_iter=10).fit_predict(handle)
        assert starts == [len(data)]  # nothing placed again
    for params, model in zip(grid, swept):  # two C in a row on the handle: each the fit on the input
        assert_same_fit(model, daskclust.KMeans(**params).fit(data, client=client))
    for kind, model in zip(("spherical", "diag"), mixtures):
        assert_same_fit(model, estimator(kind, 12).fit(data, client=client))
    plain = daskclust.GaussianMixture(12, random_state=2, n_init=2, max_iter=10).fit_predict(data, client=client)
    np.testing.assert_array_equal(labels, plain)


def test_one_worker_or_two_give_the_same_model(client, client_one_worker, data, placed):
    with daskclust.persist(data, client=client_one_worker) as alone:
        one = estimator("diag").fit(alone)
        one_kmeans = estimator("kmeans").fit(alone)
    assert_same_model(one, estimator("diag").fit(placed))
    assert_same_model(one_kmeans, estimator("kmeans").fit(placed))


def write_zarr(path, X, rows):
    z = zarr.create_array(str(path), shape=X.shape, chunks=(rows, X.shape[1]), dtype=X.dtype)
    z[:] = X
    return str(path)


@pytest.mark.parametrize("budget", [None, 8_000])  # 8 kB: streamed from the store every pass
def test_a_zarr_store_placed_or_streamed(client, data, tmp_path, budget):
    store = write_zarr(tmp_path / "X.zarr", data, 200)
    with daskclust.persist(store, client=client, memory_budget=budget) as handle:
        assert handle.persisted == (budget is None)
        first = estimator("kmeans", memory_budget=budget).fit(handle)
        second = estimator("spherical").fit(handle)
        labels = first.predict(handle)
    assert_same_fit(first, estimator("kmeans", memory_budget=budget).fit(store, client=client))
    assert_same_fit(second, estimator("spherical", memory_budget=budget).fit(store, client=client))
    assert isinstance(labels, da.Array)  # lazy in, lazy out
    np.testing.assert_array_equal(labels.compute(), first.predict(data))
    if budget is None:
        assert first.bytes_read_ == second.bytes_read_ == 0  # read once, by persist
    else:
        assert first.bytes_read_ >= data.nbytes  # every pass reads the store


def test_an_array_named_in_a_zarr_group(client, data, tmp_path):
    group = zarr.open_group(str(tmp_path / "g.zarr"), mode="w")
    group.create_array("rows", shape=data.shape, chunks=(400, 2), dtype=data.dtype)[:] = data
    group.create_array("other", shape=data.shape, chunks=(400, 2), dtype=data.dtype)[:] = data[::-1]
    with daskclust.persist(str(tmp_path / "g.zarr"), client=client, array="rows") as handle:
        on_placed = estimator("kmeans").fit(handle)
        written = on_placed.predict(handle, output=tmp_path / "labels.zarr")
    on_input = estimator("kmeans").fit(group["rows"], client=client)
    assert_same_fit(on_placed, on_input)
    assert on_placed.training_data_["source"]["array"] == "rows"
    np.testing.assert_array_equal(written[:], on_input.predict(data))


def test_weights_travel_with_the_placed_data(client, data):
    weights = np.random.default_rng(0).uniform(0.5, 2.0, len(data))
    with daskclust.persist(data, weights, client=client) as handle:
        assert handle.fingerprint["weighted"]
        model = estimator("diag").fit(handle)
        kmeans = estimator("kmeans").fit(handle)
        assert model.score(handle) == pytest.approx(model.score(data, sample_weight=weights), rel=1e-12)
        assert kmeans.score(handle) == pytest.approx(kmeans.score(data, sample_weight=weights), rel=1e-12)
        with pytest.raises(InvalidParameterError, match="carry their weights: pass sample_weight to daskclust.persist"):
            estimator("kmeans").fit(handle, sample_weight=weights)
        with pytest.raises(InvalidParameterError, match="carry their weights: score them without"):
            kmeans.score(handle, sample_weight=weights)
    assert_same_fit(model, estimator("diag").fit(data, sample_weight=weights, client=client))
    assert_same_fit(kmeans, estimator("kmeans").fit(data, sample_weight=weights, client=client))


def test_what_a_handle_cannot_serve_is_refused_before_any_work(client, client_one_worker, data, placed, starts):
    with pytest.raises(InvalidParameterError, match="placed on the cluster at .*the fit's client is the cluster at"):
        estimator("kmeans").fit(placed, client=client_one_worker)
    with pytest.raises(InvalidParameterError, match="the fit's scheduler_address"):
        estimator("kmeans", scheduler_address="tcp://127.0.0.1:1").fit(placed)
    with pytest.raises(InvalidParameterError, match="chunk_rows=100 asks for another chunking"):
        estimator("kmeans", chunk_rows=100).fit(placed)
    with pytest.raises(InvalidParameterError, match="placed with memory_budget=None; the fit asks memory_budget=1000"):
        estimator("kmeans", memory_budget=1000).fit(placed)
    with pytest.raises(InvalidParameterError, match="state='zarr'"):
        estimator("kmeans", state="zarr").fit(placed)
    with pytest.raises(InvalidDataError, match="n_samples=1600 should be >= n_clusters=2000"):
        daskclust.KMeans(2000).fit(placed)
    with pytest.raises(InvalidDataError, match="PlacedData does not bring its rows to this process"):
        daskclust.KMeans(4).partial_fit(placed)
    assert starts == []
    same = estimator("kmeans", chunk_rows=256).fit(placed, client=client)  # its own chunking and cluster: fine
    assert_same_fit(same, estimator("kmeans").fit(data, client=client))


def test_a_closed_handle_is_refused(client, data):
    with daskclust.persist(data, client=client) as handle:
        model = estimator("kmeans").fit(handle)
    assert handle.closed and "closed" in repr(handle)
    handle.close()  # twice: nothing
    for call in (lambda: estimator("kmeans").fit(handle), lambda: model.predict(handle), lambda: model.score(handle),
                 lambda: handle.fingerprint):
        with pytest.raises(PlacedDataError, match="the placed data were closed"):
            call()
    np.testing.assert_array_equal(model.labels_, model.predict(data))


def test_a_fit_interrupted_on_a_handle_leaves_it_as_new(client, data, placed):
    """One call at a time (a fit inside a fit's callback is refused); an interrupted fit leaves the
    engine to be reset by the next one."""
    def nested(row):
        daskclust.KMeans(4).fit(placed)

    with pytest.raises(PlacedDataError, match="in use by another call"):
        estimator("kmeans", callback=nested).fit(placed)
    with pytest.raises(Interrupt):
        estimator("diag", callback=interrupt_at(1)).fit(placed)
    assert_same_fit(estimator("diag").fit(placed), estimator("diag").fit(data, client=client))


def test_predict_on_placed_data_follows_their_input(client, data, tmp_path):
    cube = xr.DataArray(data, dims=("sample", "band"), coords={"sample": np.arange(len(data)) * 10})
    lazy = da.from_array(data, chunks=400)
    model = estimator("diag").fit(data, client=client)
    kmeans = estimator("kmeans").fit(data, client=client)
    expected = model.predict(data)
    with daskclust.persist(cube, client=client) as handle:
        labels = model.predict(handle)
        assert isinstance(labels, xr.DataArray) and labels.name == "labels"
        np.testing.assert_array_equal(labels["sample"], cube["sample"])
        np.testing.assert_array_equal(labels.values, expected)
    with daskclust.persist(lazy, client=client) as handle:
        assert isinstance(model.predict(handle), da.Array)
        np.testing.assert_allclose(model.score_samples(handle).compute(), model.score_samples(data), rtol=1e-12)
        np.testing.assert_allclose(kmeans.transform(handle).compute(), kmeans.transform(data), rtol=1e-12)
        written = model.predict(handle, output=tmp_path / "labels.zarr")  # written by the handle's workers
        np.testing.assert_array_equal(written[:], expected)
    with daskclust.persist(data, client=client) as handle:
        assert isinstance(model.predict(handle), np.ndarray)
        assert model.bic(handle) == model.bic(data)
        np.testing.assert_array_equal(model.predict_proba(handle), model.predict_proba(data))
        np.testing.assert_array_equal(kmeans.fit_transform(handle), kmeans.fit(data, client=client).transform(data))


def test_a_handle_is_not_pickled_but_a_model_fitted_on_it_is(client, data, placed):
    model = estimator("spherical").fit(placed)
    with pytest.raises(TypeError, match="cannot be pickled"):
        pickle.dumps(placed)
    again = pickle.loads(pickle.dumps(model))
    np.testing.assert_array_equal(again.predict(data), model.predict(placed))
    assert_same_fit(clone(model).fit(placed), model)


def test_coreset_sketch_and_cell_fits_on_placed_data(client, data, placed):
    fits = [lambda: daskclust.KMeans(16, random_state=2, coreset=400, refine_iter=2),
            lambda: daskclust.SketchedGaussianMixture(8, n_kept=1, random_state=1, max_iter=10),
            lambda: daskclust.CellGaussianMixture(8, random_state=1, max_iter=10)]
    for make in fits:
        on_placed, on_input = make().fit(placed), make().fit(data, client=client)
        np.testing.assert_array_equal(on_placed.means_ if hasattr(on_placed, "means_") else on_placed.centres_,
                                      on_input.means_ if hasattr(on_input, "means_") else on_input.centres_)
        assert untimed(on_placed.history_) == untimed(on_input.history_)


def test_a_sketch_store_written_from_placed_data(client, data, placed, tmp_path):
    on_placed = daskclust.SketchedGaussianMixture(8, n_kept=1, random_state=1, max_iter=10).fit(
        placed, sketch_output=tmp_path / "a.zarr")
    on_input = daskclust.SketchedGaussianMixture(8, n_kept=1, random_state=1, max_iter=10).fit(
        data, client=client, sketch_output=tmp_path / "b.zarr")
    np.testing.assert_array_equal(on_placed.means_, on_input.means_)
    np.testing.assert_array_equal(zarr.open_group(str(tmp_path / "a.zarr"))["values"][:],
                                  zarr.open_group(str(tmp_path / "b.zarr"))["values"][:])


def test_a_tree_store_of_placed_data(client, data, placed, tmp_path):
    """Stores derived from the data record the handle's fingerprint: trees built on a handle are read by a
    fit on its input, and refused for a handle of other data."""
    trees = str(tmp_path / "trees")
    on_placed = daskclust.CellGaussianMixture(8, random_state=1, max_iter=10, tree_store=trees).fit(placed)
    on_input = daskclust.CellGaussianMixture(8, random_state=1, max_iter=10, tree_store=trees).fit(data, client=client)
    np.testing.assert_array_equal(on_placed.means_, on_input.means_)
    other = data.copy()
    other[99, 1] += 0.5
    with daskclust.persist(other, client=client) as changed:
        with pytest.raises(InvalidParameterError, match="other data or settings: content"):
            daskclust.CellGaussianMixture(8, random_state=1, tree_store=trees).fit(changed)


def test_checkpoints_on_placed_data(client, data, tmp_path):
    common = dict(random_state=3, init="random", n_init=1, tol=0, max_iter=10)
    plain = daskclust.KMeans(16, **common).fit(data, client=client)
    other = data.copy()
    other[5, 0] += 1.0
    with daskclust.persist(data, client=client) as handle, daskclust.persist(other, client=client) as changed:
        with pytest.raises(Interrupt):
            daskclust.KMeans(16, callback=interrupt_at(6), **common).fit(handle, checkpoint=tmp_path / "run",
                                                                         checkpoint_every=2)
        resumed = daskclust.KMeans(16, **common).fit(handle, resume=tmp_path / "run")
        with pytest.raises(CheckpointError, match="content fingerprint"):
            daskclust.KMeans(16, **common).fit(changed, resume=tmp_path / "run")
    assert_same_model(plain, resumed)
    on_input = daskclust.KMeans(16, **common).fit(data, client=client, resume=tmp_path / "run")  # a handle's checkpoint
    assert_same_model(plain, on_input)
    with pytest.raises(Interrupt):  # and the other way round
        daskclust.KMeans(16, callback=interrupt_at(6), **common).fit(data, client=client, checkpoint=tmp_path / "own",
                                                                     checkpoint_every=2)
    with daskclust.persist(data, client=client) as handle:
        assert_same_model(plain, daskclust.KMeans(16, **common).fit(handle, resume=tmp_path / "own"))


def test_bad_values_are_refused_by_persist(client, data):
    bad = data.copy()
    bad[1234, 1] = np.nan
    with pytest.raises(InvalidDataError, match="row 1234"):
        daskclust.persist(bad, client=client)


def test_persist_without_a_cluster_starts_one_for_the_handle(data):
    with daskclust.persist(data) as handle:
        started = handle.client
        model = estimator("kmeans").fit(handle)
        assert started.status == "running"
    assert started.status == "closed"
    assert model.n_iter_ > 0


@pytest.fixture()
def fragile_cluster():
    """Two worker processes under nannies (a killed one is restarted), for this test alone."""
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0",
                      memory_limit="2GiB") as cluster, Client(cluster, set_as_default=False) as c:
        yield c


def test_a_worker_lost_during_a_fit_on_placed_data(fragile_cluster, data, starts):
    client = fragile_cluster
    est = daskclust.KMeans(16, random_state=5, init="random", n_init=1, tol=0, max_iter=12)
    with daskclust.persist(data, client=client) as handle:
        undisturbed = clone(est).fit(handle)
        pids = client.run(os.getpid)
        killed = []

        def kill_once(row):
            if row["iteration"] == 5 and not killed:
                killed.append(pids[sorted(pids)[-1]])
                os.kill(killed[0], signal.SIGKILL)

        survived = clone(est).set_params(callback=kill_once).fit(handle)
        placements = len(starts)
        assert killed and placements >= 2  # placed again, on the workers left
        after = clone(est).fit(handle)  # on that placement
        assert len(starts) == placements
    assert_same_model(undisturbed, survived, rtol=1e-10)
    assert_same_model(undisturbed, after, rtol=1e-10)

"""scikit-learn conventions, outputs following inputs, saving and loading, the CLI."""

from __future__ import annotations

import json

import dask.array as da
import numpy as np
import pytest
import xarray as xr
import zarr
from sklearn.base import clone

import daskclust
from daskclust.cli import main
from daskclust.persistence.model import load_model

from conftest import birch


@pytest.fixture(scope="module")
def fitted(client):
    X, _ = birch(25, points=40, seed=1)
    return daskclust.KMeans(25, random_state=0).fit(X, client=client), X


def test_params_round_trip_and_clone():
    model = daskclust.KMeans(7, init="afkmc2", tol=1e-3)
    params = model.get_params()
    assert params["n_clusters"] == 7 and params["init"] == "afkmc2"
    twin = clone(model)
    assert twin.get_params() == params and twin is not model
    assert model.set_params(max_iter=3) is model and model.max_iter == 3
    assert repr(model) == "KMeans(init='afkmc2', max_iter=3, n_clusters=7, tol=0.001)"  # scikit-learn's repr
    gmm = daskclust.GaussianMixture(4, covariance_type="isotropic", n_truncated=2)
    assert clone(gmm).get_params()["n_truncated"] == 2


def test_fit_returns_self_with_fitted_attributes(fitted):
    model, X = fitted
    assert model.cluster_centers_.shape == (25, 2)
    assert model.n_features_in_ == 2 and model.n_iter_ >= 1
    assert model.history_[0]["iteration"] == 0
    # one row per E-step; a converged fit counts the iteration that stopped it (scikit-learn's count)
    last_counted = model.converged_ and model.n_iter_ < model.max_iter
    assert len(model.history_) == model.n_init_esteps + model.n_iter_ + (0 if last_counted else 1)
    assert set(model.history_[0]) == {"iteration", "data", "free_energy", "quantization_error", "sigma2", "n_distances",
                                      "n_distances_points", "n_distances_centres", "distance_speedup", "n_changed", "seconds"}
    assert {row["data"] for row in model.history_} == {"full"}
    assert model.inertia_ == pytest.approx(-model.score(X))
    assert model.sigma2_ == pytest.approx(model.inertia_ / (2 * len(X)))


def test_outputs_follow_inputs(fitted, tmp_path):
    model, X = fitted
    labels = model.predict(X)
    assert isinstance(labels, np.ndarray) and labels.dtype == np.int32 and labels.shape == (len(X),)
    lazy = model.predict(da.from_array(X, chunks=300))
    assert isinstance(lazy, da.Array)
    np.testing.assert_array_equal(lazy.compute(), labels)
    np.testing.assert_array_equal(model.predict(xr.DataArray(X, dims=("s", "f"))).compute(), labels)
    dist = model.transform(X)
    assert dist.shape == (len(X), 25)
    np.testing.assert_array_equal(dist.argmin(1), labels)
    stored = model.predict(X, output=tmp_path / "labels.zarr")
    assert isinstance(stored, zarr.Array)
    np.testing.assert_array_equal(stored[:], labels)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["labels.zarr"]


def test_predict_checks_feature_count(fitted):
    model, _ = fitted
    with pytest.raises(daskclust.InvalidDataError, match="X has 3 features, but KMeans is expecting 2 features as input"):
        model.predict(np.zeros((4, 3)))


def test_save_and_load(fitted, tmp_path):
    model, X = fitted
    model.save(tmp_path / "m.zarr")
    again = daskclust.load(tmp_path / "m.zarr")
    assert type(again) is daskclust.KMeans and again.get_params() == {**model.get_params(), "callback": None}
    np.testing.assert_array_equal(again.cluster_centers_, model.cluster_centers_)
    assert again.history_ == model.history_ and again.n_iter_ == model.n_iter_
    assert again.converged_ is model.converged_
    np.testing.assert_array_equal(again.predict(X), model.predict(X))
    assert load_model(tmp_path / "m.zarr").kind == "KMeans"


def test_gaussian_mixture_api(client):
    X, _ = birch(9, points=40, seed=2)
    gmm = daskclust.GaussianMixture(9, covariance_type="isotropic", random_state=0).fit(X, client=client)
    proba = gmm.predict_proba(X)  # the whole posterior
    np.testing.assert_allclose(proba.sum(1), 1.0)
    np.testing.assert_array_equal(proba.argmax(1), gmm.predict(X))
    assert gmm.weights_.sum() == pytest.approx(1.0)
    assert gmm.covariances_.shape == (9,)
    assert gmm.score(X) == pytest.approx(gmm.score_samples(X).mean())
    assert gmm.score(X) >= gmm.history_[-1]["free_energy"] - 1e-9  # the bound is below the likelihood
    labels = gmm.fit_predict(X, client=client)
    np.testing.assert_array_equal(labels, gmm.predict(X))


def test_callback_receives_every_history_row(client):
    X, _ = birch(9, points=30, seed=4)
    rows = []
    model = daskclust.KMeans(9, random_state=1, callback=rows.append).fit(X, client=client)
    assert rows == model.history_


def test_verbose_prints_progress(client, capsys):
    X, _ = birch(9, points=30, seed=4)
    daskclust.KMeans(9, random_state=1, verbose=1).fit(X, client=client)
    out = capsys.readouterr().out
    assert "seeding (k-means||)" in out and "Iteration 0, inertia" in out and "dist/s" in out and "done:" in out


def test_embedded_local_cluster_is_used_and_closed():
    X, _ = birch(4, points=30, seed=5)
    model = daskclust.GaussianMixture(4, covariance_type="isotropic", random_state=0, verbose=0).fit(X)
    assert model.converged_
    from daskclust.engine.cluster import active_client

    assert active_client() is None


def test_cli_round_trip(tmp_path, capsys, client):
    data, model, labels = tmp_path / "d.zarr", tmp_path / "m.zarr", tmp_path / "l.zarr"
    assert main(["make-data", "birch", "--output", str(data), "--clusters", "16", "--points-per-cluster", "30"]) == 0
    assert main(["fit", str(data), "--clusters", "16", "--output", str(model), "--scheduler",
                 client.scheduler.address, "--quiet"]) == 0
    assert main(["predict", str(model), str(data), "--output", str(labels), "--scheduler",
                 client.scheduler.address]) == 0
    assert main(["info", str(model), "--json"]) == 0
    out = capsys.readouterr().out
    info = json.loads(out[out.index("{"):])
    assert info["kind"] == "KMeans" and info["n_clusters"] == 16
    stored = zarr.open_array(str(labels), mode="r")
    assert stored.shape == (480,) and stored[:].max() < 16
    assert main(["make-data", "blobs", "--output", str(tmp_path / "b.zarr"), "--samples", "500", "--features", "4",
                 "--clusters", "5"]) == 0
    assert main(["fit", str(tmp_path / "b.zarr"), "--clusters", "5", "--algorithm", "gmm", "--covariance-type",
                 "full", "--output", str(tmp_path / "g.zarr"), "--quiet", "--scheduler", client.scheduler.address]) == 0
    gmm = daskclust.load(tmp_path / "g.zarr")
    assert type(gmm) is daskclust.GaussianMixture and gmm.covariances_.shape == (5, 4, 4)
    capsys.readouterr()
    assert main(["fit", str(tmp_path / "b.zarr"), "--clusters", "5", "--covariance-type", "full", "--output",
                 str(tmp_path / "k.zarr"), "--quiet", "--scheduler", client.scheduler.address]) == 2
    assert "--covariance-type: kmeans (KMeans) has no parameter 'covariance_type'" in capsys.readouterr().err
    assert not (tmp_path / "k.zarr").exists()


def test_fsspec_url_input(client_threads):
    """An fsspec URL (here memory://, shared by the in-process workers of this cluster)."""
    X, _ = birch(9, points=40, seed=6)
    url = "memory://daskclust-test/fsspec.zarr"
    group = zarr.open_group(url, mode="w")
    group.create_array("X", shape=X.shape, chunks=(60, 2), dtype=X.dtype)[:] = X
    model = daskclust.KMeans(9, search="full", init=X[:9], tol=0)
    from_url = clone(model).fit(url, client=client_threads)
    from_numpy = clone(model).fit(X, client=client_threads)
    np.testing.assert_allclose(from_url.cluster_centers_, from_numpy.cluster_centers_, rtol=1e-12)
    assert isinstance(from_url.predict(url), da.Array)

"""Bad input gets a clear error naming the problem, before any output is written."""

from __future__ import annotations

import os

import dask.array as da
import numpy as np
import pytest
import zarr

import daskclust
from daskclust.cli import main
from daskclust.data import as_chunked_data
from daskclust.errors import InvalidDataError, InvalidParameterError, NotFittedError


@pytest.mark.parametrize(
    "X, match",
    [
        (np.zeros(10), "must be 2-D"),
        (np.zeros((2, 3, 4)), "must be 2-D"),
        (np.zeros((10, 0)), r"0 feature\(s\) \(shape=\(10, 0\)\)"),
        (np.array([["a", "b"], ["c", "d"]]), "unsupported dtype"),
        (np.zeros((4, 2), dtype=complex), "unsupported dtype"),
        (np.zeros((3, 2)), "n_samples=3 should be >= n_clusters=5"),
    ],
)
def test_metadata_errors_before_any_work(X, match):
    with pytest.raises(InvalidDataError, match=match):
        daskclust.KMeans(5).fit(X, client=object())  # raised before the client is touched


def test_errors_are_value_errors():
    with pytest.raises(ValueError):
        daskclust.KMeans(5).fit(np.zeros(3), client=object())


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_nonfinite_row_is_reported_with_chunk_and_row(client, bad):
    X = np.random.default_rng(0).standard_normal((1000, 2))
    X[637, 1] = bad
    with pytest.raises(InvalidDataError, match=r"NaN or inf in row 637 \(chunk 6, row 37 of the chunk\)"):
        daskclust.KMeans(3, chunk_rows=100).fit(X, client=client)


def test_nonfinite_in_streamed_zarr_is_reported(client, tmp_path):
    store = str(tmp_path / "bad.zarr")
    z = zarr.create_array(store, shape=(500, 3), chunks=(100, 3), dtype="f4")
    data = np.ones((500, 3), dtype="f4")
    data[421, 2] = np.nan
    z[:] = data
    with pytest.raises(InvalidDataError, match="row 421"):
        daskclust.KMeans(2, memory_budget=1).fit(store, client=client)


@pytest.mark.parametrize("w, match", [
    (np.r_[np.ones(9), -1.0], r"sample_weight\[9\] = -1.0"),
    (np.r_[np.nan, np.ones(9)], r"sample_weight\[0\] = nan"),
])
def test_bad_weights(client, w, match):
    X = np.random.default_rng(1).standard_normal((10, 2))
    with pytest.raises(InvalidDataError, match=match):
        daskclust.KMeans(2).fit(X, sample_weight=w, client=client)


def test_weights_of_wrong_shape_and_all_zero(client):
    X = np.random.default_rng(1).standard_normal((10, 2))
    with pytest.raises(InvalidDataError, match=r"shape \(10,\)"):
        daskclust.KMeans(2).fit(X, sample_weight=np.ones(9), client=object())
    with pytest.raises(InvalidDataError, match="sums to zero"):
        daskclust.KMeans(2).fit(X, sample_weight=np.zeros(10), client=client)


@pytest.mark.parametrize("params, match", [
    ({"n_clusters": 0}, "n_clusters must be >= 1"),
    ({"n_clusters": 2.5}, "n_clusters must be an integer"),
    ({"init": "kmeans"}, "unknown init 'kmeans'; valid: 'k-means\\|\\|'"),
    ({"init": np.zeros((3, 2))}, r"The shape of the initial centers \(3, 2\) does not match the number of clusters"),
    ({"tol": -1}, "tol must be >= 0"),
    ({"max_iter": -1}, "max_iter must be >= 0"),
])
def test_bad_parameters(params, match):
    params = {"n_clusters": 2, **params}
    with pytest.raises(InvalidParameterError, match=match):
        daskclust.KMeans(**params).fit(np.zeros((10, 2)), client=object())


def test_set_params_rejects_unknown_names():
    with pytest.raises(InvalidParameterError, match="invalid parameter 'clusters'"):
        daskclust.KMeans().set_params(clusters=3)


def test_not_fitted():
    with pytest.raises(NotFittedError, match="not fitted"):
        daskclust.KMeans(2).predict(np.zeros((3, 2)))
    with pytest.raises(AttributeError):
        daskclust.GaussianMixture(2, covariance_type="isotropic").means_


def test_feature_chunked_dask_input_is_rechunked_with_a_warning():
    X = da.zeros((100, 6), chunks=(50, 2))
    with pytest.warns(UserWarning, match="chunked along features"):
        data = as_chunked_data(X)
    assert len(data.X.chunks[1]) == 1


def test_group_without_a_clear_array(tmp_path):
    group = zarr.open_group(str(tmp_path / "g.zarr"), mode="w")
    group.create_array("A", shape=(4, 2), dtype="f8")
    group.create_array("B", shape=(4, 2), dtype="f8")[:] = 1.0  # written: an unwritten array is refused
    with pytest.raises(InvalidDataError, match="name the array to use .*A, B"):
        as_chunked_data(str(tmp_path / "g.zarr"))
    assert as_chunked_data(str(tmp_path / "g.zarr"), array="B").n_samples == 4


def test_missing_store():
    with pytest.raises(InvalidDataError, match="no zarr array or group found"):
        as_chunked_data("/nonexistent/path.zarr")


def test_predict_with_nan_leaves_no_partial_output(client, tmp_path):
    X = np.random.default_rng(3).standard_normal((400, 2))
    model = daskclust.KMeans(3, random_state=0).fit(X, client=client)
    bad = X.copy()
    bad[350] = np.nan
    out = tmp_path / "labels.zarr"
    with pytest.raises(InvalidDataError, match="row 350"):
        model.predict(da.from_array(bad, chunks=100), output=str(out))
    assert not out.exists()
    assert os.listdir(tmp_path) == []


def test_cli_fit_on_bad_data_writes_no_model(tmp_path, capsys):
    store = str(tmp_path / "bad.zarr")
    z = zarr.create_array(store, shape=(300, 2), chunks=(100, 2), dtype="f8")
    data = np.random.default_rng(0).standard_normal((300, 2))
    data[5, 0] = np.inf
    z[:] = data
    model = tmp_path / "model.zarr"
    assert main(["fit", store, "--clusters", "3", "--output", str(model), "--quiet"]) == 2
    assert "NaN or inf in row 5" in capsys.readouterr().err
    assert not model.exists()


def test_numpy_rows_are_referred_to_not_copied():
    """A numpy input's dask array refers to the caller's array (dask's from_array would copy and hash it,
    seconds for large data); its chunks hold the same rows."""
    from daskclust.data.sources import numpy_as_dask

    X = np.random.default_rng(0).normal(size=(1000, 3))
    wrapped = numpy_as_dask(X)
    assert [value is X for value in dict(wrapped.dask).values()] == [True] and wrapped.chunks == ((1000,), (3,))
    data = as_chunked_data(X, chunk_rows=300)
    assert data.source.array is X and data.X.chunks[0] == (300, 300, 300, 100)
    np.testing.assert_array_equal(data.X.blocks[2].compute(), X[600:900])
    np.testing.assert_array_equal(as_chunked_data(X.astype(np.float32), chunk_rows=300).X.compute(), X.astype(np.float32))
    assert numpy_as_dask(np.zeros((0, 3))).shape == (0, 3)

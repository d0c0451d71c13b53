"""xarray in and out: a 2-D DataArray of any dimension names is fitted, and per-row results come back
as DataArrays along its sample dimension with its coordinates (numpy- or dask-backed as the input)."""

from __future__ import annotations

import dask.array as da
import numpy as np
import pandas as pd
import pytest
import xarray as xr

import daskclust

T, Y, X, BANDS = 3, 4, 5, ("blue", "red", "nir")


@pytest.fixture(scope="module")
def cube():
    """A (time, y, x, band) cube of three well-separated spectra, with dates, metres and band names."""
    rng = np.random.default_rng(0)
    spectra = np.array([[0.0, 0.0, 0.0], [10.0, 0.0, 10.0], [0.0, 10.0, 20.0]])
    classes = rng.integers(3, size=(T, Y, X))
    values = spectra[classes] + 0.1 * rng.standard_normal((T, Y, X, len(BANDS)))
    coords = {"time": pd.date_range("2024-01-01", periods=T, freq="MS"), "y": 1000.0 - 30.0 * np.arange(Y),
              "x": 500.0 + 30.0 * np.arange(X), "band": list(BANDS), "crs": "EPSG:32632"}
    return xr.DataArray(values, dims=("time", "y", "x", "band"), coords=coords, name="reflectance")


def samples(cube):
    return cube.stack(sample=("time", "y", "x")).transpose("sample", "band")


@pytest.fixture(scope="module")
def fitted(client, cube):
    return daskclust.KMeans(3, random_state=0).fit(samples(cube), client=client)


@pytest.fixture(scope="module")
def gmm(client, cube):
    return daskclust.GaussianMixture(3, random_state=0).fit(samples(cube), client=client)


def test_numpy_backed_input_gives_numpy_backed_labels_with_the_inputs_coordinates(fitted, cube):
    stacked = samples(cube)
    labels = fitted.predict(stacked)
    assert isinstance(labels, xr.DataArray) and isinstance(labels.data, np.ndarray)
    assert labels.name == "labels" and labels.dims == ("sample",) and labels.dtype == np.int32
    xr.testing.assert_identical(labels.coords.to_dataset(), stacked.drop_vars("band").coords.to_dataset())
    assert labels.indexes["sample"].equals(stacked.indexes["sample"])  # the MultiIndex itself
    np.testing.assert_array_equal(labels.values, fitted.predict(stacked.values))


def test_unstacked_labels_have_the_cubes_grid_and_coordinates(fitted, cube):
    grid = fitted.predict(samples(cube)).unstack("sample")
    assert grid.dims == ("time", "y", "x")
    expected = cube.isel(band=0, drop=True)
    xr.testing.assert_identical(grid.coords.to_dataset(), expected.coords.to_dataset())
    flat = fitted.predict(cube.values.reshape(-1, len(BANDS)))
    np.testing.assert_array_equal(grid.sel(y=expected.y, x=expected.x).values, flat.reshape(T, Y, X))


def test_dask_backed_input_gives_lazy_labels(fitted, cube):
    stacked = samples(cube.chunk({"time": 1}))
    labels = fitted.predict(stacked)
    assert isinstance(labels, xr.DataArray) and isinstance(labels.data, da.Array)
    assert labels.name == "labels" and labels.dims == ("sample",)
    assert labels.indexes["sample"].equals(stacked.indexes["sample"])
    np.testing.assert_array_equal(labels.compute().values, fitted.predict(stacked.values))


def test_labels_after_a_fit_on_a_dataarray_are_a_dataarray(fitted, cube):
    assert isinstance(fitted.labels_, xr.DataArray)
    np.testing.assert_array_equal(fitted.labels_.values, fitted.predict(samples(cube).values))


def test_any_dimension_names_the_second_being_the_features(client, cube):
    values = samples(cube).values
    named = xr.DataArray(values, dims=("pixel", "channel"),
                         coords={"pixel": np.arange(len(values)) * 2, "quality": ("pixel", np.ones(len(values))),
                                 "channel": list(BANDS)})
    model = daskclust.KMeans(3, random_state=0).fit(named, client=client)
    plain = daskclust.KMeans(3, random_state=0).fit(values, client=client)
    np.testing.assert_array_equal(model.cluster_centers_, plain.cluster_centers_)
    labels = model.predict(named)
    assert labels.dims == ("pixel",) and labels.name == "labels"
    assert set(labels.coords) == {"pixel", "quality"}
    np.testing.assert_array_equal(labels["pixel"].values, named["pixel"].values)
    np.testing.assert_array_equal(labels.values, plain.predict(values))


def test_mixture_predict_and_score_samples_follow_a_dataarray(gmm, cube):
    stacked = samples(cube)
    labels = gmm.predict(stacked)
    assert labels.name == "labels" and labels.indexes["sample"].equals(stacked.indexes["sample"])
    np.testing.assert_array_equal(labels.values, gmm.predict(stacked.values))
    scores = gmm.score_samples(stacked.chunk({"sample": 20}))
    assert scores.name == "scores" and isinstance(scores.data, da.Array)
    np.testing.assert_allclose(scores.compute().values, gmm.score_samples(stacked.values))
    assert gmm.score(stacked) == pytest.approx(gmm.score(stacked.values))


def test_a_cube_or_a_transposed_dataarray_is_refused_with_what_to_do(cube):
    with pytest.raises(daskclust.InvalidDataError, match=r"4-D .*stack\(sample=\('time', 'y', 'x'\)\)"):
        daskclust.KMeans(3).fit(cube)
    with pytest.raises(daskclust.InvalidDataError, match="first dimension \\('band'\\) holds the samples"):
        daskclust.KMeans(5).fit(samples(cube).T)

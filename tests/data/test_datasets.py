"""Tests of daskclust.datasets: synthetic data sets written to zarr."""

from __future__ import annotations

import math
import os

import dask.array as da
import fsspec
import numpy as np
import pytest
import zarr

import daskclust
from daskclust import datasets
from daskclust.datasets import birch_grid_centres, make_birch, make_blobs, open_dataset
from daskclust.errors import InvalidDataError, InvalidParameterError

SPACING = 4.0 * math.sqrt(2.0)


def nearest_distances(points: np.ndarray) -> np.ndarray:
    d = np.linalg.norm(points[:, None, :] - points[None, :, :], axis=-1)
    np.fill_diagonal(d, np.inf)
    return d.min(axis=1)


# --- BIRCH grid ---------------------------------------------------------------


def test_birch_grid_centres_layout():
    centres = birch_grid_centres(16)
    assert centres.shape == (16, 2) and centres.dtype == np.float64
    np.testing.assert_array_equal(centres[0], [0.0, 0.0])
    np.testing.assert_allclose(centres[1], [SPACING, 0.0])
    np.testing.assert_allclose(centres[4], [0.0, SPACING])
    np.testing.assert_allclose(centres[15], [3 * SPACING, 3 * SPACING])
    np.testing.assert_allclose(nearest_distances(centres), SPACING, rtol=1e-12)


@pytest.mark.parametrize("n_clusters", [1000, 2, 0, -4])
def test_birch_non_square_raises(tmp_path, n_clusters):
    with pytest.raises(InvalidParameterError) as info:
        birch_grid_centres(n_clusters)
    assert isinstance(info.value, ValueError)
    with pytest.raises(ValueError):
        make_birch(tmp_path / "b.zarr", n_clusters)
    assert not (tmp_path / "b.zarr").exists()


def test_birch_error_suggests_nearest_squares():
    with pytest.raises(InvalidParameterError, match=r"961 \(31\^2\) and 1024 \(32\^2\)"):
        birch_grid_centres(1000)


@pytest.fixture(scope="module")
def birch_store(tmp_path_factory):
    path = tmp_path_factory.mktemp("birch") / "birch.zarr"
    make_birch(path, 16, points_per_cluster=200, chunk_rows=500, seed=3)
    return path


def test_birch_arrays_and_attributes(birch_store):
    group = zarr.open_group(birch_store, mode="r")
    X, labels, centers = group["X"], group["labels"], group["centers"]
    assert X.shape == (3200, 2) and X.dtype == np.float64
    assert labels.shape == (3200,) and labels.dtype == np.int32
    assert centers.shape == (16, 2) and centers.dtype == np.float64
    np.testing.assert_array_equal(centers[...], birch_grid_centres(16))
    assert X.metadata.dimension_names == ("sample", "feature")
    assert labels.metadata.dimension_names == ("sample",)
    assert centers.metadata.dimension_names == ("cluster", "feature")
    assert dict(group.attrs) == {
        "generator": "birch",
        "n_clusters": 16,
        "points_per_cluster": 200,
        "sigma2": 1.0,
        "seed": 3,
        "daskclust_version": daskclust.__version__,
        "daskclust_store": "dataset",
        "daskclust_complete": True,
    }


def test_birch_written_chunk_by_chunk(birch_store):
    group = zarr.open_group(birch_store, mode="r")
    assert group["X"].chunks == (500, 2)
    assert group["labels"].chunks == (500,)
    assert group["X"].nchunks_initialized == 7  # ceil(3200 / 500)
    assert isinstance(group["X"].compressors[0], zarr.codecs.ZstdCodec)
    assert group["X"].compressors[0].level == 3


def test_birch_labels_counts_and_shuffled(birch_store):
    labels = zarr.open_group(birch_store, mode="r")["labels"][...]
    np.testing.assert_array_equal(np.bincount(labels, minlength=16), np.full(16, 200))
    assert np.any(np.diff(labels) < 0), "rows are sorted by cluster"


def test_birch_cluster_means_near_centres(birch_store):
    group = zarr.open_group(birch_store, mode="r")
    X, labels, centres = group["X"][...], group["labels"][...], group["centers"][...]
    tolerance = 4.0 * math.sqrt(1.0 / 200)
    for c in range(16):
        mean = X[labels == c].mean(axis=0)
        assert np.all(np.abs(mean - centres[c]) < tolerance)


def test_birch_sigma2_and_dtype(tmp_path):
    make_birch(tmp_path / "b.zarr", 4, points_per_cluster=500, sigma2=0.25, dtype="float32")
    X, labels, centres = open_dataset(tmp_path / "b.zarr")
    assert X.dtype == np.float32
    residual = X.compute() - centres[labels.compute()]
    assert residual.var() == pytest.approx(0.25, rel=0.1)


def test_birch_default_chunk_rows(tmp_path):
    group = make_birch(tmp_path / "b.zarr", 1, points_per_cluster=10)
    assert group["X"].chunks == (10, 2)


def test_birch_reproducible_and_seed_dependent(tmp_path):
    kwargs = dict(points_per_cluster=50, chunk_rows=64)
    first = make_birch(tmp_path / "a.zarr", 9, seed=1, **kwargs)
    again = make_birch(tmp_path / "b.zarr", 9, seed=1, **kwargs)
    other = make_birch(tmp_path / "c.zarr", 9, seed=2, **kwargs)
    np.testing.assert_array_equal(first["X"][...], again["X"][...])
    np.testing.assert_array_equal(first["labels"][...], again["labels"][...])
    assert not np.array_equal(first["labels"][...], other["labels"][...])
    assert not np.array_equal(first["X"][...], other["X"][...])


def test_existing_path_raises_and_is_untouched(tmp_path):
    path = tmp_path / "b.zarr"
    make_birch(path, 4, points_per_cluster=10, seed=0)
    before = zarr.open_group(path, mode="r")["X"][...]
    with pytest.raises(FileExistsError, match="overwrite=True"):
        make_birch(path, 9, points_per_cluster=10, seed=1)
    group = zarr.open_group(path, mode="r")
    np.testing.assert_array_equal(group["X"][...], before)
    assert group.attrs["n_clusters"] == 4


def test_overwrite_replaces_store(tmp_path):
    path = tmp_path / "b.zarr"
    make_birch(path, 4, points_per_cluster=10)
    group = make_birch(path, 9, points_per_cluster=10, overwrite=True)
    assert group["X"].shape == (90, 2) and group.attrs["n_clusters"] == 9


def test_overwrite_refuses_non_zarr_directory(tmp_path):
    path = tmp_path / "notzarr"
    path.mkdir()
    (path / "keep.txt").write_text("precious")
    with pytest.raises(FileExistsError, match="not a store daskclust wrote"):
        make_birch(path, 4, overwrite=True)
    assert (path / "keep.txt").read_text() == "precious"


def test_failure_leaves_no_partial_store(tmp_path, monkeypatch):
    setitem = zarr.Array.__setitem__
    writes = []

    def fail_on_fourth_write(self, key, value):
        writes.append(key)
        if len(writes) == 4:
            raise RuntimeError("disk on fire")
        setitem(self, key, value)

    monkeypatch.setattr(zarr.Array, "__setitem__", fail_on_fourth_write)
    with pytest.raises(RuntimeError, match="disk on fire"):
        make_birch(tmp_path / "b.zarr", 4, points_per_cluster=10, chunk_rows=8)
    assert len(writes) == 4
    assert not (tmp_path / "b.zarr").exists()


def test_failure_on_overwrite_keeps_the_old_store_and_no_partial_one(tmp_path, monkeypatch):
    path = tmp_path / "b.zarr"
    make_birch(path, 4, points_per_cluster=10)
    before = zarr.open_group(path, mode="r")["X"][...]
    monkeypatch.setattr(datasets, "__version__", object())  # not JSON: the last write fails
    with pytest.raises(TypeError):
        make_birch(path, 9, points_per_cluster=10, overwrite=True)
    np.testing.assert_array_equal(zarr.open_group(path, mode="r")["X"][...], before)
    assert os.listdir(tmp_path) == ["b.zarr"]


@pytest.mark.parametrize(
    "kwargs",
    [
        {"points_per_cluster": 0},
        {"sigma2": 0.0},
        {"sigma2": float("nan")},
        {"seed": -1},
        {"chunk_rows": 0},
        {"dtype": "int32"},
    ],
)
def test_birch_invalid_parameters(tmp_path, kwargs):
    with pytest.raises(InvalidParameterError):
        make_birch(tmp_path / "b.zarr", 4, **kwargs)
    assert not (tmp_path / "b.zarr").exists()


def test_fsspec_url(tmp_path):
    url = f"memory://{tmp_path.name}/b.zarr"
    try:
        group = make_birch(url, 4, points_per_cluster=10)
        with pytest.raises(FileExistsError):
            make_birch(url, 4, points_per_cluster=10)
        X, labels, centers = open_dataset(url)
        np.testing.assert_array_equal(X.compute(), group["X"][...])
    finally:
        fsspec.filesystem("memory").rm(f"/{tmp_path.name}", recursive=True)


# --- blobs --------------------------------------------------------------------


@pytest.fixture(scope="module")
def blobs_store(tmp_path_factory):
    path = tmp_path_factory.mktemp("blobs") / "blobs.zarr"
    make_blobs(path, 2000, 32, 64, chunk_rows=300, seed=5)
    return path


def test_blobs_arrays_and_attributes(blobs_store):
    group = zarr.open_group(blobs_store, mode="r")
    assert group["X"].shape == (2000, 32) and group["X"].dtype == np.float32
    assert group["X"].chunks == (300, 32)
    assert group["labels"].shape == (2000,) and group["labels"].dtype == np.int32
    assert group["centers"].shape == (64, 32) and group["centers"].dtype == np.float64
    attrs = dict(group.attrs)
    assert attrs["generator"] == "blobs"
    assert (attrs["n_samples"], attrs["n_features"], attrs["n_clusters"]) == (2000, 32, 64)
    centres = group["centers"][...]
    assert attrs["separation"] == pytest.approx(nearest_distances(centres).mean(), rel=1e-9)
    assert attrs["seed"] == 5
    assert attrs["daskclust_version"] == daskclust.__version__


def test_blobs_default_box_is_scikit_learns(blobs_store):
    centres = zarr.open_group(blobs_store, mode="r")["centers"][...]
    assert centres.min() >= -10.0 and centres.max() <= 10.0
    assert centres.min() < -9.0 and centres.max() > 9.0


def test_blobs_explicit_separation(tmp_path):
    group = make_blobs(tmp_path / "b.zarr", 100, 32, 64, separation=6.0)
    centres = group["centers"][...]
    assert nearest_distances(centres).mean() == pytest.approx(6.0, rel=1e-9)
    assert centres.min() >= 0.0 and centres.max() <= group.attrs["hypercube_side"]


def test_blobs_labels_and_noise(blobs_store):
    group = zarr.open_group(blobs_store, mode="r")
    X, labels, centres = group["X"][...], group["labels"][...], group["centers"][...]
    assert labels.min() >= 0 and labels.max() < 64
    assert len(np.unique(labels)) > 50
    residual = X - centres[labels]
    assert residual.mean() == pytest.approx(0.0, abs=0.02)
    assert residual.var() == pytest.approx(1.0, rel=0.05)


def test_blobs_reproducible_and_seed_dependent(tmp_path):
    first = make_blobs(tmp_path / "a.zarr", 500, 8, 10, chunk_rows=128, seed=7)
    again = make_blobs(tmp_path / "b.zarr", 500, 8, 10, chunk_rows=128, seed=7)
    other = make_blobs(tmp_path / "c.zarr", 500, 8, 10, chunk_rows=128, seed=8)
    for name in ("X", "labels", "centers"):
        np.testing.assert_array_equal(first[name][...], again[name][...])
        assert not np.array_equal(first[name][...], other[name][...])


def test_default_chunk_rows_follow_the_estimators_rule(tmp_path):
    from daskclust.data.chunking import default_chunk_rows

    group = make_blobs(tmp_path / "small.zarr", 1000, 4, 3)
    assert group["X"].chunks == (default_chunk_rows(1000, 4, 4), 4)
    group = make_birch(tmp_path / "birch.zarr", 16)
    assert group["X"].chunks == (default_chunk_rows(1600, 2, 8), 2)
    assert group["X"].nchunks >= 6


@pytest.mark.parametrize(
    "args, kwargs",
    [
        ((0, 2, 3), {}),
        ((10, 0, 3), {}),
        ((10, 2, 1), {}),
        ((10, 2, 3), {"separation": -1.0}),
        ((10, 2, 3), {"dtype": "float16"}),
    ],
)
def test_blobs_invalid_parameters(tmp_path, args, kwargs):
    with pytest.raises(InvalidParameterError):
        make_blobs(tmp_path / "b.zarr", *args, **kwargs)


# --- open_dataset ---------------------------------------------------------------


def test_open_dataset_round_trip(birch_store):
    X, labels, centers = open_dataset(birch_store)
    group = zarr.open_group(birch_store, mode="r")
    assert isinstance(X, da.Array) and isinstance(labels, da.Array)
    assert X.chunks == ((500,) * 6 + (200,), (2,))
    np.testing.assert_array_equal(X.compute(), group["X"][...])
    np.testing.assert_array_equal(labels.compute(), group["labels"][...])
    np.testing.assert_array_equal(centers, birch_grid_centres(16))


def test_open_dataset_without_truth(tmp_path):
    group = zarr.open_group(tmp_path / "plain.zarr", mode="w")
    group.create_array("X", data=np.ones((5, 3)))
    X, labels, centers = open_dataset(tmp_path / "plain.zarr")
    assert X.shape == (5, 3) and labels is None and centers is None


def test_open_dataset_missing(tmp_path):
    with pytest.raises(InvalidDataError):
        open_dataset(tmp_path / "nothing.zarr")
    zarr.open_group(tmp_path / "empty.zarr", mode="w")
    with pytest.raises(InvalidDataError, match="no array 'X'"):
        open_dataset(tmp_path / "empty.zarr")


def test_blobs_without_compression(tmp_path):
    group = make_blobs(tmp_path / "raw.zarr", 300, 4, 3, compression=None)
    assert group["X"].compressors == ()
    assert make_blobs(tmp_path / "z.zarr", 300, 4, 3)["X"].compressors != ()
    with pytest.raises(InvalidParameterError, match="compression"):
        make_blobs(tmp_path / "bad.zarr", 300, 4, 3, compression="gzip")

"""Numerical extremes are typed errors with one range rule for every estimator and transform: weights
whose sums overflow or that are subnormal, rows whose squared distances overflow, models whose
parameters are out of range."""

from __future__ import annotations

import numpy as np
import pytest
import zarr

import daskclust
from daskclust.errors import InvalidDataError, ModelStoreError
from daskclust.transforms import LightweightCoreset, Sketch

from conftest import blobs


@pytest.fixture(scope="module")
def X():
    return blobs(600, 3, 4, seed=5)[0]


FITTERS = {
    "kmeans": lambda X, w, c: daskclust.KMeans(4, random_state=0).fit(X, sample_weight=w, client=c),
    "gmm": lambda X, w, c: daskclust.GaussianMixture(4, random_state=0).fit(X, sample_weight=w, client=c),
    "coreset": lambda X, w, c: LightweightCoreset(100, random_state=0).fit_transform(X, w, client=c),
}


@pytest.mark.parametrize("weight", [1e306, 1e300, 1e-320, 1e-310])
@pytest.mark.parametrize("fitter", sorted(FITTERS))
def test_weights_beyond_the_range_are_refused(client_threads, X, fitter, weight):
    """1e306 overflowed the sums (inf centres, NaN weights, a raw 'pvals' error); 1e-320 gave 'argmin of an
    empty sequence' or ZeroDivisionError."""
    with pytest.raises(InvalidDataError, match=r"sample_weight\[0\] = .* is not a valid weight: weights must be 0"):
        FITTERS[fitter](X, np.full(len(X), weight), client_threads)


RANGE_USERS = {
    **FITTERS,
    "sketch": lambda X, w, c: Sketch(2, random_state=0).fit_transform(X, w, client=c),
    "sketched-gmm": lambda X, w, c: daskclust.SketchedGaussianMixture(4, n_kept=2, random_state=0).fit(
        X, sample_weight=w, client=c),
}


@pytest.mark.parametrize("user", sorted(RANGE_USERS))
def test_rows_too_small_to_cluster_are_refused_by_every_estimator_and_transform(client_threads, X, user):
    """SketchedGaussianMixture (and the sketch and coreset passes) accepted data x1e-300 the others refused."""
    with pytest.raises(InvalidDataError, match=r"too small to cluster: max \|x\| = .*e-(300|299)"):
        RANGE_USERS[user](X * 1e-300, None, client_threads)


def test_a_sketch_store_of_rows_too_small_is_not_written(client_threads, X, tmp_path):
    zarr.create_array(str(tmp_path / "tiny.zarr"), data=X * 1e-300, chunks=(200, 3))
    with pytest.raises(InvalidDataError, match="too small to cluster"):
        Sketch(2).fit_transform(str(tmp_path / "tiny.zarr"), client=client_threads, output=str(tmp_path / "s.zarr"))
    assert not (tmp_path / "s.zarr").exists()


def test_weights_at_the_edges_of_the_range_fit(client_threads, X):
    from daskclust.kernels.validation import WEIGHT_MAX, WEIGHT_MIN

    for weight in (WEIGHT_MAX, WEIGHT_MIN):
        model = daskclust.KMeans(4, random_state=0).fit(X, sample_weight=np.full(len(X), weight), client=client_threads)
        assert np.all(np.isfinite(model.cluster_centers_))


@pytest.mark.parametrize("method", ["predict", "score_samples"])
def test_rows_whose_squared_distances_overflow_are_refused(client_threads, X, tmp_path, method):
    """Rows x1e300 made score_samples NaN and predict label every row 0."""
    model = daskclust.GaussianMixture(4, random_state=0).fit(X, client=client_threads)
    huge = X * 1e300
    with pytest.raises(InvalidDataError, match="too large to score"):
        getattr(model, method)(huge)
    zarr.create_array(str(tmp_path / "huge.zarr"), data=huge, chunks=(200, 3))
    with pytest.raises(InvalidDataError, match="too large to score"):
        getattr(model, method)(str(tmp_path / "huge.zarr"), output=str(tmp_path / "out.zarr"))
    assert not (tmp_path / "out.zarr").exists()


def test_a_model_with_centres_out_of_range_does_not_load(client_threads, X, tmp_path):
    """Centres x1e200 loaded and predict raised a raw OverflowError."""
    daskclust.KMeans(4, random_state=0).fit(X, client=client_threads).save(tmp_path / "m.zarr")
    group = zarr.open_group(str(tmp_path / "m.zarr"), mode="a")
    group["centres"][...] = group["centres"][...] * 1e200
    with pytest.raises(ModelStoreError, match="its means exceed"):
        daskclust.load(tmp_path / "m.zarr")


@pytest.mark.parametrize("value, match", [(-1.0, "variances are not all positive"), (0.0, "variances are not all positive")])
def test_a_model_with_variances_not_positive_does_not_load(client_threads, X, tmp_path, value, match):
    daskclust.GaussianMixture(4, covariance_type="diag", random_state=0).fit(X, client=client_threads).save(
        tmp_path / "m.zarr")
    group = zarr.open_group(str(tmp_path / "m.zarr"), mode="a")
    covariances = group["covariances"][...]
    covariances[1, 0] = value
    group["covariances"][...] = covariances
    with pytest.raises(ModelStoreError, match=match):
        daskclust.load(tmp_path / "m.zarr")


ABSURD = {
    "covariance_type array": (lambda: daskclust.GaussianMixture(2, covariance_type=np.array(["diag"])),
                              "covariance_type=array"),
    "search list": (lambda: daskclust.KMeans(2, search=["full"]), "search=\\['full'\\] is not supported"),
    "tree_store number": (lambda: daskclust.CellGaussianMixture(2, tree_store=123), "tree_store must be a path"),
    "state_store number": (lambda: daskclust.KMeans(2, state="zarr", state_store=1.5), "state_store must be a path"),
}


@pytest.mark.parametrize("case", sorted(ABSURD))
def test_absurd_parameter_types_are_invalid_parameters(X, case):
    from daskclust.errors import InvalidParameterError

    make, match = ABSURD[case]
    with pytest.raises(InvalidParameterError, match=match):
        make().fit(X)


def test_absurd_transform_parameters_are_invalid_parameters(X):
    from daskclust.errors import InvalidParameterError
    from daskclust.transforms import Sketch

    with pytest.raises(InvalidParameterError, match="random_state must be a non-negative integer, got 'a'"):
        LightweightCoreset(10, random_state="a").fit_transform(X)
    with pytest.raises(InvalidParameterError, match="a store's location must be a path or URL .* got int 123"):
        Sketch(2).fit_transform(X, output=123)


@pytest.mark.parametrize("address, match", [("tcp://127.0.0.1:99999", "Port out of range"),
                                            ("tcp://127.0.0.1:abc", "is not a scheduler address"),
                                            ("http://127.0.0.1:8786", "is not a scheduler address")])
def test_a_scheduler_address_that_cannot_be_one_is_refused(X, address, match, capsys):
    from daskclust.errors import InvalidParameterError

    with pytest.raises(InvalidParameterError, match=match):
        daskclust.KMeans(2, scheduler_address=address).fit(X)


def test_a_url_whose_fsspec_backend_is_missing_is_one_line(capsys):
    from daskclust.cli import main

    assert main(["info", "gcs://bucket/model.zarr"]) == 2
    err = capsys.readouterr().err
    assert err.strip().splitlines() == ["daskclust info: error: cannot open gcs://bucket/model.zarr: Please install "
                                        "gcsfs to access Google Storage"]

"""Every store any argument reads is an input, whatever form it came in (a path, a zarr array, a dask
or xarray array over a zarr store, a sketch store, weights, held-out rows), and no output may be, contain
or lie inside one; outputs of one call are kept apart from each other, all checked before any work."""

from __future__ import annotations

import dask.array as da
import numpy as np
import pytest
import xarray as xr
import zarr

import daskclust
from daskclust import CellGaussianMixture, SketchedGaussianMixture
from daskclust.cli import main
from daskclust.errors import OutputRefusedError
from daskclust.transforms import Sketch, SketchedData

from conftest import blobs


@pytest.fixture
def group(tmp_path):
    """A zarr group holding X, its weights and held-out rows."""
    X = blobs(800, 4, 3, seed=9)[0]
    g = zarr.open_group(str(tmp_path / "d.zarr"), mode="w")
    g.create_array("X", data=X, chunks=(200, 4), dimension_names=["row", "feature"])
    g.create_array("w", data=np.ones(len(X)), chunks=(200,), dimension_names=["row"])
    g.create_array("V", data=X[:100], chunks=(100, 4), dimension_names=["held_out", "feature"])
    return tmp_path / "d.zarr"


def listing(path):
    return sorted(p.relative_to(path).as_posix() for p in path.rglob("*"))


def test_a_tree_store_inside_the_data_is_refused(client_threads, group):
    before = listing(group)
    with pytest.raises(OutputRefusedError, match="tree store .* overlaps the input"):
        CellGaussianMixture(3, tree_store=group / "trees").fit(zarr.open_array(str(group / "X")), client=client_threads)
    assert listing(group) == before


@pytest.mark.parametrize("form", ["dask", "xarray"])
def test_predict_output_inside_a_store_given_through_dask_or_xarray_is_refused(client_threads, group, form):
    X = zarr.open_array(str(group / "X"))
    model = daskclust.KMeans(3, random_state=0).fit(X[:], client=client_threads)
    given = da.from_zarr(X) if form == "dask" else xr.open_zarr(str(group), consolidated=False)["X"]
    before = listing(group)
    with pytest.raises(OutputRefusedError, match="overlaps the input"):
        model.predict(given, output=group / "labels.zarr")
    assert listing(group) == before


def test_a_checkpoint_inside_the_sketch_being_fitted_is_refused(client_threads, group, tmp_path):
    X = zarr.open_array(str(group / "X"))[:]
    Sketch(2, random_state=0).fit_transform(X, client=client_threads, output=tmp_path / "s.zarr")
    before = listing(tmp_path / "s.zarr")
    with pytest.raises(OutputRefusedError, match="overlaps the input"):
        SketchedGaussianMixture(3, random_state=0).fit(SketchedData.open(tmp_path / "s.zarr"), client=client_threads,
                                                       checkpoint=tmp_path / "s.zarr" / "run")
    assert listing(tmp_path / "s.zarr") == before


def test_sketch_output_and_checkpoint_at_one_place_are_refused_before_the_sketch_pass(client_threads, group, tmp_path):
    X = zarr.open_array(str(group / "X"))[:]
    with pytest.raises(OutputRefusedError, match="overlaps another output or input of the fit"):
        SketchedGaussianMixture(3, n_kept=2, random_state=0).fit(X, client=client_threads,
                                                                 sketch_output=tmp_path / "s", checkpoint=tmp_path / "s")
    assert not (tmp_path / "s").exists()


def test_the_model_inside_the_validation_store_is_refused(group, tmp_path, capsys):
    other = tmp_path / "v.zarr"
    zarr.create_array(str(other), data=zarr.open_array(str(group / "V"))[:], chunks=(100, 4))
    before = listing(other)
    assert main(["fit", str(group), "--array", "X", "--algorithm", "greedy-gmm", "--clusters", "3", "--validation",
                 str(other), "--quiet", "--output", str(other / "m.zarr")]) == 2
    assert "overlaps the input" in capsys.readouterr().err
    assert listing(other) == before


def test_the_model_inside_the_weights_store_is_refused(group, tmp_path, capsys):
    weights = tmp_path / "w.zarr"
    zarr.create_array(str(weights), data=np.ones(800), chunks=(200,))
    assert main(["fit", str(group), "--array", "X", "--clusters", "3", "--sample-weight", str(weights), "--quiet",
                 "--output", str(weights / "m.zarr")]) == 2
    assert "overlaps the input" in capsys.readouterr().err or "lies inside" in capsys.readouterr().err

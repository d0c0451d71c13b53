"""A sketch is used only with what it was taken with: a store whose attributes disagree with its arrays
is refused before any kernel reads it (it aborted the process or fitted misread rows), and a model
predicts only sketches of its own transform (another seed or preconditioning labelled garbage)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import zarr

from daskclust import SketchedGaussianMixture
from daskclust.errors import InvalidDataError
from daskclust.transforms import Sketch, SketchedData, SketchTransform

from conftest import blobs

pytestmark = pytest.mark.boundscheck  # also run under NUMBA_BOUNDSCHECK=1 (README, .ci/run)


@pytest.fixture(scope="module")
def X():
    return blobs(1200, 8, 4, seed=2, spread=6.0)[0]


@pytest.fixture
def store(client, X, tmp_path):
    path = tmp_path / "s.zarr"
    Sketch(4, n_shared=1, random_state=3).fit_transform(X, client=client, chunk_rows=300, output=path)
    return path


def tamper(path, **fields):
    """Rewrite fields of the sketch store's transform attribute (as a hostile or careless edit would)."""
    group = zarr.open_group(str(path), mode="a")
    transform = dict(group.attrs["transform"])
    transform.update(fields)
    group.attrs["transform"] = transform


@pytest.mark.parametrize("fields, match", [
    ({"n_features": 4}, "sign flips must be 4 values"),
    ({"n_kept": 3}, r"values \(1200, 4\) and indices \(1200, 4\) must both be \(rows, n_kept = 3\)"),
    ({"n_kept": 9}, "n_kept 9 must be an integer in"),
    ({"precondition": "fft"}, "precondition 'fft' is not one of"),
    ({"seed": "a"}, "stored sketch transform is damaged"),
    ({"shared": [7, 7]}, "shared features must be"),
    ({"signs": [2] * 8}, "sign flips must be 8 values"),
])
def test_a_sketch_store_whose_attributes_disagree_is_refused_on_open(store, fields, match):
    tamper(store, **fields)
    with pytest.raises(InvalidDataError, match=match):
        SketchedData.open(store)


def test_indices_beyond_the_features_are_refused_before_a_kernel_reads_them(client, store):
    """A consistent-looking transform of fewer features: only the indices betray it, chunk by chunk."""
    tamper(store, n_features=6, signs=[1] * 6, shared=[0])
    sketch = SketchedData.open(store)
    with pytest.raises(InvalidDataError, match=r"indices must lie in \[0, 6\)"):
        SketchedGaussianMixture(3, random_state=0).fit(sketch, client=client)


def test_in_memory_sketches_are_checked_too():
    transform = SketchTransform.draw(8, 4, 0, "dct", 0)
    values, indices = np.zeros((10, 4)), np.tile(np.arange(4), (10, 1))
    with pytest.raises(InvalidDataError, match=r"must both be \(rows, n_kept = 4\)"):
        SketchedData(values[:, :3], indices[:, :3], None, transform)
    with pytest.raises(InvalidDataError, match=r"indices must lie in \[0, 8\)"):
        SketchedData(values, indices + 5, None, transform)
    with pytest.raises(InvalidDataError, match="one per row"):
        SketchedData(values, indices, np.ones(9), transform)


@pytest.mark.parametrize("other", [dict(random_state=4), dict(random_state=3, precondition="none"),
                                   dict(random_state=3, n_shared=0)])
def test_predict_refuses_a_sketch_of_another_transform(client, X, other):
    model = SketchedGaussianMixture(4, n_kept=4, n_shared=1, random_state=3).fit(X, client=client)
    own = Sketch(4, n_shared=1, random_state=3).fit_transform(X, client=client)
    assert np.mean(model.predict(own) == model.predict(X)) > 0.9  # its own sketches are accepted
    foreign = Sketch(4, **{"n_shared": 1, **other}).fit_transform(X, client=client)
    with pytest.raises(InvalidDataError, match="not taken with this model's sketch transform"):
        model.predict(foreign)


def test_a_sketched_model_with_a_damaged_transform_does_not_load(client, X, tmp_path):
    from daskclust import load
    from daskclust.errors import ModelStoreError

    model = SketchedGaussianMixture(4, n_kept=4, n_shared=1, random_state=3).fit(X, client=client)
    model.save(tmp_path / "m.zarr")
    group = zarr.open_group(str(tmp_path / "m.zarr"), mode="a")
    scalars = json.loads(group.attrs["daskclust_scalars"])
    scalars["sketch_n_kept"] = 99
    group.attrs["daskclust_scalars"] = json.dumps(scalars)
    with pytest.raises(ModelStoreError):
        load(tmp_path / "m.zarr")

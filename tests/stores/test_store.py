"""Tests of daskclust.persistence.model: saving fitted models as xarray Datasets in zarr stores."""

from __future__ import annotations

import json
import os
import pathlib
import uuid

import numpy as np
import pytest
import xarray as xr
import zarr

from daskclust import __version__, io
from daskclust.errors import InvalidParameterError, ModelStoreError, OutputRefusedError
from daskclust.persistence.model import StoredModel, dataset_to_model, load_model, model_to_dataset, save_model

pytestmark = pytest.mark.boundscheck  # also run under NUMBA_BOUNDSCHECK=1 (README, .ci/run)

fsspec = pytest.importorskip("fsspec", reason="fsspec is needed for the memory:// URL tests")


def make_model(seed: int = 0, n_clusters: int = 4, n_features: int = 3) -> StoredModel:
    """A model with awkward values: NaN with a payload, -0.0, inf, ints and floats."""
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(n_clusters, n_features))
    centres[0, 0] = np.array([0x7FF8_0000_0000_0001], dtype=np.uint64).view(np.float64)[0]
    centres[1, 1] = -0.0
    centres[2, 2] = np.inf
    return StoredModel(
        kind="GaussianMixture",
        params={
            "n_clusters": n_clusters,
            "tol": 1e-4,
            "init": "k-means||",
            "warm": True,
            "seed": None,
            "grid": [1, 2.5],
        },
        arrays={
            "centres": centres,
            "weights": rng.dirichlet(np.ones(n_clusters)),
            "covariances": rng.normal(size=(n_clusters, n_features, n_features)),
            "counts": rng.integers(0, 100, size=n_clusters, dtype=np.int32),
            "mean": rng.normal(size=11),
        },
        scalars={"sigma2": 0.1 + 0.2, "n_iter": 3, "lower_bound": -np.inf, "inertia": float("nan")},
        history=[
            {"objective": 10.0 / 3.0, "n_changed": 7, "alpha": np.nan, "data": "coreset"},
            {"n_changed": 0, "alpha": 1e-300, "objective": 2.0**-1074, "data": "full"},
            {"objective": np.float64(1.5), "n_changed": np.int64(-2), "alpha": 5e300, "data": "fülł"},
        ],
    )


def assert_same_model(got: StoredModel, want: StoredModel) -> None:
    """Bit-exact arrays, equal params / scalars / history with the same key order and value types."""
    assert got.kind == want.kind
    assert got.params == want.params
    assert list(got.arrays) == list(want.arrays)
    for name, arr in want.arrays.items():
        assert isinstance(got.arrays[name], np.ndarray)
        assert got.arrays[name].dtype == arr.dtype and got.arrays[name].shape == arr.shape, name
        assert got.arrays[name].tobytes() == arr.tobytes(), name
    assert list(got.scalars) == list(want.scalars)
    for name, value in want.scalars.items():
        assert_same_number(got.scalars[name], value)
    assert len(got.history) == len(want.history)
    for got_row, want_row in zip(got.history, want.history):
        assert list(got_row) == list(want.history[0])
        for key, value in want_row.items():
            assert_same_number(got_row[key], value)


def assert_same_number(got, want) -> None:
    """``got`` is a Python int, float or str of the same kind as ``want``, bit for bit."""
    if isinstance(want, str):
        assert type(got) is str and got == want
    elif isinstance(want, (int, np.integer)):
        assert type(got) is int and got == want
    else:
        assert type(got) is float
        assert np.float64(got).tobytes() == np.float64(want).tobytes()


@pytest.fixture
def model_path(tmp_path: pathlib.Path) -> str:
    return str(tmp_path / "model.zarr")


@pytest.fixture
def memory_url():
    url = f"memory://daskclust-tests/{uuid.uuid4().hex}/model.zarr"
    yield url
    fs, root = fsspec.core.url_to_fs(url)
    if fs.exists(root):
        fs.rm(root, recursive=True)


def break_mark_complete(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make a save fail after its data is written, before it is marked complete."""

    def fail(location, kind, **kwargs):
        raise RuntimeError("killed before the completion mark")

    monkeypatch.setattr(io, "mark", fail)


def break_to_zarr(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make a save fail midway through writing its variables."""
    real_to_zarr = xr.Dataset.to_zarr

    def partial_to_zarr(self, *args, **kwargs):
        real_to_zarr(self[["centres"]], *args, **kwargs)
        raise RuntimeError("killed while writing the variables")

    monkeypatch.setattr(xr.Dataset, "to_zarr", partial_to_zarr)


def break_before_write(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make a save fail before it writes anything."""

    def fail(self, *args, **kwargs):
        raise RuntimeError("killed before writing")

    monkeypatch.setattr(xr.Dataset, "to_zarr", fail)


BREAKERS = [break_before_write, break_to_zarr, break_mark_complete]


# --------------------------------------------------------------------------- round trips


def test_round_trip_local(model_path):
    model = make_model()
    save_model(model_path, model)
    assert_same_model(load_model(model_path), model)


def test_round_trip_pathlike_and_empty_history(tmp_path):
    model = StoredModel("KMeans", {}, {"centres": np.eye(2)}, {}, [])
    save_model(tmp_path / "m.zarr", model)
    loaded = load_model(tmp_path / "m.zarr")
    assert_same_model(loaded, model)
    assert loaded.history == [] and loaded.scalars == {} and loaded.params == {}


def test_round_trip_memory_url(memory_url):
    model = make_model()
    save_model(memory_url, model, storage_options={})
    assert_same_model(load_model(memory_url, storage_options={}), model)
    assert_same_model(load_model(memory_url), model)


def test_dataset_layout():
    model = make_model()
    ds = model_to_dataset(model)
    assert ds["centres"].dims == ("cluster", "feature")
    assert ds["weights"].dims == ("cluster",)
    assert ds["covariances"].dims == ("cluster", "covariances_dim1", "covariances_dim2")
    assert ds["mean"].dims == ("mean_dim0",)
    assert ds["history_n_changed"].dims == ("iteration",)
    assert ds["history_n_changed"].dtype == np.int64
    assert ds["history_objective"].dtype == np.float64
    assert ds.attrs["daskclust_kind"] == "GaussianMixture"
    assert json.loads(ds.attrs["daskclust_params"]) == model.params
    assert list(json.loads(ds.attrs["daskclust_scalars"])) == list(model.scalars)
    assert json.loads(ds.attrs["daskclust_history_keys"]) == ["objective", "n_changed", "alpha", "data"]
    assert ds.attrs["daskclust_version"] == __version__
    assert ds.attrs["daskclust_format"] == 1
    assert "daskclust_complete" not in ds.attrs
    assert_same_model(dataset_to_model(ds), model)


def test_dataset_to_model_refuses_foreign_dataset():
    with pytest.raises(ModelStoreError, match="not a daskclust model"):
        dataset_to_model(xr.Dataset({"x": ("a", np.zeros(2))}))


@pytest.mark.parametrize(
    ("change", "match"),
    [
        ({"arrays": {"weights": np.ones(2)}}, "centres"),
        ({"arrays": {"centres": np.ones(3)}}, "centres"),
        ({"arrays": {"centres": np.ones((2, 2)), "history_x": np.ones(2)}}, "reserved"),
        ({"arrays": {"centres": np.ones((2, 2)), "w_dim0": np.ones(2)}}, "reserved"),
        ({"scalars": {"converged": True}}, "bool"),
        ({"scalars": {"name": "x"}}, "int or a float"),
        ({"history": [{"a": 1}, {"b": 1}]}, "keys"),
        ({"history": [{"a": 1}, {"a": 1.0}]}, "mixes int and float"),
        ({"history": [{"a": "full"}, {"a": 1.0}]}, "mixes float and str"),
        ({"history": [{"a": b"full"}]}, "int or a float"),
        ({"params": {"f": object()}}, "JSON"),
    ],
)
def test_invalid_models_are_refused(model_path, change, match):
    fields = {"kind": "KMeans", "params": {}, "arrays": {"centres": np.ones((2, 2))}, "scalars": {}}
    model = StoredModel(**{**fields, "history": [], **change})
    with pytest.raises(InvalidParameterError, match=match):
        save_model(model_path, model)
    assert not os.path.exists(model_path)


# --------------------------------------------------------------------------- overwriting


def test_overwrite_replaces_and_leaves_no_siblings(tmp_path, model_path):
    save_model(model_path, make_model(0))
    save_model(model_path, make_model(1, n_clusters=6), overwrite=True)
    assert_same_model(load_model(model_path), make_model(1, n_clusters=6))
    assert os.listdir(tmp_path) == ["model.zarr"]


@pytest.mark.parametrize("kwargs", [{}, {"overwrite": False}])
def test_an_existing_model_is_replaced_only_with_overwrite(model_path, kwargs):
    save_model(model_path, make_model(0))
    with pytest.raises(OutputRefusedError, match="pass overwrite=True"):
        save_model(model_path, make_model(1), **kwargs)
    assert_same_model(load_model(model_path), make_model(0))


@pytest.mark.parametrize("overwrite", [False, True])
def test_never_replaces_a_path_that_is_not_a_daskclust_model(tmp_path, overwrite):
    target = tmp_path / "data"
    target.mkdir()
    (target / "precious.txt").write_text("keep me")
    with pytest.raises(FileExistsError, match="not a store daskclust wrote"):
        save_model(target, make_model(), overwrite=overwrite)
    assert (target / "precious.txt").read_text() == "keep me"
    other = zarr.create_array(str(tmp_path / "other.zarr"), shape=(4, 2), dtype="f8")  # a zarr store, not ours
    other[:] = 1.0
    with pytest.raises(OutputRefusedError, match="not a store daskclust wrote"):
        save_model(tmp_path / "other.zarr", make_model(), overwrite=True)
    assert np.array_equal(zarr.open_array(str(tmp_path / "other.zarr"))[:], np.ones((4, 2)))


def test_overwrite_memory_url(memory_url):
    save_model(memory_url, make_model(0))
    save_model(memory_url, make_model(1, n_clusters=3), overwrite=True)
    assert_same_model(load_model(memory_url), make_model(1, n_clusters=3))
    with pytest.raises(FileExistsError):
        save_model(memory_url, make_model(0), overwrite=False)


def test_storage_options_with_local_path_are_refused(model_path):
    with pytest.raises(InvalidParameterError, match="storage_options"):
        save_model(model_path, make_model(), storage_options={"anon": True})


# --------------------------------------------------------------------------- interrupted saves


@pytest.mark.parametrize("breaker", BREAKERS)
def test_interrupted_local_save_keeps_old_model(tmp_path, model_path, monkeypatch, breaker):
    save_model(model_path, make_model(0))
    breaker(monkeypatch)
    with pytest.raises(RuntimeError, match="killed"):
        save_model(model_path, make_model(1), overwrite=True)
    assert_same_model(load_model(model_path), make_model(0))
    assert os.listdir(tmp_path) == ["model.zarr"]


def test_interrupted_first_local_save_leaves_nothing(tmp_path, model_path, monkeypatch):
    break_to_zarr(monkeypatch)
    with pytest.raises(RuntimeError, match="killed"):
        save_model(model_path, make_model())
    assert os.listdir(tmp_path) == []


def test_store_without_completion_mark_is_refused(model_path):
    model_to_dataset(make_model()).to_zarr(model_path, mode="w", zarr_format=3, consolidated=False)
    with pytest.raises(ModelStoreError, match="incomplete") as info:
        load_model(model_path)
    assert model_path in str(info.value)
    assert isinstance(info.value, OSError)


@pytest.mark.parametrize("breaker", BREAKERS)
def test_interrupted_save_to_url_is_refused(memory_url, monkeypatch, breaker):
    save_model(memory_url, make_model(0))
    breaker(monkeypatch)
    with pytest.raises(RuntimeError, match="killed"):
        save_model(memory_url, make_model(1), overwrite=True)
    with pytest.raises(ModelStoreError, match="does not exist|incomplete"):  # the partial store is removed
        load_model(memory_url)


# --------------------------------------------------------------------------- unreadable stores


def test_missing_path(tmp_path):
    path = str(tmp_path / "nothing.zarr")
    with pytest.raises(ModelStoreError, match="does not exist") as info:
        load_model(path)
    assert path in str(info.value)
    assert isinstance(info.value, OSError)


def test_missing_url(memory_url):
    with pytest.raises(ModelStoreError, match="does not exist"):
        load_model(memory_url)


@pytest.mark.parametrize("as_file", [False, True])
def test_not_a_zarr_store(tmp_path, as_file):
    path = tmp_path / "plain"
    if as_file:
        path.write_text("hello")
    else:
        path.mkdir()
    with pytest.raises(ModelStoreError, match="not a zarr v3 store") as info:
        load_model(path)
    assert str(path) in str(info.value)
    assert isinstance(info.value, OSError)


def test_zarr_store_that_is_not_a_model(model_path):
    group = zarr.open_group(model_path, mode="w", zarr_format=3)
    group.create_array("X", shape=(3, 2), dtype="f8")
    with pytest.raises(ModelStoreError, match="not a daskclust model") as info:
        load_model(model_path)
    assert model_path in str(info.value)


def test_newer_format_is_refused(model_path):
    save_model(model_path, make_model())
    zarr.open_group(model_path, mode="r+", zarr_format=3).attrs["daskclust_format"] = 2
    with pytest.raises(ModelStoreError, match="newer") as info:
        load_model(model_path)
    assert model_path in str(info.value)


def test_versions_and_training_data_are_recorded():
    """A store records the writer's versions and the training data; one written before they were has
    daskclust's version only and no data record."""
    import dataclasses

    from daskclust.versions import environment_versions

    data = {"source": {"url": "/d.zarr", "array": "X"}, "weights": None,
            "fingerprint": {"n_samples": 6, "n_features": 3, "dtype": "float32", "bounds": [0, 6], "weighted": False}}
    ds = model_to_dataset(dataclasses.replace(make_model(), data=data))
    got = dataset_to_model(ds)
    assert got.data == data and got.versions == environment_versions()
    assert got.versions["numpy"] == np.__version__
    del ds.attrs["daskclust_data"], ds.attrs["daskclust_versions"]
    old = dataset_to_model(ds)
    assert old.data is None and old.versions == {"daskclust": __version__}

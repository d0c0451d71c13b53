"""SketchedGaussianMixture: SGMM as an estimator, alone and with truncation and a coreset in one call."""

from __future__ import annotations

import os

import dask.array as da
import numpy as np
import pytest

import daskclust
from daskclust import SketchedGaussianMixture
from daskclust.errors import InvalidDataError, InvalidParameterError
from daskclust.transforms import Sketch, SketchedData

from conftest import blobs


@pytest.fixture(scope="module")
def data():
    return blobs(4000, 48, 6, seed=3, spread=6.0)


def test_fit_on_raw_rows_equals_fit_on_their_sketch(client, data):
    X, _ = data
    a = SketchedGaussianMixture(6, n_kept=8, n_shared=2, random_state=4).fit(X, client=client)
    sketched = Sketch(8, n_shared=2, random_state=4).fit_transform(X, client=client)
    b = SketchedGaussianMixture(6, n_kept=8, n_shared=2, random_state=4).fit(sketched, client=client)
    # the same sketch, so the same model (to round-off: vectorised sums may differ in their last bits)
    assert np.allclose(a.centres_, b.centres_, rtol=1e-12, atol=1e-12) and np.array_equal(a.labels_, b.labels_)
    assert a.sketch_transform_.n_kept == 8
    assert np.allclose(a.means_, a.sketch_transform_.invert(a.centres_))
    assert a.means_.shape == (6, 48) and a.covariances_.shape == (6, 48)
    F = [r["free_energy"] for r in a.history_]
    assert np.all(np.diff(F) >= -1e-9 * np.abs(F[1:]))


def test_means_come_back_in_the_raw_space_and_predict_works_on_both_inputs(client, data, tmp_path):
    X, centres = data
    model = SketchedGaussianMixture(6, n_kept=0.25, random_state=1).fit(X, client=client)
    # each true centre has a fitted mean close to it in the raw space
    d = np.linalg.norm(centres[:, None, :] - model.means_[None], axis=2)
    assert np.all(d.min(axis=1) < 1.0)
    raw = model.predict(X)
    assert raw.shape == (len(X),) and len(np.unique(raw)) == 6
    # on whole rows the fit's clusters are recovered (up to renumbering)
    truth = np.argmin(((X[:, None, :] - centres[None]) ** 2).sum(-1), axis=1)
    agree = np.mean([np.bincount(raw[truth == k]).max() / np.sum(truth == k) for k in range(6)])
    assert agree > 0.97
    Sketch(12, random_state=1).fit_transform(X, client=client, output=tmp_path / "s.zarr")
    lazy = model.predict(SketchedData.open(tmp_path / "s.zarr"))
    assert isinstance(lazy, da.Array)
    assert np.array_equal(lazy.compute(), model.predict(Sketch(12, random_state=1).fit_transform(X, client=client)))
    proba = model.predict_proba(X[:50])  # the whole posterior
    assert np.allclose(proba.sum(axis=1), 1.0)
    assert np.isfinite(model.score(X[:200]))
    sample, labels = model.sample(10, random_state=0)
    assert sample.shape == (10, 48)


@pytest.mark.parametrize("search", ["estimated", "sampled", "full"])
def test_truncation_coreset_and_sketch_in_one_call(client, data, search):
    X, _ = data
    model = SketchedGaussianMixture(6, n_kept=8, n_truncated=3, search=search, coreset=1024, refine_iter=3,
                                    random_state=2).fit(X, client=client)
    phases = [r["data"] for r in model.history_]
    assert phases[0] == "coreset" and phases[-1] == "full"
    assert phases.count("full") == model.n_iter_ + 1 <= 4
    full = [r["free_energy"] for r in model.history_ if r["data"] == "full"]
    assert np.all(np.diff(full) >= -1e-9 * np.abs(full[1:]))
    assert model.coreset_["size"] == 1024 and model.coreset_["n_distances"] >= len(X)
    # the full-data rows counted N rows' worth of pairs, the coreset rows m rows' worth
    first_full = next(r for r in model.history_ if r["data"] == "full")
    assert first_full["n_distances_points"] >= len(X)
    assert model.lower_bound_ == full[-1]


def test_save_and_load_keep_the_transform(client, data, tmp_path):
    X, _ = data
    model = SketchedGaussianMixture(6, n_kept=8, n_shared=3, random_state=5).fit(X, client=client)
    model.save(tmp_path / "m.zarr")
    back = daskclust.load(tmp_path / "m.zarr")
    assert isinstance(back, SketchedGaussianMixture)
    assert np.array_equal(back.sketch_transform_.signs, model.sketch_transform_.signs)
    assert np.array_equal(back.sketch_transform_.shared, model.sketch_transform_.shared)
    assert np.allclose(back.means_, model.means_)
    assert np.array_equal(back.predict(X), model.predict(X))


@pytest.mark.parametrize("kwargs, match", [
    (dict(n_kept=49), "n_kept"),
    (dict(n_kept=1.5), "fraction"),
    (dict(n_kept=8, n_shared=9), "n_shared"),
    (dict(n_kept=8, covariance_type="full"), "covariance_type"),
    (dict(n_kept=8, coreset=3), "coreset"),
])
def test_bad_parameters_are_refused_before_any_work(data, tmp_path, kwargs, match):
    X, _ = data
    with pytest.raises(InvalidParameterError, match=match):
        SketchedGaussianMixture(6, **kwargs).fit(X, client=object(), sketch_output=tmp_path / "s.zarr")
    assert not os.path.exists(tmp_path / "s.zarr")


def test_bad_data_is_refused(client, tmp_path):
    with pytest.raises(InvalidDataError, match="1 feature"):
        SketchedGaussianMixture(2, n_kept=1).fit(np.ones((40, 1)), client=object())
    X, _ = blobs(300, 8, 2)
    X[7, 0] = np.inf
    with pytest.raises(InvalidDataError, match="row 7"):
        SketchedGaussianMixture(2, n_kept=3).fit(X, client=client, sketch_output=tmp_path / "s.zarr")
    assert not os.path.exists(tmp_path / "s.zarr")
    w = np.zeros(300)
    X[7, 0] = 0.0
    with pytest.raises(InvalidDataError, match="sums to zero"):
        SketchedGaussianMixture(2, n_kept=3).fit(X, sample_weight=w, client=client)


def test_the_coreset_sketch_example_runs(tmp_path, capsys):
    """examples/coreset_sketch.py end to end, at a smaller size."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "examples" / "coreset_sketch.py"
    spec = importlib.util.spec_from_file_location("coreset_sketch_example", path)
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    example.N, example.P, example.C, example.CHUNK, example.M = 20_000, 64, 5, 5_000, 4096
    example.main(tmp_path)
    out = capsys.readouterr().out
    assert "coreset phase" in out and "full data: 3 E-steps" in out
    full = [float(f) for f in out.split("full data: 3 E-steps on 20,000 sketches, free energy ")[1].split("\n")[0]
            .split(" -> ")]
    assert full[0] <= full[1] <= full[2]  # refining on all sketches never lowers the bound
    purity = float(out.rsplit("purity of the clusters on the sketches: ", 1)[1].split()[0])
    assert purity > 0.7  # 5 classes; a broken coreset of sketches gave 0.2-0.3 here

"""Estimators with ``coreset=m`` and ``refine_iter=k``: a fit on a lightweight coreset, reported (and
refined) on the full data; bad input refused before any work."""

from __future__ import annotations

import numpy as np
import pytest
import zarr
from scipy.special import logsumexp
from sklearn.base import clone

import daskclust
from daskclust.cli import main
from daskclust.errors import InvalidDataError, InvalidParameterError
from daskclust.fit import derive_seeds

from conftest import birch, snapshot


@pytest.fixture(scope="module")
def data():
    """BIRCH, C = 25, 2000 rows (4 chunks of 500 in the fits)."""
    return birch(25, points=80, seed=1)[0]


def full_rows(model):
    return [row for row in model.history_ if row["data"] == "full"]


def exact_qe(X, centres):
    return float(((X[:, None, :] - centres[None]) ** 2).sum(-1).min(1).sum())


def diag_log_likelihood(X, weights, means, variances):
    """Mean log sum_c pi_c N(x; mu_c, diag(var_c)) over the rows, in numpy."""
    log_n = -0.5 * (np.log(2 * np.pi * variances).sum(1)[None, :]
                    + (((X[:, None, :] - means[None]) ** 2) / variances[None]).sum(-1))
    with np.errstate(divide="ignore"):
        return float(logsumexp(np.log(weights)[None, :] + log_n, axis=1).mean())


# ------------------------------------------------------------------ (a) quality on the full data


@pytest.mark.parametrize("search, refine_iter", [("estimated", 0), ("full", 2)])
def test_kmeans_reports_the_full_data(client, data, search, refine_iter):
    rows = []
    model = daskclust.KMeans(25, coreset=300, refine_iter=refine_iter, search=search, random_state=0,
                             chunk_rows=500, callback=rows.append).fit(data, client=client)
    kinds = [row["data"] for row in model.history_]
    assert kinds == sorted(kinds) and kinds[0] == "coreset"  # coreset rows, then full rows
    assert len(full_rows(model)) == model.n_iter_ + 1 and model.n_iter_ <= refine_iter
    qe = exact_qe(data, model.centres_)  # sum_n min_c ||x_n - mu_c||^2 over the FULL data
    assert model.history_[-1]["quantization_error"] == pytest.approx(qe, rel=1e-9)
    assert model.inertia_ == pytest.approx(qe, rel=1e-9)
    assert rows == model.history_  # the callback saw both phases
    assert model.coreset_["size"] == 300
    assert model.coreset_["n_distances"] == 2 * len(data)  # pass 2: every row; pass 3: every chunk draws
    assert abs(model.coreset_["total_weight"] / len(data) - 1) < 0.2
    np.testing.assert_array_equal(model.labels_, model.predict(data))


@pytest.mark.parametrize("refine_iter", [0, 2])
def test_gmm_free_energy_is_the_full_log_likelihood(client, data, refine_iter):
    """With C' = C the free energy is the log-likelihood per point: the last row's is the full data's."""
    model = daskclust.GaussianMixture(25, covariance_type="diag", n_truncated=None, coreset=400,
                                      refine_iter=refine_iter, random_state=0, chunk_rows=500).fit(data, client=client)
    assert model.history_[-1]["data"] == "full" and model.history_[0]["data"] == "coreset"
    ll = diag_log_likelihood(data, model.weights_, model.means_, model.covariances_)
    assert model.lower_bound_ == pytest.approx(ll, rel=1e-9)
    assert model.score(data, exact=True) == pytest.approx(ll, rel=1e-9)


# ------------------------------------------------------------------ (b) refinement


@pytest.mark.parametrize("search", ["estimated", "full", "exhaustive", "sampled"])
@pytest.mark.parametrize("kind", ["kmeans", "diag"])
def test_refine_iter_runs_k_monotone_m_steps_on_the_full_data(client, data, kind, search):
    params = dict(coreset=200, refine_iter=3, search=search, random_state=3, tol=0, chunk_rows=500)
    model = (daskclust.KMeans(25, **params) if kind == "kmeans"
             else daskclust.GaussianMixture(25, covariance_type="diag", **params)).fit(data, client=client)
    full = full_rows(model)
    assert model.n_iter_ == 3 and [row["iteration"] for row in full] == [0, 1, 2, 3]  # 3 M-steps, 4 E-steps
    F = np.array([row["free_energy"] for row in full])
    assert np.all(np.diff(F) >= -1e-12 * np.abs(F[1:]))
    on_coreset = np.array([row["free_energy"] for row in model.history_ if row["data"] == "coreset"])
    assert len(on_coreset) >= 2 and np.all(np.diff(on_coreset) >= -1e-12 * np.abs(on_coreset[1:]))


def test_n_init_runs_on_the_coreset_and_refines_the_best_once(client, data):
    model = daskclust.KMeans(25, coreset=200, refine_iter=1, n_init=2, random_state=5, tol=0,
                             chunk_rows=500).fit(data, client=client)
    coreset_rows = [row for row in model.history_ if row["data"] == "coreset"]
    assert [row["iteration"] for row in coreset_rows] == list(range(len(coreset_rows)))  # the kept run only
    assert [row["iteration"] for row in full_rows(model)] == [0, 1]
    assert model.seed_ in derive_seeds(5, 2)


# ------------------------------------------------------------------ (c) workers


def test_same_fit_on_one_and_two_workers(client, client_one_worker, data):
    """The coreset is the same bits; the fits then agree as every fit does across layouts (the merge
    tree changes sums by round-off only, tests/em/test_properties.py)."""
    for make in (lambda: daskclust.KMeans(25, coreset=300, refine_iter=2, random_state=4, chunk_rows=500),
                 lambda: daskclust.GaussianMixture(25, coreset=300, refine_iter=2, n_init=2, random_state=4,
                                                   chunk_rows=500)):
        two, one = make().fit(data, client=client), make().fit(data, client=client_one_worker)
        assert two.coreset_["total_weight"] == one.coreset_["total_weight"]
        assert two.coreset_["n_distances"] == one.coreset_["n_distances"]
        for name in ("means", "weights", "covariances"):
            np.testing.assert_allclose(getattr(two._model(), name), getattr(one._model(), name), rtol=1e-12, atol=1e-12)
        assert (two.n_iter_, two.seed_) == (one.n_iter_, one.seed_)
        for key in ("iteration", "data", "n_changed", "n_distances"):
            assert [row[key] for row in two.history_] == [row[key] for row in one.history_]
        np.testing.assert_allclose([row["free_energy"] for row in two.history_],
                                   [row["free_energy"] for row in one.history_], rtol=1e-12)


# ------------------------------------------------------------------ (d) bad input


@pytest.mark.parametrize("params, match", [
    ({"coreset": 3}, r"coreset=3 rows cannot hold 5 clusters"),
    ({"coreset": 2.5}, "coreset must be an integer"),
    ({"coreset": "100"}, "coreset must be an integer"),
    ({"coreset": True}, "coreset must be an integer"),
    ({"coreset": 0}, "coreset must be >= 1"),
    ({"refine_iter": -1}, "refine_iter must be >= 0"),
    ({"refine_iter": 1.0}, "refine_iter must be an integer"),
])
@pytest.mark.parametrize("cls", [daskclust.KMeans, daskclust.GaussianMixture])
def test_bad_parameters_before_any_work(tmp_path, cls, params, match):
    store = str(tmp_path / "X.zarr")
    zarr.create_array(store, shape=(100, 2), chunks=(50, 2), dtype="f8")[:] = np.ones((100, 2))
    before = snapshot(tmp_path)
    model = cls(5, **{"coreset": 50, **params})
    with pytest.raises(InvalidParameterError, match=match):
        model.fit(store, client=object())  # raised before the client is touched
    assert snapshot(tmp_path) == before and not hasattr(model, "centres_")


def test_checkpoint_and_resume_are_refused(tmp_path):
    X = np.ones((100, 2))
    for option in ("checkpoint", "resume"):
        with pytest.raises(InvalidParameterError, match="checkpoint and resume are for fits on the full data"):
            daskclust.KMeans(5, coreset=50).fit(X, client=object(), **{option: str(tmp_path / "run.zarr")})
    assert list(tmp_path.iterdir()) == []


def test_all_zero_weights_refused_and_nothing_written(client, tmp_path):
    store = str(tmp_path / "X.zarr")
    zarr.create_array(store, shape=(200, 2), chunks=(50, 2), dtype="f8")[:] = birch(4, points=50)[0]
    before = snapshot(tmp_path)
    model = daskclust.KMeans(4, coreset=50, state="zarr", state_store=str(tmp_path / "state.zarr"))
    with pytest.raises(InvalidDataError, match="sample_weight sums to zero"):
        model.fit(store, sample_weight=np.zeros(200), client=client)
    assert snapshot(tmp_path) == before and not hasattr(model, "centres_")


# ------------------------------------------------------------------ (e) m > N, saving, the CLI


def test_coreset_larger_than_the_data(client):
    """Draws are with replacement, so m may exceed N (documented): the coreset repeats rows."""
    X, _ = birch(4, points=40, seed=2)  # 160 rows
    model = daskclust.KMeans(4, coreset=1000, refine_iter=1, random_state=0).fit(X, client=client)
    assert model.coreset_["size"] == 1000 and abs(model.coreset_["total_weight"] / len(X) - 1) < 0.2
    assert model.history_[-1]["data"] == "full"
    assert model.inertia_ == pytest.approx(exact_qe(X, model.centres_), rel=1e-9)


def test_save_load_clone_and_plain_fits(client, data, tmp_path):
    model = daskclust.GaussianMixture(25, coreset=300, refine_iter=1, random_state=0,
                                      chunk_rows=500).fit(data, client=client)
    assert model.get_params()["coreset"] == 300 and model.get_params()["refine_iter"] == 1
    assert clone(model).get_params() == model.get_params()
    model.save(tmp_path / "m.zarr")
    loaded = daskclust.load(tmp_path / "m.zarr")
    assert loaded.coreset == 300 and loaded.refine_iter == 1
    assert loaded.coreset_ == model.coreset_ and loaded.history_ == model.history_
    np.testing.assert_array_equal(loaded.predict(data), model.predict(data))
    plain = daskclust.KMeans(25, random_state=0, max_iter=2).fit(data, client=client)
    assert plain.coreset_ is None and {row["data"] for row in plain.history_} == {"full"}
    plain.save(tmp_path / "p.zarr")
    assert daskclust.load(tmp_path / "p.zarr").coreset_ is None


def test_cli_coreset_options(client, tmp_path):
    store, out = str(tmp_path / "d.zarr"), tmp_path / "m.zarr"
    assert main(["make-data", "birch", "--output", store, "--clusters", "9", "--points-per-cluster", "30"]) == 0
    assert main(["fit", store, "--clusters", "9", "--coreset", "100", "--refine-iter", "2", "--output", str(out),
                 "--scheduler", client.scheduler.address, "--quiet"]) == 0
    model = daskclust.load(out)
    assert model.coreset == 100 and model.refine_iter == 2 and model.coreset_["size"] == 100
    assert model.history_[0]["data"] == "coreset" and model.history_[-1]["data"] == "full"

"""CellGaussianMixture (Verbeek et al. 2006): exact EM on the finest partition, a monotone bound, layout independence."""

from __future__ import annotations

import numpy as np
import pytest
import zarr

from daskclust import CellGaussianMixture, GaussianMixture
from daskclust.errors import InvalidParameterError


def mixture(n=6000, C=5, D=2, seed=0, sep=6.0):
    rng = np.random.default_rng(seed)
    mu = rng.normal(scale=sep, size=(C, D))
    return mu[rng.integers(C, size=n)] + rng.normal(size=(n, D)), mu


def start(mu, D, kind):
    C = len(mu)
    precisions = np.ones((C, D)) if kind == "diag" else np.broadcast_to(np.eye(D), (C, D, D)).copy()
    return dict(means_init=mu + 0.3, weights_init=np.full(C, 1 / C), precisions_init=precisions)


@pytest.mark.parametrize("kind", ["diag", "full"])
def test_finest_partition_is_exact_em(client, kind):
    """leaf_size=1 and a depth past every leaf: each cell is one row, V_A = 0, and the cell EM is the
    dense family's exact EM iteration by iteration."""
    X, mu = mixture(n=1500, D=3)
    common = dict(covariance_type=kind, n_truncated=None, search="full", max_iter=6, tol=0, chunk_rows=400,
                  **start(mu, 3, kind))
    cells = CellGaussianMixture(5, leaf_size=1, initial_depth=10_000, max_refine=0, **common).fit(X, client=client)
    rows = GaussianMixture(5, **common).fit(X, client=client)
    assert cells.refinement_[0]["cells"] == cells.refinement_[0]["leaves"] == len(X)
    fc = [r["free_energy"] for r in cells.history_]
    fr = [r["free_energy"] for r in rows.history_]
    assert len(fc) == len(fr) == 7
    assert np.allclose(fc, fr, rtol=0, atol=1e-8)
    assert np.allclose(cells.means_, rows.means_, rtol=0, atol=1e-8)
    assert np.allclose(cells.covariances_, rows.covariances_, rtol=0, atol=1e-8)
    assert np.allclose(cells.weights_, rows.weights_, rtol=0, atol=1e-10)


@pytest.mark.filterwarnings("ignore::daskclust.errors.ConvergenceWarning")  # a component may die: F stays monotone
@pytest.mark.parametrize("kind", ["diag", "full"])
@pytest.mark.parametrize("search, n_truncated", [("full", None), ("estimated", 3), ("sampled", 3)])
def test_bound_never_decreases_through_em_and_refinement(client, kind, search, n_truncated):
    X, _ = mixture(n=20000, C=8, seed=1)
    model = CellGaussianMixture(8, covariance_type=kind, search=search, n_truncated=n_truncated, random_state=0,
                                tol=1e-6, chunk_rows=2500).fit(X, client=client)
    F = np.array([r["free_energy"] for r in model.history_])
    assert np.all(np.diff(F) >= -1e-9 * np.abs(F[1:]))
    rounds = model.refinement_
    assert len(rounds) >= 2 and rounds[-1]["cells"] > rounds[0]["cells"]
    # the bound lies below the exact log-likelihood of the same parameters
    assert model.lower_bound_ <= model.score(X, exact=True) + 1e-9


def test_same_partition_and_model_on_one_and_two_workers(client, client_one_worker):
    X, _ = mixture(n=12000, C=6, seed=2)
    fit = lambda c: CellGaussianMixture(6, random_state=3, chunk_rows=1500).fit(X, client=c)  # noqa: E731
    a, b = fit(client), fit(client_one_worker)
    assert [r["cells"] for r in a.refinement_] == [r["cells"] for r in b.refinement_]
    assert np.allclose(a.means_, b.means_, rtol=1e-10, atol=1e-10)
    assert np.allclose(a.covariances_, b.covariances_, rtol=1e-10, atol=1e-12)


def test_streamed_trees_equal_persisted_ones(client, tmp_path):
    X, _ = mixture(n=8000, C=4, seed=4)
    zarr.create_array(tmp_path / "x.zarr", data=X, chunks=(1000, 2))
    path = str(tmp_path / "x.zarr")
    streamed = CellGaussianMixture(4, random_state=1, memory_budget=1).fit(path, client=client)
    persisted = CellGaussianMixture(4, random_state=1).fit(path, client=client)
    assert [r["cells"] for r in streamed.refinement_] == [r["cells"] for r in persisted.refinement_]
    assert np.allclose(streamed.means_, persisted.means_, rtol=1e-10, atol=1e-10)
    # after the trees are built, EM reads no rows: the streamed fit read the store for the seeding
    # passes and the tree pass only, not once per iteration
    assert streamed.bytes_read_ < (len(streamed.history_) + 1) * X.nbytes


def test_small_chunks_duplicates_constant_columns_and_one_feature(client):
    rng = np.random.default_rng(5)
    X = np.repeat(rng.normal(scale=5, size=(40, 3)), 25, axis=0)  # duplicated rows: zero-variance cells
    X[:, 2] = 7.0  # a constant column
    model = CellGaussianMixture(4, leaf_size=64, chunk_rows=30, random_state=0).fit(X, client=client)
    assert np.all(np.isfinite(model.means_)) and np.all(np.isfinite(model.covariances_))
    one = CellGaussianMixture(3, random_state=0).fit(mixture(n=3000, C=3, D=1)[0], client=client)
    assert one.means_.shape == (3, 1) and np.isfinite(one.lower_bound_)


def test_bad_parameters():
    X, _ = mixture(n=500)
    for kwargs, match in ((dict(covariance_type="spherical"), "covariance_type"), (dict(leaf_size=0), "leaf_size"),
                          (dict(refine_fraction=0.0), "refine_fraction"), (dict(coreset=100), "coreset")):
        with pytest.raises(InvalidParameterError, match=match):
            CellGaussianMixture(3, **kwargs).fit(X, client=object())


def separated_mixture(k=5, D=2, c=2.0, n=20000, n_val=2000, seed=0):
    """Verbeek et al. 2006 Sec. 7: k unit-covariance components whose means are at least c sqrt(D) apart."""
    rng = np.random.default_rng(seed)
    while True:
        mu = rng.uniform(-6, 6, size=(k, D))
        gaps = np.linalg.norm(mu[:, None] - mu[None], axis=2) + np.eye(k) * 1e9
        if gaps.min() >= c * np.sqrt(D):
            break
    X = mu[rng.integers(k, size=n + n_val)] + rng.normal(size=(n + n_val, D))
    d2 = ((X[n:, None, :] - mu[None]) ** 2).sum(axis=2)
    true_ll = float(np.mean(np.log(np.exp(-0.5 * d2).mean(axis=1)) - 0.5 * D * np.log(2 * np.pi)))
    return X[:n], X[n:], true_ll


@pytest.mark.parametrize("criterion", ["held_out", "bic"])
def test_greedy_learning_finds_the_five_components(client, criterion):
    from daskclust import GreedyGaussianMixture

    X, X_val, true_ll = separated_mixture()
    model = GreedyGaussianMixture(8, random_state=0, chunk_rows=2500)
    model.fit(X, X_val=X_val if criterion == "held_out" else None, client=client)
    assert model.n_components_ == 5
    assert abs(model.score(X_val, exact=True) - true_ll) <= 0.01 * abs(true_ll)
    ks = [row["k"] for row in model.components_]
    assert ks == list(range(1, len(ks) + 1)) and len(ks) >= 6  # it tried one more and stopped
    F = [row["free_energy"] for row in model.components_]
    assert all(b >= a - 1e-9 * abs(a) for a, b in zip(F[:5], F[1:5]))  # each addition raised the bound


@pytest.mark.parametrize("bad, match", [
    (lambda X: X[:, :1], "X_val has 1 features, X has 2"),
    (lambda X: np.hstack([X, X]), "X_val has 4 features, X has 2"),
    (lambda X: np.full_like(X, np.nan), "X_val: X contains NaN or inf in row 0"),
    (lambda X: X[:0], r"non-empty 2-D array of rows, got shape \(0, 2\)"),
    (lambda X: X[0], r"non-empty 2-D array of rows, got shape \(2,\)"),
    (lambda X: np.array([["a", "b"]]), "X_val must be numeric rows"),
])
def test_greedy_validation_rows_are_checked_before_any_work(monkeypatch, bad, match):
    """Rows of another width were read past their ends inside numba; all-NaN rows chose one component."""
    import daskclust.fit as base  # where the fit connects to the cluster
    from daskclust import GreedyGaussianMixture
    from daskclust.errors import InvalidDataError

    monkeypatch.setattr(base, "connect", lambda *a, **k: pytest.fail("no cluster work may start"))
    X, _ = mixture(n=400, C=2, seed=1)
    with pytest.raises(InvalidDataError, match=match):
        GreedyGaussianMixture(3).fit(X, X_val=bad(X))


def test_trees_are_saved_and_reused_across_fits(client, tmp_path):
    X, _ = mixture(n=8000, C=4, seed=6)
    zarr.create_array(tmp_path / "x.zarr", data=X, chunks=(1000, 2))
    path, trees = str(tmp_path / "x.zarr"), str(tmp_path / "trees")
    first = CellGaussianMixture(4, random_state=2, memory_budget=1, tree_store=trees).fit(path, client=client)
    again = CellGaussianMixture(4, random_state=2, memory_budget=1, tree_store=trees).fit(path, client=client)
    assert np.allclose(first.means_, again.means_, rtol=1e-10, atol=1e-10)
    assert [r["cells"] for r in first.refinement_] == [r["cells"] for r in again.refinement_]
    # the trees cost no pass of their own (built with the seeding's first), so reading them back saves none
    plain = CellGaussianMixture(4, random_state=2, memory_budget=1).fit(path, client=client)
    assert first.bytes_read_ == again.bytes_read_ == plain.bytes_read_
    with pytest.raises(InvalidParameterError, match="other data or settings: leaf_size: store 16, this fit 8"):
        CellGaussianMixture(4, leaf_size=8, tree_store=trees).fit(path, client=client)
    other = X.copy()
    other[4321, 0] += 0.5  # same shape, dtype and chunking: only the content says it is other data
    zarr.create_array(tmp_path / "y.zarr", data=other, chunks=(1000, 2))
    with pytest.raises(InvalidParameterError, match="other data or settings: content: store '"):
        CellGaussianMixture(4, random_state=2, memory_budget=1, tree_store=trees).fit(str(tmp_path / "y.zarr"),
                                                                                      client=client)


def test_same_model_after_resume(client, tmp_path):
    from daskclust.persistence import checkpoint

    from conftest import Interrupt

    X, _ = mixture(n=12000, C=5, seed=7)

    def model(**kw):
        return CellGaussianMixture(5, random_state=1, tol=0, max_iter=8, chunk_rows=1500, **kw)

    whole = model().fit(X, client=client)
    assert len(whole.refinement_) >= 2 and len(whole.history_) > 13  # round 0 has 9 rows (tol=0, max_iter=8)
    rows = []

    def interrupt_in_round_one(row):
        rows.append(row)
        if len(rows) == 13:
            raise Interrupt("stopped in the second refinement round")

    with pytest.raises(Interrupt):
        model(callback=interrupt_in_round_one).fit(X, client=client, checkpoint=tmp_path / "run", checkpoint_every=2)
    last = checkpoint.list_checkpoints(str(tmp_path / "run"))[-1]
    assert int(last[len("ckpt-"):]) > 9  # written in round 1 (named by history rows: no clash with round 0's)
    resumed = model().fit(X, client=client, resume=tmp_path / "run")
    assert resumed.refinement_[-1]["cells"] == whole.refinement_[-1]["cells"]
    assert len(resumed.history_) == len(whole.history_)
    assert np.allclose(resumed.means_, whole.means_, rtol=1e-10, atol=1e-10)
    assert np.allclose(resumed.covariances_, whole.covariances_, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("precisions", [False, True])
def test_given_means_read_the_rows_once(client, tmp_path, precisions):
    """Given means_init, the seeding's first pass is the only read of a streamed store: the trees ride along it,
    each cell starts from the centre nearest to its mean, sigma^2 (without precisions_init) comes from the
    leaves. The model is the one of the same rows in memory, as good as exact EM's."""
    X, mu = mixture(n=8000, C=4, seed=8)
    zarr.create_array(tmp_path / "x.zarr", data=X, chunks=(1000, 2))
    common = dict(covariance_type="full", means_init=mu + 0.3, random_state=0,
                  **({"precisions_init": np.broadcast_to(np.eye(2) / 2, (4, 2, 2)).copy()} if precisions else {}))
    streamed = CellGaussianMixture(4, memory_budget=1, **common).fit(str(tmp_path / "x.zarr"), client=client)
    assert streamed.bytes_read_ == X.nbytes
    persisted = CellGaussianMixture(4, chunk_rows=1000, **common).fit(X, client=client)
    assert [r["cells"] for r in streamed.refinement_] == [r["cells"] for r in persisted.refinement_]
    assert np.allclose(streamed.means_, persisted.means_, rtol=1e-10, atol=1e-10)
    assert abs(streamed.score(X, exact=True) - GaussianMixture(4, **common).fit(X, client=client).score(X)) \
        <= 0.005 * abs(streamed.score(X, exact=True))

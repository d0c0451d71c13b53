"""Stepwise EM (partial_fit's engine): the re-centred statistics, exact EM when every step sees all
rows with step 1, the exact average during the burn-in, the truncated sets, and blocks."""

from __future__ import annotations

import copy

import numpy as np
import pytest

from daskclust.em import stepwise
from daskclust.em.stepwise import StepwiseEM, chunk_stats
from daskclust.errors import InvalidDataError
from daskclust.models import FAMILIES, Params

from conftest import blobs
from reference import gaussian_em_step, gaussian_log_joint, mixture_data

WEIGHTED = ("spherical", "diag", "full", "tied")


def start(family_name: str, X: np.ndarray, C: int, seed: int = 0) -> Params:
    """Distinct rows as means, unequal weights, the family's covariances of 1.5 I."""
    rng = np.random.default_rng(seed)
    family = FAMILIES[family_name]
    means = X[rng.choice(len(X), C, replace=False)]
    weights = rng.dirichlet(np.full(C, 5.0)) if family.learn_weights else np.full(C, 1.0 / C)
    return Params(means, weights, family.initial_covariances(1.5, C, X.shape[1]))


def responsibilities(X: np.ndarray, params: Params, family_name: str) -> np.ndarray:
    """Exact posteriors (N, C), textbook numpy."""
    C = len(params.means)
    cov = np.broadcast_to(params.covariances, (C, *params.covariances.shape)) if family_name == "tied" \
        else params.covariances
    lj = gaussian_log_joint(X, params.weights, params.means, cov, "full" if family_name == "tied" else family_name)
    lj -= lj.max(1, keepdims=True)
    R = np.exp(lj)
    return R / R.sum(1, keepdims=True)


def second_moment(X, R, centres, family_name):
    """sum_n R_nc (y_n - m_c)(y_n - m_c)^T in the family's layout (trace; diagonal; upper triangles; one
    shared upper triangle)."""
    out = []
    for c in range(len(centres)):
        diff = X - centres[c]
        full = (R[:, c, None] * diff).T @ diff
        out.append({"spherical": np.trace(full), "diag": np.diag(full)}.get(family_name, np.triu(full)))
    out = np.array(out)
    return out.sum(0) if family_name == "tied" else out


@pytest.mark.parametrize("family_name", WEIGHTED)
def test_recentred_statistics_are_the_second_moments_about_the_new_means(family_name):
    X = mixture_data(seed=3, n=700, D=3, C=5)
    family = FAMILIES[family_name]
    params = start(family_name, X, 5)
    stats, _ = chunk_stats(family, params, family.kernel_params(params), X, np.empty(0), 5)
    new = family.m_step(stats, params, 1e-6)
    recentred = family.moved(stats, params.means, new.means)
    R = responsibilities(X, params, family_name)
    np.testing.assert_allclose(recentred.S2, second_moment(X, R, new.means, family_name), rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(recentred.S0, R.sum(0), rtol=1e-10)


@pytest.mark.parametrize("family_name", WEIGHTED)
def test_moved_statistics_are_the_second_moments_about_any_means(family_name):
    """Family.moved: statistics about the E-step's means re-centred about means that are not their own
    M-step's (incremental EM's sum of chunks); a component without weight keeps zero statistics."""
    X = mixture_data(seed=3, n=700, D=3, C=5)
    family = FAMILIES[family_name]
    params = start(family_name, X, 5)
    stats, _ = chunk_stats(family, params, family.kernel_params(params), X[:400], np.empty(0), 5)
    elsewhere = params.means + np.random.default_rng(1).normal(0.0, 2.0, params.means.shape)
    moved = family.moved(stats, params.means, elsewhere)
    R = responsibilities(X[:400], params, family_name)
    np.testing.assert_allclose(moved.S2, second_moment(X[:400], R, elsewhere, family_name), rtol=1e-9, atol=1e-9)
    np.testing.assert_array_equal(moved.S1, stats.S1)
    empty = stats.__class__(*(np.zeros_like(a) for a in stats.arrays()), stats.scal)
    assert not family.moved(empty, params.means, elsewhere).S2.any()


@pytest.mark.parametrize("decay", [0.0, stepwise.STEP_DECAY])
@pytest.mark.parametrize("family_name", ["spherical", "diag", "full"])
def test_a_stream_of_the_whole_data_is_exact_em(family_name, decay):
    """A stream whose every chunk is the whole data with C' = C is EM: the first step takes the chunk's
    statistics whole, and every later one comes back to the chunk (an incremental EM epoch of one chunk,
    whatever kappa): each step equals a textbook EM iteration, its free energy the log-likelihood."""
    X = mixture_data(seed=1, n=900, D=3, C=6)
    w = np.ones(len(X))
    family = FAMILIES[family_name]
    params = start(family_name, X, 6)
    em = StepwiseEM(family, 6, 1e-6, params, decay=decay)
    weights, means, cov = params.weights, params.means, params.covariances
    for _ in range(5):
        figures = em.step(X, np.empty(0))
        loglik, weights, means, cov = gaussian_em_step(X, w, weights, means, cov, family_name, 1e-6)
        np.testing.assert_allclose(figures["free_energy"], loglik, rtol=1e-10)
        np.testing.assert_allclose(em.params.means, means, rtol=1e-9, atol=1e-9)
        np.testing.assert_allclose(em.params.weights, weights, rtol=1e-9, atol=1e-12)
        np.testing.assert_allclose(em.params.covariances, cov, rtol=1e-8, atol=1e-10)


def test_burn_in_keeps_the_start_and_averages_the_chunks_exactly(monkeypatch):
    """Before BURN_IN (D + 1) C rows no M-step: the parameters stay the start's and the running statistics
    are those of all rows seen so far per unit weight, whatever the chunks' sizes."""
    X = mixture_data(seed=2, n=600, D=3, C=4)
    w = np.random.default_rng(0).uniform(0.5, 2.0, len(X))
    family = FAMILIES["diag"]
    params = start("diag", X, 4)
    monkeypatch.setattr(stepwise, "BURN_IN", 1000)
    em = StepwiseEM(family, 2, 1e-6, params)
    for lo, hi in [(0, 100), (100, 130), (130, 600)]:
        em.step(X[lo:hi], w[lo:hi])
    assert em.params is params
    whole, _ = chunk_stats(family, params, family.kernel_params(params), X, w, 2)
    for got, want in zip(em.stats.arrays(), whole.arrays()):
        np.testing.assert_allclose(got, want / w.sum(), rtol=1e-12, atol=1e-15)


def test_rows_keep_their_exact_best_components():
    """The truncated E-step of a stream: each row's C' components of largest posterior (exact, whatever
    the Euclidean distances say), its responsibilities renormalised over them."""
    rng = np.random.default_rng(4)
    X = mixture_data(seed=4, n=800, D=3, C=8)
    family = FAMILIES["diag"]
    C = 8
    params = Params(X[rng.choice(len(X), C, replace=False)], rng.dirichlet(np.ones(C)),
                    rng.uniform(0.05, 20.0, (C, 3)))  # unequal variances: the nearest mean is often not the best
    stats, sets = chunk_stats(family, params, family.kernel_params(params), X, np.empty(0), 2)
    R = responsibilities(X, params, "diag")
    top = np.argsort(-R, axis=1)[:, :2]
    Q = np.zeros_like(R)
    np.put_along_axis(Q, top, np.take_along_axis(R, top, 1), 1)
    Q /= Q.sum(1, keepdims=True)
    nearest = np.argmin(((X[:, None] - params.means[None]) ** 2).sum(-1), axis=1)
    assert np.mean(nearest != top[:, 0]) > 0.1  # the case the family's own cost decides
    np.testing.assert_allclose(stats.S0, Q.sum(0), rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(stats.S1, Q.T @ X, rtol=1e-9, atol=1e-9)
    np.testing.assert_array_equal(sets, top)


def test_statistics_do_not_depend_on_the_blocks(monkeypatch):
    X = mixture_data(seed=5, n=3000, D=4, C=6)
    family = FAMILIES["full"]
    params = start("full", X, 6)
    kernel = family.kernel_params(params)
    one, one_sets = chunk_stats(family, params, kernel, X, np.empty(0), 3)
    monkeypatch.setattr(stepwise, "BLOCK_ROWS", 257)
    many, many_sets = chunk_stats(family, params, kernel, X, np.empty(0), 3)
    for a, b in zip(one.arrays(), many.arrays()):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)
    np.testing.assert_array_equal(one_sets, many_sets)


def textbook_m_step(raw, family_name: str) -> tuple:
    """Weights, means and covariances (+ 1e-6) of raw moments (sum q, sum q y, sum q y y^T)."""
    weights, means = raw[0] / raw[0].sum(), raw[1] / raw[0][:, None]
    full = raw[2] / raw[0][:, None, None] - np.einsum("ci,cj->cij", means, means)
    diag = np.diagonal(full, axis1=1, axis2=2)
    cov = {"spherical": diag.mean(1) + 1e-6, "diag": diag + 1e-6}.get(family_name, full + 1e-6 * np.eye(3))
    return weights, means, cov


@pytest.mark.parametrize("family_name", ["spherical", "diag", "full"])
def test_stream_equals_stepwise_em_on_raw_moments(family_name):
    """A stream of unequal chunks against stepwise EM written on raw moments (sum q, sum q y, sum q y y^T:
    nothing to re-centre), eta_t = (W_t / W_<=t)^kappa, then the textbook M-step."""
    X = mixture_data(seed=6, n=1500, D=3, C=5)
    family = FAMILIES[family_name]
    params = start(family_name, X, 5)
    em = StepwiseEM(family, 5, 1e-6, params)
    weights, means, cov = params.weights, params.means, params.covariances
    raw, seen = None, 0.0
    for lo, hi in [(0, 500), (500, 700), (700, 1100), (1100, 1500)]:
        em.step(X[lo:hi], np.empty(0))
        Y = X[lo:hi]
        R = responsibilities(Y, Params(means, weights, cov), family_name)
        chunk = [R.sum(0) / len(Y), R.T @ Y / len(Y), np.einsum("nc,ni,nj->cij", R, Y, Y) / len(Y)]
        seen += len(Y)
        eta = (len(Y) / seen) ** stepwise.STEP_DECAY if raw is not None else 1.0
        raw = chunk if raw is None else [(1 - eta) * a + eta * b for a, b in zip(raw, chunk)]
        weights, means, cov = textbook_m_step(raw, family_name)
        np.testing.assert_allclose(em.params.means, means, rtol=1e-9, atol=1e-9)
        np.testing.assert_allclose(em.params.weights, weights, rtol=1e-9, atol=1e-12)
        np.testing.assert_allclose(em.params.covariances, cov, rtol=1e-7, atol=1e-9)


@pytest.mark.parametrize("family_name", ["spherical", "diag", "full"])
def test_chunks_that_come_back_take_incremental_em_steps(family_name):
    """Three epochs over unequal chunks, a new chunk arriving in the second, against incremental EM written
    on raw moments: the first epoch is stepwise; an epoch begins when a chunk of the current one comes
    back, with S = (chunks visited in it) + (W_all - W_visited) x (running statistics per unit weight when
    it began), W_all the weight of every distinct chunk; after the epoch, every chunk's own statistics."""
    X = mixture_data(seed=6, n=1800, D=3, C=5)
    family = FAMILIES[family_name]
    params = start(family_name, X, 5)
    em = StepwiseEM(family, 5, 1e-6, params)
    weights, means, cov = params.weights, params.means, params.covariances
    first = [(0, 500), (500, 700), (700, 1100), (1100, 1500)]
    stream = first + [first[1], first[0], (1500, 1800), first[3], first[2]] + [first[2], first[1], first[3]]
    unit, seen, epoch, distinct = None, 0.0, None, set()
    for step, (lo, hi) in enumerate(stream):
        em.step(X[lo:hi], np.empty(0))
        Y = X[lo:hi]
        R = responsibilities(Y, Params(means, weights, cov), family_name)
        chunk = [R.sum(0), R.T @ Y, np.einsum("nc,ni,nj->cij", R, Y, Y)]
        if step < len(first):  # stepwise
            distinct.add((lo, hi))
            seen += len(Y)
            eta = (len(Y) / seen) ** stepwise.STEP_DECAY if unit is not None else 1.0
            unit = [c / len(Y) for c in chunk] if unit is None else \
                [(1 - eta) * a + eta * b / len(Y) for a, b in zip(unit, chunk)]
        else:
            if epoch is None or (lo, hi) in epoch["visited"]:
                epoch = {"start": unit, "visited": set(), "sum": [0.0, 0.0, 0.0], "weight": 0.0}
            if (lo, hi) not in distinct:
                seen += len(Y)  # a new chunk: W_all grows
                distinct.add((lo, hi))
            epoch["visited"].add((lo, hi))
            epoch["sum"] = [a + b for a, b in zip(epoch["sum"], chunk)]
            epoch["weight"] += len(Y)
            rest = seen - epoch["weight"]
            unit = [(a + rest * b) / seen for a, b in zip(epoch["sum"], epoch["start"])]
        weights, means, cov = textbook_m_step(unit, family_name)
        np.testing.assert_allclose(em.params.means, means, rtol=1e-9, atol=1e-9)
        np.testing.assert_allclose(em.params.weights, weights, rtol=1e-9, atol=1e-12)
        np.testing.assert_allclose(em.params.covariances, cov, rtol=1e-7, atol=1e-9)
    assert em.epoch is not None and len(em.epoch.visited) == 3  # the third epoch began at chunk 700:1100


def test_an_endless_stream_forgets_its_chunks(monkeypatch):
    """Beyond REMEMBERED_CHUNKS distinct chunks a stream forgets them and any epoch: the step that meets one
    more is stepwise EM's from the running statistics, and a chunk seen before is not known again."""
    X = mixture_data(seed=7, n=1000, D=3, C=4)
    family = FAMILIES["diag"]
    monkeypatch.setattr(stepwise, "REMEMBERED_CHUNKS", 3)
    em = StepwiseEM(family, 4, 1e-6, start("diag", X, 4))
    chunks = [X[i * 200:(i + 1) * 200] for i in range(5)]
    for chunk in chunks[:3] + chunks[:1]:
        em.step(chunk, np.empty(0))
    assert em.epoch is not None and len(em.chunk_weights) == 3
    plain = copy.deepcopy(em)
    plain.chunk_weights, plain.epoch = None, None
    for chunk in chunks[3:] + chunks[:2]:
        em.step(chunk, np.empty(0))
        plain.step(chunk, np.empty(0))
        assert em.chunk_weights is None and em.epoch is None
        np.testing.assert_array_equal(em.params.means, plain.params.means)
        np.testing.assert_array_equal(em.params.covariances, plain.params.covariances)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_start_is_a_converged_kmeans_of_the_first_chunk(seed):
    """A stream's start (first_params) is k-means of the first chunk run until its centres are the means
    of their rows (Lloyd's fixed point), not the few Lloyd steps a seeding's reduction takes before EM on
    all the data: the stream has no later k-means to finish it. Overlapping blobs, 26 clusters in 16-D,
    320 rows as uci_letter's first chunk in the stream suite (3 Lloyd steps leave centres 0.8-1.4 off)."""
    X, _ = blobs(320, 16, 26, seed=seed)
    X = X + np.random.default_rng(seed).normal(scale=3.0, size=X.shape)  # the blobs overlap
    params = stepwise.first_params(FAMILIES["diag"], X, np.empty(0), 26, seed, 1e-6)
    labels = ((X[:, None, :] - params.means[None]) ** 2).sum(-1).argmin(1)
    assert len(np.unique(labels)) == 26
    means = np.stack([X[labels == c].mean(0) for c in range(26)])
    np.testing.assert_allclose(params.means, means, atol=1e-9)


def test_the_start_restarts_less_where_a_restart_costs_more(monkeypatch):
    """32 restarts for the stream suite's first chunks (2,000 x 2 at C = 100; 320 x 16 at C = 26), one where
    a restart's n C D is past the budget (2,000 x 784 at C = 100), counted on the rows the start sees."""
    assert stepwise.start_restarts(2000, 100, 2) == stepwise.start_restarts(320, 26, 16) == 32
    assert stepwise.start_restarts(2000, 100, 784) == 1
    assert 1 < stepwise.start_restarts(2000, 100, 16) < 32
    seen = {}

    def reduce(X, w, n_clusters, seed, dense, restarts, **kwargs):
        seen.update(rows=X.shape[0], restarts=restarts)
        return None

    monkeypatch.setattr(stepwise, "reduce_candidates", reduce)
    X, _ = blobs(5000, 16, 10, seed=0)
    with pytest.raises(InvalidDataError):
        stepwise.first_params(FAMILIES["diag"], X, np.empty(0), 10, 0, 1e-6)
    assert seen == {"rows": stepwise.START_ROWS * 10, "restarts": stepwise.start_restarts(200, 10, 16)}

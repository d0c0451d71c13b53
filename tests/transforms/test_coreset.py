"""Lightweight coresets (Exarchakis et al. 2022): unbiased sums, determinism whatever the workers, weighted input."""

from __future__ import annotations

import numpy as np
import pytest

import daskclust
from daskclust.engine.ops import Chunk
from daskclust.errors import InvalidDataError, InvalidParameterError
from daskclust.transforms import LightweightCoreset
from daskclust.transforms.coreset import DrawOp, MassOp, MomentsOp, RowGeometry

from conftest import birch


def draw_in_process(X, w, size, seed, n_chunks=3):
    """The three passes run here on numpy chunks (the engine's merge order does not matter)."""
    bounds = np.linspace(0, len(X), n_chunks + 1).astype(int)
    chunks = [Chunk(k, bounds[k], X[bounds[k]:bounds[k + 1]], w[bounds[k]:bounds[k + 1]]) for k in range(n_chunks)]

    def run(op):
        acc = op.new_acc()
        for chunk in chunks:
            op.run(chunk, acc)
        return acc

    moments = run(MomentsOp(RowGeometry(X.shape[1]), n_chunks)).sum(axis=0)
    W, mean = moments[0], moments[2:] / moments[0]  # columns: weight, max |x|, sums
    masses = run(MassOp(mean, n_chunks, RowGeometry(X.shape[1])))
    S = masses[:, 1].sum()
    mass = masses[:, 0] / (2 * W) + masses[:, 1] / (2 * S)
    counts = np.random.default_rng(seed).multinomial(size, mass / mass.sum())
    out = run(DrawOp(mean, W, S, counts, size, seed, RowGeometry(X.shape[1])))
    return out["X"], out["w"]


def test_weighted_sums_are_unbiased():
    X, _ = birch(16, points=30, seed=1)
    w = np.random.default_rng(2).uniform(0.5, 2.0, len(X))
    target_sum, target_w = w @ X, w.sum()
    sums, totals = [], []
    for seed in range(400):
        rows, weights = draw_in_process(X, w, 64, seed)
        sums.append(weights @ rows)
        totals.append(weights.sum())
    sums, totals = np.array(sums), np.array(totals)
    # the mean of 400 independent unbiased estimates is within 4 standard errors of the truth
    se_sum = sums.std(axis=0, ddof=1) / np.sqrt(len(sums))
    assert np.all(np.abs(sums.mean(axis=0) - target_sum) <= 4 * se_sum)
    assert abs(totals.mean() - target_w) <= 4 * totals.std(ddof=1) / np.sqrt(len(totals))


def test_same_coreset_on_one_and_two_workers(client, client_one_worker):
    X, _ = birch(25, points=80, seed=3)
    a = LightweightCoreset(500, random_state=4).fit_transform(X, client=client, chunk_rows=300)
    b = LightweightCoreset(500, random_state=4).fit_transform(X, client=client_one_worker, chunk_rows=300)
    np.testing.assert_array_equal(a.rows, b.rows)
    np.testing.assert_array_equal(a.weights, b.weights)
    assert a.rows.shape == (500, 2)


def test_coreset_of_weighted_input_and_of_a_coreset(client):
    X, _ = birch(25, points=80, seed=5)
    w = np.random.default_rng(6).uniform(0.0, 3.0, len(X))
    first = LightweightCoreset(800, random_state=1).fit_transform(X, sample_weight=w, client=client)
    assert abs(first.weights.sum() / w.sum() - 1) < 0.1
    second = LightweightCoreset(200, random_state=2).fit_transform(first.rows, sample_weight=first.weights,
                                                                    client=client)
    assert second.rows.shape == (200, 2) and abs(second.weights.sum() / w.sum() - 1) < 0.2


def test_an_estimator_fits_a_coreset_as_its_weighted_rows(client):
    """A transform's rows are fitted as data (weights travelling with them): fit(coreset) is the fit of
    the coreset's rows with their weights, and predict takes the coreset as rows."""
    X, _ = birch(16, points=60, seed=8)
    coreset = LightweightCoreset(400, random_state=3).fit_transform(X, client=client)
    model = daskclust.KMeans(16, random_state=0, search="full").fit(coreset, client=client)
    same = daskclust.KMeans(16, random_state=0, search="full").fit(coreset.rows, sample_weight=coreset.weights,
                                                                   client=client)
    np.testing.assert_allclose(model.cluster_centers_, same.cluster_centers_, rtol=1e-12)
    np.testing.assert_array_equal(model.labels_, same.labels_)
    assert model.training_data_["source"] is None
    with pytest.raises(InvalidParameterError, match="carries its rows' weights"):
        daskclust.KMeans(16).fit(coreset, sample_weight=coreset.weights, client=client)


def test_bad_input_is_refused(client):
    with pytest.raises(InvalidParameterError, match="size"):
        LightweightCoreset(0).fit_transform(np.zeros((10, 2)), client=client)
    with pytest.raises(InvalidDataError, match="sums to zero"):
        LightweightCoreset(5).fit_transform(np.ones((10, 2)), sample_weight=np.zeros(10), client=client)


def quantization_error(X, w, centres):
    d2 = ((X[:, None, :] - centres[None, :, :]) ** 2).sum(-1) if len(X) * len(centres) < 4e6 else None
    if d2 is not None:
        return float(w @ d2.min(1))
    cn = (centres ** 2).sum(1)
    best = np.concatenate([((b ** 2).sum(1)[:, None] - 2 * b @ centres.T + cn).min(1)
                           for b in np.array_split(X, max(1, len(X) // 8192))])
    return float(w @ np.maximum(best, 0))


@pytest.mark.parametrize("data", ["birch", "blobs"])
@pytest.mark.parametrize("m", [2**12, 2**14])
def test_quantization_error_of_fixed_centres_within_the_measured_bound(data, m):
    """Exarchakis et al. 2022's guarantee is |QE_coreset - QE| <= eps QE with eps ~ 1 / sqrt(m) (a sum of m independent
    terms). Measured on BIRCH C = 1024 and 200,000 x 16 blobs (C = 256), 20 seeds each, with the true
    centres and with random rows as centres: the largest relative deviation was 0.055 at m = 2^12 and
    0.023 at m = 2^14 (halving as m quadruples). The tolerance is twice the largest measured:
    eps(m) = 0.11 sqrt(2^12 / m)."""
    from daskclust.bench.data import birch_array, blobs_array

    X, centres = birch_array(1024) if data == "birch" else blobs_array(100_000, 16, 256)
    X = X.astype(np.float64)
    w = np.ones(len(X))
    rng = np.random.default_rng(0)
    eps = 0.11 * np.sqrt(2**12 / m)
    for C in (centres, X[rng.choice(len(X), len(centres), replace=False)]):
        full = quantization_error(X, w, C)
        for seed in range(3):
            rows, weights = draw_in_process(X, w, m, seed, n_chunks=8)
            assert abs(quantization_error(rows, weights, C) / full - 1) <= eps


def test_distances_are_counted(client):
    """Pass 2 evaluates one distance per row; pass 3 one per row of each chunk that draws."""
    X, _ = birch(16, points=50, seed=7)  # 800 rows in 4 chunks of 200
    coreset = LightweightCoreset(400, random_state=0)
    coreset.fit_transform(X, client=client, chunk_rows=200)
    assert coreset.n_distances_ == 2 * len(X)  # 400 draws: every chunk draws
    one = LightweightCoreset(1, random_state=0)
    one.fit_transform(X, client=client, chunk_rows=200)
    assert one.n_distances_ == len(X) + 200  # one draw: a single chunk evaluates q again
    assert one.seconds_ > 0

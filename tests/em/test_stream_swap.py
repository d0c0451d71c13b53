"""A k-means stream's swaps: a centre moved out of a group that has two into a group that has none, none
made at the optimum, and the running statistics moved exactly (weight and first moments kept, second
moments about the new centre)."""

from __future__ import annotations

import numpy as np
import pytest

import daskclust
from daskclust.em.stepwise import chunk_stats, per_unit_weight
from daskclust.em.stream_swap import merge_into, swap
from daskclust.models import FAMILIES

KMEANS = FAMILIES["kmeans"]
GROUPS = np.array([[0.0, 0.0], [10.0, 0.0], [0.0, 10.0], [10.0, 10.0]])


def groups(n: int, seed: int) -> np.ndarray:
    """n rows around each of the four corners of a square of side 10, unit variance."""
    rng = np.random.default_rng(seed)
    return np.concatenate([g + rng.normal(size=(n, 2)) for g in GROUPS])


def running(means: np.ndarray, X: np.ndarray):
    """The parameters and the statistics per unit weight a stream keeps after seeing ``X`` at ``means``."""
    params = KMEANS.initial_params(means, 1.0, 0.0)
    stats, sets = chunk_stats(KMEANS, params, KMEANS.kernel_params(params), X, np.empty(0), 1)
    return params, per_unit_weight(stats, float(len(X))), sets[:, 0]


def nearest_distances(points: np.ndarray, means: np.ndarray) -> np.ndarray:
    return np.sqrt(((points[:, None] - means[None]) ** 2).sum(-1)).min(1)


def test_a_swap_moves_a_doubled_centre_to_the_group_without_one():
    """Two centres share the first group and one sits between the third and fourth: the swap moves one of
    the pair into the data, and the M-step of the moved statistics has a centre near every group or the
    cost falls by more than half the lone centre's removal."""
    means = np.array([[-0.8, 0.0], [0.8, 0.0], [10.0, 0.0], [5.0, 10.0]])
    params, stats, _ = running(means, groups(2000, seed=0))
    chunk = groups(50, seed=1)
    labels = running(means, chunk)[2]
    moved = swap(stats, params, chunk, np.empty(0), labels, np.random.default_rng(0))
    assert moved is not None
    new_stats, new_params = moved
    np.testing.assert_allclose(new_stats.S0.sum(), stats.S0.sum(), rtol=1e-12)
    np.testing.assert_allclose(new_stats.S1.sum(0), stats.S1.sum(0), rtol=1e-12, atol=1e-12)
    assert np.all(new_stats.S2 >= 0)
    moved_centre = np.flatnonzero(np.any(new_params.means != means, axis=1))
    assert len(moved_centre) == 1 and moved_centre[0] in (0, 1)
    after = KMEANS.m_step(new_stats, new_params, 0.0).means
    assert nearest_distances(GROUPS, after).max() < 3.0 < nearest_distances(GROUPS, means).max()


@pytest.mark.parametrize("seed", range(10))
def test_no_swap_at_the_optimum(seed):
    """One centre per group: no removal pays for an added centre, whatever rows are drawn."""
    params, stats, _ = running(GROUPS.copy(), groups(2000, seed=0))
    chunk = groups(50, seed=seed + 1)
    labels = running(GROUPS.copy(), chunk)[2]
    assert swap(stats, params, chunk, np.empty(0), labels, np.random.default_rng(seed)) is None


def test_a_merge_moves_the_second_moment_to_the_kept_centre():
    """S2 of the merged centre is sum_n ||y_n - mu_i||^2 over both centres' rows, computed directly."""
    X = groups(300, seed=2)
    means = np.array([[-0.8, 0.0], [0.8, 0.0], [10.0, 0.0], [5.0, 10.0]])
    params, stats, labels = running(means, X)
    merged = merge_into(stats, means, 0, 1)
    both = X[np.isin(labels, (0, 1))]
    np.testing.assert_allclose(merged.S2[1], ((both - means[1]) ** 2).sum() / len(X), rtol=1e-10)
    np.testing.assert_allclose(merged.S0[[0, 1]], [0.0, len(both) / len(X)], rtol=1e-12)
    np.testing.assert_allclose(merged.S1[1], both.sum(0) / len(X), rtol=1e-10)


def test_a_kmeans_stream_leaves_a_wrong_start():
    """Started with two centres in one group and one between two, two epochs of chunks end with a centre at
    every group; without swaps (a mixture family: none are made) the start's optimum would stay."""
    X = groups(2500, seed=3)
    X = X[np.random.default_rng(0).permutation(len(X))]
    start = np.array([[-0.8, 0.0], [0.8, 0.0], [10.0, 0.0], [5.0, 10.0]])
    model = daskclust.KMeans(4, init=start, n_init=1, random_state=0)
    for _ in range(2):
        for chunk in np.array_split(X, 20):
            model.partial_fit(chunk)
    assert model._stream.n_swaps >= 1
    assert nearest_distances(GROUPS, model.cluster_centers_).max() < 0.2


def test_a_stream_that_comes_back_still_swaps():
    """One chunk given again and again (from the second call on, incremental EM epochs of one chunk): a
    start with three centres in one group and one between the other three needs two swaps, and the first
    epoch has room for one; the second swap comes in a later epoch, which then starts from it."""
    X = groups(2500, seed=3)
    start = np.array([[-0.5, 0.0], [0.5, 0.0], [0.0, 0.5], [6.0, 6.0]])
    model = daskclust.KMeans(4, init=start, n_init=1, random_state=0)
    swaps = []
    for _ in range(4):
        model.partial_fit(X)
        swaps.append(model._stream.n_swaps)
    assert swaps[0] == 1 and swaps[-1] == 2 and model._stream.epoch is not None
    assert nearest_distances(GROUPS, model.cluster_centers_).max() < 0.2


def test_swaps_depend_on_weight_ratios_only():
    """Weights scaled by any factor draw the same candidates and make the same swaps (the draws are by
    w_n d_n, gains and losses per unit weight); rows of weight 0 are never drawn."""
    X = groups(2500, seed=4)
    X = X[np.random.default_rng(1).permutation(len(X))]
    w = np.random.default_rng(2).integers(0, 4, len(X)).astype(float)
    start = np.array([[-0.8, 0.0], [0.8, 0.0], [10.0, 0.0], [5.0, 10.0]])
    models = [daskclust.KMeans(4, init=start, n_init=1, random_state=0) for _ in range(2)]
    for chunk in np.array_split(np.arange(len(X)), 20):
        models[0].partial_fit(X[chunk], sample_weight=w[chunk])
        models[1].partial_fit(X[chunk], sample_weight=7.5 * w[chunk])
    assert models[0]._stream.n_swaps == models[1]._stream.n_swaps >= 1
    np.testing.assert_allclose(models[1].cluster_centers_, models[0].cluster_centers_, rtol=1e-9, atol=1e-9)
    assert nearest_distances(GROUPS, models[0].cluster_centers_).max() < 0.2

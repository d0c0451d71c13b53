"""The cell families (Verbeek et al. 2006 Eqs. 8-13) against the dense families, at the kernel level."""

from __future__ import annotations

import numpy as np
import pytest

from daskclust.kernels.estep import LSE, N_SCALARS, QE, W, estep_full
from daskclust.models import FAMILIES, Params
from daskclust.models.cell_families import CELL_FAMILIES


def pack(X, groups, full):
    """Packed cells (mean, within-cell covariance) and their weights, one cell per group."""
    rows, weights = [], []
    for g in np.unique(groups):
        Y = X[groups == g]
        m = Y.mean(axis=0)
        V = (Y - m).T @ (Y - m) / len(Y)
        rows.append(np.concatenate([m, V.ravel() if full else np.diag(V)]))
        weights.append(len(Y))
    return np.array(rows), np.array(weights, dtype=np.float64)


def params(C, D, seed=0):
    rng = np.random.default_rng(seed)
    A = rng.normal(size=(C, D, D)) * 0.3
    cov = A @ A.transpose(0, 2, 1) + np.eye(D)
    w = rng.uniform(0.5, 1.5, C)
    return Params(rng.normal(scale=2, size=(C, D)), w / w.sum(), cov)


def estep(family, p, X, w, C):
    kernel = family.kernel_params(p)
    stats = family.new_stats(C, X.shape[1] if family.name in FAMILIES else p.means.shape[1])
    scal = np.zeros(N_SCALARS)
    estep_full(np.ascontiguousarray(X), w, kernel, C, np.empty((len(X), 0), dtype=np.int32), stats.arrays(), scal)
    stats.scal = scal
    return stats


@pytest.mark.parametrize("kind", ["diag", "full"])
def test_single_row_cells_are_the_dense_family(kind):
    rng = np.random.default_rng(1)
    X = rng.normal(scale=3, size=(300, 4))
    p = params(5, 4)
    if kind == "diag":
        p = p.replace(covariances=np.diagonal(p.covariances, axis1=1, axis2=2).copy())
    cells, w = pack(X, np.arange(len(X)), kind == "full")
    a = estep(CELL_FAMILIES[kind], p, cells, w, 5)
    b = estep(FAMILIES[kind], p, X, np.zeros(0), 5)
    for x, y in zip(a.arrays(), b.arrays()):
        assert np.allclose(x, y, rtol=1e-10, atol=1e-10)
    assert np.allclose(a.scal[[LSE, W, QE]], b.scal[[LSE, W, QE]], rtol=1e-10)


@pytest.mark.parametrize("kind", ["diag", "full"])
def test_cells_bound_the_rows_and_carry_their_moments(kind):
    rng = np.random.default_rng(2)
    X = rng.normal(scale=2, size=(600, 3))
    groups = rng.integers(40, size=len(X))
    p = params(4, 3, seed=3)
    if kind == "diag":
        p = p.replace(covariances=np.diagonal(p.covariances, axis1=1, axis2=2).copy())
    cells, w = pack(X, groups, kind == "full")
    a = estep(CELL_FAMILIES[kind], p, cells, w, 4)
    b = estep(FAMILIES[kind], p, X, np.zeros(0), 4)
    assert a.scal[LSE] <= b.scal[LSE]  # the free energy over cells is a lower bound (Eq. 8)
    # one component: every q is 1, so cells and rows give the same statistics exactly
    one = p.replace(means=p.means[:1], weights=np.ones(1), covariances=p.covariances[:1])
    a1, b1 = estep(CELL_FAMILIES[kind], one, cells, w, 1), estep(FAMILIES[kind], one, X, np.zeros(0), 1)
    for x, y in zip(a1.arrays(), b1.arrays()):
        assert np.allclose(x, y, rtol=1e-10, atol=1e-10)
    assert np.isclose(a1.scal[QE], b1.scal[QE], rtol=1e-10)

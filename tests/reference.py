"""Slow, obviously correct numpy references the engine is tested against."""

from __future__ import annotations

import numpy as np


def sq_distances(X, centres):
    return ((X[:, None, :] - centres[None, :, :]) ** 2).sum(-1)


def truncated_estep(X, w, centres, sigma2, n_keep):
    """Statistics of one E-step keeping the n_keep closest clusters (dense numpy)."""
    d2 = sq_distances(X, centres)
    order = np.argsort(d2, axis=1, kind="stable")[:, :n_keep]
    sel = np.take_along_axis(d2, order, axis=1)
    logits = -sel / (2 * sigma2)
    m = logits.max(axis=1, keepdims=True)
    lse = (m + np.log(np.exp(logits - m).sum(axis=1, keepdims=True)))[:, 0]
    q = np.exp(logits - lse[:, None])
    C, D = centres.shape
    R = np.zeros((len(X), C))
    np.put_along_axis(R, order, q, axis=1)
    wR = R * w[:, None]
    return {
        "S0": wR.sum(0),
        "S1": wR.T @ X,
        "SD2": (wR * d2).sum(0),
        "W": w.sum(),
        "LSE": (w * lse).sum(),
        "QE": (w * d2.min(1)).sum(),
        "labels": order[:, 0],
        "K": order,
    }


def gmm_em(X, centres, n_iter, reg=0.0):
    """Exact EM for the isotropic equal-weight GMM (seed 000 Eqs. 3-4), textbook form.

    Returns per iteration (free energy per point, sigma2 used, QE) and the final centres.
    sigma2 starts at the mean squared distance to the nearest initial centre / D.
    """
    N, D = X.shape
    C = len(centres)
    mu = centres.astype(np.float64).copy()
    d2 = sq_distances(X, mu)
    sigma2 = d2.min(1).sum() / (D * N) + reg
    rows = []
    for t in range(n_iter + 1):
        d2 = sq_distances(X, mu)
        logits = -d2 / (2 * sigma2)
        m = logits.max(1, keepdims=True)
        lse = m[:, 0] + np.log(np.exp(logits - m).sum(1))
        F = lse.mean() - np.log(C) - 0.5 * D * np.log(2 * np.pi * sigma2)
        rows.append((F, sigma2, d2.min(1).sum()))
        if t == n_iter:
            break
        s = np.exp(logits - lse[:, None])
        mu_new = (s.T @ X) / s.sum(0)[:, None]
        sigma2 = (s * sq_distances(X, mu_new)).sum() / (D * N) + reg
        mu = mu_new
    return rows, mu

"""A 2-D view of the data and the centres: the data themselves for D <= 2, a PCA projection otherwise,
fitted on a bounded random sample of rows read chunk by chunk."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from ..errors import InvalidDataError, InvalidParameterError

if TYPE_CHECKING:
    from ..data import ChunkedData

DEFAULT_SAMPLE = 20_000
"""Rows drawn from the data for the view (and its PCA) by default."""


def check_width(data: ChunkedData, n_features: int, owner: str) -> None:
    """Refuse data whose rows are not of the ``n_features`` the model ``owner`` was fitted on
    (from the metadata: before any row is read)."""
    if data.n_features != n_features:
        raise InvalidDataError(f"the data have {data.n_features} features, but the {owner} model was fitted on "
                               f"{n_features} features")


def sample_rows(data: ChunkedData, size: int, seed: int = 0) -> np.ndarray:
    """At most ``size`` rows of ``data``, drawn uniformly without replacement, in source order.

    Chunks are read one at a time, and only those holding a drawn row, so memory holds one
    chunk and the sample, never the whole data set. ``seed`` fixes the draw.
    """
    if isinstance(size, bool) or not isinstance(size, (int, np.integer)) or size < 1:
        raise InvalidParameterError(f"the sample size must be a positive integer, got {size!r}")
    n = data.n_samples
    rows = np.sort(np.random.default_rng(seed).choice(n, size=min(int(size), n), replace=False))
    bounds = data.bounds
    out = np.empty((len(rows), data.n_features), dtype=data.dtype)
    cuts = np.searchsorted(rows, bounds)  # drawn rows of chunk i: rows[cuts[i]:cuts[i + 1]]
    for i in np.flatnonzero(np.diff(cuts)):
        block = data.source.read(int(bounds[i]), int(bounds[i + 1]))
        out[cuts[i]:cuts[i + 1]] = block[rows[cuts[i]:cuts[i + 1]] - bounds[i]]
    return out


@dataclass(frozen=True)
class Projection:
    """An affine map of rows to 2-D: ``(X - mean) @ axes``.

    mean : (D,); axes : (D, 2) orthonormal columns; labels : the two axes' names.
    """

    mean: np.ndarray
    axes: np.ndarray
    labels: tuple[str, str]

    def __call__(self, X: np.ndarray) -> np.ndarray:
        """Rows (n, D) as points (n, 2)."""
        return (np.asarray(X, dtype=np.float64) - self.mean) @ self.axes


def identity_view(n_features: int) -> Projection:
    """The rows themselves (D = 2), or the single feature on the x axis (D = 1)."""
    return Projection(np.zeros(n_features), np.eye(n_features, 2),
                      ("feature 0", "feature 1" if n_features > 1 else ""))


def pca_2d(X: np.ndarray) -> Projection:
    """The projection on the first two principal axes of the rows ``X`` (n, D), D >= 2.

    Axes are the two leading eigenvectors of the scatter matrix of the centred rows (the right
    singular vectors of the centred rows; a D x D problem, whatever n, and defined for a single
    row), each signed so that its largest-magnitude loading is positive (a deterministic
    orientation); the labels give the share of the rows' variance each axis holds.
    """
    X = np.asarray(X, dtype=np.float64)
    mean = X.mean(axis=0)
    centred = X - mean
    variances, vectors = np.linalg.eigh(centred.T @ centred)  # ascending
    axes = vectors[:, ::-1][:, :2].copy()
    picks = np.abs(axes).argmax(axis=0)
    axes *= np.where(axes[picks, [0, 1]] < 0, -1.0, 1.0)
    total = float(np.clip(variances, 0, None).sum())
    share = np.clip(variances[::-1][:2], 0, None) / total if total > 0 else np.zeros(2)
    return Projection(mean, axes, tuple(f"PC{k + 1} ({100 * share[k]:.1f}% of the variance)" for k in range(2)))


def view_of(centres: np.ndarray, rows: np.ndarray | None) -> Projection:
    """The 2-D view of a report: identity for D <= 2, else the PCA of ``rows`` (the data's sample)
    or, without data, of the centres."""
    D = centres.shape[1]
    if D <= 2:
        return identity_view(D)
    return pca_2d(rows if rows is not None else centres)

"""Synthetic clustering data sets written to zarr, chunk by chunk.

Two generators, both writing a zarr v3 group holding ``X`` (samples x
features), ``labels`` (the true cluster of each row, int32) and ``centers``
(the true cluster centres, float64), plus group attributes describing how the
data were made:

* :func:`make_birch`: the BIRCH grid benchmark as used by Forster & Lücke,
  "Can clustering scale sublinearly with its clusters? A variational EM
  acceleration of GMMs and k-means" (AISTATS 2018), Sec. 4: a
  "sqrt(C) x sqrt(C) grid, sigma^2 = 1, neighbour distance 4*sqrt(2),
  100 points per cluster".
* :func:`make_blobs`: isotropic unit-variance Gaussian blobs in any dimension,
  with centres drawn uniformly in a hypercube scaled to a chosen mean
  nearest-centre distance.

The data are generated and written one zarr chunk at a time, so a data set
larger than RAM can be produced; only the BIRCH labels (4 bytes per row) are
held in memory whole. All randomness comes from ``np.random.default_rng``
seeded with a key ``[seed, stream, ...]``:

* stream 0: the BIRCH row permutation, ``[seed, 0]``;
* stream 1: the BIRCH noise of chunk ``k``, ``[seed, 1, k]``;
* stream 2: the blobs labels and noise of chunk ``k``, ``[seed, 2, k]``;
* stream 3: the blobs centres, ``[seed, 3]``.

A data set is therefore a fixed function of the generator's parameters
(``dtype`` included) and of ``chunk_rows``, whose default depends only on the
shape. :func:`open_dataset` reads a stored data set back as dask arrays.
"""

from __future__ import annotations

import math
import os
from typing import Any

import dask.array as da
import numpy as np

from .data.chunking import default_chunk_rows
from .errors import InvalidParameterError
from .persistence.dataset import read_dataset, write_dataset
from .versions import __version__

#: Distance between neighbouring BIRCH grid centres.
BIRCH_SPACING = 4.0 * math.sqrt(2.0)
#: Default hypercube of the blob centres: scikit-learn's ``make_blobs`` ``center_box``.
BLOBS_BOX = (-10.0, 10.0)

_NN_BLOCK_ELEMENTS = 2**22  # distances held at once while measuring the blobs centres
_DATA_DTYPES = (np.dtype("float32"), np.dtype("float64"))



def birch_grid_centres(n_clusters: int) -> np.ndarray:
    """Centres of the BIRCH grid data set.

    Parameters
    ----------
    n_clusters : int
        Number of clusters C; must be a perfect square.

    Returns
    -------
    numpy.ndarray
        float64 array of shape ``(C, 2)``: a ``sqrt(C) x sqrt(C)`` grid with
        neighbour distance ``4*sqrt(2)`` starting at the origin, in row-major
        order: centre ``c`` is ``(c % g, c // g) * 4*sqrt(2)`` with
        ``g = sqrt(C)``.

    Raises
    ------
    InvalidParameterError
        If ``n_clusters`` is not a positive perfect square.
    """
    side = _grid_side(n_clusters)
    index = np.arange(side * side)
    return np.column_stack([index % side, index // side]).astype(np.float64) * BIRCH_SPACING


def make_birch(
    path: str | os.PathLike,
    n_clusters: int,
    *,
    points_per_cluster: int = 100,
    sigma2: float = 1.0,
    seed: int = 0,
    chunk_rows: int | None = None,
    dtype: str | np.dtype = "float64",
    overwrite: bool = False,
    storage_options: dict[str, Any] | None = None,
):
    """Write the BIRCH grid data set to a zarr group.

    Cluster ``c`` has ``points_per_cluster`` points
    ``centre_c + sqrt(sigma2) * N(0, I_2)`` around the centres of
    :func:`birch_grid_centres`. The rows are in a random order (a permutation
    drawn from ``seed``), as stored data are not sorted by cluster. The N
    int32 labels are held in memory to shuffle them (4 bytes per row); the
    data themselves are generated and written one chunk at a time.

    Parameters
    ----------
    path : str or os.PathLike
        Local path or fsspec URL of the zarr group to create.
    n_clusters : int
        Number of clusters C; must be a perfect square.
    points_per_cluster : int, default 100
        Points drawn around each centre; N = C * points_per_cluster rows.
    sigma2 : float, default 1.0
        Variance of the isotropic Gaussian noise around each centre.
    seed : int, default 0
        Non-negative seed of the permutation and of the noise.
    chunk_rows : int, optional
        Rows per zarr chunk; default :func:`daskclust.data.chunking.default_chunk_rows`
        of the data's shape (the chunking the estimators would choose).
    dtype : str or numpy.dtype, default "float64"
        float32 or float64, the dtype of ``X``.
    overwrite : bool, default False
        Replace a data set daskclust made at ``path``; anything else at
        ``path`` is never replaced (:class:`~daskclust.errors.OutputRefusedError`,
        a :class:`FileExistsError`).
    storage_options : dict, optional
        fsspec options, for URLs only.

    Returns
    -------
    zarr.Group
        The written group, opened read-only, with arrays ``X`` (N x 2),
        ``labels`` (N,) and ``centers`` (C x 2) and attributes ``generator``
        (``"birch"``), ``n_clusters``, ``points_per_cluster``, ``sigma2``,
        ``seed`` and ``daskclust_version``.

    Raises
    ------
    InvalidParameterError
        If a parameter is out of range (e.g. C not a perfect square).
    OutputRefusedError
        If ``path`` exists and ``overwrite`` is false, or it holds anything
        but a data set daskclust made.
    """
    centres = birch_grid_centres(n_clusters)
    points_per_cluster = _positive_int("points_per_cluster", points_per_cluster)
    sigma2 = _positive_float("sigma2", sigma2)
    seed = _seed(seed)
    dtype = _data_dtype(dtype)
    n_samples = len(centres) * points_per_cluster
    chunk_rows = _chunk_rows(chunk_rows, default_chunk_rows(n_samples, 2, dtype.itemsize), n_samples)

    labels = np.repeat(np.arange(len(centres), dtype=np.int32), points_per_cluster)
    labels = np.random.default_rng([seed, 0]).permutation(labels)
    offsets = centres.astype(dtype)
    scale = dtype.type(math.sqrt(sigma2))

    def make_chunk(k: int, start: int, stop: int) -> tuple[np.ndarray, np.ndarray]:
        chunk_labels = labels[start:stop]
        x = np.random.default_rng([seed, 1, k]).standard_normal((stop - start, 2), dtype=dtype)
        x *= scale
        x += offsets[chunk_labels]
        return x, chunk_labels

    attrs = {
        "generator": "birch",
        "n_clusters": len(centres),
        "points_per_cluster": points_per_cluster,
        "sigma2": sigma2,
        "seed": seed,
        "daskclust_version": __version__,
    }
    return write_dataset(
        path, centres, n_samples, chunk_rows, dtype, make_chunk, attrs, overwrite, storage_options
    )


def make_blobs(
    path: str | os.PathLike,
    n_samples: int,
    n_features: int,
    n_clusters: int,
    *,
    separation: float | None = None,
    seed: int = 0,
    chunk_rows: int | None = None,
    dtype: str | np.dtype = "float32",
    overwrite: bool = False,
    storage_options: dict[str, Any] | None = None,
    compression: str | None = "zstd",
):
    """Write isotropic Gaussian blobs to a zarr group.

    The C centres are drawn uniformly in a hypercube; each row picks a
    cluster uniformly at random and adds unit-variance isotropic Gaussian
    noise to its centre. Labels and noise are drawn per chunk, so nothing of
    size N is held in memory.

    By default the hypercube is scikit-learn's ``make_blobs`` box
    ``[-10, 10]^D`` (with unit noise, as ``cluster_std=1``); the measured mean
    nearest-centre distance is stored as the ``separation`` attribute. Given
    ``separation``, the side ``L`` of ``[0, L]^D`` is chosen so that the mean
    nearest-centre distance equals it: the centres are first drawn in the unit cube
    ``[0, 1]^D``, where their mean nearest-neighbour distance ``d1`` is
    measured exactly (O(C^2 D) time, blockwise), then scaled by
    ``L = separation / d1`` (nearest-neighbour distances scale linearly with
    the side). The closed form ``L = separation * (C V_D)^(1/D) / Gamma(1 + 1/D)``
    (V_D the unit-ball volume) ignores boundary effects: for D = 32 and C = 64
    its centres are about 40 % further apart than asked, hence the measurement.

    Parameters
    ----------
    path : str or os.PathLike
        Local path or fsspec URL of the zarr group to create.
    n_samples : int
        Number of rows N.
    n_features : int
        Dimension D.
    n_clusters : int
        Number of clusters C, at least 2.
    separation : float, optional
        Mean distance from a centre to its nearest other centre, in noise
        standard deviations. In D dimensions a point lies about sqrt(D) from
        its centre, so small values (e.g. 6 at D = 64) make blobs that touch:
        still separable by the nearest centre, but hard for every seeding.
        Default: the scikit-learn box above.
    seed : int, default 0
        Non-negative seed of the centres, labels and noise.
    chunk_rows : int, optional
        Rows per zarr chunk; default the largest count with at most 64 MiB
        per chunk of ``X``, but at most N.
    dtype : str or numpy.dtype, default "float32"
        float32 or float64, the dtype of ``X``.
    overwrite, storage_options
        As in :func:`make_birch`: only a data set daskclust made is replaced.
    compression : {"zstd", None}, default "zstd"
        Compression of ``X`` (zstd level 3, or none: random floats hardly
        compress, and reading them back uncompressed costs no CPU).

    Returns
    -------
    zarr.Group
        The written group, opened read-only, with arrays ``X`` (N x D),
        ``labels`` (N,) and ``centers`` (C x D) and attributes ``generator``
        (``"blobs"``), ``n_samples``, ``n_features``, ``n_clusters``,
        ``separation``, ``hypercube_side``, ``seed`` and ``daskclust_version``.

    Raises
    ------
    InvalidParameterError
        If a parameter is out of range.
    OutputRefusedError
        If ``path`` exists and ``overwrite`` is false, or it holds anything
        but a data set daskclust made.
    """
    n_samples = _positive_int("n_samples", n_samples)
    n_features = _positive_int("n_features", n_features)
    n_clusters = _positive_int("n_clusters", n_clusters)
    if n_clusters < 2:
        raise InvalidParameterError("make_blobs needs n_clusters >= 2 to define a separation, got 1")
    if separation is not None:
        separation = _positive_float("separation", separation)
    if compression not in ("zstd", None):
        raise InvalidParameterError(f"compression must be 'zstd' or None, got {compression!r}")
    seed = _seed(seed)
    dtype = _data_dtype(dtype)
    chunk_rows = _chunk_rows(chunk_rows, default_chunk_rows(n_samples, n_features, dtype.itemsize), n_samples)

    unit = np.random.default_rng([seed, 3]).uniform(size=(n_clusters, n_features))
    if separation is None:
        side = BLOBS_BOX[1] - BLOBS_BOX[0]
        centres = BLOBS_BOX[0] + unit * side
        separation = _mean_nearest_distance(unit) * side
    else:
        side = separation / _mean_nearest_distance(unit)
        centres = unit * side
    offsets = centres.astype(dtype)

    def make_chunk(k: int, start: int, stop: int) -> tuple[np.ndarray, np.ndarray]:
        rng = np.random.default_rng([seed, 2, k])
        chunk_labels = rng.integers(0, n_clusters, size=stop - start, dtype=np.int32)
        x = rng.standard_normal((stop - start, n_features), dtype=dtype)
        x += offsets[chunk_labels]
        return x, chunk_labels

    attrs = {
        "generator": "blobs",
        "n_samples": n_samples,
        "n_features": n_features,
        "n_clusters": n_clusters,
        "separation": separation,
        "hypercube_side": side,
        "seed": seed,
        "daskclust_version": __version__,
    }
    return write_dataset(
        path, centres, n_samples, chunk_rows, dtype, make_chunk, attrs, overwrite, storage_options, compression
    )


def open_dataset(
    path: str | os.PathLike, *, storage_options: dict[str, Any] | None = None
) -> tuple[da.Array, da.Array | None, np.ndarray | None]:
    """Open a data set written by :func:`make_birch` or :func:`make_blobs`.

    Any zarr group with a 2-D array ``X`` works; ``labels`` and ``centers``
    are optional.

    Parameters
    ----------
    path : str or os.PathLike
        Local path or fsspec URL of the zarr group.
    storage_options : dict, optional
        fsspec options, for URLs only.

    Returns
    -------
    X : dask.array.Array
        The data, chunked as stored.
    labels : dask.array.Array or None
        The true cluster of each row, if stored.
    centers : numpy.ndarray or None
        The true centres, if stored.

    Raises
    ------
    InvalidDataError
        If ``path`` holds no zarr group or the group has no array ``X``.
    """
    return read_dataset(path, storage_options)


def _mean_nearest_distance(points: np.ndarray) -> float:
    """Mean Euclidean distance from each point to its nearest other point."""
    n_points = len(points)
    squared_norms = np.einsum("ij,ij->i", points, points)
    block = max(1, _NN_BLOCK_ELEMENTS // n_points)
    total = 0.0
    for start in range(0, n_points, block):
        stop = min(start + block, n_points)
        d2 = squared_norms[start:stop, None] + squared_norms[None, :] - 2.0 * (points[start:stop] @ points.T)
        d2[np.arange(stop - start), np.arange(start, stop)] = np.inf
        total += float(np.sqrt(np.maximum(d2.min(axis=1), 0.0)).sum())
    return total / n_points


def _grid_side(n_clusters: int) -> int:
    """``sqrt(n_clusters)``, or an error suggesting the nearest perfect squares."""
    n_clusters = _positive_int("n_clusters", n_clusters)
    side = math.isqrt(n_clusters)
    if side * side != n_clusters:
        raise InvalidParameterError(
            f"n_clusters must be a perfect square for the BIRCH sqrt(C) x sqrt(C) grid, got "
            f"{n_clusters}; the nearest perfect squares are {side * side} ({side}^2) and "
            f"{(side + 1) ** 2} ({side + 1}^2)"
        )
    return side


def _positive_int(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise InvalidParameterError(f"{name} must be a positive integer, got {value!r}")
    return int(value)


def _positive_float(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise InvalidParameterError(f"{name} must be a positive number, got {value!r}")
    if not (math.isfinite(value) and value > 0):
        raise InvalidParameterError(f"{name} must be a positive finite number, got {value!r}")
    return float(value)


def _seed(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 0:
        raise InvalidParameterError(f"seed must be a non-negative integer, got {value!r}")
    return int(value)


def _chunk_rows(chunk_rows: int | None, default: int, n_samples: int) -> int:
    if chunk_rows is None:
        return default
    return min(_positive_int("chunk_rows", chunk_rows), n_samples)


def _data_dtype(dtype: Any) -> np.dtype:
    try:
        resolved = np.dtype(dtype)
    except TypeError as exc:
        raise InvalidParameterError(f"dtype must be float32 or float64, got {dtype!r}") from exc
    if resolved not in _DATA_DTYPES:
        raise InvalidParameterError(f"dtype must be float32 or float64, got {dtype!r}")
    return resolved

"""Data layer: any supported input -> a validated, row-chunked :class:`ChunkedData`.

Checks that need only metadata (shape, dtype, length of the weights) run here,
before any work. Checks that need the values (NaN/inf rows, negative weights)
run in the first pass over each chunk on the workers, which every fit makes
anyway, and report the chunk and the row; nothing is written before that pass.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import dask.array as da
import numpy as np

from ..errors import InvalidDataError
from .chunking import default_chunk_rows, row_bounds
from .ranges import rows_problem, weights_problem
from .sources import BlockSource, as_dask, open_zarr_array

__all__ = ["ChunkedData", "BlockSource", "as_chunked_data", "check_enough_rows", "open_zarr_array", "rows_in_memory"]


@dataclass(frozen=True)
class ChunkedData:
    """Validated data, chunked along rows only (each chunk holds every feature).

    Attributes
    ----------
    X : dask.array.Array of shape (n_samples, n_features)
        float32 or float64, row chunks given by ``bounds``.
    source : BlockSource
        How workers read the rows of a chunk of ``X``.
    weights : dask.array.Array of shape (n_samples,) or None
        float64 sample weights with the same row chunks.
    weight_source : BlockSource or None
    bounds : ndarray of shape (n_chunks + 1,)
        Chunk ``i`` holds rows ``bounds[i]:bounds[i + 1]``.
    input_kind : {"numpy", "dask", "zarr", "xarray"}
        What the caller passed; outputs follow it (numpy in, numpy out; a
        DataArray in, a DataArray out).
    """

    X: da.Array
    source: BlockSource
    weights: da.Array | None
    weight_source: BlockSource | None
    bounds: np.ndarray
    input_kind: str

    @property
    def n_samples(self) -> int:
        return int(self.X.shape[0])

    @property
    def n_features(self) -> int:
        return int(self.X.shape[1])

    @property
    def n_chunks(self) -> int:
        return len(self.bounds) - 1

    @property
    def dtype(self) -> np.dtype:
        return self.X.dtype

    @property
    def nbytes(self) -> int:
        """Bytes of the data plus weights once in memory."""
        extra = 8 * self.n_samples if self.weights is not None else 0
        return int(self.X.nbytes) + extra

    def fingerprint(self) -> dict:
        """What must match, before any work, for a store derived from these data (checkpoint, tree
        store) to be used with them: shape, dtype, chunking, weights. The content is compared once
        the data are read (:data:`daskclust.names.FINGERPRINT_CONTENT`)."""
        return {
            "n_samples": self.n_samples,
            "n_features": self.n_features,
            "dtype": str(self.dtype),
            "bounds": [int(b) for b in self.bounds],
            "weighted": self.weights is not None,
        }

    @property
    def lazy(self) -> bool:
        """True when outputs should be lazy dask arrays: the rows are not a numpy array in memory
        (a numpy-backed DataArray gives numpy outputs, a dask-backed one lazy outputs)."""
        return self.source.kind != "numpy"


def data_dtype(dtype: np.dtype) -> np.dtype:
    """The float dtype clustering runs in: float32/float64 kept, integers -> float64."""
    dtype = np.dtype(dtype)
    if dtype in (np.float32, np.float64):
        return dtype
    if dtype == np.float16:
        return np.dtype(np.float32)
    if np.issubdtype(dtype, np.integer) or dtype == np.bool_:
        return np.dtype(np.float64)
    complex_ = "Complex data not supported; " if np.issubdtype(dtype, np.complexfloating) else ""
    raise InvalidDataError(
        f"unsupported dtype {dtype}: {complex_}daskclust clusters real numbers "
        "(float32, float64 or integer input, which is cast to float64)"
    )


def as_chunked_data(
    X,
    sample_weight=None,
    *,
    chunk_rows: int | None = None,
    array: str | None = None,
    storage_options: dict | None = None,
    min_samples: int = 1,
    what: str = "X",
) -> ChunkedData:
    """Validate ``X`` (and ``sample_weight``) and chunk it along rows.

    Parameters
    ----------
    X : array-like, dask array, zarr.Array, xarray.DataArray, str or PathLike
        Data of shape (n_samples, n_features). A string is a zarr store path or
        fsspec URL; ``array`` then names the array inside a group. A DataArray
        may have any dimension names: the first is the samples, the second the
        features.
    sample_weight : array-like of shape (n_samples,), optional
        Non-negative finite weights (same kinds of input as ``X``).
    chunk_rows : int, optional
        Rows per chunk. Default: :func:`default_chunk_rows` of the data's shape,
        aligned with the zarr chunks; a dask array keeps its row chunks.
    min_samples : int, default=1
        Fewest rows accepted (the number of clusters, when fitting).
    what : str, default="X"
        Name used for the data in error messages.

    Raises
    ------
    InvalidDataError
        Not 2-D, unknown chunk sizes, no features, unsupported dtype, fewer than
        ``min_samples`` rows, or weights of the wrong shape or dtype.
    """
    dask_x, src_array, kind, input_kind = as_dask(X, array, storage_options)
    if dask_x.ndim != 2:
        if input_kind == "xarray" and dask_x.ndim > 2:
            hint = (f". Stack the sample dimensions of the DataArray into one, features last: "
                    f"{what}.stack(sample={X.dims[:-1]}).transpose('sample', {X.dims[-1]!r})")
        elif dask_x.ndim == 1:
            hint = (f". Reshape your data: {what}.reshape(-1, 1) if it has a single feature, {what}.reshape(1, -1) "
                    "if it is a single sample")
        else:
            hint = ""
        raise InvalidDataError(
            f"{what} must be 2-D (samples x features); got a {dask_x.ndim}-D array of shape {dask_x.shape}{hint}"
        )
    _check_chunks_known(dask_x, what)
    n_samples, n_features = (int(s) for s in dask_x.shape)
    dtype = data_dtype(dask_x.dtype)
    if n_features == 0:
        raise InvalidDataError(f"{what} has 0 feature(s) (shape={dask_x.shape}) while a minimum of 1 is required.")
    check_enough_rows(n_samples, min_samples, dask_x.shape, what, X.dims if input_kind == "xarray" else None)

    rows = _choose_chunk_rows(dask_x, src_array, kind, chunk_rows, dtype)
    if isinstance(rows, int):
        if kind == "zarr":
            dask_x = da.from_zarr(src_array, chunks=(rows, n_features))
        else:
            dask_x = dask_x.rechunk((rows, n_features))
    dask_x = dask_x.astype(dtype)
    bounds = row_bounds(n_samples, dask_x.chunks[0])
    source = BlockSource(kind, src_array if kind != "dask" else dask_x, dtype)

    weights = weight_source = None
    if sample_weight is not None:
        weights, weight_source = _chunk_weights(sample_weight, n_samples, dask_x.chunks[0], storage_options)
    return ChunkedData(dask_x, source, weights, weight_source, bounds, input_kind)


def check_enough_rows(n_samples: int, min_samples: int, shape: tuple, what: str = "X", dims: tuple | None = None) -> None:
    """Refuse data of ``shape`` with fewer than ``min_samples`` rows (the number of clusters, when
    fitting; at least 1); ``dims``: a DataArray's dimensions, named in the hint."""
    if n_samples >= max(1, min_samples):
        return
    hint = (f"; a DataArray's first dimension ({dims[0]!r}) holds the samples: transpose it if its samples "
            f"are along {dims[1]!r}") if dims is not None else ""
    if min_samples <= 1:
        message = f"{what} has {n_samples} sample(s) (shape={shape}) while a minimum of 1 is required{hint}"
    else:
        message = (f"n_samples={n_samples} should be >= n_clusters={min_samples}: {what} has fewer samples "
                   f"than clusters{hint}")
    raise InvalidDataError(message)


def rows_in_memory(X, sample_weight=None) -> tuple[np.ndarray, np.ndarray]:
    """One block of rows (and weights) read into memory and checked as a fit checks each chunk: the
    input rules of :func:`as_chunked_data`, then the range rules of :mod:`daskclust.data.ranges` on the
    values. Returns (rows (n, D) C-contiguous float32 / float64, weights (n,) float64 or (0,) when
    unweighted). For the chunks of a stream (``partial_fit``), each of which fits in memory."""
    data = as_chunked_data(X, sample_weight)
    rows = data.source.read(0, data.n_samples)  # numpy as it is, zarr read, dask computed in this thread
    problem = rows_problem(rows, 0, "cluster")
    if problem:
        raise InvalidDataError(problem)
    if data.weights is None:
        return rows, np.empty(0)
    weights = data.weight_source.read(0, data.n_samples)
    problem = weights_problem(weights, 0)
    if problem:
        raise InvalidDataError(problem)
    return rows, weights


def _choose_chunk_rows(dask_x, src_array, kind, chunk_rows, dtype):
    """Rows per chunk (int), or ``None`` to keep a dask array's row chunks."""
    n_samples, n_features = dask_x.shape
    if chunk_rows is not None:
        if int(chunk_rows) < 1:
            raise InvalidDataError(f"chunk_rows must be a positive integer, got {chunk_rows!r}")
        return int(min(int(chunk_rows), n_samples))
    if kind == "dask":
        if len(dask_x.chunks[1]) == 1:
            return None
        warnings.warn(
            f"the data is chunked along features ({len(dask_x.chunks[1])} column chunks); "
            "rechunking so that every chunk holds all features",
            UserWarning,
            stacklevel=3,
        )
    source_rows = int(src_array.chunks[0]) if kind == "zarr" else None
    return default_chunk_rows(n_samples, n_features, dtype.itemsize, source_rows)


def _check_chunks_known(array: da.Array, what: str) -> None:
    """Refuse a dask array whose chunk sizes are unknown (NaN, as after boolean indexing):
    its rows can be neither counted nor placed."""
    for axis, sizes in zip(("row", "column"), array.chunks):
        if any(np.isnan(size) for size in sizes):
            raise InvalidDataError(
                f"the {axis} chunk sizes of {what} are unknown (NaN in {what}.chunks, as after boolean indexing); "
                f"call {what}.compute_chunk_sizes() first"
            )


def _chunk_weights(sample_weight, n_samples, row_chunks, storage_options):
    dask_w, src, kind, _ = as_dask(sample_weight, None, storage_options)
    _check_chunks_known(dask_w, "sample_weight")
    if dask_w.ndim != 1 or dask_w.shape[0] != n_samples:
        raise InvalidDataError(
            f"sample_weight must have shape ({n_samples},), matching the rows of X; got shape {dask_w.shape}"
        )
    if not (np.issubdtype(dask_w.dtype, np.number) or dask_w.dtype == np.bool_) or np.issubdtype(
        dask_w.dtype, np.complexfloating
    ):
        raise InvalidDataError(f"sample_weight has unsupported dtype {dask_w.dtype}; need real numbers")
    dask_w = dask_w.rechunk((row_chunks,)).astype(np.float64)
    source = BlockSource(kind, src if kind != "dask" else dask_w, np.dtype(np.float64))
    return dask_w, source

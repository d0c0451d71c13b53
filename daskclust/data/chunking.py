"""Default row chunking: a function of the data's shape only.

The chunk boundaries decide the order in which statistics are summed and the
keys of the random streams (seed, iteration, chunk), so they must not depend on
the cluster: the same data gives the same chunks, hence the same model, on a
laptop or on a hundred workers.
"""

from __future__ import annotations

import math

import numpy as np

TARGET_CHUNK_BYTES = 64 * 2**20
"""About 64 MiB per chunk: large enough to amortise per-chunk overhead and I/O
latency, small enough that several chunks per thread fit a worker's memory."""

MIN_CHUNKS = 16
"""At least this many chunks where N allows, so small data keeps every thread busy."""

MIN_CHUNK_ROWS = 256
"""No chunk smaller than this (the last one excepted): tiny chunks cost more in
bookkeeping than they give in parallelism."""


def default_chunk_rows(
    n_samples: int,
    n_features: int,
    itemsize: int,
    source_chunk_rows: int | None = None,
) -> int:
    """Rows per chunk for data of the given shape.

    Parameters
    ----------
    n_samples, n_features : int
        Shape of the data.
    itemsize : int
        Bytes per element (4 for float32, 8 for float64).
    source_chunk_rows : int or None
        Row chunk size of the stored source (zarr). The result is then a multiple
        of it, so that no stored chunk is decoded twice.

    Returns
    -------
    rows : int
        Rows per chunk: about ``TARGET_CHUNK_BYTES`` per chunk and at least
        ``MIN_CHUNKS`` chunks where ``n_samples`` allows.
    """
    row_bytes = max(1, n_features * itemsize)
    by_bytes = max(1, TARGET_CHUNK_BYTES // row_bytes)
    by_count = math.ceil(n_samples / MIN_CHUNKS)
    rows = max(min(by_bytes, by_count), min(MIN_CHUNK_ROWS, n_samples))
    if source_chunk_rows:
        rows = max(source_chunk_rows, round(rows / source_chunk_rows) * source_chunk_rows)
    return int(max(1, min(rows, n_samples)))


def row_bounds(n_samples: int, chunk_rows: int | tuple[int, ...]) -> np.ndarray:
    """Chunk boundaries ``[0, r1, r2, ..., n_samples]`` as an int64 array.

    ``chunk_rows`` is either a uniform size or the explicit sizes of each chunk
    (a dask array's ``chunks[0]``).
    """
    if isinstance(chunk_rows, (int, np.integer)):
        starts = np.arange(0, n_samples, int(chunk_rows), dtype=np.int64)
        return np.append(starts, np.int64(n_samples))
    sizes = np.asarray(chunk_rows, dtype=np.int64)
    return np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)

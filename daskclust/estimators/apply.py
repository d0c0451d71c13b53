"""Applying a fitted model row by row: outputs follow inputs.

numpy in -> numpy out (computed here, row blocks on a thread pool, the kernels
release the GIL); dask / zarr / xarray in -> a lazy dask array; ``output=`` a
path -> written to zarr chunk by chunk, atomically for local paths.
"""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import dask.array as da
import numpy as np
import zarr

from ..data import ChunkedData, as_chunked_data
from ..kernels.validation import first_nonfinite_row
from ..errors import InvalidDataError

ROW_BLOCK = 65536


def check_block(X: np.ndarray, start: int = 0) -> np.ndarray:
    """The block as float array, refusing NaN / inf rows with their index."""
    bad = first_nonfinite_row(X)
    if bad >= 0:
        raise InvalidDataError(f"X contains NaN or inf in row {start + bad}; cannot assign it to a cluster")
    return X


def apply_rows(X, n_features: int, block_fn: Callable[[np.ndarray], np.ndarray], *, width: int | None,
               dtype, output: str | os.PathLike | None = None, storage_options: dict | None = None):
    """Apply ``block_fn`` (rows (n, D) -> (n,) or (n, width)) to every row of ``X``."""
    data = as_chunked_data(X, storage_options=storage_options)
    if data.n_features != n_features:
        raise InvalidDataError(f"X has {data.n_features} features, the model was fitted on {n_features}")
    if output is None and not data.lazy:
        return _apply_numpy(data, block_fn, width, dtype)
    lazy = _apply_lazy(data, block_fn, width, dtype)
    if output is None:
        return lazy
    return write_zarr(lazy, output, storage_options)


def _apply_numpy(data: ChunkedData, block_fn, width, dtype) -> np.ndarray:
    X = data.source.array
    n = data.n_samples
    out = np.empty((n,) if width is None else (n, width), dtype=dtype)
    starts = range(0, n, ROW_BLOCK)

    def work(start):
        block = np.ascontiguousarray(X[start:start + ROW_BLOCK], dtype=data.dtype)
        out[start:start + ROW_BLOCK] = block_fn(check_block(block, start))

    with ThreadPoolExecutor(max(1, os.cpu_count() or 1)) as pool:
        list(pool.map(work, starts))
    return out


def _apply_lazy(data: ChunkedData, block_fn, width, dtype) -> da.Array:
    starts = data.bounds[:-1]

    def on_block(block, block_info=None):
        start = int(starts[block_info[0]["chunk-location"][0]]) if block_info else 0
        return block_fn(check_block(np.ascontiguousarray(block), start))

    if width is None:
        return data.X.map_blocks(on_block, dtype=dtype, drop_axis=1, chunks=(data.X.chunks[0],))
    return data.X.map_blocks(on_block, dtype=dtype, chunks=(data.X.chunks[0], (width,)))


def write_zarr(arr: da.Array, output, storage_options: dict | None = None) -> zarr.Array:
    """Write a dask array to a zarr store chunk by chunk; local paths are replaced atomically.

    The store is written beside its target and renamed into place only when
    every chunk is written, so a failure leaves no partial output.
    """
    url = os.fspath(output)
    local = "://" not in url
    target = url
    if local:
        target = f"{url.rstrip('/')}.tmp-{uuid.uuid4().hex[:8]}"
    try:
        da.to_zarr(arr, target, storage_options=storage_options, mode="w", zarr_format=3)
    except BaseException:
        if local:
            shutil.rmtree(target, ignore_errors=True)
        raise
    if local:
        if os.path.exists(url):
            shutil.rmtree(url)
        os.replace(target, url)
    return zarr.open_array(url, mode="r", storage_options=storage_options if not local else None)

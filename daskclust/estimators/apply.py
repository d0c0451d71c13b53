"""Applying a fitted model row by row: outputs follow inputs.

numpy in -> numpy out (computed here, row blocks on a thread pool, the kernels
release the GIL); dask / zarr / xarray in -> a lazy dask array; ``output=`` a
path -> written to zarr chunk by chunk, never leaving partial output.
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
    if output is not None:
        return write_rows(data, block_fn, width, dtype, output, storage_options)
    if not data.lazy:
        return _apply_numpy(data, block_fn, width, dtype)
    return _apply_lazy(data, block_fn, width, dtype)


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


def write_rows(data: ChunkedData, block_fn, width, dtype, output, storage_options: dict | None = None) -> zarr.Array:
    """Apply ``block_fn`` to every chunk and write the result to zarr, chunk by chunk.

    Every task writes its own rows and reports the first non-finite row it
    met instead of raising, so all tasks finish before the outcome is known:
    on bad input the whole store is removed and the error raised, and local
    stores are written beside the target and renamed into place only when
    complete. Either way, no partial output is left.
    """
    X = data.X
    rows = int(max(X.chunks[0]))
    if len(set(X.chunks[0][:-1])) > 1 or X.chunks[0][-1] > rows:
        X = X.rechunk({0: rows})
    shape = (data.n_samples,) if width is None else (data.n_samples, width)
    url = os.fspath(output)
    local = "://" not in url
    target = f"{url.rstrip('/')}.tmp-{uuid.uuid4().hex[:8]}" if local else url
    options = None if local else storage_options
    store = zarr.create_array(target, shape=shape, chunks=(rows,) + shape[1:], dtype=dtype, overwrite=True,
                              storage_options=options)
    starts = np.concatenate([[0], np.cumsum(X.chunks[0])])

    def write_block(block, block_info=None):
        index = block_info[0]["chunk-location"][0]
        start = int(starts[index])
        block = np.ascontiguousarray(block)
        bad = first_nonfinite_row(block)
        if bad < 0:
            store[start:start + block.shape[0]] = block_fn(block)
        return np.array([start + bad if bad >= 0 else -1], dtype=np.int64)

    status = X.map_blocks(write_block, dtype=np.int64, drop_axis=1, chunks=((1,) * X.numblocks[0],)).compute()
    bad_rows = status[status >= 0]
    if len(bad_rows):
        _remove(target, options)
        raise InvalidDataError(f"X contains NaN or inf in row {int(bad_rows.min())}; cannot assign it to a cluster")
    if local:
        if os.path.exists(url):
            shutil.rmtree(url)
        os.replace(target, url)
    return zarr.open_array(url, mode="r", storage_options=options)


def _remove(url: str, storage_options: dict | None) -> None:
    if "://" not in url:
        shutil.rmtree(url, ignore_errors=True)
        return
    from fsspec.core import url_to_fs

    fs, path = url_to_fs(url, **(storage_options or {}))
    fs.rm(path, recursive=True)

"""Applying a fitted model row by row: outputs follow inputs.

numpy in -> numpy out (computed here, row blocks on a thread pool, the kernels
release the GIL); dask / zarr in -> a lazy dask array; an xarray DataArray in ->
per-row results (labels, scores) as a DataArray along its sample dimension, with
its coordinates, numpy- or dask-backed as the input is; ``output=`` a
path -> written to zarr span by span by the workers (or local threads), under
the rules of :mod:`daskclust.io`: checked before any work, never replacing
anything but an output of the same kind (and only with ``overwrite``),
written beside the target and swapped in, the temporary store removed on
failure or interrupt once no task writes into it any more.
"""

from __future__ import annotations

import os
import threading
import time
import uuid
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from functools import partial

import dask.array as da
import numpy as np
import xarray as xr

from ..data import ChunkedData, as_chunked_data
from ..data.ranges import rows_problem
from ..display import optional_bar
from ..engine.cluster import WorkerWatch, active_client, scheduler_workers
from ..errors import ClusterError, InvalidDataError, InvalidParameterError, WorkerLost
from ..fit import PlacedData
from ..io import Location, check_target, check_workers_see, input_stores, source_location, writing
from ..persistence.outputs import create_output, open_output
from ..threads import blocks_in_order, driver_threads

ROW_BLOCK = 65536

CANCEL_TIMEOUT = 60.0
"""Seconds to wait, after a failure or an interrupt, for tasks already writing to finish
(one span each) before the temporary store is removed."""

POLL = 1.0
"""Seconds between checks on running write tasks."""


def check_block(X: np.ndarray, start: int = 0) -> np.ndarray:
    """The block as float array, refusing NaN / inf rows with their index and values so large that
    squared distances overflow (the range rule of the fit, :func:`~daskclust.kernels.validation.scale_bounds`)."""
    bad = block_problem(X, start)
    if bad:
        raise InvalidDataError(bad)
    return X


def block_problem(X: np.ndarray, start: int = 0) -> str | None:
    """Why the rows ``X`` (row ``start`` onwards of the input) cannot be scored, or None."""
    return rows_problem(X, start, "score")


def check_n_features(n_features: int, expected: int, owner: str) -> None:
    """Refuse rows of ``n_features`` features for a model ``owner`` (its class name) fitted on ``expected``,
    in scikit-learn's words."""
    if n_features != expected:
        raise InvalidDataError(f"X has {n_features} features, but {owner} is expecting {expected} features as input")


def apply_rows(X, n_features: int, block_fn: Callable[[np.ndarray], np.ndarray], *, owner: str, width: int | None,
               dtype, output: str | os.PathLike | None = None, storage_options: dict | None = None,
               kind: str = "labels", overwrite: bool = False, inputs: Iterable[Location | None] = (),
               verbose: int = 0):
    """Apply ``block_fn`` (rows (n, D) -> (n,) or (n, width)) to every row of ``X``, which must
    have the ``n_features`` the model ``owner`` (its class name, for messages) was fitted on.

    Without ``output`` the result follows ``X`` (see the module's docstring); a per-row
    result (``width=None``) of a DataArray is a DataArray named ``kind``. With ``output``,
    the result is a daskclust store of kind ``kind`` at that path; it must not overlap
    ``X`` or ``inputs`` and replaces an existing store of the same kind only with ``overwrite``;
    ``verbose`` shows a progress bar of the spans written.
    """
    placed = X if isinstance(X, PlacedData) else None
    if placed is not None:  # the rows of placed data, as their input gives them (and its chunking)
        placed.check_open()
        X = placed.input
    location = source = None
    if output is not None:
        location, source = Location.parse(output, storage_options), source_location(X)
        check_target(location, kind, overwrite=overwrite, inputs=[*input_stores(X), *inputs])
    data = placed.data if placed is not None else as_chunked_data(X, storage_options=storage_options)
    check_n_features(data.n_features, n_features, owner)
    if location is not None:
        return write_rows(data, block_fn, width, dtype, location, kind, source=source, progress=bool(verbose),
                          client=placed.client if placed is not None else None)
    out = _apply_lazy(data, block_fn, width, dtype) if data.lazy else _apply_numpy(data, block_fn, width, dtype)
    if data.input_kind == "xarray" and width is None:
        return along_samples(X, out, kind)
    return out


def scoring_weights(X, sample_weight):
    """The weights of a score's sum over the rows of ``X``: ``sample_weight``, or those placed with
    ``X`` (placed data carry their weights: giving them again is refused). numpy weights as a float64
    array, stored or lazy ones as a lazy dask array (never read into this process)."""
    if not isinstance(X, PlacedData) or X.data.weights is None:
        return sample_weight
    if sample_weight is not None:
        raise InvalidParameterError("the placed data carry their weights: score them without sample_weight")
    source = X.data.weight_source
    return np.asarray(source.array, dtype=np.float64) if source.kind == "numpy" else X.data.weights


def along_samples(X, values, name: str):
    """``values`` (one per row of the 2-D DataArray ``X``) as a DataArray named ``name`` along ``X``'s
    sample dimension (its first), with every coordinate of ``X`` that does not involve the features
    (a stacked MultiIndex included, so ``.unstack()`` gives back the original grid)."""
    samples, features = X.dims
    coords = X.drop_vars([n for n, c in X.coords.items() if features in c.dims]).isel({features: 0}).coords
    return xr.DataArray(values, coords=coords, dims=(samples,), name=name)


def _apply_numpy(data: ChunkedData, block_fn, width, dtype) -> np.ndarray:
    X = data.source.array
    n = data.n_samples
    out = np.empty((n,) if width is None else (n, width), dtype=dtype)

    def work(start: int, stop: int) -> None:
        block = np.ascontiguousarray(X[start:stop], dtype=data.dtype)
        out[start:stop] = block_fn(check_block(block, start))

    with driver_threads() as pool:
        blocks_in_order(work, n, pool, rows=ROW_BLOCK)
    return out


def _apply_lazy(data: ChunkedData, block_fn, width, dtype) -> da.Array:
    starts = data.bounds[:-1]

    def on_block(block, block_info=None):
        start = int(starts[block_info[0]["chunk-location"][0]]) if block_info else 0
        return block_fn(check_block(np.ascontiguousarray(block), start))

    if width is None:
        return data.X.map_blocks(on_block, dtype=dtype, drop_axis=1, chunks=(data.X.chunks[0],))
    return data.X.map_blocks(on_block, dtype=dtype, chunks=(data.X.chunks[0], (width,)))


def write_rows(data: ChunkedData, block_fn, width, dtype, location: Location, kind: str,
               source: Location | None = None, progress: bool = False, client=None):
    """Apply ``block_fn`` to every span of rows and write the result to a ``kind`` store at ``location``
    (:mod:`daskclust.persistence.outputs`); returns the stored ``zarr.Array``.

    The output is chunked in spans of the data's largest chunk, each written
    by one task, so no two tasks write to one zarr chunk. A task meeting a
    NaN / inf row reports it instead of writing; the error is raised when all
    tasks have ended, and the temporary store is removed: no partial output.
    On a Dask cluster (``client``, placed data's, else the active client) the workers write (after
    checking they see the temporary store, and the data, as the driver does); numpy rows are written
    by local threads. ``progress`` shows a bar of the spans written (stderr).
    """
    rows = int(max(np.diff(data.bounds)))
    n = data.n_samples
    spans = [(start, min(start + rows, n)) for start in range(0, n, rows)]
    shape = (n,) if width is None else (n, width)
    client = (client or active_client()) if data.source.kind != "numpy" else None
    with writing(location, kind, checked=True) as target, \
            optional_bar(progress, f"writing {kind}", len(spans), unit="span", leave=True) as shown:
        store = create_output(target, shape, rows, dtype)
        task = partial(_write_span, data.source, store, block_fn)
        if client is not None:
            seen = [target] + ([source] if source is not None and data.source.kind == "zarr" else [])
            check_workers_see(client, seen)
            status = _run_on_cluster(client, task, spans, shown)
        else:
            status = _run_on_threads(task, spans, shown)
        problems = [problem for problem in status if problem]
        if problems:
            raise InvalidDataError(problems[0])  # the spans' order: the first rows refused
    return open_output(location)


def _write_span(source, store, block_fn, start: int, stop: int) -> str | None:
    """Write ``block_fn`` of rows ``[start, stop)``; or, without writing, why the rows cannot be scored
    (:func:`block_problem`)."""
    block = source.read(start, stop)
    problem = block_problem(block, start)
    if problem is None:
        store[start:stop] = block_fn(block)
    return problem


def _counted(results: Iterable[str | None], bar) -> list[str | None]:
    """The results, advancing ``bar`` (if any) as each comes."""
    out = []
    for result in results:
        out.append(result)
        if bar is not None:
            bar.update(1)
    return out


def _run_on_threads(task, spans, bar=None) -> list[str | None]:
    """Run the spans on local threads; on failure or interrupt no span starts writing any more,
    and the ones writing are waited for. ``bar`` counts the spans done."""
    stop = threading.Event()

    def guarded(span):
        return None if stop.is_set() else task(*span)

    pool = ThreadPoolExecutor(max(1, os.cpu_count() or 1), thread_name_prefix="daskclust-write")
    try:
        return _counted(pool.map(guarded, spans), bar)
    except BaseException:
        stop.set()
        raise
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def _run_on_cluster(client, task, spans, bar=None) -> list[str | None]:
    """Run the spans as Dask tasks; on failure or interrupt cancel them and wait until none is
    still executing on a worker (bounded by CANCEL_TIMEOUT), so nothing writes after cleanup.
    ``bar`` counts the spans done (in order)."""
    prefix = f"daskclust-write-{uuid.uuid4().hex[:12]}"
    futures = client.map(task, *zip(*spans), key=[f"{prefix}-{i}" for i in range(len(spans))], pure=False)
    watch = WorkerWatch(client, scheduler_workers(client), tasks=True)
    try:
        return _counted((_result(client, future, watch) for future in futures), bar)
    except BaseException:
        keys = {future.key for future in futures}
        client.cancel(futures)
        _wait_until_not_executing(client, keys)
        raise


def _result(client, future, watch: WorkerWatch):
    """The future's result, waited for through the fit's liveness check (:class:`WorkerWatch` on
    tasks): a worker paused for memory longer than ``PAUSE_GRACE`` is a :class:`ClusterError` naming
    it and its limit; a worker that leaves is not (Dask runs its spans elsewhere) unless none is left."""
    while True:
        try:
            return watch.result(future)
        except WorkerLost:
            remaining = list(scheduler_workers(client))
            if not remaining:
                raise ClusterError("the Dask cluster has no workers left to write the output") from None
            watch.addresses = remaining


def _executing(keys, dask_worker=None) -> list:
    """Run on a worker: which of ``keys`` it is executing now (cancelled tasks run to their end)."""
    return [ts.key for ts in dask_worker.state.executing if ts.key in keys]


def _wait_until_not_executing(client, keys) -> None:
    deadline = time.monotonic() + CANCEL_TIMEOUT
    while time.monotonic() < deadline:
        try:
            running = client.sync(client._run, _executing, keys, on_error="return", callback_timeout=POLL * 5)
        except Exception:  # noqa: BLE001 - cluster gone: nothing can write any more
            return
        if not any(isinstance(r, list) and r for r in running.values()):
            return
        time.sleep(0.05)

"""Data placed once on a cluster's workers for many fits: :class:`PlacedData`, made by :func:`persist`.

A fit's fixed costs are paid once by the handle: the cluster connection (or an embedded cluster
started and the kernels loaded there), the input opened and checked, one Shard actor started per
worker, the chunks placed by the engine's rules (numpy pushed, zarr read, dask persisted; streamed
from the source in every pass when the data exceed the memory budget) and every chunk validated and
hashed once (the content fingerprint). Every estimator's ``fit`` -- and ``predict``, ``score``,
``transform`` and the rest -- takes the handle in place of ``X``. A fit on it starts from the state a
new engine starts from (:meth:`~daskclust.engine.engine.Engine.forget`: rows in source order, no
per-chunk state), so its model is the model a fit on ``X`` itself gives on the same cluster with the
same chunking. A lost worker is recovered from as in any fit (:mod:`daskclust.fit.run`); the data are
then placed again, checked against the handle's content fingerprint, for this fit and the later ones.
"""

from __future__ import annotations

import contextlib
import threading

from ..blas import one_blas_thread
from ..data import as_chunked_data, open_zarr_array
from ..data.chunking import row_bounds
from ..data.sources import is_path_like
from ..engine.cluster import connect
from ..engine.engine import Engine
from ..errors import InvalidDataError, InvalidParameterError, PlacedDataError
from ..io import check_workers_see, describe_source, source_location
from ..names import FINGERPRINT_CONTENT
from .plan import stored_arrays
from .progress import Progress
from .run import SharedEngine


def persist(X, sample_weight=None, *, client=None, scheduler_address=None, security=None, chunk_rows=None,
            memory_budget=None, array=None, storage_options=None, verbose=0) -> PlacedData:
    """Place ``X`` (and ``sample_weight``) on a cluster's workers once, for many fits.

    Returns a :class:`PlacedData` handle that every estimator's ``fit``, ``fit_predict``,
    ``predict``, ``score``, ``transform`` (and the mixtures' ``score_samples``, ``predict_proba``,
    ``bic``, ``aic``) take in place of ``X``: a sweep of fits (other ``n_clusters``, families, seeds)
    then connects, checks and places the data once. Close it (``with`` block or :meth:`PlacedData.close`)
    to release the workers' memory and the cluster it started.

    Parameters
    ----------
    X : array-like of shape (n_samples, n_features), dask array, zarr.Array, xarray.DataArray, or str
        Anything ``fit`` takes (a str is a zarr store path or fsspec URL). Must not change while the
        handle is open.
    sample_weight : array-like of shape (n_samples,), optional
        The rows' weights, placed with them: every fit on the handle is weighted by them (a fit given
        ``sample_weight`` as well is refused), and so are ``score``'s sums.
    client : distributed.Client, optional
        The cluster; default ``scheduler_address``, else the active client, else an embedded
        LocalCluster that lives as long as the handle (started once for the whole sweep).
    scheduler_address, security : optional
        As the estimators' parameters of these names.
    chunk_rows : int, optional
        Rows per chunk (default: :func:`~daskclust.data.chunking.default_chunk_rows` of the data's
        shape). A fit on the handle gives the model of a fit on ``X`` with this chunking; an estimator
        whose ``chunk_rows`` asks for another is refused.
    memory_budget : int, optional
        Bytes of cluster memory the data may occupy when persisted (default half the cluster's
        memory); larger data are streamed from their source in every pass. An estimator whose
        ``memory_budget`` is set must ask for the same.
    array : str, optional
        The array inside a zarr group given as ``X``.
    storage_options : dict, optional
        fsspec options of a URL ``X``.
    verbose : int or bool, default=0
        Print the cluster's start (when started here).

    Returns
    -------
    PlacedData

    Raises
    ------
    InvalidDataError
        The data cannot be clustered: metadata (shape, dtype, chunks) checked first, then every value
        of every chunk (NaN / inf rows, bad weights), all before this function returns.
    ClusterError
        The cluster cannot hold or reach the data.

    Notes
    -----
    Placement reads every row once (numpy rows are pushed from this process, zarr chunks read by the
    workers, dask chunks computed there); streamed data are read once more, to validate and hash
    them. A fit on the handle reads only what its passes read (``bytes_read_`` is 0 for persisted
    data), uses the handle's client whatever client is active, and keeps its per-row state in the
    workers' memory (``state="zarr"`` is refused). ``predict`` and the other outputs follow what
    ``X`` would give (numpy in, numpy out; lazy in, lazy out; a DataArray per row for a DataArray).
    """
    return PlacedData(X, sample_weight, client=client, scheduler_address=scheduler_address, security=security,
                      chunk_rows=chunk_rows, memory_budget=memory_budget, array=array,
                      storage_options=storage_options, verbose=verbose)


class PlacedData:
    """Data placed on a cluster's workers, validated and fingerprinted once (made by :func:`persist`).

    Attributes
    ----------
    data : ChunkedData
        The data as the engine reads them (chunk bounds, sources, weights).
    input, sample_weight
        What :func:`persist` was given (a path with ``array`` or ``storage_options``: the zarr array
        it names, opened). Outputs of ``predict`` follow ``input``; no output may overlap its stores.
    sources : tuple of dict or None
        Where the rows and the weights are stored (``{"url", "array"}``, None in memory), as models
        and checkpoints record them.
    client : distributed.Client
        The cluster the data are placed on.
    memory_budget : int or None
        The budget :func:`persist` was given.
    """

    def __init__(self, X, sample_weight=None, *, client=None, scheduler_address=None, security=None, chunk_rows=None,
                 memory_budget=None, array=None, storage_options=None, verbose=0):
        if is_path_like(X) and (array is not None or storage_options):  # the array itself: read again as opened
            X = open_zarr_array(X, array, storage_options)
        self.data = as_chunked_data(X, sample_weight, chunk_rows=chunk_rows, storage_options=storage_options)
        self.input = X
        self.sample_weight = sample_weight
        self.memory_budget = memory_budget
        self.sources = (describe_source(X), describe_source(sample_weight))
        self._lock = threading.Lock()
        self._closed = False
        self._stack = contextlib.ExitStack()
        self._engines: KeptEngine | None = None
        try:
            self.client = self._stack.enter_context(
                connect(client, scheduler_address, security=security, dtype=self.data.dtype,
                        announce=Progress(int(verbose), None, self.data.nbytes, 0).say))
            check_workers_see(self.client, [source_location(a) for a in stored_arrays(self.data)],
                              error=InvalidDataError)
            engines = KeptEngine(self.client, self.data, memory_budget=memory_budget)
            self._engines = engines
            with self._active():
                engine = engines.get()
                engines.content = engine.content_fingerprint()  # every chunk read and validated
            self._persisted = engine.persisted
        except BaseException:
            self.close()
            raise

    # ---------------------------------------------------------------- what the handle holds
    @property
    def n_samples(self) -> int:
        """Rows."""
        return self.data.n_samples

    @property
    def n_features(self) -> int:
        """Features per row."""
        return self.data.n_features

    @property
    def n_chunks(self) -> int:
        """Row chunks (the engine's, fixed at placement)."""
        return self.data.n_chunks

    @property
    def dtype(self):
        """The rows' float dtype (float32 or float64)."""
        return self.data.dtype

    @property
    def nbytes(self) -> int:
        """Bytes of the rows (and weights) in memory."""
        return self.data.nbytes

    @property
    def fingerprint(self) -> dict:
        """What stores derived from the data record of them (checkpoints, tree stores, models'
        ``training_data_``): shape, dtype, chunk bounds, weighted, and the content fingerprint."""
        self.check_open()
        return {**self.data.fingerprint(), FINGERPRINT_CONTENT: self._engines.content}

    @property
    def persisted(self) -> bool:
        """Whether the rows are held in the workers' memory (else streamed from their source every pass)."""
        self.check_open()
        engine = self._engines.started
        return engine.persisted if engine is not None else self._persisted

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called."""
        return self._closed

    def __repr__(self) -> str:
        where = "closed" if self._closed else ("persisted" if self.persisted else "streamed")
        return (f"PlacedData({self.n_samples} x {self.n_features} {self.dtype} in {self.n_chunks} chunks, "
                f"{where})")

    # ---------------------------------------------------------------- fits
    def check_fit(self, *, sample_weight=None, client=None, scheduler_address=None, chunk_rows=None,
                  memory_budget=None, state: str = "memory") -> None:
        """Refuse, before any work, a fit the placed data cannot serve as asked: weights given again,
        another cluster, another chunking or memory budget, the per-row state in a store."""
        self.check_open()
        if sample_weight is not None:
            raise InvalidParameterError("the placed data carry their weights: pass sample_weight to daskclust.persist, "
                                        "not to the fit")
        here = self.client.scheduler.address
        asked = [(what, address) for what, address in (("client", _scheduler_of(client)),
                                                       ("scheduler_address", _scheduler_of(scheduler_address)))
                 if address is not None and address != here]
        if asked:
            what, address = asked[0]
            raise InvalidParameterError(f"the data are placed on the cluster at {here}; the fit's {what} is the "
                                        f"cluster at {address}: fit on the handle without it, or persist the data "
                                        "on that cluster")
        if chunk_rows is not None:
            wanted = row_bounds(self.n_samples, min(int(chunk_rows), self.n_samples))
            if len(wanted) != len(self.data.bounds) or (wanted != self.data.bounds).any():
                rows = int(self.data.bounds[1] - self.data.bounds[0])
                raise InvalidParameterError(f"the placed data are chunked in {self.n_chunks} chunks of {rows} rows; "
                                            f"chunk_rows={chunk_rows} asks for another chunking: persist with "
                                            "chunk_rows, or leave the estimator's chunk_rows=None")
        if memory_budget is not None and memory_budget != self.memory_budget:
            raise InvalidParameterError(f"the data were placed with memory_budget={self.memory_budget}; the fit asks "
                                        f"memory_budget={memory_budget}: persist with it, or leave the estimator's "
                                        "memory_budget=None")
        if state != "memory":
            raise InvalidParameterError("a fit on placed data keeps its per-row state in the workers' memory "
                                        "(state='memory'): fit X itself for state='zarr'")

    @contextlib.contextmanager
    def in_use(self, progress: bool = False):
        """The handle's engine for one call (a fit, a sketch), with progress bars or not: the client
        current and the driver's BLAS on one thread meanwhile. One call at a time."""
        self.check_open()
        if not self._lock.acquire(blocking=False):
            raise PlacedDataError("the placed data are in use by another call: a handle serves one fit at a time")
        try:
            self._engines.progress = progress
            with self._active():
                yield self._engines
        finally:
            self._lock.release()

    def _active(self) -> contextlib.ExitStack:
        stack = contextlib.ExitStack()
        stack.enter_context(self.client.as_current())
        stack.enter_context(one_blas_thread())
        return stack

    def check_open(self) -> None:
        """Refuse a closed handle (:class:`~daskclust.errors.PlacedDataError`)."""
        if self._closed:
            raise PlacedDataError("the placed data were closed: persist the data again (daskclust.persist) or pass "
                                  "X itself")

    # ---------------------------------------------------------------- life
    def close(self) -> None:
        """Release the placed chunks (the workers' shards) and close what :func:`persist` started (an
        embedded cluster, a connection to ``scheduler_address``). Closing twice does nothing."""
        if self._closed:
            return
        if not self._lock.acquire(blocking=False):
            raise PlacedDataError("the placed data are in use by a fit: close them when it has returned")
        try:
            self._closed = True
            if self._engines is not None:
                with self.client.as_current():
                    self._engines.discard()
        finally:
            self._lock.release()
            self._stack.close()

    def __enter__(self) -> PlacedData:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __array__(self, dtype=None, copy=None):
        raise TypeError("PlacedData does not bring its rows to this process: pass it to a daskclust estimator's fit, "
                        "predict, score or transform, or pass its input (.input) elsewhere")

    def __reduce__(self):
        raise TypeError("PlacedData holds the data placed on a live cluster and cannot be pickled: pickle the fitted "
                        "estimator, or persist the data again where they are needed")


class KeptEngine(SharedEngine):
    """The engine of placed data: kept open between fits (not as the current client's context: a call
    on the handle makes its client current, :meth:`PlacedData.in_use`), replaced after a lost worker
    by one holding the same data (its content fingerprint checked against ``content``), closed with
    the handle."""

    content: str | None = None
    """The data's content fingerprint when they were placed."""

    def _start(self) -> Engine:
        engine = Engine(self.data, self.client, memory_budget=self.memory_budget, progress=self.progress)
        try:
            engine.start()
            if self.content is not None and engine.content_fingerprint() != self.content:
                raise InvalidDataError(
                    f"the placed data changed at their source: their chunks were placed again after a lost worker and "
                    f"their content fingerprint is {engine.content_fingerprint()[:16]}..., not "
                    f"{self.content[:16]}... as when they were placed: persist the data again")
        except BaseException:
            engine.close()
            raise
        return engine

    def _close(self, engine: Engine) -> None:
        engine.close()


def _scheduler_of(value) -> str | None:
    """The scheduler address a client, a cluster or an address names (tcp:// when no protocol is given)."""
    if value is None:
        return None
    if isinstance(value, str):
        return value if "://" in value else f"tcp://{value}"
    scheduler = getattr(value, "scheduler", None)  # a Client
    return getattr(scheduler, "address", None) or getattr(value, "scheduler_address", None)

"""The iterative engine: chunks placed on workers once, passes run by actors.

Per pass the driver sends one small operation (parameters included) to the
root :class:`Shard`, which forwards it down a binary tree of shards, worker to
worker; every shard folds its chunks into one accumulator, keeping per-chunk
state beside the chunk; accumulators are merged on the way back up and the
driver receives only the root's. Nothing of size N travels to the driver.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import time
from dataclasses import dataclass
from typing import Any

import numpy as np
from distributed import Client, wait

from ..blas import one_blas_thread
from ..data import ChunkedData
from ..errors import ClusterError, DaskclustError
from . import cluster
from .cluster import WorkerWatch, scheduler_workers
from .events import ChunkEvents, ChunkListener
from .ops import ChunkOp, Paired
from .packing import pack, unpack
from .shard import Shard

CLOSE_TIMEOUT = 2.0
"""Seconds to wait for a shard to release its chunks when the engine closes."""

log = logging.getLogger("daskclust")


@dataclass(frozen=True)
class WorkerInfo:
    address: str
    nthreads: int
    memory_limit: int
    nanny: str | None = None


def cluster_workers(client: Client) -> list[WorkerInfo]:
    """The cluster's workers, in a fixed (address) order, asked of the scheduler itself.

    A cluster without workers is given ``cluster.WORKERS_TIMEOUT`` seconds for one to join,
    then :class:`ClusterError`.
    """
    info = scheduler_workers(client)
    if not info:
        timeout = cluster.WORKERS_TIMEOUT
        try:
            client.wait_for_workers(1, timeout=timeout)
        except TimeoutError as exc:
            address = getattr(client.scheduler, "address", "?")
            raise ClusterError(f"no workers joined the Dask cluster at {address} within {timeout:g} s: "
                               "start workers (dask worker ADDRESS) or check their logs") from exc
        info = scheduler_workers(client)
    return [
        WorkerInfo(addr, int(w.get("nthreads", 1)), int(w.get("memory_limit") or 0), w.get("nanny"))
        for addr, w in sorted(info.items())
    ]


def default_memory_budget(workers: list[WorkerInfo]) -> int:
    """Half the cluster's memory (workers without a limit count the machine's RAM / workers)."""
    import psutil

    fallback = psutil.virtual_memory().total // max(1, len(workers))
    return sum(w.memory_limit or fallback for w in workers) // 2


def contiguous_placement(bounds: np.ndarray, workers: list[WorkerInfo]) -> np.ndarray:
    """Worker index of every chunk: contiguous ranges, rows in proportion to threads."""
    n_chunks = len(bounds) - 1
    threads = np.array([w.nthreads for w in workers], dtype=float)
    targets = np.cumsum(threads) / threads.sum() * bounds[-1]
    mids = (bounds[:-1] + bounds[1:]) / 2.0
    return np.minimum(np.searchsorted(targets, mids, side="right"), len(workers) - 1).astype(int)[:n_chunks]


class Engine:
    """Runs chunk operations over ``data`` on ``client``'s workers.

    Parameters
    ----------
    data : ChunkedData
    client : distributed.Client
    memory_budget : int, optional
        Bytes of cluster memory the data may occupy when persisted; default half
        the cluster's memory. Larger data is streamed from its source every pass.
    persist : bool, optional
        Force persisting (True) or streaming (False) instead of the budget rule.
    state_store : str, optional
        zarr location (path or URL every worker reaches) keeping the per-row
        state between passes instead of worker memory.
    progress : bool, default False
        Show a bar (chunks done of all) for each long pass: every pass inside a
        :meth:`phase` (seeding, coreset, sketch), and every pass reading streamed
        rows. Without it the shards send no events at all.
    fingerprint : bool, default True
        Digest every chunk when it is first read, for :meth:`content_fingerprint` without a pass of
        its own. False for an engine whose passes record no fingerprint (a transform writing a
        store): hashing costs more CPU than reading (BLAKE2b, 0.5 GB/s a core), and
        :meth:`content_fingerprint` then reads the data again.
    """

    def __init__(self, data: ChunkedData, client: Client, *, memory_budget: int | None = None,
                 persist: bool | None = None, state_store: str | None = None, progress: bool = False,
                 fingerprint: bool = True):
        self.data = data
        self._fingerprint = fingerprint
        self.client = client
        self._memory_budget = memory_budget
        self._persist_choice = persist
        self._state_store = state_store
        self._progress = progress
        self._listener: ChunkListener | None = None
        self._phase: str | None = None
        self.shards: list[Any] = []
        self.workers: list[WorkerInfo] = []
        self._refs: list[Any] = []
        self.persisted = False
        self.memory_budget = 0  # bytes, known once started
        self.n_passes = 0
        self.pass_seconds = 0.0
        self._content: str | None = None
        self._rider: ChunkOp | None = None
        self._ridden: Any = None

    def residence(self) -> str:
        """Where the rows are, and why, for the fit's messages: persisted on the workers, or streamed
        from the source every pass (the data exceed the memory budget, or ``persist=False``)."""
        size, budget = self.data.nbytes / 1e6, self.memory_budget / 1e6
        if self.persisted:
            return f"persisted on the workers (data {size:.1f} MB, memory budget {budget:.1f} MB)"
        if self.data.nbytes > self.memory_budget:
            return (f"streamed from the source every pass (data {size:.1f} MB exceed the memory budget of "
                    f"{budget:.1f} MB)")
        return f"streamed from the source every pass, as asked (data {size:.1f} MB, memory budget {budget:.1f} MB)"

    # ---------------------------------------------------------------- set-up
    def __enter__(self) -> Engine:
        """Start the shards with ``client`` current (Dask helpers and actor handles use it) and the
        driver's BLAS on one thread while the engine is open (:mod:`daskclust.blas`: its spinning
        threads would take cores from the workers of a local cluster)."""
        self._context = contextlib.ExitStack()
        self._context.enter_context(self.client.as_current())
        self._context.enter_context(one_blas_thread())
        try:
            self.start()
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def __exit__(self, *exc) -> None:
        with self._context:
            self.close()

    def start(self) -> None:
        data, client = self.data, self.client
        workers = cluster_workers(client)  # never empty: ClusterError after a bounded wait
        budget = self._memory_budget or default_memory_budget(workers)
        kind = data.source.kind
        if self._persist_choice is not None:
            self.persisted = bool(self._persist_choice) or kind == "numpy"
        else:
            self.persisted = kind == "numpy" or data.nbytes <= budget
        self.memory_budget = budget
        log.debug("%s", self.residence())
        if self._progress:  # subscribed before the shards exist: no event of theirs can precede it
            self._listener = ChunkListener(client)

        x_refs = w_refs = None
        if kind == "dask" and self.persisted:
            x_refs, placement = self._persist_dask(workers)
        else:
            placement = contiguous_placement(data.bounds, workers)
        if kind == "numpy":
            x_refs = self._push(data.source.array, placement, workers)
        w_kind = data.weight_source.kind if data.weight_source is not None else None
        if w_kind == "numpy" or (w_kind == "dask" and self.persisted):
            w_refs = self._push_weights(placement, workers)

        x_source = data.source if kind != "numpy" else None
        w_source = data.weight_source if w_refs is None else None
        used = sorted(set(placement.tolist()))
        shard_futures = [
            client.submit(Shard, x_source, w_source, self.persisted, self._state_store, self._fingerprint, actor=True,
                          workers=[workers[i].address], allow_other_workers=False, pure=False)
            for i in used
        ]
        self.workers = [workers[i] for i in used]
        watch = self._watch(self.workers, starting=True, tasks=True)
        try:  # a shard pinned to a worker that left (or stays paused) would never start
            self.shards = [watch.result(f) for f in shard_futures]
        except BaseException:
            client.cancel(shard_futures)
            raise
        attach = []
        for shard, i in zip(self.shards, used):
            mine = np.flatnonzero(placement == i)
            specs = [(int(c), int(data.bounds[c]), int(data.bounds[c + 1])) for c in mine]
            xr = [x_refs[c] for c in mine] if x_refs is not None else None
            wr = [w_refs[c] for c in mine] if w_refs is not None else None
            attach.append(lambda shard=shard, specs=specs, xr=xr, wr=wr: shard.attach(specs, xr, wr))
        rows = sum(self._wait(attach, self._watch(self.workers, starting=True)))
        assert rows == data.n_samples, (rows, data.n_samples)
        self.placement = placement

    def _push(self, array: np.ndarray, placement: np.ndarray, workers: list[WorkerInfo]) -> list:
        """Send each chunk of an in-memory array straight to its worker (once the workers run:
        a paused worker accepts no data)."""
        refs: list = [None] * (len(self.data.bounds) - 1)
        b = self.data.bounds
        self._watch([workers[i] for i in sorted(set(placement.tolist()))], starting=True, tasks=True).running()
        for i, worker in enumerate(workers):
            mine = np.flatnonzero(placement == i)
            if len(mine) == 0:
                continue
            pieces = [np.ascontiguousarray(array[b[c]:b[c + 1]], dtype=self.data.source.dtype) for c in mine]
            futures = self.client.scatter(pieces, workers=[worker.address], hash=False)
            for c, f in zip(mine, futures):
                refs[c] = f
        self._refs.extend(r for r in refs if r is not None)
        return refs

    def _push_weights(self, placement: np.ndarray, workers: list[WorkerInfo]) -> list:
        src = self.data.weight_source
        array = src.array if src.kind == "numpy" else None
        if array is None:  # dask weights: small (8 bytes a row), computed once here
            array = self._watch(workers, starting=True, tasks=True).result(self.client.compute(self.data.weights))
        return self._push(np.asarray(array, dtype=np.float64), placement, workers)

    def _persist_dask(self, workers: list[WorkerInfo]) -> tuple[list, np.ndarray]:
        """Persist a dask array on the cluster; chunks stay where Dask computed them."""
        from distributed import futures_of

        x = self.client.persist(self.data.X)
        refs = sorted(futures_of(x), key=lambda f: f.key[1])
        self._refs.extend(refs)  # released by close() even if the wait fails
        self._watch(workers, starting=True, tasks=True).poll(lambda timeout: wait(refs, timeout=timeout))
        where = self.client.who_has(refs)
        index = {w.address: i for i, w in enumerate(workers)}
        placement = np.array([index[sorted(where[f.key])[0]] for f in refs], dtype=int)
        return refs, placement

    # ---------------------------------------------------------------- passes
    def map_reduce(self, op: ChunkOp) -> Any:
        """Run ``op`` over every chunk and return the tree-merged accumulator.

        Raises :class:`WorkerLost` when a worker holding chunks leaves the cluster.
        """
        if self._rider is not None and getattr(op, "reads_rows", True):  # the rider (ride_along) comes along
            rider, self._rider = self._rider, None
            result, self._ridden = self.map_reduce(Paired(op, rider))
            return result
        t0 = time.perf_counter()
        others = [(shard, worker.address) for shard, worker in zip(self.shards[1:], self.workers[1:])]
        events = self._bar(op)
        returned = False
        try:
            result = unpack(self._wait([lambda: self.shards[0].run_tree(pack(op), others, events)])[0])
            returned = True
        finally:
            if events is not None:
                self._listener.end_pass(complete=returned)
        self.n_passes += 1
        self.pass_seconds += time.perf_counter() - t0
        return result

    def ride_along(self, op: ChunkOp | None) -> None:
        """Run ``op`` with the next pass that reads the rows, in the same visit of each chunk (after that
        pass's own operation): a streamed store is then read once for both. Its merged accumulator is
        :meth:`ridden` once that pass has run. None: no operation rides along (any waiting is dropped)."""
        self._rider, self._ridden = op, None

    def ridden(self) -> Any:
        """The accumulator of the operation given to :meth:`ride_along`, None while no pass has taken it."""
        return self._ridden

    @contextlib.contextmanager
    def phase(self, name: str):
        """Passes run inside are a long phase ``name`` (seeding, coreset, sketch): with ``progress``
        each shows a bar, persisted data or not."""
        before, self._phase = self._phase, name
        try:
            yield
        finally:
            self._phase = before

    def _bar(self, op: ChunkOp) -> ChunkEvents | None:
        """Open the progress bar of a pass of ``op`` if it shows one; the events its shards send."""
        if self._listener is None:
            return None
        name = self._phase
        if name is None and not self.persisted and getattr(op, "reads_rows", True):
            name = "streamed pass"
        if name is None:
            return None
        return self._listener.open(f"{name} (pass {self.n_passes + 1})", self.data.n_chunks)

    def bytes_read(self) -> int:
        """Bytes the workers have read from the data's sources so far (0 for pushed numpy data)."""
        return int(sum(self._on_all("bytes_read")))

    def content_fingerprint(self) -> str:
        """The data's content fingerprint: SHA-256 over every chunk's digest in chunk order (each
        computed on the worker holding the chunk, when it was first read and validated; chunks not read
        yet are read now). Stores derived from the data record it and are refused with other data."""
        if self._content is None:
            digests: dict[int, str] = {}
            for held in self._on_all("content_digests"):
                digests.update(held)
            combined = hashlib.sha256()
            for index in range(self.data.n_chunks):
                combined.update(f"{index}:{digests[index]}\n".encode())
            self._content = combined.hexdigest()
        return self._content

    def _on_all(self, method: str, *args) -> list:
        """Call ``method`` on every shard at once and return their results."""
        return self._wait([lambda s=s: getattr(s, method)(*args) for s in self.shards])

    def _watch(self, workers: list[WorkerInfo], starting: bool = False, tasks: bool = False) -> WorkerWatch:
        """The liveness check of a wait on ``workers`` (see :class:`WorkerWatch`)."""
        return WorkerWatch(self.client, [w.address for w in workers], starting=starting, tasks=tasks,
                           memory_limits={w.address: w.memory_limit for w in workers},
                           nannies={w.address: w.nanny for w in workers})

    def _wait(self, calls, watch: WorkerWatch | None = None) -> list:
        """Start the actor calls and collect their results, turning the loss of a worker into
        :class:`WorkerLost` (checked every ``LIVENESS_POLL`` seconds while waiting: a call
        forwarded to a dead worker otherwise fails only after the connect timeout)."""
        watch = watch or self._watch(self.workers)
        try:
            futures = [call() for call in calls]
            return [watch.result(future) for future in futures]
        except DaskclustError:
            raise
        except Exception as exc:  # noqa: BLE001 - comm errors: find out whether a worker left
            watch.check(exc)
            raise

    def save_state(self, url: str) -> None:
        """Every shard writes its chunks' per-row state and row order under ``url`` (checkpoints)."""
        self._on_all("save_state", url)

    def load_state(self, url: str) -> None:
        """Every shard restores its chunks' per-row state and row order from ``url``."""
        self._on_all("load_state", url)

    def forget(self) -> None:
        """Every shard back to its state when the engine started (rows in source order, no per-chunk
        state, no bytes counted; the data stay where they are): the next run on this engine is the run
        a new engine would give, without placing the data again."""
        self._on_all("forget")
        self._rider = self._ridden = None
        self.n_passes = 0
        self.pass_seconds = 0.0

    def show_progress(self, on: bool) -> None:
        """Show a bar for the long passes from now on (``on``), or no longer: what ``progress`` set when
        the engine started, changed for the next user of an engine kept open (a placed-data handle)."""
        if on and self._listener is None:
            self._listener = ChunkListener(self.client)
        elif not on and self._listener is not None:
            self._listener.close()
            self._listener = None
        self._progress = on

    def reorder(self, name: str) -> None:
        """Sort each chunk's rows on its worker by the per-row state ``name`` (see ``Shard.reorder``)."""
        self._on_all("reorder", name)

    def close(self) -> None:
        """Release the shards (their chunks and state) and the data the driver pushed.

        A shard whose worker died, or that is still waiting on one, is not waited for.
        """
        try:
            alive = set(scheduler_workers(self.client)) if self.shards else set()
        except Exception:  # noqa: BLE001 - teardown: a scheduler that does not answer has no shard to wait for
            alive = set()
        pending = []
        for shard, worker in zip(self.shards, self.workers):
            if worker.address in alive:
                pending.append(shard.close())
        for future in pending:
            try:
                future.result(timeout=CLOSE_TIMEOUT)
            except Exception:  # noqa: BLE001 - teardown: a busy or dying shard is simply dropped
                pass
        self.shards = []
        if self._refs:
            self.client.cancel(self._refs)
        self._refs = []
        if self._listener is not None:
            self._listener.close()
            self._listener = None

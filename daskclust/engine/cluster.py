"""Which Dask cluster a fit runs on, and whether its workers are still there.

Order of preference: an explicit ``client``; else a ``scheduler_address``; else
the active client; else an embedded ``LocalCluster`` that is closed afterwards.

Every wait of the engine on the cluster is bounded or watched: the scheduler is
asked directly (never the client's cached ``scheduler_info()``, which its
periodic refresh overwrites with an identity without workers) whether the
workers a wait depends on are still present and running (:class:`WorkerWatch`).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import dask
from distributed import Client, LocalCluster, Worker
from distributed.security import Security
from distributed.utils import sync
from distributed.worker_memory import parse_memory_limit

from ..errors import ClusterError, InvalidParameterError, WorkerLost

log = logging.getLogger("daskclust")

LOOPBACK = "127.0.0.1"
"""Interface of the embedded cluster (scheduler, workers, nannies, dashboard): a Dask scheduler
runs any code a client sends it, so it is never exposed beyond this machine by default."""

SCHEDULER_TIMEOUT = 15.0
"""Seconds for a scheduler address to answer an identity request before ``connect`` gives up.
A scheduler answers in milliseconds on a LAN (1-2 s with a TLS handshake over a WAN); 15 s
leaves room for a busy one and still tells the user within a minute (dask's own connect
timeout is 30 s, and its handshake read has no bound at all: a non-Dask port hung for ever)."""

IDENTITY_TIMEOUT = 10.0
"""Seconds for a connected scheduler to answer one liveness query (it takes ~1-5 ms here)."""

WORKERS_TIMEOUT = 30.0
"""Seconds to wait for a first worker when the cluster has none. A ``dask worker`` joins 2-3 s
after it is started on this 2-core machine; 30 s covers a slow start and keeps the one-minute rule."""

PAUSE_GRACE = 30.0
"""Seconds a worker may stay paused (memory above ``distributed.worker.memory.pause``) while
work waits on it before the wait fails: a worker spilling to disk resumes within seconds; one
whose chunks and state alone exceed the threshold never does."""

LIVENESS_POLL = 1.0
"""Seconds between liveness checks while waiting on workers (a check costs one ~1-5 ms query)."""

LOSS_GRACE = 10.0
"""Seconds for the scheduler to remove a worker whose connection a call found closed: it learns
of a dead worker process from its own closed stream, within about a second here."""

EVENT_DELAY = 0.5
"""Seconds to wait for a nanny's restart event when its worker is already seen gone (the nanny
sends the event in the background just before it terminates the worker)."""

MEMORY_RESTART_TOPIC = "worker-restart-memory"
"""The scheduler event a nanny logs when it restarts its worker for memory (distributed >= 2023.2)."""

IMPORT_MEMORY = 200_000_000
"""Bytes a worker process holds once it has imported daskclust (numba, zarr, ...): 193 MB
measured (65 MB idle ``dask worker`` + 128 MB import; Python 3.11, numba 0.68, distributed
2026.8). A worker whose limit is near this is killed by its nanny as soon as a shard starts."""

LOW_MEMORY_LIMIT = 2 * IMPORT_MEMORY
"""Below this memory limit a worker lost while a fit starts is reported as a memory problem
(:class:`ClusterError`) instead of a :class:`WorkerLost` the fit would retry for nothing."""


def active_client() -> Client | None:
    """The client the caller has made current, if any."""
    try:
        from distributed import default_client

        return default_client()
    except ValueError:
        return None


class KernelPreparation(Protocol):
    """Compiles the kernels a fit of ``dtype`` data runs into numba's cache before an embedded
    cluster works (``client`` None: before worker processes start); returns a report with
    ``compiled`` (bool) and ``seconds``."""

    def __call__(self, client: Client | None, dtype, *, announce: Callable[[str], None] | None = None) -> Any: ...


_kernel_preparation: KernelPreparation | None = None


def set_kernel_preparation(prepare: KernelPreparation) -> None:
    """Set what :func:`connect` runs before an embedded cluster works. The engine knows no fit:
    the layer that does (:mod:`daskclust.estimators`) sets it when imported."""
    global _kernel_preparation
    _kernel_preparation = prepare


@dataclass(frozen=True)
class _NothingPrepared:
    compiled: bool = False
    seconds: float = 0.0


def _prepare_nothing(client, dtype, *, announce=None) -> _NothingPrepared:
    return _NothingPrepared()


EMBEDDED_CLUSTER = {"processes": False}
"""The cluster a fit starts when it is given none: one worker in this process with a thread per
core (the kernels release the GIL, so its threads compute in parallel). Measured with
``daskclust demo`` (40,000 x 2, C = 400) on 2 cores, whole command, kernels in numba's cache:
2.5 s and 2.4 s of CPU on an idle machine (6-10 s, 9-10 s of CPU, with two worker processes,
which each start an interpreter, import daskclust, load the kernels and are stopped at the
end); first run: 11 s (22 s), the kernels compiled once on two cores (see
:mod:`daskclust.fit.warmup`) instead of once in every process. Worker processes (memory
limits enforced by nannies, a crashed worker restarted) are one ``client`` or
``scheduler_address`` away, or ``connect(cluster_kwargs={"processes": True})``."""


def start_local_cluster(**kwargs) -> LocalCluster:
    """A ``LocalCluster`` with Dask's defaults for this machine (worker processes unless
    ``processes=False``), on loopback only.

    Scheduler, workers, nannies and the dashboard listen on 127.0.0.1 (an open scheduler runs
    anyone's code), over TCP also when the workers are threads of this process; the dashboard
    goes on a free port so that a busy 8787 is no error. On Python 3.11 the workers' statistical
    profiler is off (:func:`profiler_off`); worker processes start with :data:`WORKER_MALLOC` unless
    their memory limit is small (:func:`worker_malloc`), and this process's environment stays as it was
    (:func:`environment_kept`).
    """
    options = dict(host=LOOPBACK, dashboard_address=f"{LOOPBACK}:0", processes=True)
    options.update(kwargs)
    if not options["processes"]:
        options.setdefault("protocol", "tcp://")  # Dask's in-memory default cannot bind to a host
        options.setdefault("worker_dashboard_address", f"{LOOPBACK}:0")
    malloc = worker_malloc(options.get("memory_limit", "auto"), options.get("threads_per_worker") or 1)
    with profiler_off(), dask.config.set(malloc):
        with environment_kept(dask.config.get("distributed.nanny.pre-spawn-environ")):  # what the nannies copy
            return LocalCluster(**options)


WORKER_MALLOC = {"MALLOC_MMAP_THRESHOLD_": 32 << 20, "MALLOC_TRIM_THRESHOLD_": 64 << 20}
"""glibc's allocator settings of the worker processes daskclust starts: blocks up to 32 MiB come from
the heap, and up to 64 MiB of freed memory stays mapped, so that the scratch arrays a pass allocates
for every chunk (the E-step's pair records and their merges) reuse the same pages. Dask's default
(``MALLOC_TRIM_THRESHOLD_=65536``, which also fixes the mmap threshold at 128 KiB) maps and zeroes
every such block anew: measured for issue 26, a spherical fit at C = 16384 on the BIRCH grid took
257,000 page faults in its two workers with Dask's setting and 18,900 with these, a KMeans iteration
on a streamed 10-million-row store 122,000 and 1,155."""

MALLOC_MIN_MEMORY = 4 << 30
"""Workers with a smaller memory limit keep Dask's allocator setting (:func:`worker_malloc`)."""


def worker_malloc(memory_limit="auto", threads_per_worker: int = 1) -> dict:
    """Dask config giving worker processes :data:`WORKER_MALLOC` before they start
    (``distributed.nanny.pre-spawn-environ``; a variable already in this process's environment, the
    user's own, still wins, as Dask documents), unless each worker's ``memory_limit`` (Dask's
    spelling, per worker) is below :data:`MALLOC_MIN_MEMORY`: up to 64 MiB of freed memory kept per
    allocator arena is a large share of a small worker. Measured for issue 26 with 1 GiB workers on
    the zstd store of the outofcore suite: single KMeans fits peaked at 756 MB with these and 724 MB
    with Dask's setting, but in the bench's run, the fifth fit on the same workers, one worker reached
    95 % of its limit and its nanny restarted it (the fit started over); the cause was not found, so
    such workers keep Dask's setting."""
    limit = parse_memory_limit(memory_limit, threads_per_worker, os.cpu_count() or 1,
                               logger=logging.getLogger(__name__))
    if limit is not None and limit < MALLOC_MIN_MEMORY:
        return {}
    return {f"distributed.nanny.pre-spawn-environ.{name}": value for name, value in WORKER_MALLOC.items()}


@contextlib.contextmanager
def environment_kept(names) -> Iterator[None]:
    """This process's environment variables ``names`` as they were on entry, again on exit: a nanny copies
    its workers' variables (``distributed.nanny.pre-spawn-environ``) into the process starting them, where
    they would pass for the user's own to every cluster started later."""
    before = {name: os.environ.get(name) for name in names}
    try:
        yield
    finally:
        for name, value in before.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def profiler_off():
    """Dask config for workers started inside it, without the workers' profiler on CPython < 3.12.

    The profiler calls ``sys._current_frames()`` every 10 ms; on CPython 3.11 a garbage collection
    inside that call can run a finalizer (a distributed ``Future``'s) that waits for the GIL while the
    interpreter's thread-list lock is held, and a thread starting at that moment (a shard's reader
    pool) then waits forever (python/cpython#106883; seen as a hung fit in an in-process cluster,
    every thread idle). Clusters of one's own on 3.11 want ``distributed.worker.profile.enabled:
    false`` too.
    """
    return dask.config.set({"distributed.worker.profile.enabled": False} if sys.version_info < (3, 12) else {})


def _describe(cluster: LocalCluster, client: Client) -> str:
    threads = sum(client.nthreads().values())
    if cluster.processes:
        return f"a LocalCluster with {len(cluster.workers)} worker process(es), {threads} thread(s)"
    return f"a LocalCluster in this process ({len(cluster.workers)} worker, {threads} thread(s))"


def security_from_files(ca_file: str | None = None, cert: str | None = None,
                        key: str | None = None) -> Security | None:
    """The client ``Security`` of a TLS cluster from PEM files, or None when none is given
    (then dask's config applies, ``distributed.comm.tls.*``).

    ``key`` may be omitted when ``cert`` holds the private key too.
    """
    if not (ca_file or cert or key):
        return None
    if not (ca_file and cert):
        raise InvalidParameterError("TLS needs a CA certificate and a client certificate (and its key, unless "
                                    "the certificate file holds it)")
    for what, path in (("CA certificate", ca_file), ("client certificate", cert), ("client key", key)):
        if path is not None and not os.path.isfile(path):
            raise InvalidParameterError(f"TLS {what} {path!r} does not exist")
    return Security(tls_ca_file=ca_file, tls_client_cert=cert, tls_client_key=key, require_encryption=True)


async def _ask_identity(address: str, security: Security | None, timeout: float) -> dict:
    from distributed.comm import connect as open_comm

    args = (security or Security()).get_connection_args("client")
    comm = await open_comm(address, timeout=timeout, **args)
    try:
        await comm.write({"op": "identity", "n_workers": 0, "reply": True})
        return await comm.read()
    finally:
        comm.abort()


SCHEDULER_PROTOCOLS = ("tcp", "tls", "inproc", "ucx", "ws", "wss")


def check_address(address: str) -> None:
    """Refuse an address that cannot be a Dask scheduler's (InvalidParameterError): a protocol Dask
    speaks, a host, and a port in 1-65535 (``tcp://host:99999`` otherwise fails deep in Dask's comms)."""
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(address if "://" in address else f"tcp://{address}")
        port = parts.port
    except ValueError as exc:  # a port out of range or not a number
        raise InvalidParameterError(f"{address!r} is not a scheduler address ({exc}): use tcp://host:8786 or "
                                    "tls://host:8786") from None
    if parts.scheme not in SCHEDULER_PROTOCOLS or (parts.scheme != "inproc" and not parts.hostname):
        raise InvalidParameterError(f"{address!r} is not a scheduler address: use tcp://host:8786 or tls://host:8786 "
                                    f"(protocols: {', '.join(SCHEDULER_PROTOCOLS)})")
    if port == 0:
        raise InvalidParameterError(f"{address!r}: port 0 is not a scheduler's port")


def check_scheduler(address: str, security: Security | None = None, timeout: float | None = None) -> dict:
    """The identity of the Dask scheduler at ``address``, asked within ``timeout`` seconds
    (default ``SCHEDULER_TIMEOUT``); :class:`ClusterError` if none answers.

    ``Client(address)`` alone waits for ever on a port that accepts connections but does not
    speak Dask's protocol (its handshake read is unbounded), so the address is probed first,
    on a private event loop in a daemon thread (bounded by ``asyncio.wait_for``; the caller
    waits for it 2 s longer at most, for the loop's own teardown).
    """
    check_address(address)
    timeout = SCHEDULER_TIMEOUT if timeout is None else timeout
    outcome: dict[str, Any] = {}

    def probe():
        try:
            outcome["info"] = asyncio.run(asyncio.wait_for(_ask_identity(address, security, timeout), timeout))
        except BaseException as exc:  # noqa: BLE001 - reported below with the address
            outcome["error"] = exc

    thread = threading.Thread(target=probe, name="daskclust-scheduler-probe", daemon=True)
    thread.start()
    thread.join(timeout + 2.0)
    info = outcome.get("info")
    if not isinstance(info, dict) or info.get("type") != "Scheduler":
        cause = outcome.get("error")
        if cause is not None:
            why = f"{type(cause).__name__}: {cause}" if str(cause) else type(cause).__name__
        elif isinstance(info, dict):
            why = f"a Dask {info.get('type', 'server')} answered, not a scheduler"
        else:
            why = "no answer"
        raise ClusterError(
            f"no Dask scheduler answered at {address} within {timeout:g} s ({why}): check the address "
            "(tcp://host:8786, or tls://host:8786 with TLS settings) and that a Dask scheduler runs there"
        ) from cause
    return info


@contextlib.contextmanager
def connect(
    client: Client | None = None,
    scheduler_address: str | None = None,
    *,
    announce: Callable[[str], None] | None = None,
    cluster_kwargs: dict | None = None,
    security: Security | None = None,
    dtype: Any = "float64",
) -> Iterator[Client]:
    """Yield the client to run on, closing what this function started.

    ``announce`` receives one line with the dashboard link when a cluster is started here, and
    one when the numba kernels had to be compiled first.
    ``security`` (a ``distributed.security.Security``, see :func:`security_from_files`) is used
    to connect to ``scheduler_address``; None means dask's config (``distributed.comm.tls.*``).
    A ``scheduler_address`` where no Dask scheduler answers within ``SCHEDULER_TIMEOUT``
    seconds raises :class:`ClusterError`.

    The cluster started here is ``start_local_cluster(**cluster_kwargs)``, by default
    :data:`EMBEDDED_CLUSTER` (workers are threads of this process). Before it runs anything,
    the kernels of a fit of ``dtype`` data are compiled into numba's cache if they are not
    there yet, on two cores (the preparation set with :func:`set_kernel_preparation`, by the
    estimators: :func:`daskclust.fit.warmup.prepare_kernels`): in this process for an
    in-process cluster, before the worker processes start for another. Clusters given by
    ``client``, ``scheduler_address`` or the active client are used as they are.
    """
    if client is not None:
        yield client
        return
    if scheduler_address:
        if isinstance(scheduler_address, str):
            check_scheduler(scheduler_address, security)
        with Client(scheduler_address, security=security, timeout=SCHEDULER_TIMEOUT) as own:
            yield own
        return
    current = active_client()
    if current is not None:
        yield current
        return
    prepare = _kernel_preparation or _prepare_nothing
    options = dict(EMBEDDED_CLUSTER if cluster_kwargs is None else cluster_kwargs)
    in_process = options.get("processes") is False
    report = None if in_process else prepare(None, dtype, announce=announce)  # workers only load them
    cluster = start_local_cluster(**options)
    try:
        with Client(cluster, set_as_default=False) as own:
            if announce is not None:
                announce(f"started {_describe(cluster, own)}; dashboard: {own.dashboard_link}")
            if in_process:
                report = prepare(own, dtype, announce=announce)
            if announce is not None and report.compiled:
                announce(f"compiled in {report.seconds:.1f} s, once: later fits load them from the cache")
            yield own
    finally:
        cluster.close()


# ------------------------------------------------------------------ liveness
def scheduler_workers(client: Client | Worker) -> dict[str, dict]:
    """The scheduler's workers now, ``{address: identity}`` (status, memory_limit, nanny...).

    Asked of the scheduler directly: ``client.scheduler_info()`` returns a cache that the
    client's periodic refresh overwrites with an identity fetched without workers, so it can
    show an empty cluster (fits failed with "no workers") or miss a live worker (false
    :class:`WorkerLost`). The one place the engine and the shards learn who is alive.

    On a worker, pass the ``Worker``: its own connection to the scheduler is used, not
    ``get_client()``, which may create a worker client and make it the process's default (with
    in-process workers that broke the actor handles the driver shares with them).
    """
    run = getattr(client, "sync", None) or functools.partial(sync, client.loop)
    try:
        info = run(client.scheduler.identity, n_workers=-1, callback_timeout=IDENTITY_TIMEOUT)
    except TimeoutError as exc:
        address = getattr(client.scheduler, "address", "?")
        raise ClusterError(f"the Dask scheduler at {address} did not answer within {IDENTITY_TIMEOUT:g} s: "
                           "is it overloaded or gone?") from exc
    return dict(info.get("workers") or {})


def memory_restarts(client: Client | Worker, addresses: Iterable[str]) -> dict[str, int]:
    """``{address: process memory in bytes}`` of the workers at ``addresses`` that their nanny
    restarted for memory (the scheduler's "worker-restart-memory" events); empty on a worker,
    whose wait the driver's watch repeats."""
    if not isinstance(client, Client):
        return {}
    wanted = set(addresses)
    try:
        events = client.get_events(MEMORY_RESTART_TOPIC)
    except (OSError, TimeoutError):
        return {}
    return {e["worker"]: int(e.get("rss") or 0) for _, e in events
            if isinstance(e, dict) and e.get("worker") in wanted}


def _lost_connection(exc: OSError) -> bool:
    """Whether ``exc`` is how a call to a dead worker fails: the actor's bare ``OSError`` or a
    closed comm (a task's own ``OSError``, e.g. FileNotFoundError, is a subclass and is not)."""
    from distributed.comm import CommClosedError

    return type(exc) is OSError or isinstance(exc, CommClosedError)


class WorkerWatch:
    """The liveness check of one wait on the workers at ``addresses``.

    :meth:`check` raises :class:`WorkerLost` when one of them has left the cluster, except while
    a fit is ``starting``: a worker lost then with a small memory limit raises
    :class:`ClusterError` with the limit to raise (its nanny restarts it, and every retry would
    kill it again). When the wait is on Dask ``tasks`` (creating shards, persisting), which a
    paused worker does not run, a worker paused for more than ``PAUSE_GRACE`` seconds raises
    :class:`ClusterError`; a warning is logged when the pause is first seen and a pause that
    ends is forgotten. Actor calls (passes, attaching chunks) run on a paused worker too, so
    their waits only check presence.

    ``client`` is the driver's client, or on a worker the ``Worker`` itself (see
    :func:`scheduler_workers`).
    """

    def __init__(self, client: Client | Worker, addresses: Iterable[str], *, starting: bool = False,
                 tasks: bool = False, memory_limits: Mapping[str, int] | None = None,
                 nannies: Mapping[str, str | None] | None = None):
        self.client = client
        self.addresses = list(addresses)
        self.starting = starting
        self.tasks = tasks
        self._limits = dict(memory_limits or {})
        self._nannies = dict(nannies or {})
        self._paused_since: dict[str, float] = {}

    def result(self, future) -> Any:
        """``future.result()`` (a Dask or actor future), checking the workers every ``LIVENESS_POLL`` s."""
        return self.poll(lambda timeout: future.result(timeout=timeout))

    def poll(self, attempt: Callable[[float], Any]) -> Any:
        """Call ``attempt(timeout)`` until it does not raise ``TimeoutError``, checking in between.

        A call whose worker died fails with a bare ``OSError`` ("Unable to contact Actor's worker")
        or a closed comm, often before the scheduler has removed the worker: such an error is
        :class:`WorkerLost` once the scheduler sees the worker gone (within ``LOSS_GRACE`` s)."""
        while True:
            try:
                return attempt(LIVENESS_POLL)
            except TimeoutError:
                self.check()
            except OSError as exc:
                if not _lost_connection(exc):
                    raise
                self._check_gone(exc)
                raise

    def _check_gone(self, cause: BaseException) -> None:
        """:meth:`check` until a watched worker is seen gone (raising) or ``LOSS_GRACE`` s pass."""
        deadline = time.monotonic() + LOSS_GRACE
        while True:
            self.check(cause)
            if time.monotonic() > deadline:
                return
            time.sleep(LIVENESS_POLL / 4)

    def running(self) -> None:
        """Return once every watched worker runs (is not paused), checking as :meth:`check` does:
        for what a paused worker refuses without a bound of our own (``scatter`` to it waits up
        to dask's connect timeout, then fails with "No valid workers found")."""
        while True:
            workers = self.check()
            if all(workers[a].get("status", "running") == "running" for a in self.addresses):
                return
            time.sleep(LIVENESS_POLL)

    def check(self, cause: BaseException | None = None) -> dict[str, dict]:
        """Raise if a watched worker has left (or stayed paused during a wait on tasks); else
        return the scheduler's workers (:func:`scheduler_workers`)."""
        workers = scheduler_workers(self.client)
        for address in self.addresses:  # remembered for the message if the worker goes
            if address in workers:
                self._limits.setdefault(address, int(workers[address].get("memory_limit") or 0))
                self._nannies.setdefault(address, workers[address].get("nanny"))
        lost = [a for a in self.addresses if a not in workers]
        if lost:
            if self.starting:
                self._raise_if_too_small(lost, workers, cause)
            restarts = memory_restarts(self.client, lost)
            if len(restarts) < len(lost) and any(self._nannies.get(a) for a in lost):
                time.sleep(EVENT_DELAY)  # the nanny logs in the background as it terminates the worker
                restarts = memory_restarts(self.client, lost)
            raise WorkerLost(lost, {a: (used, self._limits.get(a, 0)) for a, used in restarts.items()}) from cause
        if self.tasks:
            self._check_paused(workers)
        return workers

    def _raise_if_too_small(self, lost: list[str], workers: dict[str, dict], cause) -> None:
        for address in lost:
            limit = self._limits.get(address, 0)
            if not 0 < limit < LOW_MEMORY_LIMIT:
                continue
            nanny = self._nannies.get(address)
            restarted = nanny is not None and any(w.get("nanny") == nanny for w in workers.values())
            what = "was restarted by its nanny" if restarted else "left the cluster (killed, or being restarted)"
            raise ClusterError(
                f"worker {address} {what} while the fit was starting (memory limit {limit / 1e6:.0f} MB; "
                f"importing daskclust needs about {IMPORT_MEMORY / 1e6:.0f} MB on a worker, plus its chunks): "
                "raise the worker memory limit (dask worker --memory-limit, LocalCluster(memory_limit=...))"
            ) from cause

    def _check_paused(self, workers: dict[str, dict]) -> None:
        now = time.monotonic()
        for address in self.addresses:
            ident = workers[address]
            if ident.get("status") != "paused":
                if self._paused_since.pop(address, None) is not None:
                    log.info("worker %s resumed", address)
                continue
            since = self._paused_since.setdefault(address, now)
            limit = int(ident.get("memory_limit") or 0)
            used = (ident.get("metrics") or {}).get("memory")
            memory = f"process memory {used / 1e6:.0f} MB of its limit of {limit / 1e6:.0f} MB" if used and limit \
                else f"memory limit {limit / 1e6:.0f} MB"
            if since == now:
                log.warning("worker %s is paused (%s): waiting up to %g s for it to resume", address, memory,
                            PAUSE_GRACE)
            elif now - since > PAUSE_GRACE:
                raise ClusterError(
                    f"worker {address} is paused: its memory is above the pause threshold of its limit "
                    f"(distributed.worker.memory.pause; {memory}) for {now - since:.0f} s: raise the limit or "
                    "lower chunk_rows"
                )

"""The numba kernels compiled once per machine, on two cores, before a fit needs them.

daskclust's kernels are compiled by numba on first use and kept in numba's on-disk cache
(``cache=True``: ``__pycache__`` beside the sources, or ``NUMBA_CACHE_DIR``), so only the
first fit on a machine (and the first after an upgrade) compiles them: 33-34 s of CPU for a
default k-means on the 2-core machine of docs/benchmarks.md (Python 3.11, numba 0.68; the
figures of :data:`UNITS`). numba compiles one function at a time in a process,
and a fit needs the seeding's kernels before the E-step's, so compiling them as the fit goes
uses one core; with worker processes every process compiled the kernels it runs.

:func:`prepare_kernels` finds out whether the kernels are in the cache (:func:`kernels_cached`:
the NaN check of a tiny data set's rows, a kernel every fit loads, loads or compiles). When they
are not, it compiles them on two cores: a helper process (``python -c ...``, this interpreter, the same
numba cache) and this process run the :data:`UNITS` from opposite ends, each unit claimed by
one of them only, so the work splits about evenly whatever the kernels cost; the fit then
loads them from the cache. Each unit is a real high-level operation on a tiny synthetic data
set, driven by the spec of a default ``KMeans`` (:func:`tiny_spec`): the engine and the fit's
seeding step, the spec's search strategy, :class:`daskclust.em.estep_op.EStepOp` and the exact
nearest centre ``predict`` runs -- never a kernel called with hand-written arguments,
so the units follow the kernels' signatures as those change. Kernels of other paths (float32
data when float64 was prepared, other seedings, ``search="full"``, many dimensions) still
compile when first used, once per machine. :func:`compiling_ahead` starts the helper earlier,
while the caller still imports, makes its data and starts its cluster (``daskclust demo``).

An installed wheel already carries this module's kernels for float64 data: its build ran them
in the build tree (``setup.py``, :mod:`daskclust.estimators.wheel_kernels`), whose numba caches
the wheel ships.

A failure here is logged and ignored: the fit then compiles what it needs itself.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..names import STATE_SEED_LABEL

log = logging.getLogger("daskclust")

TINY_CLUSTERS = 25
TINY_ROWS = 1024
TINY_CHUNK_ROWS = 128
"""The synthetic data set: 25 well separated 2-D blobs, 1024 rows in 8 chunks (the kernels do not
specialise on sizes, only on dtypes and array layouts). More clusters than a default neighbourhood
(G = 10), so that the E-step records pairs outside it and the merge of pair statistics compiles."""

UNITS = ("seeding", "labels", "pairs", "estep")
"""The compilation units, in the order this process takes them (the helper takes them from the
end). Compile times, CPU seconds of one core (Python 3.11, numba 0.68, the 2-core machine of
docs/benchmarks.md): seeding (chunk validation, the k-means|| rounds, the ball tree, greedy
k-means++, the nearest candidate) 16.5, of which the ball tree's three kernels ~11.5; labels (the
exact nearest centre that ``predict``, and ``fit`` for ``labels_`` on numpy input, run) nothing
after the seeding, which compiles the same kernel; pairs (the exact neighbours of the centres,
pruning the pair statistics, the estimated neighbour table) 4; estep (the truncated E-step, the
merge of its pair statistics and, since 2026-11-29, the exact-inertia pass settling rows from K(n))
12.5 (on 2026-11-29, pairs then estep on an empty cache: 2.3 and 7.8). The helper first spends 2-3 s importing daskclust and
takes estep, then pairs; this process takes the seeding, then labels: the seeding is the longest
chain, one function after the other."""

HELPER_TIMEOUT = 180.0
"""Seconds to wait for the helper process (about 20 s on 2 idle cores); after that it is ended and
the fit compiles what is missing."""

_prepared: set[str] = set()
_lock = threading.Lock()


@dataclass(frozen=True)
class KernelReport:
    """What :func:`prepare_kernels` did: ``compiled`` (the kernels were not in the cache),
    ``helper`` (a helper process took part), ``units`` run in this process, ``seconds`` spent."""

    compiled: bool = False
    helper: bool = False
    units: tuple[str, ...] = ()
    seconds: float = 0.0


# ---------------------------------------------------------------------- the units
def tiny_data(dtype="float64") -> np.ndarray:
    """(TINY_ROWS, 2) rows around TINY_CLUSTERS centres 10 apart (noise 1), in ``dtype``."""
    rng = np.random.default_rng(0)
    rows = _tiny_centres()[np.arange(TINY_ROWS) % TINY_CLUSTERS] + rng.standard_normal((TINY_ROWS, 2))
    return rows.astype(dtype)


def _tiny_centres() -> np.ndarray:
    side = int(np.ceil(np.sqrt(TINY_CLUSTERS)))
    return 10.0 * np.array([(i % side, i // side) for i in range(TINY_CLUSTERS)], dtype=np.float64)


def _tiny_engine(client, dtype):
    from ..data import as_chunked_data
    from ..engine.engine import Engine

    data = as_chunked_data(tiny_data(dtype), None, chunk_rows=TINY_CHUNK_ROWS, min_samples=TINY_CLUSTERS)
    return Engine(data, client)


def run_seeding(engine) -> None:
    """The tiny spec's seeding (k-means||, the default) over ``engine``'s chunks."""
    from .steps import FitSteps

    FitSteps().seed(engine, tiny_spec(), 0)


def tiny_spec():
    """The spec of a default ``KMeans`` of the tiny data set (C = 25): the search, C' and family
    of the fit whose kernels the units compile."""
    from ..models import FAMILIES
    from .spec import FitSpec

    return FitSpec("KMeans", FAMILIES["kmeans"], TINY_CLUSTERS, 1)


def _first_iteration():
    """The search strategy of the tiny spec started from the true centres, and the operation of its
    first E-step (as :func:`daskclust.em.loop.run_em` makes it)."""
    from ..em.estep_op import EStepOp

    spec = tiny_spec()
    centres, sigma2 = _tiny_centres(), 1.0
    search = spec.make_search()
    search.start(centres, sigma2)
    family, settings = spec.family, spec.settings(0)
    kernel = family.kernel_params(family.initial_params(centres, sigma2, 0.0))
    op = EStepOp(family, kernel, spec.n_truncated, settings.keep_state, search.payload(), 0, 0)
    return search, op, centres, sigma2


def run_estep(dtype="float64") -> None:
    """The first E-step of a default ``KMeans`` on the tiny data set in two chunks, the merge
    of their accumulators (as a worker's threads and the tree of workers merge them), and the
    exact-inertia pass a k-means fit ends with, from the sets K(n) the E-step left."""
    from ..em.exact_cost import SettledCostOp, settling_table
    from ..engine.ops import Chunk
    from ..seeding.passes import NearestIndex

    _, op, centres, _ = _first_iteration()
    X = tiny_data(dtype)
    labels = ((X[:, None, :] - centres[None, :, :]) ** 2).sum(-1).argmin(1).astype(np.int32)
    accs, chunks = [], []
    for index, rows in enumerate((slice(0, TINY_ROWS // 2), slice(TINY_ROWS // 2, TINY_ROWS))):
        acc = op.new_acc()
        chunks.append(Chunk(index, rows.start, X[rows], np.empty(0), {STATE_SEED_LABEL: labels[rows]}))
        op.run(chunks[-1], acc)
        accs.append(acc)
    op.merge(*accs)
    cost = SettledCostOp(centres, *settling_table(centres)[:2], NearestIndex.probed(centres))
    for chunk in chunks:
        cost.run(chunk, cost.new_acc())


def run_pairs() -> None:
    """The search strategy digesting an (empty) E-step accumulator: pruning the pair statistics
    and the neighbour table of the next iteration, without running an E-step."""
    search, op, centres, sigma2 = _first_iteration()
    search.update(op.new_acc().search, centres, sigma2)


def run_labels(dtype="float64") -> None:
    """The exact nearest centre of every row of the tiny data set, with the checks of the rows
    before it (what ``predict`` runs, and ``fit`` for ``labels_`` on numpy input)."""
    from ..data.ranges import rows_problem
    from ..seeding.passes import NearestIndex

    X = tiny_data(dtype)
    assert rows_problem(X, 0, "score") is None
    NearestIndex.probed(_tiny_centres()).nearest(X)


def run_unit(name: str, dtype: str, make_engine=None) -> None:
    """Run unit ``name`` on ``dtype`` data; the seeding's on the engine ``make_engine()`` opens
    (a context manager), the others in this process without one."""
    if name == "seeding":
        with make_engine() as engine:
            run_seeding(engine)
    elif name == "estep":
        run_estep(dtype)
    elif name == "pairs":
        run_pairs()
    elif name == "labels":
        run_labels(dtype)
    else:
        raise ValueError(f"unknown unit {name!r}")


def claim(claims: str | None, name: str) -> bool:
    """Take unit ``name``: True for the first of this process and the helper to ask (a file
    created exclusively in the directory ``claims``); always True without a directory."""
    if claims is None:
        return True
    try:
        os.close(os.open(os.path.join(claims, name), os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        return False
    return True


# ---------------------------------------------------------------------- the helper process
def start_helper(dtype: str, claims: str) -> subprocess.Popen | None:
    """A process taking the units from the end: this interpreter, this copy of daskclust first
    on its path, this environment (``NUMBA_CACHE_DIR``). None if it cannot start."""
    if not sys.executable:
        return None
    root = str(Path(__file__).resolve().parents[2])
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([root] + [p for p in [env.get("PYTHONPATH")] if p])
    code = f"from daskclust.fit.warmup import helper_main; helper_main({dtype!r}, {claims!r})"
    try:
        return subprocess.Popen([sys.executable, "-c", code], env=env, stdin=subprocess.DEVNULL,
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    except OSError as exc:
        log.debug("kernel helper process not started: %s", exc)
        return None


@contextlib.contextmanager
def private_client(threads: int) -> Iterator:
    """A client of a private in-process cluster of one worker with ``threads`` threads (no dashboard, no
    profiler, not the default client), closed with it."""
    from distributed import Client, LocalCluster

    from ..engine.cluster import profiler_off

    with profiler_off(), LocalCluster(n_workers=1, threads_per_worker=threads, processes=False,
                                      dashboard_address=None) as cluster, \
            Client(cluster, set_as_default=False) as client:
        yield client


@contextlib.contextmanager
def _private_engine(dtype: str, threads: int):
    """The tiny engine on a :func:`private_client` of ``threads`` threads, closed with it."""
    with private_client(threads) as client, _tiny_engine(client, dtype) as engine:
        yield engine


def helper_main(dtype: str, claims: str) -> None:
    """The helper process: the units from the end; a private cluster of one thread if it gets to
    the seeding."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for name in reversed(UNITS):
            if claim(claims, name):
                run_unit(name, dtype, make_engine=lambda: _private_engine(dtype, 1))


def _finish(helper: subprocess.Popen, timeout: float) -> bool:
    """Wait for the helper; True if it succeeded. Ended (by its pid) if it overruns."""
    try:
        _, err = helper.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        log.warning("the kernel helper process did not finish within %g s: ended; the fit compiles the rest", timeout)
        return False
    if helper.returncode != 0:
        tail = (err or b"").decode(errors="replace").strip().splitlines()[-1:]
        log.warning("the kernel helper process failed (exit %s): %s", helper.returncode, " ".join(tail))
        return False
    return True


# ---------------------------------------------------------------------- entry points
def _counting():
    """A context counting numba's ``numba:compile`` events (compilations, not loads from the
    cache) in any thread while it is open; ``.count``."""
    from numba.core import event

    class Counter(event.Listener):
        count = 0

        def on_start(self, ev):
            self.count += 1

        def on_end(self, ev):
            pass

    return event.install_listener("numba:compile", Counter())


def usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def kernels_cached(dtype: str) -> bool:
    """Whether the kernels of a fit of ``dtype`` data are in numba's cache, judged by the first of
    them, the check of its rows for NaN (:func:`~daskclust.kernels.validation.first_nonfinite_row`):
    it loads, compiling nothing, once this check ran on the machine (milliseconds; a tiny engine
    did the check before: 0.5-0.7 s of CPU in every fit on an embedded cluster). The rows' check
    itself is two numpy reductions, which compile nothing, so the kernel is called directly."""
    from ..kernels.validation import first_nonfinite_row

    with _counting() as counter:
        first_nonfinite_row(tiny_data(dtype))
    return counter.count == 0


@dataclass
class _Helper:
    """A started helper process and the directory of its claims."""

    proc: subprocess.Popen
    claims: str

    def end(self) -> None:
        """Kill the process if it still runs (by its pid) and remove the claims."""
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        shutil.rmtree(self.claims, ignore_errors=True)


def _start_helper(dtype: str) -> _Helper | None:
    claims = tempfile.mkdtemp(prefix="daskclust-kernels-")
    proc = start_helper(dtype, claims)
    if proc is None:
        shutil.rmtree(claims, ignore_errors=True)
        return None
    return _Helper(proc, claims)


_cold: dict[str, _Helper | None] = {}
"""The dtypes :func:`compiling_ahead` found not in the cache, with the helper it started (None if
it could not start one), until the fit's :func:`prepare_kernels` takes them over."""


@contextlib.contextmanager
def compiling_ahead(dtype="float64") -> Iterator[None]:
    """Start compiling the kernels of a fit of ``dtype`` data now, in the helper process, if they
    are not in numba's cache: they then compile while the caller imports the estimators, makes
    its data and starts its cluster, and the fit's :func:`prepare_kernels` shares the remaining
    units with that helper. On exit a helper that no fit took over is ended (its finished units
    stay in the cache). Warm: costs the check only (milliseconds)."""
    name = np.dtype(dtype).name
    started = None
    with _lock:
        if name not in _prepared and name not in _cold:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # e.g. numba's, on a read-only cache
                if not kernels_cached(name):
                    started = _start_helper(name) if usable_cores() >= 2 else None
                    _cold[name] = started
    try:
        yield
    finally:
        with _lock:
            if name in _cold and _cold[name] is started:
                del _cold[name]  # no fit took it over
                if started is not None:
                    started.end()


def prepare_kernels(client=None, dtype="float64", *, helper: bool = True,
                    announce: Callable[[str], None] | None = None) -> KernelReport:
    """Have the kernels of a default fit of ``dtype`` data in numba's cache, compiling them on
    two cores if they are not. Once per process and dtype; never raises (a failure is logged).

    ``client``: a client of an in-process cluster (the embedded one), which then has the
    kernels loaded; None compiles on a private in-process cluster (before an embedded cluster's
    worker processes start, so that they only load). ``helper=False``: no helper process,
    everything is compiled here. ``announce`` gets one line when compiling starts (logged at INFO
    without it; a fit's ``announce`` logs it too). A helper started by :func:`compiling_ahead`
    is taken over.
    """
    name = np.dtype(dtype).name
    with _lock:
        if name in _prepared:
            return KernelReport()
        t0 = time.perf_counter()
        try:
            report = _prepare(client, name, helper, announce)
        except Exception as exc:  # noqa: BLE001 - an optimisation: the fit compiles what it needs anyway
            log.warning("compiling the kernels ahead of the fit failed (%s: %s); the fit compiles them itself",
                        type(exc).__name__, exc)
            report = KernelReport()
        _prepared.add(name)
        if report.compiled:
            report = KernelReport(True, report.helper, report.units, time.perf_counter() - t0)
        return report


def _prepare(client, dtype: str, helper: bool, announce) -> KernelReport:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # e.g. numba's, on a read-only cache
        if dtype in _cold:
            own = _cold.pop(dtype)  # found cold by compiling_ahead: the check would now see them loaded
        elif kernels_cached(dtype):
            return KernelReport()  # the fit loads what it needs
        else:
            own = _start_helper(dtype) if helper and usable_cores() >= 2 else None
        if own is not None and not helper:
            own.end()
            own = None

        def make_engine():
            return _tiny_engine(client, dtype) if client is not None else _private_engine(dtype, usable_cores())

        message = (f"compiling the numba kernels for {dtype} data into numba's cache (first fit on this "
                   f"machine), {'on 2 cores' if own is not None else 'on 1 core'}")
        (announce if announce is not None else log.info)(message)
        ran = []
        try:
            for unit in UNITS:
                if claim(own.claims if own is not None else None, unit):
                    run_unit(unit, dtype, make_engine=make_engine)
                    ran.append(unit)
            if own is not None:
                _finish(own.proc, HELPER_TIMEOUT)
        finally:
            if own is not None:  # overran or interrupted: leave nothing behind
                own.end()
    return KernelReport(compiled=True, helper=own is not None, units=tuple(ran))

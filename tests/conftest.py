"""Shared fixtures: Dask clusters (started once per session), small data sets and the assertions the tests share."""

from __future__ import annotations

import hashlib
import os
import pathlib

import numpy as np
import pytest
from distributed import Client, LocalCluster

from daskclust.datasets import birch_grid_centres
from daskclust.engine.cluster import profiler_off

COMPILED_AHEAD = pytest.StashKey[str]()


def pytest_configure(config):
    """Refuse NUMBA_BOUNDSCHECK=1 without its own NUMBA_CACHE_DIR: numba's cache index keys a kernel by
    its signature, the CPU and its own bytecode only, so the bounds-checked kernels would be cached
    beside the sources and loaded by every later run (as .ci/run avoids with a cache of its own).

    Then, in the process that starts the pytest-xdist workers, compile the kernels ahead
    (:func:`compile_ahead`)."""
    import numba

    if numba.config.BOUNDSCHECK and not os.environ.get("NUMBA_CACHE_DIR"):
        raise pytest.UsageError("NUMBA_BOUNDSCHECK=1 needs its own NUMBA_CACHE_DIR (e.g. NUMBA_CACHE_DIR=.ci/numba-"
                                "boundscheck): numba's cache would otherwise keep the bounds-checked kernels")
    if not hasattr(config, "workerinput"):
        config.stash[COMPILED_AHEAD] = compile_ahead(config)


def compile_ahead(config) -> str:
    """Run ``tests/compile_ahead.py`` in two processes when the whole suite runs (no paths given, no
    ``-m``) on a numba cache without the kernels of a default fit of float32 data (a fresh clone, as in CI,
    whose installed wheel carries only the float64 ones: ``setup.py``), so that the
    test processes load the kernels instead of each compiling them. Returns the line for the report's
    header. Runs nothing on a warm cache, for a selection of tests, or with NUMBA_BOUNDSCHECK=1 (the
    marked tests need a few of the bounds-checked kernels, compiled as they go)."""
    import subprocess
    import sys
    import tempfile
    import time

    import numba

    from daskclust.fit.warmup import kernels_cached

    if config.args_source != pytest.Config.ArgsSource.TESTPATHS or config.option.markexpr or numba.config.BOUNDSCHECK:
        return "kernels compiled ahead: no (a selection of the tests, or NUMBA_BOUNDSCHECK=1)"
    if kernels_cached("float32"):  # not float64: a wheel ships those of a default float64 fit (setup.py)
        return "kernels compiled ahead: no (numba's cache holds them)"
    t0 = time.perf_counter()
    script = pathlib.Path(__file__).with_name("compile_ahead.py")
    with tempfile.TemporaryDirectory(prefix="daskclust-compile-ahead-") as claims, \
            tempfile.TemporaryFile("w+") as log0, tempfile.TemporaryFile("w+") as log1:
        procs = [subprocess.Popen([sys.executable, str(script), claims], stdout=subprocess.DEVNULL, stderr=log)
                 for log in (log0, log1)]
        for proc in procs:
            try:
                proc.wait(timeout=1200)
            except subprocess.TimeoutExpired:  # ended; the tests compile what it missed
                proc.kill()
                proc.wait()
        failed = []
        for proc, log in zip(procs, (log0, log1)):
            if proc.returncode:
                log.seek(0)
                failed.append(log.read()[-4000:])
    summary = f"kernels compiled ahead: {time.perf_counter() - t0:.0f} s in 2 processes"
    return summary + (f"; some tasks FAILED (the tests compile what they missed):\n{''.join(failed)}" if failed else "")


def pytest_report_header(config):
    return config.stash.get(COMPILED_AHEAD, None)


def _cluster(**kwargs):
    options = dict(dashboard_address=":0", threads_per_worker=1, processes=True, memory_limit="2GiB")
    options.update(kwargs)
    with profiler_off():  # python/cpython#106883
        return LocalCluster(**options)


@pytest.fixture(scope="session")
def client():
    """Two single-threaded worker processes: the usual test cluster."""
    with _cluster(n_workers=2) as cluster, Client(cluster, set_as_default=False) as c:
        yield c


@pytest.fixture(scope="session")
def client_one_worker():
    """One worker process with two threads."""
    with _cluster(n_workers=1, threads_per_worker=2) as cluster, Client(cluster, set_as_default=False) as c:
        yield c


@pytest.fixture(scope="session")
def client_threads():
    """Workers as threads of this process (processes=False), three of them."""
    with _cluster(n_workers=3, processes=False) as cluster, Client(cluster, set_as_default=False) as c:
        yield c


def birch(n_clusters: int, points: int = 100, seed: int = 0, dtype=np.float64):
    """In-memory BIRCH grid data (rows shuffled) and its true centres."""
    centres = birch_grid_centres(n_clusters)
    rng = np.random.default_rng(seed)
    labels = rng.permutation(np.repeat(np.arange(n_clusters), points))
    X = centres[labels] + rng.standard_normal((len(labels), 2))
    return X.astype(dtype), centres


def blobs(n_samples: int, n_features: int, n_clusters: int, seed: int = 0, spread: float = 8.0):
    rng = np.random.default_rng(seed)
    centres = rng.uniform(0, spread * n_clusters ** (1 / n_features), (n_clusters, n_features))
    X = centres[rng.integers(0, n_clusters, n_samples)] + rng.standard_normal((n_samples, n_features))
    return X, centres


@pytest.fixture(scope="session")
def birch100():
    return birch(100, points=60, seed=3)


# ------------------------------------------------------------------ assertions and helpers the tests share
def assert_non_decreasing(values, rtol=1e-9):
    values = np.asarray(values)
    drops = values[:-1] - values[1:]
    allowed = rtol * np.abs(values[:-1])
    assert (drops <= allowed).all(), f"free energy decreased by {drops.max()} at step {int(drops.argmax())}"


def assert_same_model(a, b, rtol=1e-12):
    np.testing.assert_allclose(a.centres_, b.centres_, rtol=rtol, atol=1e-12)
    np.testing.assert_allclose(a.sigma2_, b.sigma2_, rtol=rtol)
    assert a.n_iter_ == b.n_iter_
    np.testing.assert_allclose([r["free_energy"] for r in a.history_], [r["free_energy"] for r in b.history_],
                               rtol=rtol)


class Interrupt(Exception):
    pass


def interrupt_at(iteration):
    def callback(row):
        if row["iteration"] == iteration:
            raise Interrupt(f"stopped at iteration {iteration}")

    return callback


def snapshot(root: pathlib.Path) -> dict[str, str]:
    """Every file under ``root`` with the sha256 of its bytes: compared before and after."""
    out = {}
    for path in sorted(root.rglob("*")):
        if path.is_file():
            out[str(path.relative_to(root))] = hashlib.sha256(path.read_bytes()).hexdigest()
    return out

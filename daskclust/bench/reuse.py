"""A sweep of fits on the same data: each fit given the data (connected, checked, placed and validated
again), against the data placed once for all of them (:func:`daskclust.persist`).

The realistic sweep: KMeans at C = 64, 256 and 1024 and GaussianMixture, spherical and diag, at C = 256
(every fit ``random_state=0``, ``max_iter=10``); the minimal one: eight KMeans fits at C = 2 with one
M-step, whose time is mostly the fixed costs; on the BIRCH grid of 1024 clusters (N = 409,600, D = 2,
:func:`daskclust.datasets.make_birch`) in a zarr store (chunks of 25,600 rows) and the same rows in
memory. Two clusters: the suite's (2 worker processes of
one thread, given to every fit as ``client``), and, for the minimal sweep, none, where each fit starts
an embedded cluster (or the handle starts one for the sweep), run in a fresh Python process as a
script runs (the suite's process has a default client). The two arms alternate, ``REPEATS`` sweeps each (3 of the
minimal one); the table shows medians.

Columns: the whole sweep's seconds (the placed arm's include ``persist`` and closing the handle) and
CPU seconds (the driver's and the workers', :func:`cpu_seconds`); ``persist``; the start-up of a fit, the median over the sweep's fits of its wall time outside its
seeding and iterations (connecting or starting a cluster, opening and checking the input, placing
the chunks, and computing ``labels_`` after the fit, the same in both arms; validating and hashing
the chunks happens in the seeding's first pass of a fit given the data, and in ``persist`` for the
placed arm); the fixed cost saved per fit, (given - placed sweep) / fits, ``persist`` counted, in
wall-clock and CPU seconds; and
whether every model of the placed arm equals the given arm's (centres bit for bit).
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import tempfile
import time
import warnings
from contextlib import nullcontext
from pathlib import Path

import numpy as np
import psutil

from .. import GaussianMixture, KMeans, persist
from ..data import open_zarr_array
from ..datasets import make_birch
from ..errors import ConvergenceWarning
from .runner import Table

COMMAND = "daskclust bench --suite reuse"
CLUSTER = {"n_workers": 2, "threads_per_worker": 1}
SWEEP = (("kmeans", 64), ("kmeans", 256), ("kmeans", 1024), ("spherical", 256), ("diag", 256))
MAX_ITER = 10
REPEATS = 2
MINIMAL = (("kmeans", 2),) * 8
"""Fits that cost little besides their fixed costs: what a fit saves on placed data, nearly alone."""
SWEEPS = (("realistic", SWEEP, MAX_ITER, REPEATS, False), ("minimal", MINIMAL, 1, 3, True))
GRID_CLUSTERS, POINTS = 1024, 400
ZARR_ROWS = 25_600


def estimators(sweep=SWEEP, max_iter: int = MAX_ITER):
    """The sweep's estimators, fresh."""
    for kind, C in sweep:
        if kind == "kmeans":
            yield KMeans(C, random_state=0, max_iter=max_iter)
        else:
            yield GaussianMixture(C, covariance_type=kind, random_state=0, max_iter=max_iter)


def run_sweep(X, client, placed: bool, sweep=SWEEP, max_iter: int = MAX_ITER) -> dict:
    """One sweep over ``X`` on ``client`` (None: embedded clusters), each fit given ``X`` or all of them
    a handle placed first: its seconds, persist's, the fits' median start-up, a digest of each model."""
    t0, cpu0 = time.perf_counter(), cpu_seconds(client)
    with persist(X, client=client) if placed else nullcontext(X) as data:
        placing = time.perf_counter() - t0
        startups, digests = [], []
        for estimator in estimators(sweep, max_iter):
            t = time.perf_counter()
            with warnings.catch_warnings():  # max_iter stops the mixtures early on purpose
                warnings.simplefilter("ignore", ConvergenceWarning)
                estimator.fit(data, client=None if placed else client)
            wall = time.perf_counter() - t
            startups.append(wall - estimator.seeding_time_ - sum(row["seconds"] for row in estimator.history_))
            digests.append(hashlib.sha256(np.ascontiguousarray(estimator.centres_).tobytes()).hexdigest())
    return {"seconds": time.perf_counter() - t0, "cpu": cpu_seconds(client) - cpu0,
            "persist": placing if placed else 0.0, "startup": float(np.median(startups)), "models": digests}


def cpu_seconds(client) -> float:
    """CPU seconds (user and system) this process and ``client``'s worker processes have used (an
    embedded cluster's workers are threads of this process)."""
    workers = sum(client.run(_process_cpu).values()) if client is not None else 0.0
    return _process_cpu() + workers


def _process_cpu() -> float:
    times = psutil.Process().cpu_times()
    return times.user + times.system


def sweep_alone(source: str, placed: bool, sweep, max_iter: int) -> dict:
    """:func:`run_sweep` without a cluster, in a fresh process (``python -m daskclust.bench.reuse``) on
    ``source``, an .npy file (read into memory) or a zarr store."""
    settings = json.dumps({"source": source, "placed": placed, "sweep": sweep, "max_iter": max_iter})
    out = subprocess.run([sys.executable, "-m", "daskclust.bench.reuse", settings], capture_output=True, text=True,
                         check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def run(client, grid: tuple[int, int] = (GRID_CLUSTERS, POINTS), sweeps=SWEEPS) -> Table:
    """The suite's table; ``grid`` (clusters, points per cluster of the BIRCH grid) and ``sweeps`` ((name,
    fits, max_iter, repeats, whether on embedded clusters too) each) smaller in tests."""
    table = Table("A sweep of fits on the same data: given to each fit, or placed once (daskclust.persist)",
                  ["sweep", "data", "cluster", "data given to", "sweep (s)", "CPU (s)", "persist (s)",
                   "start-up per fit (s)", "saved per fit (s)", "CPU saved per fit (s)", "same models"])
    with tempfile.TemporaryDirectory() as tmp:
        n_clusters, points = grid
        stored = str(Path(tmp) / "birch.zarr" / "X")
        make_birch(Path(tmp) / "birch.zarr", n_clusters, points_per_cluster=points, seed=0, chunk_rows=ZARR_ROWS)
        X = open_zarr_array(stored)[:]  # the same rows in memory
        np.save(Path(tmp) / "X.npy", X)
        for label, sweep, max_iter, repeats, embedded in sweeps:
            for name, source, alone in (("in memory", X, str(Path(tmp) / "X.npy")), ("zarr store", stored, stored)):
                clusters = [("2 workers, given", lambda placed, s=source: run_sweep(s, client, placed, sweep, max_iter))]
                if embedded:
                    clusters.append(("none: embedded", lambda placed, s=alone: sweep_alone(s, placed, sweep, max_iter)))
                for cluster, one_sweep in clusters:
                    table.rows += compared(one_sweep, repeats, [label, name, cluster])
            table.notes.append(f"{label} sweep: {described(sweep)}; max_iter = {max_iter}, random_state = 0; medians of "
                               f"{repeats} sweeps per arm, the arms alternating")
        table.notes.append(f"data: the BIRCH grid of {n_clusters} clusters (make_birch), N = {len(X):,}, D = 2, in a "
                           f"zarr store (chunks of {ZARR_ROWS:,} rows) or read into memory (numpy)")
    table.notes.append("start-up per fit: median over the fits of the wall time outside seeding and iterations "
                       "(connect or start a cluster, open and check the input, place the chunks, labels_ after the "
                       "fit); a fit given the data validates and hashes its chunks in its seeding's first pass, "
                       "persist once for all")
    table.notes.append("CPU: user and system seconds of the sweep, this process's and the workers' (an embedded "
                       "cluster's workers are threads of the sweep's process); steadier than wall-clock time on a "
                       "shared machine")
    table.notes.append("saved per fit: (sweep given - sweep placed) / fits, wall-clock and CPU, persist and closing the "
                       "handle counted; same models: every placed fit's centres equal the given fit's, bit for bit")
    return table


def described(sweep) -> str:
    """The fits of ``sweep`` in words, repeats counted ("8 x KMeans C = 2")."""
    names = [f"{'KMeans' if kind == 'kmeans' else 'GaussianMixture ' + kind} C = {C}" for kind, C in sweep]
    groups = [[names[0], 0]]
    for name in names:
        if name != groups[-1][0]:
            groups.append([name, 0])
        groups[-1][1] += 1
    return ", ".join(name if count == 1 else f"{count} x {name}" for name, count in groups)


def compared(one_sweep, repeats: int, labels: list) -> list[list]:
    """The two rows of one comparison: ``one_sweep(placed)`` for each arm, alternating, ``repeats`` times."""
    runs = {False: [], True: []}
    for _ in range(repeats):
        for placed in (False, True):
            runs[placed].append(one_sweep(placed))
    given, placed = ({key: float(np.median([r[key] for r in runs[arm]])) for key in ("seconds", "cpu", "persist",
                                                                                       "startup")}
                     for arm in (False, True))
    same = all(r["models"] == runs[False][0]["models"] for arm in runs.values() for r in arm)
    n_fits = len(runs[False][0]["models"])
    return [[*labels, "each fit", given["seconds"], given["cpu"], "-", given["startup"], "-", "-", "-"],
            [*labels, "persist, once", placed["seconds"], placed["cpu"], placed["persist"], placed["startup"],
             (given["seconds"] - placed["seconds"]) / n_fits, (given["cpu"] - placed["cpu"]) / n_fits,
             "yes" if same else "NO"]]


def main(settings: str) -> None:
    """``python -m daskclust.bench.reuse SETTINGS``: one sweep without a cluster, printed as JSON."""
    given = json.loads(settings)
    source = given["source"]
    X = np.load(source) if source.endswith(".npy") else source
    sweep = [tuple(fit) for fit in given["sweep"]]
    print(json.dumps(run_sweep(X, None, given["placed"], sweep, given["max_iter"])))


if __name__ == "__main__":
    main(sys.argv[1])

"""Engine overhead: time per pass when the kernels do (almost) nothing.

On tiny data the time of an iteration is Dask's: sending the operation to
each worker's shard, running it, merging the accumulators worker-to-worker,
fetching the root. Target (issue 2): under 20 ms per iteration with 64 chunks
on 2 workers. The full KMeans iteration on N = 10,000 is shown beside it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from ..data import as_chunked_data
from ..em.estep_op import EStepOp
from ..engine.cluster import scheduler_workers
from ..engine.engine import Engine
from ..search import SearchConfig, make_search
from .runner import Table

COMMAND = "daskclust bench --suite overhead"
CLUSTER = {"n_workers": 2, "threads_per_worker": 1}


@dataclass
class NoOp:
    """A pass that only counts rows: the engine's overhead alone."""

    def new_acc(self):
        return {"rows": np.zeros(1)}

    def run(self, chunk, acc) -> None:
        acc["rows"][0] += chunk.n_rows

    @staticmethod
    def merge(a, b):
        a["rows"] += b["rows"]
        return a


def time_passes(engine: Engine, make_op, repeats: int) -> float:
    """Median seconds per pass over ``repeats`` passes (after two warm-up passes)."""
    for _ in range(2):
        engine.map_reduce(make_op())
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        engine.map_reduce(make_op())
        times.append(time.perf_counter() - t0)
    return float(np.median(times))


def run(client) -> Table:
    rng = np.random.default_rng(0)
    X = rng.standard_normal((10_000, 2))
    centres = X[:16].copy()
    n_workers = len(scheduler_workers(client))
    table = Table(
        f"Engine overhead per iteration (N = 10,000, D = 2, {n_workers} workers x 1 thread, LocalCluster)",
        ["chunks", "empty pass (ms)", "KMeans E-step, C=16 (ms)", "target (ms)"],
    )
    for n_chunks in (16, 64):
        data = as_chunked_data(X, chunk_rows=-(-10_000 // n_chunks))
        search = make_search("full", SearchConfig(len(centres), 1))
        search.start(centres, 1.0)
        with Engine(data, client) as engine:
            empty = time_passes(engine, NoOp, 200)
            estep = time_passes(engine, lambda: EStepOp(centres, 1.0, 1, True, search.payload()), 200)
        table.rows.append([data.n_chunks, 1e3 * empty, 1e3 * estep, 20])
    table.notes.append("median of 200 passes; one Dask actor per worker, tree merge worker-to-worker")
    from .. import KMeans

    KMeans(100, random_state=0).fit(X, client=client)
    model = KMeans(100, random_state=1, tol=0, max_iter=50).fit(X, client=client)
    per_iter = 1e3 * float(np.median([r["seconds"] for r in model.history_]))
    table.notes.append(f"KMeans() defaults, C = 100, on the same N = 10,000 data ({data.n_chunks} chunks): median "
                       f"{per_iter:.1f} ms per full iteration (E-step pass, M-step, neighbourhood update; target 20 ms)")
    return table

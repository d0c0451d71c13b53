"""The cost model's constants measured on this machine, and what they predict (docs/scaling.md).

Measured, for KMeans() and GaussianMixture(covariance_type="diag") at their defaults:

- compute: the E-step's seconds per row on one core (a LocalCluster of one 1-thread worker,
  data persisted), from the engine's own pass time less its empty pass, at D = 2, 16, 64;
  with the candidates evaluated per row E, also per evaluated cluster and feature;
- read: seconds per byte a 1-thread worker spends streaming a zarr store (no compression and
  zstd, page cache warm: the cores' part of a read; the transfer is the scenario's bandwidth);
- the tree: the pickled size of every accumulator a worker sends its parent, per level, and of
  the root's (what the driver receives), the E-step operation's (what goes down), and the time
  of a merge, at C = 1024, 4096, 16384 and D = 16, on the engine's tree of 8 one-thread workers
  replayed in this process (:class:`LocalTree`);
- the driver: the M-step (kernel parameters, M-step, free energy) and the neighbourhood update
  (the search's update and payload), timed call by call as :func:`daskclust.em.loop.run_em`
  makes them;
- the per-pass overhead: the empty pass on LocalClusters of 2, 4 and 8 one-thread worker
  processes, fitted as a + b W;
- outside the iteration, the exact nearest-centre pass by matrix products (the seeding's last pass
  where nothing prunes; KMeans' exact-inertia pass for the rows their K(n) does not settle): seconds
  per row, centre and feature on one core, at D = 16 and 64.

Every figure is the median over the iterations after the first two (K(n) is built in the
first). :mod:`daskclust.bench.prediction` turns them into the predicted iteration.
"""

from __future__ import annotations

import pickle
import tempfile
import time
from collections import defaultdict
from pathlib import Path

import numpy as np

from .. import GaussianMixture, KMeans
from ..data import as_chunked_data
from ..datasets import make_blobs
from ..em.estep_op import EStepOp
from ..engine.cluster import start_local_cluster
from ..engine.engine import Engine, WorkerInfo, contiguous_placement
from ..engine.ops import Chunk, leaving
from ..kernels.estep import NDIST_POINTS
from ..names import STATE_K, STATE_SEED_LABEL
from ..seeding.passes import NearestCostOp, NearestIndex
from .data import blobs_array
from .overhead import NoOp, time_passes
from .prediction import FamilyConstants, Line, Scenario, prose, tree_depth
from .runner import Table

COMMAND = "daskclust bench --suite costmodel"
CLUSTER = {"n_workers": 1, "threads_per_worker": 1}
ESTIMATORS = {
    "KMeans()": lambda C: KMeans(C),
    "GaussianMixture(diag)": lambda C: GaussianMixture(C, covariance_type="diag"),
}
"""The families modelled, at their defaults, by the name the table gives them."""
COMPUTE_DIMS, COMPUTE_CLUSTERS, COMPUTE_ROWS = (2, 16, 64), 1024, 400_000
DENSE_DIMS = (16, 64)
TREE_DIM, TREE_CLUSTERS, TREE_LEAVES, ROWS_PER_CLUSTER = 16, (1024, 4096, 16384), 8, 8
OVERHEAD_WORKERS = (2, 4, 8)
READ_ROWS, READ_CHUNKS = 1_000_000, 16
ITERATIONS, WARM_UP = 6, 2
SCENARIO = Scenario()


def _pickled(value) -> int:
    return len(pickle.dumps(value, protocol=5))


def iterate(run_pass, estimator, params, iterations: int = ITERATIONS, reorder=None) -> list[dict]:
    """The iterations of :func:`~daskclust.em.loop.run_em` from ``params``, every driver call timed.

    ``run_pass(op)`` runs the E-step pass and returns the merged accumulator; ``reorder(name)``
    sorts the chunks' rows after the first pass, as a fit does. Per iteration: the pass's
    seconds, the driver's M-step (kernel parameters, M-step, free energy) and neighbourhood
    update (the search's update and payload) seconds, the (row, cluster) pairs evaluated and the
    pickled bytes of the operation (down the tree) and of the merged accumulator (up).
    """
    spec = estimator.fit_spec(params.means.shape[1])
    family, n_truncated, reg, search = spec.family, spec.n_truncated, spec.reg, spec.make_search()
    search.start(params.means, family.mean_variance(params))
    records = []
    for t in range(iterations):
        t0 = time.perf_counter()
        kernel = family.kernel_params(params)
        t1 = time.perf_counter()
        op = EStepOp(family, kernel, n_truncated, True, search.payload(), 0, t)
        t2 = time.perf_counter()
        acc = run_pass(op)
        t3 = time.perf_counter()
        if t == 0 and reorder is not None:
            reorder(STATE_K)
        t4 = time.perf_counter()
        new = family.m_step(acc.stats, params, reg)
        family.free_energy(acc.stats, params, kernel, new)
        t5 = time.perf_counter()
        search.update(acc.search, new.means, family.mean_variance(new))
        t6 = time.perf_counter()
        records.append({"pass": t3 - t2, "m_step": (t1 - t0) + (t5 - t4), "update": (t2 - t1) + (t6 - t5),
                        "evaluated": float(acc.stats.scal[NDIST_POINTS]), "bytes_down": _pickled(op),
                        "bytes_root": _pickled(acc)})
        params = new
    return records


def steady(records: list[dict], key: str) -> float:
    """Median of ``key`` over the iterations after the warm-up."""
    return float(np.median([r[key] for r in records[WARM_UP:]]))


def random_rows(X: np.ndarray, n: int) -> np.ndarray:
    """``n`` distinct rows of ``X`` (seed 0), as float64 centres."""
    return X[np.random.default_rng(0).choice(len(X), n, replace=False)].astype(np.float64)


class LocalTree:
    """The engine's pass replayed in this process, to see what travels up its tree.

    The chunks (the engine's chunking of ``X``) are placed on ``n_leaves`` one-thread workers
    as :func:`~daskclust.engine.engine.contiguous_placement` places them; each worker folds its
    chunks into one accumulator in index order (``Shard.run_local``) and the workers' results
    are merged (and compacted) as ``Shard.run_tree`` merges them: each worker hands each half of
    the workers after it to that half's first one. :meth:`map_reduce` records the pickled size of every
    message by the depth of its sender (0: the root's, to the driver) and the seconds of every
    merge of two workers' results.
    """

    def __init__(self, X: np.ndarray, n_leaves: int):
        bounds = as_chunked_data(X).bounds
        placement = contiguous_placement(bounds, [WorkerInfo(str(i), 1, 0) for i in range(n_leaves)])
        self.leaves = [[Chunk(int(c), int(bounds[c]), X[bounds[c]:bounds[c + 1]], np.zeros(0))
                        for c in np.flatnonzero(placement == leaf)] for leaf in range(n_leaves)]
        self.leaves = [chunks for chunks in self.leaves if chunks]
        self.messages: dict[int, list[int]] = defaultdict(list)
        self.merge_seconds: list[float] = []

    def assign(self, centres: np.ndarray) -> float:
        """Leave each row's nearest centre as its seed label (what the seeding leaves) and return
        the variance sum ||x - mu||^2 / (N D) of the rows around them."""
        index = NearestIndex(centres, dense=True)
        total = rows = 0
        for chunk in (c for chunks in self.leaves for c in chunks):
            label, d2 = index.nearest(np.ascontiguousarray(chunk.X, dtype=np.float64))
            chunk.state[STATE_SEED_LABEL] = label
            total, rows = total + d2.sum(), rows + chunk.n_rows
        return float(total) / (rows * centres.shape[1])

    def map_reduce(self, op):
        """Run ``op`` over every chunk; the root's accumulator."""
        self.messages, self.merge_seconds = defaultdict(list), []
        accs = []
        for chunks in self.leaves:
            acc = op.new_acc()
            for chunk in chunks:
                op.run(chunk, acc)
            accs.append(acc)
        root = self._subtree(op, accs, 0)
        self.messages[0].append(_pickled(root))
        return root

    def _subtree(self, op, accs: list, depth: int):
        acc, others = accs[0], accs[1:]
        for half in (others[: len(others) // 2], others[len(others) // 2:]):
            if half:
                child = self._subtree(op, half, depth + 1)
                self.messages[depth + 1].append(_pickled(child))
                t0 = time.perf_counter()
                acc = op.merge(acc, child)
                self.merge_seconds.append(time.perf_counter() - t0)
        return leaving(op, acc)  # what a worker sends up, as Shard.run_tree sends it


def seeded(estimator, engine, centres: np.ndarray):
    """The seeding of ``estimator``'s fit from the given ``centres`` on ``engine`` (each row's seed
    label left on its chunk) and the parameters of its first E-step."""
    spec = estimator.fit_spec(centres.shape[1], centres)
    return spec.steps.seed(engine, spec, 0)


def measure_compute(client) -> list[dict]:
    """Per family and D (C = COMPUTE_CLUSTERS, COMPUTE_ROWS rows persisted on ``client``'s one
    1-thread worker): E-step seconds per row less the empty pass's share, candidates per row,
    and the driver's seconds."""
    out = []
    for D in COMPUTE_DIMS:
        X, _ = blobs_array(COMPUTE_ROWS, D, COMPUTE_CLUSTERS)
        centres = random_rows(X, COMPUTE_CLUSTERS)
        for name, make in ESTIMATORS.items():
            estimator = make(COMPUTE_CLUSTERS)
            with Engine(as_chunked_data(X), client) as engine:  # a fresh engine: no K(n) of another family
                empty = time_passes(engine, NoOp, 20)
                _, params = seeded(estimator, engine, centres)
                records = iterate(engine.map_reduce, estimator, params, reorder=engine.reorder)
            row_seconds = (steady(records, "pass") - empty) / len(X)
            evaluated = steady(records, "evaluated") / len(X)
            out.append({"family": name, "D": D, "row_seconds": row_seconds, "candidates": evaluated,
                        "pair_seconds": row_seconds / (evaluated * D), "empty": empty,
                        "driver": steady(records, "m_step") + steady(records, "update")})
    return out


def measure_dense(client) -> dict[int, float]:
    """Seconds per row, centre and feature of one exact nearest-centre pass by matrix products
    (:class:`~daskclust.seeding.passes.NearestCostOp`, C = COMPUTE_CLUSTERS random rows as centres)
    over COMPUTE_ROWS rows persisted on ``client``'s one 1-thread worker, less the empty pass, per D."""
    out = {}
    for D in DENSE_DIMS:
        X, _ = blobs_array(COMPUTE_ROWS, D, COMPUTE_CLUSTERS)
        index = NearestIndex(random_rows(X, COMPUTE_CLUSTERS), dense=True)
        with Engine(as_chunked_data(X), client) as engine:
            empty = time_passes(engine, NoOp, 5)
            seconds = time_passes(engine, lambda: NearestCostOp(index), 3) - empty
        out[D] = seconds / (len(X) * COMPUTE_CLUSTERS * D)
    return out


def measure_tree() -> list[dict]:
    """Per family and C (D = TREE_DIM, ROWS_PER_CLUSTER rows a cluster, TREE_LEAVES workers in a
    :class:`LocalTree`): message bytes by level, the operation's bytes, merge and driver seconds."""
    out = []
    for C in TREE_CLUSTERS:
        X, _ = blobs_array(ROWS_PER_CLUSTER * C, TREE_DIM, C)
        centres = random_rows(X, C)
        for name, make in ESTIMATORS.items():
            estimator = make(C)
            tree = LocalTree(X, TREE_LEAVES)
            spec = estimator.fit_spec(centres.shape[1])
            params = spec.family.initial_params(centres, tree.assign(centres), spec.reg)
            records = iterate(tree.map_reduce, estimator, params)
            levels = {depth: max(sizes) for depth, sizes in sorted(tree.messages.items())}
            out.append({"family": name, "C": C, "levels": levels, "bytes_root": levels[0],
                        "bytes_up": max(v for d, v in levels.items() if d > 0), "bytes_down": steady(records, "bytes_down"),
                        "merge": float(np.median(tree.merge_seconds)), "m_step": steady(records, "m_step"),
                        "update": steady(records, "update")})
    return out


class StateOnly(NoOp):
    """An empty pass that reads no rows: the streamed engine's overhead without the reading."""

    reads_rows = False


def measure_read(client) -> dict[str, float]:
    """Seconds per byte a 1-thread worker spends streaming a zarr store, per compression (the
    store just written, so in the page cache: the CPU's part of a read)."""
    out = {}
    with tempfile.TemporaryDirectory() as tmp:
        for compression in (None, "zstd"):
            path = Path(tmp) / f"read-{compression or 'none'}.zarr"
            make_blobs(path, READ_ROWS, TREE_DIM, 64, compression=compression, chunk_rows=READ_ROWS // READ_CHUNKS)
            with Engine(as_chunked_data(str(path / "X")), client, persist=False) as engine:
                before = engine.bytes_read()
                engine.map_reduce(NoOp())
                per_pass = engine.bytes_read() - before
                seconds = time_passes(engine, NoOp, 5) - time_passes(engine, StateOnly, 5)
            out[compression or "none"] = seconds / per_pass
    return out


def measure_overhead() -> dict[int, float]:
    """Median empty-pass seconds on LocalClusters of W one-thread worker processes."""
    from distributed import Client

    X = np.random.default_rng(0).standard_normal((40_960, 2))
    data = as_chunked_data(X, chunk_rows=640)
    out = {}
    for W in OVERHEAD_WORKERS:
        with (start_local_cluster(n_workers=W, threads_per_worker=1) as cluster, Client(cluster) as client,
              Engine(data, client) as engine):
            out[W] = time_passes(engine, NoOp, 50)
    return out


def family_constants(name: str, compute: list[dict], tree: list[dict]) -> FamilyConstants:
    """The model's constants of one family at D = TREE_DIM: r measured, the rest lines in C."""
    r = next(c["row_seconds"] for c in compute if c["family"] == name and c["D"] == TREE_DIM)
    rows = [t for t in tree if t["family"] == name]
    Cs = [t["C"] for t in rows]

    def line(key):
        return Line.fit(Cs, [key(t) for t in rows])

    return FamilyConstants(name, r, line(lambda t: t["bytes_up"]), line(lambda t: t["bytes_root"]),
                           line(lambda t: t["bytes_down"]), line(lambda t: t["merge"]),
                           line(lambda t: t["m_step"] + t["update"]))


def run(client) -> Table:
    """Measure the constants (E-step and read on ``client``'s one 1-thread worker, the tree in this
    process, the overhead on LocalClusters of its own) and write the table, notes and prediction."""
    compute = measure_compute(client)
    dense = measure_dense(client)
    read = measure_read(client)
    tree = measure_tree()
    overhead = measure_overhead()
    table = Table(
        "Cost model constants of one iteration, measured per core on this machine",
        ["constant", "symbol", "family", "D", "C", "W", "value", "unit"],
    )
    for c in compute:
        fam, D = c["family"], c["D"]
        table.rows.append(["E-step per row", "r", fam, D, COMPUTE_CLUSTERS, 1, c["row_seconds"], "s / row / core"])
        table.rows.append(["candidates evaluated per row", "E", fam, D, COMPUTE_CLUSTERS, 1, c["candidates"], "clusters"])
        table.rows.append(["E-step per evaluated cluster and feature", "r / (E D)", fam, D, COMPUTE_CLUSTERS, 1,
                           c["pair_seconds"], "s / core"])
        table.rows.append(["driver per iteration", "t_drv", fam, D, COMPUTE_CLUSTERS, "-", c["driver"], "s"])
    for compression, per_byte in read.items():
        table.rows.append([f"streamed read, zarr {compression}", "rho", "-", TREE_DIM, "-", 1, 1e9 * per_byte,
                           "s / GB / core"])
    for t in tree:
        fam, C = t["family"], t["C"]
        for symbol, label, value in (("B_root", "accumulator to the driver", t["bytes_root"]),
                                     ("B_up", "largest accumulator between workers", t["bytes_up"]),
                                     ("B_down", "E-step operation down the tree", t["bytes_down"])):
            table.rows.append([label, symbol, fam, TREE_DIM, C, TREE_LEAVES, value, "bytes"])
        table.rows.append(["merge of two accumulators", "t_merge", fam, TREE_DIM, C, TREE_LEAVES, t["merge"], "s"])
        table.rows.append(["driver: M-step", "t_drv", fam, TREE_DIM, C, "-", t["m_step"], "s"])
        table.rows.append(["driver: neighbourhood update", "t_drv", fam, TREE_DIM, C, "-", t["update"], "s"])
    for W, seconds in overhead.items():
        table.rows.append(["empty pass", "a + b W", "-", 2, "-", W, seconds, "s"])
    for D, seconds in dense.items():
        table.rows.append(["exact nearest pass by matrix products, per row, centre and feature", "kappa", "-", D,
                           COMPUTE_CLUSTERS, 1, seconds, "s / core"])
    families = [family_constants(name, compute, tree) for name in ESTIMATORS]
    line = Line.fit(list(overhead), list(overhead.values()))
    table.notes.extend(notes(compute, tree, families, line, read))
    table.notes.append(dense_note(dense))
    table.prose.extend(prose(families, line, read["none"], SCENARIO))
    return table


def dense_note(dense: dict[int, float]) -> str:
    """How kappa was measured, and the passes it prices."""
    figures = ", ".join(f"{1e12 * v:.3g} ps at D = {D}" for D, v in dense.items())
    return (f"kappa: one pass of the exact nearest-centre search by matrix products (kernels/dense.py) over "
            f"{COMPUTE_ROWS:,} rows of make-data blobs (float32) against C = {COMPUTE_CLUSTERS} random rows, "
            f"persisted on one worker process of one thread, the median of 3 less the median empty pass, per row, "
            f"centre and feature ({figures}): where nothing prunes (the probe picks matrix products) the seeding's "
            f"last pass costs about N C D kappa / cores, and KMeans' exact-inertia pass at most that (rows their K(n) "
            f"settles take 17 distances each, em/exact_cost.py), outside the iterations")


def notes(compute: list[dict], tree: list[dict], families: list[FamilyConstants], overhead: Line,
          read: dict[str, float]) -> list[str]:
    """How each constant was measured, the fitted lines, and the per-level bytes, from the run's values."""
    empty = [1e3 * c["empty"] for c in compute]
    out = [
        f"E-step (r, E): {COMPUTE_ROWS:,} rows of make-data blobs (float32), C = {COMPUTE_CLUSTERS}, centres = random "
        f"rows, persisted on one worker process of one thread; the median pass of iterations {WARM_UP + 1}-"
        f"{ITERATIONS} ({ITERATIONS} E-steps with M-steps and neighbourhood updates between them, rows sorted by "
        f"K(n) after the first, as in a fit) less the median empty pass on the same engine ({min(empty):.3g}-"
        f"{max(empty):.3g} ms); E: point-to-centre distances (or log-joints) the kernels count per row",
        f"rho: a store of {READ_ROWS:,} x {TREE_DIM} float32 in {READ_CHUNKS} chunks streamed by one 1-thread worker "
        f"(median of 5 passes reading every row, less 5 passes reading none), just written, so from the page cache: "
        f"the CPU's part of a read (zarr, decompression, copies), {1e9 * read['none']:.3g} s / GB without compression "
        f"and {1e9 * read['zstd']:.3g} s / GB with zstd; the prediction uses the first (raw float32 in the store)",
        f"Tree (B_root, B_up, B_down, t_merge, t_drv at C = {', '.join(map(str, TREE_CLUSTERS))}): "
        f"{ROWS_PER_CLUSTER} rows per cluster of D = {TREE_DIM} blobs, centres = random rows and each row's nearest "
        f"as its seed label; the engine's pass replayed in the driver's process on {TREE_LEAVES} one-thread workers "
        f"(depth {tree_depth(TREE_LEAVES)}: each worker folds its chunks, results merged as the worker tree merges "
        f"them); bytes are pickled sizes of the messages, t_merge the median merge of two workers' results, t_drv "
        f"the driver's calls between two passes",
        f"empty pass: N = 40,960 x 2 in 64 chunks, a LocalCluster of W one-thread worker processes, median of 50; "
        f"fit a + b W: a = {1e3 * overhead.intercept:.3g} ms, b = {1e3 * overhead.slope:.3g} ms per worker. This "
        f"machine has 2 cores, so 4 and 8 processes oversubscribe it and b is an upper bound of the per-worker cost",
    ]
    for f in families:
        out.append(
            f"{f.name}, lines fitted over C at D = {TREE_DIM}: B_up = {f.bytes_up.intercept:,.0f} + "
            f"{f.bytes_up.slope:.4g} C bytes; B_root = {f.bytes_root.intercept:,.0f} + {f.bytes_root.slope:.4g} C bytes; "
            f"B_down = {f.bytes_down.intercept:,.0f} + {f.bytes_down.slope:.4g} C bytes; t_merge = "
            f"{1e3 * f.merge_seconds.intercept:.3g} ms + {1e6 * f.merge_seconds.slope:.3g} us C; t_drv = "
            f"{1e3 * f.driver_seconds.intercept:.3g} ms + {1e6 * f.driver_seconds.slope:.3g} us C"
        )
    out.append(f"The limits' C below extend these lines far beyond the largest C measured ({TREE_CLUSTERS[-1]:,}): "
               f"the messages and the driver's work are per-cluster arrays, linear in C, but at larger C they also "
               f"leave the caches, so the limits are optimistic")
    for t in (t for t in tree if t["C"] == TREE_CLUSTERS[-1]):
        levels = ", ".join(f"level {d}: {v:,} bytes" for d, v in t["levels"].items())
        out.append(f"{t['family']}, C = {t['C']}: largest message sent from each level of the tree ({levels}; "
                   f"level 0 is the root's, to the driver)")
    return out

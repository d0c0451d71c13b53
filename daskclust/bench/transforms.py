"""Streaming transforms: lightweight coresets (Exarchakis et al. 2022 Table 1) and SGMM sketches (Kightley & Becker 2019 Fig. 2), out of core.

Three tables in one run (2 workers x 1 thread; the out-of-core part on its own 2 x 1 GiB cluster):

1. Exarchakis et al. 2022 Table 1 analogue. Baseline: k-means (Lloyd, ``KMeans(search="full")``, k-means|| seeds)
   on the full data. Against it, fits on a lightweight coreset of m = 2^12 rows: k-means + lwcs,
   the truncated isotropic GMM with estimated neighbourhoods (var-GMM-S, C' = G = 5, Exarchakis et al. 2022's
   vc-GMM row) and with sampled candidates (D-GMM, C' = 5, R = 5). Relative error
   eta = (Q_alg - Q_kmeans) / Q_kmeans of the quantization error on the FULL data of each fit's
   centres (nearest centre, computed here apart from the fits); distance-evaluation speedup = the
   baseline's distances (seeding and iterations) over the coreset fit's, counted by the library
   (construction, seeding and EM on the coreset); a second speedup also counts the one E-step on
   the full data with which every coreset fit reports its quality. Mean +- std over SEEDS.
2. Kightley & Becker 2019 Fig. 2 analogue: SketchedGaussianMixture(3, "diag", exact EM) on scikit-learn's digits
   {0, 3, 9} (64 features) and on a synthetic 784-dimensional three-class set, as a function of Q/P,
   n_init=3 per fit, TRIALS sketches per point: accuracy (best matching of clusters to classes)
   against the full diagonal GMM (GaussianMixture(3, "diag", exact EM, n_init=3) on the raw rows),
   and the fit's time, alone and with the sketch's one pass. Target: at Q/P ~ 4-10 % >= 90 % of the
   full GMM's accuracy in <= 15 % of its time. Kightley & Becker 2019 Fig. 2 times the fits ("after
   paying an up-front cost of O(NP log P) to precondition the data"); the verdict reports both.
3. Out of core: the out-of-core suite's 6.4 GB float32 blobs (3.2x the 2 workers' 2 GiB) sketched
   in one pass into a zarr sketch store, against the time to read the array once and against the pass's
   I/O floor, reading the array and writing the sketch's bytes computing nothing (target 1.3x), with
   the workers' CPU seconds;
   then an SGMM fit on the sketch store with the raw store renamed away, its bytes read counted.
"""

from __future__ import annotations

import os
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from scipy.optimize import linear_sum_assignment

from .. import GaussianMixture, KMeans
from ..data import as_chunked_data, open_zarr_array
from ..engine.engine import Engine
from ..engine.ops import ThreadScratch
from ..estimators.sketched import SketchedGaussianMixture
from ..io import Location, discard, remove_store
from ..kernels.estep import cluster_id_dtype
from ..persistence.sketch import create_sketch_store, write_sketch_rows
from ..seeding.passes import NearestIndex
from ..transforms import Sketch, SketchedData
from ..transforms.sketch import feature_index_dtype
from .data import birch_array, blobs_array
from .outofcore import MemoryWatch, ReadOnly, bench_dir, dataset, drop_page_cache, engine_read, read_floor, worker_cpu
from .realdata import data_dir
from .runner import Table

COMMAND = "daskclust bench --suite transforms"
CLUSTER = {"n_workers": 2, "threads_per_worker": 1}
CORESET = 2**12
SEEDS = (0, 1, 2)
TABLE1_SETS = (("sipu_birch1", 100), ("sipu_birch3", 100), ("uci_letter", 26),
               ("BIRCH grid N=10^6", 100), ("blobs N=10^6 D=16", 100))
EXARCHAKIS_2022_TABLE_1 = ("Exarchakis et al. 2022 Table 1 (2^12 coreset, M = 500, D-GMM): KDD 12.0 % at x622, CIFAR-10 8.0 % at x732; "
           "k-means + lwcs: KDD 14.0 % at x35.1, CIFAR-10 7.0 % at x48.9")
FRACTIONS = (0.04, 0.06, 0.10, 0.20, 0.50)
TRIALS = 5
SYNTHETIC = (60_000, 784, 3)
OOC_CLUSTER = {"n_workers": 2, "threads_per_worker": 1, "memory_limit": "1GiB"}
OOC_KEPT = 4
OOC_COMPONENTS = 100


# ---------------------------------------------------------------- 1. coresets
def table1_data(name: str) -> np.ndarray:
    if name.startswith("BIRCH"):
        return birch_array(100, points=10_000, seed=0)[0]
    if name.startswith("blobs"):
        return blobs_array(1_000_000, 16, 100, seed=0, separation=4.0)[0].astype(np.float64)
    return np.load(data_dir() / name / "X.npy").astype(np.float64)


def full_qe(X: np.ndarray, centres: np.ndarray) -> float:
    """sum_n min_c ||x_n - mu_c||^2 over the full data (exact, a pruned nearest-centre search)."""
    return float(NearestIndex.probed(centres).nearest(X)[1].sum())


def fit_distances(model, phase: str | None = None) -> int:
    """Distances a fit counted: its seeding and the history rows of ``phase`` (all when None)."""
    rows = [r for r in model.history_ if phase is None or r.get("data", "full") == phase]
    return int(model.seeding_distances_) + sum(int(r["n_distances"]) for r in rows)


def coreset_models(C: int, seed: int) -> dict:
    common = dict(random_state=seed, coreset=CORESET)
    return {
        "k-means + lwcs": KMeans(C, search="full", **common),
        "var-GMM-S + lwcs (C'=5, G=5)": GaussianMixture(C, covariance_type="isotropic", n_truncated=5,
                                                        n_neighbors=5, search="estimated", **common),
        "D-GMM + lwcs (C'=5, R=5)": GaussianMixture(C, covariance_type="isotropic", n_truncated=5,
                                                    n_samples=5, search="sampled", **common),
    }


def coreset_table(client) -> Table:
    table = Table(f"Exarchakis et al. 2022 Table 1 analogue: lightweight coresets of m = {CORESET} rows against k-means on the "
                  "full data", ["data set", "N x D", "C", "algorithm", "relative error eta %",
                                "distance speedup", "speedup incl. full-data E-step", "iterations", "seconds"])
    for name, C in TABLE1_SETS:
        X = table1_data(name)
        results: dict[str, list] = {}
        for seed in SEEDS:
            base = KMeans(C, search="full", random_state=seed).fit(X, client=client)
            q_base, d_base = full_qe(X, base.centres_), fit_distances(base)
            results.setdefault("k-means (full data)", []).append((0.0, 1.0, 1.0, base.n_iter_, base.fit_time_))
            for label, model in coreset_models(C, seed).items():
                model.fit(X, client=client)
                # the coreset's construction, seeding and EM (seeding_distances_ also holds phase 2's assignment)
                core = (model.coreset_["n_distances"] + fit_distances(model, "coreset")
                        - model.coreset_["assignment_distances"])
                whole = model.coreset_["n_distances"] + fit_distances(model)
                eta = 100 * (full_qe(X, model.centres_) - q_base) / q_base
                iters = sum(1 for r in model.history_ if r.get("data") == "coreset") - 1
                results.setdefault(label, []).append((eta, d_base / core, d_base / whole, iters, model.fit_time_))
        for label, runs in results.items():
            a = np.array(runs)
            table.rows.append([name, f"{len(X):,} x {X.shape[1]}", C, label,
                               f"{a[:, 0].mean():.1f} +- {a[:, 0].std():.1f}",
                               f"x{a[:, 1].mean():.1f} +- {a[:, 1].std():.1f}", f"x{a[:, 2].mean():.1f}",
                               f"{a[:, 3].mean():.1f}", float(a[:, 4].mean())])
    table.notes.append(EXARCHAKIS_2022_TABLE_1)
    table.notes.append(f"mean +- std over seeds {SEEDS}; eta: quantization error of the fit's centres on the full "
                       "data relative to the baseline's; speedup: baseline distances (k-means|| seeding and Lloyd) / "
                       "the coreset fit's (construction: 2 N distances to the mean, + seeding and EM on the m rows); "
                       "the next column adds the full-data phase every coreset fit ends with (an assignment pass and "
                       "one E-step on all N rows, which report the quality)")
    return table


# ---------------------------------------------------------------- 2. sketches
def accuracy(labels: np.ndarray, truth: np.ndarray) -> float:
    """Share of rows whose cluster maps to their class under the best one-to-one matching."""
    k = max(labels.max(), truth.max()) + 1
    counts = np.zeros((k, k))
    np.add.at(counts, (labels, truth), 1)
    rows, cols = linear_sum_assignment(-counts)
    return float(counts[rows, cols].sum() / len(labels))


def digits_039() -> tuple[np.ndarray, np.ndarray]:
    from sklearn.datasets import load_digits

    X, y = load_digits(return_X_y=True)
    keep = np.isin(y, (0, 3, 9))
    return X[keep].astype(np.float64), np.searchsorted([0, 3, 9], y[keep])


def synthetic_784(seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Three classes of 28 x 28 "images": each class lights a random 20 % of the pixels at amplitude 1.5 over
    unit noise scaled per pixel (0.5 .. 1.5), so classes differ in about 250 pixels, like digits do."""
    N, P, K = SYNTHETIC
    rng = np.random.default_rng(seed)
    means = 1.5 * (rng.random((K, P)) < 0.2)
    scale = rng.uniform(0.5, 1.5, P)
    y = rng.integers(K, size=N)
    return means[y] + rng.normal(size=(N, P)) * scale, y


def sketch_table(client) -> Table:
    table = Table("Kightley & Becker 2019 Fig. 2 analogue: SGMM (diagonal, exact EM, n_init=3) on sketches against the full "
                  "diagonal GMM", ["data set", "N x P", "Q / P", "Q", "accuracy mean (min)", "of full GMM %",
                                   "fit s", "of full GMM time %", "sketch pass s", "with sketch pass %"])
    verdicts = []
    for name, (X, y) in (("digits {0,3,9}", digits_039()), ("synthetic 784-D", synthetic_784())):
        N, P = X.shape
        full = GaussianMixture(3, covariance_type="diag", n_truncated=None, search="full", n_init=3,
                               random_state=0).fit(X, client=client)
        acc_full = accuracy(full.labels_, y)
        table.rows.append([name, f"{N:,} x {P}", "1 (raw rows)", P, f"{acc_full:.3f}", 100.0, full.fit_time_,
                           100.0, 0.0, 100.0])
        for fraction in FRACTIONS:
            Q = max(1, int(round(fraction * P)))
            accs, times, passes = [], [], []
            for trial in range(TRIALS):
                t0 = time.perf_counter()
                sketched = Sketch(Q, random_state=trial).fit_transform(X, client=client)
                passes.append(time.perf_counter() - t0)
                model = SketchedGaussianMixture(3, n_kept=Q, n_truncated=None, search="full", n_init=3,
                                                random_state=trial).fit(sketched, client=client)
                accs.append(accuracy(model.labels_, y))
                times.append(model.fit_time_)
            share, cost = 100 * np.mean(accs) / acc_full, 100 * np.mean(times) / full.fit_time_
            whole = 100 * (np.mean(times) + np.mean(passes)) / full.fit_time_
            table.rows.append([name, f"{N:,} x {P}", f"{Q / P:.3f}", Q, f"{np.mean(accs):.3f} ({min(accs):.3f})",
                               share, float(np.mean(times)), cost, float(np.mean(passes)), whole])
            if 0.04 <= fraction <= 0.10:
                verdicts.append((name, Q / P, share, cost, whole))
    table.notes.append(f"{TRIALS} sketches (seeds) per Q, each fitted with n_init=3; accuracy: best one-to-one "
                       "matching of the 3 clusters to the 3 classes; fit s: the estimator's fit_time_ (seeding and "
                       "EM on the sketch; the full GMM's fit_time_ likewise, its rows sent to the workers "
                       "included); of full GMM time %: the fit alone; sketch pass s: Sketch.fit_transform of the "
                       "rows in memory (sent to the workers, sketched, gathered); with sketch pass %: fit and pass")

    def points(column: int) -> str:
        """The verdict of every point with the time share in ``column`` of ``verdicts``."""
        met = [v[2] >= 90 and v[column] <= 15 for v in verdicts]
        listed = [f"{v[0]} Q/P={v[1]:.3f}: {v[2]:.0f} % accuracy in {v[column]:.0f} % time ({'met' if ok else 'missed'})"
                  for v, ok in zip(verdicts, met)]
        return "; ".join(listed) + f". {sum(met)} of {len(verdicts)} points meet it"

    table.prose.append("Target (>= 90 % of the full GMM's accuracy in <= 15 % of its time, at Q/P 4-10 %). The fit "
                       f"alone, as Kightley & Becker 2019 Fig. 2 times it: {points(3)}. With the sketch's pass: "
                       f"{points(4)}.")
    return table


# ---------------------------------------------------------------- 3. out of core
@dataclass
class WriteSketchBytes:
    """A pass that reads every row and writes a sketch's bytes for it (zeros, from arrays each thread
    reuses, as the sketch pass does), computing nothing: the I/O floor of a sketch pass."""

    target: Location
    n_kept: int
    index_dtype: np.dtype
    zeros: ThreadScratch = field(default_factory=lambda: ThreadScratch(np.zeros), repr=False, compare=False)

    def new_acc(self) -> int:
        return 0

    def run(self, chunk, acc: int) -> None:
        values, indices = self.zeros.rows(chunk.n_rows, ((self.n_kept,), chunk.X.dtype),
                                          ((self.n_kept,), self.index_dtype))
        write_sketch_rows(self.target, chunk.start, values, indices, None)

    @staticmethod
    def merge(a: int, b: int) -> int:
        return a + b


def read_write_floor(client, path: str, target: Location, cold: bool, passes: int = 2) -> float:
    """Seconds of the fastest of ``passes`` streamed passes reading the array at ``path`` and writing a
    sketch's bytes to ``target`` (:class:`WriteSketchBytes`), after an untimed first pass that validates
    the chunks (as :func:`~daskclust.bench.outofcore.engine_read` does); before each, ``target`` is
    created anew, the disk's write queue flushed and, when ``cold``, the page cache dropped. The
    fastest, as for the read floor: writing the same bytes again takes very different times on a
    virtual machine's disk (1 GB in 100 files: 6.5 s once, then 0.3-0.5 s, on this project's benchmark
    machine for issue 26)."""
    data = as_chunked_data(path)
    index_dtype = feature_index_dtype(data.n_features)
    seconds = []
    with Engine(data, client, persist=False, fingerprint=False) as engine:
        engine.map_reduce(ReadOnly())
        for _ in range(passes):
            discard(target.url)
            create_sketch_store(target, {}, (data.n_samples, OOC_KEPT), int(data.bounds[1] - data.bounds[0]),
                                data.dtype, index_dtype, False)
            os.sync()
            if cold:
                drop_page_cache()
            t0 = time.perf_counter()
            engine.map_reduce(WriteSketchBytes(target, OOC_KEPT, index_dtype))
            seconds.append(time.perf_counter() - t0)
    discard(target.url)
    return min(seconds)


def clear_output(target: Path) -> None:
    """Remove the sketch store of the last pass (a store this bench wrote, :func:`~daskclust.io.remove_store`)
    and flush the disk's write queue, so that a timed pass neither deletes 1 GB nor waits for the last
    pass's writes."""
    remove_store(Location.parse(target))
    os.sync()


def outofcore_table() -> Table:
    from distributed import Client

    from ..engine.cluster import start_local_cluster

    table = Table("Sketching larger than memory: one pass over 6.4 GB of float32 blobs on 2 workers x 1 GiB",
                  ["page cache", "step", "seconds", "against the read floor", "against the I/O floor",
                   "bytes read (GB)", "note"])
    raw = dataset(None)
    target = bench_dir() / f"sketch-q{OOC_KEPT}.zarr"
    bytes_only = Location.parse(bench_dir() / f"sketch-q{OOC_KEPT}-zeros.zarr")
    verdicts = []
    with start_local_cluster(**OOC_CLUSTER) as cluster, Client(cluster) as client:
        sample = np.asarray(open_zarr_array(raw)[:20000])
        Sketch(OOC_KEPT, random_state=0).fit_transform(sample, client=client)  # load the kernels on the workers
        for cache in ("warm", "cold") if drop_page_cache() else ("warm",):
            cold = cache == "cold"
            engine_s = engine_read(client, raw, cold)  # warm: its untimed first pass fills the page cache
            if cold:
                drop_page_cache()
            cpu0 = worker_cpu(client)
            dask_s = read_floor(client, raw)
            cpu1 = worker_cpu(client)
            io_s = read_write_floor(client, raw, bytes_only, cold)
            clear_output(target)
            if cold:
                drop_page_cache()
            cpu2 = worker_cpu(client)
            t0 = time.perf_counter()
            sketched = Sketch(OOC_KEPT, random_state=0).fit_transform(raw, client=client, output=target,
                                                                      overwrite=True)
            sketch_s = time.perf_counter() - t0
            floor_cpu, sketch_cpu = cpu1 - cpu0, worker_cpu(client) - cpu2
            floor = min(dask_s, engine_s)
            io_floor = max(io_s, floor)
            raw_gb = sketched.n_samples * sketched.n_features * 4 / 1e9
            out_gb = sketched.n_samples * OOC_KEPT * (sketched.values.dtype.itemsize
                                                       + sketched.indices.dtype.itemsize) / 1e9
            table.rows.append([cache, "read the raw array once: dask sum", dask_s, f"{dask_s / floor:.2f}x", "-",
                               raw_gb, f"workers' CPU {floor_cpu:.1f} s"])
            table.rows.append([cache, "read the raw array once: daskclust's streamed pass computing nothing",
                               engine_s, f"{engine_s / floor:.2f}x", "-", raw_gb, "the reader the sketch pass uses"])
            table.rows.append([cache, "read the raw array and write a sketch's bytes (zeros), computing nothing "
                               "(faster of two)",
                               io_s, f"{io_s / floor:.2f}x", f"{io_s / io_floor:.2f}x", raw_gb,
                               f"the I/O floor of the pass: the same reader, {out_gb:.2f} GB written as the "
                               "sketch pass writes it"])
            table.rows.append([cache, f"Sketch(n_kept={OOC_KEPT}) -> zarr", sketch_s, f"{sketch_s / floor:.2f}x",
                               f"{sketch_s / io_floor:.2f}x", raw_gb,
                               "one pass: read, validate, draw the kept features, their entries of H D x, "
                               f"write values and indices; workers' CPU {sketch_cpu:.1f} s"])
            verdicts.append((cache, sketch_s / floor, sketch_s / io_floor, sketch_cpu / floor_cpu))
        moved = raw.rstrip("/").rsplit("/", 1)[0]
        hidden = moved + ".hidden"
        os.rename(moved, hidden)  # the fit cannot read the raw rows: it must not need them
        try:
            model = SketchedGaussianMixture(OOC_COMPONENTS, random_state=0, max_iter=5, tol=0)
            with MemoryWatch(client) as watch:
                model.fit(SketchedData.open(target), client=client)
        finally:
            os.rename(hidden, moved)
        sketch_gb = sketched.n_samples * OOC_KEPT * (sketched.values.dtype.itemsize
                                                    + sketched.indices.dtype.itemsize) / 1e9
        table.rows.append(["not controlled", f"SketchedGaussianMixture(C={OOC_COMPONENTS}) on the sketch store, "
                           "5 iterations", model.fit_time_, "-", "-", model.bytes_read_ / 1e9,
                           f"raw store renamed away during the fit; {model.bytes_read_ / (sketch_gb * 1e9):.1f} "
                           f"reads of the {sketch_gb:.2f} GB sketch; peak worker RSS {watch.worker_peak / 2**20:.0f} MB "
                           f"of {OOC_CLUSTER['memory_limit']} (C' = {model.n_truncated}: K(n) "
                           f"{sketched.n_samples * model.n_truncated * cluster_id_dtype(OOC_COMPONENTS).itemsize / 1e9:.2f} GB "
                           "in all)"])
    table.notes.append("the read floor: the faster of the two reads of the raw array in the same page-cache state "
                       "(warm: the array sits in the page cache; cold: the cache is dropped before each read, as "
                       "for data larger than RAM)")
    table.notes.append("the I/O floor: the larger of the read floor and the faster of two passes that read the "
                       "raw array and write the sketch's bytes computing nothing (a pass that writes its output "
                       "cannot take less); before each timed write the last output is removed and the disk's "
                       "write queue flushed, outside the timing")
    table.notes.append("the fit on the sketch store reads a smaller store than the raw array, which the "
                       f"{cache} sketch pass has just written and which may sit in the page cache: it has no read "
                       "floor of its own here")
    listed = "; ".join(f"{cache} {ratio:.2f}x the read floor ({'met' if ratio <= 1.3 else 'missed'}) and "
                       f"{io_ratio:.2f}x the I/O floor ({'met' if io_ratio <= 1.3 else 'missed'}), workers' CPU "
                       f"{cpu:.2f}x the dask read's" for cache, ratio, io_ratio, cpu in verdicts)
    table.prose.append(f"One-pass sketch against its floors (target 1.3x): {listed}. The fit on the sketch ran "
                       "with the raw store renamed away and read only the sketch store (bytes counted by the "
                       "workers).")
    return table


def run(client) -> Table:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        parts = [coreset_table(client), sketch_table(client)]
    parts.append(outofcore_table())
    first = parts[0]
    for other in parts[1:]:
        first.prose.append(f"### {other.title}\n\n{other.markdown()}")
    return first

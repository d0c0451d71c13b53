"""Stepwise EM over a stream of chunks (the estimators' ``partial_fit``).

Each chunk X_t given by the caller is E-stepped in this process under the current parameters
theta_t; its statistics per unit weight, s(X_t; theta_t), are blended into running statistics with
a decaying step, and the family's M-step of the running statistics gives the next parameters
(stepwise EM, Cappé & Moulines 2009; Liang & Klein 2009):

    s_{t+1} = (1 - eta_t) s_t + eta_t s(X_t; theta_t),   theta_{t+1} = M(s_{t+1}),
    eta_t = (W(X_t) / W_{<=t})^kappa,  0.5 < kappa <= 1,

W(X_t) the chunk's weight and W_{<=t} the weight seen so far, this chunk included (for chunks of
equal weight, eta_t = (t + 1)^(-kappa): sum_t eta_t = inf, sum_t eta_t^2 < inf, as stochastic
approximation needs, and the first chunk's statistics are taken whole). A step that counts weight
rather than calls makes the schedule the same for small and large chunks. No M-step is made until
:data:`BURN_IN` (D + 1) C rows have been seen (the parameters stay the start's, and the running
statistics are then their exact average, eta_t = W(X_t) / W_{<=t}): a component's covariance
estimated from the handful of rows a small first chunk gives it is singular, and a component
collapsed onto its few rows draws no rows from later chunks and dies (Cappé & Moulines 2009 wait
for a minimum of observations before their first M-step for the same reason).

The E-step is truncated: each row keeps its C' most responsible components K(n), found exactly
under the family's cost by the model's own index (:class:`~daskclust.models.inference.MixtureIndex`,
the search of ``predict``), so a stream's rows, which have no K(n) from earlier iterations, start
from the best sets there are. The family's statistics S2 are second moments about the E-step's
means; the running statistics are kept about the current means (re-centred after every M-step,
:meth:`~daskclust.models.base.Family.moved`), so the two add.

When the stream comes back to chunks it has seen (a second epoch over the same data), the steps become
incremental EM's (:mod:`.revisits`): the statistics of the chunks visited in the epoch replace the running
ones for their share of the data, so that after the epoch the parameters are estimated from all rows.

A k-means stream (the family's ``hard``) also moves a centre from where it is least needed to a row of
the chunk where one is lacking, when the chunk shows that this pays (:mod:`.stream_swap`), before the
M-step: the steps alone keep the optimum the start leads to. A swap changes every chunk's part of the
statistics, so once the stream comes back to its chunks an epoch starts again from the swapped ones.

Nothing here uses Dask: a chunk is in memory, and its rows are cut into blocks E-stepped on a
thread pool (the kernels release the GIL), merged in block order, so the result does not depend on
the number of threads.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass, field

import numpy as np

from ..engine.shard import chunk_digest
from ..errors import InvalidDataError
from ..kernels.estep import LSE, N_SCALARS, QE, W, estep_sets
from ..models import Family, Params, SuffStats
from ..models.inference import MixtureIndex
from ..names import STREAM_PARTIAL_FIT_START, STREAM_PARTIAL_FIT_SWAP
from ..seeding.passes import pruning_test
from ..seeding.reduction import reduce_candidates
from ..threads import blocks_in_order, driver_threads
from .revisits import RevisitEpoch
from .stream_swap import swap

STEP_DECAY = 0.55
"""kappa of the step sizes: within (0.5, 1] for convergence; smaller forgets the first chunks' (worst)
parameters faster. Measured over two epochs of 50 chunks (mean held-out log-likelihood per row of
3 seeds): uci_letter full covariances -8.60 at 0.55, -9.10 at 0.6, -10.24 at 0.8, -10.95 at 1.0
(-8.40 at 0.5, the edge of the condition); sipu_birch1 diag -2.3432, -2.3428, -2.3433, -2.3459."""

BURN_IN = 2
"""Rows seen before the first M-step, per component and per (feature + 1)."""

START_ROWS = 20
"""Rows per component, at most, of the first chunk that its k-means sees (:func:`first_params`): twice
the candidates of a k-means|| seeding (oversampling 2 C in 5 rounds). Its greedy k-means++ costs rows x C
distances per trial: 20 C rows at C = 1000 and D = 16 take 2-3 s per restart here."""

START_LLOYD_ITERATIONS = 20
"""Most Lloyd iterations of each restart of the first chunk's k-means (:func:`first_params`), whose
greedy steps count a trial's saving over all rows, as scikit-learn's k-means++ does. The k-means||
seeding's reduction takes 3 iterations and a saving over 8 neighbours, as the data's EM refines its
seeds; a stream's start is the only k-means it gets. Two epochs of 50 chunks, uci_letter full
covariances (mean held-out log-likelihood per row of 3 seeds): -8.60 with these, -9.18 with 20
iterations and the local saving, -8.70 with 3 iterations and the saving over all rows, -9.09 with the
seeding's settings (batch fit: -8.33)."""

START_BUDGET = 32 * 2000 * 100 * 2
"""n C D summed over the restarts of a stream's start (:func:`start_restarts`): 32 restarts on 2,000 rows
of 2 features with C = 100 (the BIRCH grid's first chunk in the stream suite), fewer beyond."""

BLOCK_ROWS = 16384
"""Rows per block of a chunk's E-step (a block's statistics are a task of the thread pool)."""

REMEMBERED_CHUNKS = 100_000
"""Distinct chunks whose digests and weights a stream keeps to know them when they come back (about 145
bytes each: 15 MB at most). A stream of more distinct chunks is taken as endless: it forgets them, keeps
no more, and its steps are stepwise EM's from then on."""


@dataclass
class StepwiseEM:
    """The state a stream of ``partial_fit`` calls keeps: the parameters, the running statistics per
    unit weight (about the current means) and the number of steps taken.

    family : the model family; n_truncated : C'; reg : added to the covariances (``reg_covar``);
    decay : kappa of the step sizes; chunk_weights : the weight of every distinct chunk seen, by content
    digest (None once the stream showed more than :data:`REMEMBERED_CHUNKS`); epoch : the
    incremental EM epoch under way once the stream has come back to a chunk (:mod:`.revisits`), None
    before.
    """

    family: Family
    n_truncated: int
    reg: float
    params: Params
    decay: float = STEP_DECAY
    stats: SuffStats | None = None
    n_steps: int = 0
    weight_seen: float = 0.0
    rows_seen: int = 0
    seed: int = 0
    n_swaps: int = 0
    chunk_weights: dict[str, float] | None = field(default_factory=dict)
    epoch: RevisitEpoch | None = None

    def burnt_in(self) -> bool:
        """Whether enough rows have been seen for M-steps (:data:`BURN_IN`)."""
        C, D = self.params.means.shape
        return self.rows_seen >= BURN_IN * C * (D + 1)

    def step(self, X: np.ndarray, w: np.ndarray) -> dict:
        """One step on the chunk ``X`` (rows validated by the caller) with weights ``w`` ((n,) or (0,),
        of positive sum): E-step under the current parameters, blend (or, once the stream comes back to
        its chunks, incremental EM's statistics: :mod:`.revisits`), M-step once burnt in. Returns:
        the chunk's free energy per point under the parameters before the step (the chunk not yet
        learned from: a held-out figure), its quantization error sum_n w_n ||y_n - mu_c(n)||^2 (c(n)
        the row's most responsible component) and weight W, the mean variance after the step and the
        seconds."""
        started = time.perf_counter()
        kernel = self.family.kernel_params(self.params)
        chunk, sets = chunk_stats(self.family, self.params, kernel, X, w, self.n_truncated)
        total = float(chunk.scal[W])
        free_energy, _ = self.family.free_energy(chunk, self.params, kernel, None)
        quantization_error = float(chunk.scal[QE])
        averaging = not self.burnt_in()  # the parameters have not moved: the exact average of the chunks
        self.weight_seen += total
        self.rows_seen += int(np.count_nonzero(w)) if len(w) else X.shape[0]
        digest = self.known_chunk(X, w, total)
        if self.epoch is not None:
            blended = self.epoch.add(self.family, digest, chunk, self.params.means)
        else:
            share = total / self.weight_seen
            eta = share if averaging else share ** self.decay
            unit = per_unit_weight(chunk, total)
            blended = unit if self.stats is None else blend(self.stats, unit, eta)
        if self.burnt_in():
            if self.family.hard:
                swapped = swap(blended, self.params, X, w, sets[:, 0],
                               np.random.default_rng([self.seed, STREAM_PARTIAL_FIT_SWAP, self.n_steps]))
                if swapped is not None:
                    blended, self.params = swapped
                    self.n_swaps += 1
                    if self.epoch is not None:  # the swap changed every chunk's part: an epoch starts from it
                        self.epoch = RevisitEpoch(blended, self.params.means, self.epoch.total_weight)
            new = self.family.m_step(blended, self.params, self.reg)
            blended = self.family.moved(blended, self.params.means, new.means)
            if self.epoch is not None:
                self.epoch.moved(self.family, self.params.means, new.means)
            self.params = new
        self.stats = blended
        self.n_steps += 1
        return {"free_energy": float(free_energy), "quantization_error": quantization_error, "weight": total,
                "sigma2": self.family.mean_variance(self.params), "seconds": time.perf_counter() - started}

    def known_chunk(self, X: np.ndarray, w: np.ndarray, weight: float) -> str | None:
        """The chunk's content digest, remembered with its weight; an epoch of incremental EM begins when the
        chunk has been seen before and not yet in the current epoch (:mod:`.revisits`). None once the stream
        is taken as endless: a new chunk after :data:`REMEMBERED_CHUNKS` makes it forget them all (and any
        epoch: its statistics are the running ones from then on)."""
        if self.chunk_weights is None:
            return None
        digest = chunk_digest(X, w)
        if digest in self.chunk_weights:
            if self.epoch is None or digest in self.epoch.visited:
                self.epoch = RevisitEpoch(self.stats, self.params.means, sum(self.chunk_weights.values()))
        elif len(self.chunk_weights) >= REMEMBERED_CHUNKS:
            self.chunk_weights = self.epoch = digest = None
        else:
            self.chunk_weights[digest] = weight
            if self.epoch is not None:
                self.epoch.total_weight += weight
        return digest


def chunk_stats(family: Family, params: Params, kernel, X: np.ndarray, w: np.ndarray,
                n_truncated: int) -> tuple[SuffStats, np.ndarray]:
    """The family's statistics of the chunk's truncated E-step and the rows' sets K(n) ((n, C') int32, most
    responsible first): every row's C' most responsible components (exactly, through the model's index),
    its responsibilities renormalised over them. Blocks of :data:`BLOCK_ROWS` rows on a thread pool,
    merged in block order."""
    C, D = params.means.shape
    index = MixtureIndex(family, params)
    k = min(n_truncated, C)

    def block(start: int, stop: int) -> tuple[SuffStats, np.ndarray]:
        rows = X[start:stop]
        weights = w[start:stop] if len(w) else w
        sets = index.top(rows, k)[0]
        stats = family.new_stats(C, D)
        estep_sets(rows, weights, kernel, sets, stats.arrays(), stats.scal)
        return stats, sets

    n = X.shape[0]
    with driver_threads() if n > BLOCK_ROWS else contextlib.nullcontext() as pool:
        parts = blocks_in_order(block, n, pool, rows=BLOCK_ROWS)
    total = parts[0][0]
    for part, _ in parts[1:]:
        total = total.merge(part)
    return total, np.concatenate([sets for _, sets in parts])


def per_unit_weight(stats: SuffStats, total: float) -> SuffStats:
    """The chunk's statistics divided by its weight W (the running statistics' unit: W = 1)."""
    scal = np.zeros(N_SCALARS)
    scal[W] = 1.0
    scal[LSE] = stats.scal[LSE] / total
    scal[QE] = stats.scal[QE] / total
    return SuffStats(stats.S0 / total, stats.S1 / total, stats.S2 / total, scal)


def blend(running: SuffStats, unit: SuffStats, eta: float) -> SuffStats:
    """(1 - eta) running + eta unit, both per unit weight and about the current means, so their second
    moments add."""
    return SuffStats(*((1.0 - eta) * a + eta * b for a, b in zip((running.S0, running.S1, running.S2, running.scal),
                                                                   (unit.S0, unit.S1, unit.S2, unit.scal))))


def first_params(family: Family, X: np.ndarray, w: np.ndarray, n_clusters: int, seed: int, reg: float) -> Params:
    """The parameters before the first step when none are given: k-means of the first chunk's rows (at
    most :data:`START_ROWS` C of them, drawn uniformly), by the k-means|| reduction
    (:func:`~daskclust.seeding.reduction.reduce_candidates`: greedy k-means++ counting each trial's
    saving over all rows, then at most :data:`START_LLOYD_ITERATIONS` Lloyd steps) with
    :func:`start_restarts` restarts; each component sigma^2 I + reg with sigma^2 the rows' mean squared
    distance to their centre per feature, equal weights."""
    mass = w if len(w) else np.ones(X.shape[0])
    if X.shape[0] > START_ROWS * n_clusters:
        draw = np.random.default_rng([seed, STREAM_PARTIAL_FIT_START])
        rows = np.sort(draw.choice(X.shape[0], START_ROWS * n_clusters, replace=False))
        X, mass = X[rows], mass[rows]
    dense, _ = pruning_test(np.asarray(X, dtype=np.float64), seed)
    restarts = start_restarts(X.shape[0], n_clusters, X.shape[1])
    reduction = reduce_candidates(X, mass, n_clusters, seed, dense, restarts=restarts,
                                  lloyd_iterations=START_LLOYD_ITERATIONS, neighbours=0)
    if reduction is None:
        raise InvalidDataError(f"n_samples={int(np.count_nonzero(mass))} (rows with weight) should be >= "
                               f"n_clusters={n_clusters} in the first partial_fit chunk")
    sigma2 = reduction.cost / (float(mass.sum()) * X.shape[1])
    return family.initial_params(reduction.centres, sigma2, reg)


def start_restarts(n_rows: int, n_clusters: int, n_features: int) -> int:
    """Restarts of the first chunk's k-means: max(1, min(32, START_BUDGET // (n C D))) for n rows. A
    stream's start sees one chunk, not the whole data as a k-means|| seeding does, and no later stepwise
    step moves a centre out of a wrong optimum (only a k-means stream's swaps, :mod:`.stream_swap`): on
    the BIRCH grid (C = 100, 2,000 rows) 2 of 6 seeds started 7 % worse than the others with 8 restarts,
    none with 32. A restart's greedy steps and Lloyd iterations cost O(n C D), hence fewer restarts for
    more rows, centres or features: 32 restarts took 41 s on 2,000 rows of 784 features (C = 100)."""
    return max(1, min(32, START_BUDGET // max(1, n_rows * n_clusters * n_features)))

"""The seeding algorithms, written as sequences of passes over the engine.

Each returns ``(centres, qe, W, n_distances)`` where qe = sum_n w_n d(y_n)^2 to
the row's seed centre and W = sum_n w_n, and leaves ``seed_label`` on every chunk.
"""

from __future__ import annotations

import numpy as np

from ..kernels.rng import stream_key
from ..kernels.seeding import afkmc2_chains
from ..names import STREAM_AFKMC2_CHAINS, STREAM_AFKMC2_SPLIT, STREAM_KMEANSPP
from .passes import (
    AssignOp,
    DrawOp,
    NearestIndex,
    NearestUpdateOp,
    ProposalDrawOp,
    ProposalMassOp,
    merge_rows,
    pruning_test,
)
from .reduction import greedy_kmeanspp, kmeanspp_trials, reduce_candidates
from .rounds import oversample

PROBE_ROWS = 256
"""Rows drawn (in proportion to w) to measure whether ball trees prune on this data."""

DENSE_SAMPLE = 32
DENSE_BUDGET = 1 << 35
"""Where pruning fails, each k-means|| candidate costs a distance for every row the rounds see,
so they see all rows (and the candidate weights are exact counts) unless that costs more than
DENSE_BUDGET multiply-adds (about a second of matrix products on two cores, e.g. up to 232,000
rows of 74 features at C = 200); beyond, a uniform sample of rows within that budget, at least
DENSE_SAMPLE per cluster, with weights scaled up (candidate weights then estimated)."""


def dense_rows(n_clusters: int, n_features: int, oversampling_factor: float, init_rounds: int) -> int:
    """Rows the k-means|| rounds see at most (see DENSE_BUDGET)."""
    per_row = max(1.0, oversampling_factor * n_clusters * init_rounds * n_features)
    return max(DENSE_SAMPLE * n_clusters, int(DENSE_BUDGET / per_row))


ROUND_ROWS_PER_CLUSTER = 128
"""Rows per cluster the k-means|| rounds see at most (a uniform sample drawn by the first pass beyond
that): candidates and their masses found on 128 rows per cluster led KMeans() to the same final
quantization error as on every row within the spread of seeds (BIRCH grid, N = 409,600, 3 seeds:
C = 256 +0.00 %, C = 1024 +0.6 % with seeds spreading by 1.3 %). With 32 and 64 rows per cluster
C = 1024 ended 2.4 % and 1.3 % higher."""

SAMPLE_VALUES = 1 << 25
"""Values of the rounds' sample the first pass sends to the driver at most (128 MiB of float32,
256 MiB of float64)."""


def round_sample_rate(init, n_clusters: int, n_features: int, n_samples: int, oversampling_factor: float,
                      init_rounds: int) -> float:
    """The share of rows the first pass of a k-means|| seeding sends to the driver for its rounds, drawn
    uniformly: every row up to ROUND_ROWS_PER_CLUSTER per cluster, within :func:`dense_rows` and
    SAMPLE_VALUES, else a sample of that many (0 for other seedings: no sample).

    The seeding then reads the data twice in all: the first pass and the last (every row's seed).
    """
    if not (isinstance(init, str) and init == "k-means||"):
        return 0.0
    rows = min(ROUND_ROWS_PER_CLUSTER * n_clusters, dense_rows(n_clusters, n_features, oversampling_factor,
                                                                init_rounds), SAMPLE_VALUES // max(1, n_features))
    return min(1.0, rows / max(1, n_samples))


def _draw_first(engine, seed: int) -> np.ndarray:
    rows = engine.map_reduce(DrawOp(seed, 0, 1, engine.data.n_features))
    return rows["X"][0]


def spatial_order(centres: np.ndarray, leaf: int = 8) -> np.ndarray:
    """A numbering of the centres in which near centres get near numbers (kd-tree leaf order:
    split at the median of the widest coordinate, recursively).

    Neighbourhoods G_c then point to nearby memory, so the E-step kernels touch
    few cache lines per point; the numbering of clusters is otherwise arbitrary.
    """
    out = []
    stack = [np.arange(len(centres))]
    while stack:
        idx = stack.pop()
        if len(idx) <= leaf:
            out.append(idx)
            continue
        pts = centres[idx]
        dim = int(np.argmax(pts.max(axis=0) - pts.min(axis=0)))
        order = np.argsort(pts[:, dim], kind="stable")
        half = len(idx) // 2
        stack.append(idx[order[half:]])
        stack.append(idx[order[:half]])
    return np.concatenate(out)


def assign(engine, centres: np.ndarray, seed: int, n_dist: int = 0, *, renumber: bool = True):
    """Last pass of a seeding: every row's exact nearest centre; returns (centres, qe, W, n_dist), the
    centres numbered in :func:`spatial_order` unless ``renumber=False`` (a drawn seeding's numbering is
    arbitrary; a caller's is kept)."""
    if renumber:
        centres = centres[spatial_order(centres)]
    dense, n_test = pruning_test(centres, seed)
    index = NearestIndex(centres, dense=dense)
    out = engine.map_reduce(AssignOp(index))
    return centres, out["qe"][0], out["W"][0], n_dist + n_test + index.n_build + int(out["n_dist"][0])


def random_rows(engine, n_clusters: int, *, seed: int, **_):
    """C distinct rows drawn without replacement in proportion to their weights (repeated
    when fewer than C rows have positive weight)."""
    rows = engine.map_reduce(DrawOp(seed, 0, n_clusters, engine.data.n_features))
    centres = rows["X"][np.argsort(rows["key"], kind="stable")]
    return assign(engine, _fill(centres, n_clusters) if len(centres) < n_clusters else centres, seed)


KMEANSPP_BUDGET = 1 << 29
"""Driver work of greedy k-means++ on its sample, S C (2 + ln C) D multiply-adds at most (a quarter of
a second on one core where nothing prunes): every row of data this small, so that the seeding is
scikit-learn's k-means++ itself (every set of ``../shared/data`` at the C of the realdata suites; at
C = 500, uci_letter's 18,000 rows give a sample of 8,388); see :func:`kmeanspp_rows`."""
KMEANSPP_PER_CLUSTER = 16
"""Rows per cluster the k-means++ sample keeps at least, whatever the budget."""
KMEANSPP_MAX_VALUES = 1 << 23
"""Values of the k-means++ sample gathered on the driver at most (64 MiB of float64)."""


def kmeanspp_rows(n_clusters: int, n_features: int, n_samples: int) -> int:
    """Rows greedy k-means++ runs on: all N while S C (2 + ln C) D stays within KMEANSPP_BUDGET,
    else a sample of S = max(KMEANSPP_PER_CLUSTER C, what the budget allows), never more than
    KMEANSPP_MAX_VALUES values nor fewer than C rows."""
    per_row = n_clusters * kmeanspp_trials(n_clusters) * max(1, n_features)
    rows = max(KMEANSPP_PER_CLUSTER * n_clusters, KMEANSPP_BUDGET // per_row)
    rows = max(n_clusters, min(rows, KMEANSPP_MAX_VALUES // max(1, n_features)))
    return min(n_samples, rows)


def first_draw_rows(init, n_clusters: int, n_features: int, n_samples: int) -> int:
    """Rows the first pass of a seeding draws in proportion to w: the k-means++ sample, else the
    PROBE_ROWS with which k-means|| tests whether ball trees prune."""
    if isinstance(init, str) and init == "k-means++":
        return kmeanspp_rows(n_clusters, n_features, n_samples)
    return PROBE_ROWS


def kmeanspp(engine, n_clusters: int, *, seed: int, probe: dict, **_):
    """Greedy k-means++ (Arthur & Vassilvitskii 2007 as scikit-learn runs it: the first centre drawn in
    proportion to w, then per centre 2 + ln C candidates drawn in proportion to w d^2, the one
    lowering sum w d^2 most kept) on the rows the first pass drew, on the driver; one more pass gives
    every row its nearest seed.

    The first pass draws :func:`kmeanspp_rows` rows without replacement in proportion to w: every
    row of data within the budget, with its weight, so that the seeding is scikit-learn's
    ``kmeans_plusplus`` on the data; beyond it a sample, whose rows, drawn in proportion to w, count
    alike. Two passes in all, whatever C. The greedy steps go through a ball tree where it
    prunes, matrix products elsewhere (:func:`~daskclust.seeding.reduction.greedy_kmeanspp`).
    """
    data = engine.data
    X = np.ascontiguousarray(probe["X"], dtype=np.float64)
    every_row = kmeanspp_rows(n_clusters, data.n_features, data.n_samples) >= data.n_samples
    w = probe["w"] if every_row else np.ones(len(X))  # a sample's rows were drawn in proportion to w
    if len(X) < n_clusters:  # fewer rows of positive weight than clusters
        centres, n = _complete(engine, X, n_clusters, seed)
        return assign(engine, centres, seed, n)
    dense, n_dist = pruning_test(X, seed)
    chosen, n = greedy_kmeanspp(X, np.ascontiguousarray(w, dtype=np.float64), n_clusters,
                                kmeanspp_trials(n_clusters), stream_key(seed, STREAM_KMEANSPP), dense, exact_tail=0.0)
    centres, n_fill = _complete(engine, X[chosen], n_clusters, seed)
    return assign(engine, centres, seed, n_dist + n + n_fill)


def kmeans_parallel(engine, n_clusters: int, *, seed: int, probe: dict, sample: list[dict],
                    oversampling_factor: float = 2.0, init_rounds: int = 5, **_):
    """k-means|| (Bahmani et al. 2012), weighted, in two passes over the data.

    The first pass (made by :func:`~daskclust.seeding.seed`) sends the driver a uniform ``sample``
    of rows (every row within a budget, :func:`round_sample_rate`, weights scaled up beyond it) and
    a ``probe`` of PROBE_ROWS rows drawn in proportion to w, whose first row is the first candidate
    and on which :func:`~daskclust.seeding.passes.pruning_test` decides how the searches go: ball
    trees where the triangle inequality prunes, matrix products otherwise. The rounds run on the
    driver over the sample (:func:`~daskclust.seeding.rounds.oversample`), each candidate weighted
    by the sample's rows nearest to it (exact counts when the sample is every row), and the
    weighted candidates are reduced to C centres by k-means on the driver
    (:func:`~daskclust.seeding.reduction.reduce_candidates`: weighted greedy k-means++, then
    weighted Lloyd, best of a few runs where C is small). The second pass gives every row its
    nearest seed centre. Every distance is counted, the driver's (index builds, the reduction)
    included.
    """
    dense, n_dist = pruning_test(probe["X"], seed)
    first = probe["X"][np.argmin(probe["key"])]  # a row drawn in proportion to w
    cands = oversample(merge_rows(*sample), first, n_clusters, seed=seed, oversampling_factor=oversampling_factor,
                       init_rounds=init_rounds, dense=bool(dense))
    n_dist += cands.n_dist
    reduced = reduce_candidates(cands.points, cands.mass, n_clusters, seed, bool(dense))
    if reduced is None:  # fewer distinct candidates than clusters: exact assignment instead
        centres, n = _complete(engine, cands.points, n_clusters, seed)
        return assign(engine, centres, seed, n_dist + n)
    return assign(engine, reduced.centres, seed, n_dist + reduced.n_dist)


def _distinct(rows: np.ndarray) -> np.ndarray:
    """The distinct values among ``rows``, in the order of their first occurrence."""
    _, first = np.unique(rows, axis=0, return_index=True)
    return rows[np.sort(first)]


def _fill(rows: np.ndarray, n_clusters: int) -> np.ndarray:
    """``n_clusters`` centres: the distinct values among ``rows``, repeated cyclically when
    there are fewer (the data have fewer distinct points than clusters)."""
    distinct = _distinct(rows)
    return distinct[np.arange(n_clusters) % len(distinct)]


def _complete(engine, cands: np.ndarray, n_clusters: int, seed: int) -> tuple[np.ndarray, int]:
    """``n_clusters`` centres from ``cands``, distinct as far as the data allow, and the distances
    evaluated finding them.

    Too few distinct candidates (nearly all rows identical, N close to C) are topped
    up with rows drawn in proportion to w d^2 to them, so rows equal to a candidate
    are never drawn; draws may repeat a value, so this goes on (two passes a round,
    made only then) until C are distinct or every row equals a candidate, when
    :func:`_fill` repeats them.
    """
    D = engine.data.n_features
    cands = _distinct(cands)
    step = 99
    n_dist = 0
    while len(cands) < n_clusters:
        dense, n_test = pruning_test(cands, seed)
        index = NearestIndex(cands, dense=dense)
        out = engine.map_reduce(NearestUpdateOp(index, reset=True))
        n_dist += n_test + index.n_build + int(out["n_dist"][0])
        extra = engine.map_reduce(DrawOp(seed, step, n_clusters - len(cands), D, by_distance=True))["X"]
        if len(extra) == 0:
            break
        cands = _distinct(np.concatenate([cands, extra]))
        step += 1
    return _fill(cands, n_clusters), n_dist


def afkmc2(engine, n_clusters: int, *, seed: int, chain_length: int = 5, **_):
    """AFK-MC2 (Bachem et al. 2016), weighted, in two passes plus chains on the driver.

    Pass 1 computes d(y, c_1)^2 and the per-chunk masses of the proposal
    q(y) = w d(y, c_1)^2 / (2 sum w d^2) + w / (2 sum w); the driver splits the
    m (C - 1) draws among chunks (multinomial); pass 2 draws them in each chunk;
    the chains (``afkmc2_chains``) then run on the driver over the draws.
    """
    D = engine.data.n_features
    first = _draw_first(engine, seed)
    mass = engine.map_reduce(ProposalMassOp(first, engine.data.n_chunks))
    A, B = mass["A"].sum(), mass["B"].sum()
    p = 0.5 * (mass["A"] / A if A > 0 else 0.0) + 0.5 * mass["B"] / B
    n_draws = max(1, (n_clusters - 1) * chain_length)
    rng = np.random.default_rng([seed, STREAM_AFKMC2_SPLIT])
    counts = rng.multinomial(n_draws, p / p.sum())
    draws = engine.map_reduce(ProposalDrawOp(seed, counts, max(A, 1e-300), B, D))
    order = rng.permutation(len(draws["row"]))
    key = stream_key(seed, STREAM_AFKMC2_CHAINS)
    centres = afkmc2_chains(first, np.ascontiguousarray(draws["X"][order]), draws["w"][order],
                            draws["key"][order], n_clusters, chain_length, key)
    n_dist = engine.data.n_samples + n_draws * n_clusters // 2
    # a chain whose draws all coincide with earlier centres repeats one (few distinct rows, N close to C)
    centres, n = _complete(engine, centres, n_clusters, seed)
    return assign(engine, centres, seed, n_dist + n)

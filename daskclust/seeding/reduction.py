"""The k-means|| reduction on the driver: weighted candidates -> C centres.

The candidates of the k-means|| rounds (O(l * rounds) rows, each weighted by the
mass of the rows nearest to it) are a small weighted summary of the data. They
are reduced to C centres by k-means on that summary: ``n_restarts(C)`` runs, each
a weighted greedy k-means++ (scikit-learn's ``_kmeans_plusplus``, with
TRIALS_FACTOR times its 2 + log C trials per step, the one lowering sum w d^2
most kept, that saving counted over the trial's NEIGHBOURHOOD nearest
candidates) followed by a few weighted Lloyd iterations on the candidates; the
run of lowest weighted cost is kept. Every distance evaluated is counted. Where
the triangle inequality prunes (low intrinsic dimension) the greedy steps go
through a ball tree, and so do Lloyd's searches; elsewhere through matrix
products.

What each part buys (Lloyd to convergence from the seeds, QE / scikit-learn's
KMeans(n_init=1), mean of 5 seeds, measured for issue 9): a single greedy
reduction ends where scikit-learn's k-means++ does on average, with its spread,
so on small C it misses by chance (uci_yeast C = 10: 1.045, uci_wine C = 8:
1.082); k-means with restarts on the weighted candidates picks better optima
(0.989, 0.973). Six-fold trials lowered the result by 0.4-1.3 % at C = 150-375
(sipu_s2, s4, a3; uci_letter C = 260).

Issue 26 (KMeans() on the BIRCH grid, N = 409,600, final exact QE, 3 seeds): the
saving of a trial counted over its 8 nearest candidates instead of all of them
(:func:`~daskclust.kernels.seeding.local_gain`) ends 1.8 %, 2.5 %, 0.3 % and 2.2 %
lower at C = 256, 1024, 4096 and 16384 (the local saving prefers the middle of an
uncovered group to a far outlier, whose saving is spread thinly over many
candidates), and a trial costs 8 lookups instead of a descent of the tree (~200
distances at C = 16384): the greedy steps took a fifth of the time there. Lloyd
on the candidates, 3 iterations against 20, changed the final QE by at most
0.01 % at every C (the EM on the data does the rest), where 20 had cost as much as
twelve EM iterations at C = 16384.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..kernels.balltree import build_ball_tree, greedy_kmeanspp_tree, tree_neighbours
from ..kernels.dense import dense_gains, dense_neighbours, dense_take_min
from ..kernels.rng import stream_key
from ..kernels.seeding import draw_trials, local_gains, weighted_means
from ..names import STREAM_REDUCTION
from ..threads import driver_threads, over_blocks
from .passes import SKIP_MARGIN, NearestIndex, search_in_blocks, search_rows

LLOYD_ITERATIONS = 3
"""Most weighted Lloyd iterations per restart (they stop earlier once no candidate changes centre)."""

NEIGHBOURHOOD = 8
"""Candidates over which the reduction's greedy steps count a trial's saving (the trial itself and its
7 nearest; 4 and 16 ended 0.3-1.8 % above 8 on the BIRCH grid at C = 256-16384, see the module)."""

TRIALS_FACTOR = 6
"""The greedy k-means++ steps try TRIALS_FACTOR times scikit-learn's 2 + log C candidates (the
reduction is cheap next to the passes over the data, and more trials lower the final QE)."""

RESTART_BUDGET = 1024
"""Restarts: max(1, RESTART_BUDGET // C), at most MAX_RESTARTS. Where C is small the runs of
k-means land in optima of visibly different quality and the summary is cheap to cluster
again; where C is large the differences average out over the clusters."""
MAX_RESTARTS = 8


def kmeanspp_trials(n_clusters: int) -> int:
    """scikit-learn's candidates per greedy k-means++ step: 2 + floor(ln C)."""
    return 2 + int(math.log(n_clusters))


def n_trials(n_clusters: int) -> int:
    """Candidates per greedy k-means++ step of the reduction: TRIALS_FACTOR (2 + ln C)."""
    return TRIALS_FACTOR * kmeanspp_trials(n_clusters)


def n_restarts(n_clusters: int) -> int:
    """Runs of the reduction: MAX_RESTARTS up to C = 128, one from C = 1024."""
    return max(1, min(MAX_RESTARTS, RESTART_BUDGET // n_clusters))


@dataclass
class Reduction:
    """C centres from weighted candidates: the centres, the weighted cost sum w d^2 of the
    candidates (each to its nearest centre) and the distances evaluated."""

    centres: np.ndarray
    cost: float
    n_dist: int


def reduce_candidates(cands: np.ndarray, mass: np.ndarray, n_clusters: int, seed: int, dense: bool,
                      restarts: int | None = None, lloyd_iterations: int = LLOYD_ITERATIONS,
                      neighbours: int = NEIGHBOURHOOD) -> Reduction | None:
    """k-means on the weighted candidates (see the module); None when fewer than C have mass.
    ``neighbours``: candidates over which a greedy step counts a trial's saving (0: all of them,
    scikit-learn's greedy k-means++).
    """
    keep = mass > 0
    P = np.ascontiguousarray(cands[keep], dtype=np.float64)
    w = np.ascontiguousarray(mass[keep], dtype=np.float64)
    if len(P) < n_clusters:
        return None
    # thousands of small products (a few dozen trials against all candidates per greedy step): one
    # thread takes 0.5 ms for 42 x 74 x 2000, two took 15 ms when other processes kept both cores busy;
    # the searches over all candidates (neighbour table, Lloyd) run in blocks on the driver's threads
    with driver_threads() as pool:
        return _reduce(P, w, n_clusters, seed, dense, restarts, lloyd_iterations, neighbours, pool)


def _reduce(P, w, n_clusters, seed, dense, restarts, lloyd_iterations, neighbours, pool) -> Reduction:
    best = None
    n_dist = 0
    for run in range(restarts or n_restarts(n_clusters)):
        key = stream_key(seed, STREAM_REDUCTION, run)
        chosen, n = greedy_kmeanspp(P, w, n_clusters, n_trials(n_clusters), key, dense, neighbours=neighbours,
                                    pool=pool)
        centres, _, d2, m = weighted_lloyd(P, w, P[chosen], dense, lloyd_iterations, pool=pool)
        n_dist += n + m
        cost = float(w @ d2)
        if best is None or cost < best[0]:
            best = (cost, centres)
    cost, centres = best
    return Reduction(centres, cost, int(n_dist))


NEIGHBOUR_ROWS = 512
"""Points per task of the neighbour table by matrix products (tasks on the driver's threads)."""

EXACT_TAIL = 0.0625
"""With matrix products the last EXACT_TAIL of the greedy steps take the candidate of largest
gain among all of them (see :func:`greedy_kmeanspp`)."""


def greedy_kmeanspp(P: np.ndarray, w: np.ndarray, n_clusters: int, trials: int, key, dense: bool,
                    exact_tail: float = EXACT_TAIL, batch: int = 32, neighbours: int = 0,
                    pool=None) -> tuple[np.ndarray, int]:
    """Weighted greedy k-means++ on the points P (M, D) with weights w; returns (chosen rows, distances).

    Each step draws ``trials`` points in proportion to w d^2 and keeps the one
    lowering sum w d^2 most: over all points (``neighbours=0``, scikit-learn's
    greedy k-means++), or over the trial's ``neighbours`` nearest points only
    (``local_gain``, found once for every point before the steps). Where pruning
    works (not ``dense``) through a ball tree
    (:mod:`daskclust.kernels.balltree`), drawing over the tree's order of the points. With matrix products (``dense``: many dimensions,
    where d^2 varies little, all points of a blob being about sqrt(2 D) sigma
    apart) the draws rarely land in the last uncovered clusters, so the last
    ``exact_tail`` fraction of the steps takes the point of largest saving among
    all: of largest local saving with ``neighbours``; otherwise of largest saving,
    evaluated lazily: savings only shrink as centres are added, so stale ones
    are upper bounds and only the ``batch`` largest are recomputed until the best
    recomputed one beats every stale bound. ``pool``: threads that find the neighbour
    table (through the tree or by matrix products) in blocks of points (None: this thread).
    """
    M = len(P)
    K = min(neighbours, M)
    if not dense:
        order, *tree, n_build = build_ball_tree(P)
        pts = np.ascontiguousarray(P[order])
        nbr, nd2 = np.empty((M, K), dtype=np.int32), np.empty((M, K))
        n_nbr = _tree_neighbour_table(tree, pts, K, nbr, nd2, pool) if K else 0
        chosen, n = greedy_kmeanspp_tree(*tree, pts, w[order], n_clusters, trials, key, nbr, nd2 * nd2)
        return order[chosen], int(n) + int(n_build) + int(n_nbr)
    P = P - P.mean(axis=0)  # distances are expanded below: about the points' mean, not the origin
    pn = np.einsum("md,md->m", P, P)
    if K:
        nbr, nd2 = np.empty((M, K), dtype=np.int32), np.empty((M, K))
        n_nbr = over_blocks(lambda a, b: dense_neighbours(P, K, a, b, pn, nbr, nd2), M, pool, rows=NEIGHBOUR_ROWS)
    chosen = np.empty(n_clusters, dtype=np.int64)
    draw_trials(key, 0, w, chosen[:1])
    d2 = np.full(M, np.inf)
    dense_take_min(P @ P[chosen[0]], pn[chosen[0]], pn, d2)
    d2[chosen[0]] = 0.0
    n_dist = M

    def gains_of(idx):
        G = P[idx] @ P.T
        out = np.empty(len(idx))
        dense_gains(G, pn[idx], pn, d2, w, out)
        return out, G

    def take(k, p, g_row):
        chosen[k] = p
        dense_take_min(g_row, pn[p], pn, d2)
        d2[p] = 0.0  # exactly: the expansion may leave round-off

    n_sampled = max(1, n_clusters - int(exact_tail * n_clusters))
    picks = np.empty(trials, dtype=np.int64)
    local = np.empty(trials)
    for k in range(1, n_sampled):
        mass = w * d2
        if mass.sum() <= 0:  # every point coincides with a centre
            chosen[k] = np.setdiff1d(np.arange(M), chosen[:k])[0]
            continue
        draw_trials(key, 1 + (k - 1) * trials, mass, picks)
        if K:
            local_gains(picks, nbr, nd2, w, d2, local)
            best = picks[int(np.argmax(local))]
            take(k, best, P @ P[best])
            n_dist += trials * K + M
        else:
            gains, G = gains_of(picks)
            best = int(np.argmax(gains))
            take(k, picks[best], G[best])
            n_dist += trials * M
    if K:
        n_dist += n_nbr
    if n_sampled == n_clusters:
        return chosen, n_dist
    if K:
        return _local_tail(P, w, chosen, n_sampled, nbr, nd2, d2, take, n_dist)
    stale = np.concatenate([gains_of(np.arange(s, min(s + 1024, M)))[0] for s in range(0, M, 1024)])
    n_dist += M * M
    taken = np.zeros(M, dtype=bool)
    taken[chosen[:n_sampled]] = True
    stale[taken] = -np.inf
    for k in range(n_sampled, n_clusters):
        while True:
            top = np.argpartition(stale, -batch)[-batch:] if M > batch else np.arange(M)
            gains, G = gains_of(top)
            n_dist += len(top) * M
            gains[taken[top]] = -np.inf
            stale[top] = gains
            best = int(np.argmax(gains))
            stale[top[best]] = -np.inf
            beaten = stale.max() <= gains[best]
            stale[top[best]] = gains[best]
            if beaten:
                break
        stale[top[best]] = -np.inf
        taken[top[best]] = True
        take(k, top[best], G[best])
    return chosen, n_dist


def _tree_neighbour_table(tree, pts, K, nbr, nd2, pool, ids=None) -> int:
    """Each tree point's K nearest points (:func:`tree_neighbours`: itself first, rows and entries by
    ``ids``, the tree positions when None), by :func:`~daskclust.threads.over_blocks` on ``pool``;
    returns the distances evaluated."""
    ids = np.arange(len(pts)) if ids is None else ids
    return over_blocks(lambda a, b: tree_neighbours(*tree, pts, ids, K, a, b, nbr, nd2), len(pts), pool)


def _local_tail(P, w, chosen, n_sampled, nbr, nd2, d2, take, n_dist):
    """The last greedy steps with matrix products and neighbourhoods: each takes the point of largest
    local saving among all points not yet chosen (M K lookups a step)."""
    M, K = nbr.shape
    taken = np.zeros(M, dtype=bool)
    taken[chosen[:n_sampled]] = True
    everyone = np.arange(M)
    gains = np.empty(M)
    for k in range(n_sampled, len(chosen)):
        local_gains(everyone, nbr, nd2, w, d2, gains)
        gains[taken] = -np.inf
        best = int(np.argmax(gains))
        taken[best] = True
        take(k, best, P @ P[best])
        n_dist += M * K + M
    return chosen, n_dist


def weighted_lloyd(P: np.ndarray, w: np.ndarray, centres: np.ndarray, dense: bool,
                   max_iter: int, pool=None) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """Lloyd's iterations on weighted points from ``centres``; returns (centres, labels, d2, distances),
    labels and d2 those of the returned centres (each point's nearest centre).

    After the first search each point's search starts from its distance to its last centre's new
    position: the ball tree then skips every node farther than that, and a point provably still
    nearest to that centre is not searched (:func:`search_unsettled`). ``pool``: threads that search
    blocks of points (None: this thread).
    """
    centres = np.array(centres, dtype=np.float64)
    labels = np.full(len(P), -1, dtype=np.int32)
    n_dist = 0
    for it in range(max_iter + 1):
        if it == 0:
            d2 = np.full(len(P), np.inf)
            new = np.zeros(len(P), dtype=np.int32)
        else:
            d2 = np.einsum("md,md->m", P - centres[labels], P - centres[labels])
            new = labels.copy()
            n_dist += len(P)
        index = NearestIndex(centres, dense=dense)
        if it == 0 or dense:
            n_dist += index.n_build + search_in_blocks(index, P, d2, new, pool)
        else:
            n_dist += index.n_build + search_unsettled(index, P, d2, new, pool)
        if np.array_equal(new, labels) or it == max_iter:
            return centres, new, d2, n_dist
        labels = new
        if weighted_means(P, w, labels, centres) == 0:
            return centres, labels, d2, n_dist
    raise AssertionError("unreachable")


def search_unsettled(index: NearestIndex, P: np.ndarray, d2: np.ndarray, labels: np.ndarray, pool=None) -> int:
    """:func:`~daskclust.seeding.passes.search_in_blocks` of the points whose centre ``labels`` (at squared
    distance ``d2``, IN/OUT both) may not be their nearest one in ``index`` (a ball tree); returns the
    distances evaluated.

    A point x of centre c with ||x - c|| < ||c - c'|| / 2, c' the centre nearest to c, has no nearer
    centre (Elkan 2003, Lemma 1: ||x - c''|| >= ||c - c''|| - ||x - c|| > ||x - c|| for every other c'').
    So each centre's nearest other centre is found first (C queries of the tree), and only the points
    with d2 >= ||c - c'||^2 / 4 (1 - SKIP_MARGIN) are searched: the labels are those of a search of
    every point.
    """
    n_centres = len(index.points)
    if n_centres < 2:
        return 0
    nbr, gap = np.empty((n_centres, 2), dtype=np.int32), np.empty((n_centres, 2))
    n_dist = _tree_neighbour_table(index.tree, index.points, 2, nbr, gap, pool, ids=index.ids)
    rows = np.flatnonzero(d2 >= 0.25 * (1.0 - SKIP_MARGIN) * gap[labels, 1] ** 2)
    return n_dist + search_rows(index, P, rows, d2, labels, pool)

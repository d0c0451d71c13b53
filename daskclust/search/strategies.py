"""The four search strategies (driver side)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..kernels.estep import cluster_id_dtype
from .neighbours import estimated_neighbours, exact_neighbours
from .pairs import PairStack
from .payloads import FullPayload, NeighbourhoodAcc, NeighbourhoodPayload, SampledPayload


@dataclass(frozen=True)
class SearchConfig:
    n_clusters: int
    n_truncated: int
    n_neighbors: int = 5
    n_explore: int = 1
    n_samples: int = 5
    row_length: int = 32
    metric: bool = True
    """The family's cost is a squared Euclidean distance (:attr:`daskclust.models.Family.metric`):
    the estimated search may then bound pairs by the triangle inequality; otherwise it records its
    pairs without a bound (thresholds inf), from every ``PAIR_STRIDE``-th row and, with C' > 1, not
    from the exploration draws (:meth:`EstimatedSearch.explored_pairs`)."""
    n_rows: int = 0
    """Rows the E-steps see (0: not known): the Euclidean families' estimated search records pairs
    outside G_c from fewer of them when there are many per cluster (:meth:`EstimatedSearch.pair_stride`)."""


class Search:
    """Base: initial K(n) from each row's seed centre and the centres nearest to it.

    ``n_distances`` counts the centre-to-centre distances the strategy evaluates
    on the driver (exact neighbours of the seeds, recomputed neighbourhoods).
    """

    STATE: tuple[str, ...] = ("init_sets",)
    """Attributes that are the strategy's state between iterations (saved in checkpoints)."""
    exact = False
    """Whether every row's E-step evaluates every cluster (its best C' are then the exact ones)."""

    def __init__(self, config: SearchConfig):
        self.config = config
        self.n_distances = 0

    def state(self) -> dict[str, np.ndarray]:
        return {name: getattr(self, name) for name in self.STATE}

    CLUSTER_TABLES = ("init_sets", "neighbours", "row_idx")
    """State tables of cluster ids, one row per cluster (-1 = none), that the kernels index with."""

    def restore(self, state: dict[str, np.ndarray]) -> None:
        """Take the state saved by :meth:`state` (a checkpoint's), after checking it (ValueError: a table of
        the wrong shape, type or range would make the kernels read past the parameters' ends)."""
        problem = self.state_problem(state)
        if problem:
            raise ValueError(f"its search state is damaged: {problem}")
        for name in self.STATE:
            setattr(self, name, state[name])
        self.init_sets = self.init_sets.astype(cluster_id_dtype(self.config.n_clusters), copy=False)  # older: int32

    def state_problem(self, state: dict[str, np.ndarray]) -> str | None:
        """Why ``state`` is not a state of this strategy for C clusters, or None."""
        C = self.config.n_clusters
        for name in self.STATE:
            value = state.get(name)
            if not isinstance(value, np.ndarray) or value.dtype.kind not in "iuf":
                return f"{name} is missing or not numeric"
            if value.dtype.kind == "f" and np.any(np.isnan(value)):
                return f"{name} holds NaN"
            if name in self.CLUSTER_TABLES and (value.dtype.kind not in "iu" or value.ndim != 2 or value.shape[0] != C
                                                or (value.size and (value.min() < -1 or value.max() >= C))):
                return f"{name} is not a table of cluster ids for {C} clusters"
        if "row_len" in self.STATE:
            row_len, row_idx, row_cdf = state["row_len"], state["row_idx"], state["row_cdf"]
            if row_len.shape != (C,) or row_len.dtype.kind not in "iu" or row_cdf.shape != row_idx.shape \
                    or np.any(row_len < 0) or np.any(row_len > row_idx.shape[1]):
                return "the sampling rows' lengths do not fit their tables"
        if "thresholds" in self.STATE and state["thresholds"].shape != (C,):
            return f"the thresholds are not one per cluster ({C})"
        return None

    def start_width(self) -> int:
        """Nearest centres per seed that :meth:`start` needs (itself included)."""
        return max(self.config.n_truncated, min(self.config.n_neighbors, self.config.n_clusters))

    def counted_neighbours(self, centres: np.ndarray, width: int) -> tuple[np.ndarray, np.ndarray]:
        """:func:`exact_neighbours`, counted in ``n_distances``."""
        idx, dist, n_evaluated = exact_neighbours(centres, width)
        self.n_distances += n_evaluated
        return idx, dist

    def start(self, centres: np.ndarray, sigma2: float) -> None:
        """Called once with the seeds: exact neighbours give K(n) its first C' clusters."""
        self.exact_idx, self.exact_dist = self.counted_neighbours(centres, self.start_width())
        self.init_sets = np.full((len(centres), self.config.n_truncated), -1, dtype=cluster_id_dtype(len(centres)))
        width = min(self.config.n_truncated, self.exact_idx.shape[1])
        self.init_sets[:, :width] = self.exact_idx[:, :width]

    def payload(self):
        """What the workers need for the next E-step (:mod:`daskclust.search.payloads`)."""
        return FullPayload(self.init_sets)

    def update(self, acc, centres: np.ndarray, sigma2: float) -> None:
        """Digest the E-step's accumulator of this strategy's payload (None when it has none);
        ``centres`` are those of the next E-step."""


class FullSearch(Search):
    """Every cluster for every point: the exact E-step (Lloyd / EM / k-means-C').

    K(n) only serves to count changed assignments, so it starts at the seed centre alone.
    """

    exact = True

    def start(self, centres, sigma2):
        width = min(self.config.n_truncated, self.config.n_clusters)
        if width >= self.config.n_clusters:  # exact EM keeps no K(n)
            width = 1
        self.init_sets = np.full((len(centres), width), -1, dtype=cluster_id_dtype(len(centres)))
        self.init_sets[:, 0] = np.arange(len(centres))


class ExhaustiveSearch(Search):
    """Forster & Lücke 2018 Alg. 1: G_c = c and its G - 1 nearest centres, from the current centres."""

    STATE = ("init_sets", "neighbours")

    def start(self, centres, sigma2):
        super().start(centres, sigma2)
        self.neighbours = self.exact_idx[:, : self.config.n_neighbors].copy()

    def payload(self):
        return NeighbourhoodPayload(self.init_sets, self.config.n_explore, self.neighbours)

    def update(self, acc, centres, sigma2):
        self.neighbours = self.counted_neighbours(centres, self.config.n_neighbors)[0]


class EstimatedSearch(Search):
    """Forster & Lücke 2018 Alg. 2: G_c from the mean distance of c~ to the points closest to c (Eq. 8);
    for the families whose cost is not a distance, the mean cost (negative log-joint) instead.

    Starts from the exact neighbours of the seeds (computed once). Pairs
    outside the current G_c are only recorded when their centres are closer
    than the largest estimate in G_c, the only ones that could enter it, so
    the statistics stay O(C G) per iteration instead of growing with the
    exploratory draws; in the merge tree each cluster keeps its 2 G pairs of
    closest centres (:class:`PairStats`).
    """

    STATE = ("init_sets", "neighbours", "thresholds", "updates")

    PAIR_STRIDE = 16
    """For the non-Euclidean families (no triangle-inequality filter), pairs outside G_c come from
    every 16th row, in turn. Recording every row's pairs made an iteration 2.5-3.5x as long as the
    isotropic family's on BIRCH (C = 256 to 4096, N = 409,600, hashing ~14 pairs a row); with 16 it
    is 1.1-1.7x, and on BIRCH C = 1024 (3 seeds) the final free energy of the spherical and diagonal
    fits is the same to 1e-5 with a stride of 1, 8 or 16."""

    PAIR_ROWS = 64
    """The Euclidean families record pairs outside G_c from every k-th row, k = N // (PAIR_ROWS C) within
    [1, PAIR_STRIDE]: each cluster's from PAIR_ROWS of its rows or more on average, every row where
    clusters have fewer than 2 PAIR_ROWS. KMeans() on 2 million of the ``outofcore`` suite's 32-D rows
    (C = 1000, 2 seeds): the same final inertia to 1e-5 with k = 1, 4 and 16, its E-step kernel 150
    against 227 ns a row with k = 16 and 1 (the recorded pairs' bounds, centre distances and sort were a
    third of it). From random seeds, where the neighbourhoods must follow centres that move far, fewer
    recorded pairs slow the descent per iteration: after 30 iterations on those 2 million rows (1 seed)
    k = 16 ended 0.9 % above k = 1 in half the time (165 against 324 s; k = 1 after 15 iterations, 117 s:
    1.7 % above), and on the whole 50-million-row store 0.6 % above after 4 iterations of 5.3-5.8 s
    against 7.5-12.7 s; on the BIRCH grid (N = 409,600) k = 16 ended 0.5 % lower at C = 1024 (25
    recording rows per cluster, 3 seeds) and 1.7 % higher at C = 16384 (1.6 of 25 rows, 2 seeds)."""

    def pair_stride(self) -> int:
        """Every how many rows record the pairs outside G_c: :data:`PAIR_STRIDE` for the non-Euclidean
        families, N // (PAIR_ROWS C) within [1, PAIR_STRIDE] for the Euclidean ones (see there)."""
        if not self.config.metric:
            return self.PAIR_STRIDE
        return max(1, min(self.PAIR_STRIDE, self.config.n_rows // (self.PAIR_ROWS * self.config.n_clusters)))

    def explored_pairs(self) -> bool:
        """Whether the exploration draws record pairs outside G_c. The non-Euclidean families with
        C' > 1 take their pairs from K(n)'s other neighbourhoods only: a draw outside G_c is a random,
        mostly far component, and its pair a distinct entry in every table of the reduction (a third
        of a chunk's pairs at C = 16384 on BIRCH, two thirds at C = 256). Without them an iteration
        of the spherical, diag and full families took 8-17 % less time on BIRCH at C = 256 and
        16384 (two interleaved rounds). Held-out log-likelihood of GaussianMixture(500) on uci_letter
        (the mixtures suite's split), paired by seed: diag +0.121 on average (seeds 0-2), spherical
        -0.004 (0-2), full -0.021 (0-5, standard error 0.026). With C' = 1 (k-means) K(n) has no
        other neighbourhood, and the Euclidean families drop far pairs by their threshold already."""
        return self.config.metric or self.config.n_truncated == 1

    def start(self, centres, sigma2):
        super().start(centres, sigma2)
        self.updates = np.zeros(1, dtype=np.int64)
        G = min(self.config.n_neighbors, self.config.n_clusters)
        self.neighbours = self.exact_idx[:, :G].copy()
        # expected point-to-centre distance of the G-th neighbour, sqrt(d_cc~^2 + D sigma^2)
        D = centres.shape[1]
        self.thresholds = np.sqrt(self.exact_dist[:, G - 1] ** 2 + D * sigma2)
        if not self.config.metric:
            self.thresholds[:] = np.inf

    def payload(self):
        stride = self.pair_stride()
        return NeighbourhoodPayload(self.init_sets, self.config.n_explore, self.neighbours, self.thresholds,
                                    pairs_per_row=2 * self.neighbours.shape[1], pair_stride=stride,
                                    pair_phase=int(self.updates[0]) % stride, explored_pairs=self.explored_pairs())

    def update(self, acc: NeighbourhoodAcc, centres, sigma2):
        self.neighbours, self.thresholds = estimated_neighbours(self.neighbours, acc.tsum, acc.tcnt,
                                                                acc.pairs.pruned())
        if not self.config.metric:  # a mean cost is no bound on the distance of two means
            self.thresholds[:] = np.inf
        self.updates = self.updates + 1


class SampledSearch(Search):
    """D-GMM (Exarchakis et al. 2022 Alg. 1): candidates drawn from a data-driven similarity matrix S.

    S_ij accumulates, over points with i and j among their P = max(C', 2) closest
    evaluated clusters, w exp(-(d_i + d_j - 2 d_min) / 2 sigma^2): Eq. 12 with
    squared distances scaled by 2 sigma^2 and shifted by the point's best
    distance, so it cannot underflow at realistic scales (raw exp(-(d_i + d_j))
    is 0 in float64 once distances exceed ~370). Each row keeps its
    ``row_length`` largest entries; rows no point touched keep their previous
    entries. Initially rows hold the exact nearest centres, equally weighted.
    In the merge tree each cluster keeps its ``row_length`` pairs of closest
    centres (:class:`PairStats`), so a row picks its entries among those.
    """

    STATE = ("init_sets", "row_idx", "row_cdf", "row_len")

    def start_width(self):
        return max(super().start_width(), min(self.config.row_length + 1, self.config.n_clusters))

    def start(self, centres, sigma2):
        super().start(centres, sigma2)
        C = self.config.n_clusters
        L = self.config.row_length
        nn = self.exact_idx[:, 1: min(L + 1, C)]
        self.row_idx = np.zeros((C, L), dtype=np.int32)
        self.row_cdf = np.zeros((C, L))
        self.row_len = np.full(C, nn.shape[1], dtype=np.int32)
        self.row_idx[:, : nn.shape[1]] = nn
        self.row_cdf[:, : nn.shape[1]] = np.arange(1, nn.shape[1] + 1)

    def payload(self):
        return SampledPayload(self.init_sets, self.config.n_explore, self.row_idx, self.row_cdf, self.row_len,
                              self.config.n_samples, pairs_per_row=self.row_idx.shape[1])

    def update(self, acc: PairStack, centres, sigma2):
        pairs = acc.pruned()
        keys, vals = pairs.keys, pairs.sums
        if len(keys) == 0:
            return
        C, L = self.row_idx.shape
        i, j = keys // C, keys % C
        rows = np.concatenate([i, j])
        cols = np.concatenate([j, i])
        vals = np.concatenate([vals, vals])
        order = np.lexsort((cols, -vals, rows))
        rows, cols, vals = rows[order], cols[order], vals[order]
        starts = np.searchsorted(rows, np.arange(C))
        rank = np.arange(len(rows)) - starts[rows]
        keep = rank < L
        touched = np.unique(rows)
        self.row_len[touched] = 0
        self.row_idx[touched] = 0
        self.row_cdf[touched] = 0.0
        r, k, v = rows[keep], rank[keep], vals[keep]
        self.row_idx[r, k] = cols[keep]
        self.row_cdf[r, k] = v
        np.add.at(self.row_len, r, 1)
        self.row_cdf[touched] = np.cumsum(self.row_cdf[touched], axis=1)

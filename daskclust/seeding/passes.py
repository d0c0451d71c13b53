"""Chunk operations shared by the seedings.

Per-chunk state written here: ``mind2`` (squared distance to the nearest
candidate so far, for draws in proportion to w d^2) and, at the end of every
seeding, ``seed_label`` (the nearest seed centre, of
:func:`~daskclust.kernels.estep.cluster_id_dtype`), from which the truncated
E-steps start.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np

from ..engine.ops import Chunk, add_arrays
from ..kernels.balltree import build_ball_tree, tree_nearest
from ..kernels.dense import dense_nearest
from ..kernels.estep import cluster_id_dtype
from ..kernels.rng import stream_key
from ..kernels.seeding import exponential_keys, weighted_sum
from ..kernels.validation import max_abs
from ..names import (
    STATE_AFKMC2_D2,
    STATE_MIND2,
    STATE_SEED_LABEL,
    STREAM_DRAW,
    STREAM_PROPOSAL,
    STREAM_PRUNING_PROBE,
    STREAM_SAMPLE,
)
from ..threads import over_blocks


def pruning_test(points: np.ndarray, seed: int = 0, probe: int = 256, threshold: float = 0.3) -> tuple[bool, int]:
    """(whether a ball tree over ``points`` would evaluate more than ``threshold`` of them per
    query, distances the measurement evaluated): half the points indexed, up to ``probe`` of the
    others as queries."""
    if len(points) < 64:
        return False, 0
    rng = np.random.default_rng([seed, STREAM_PRUNING_PROBE])
    perm = rng.permutation(len(points))
    half = len(points) // 2
    indexed, queries = points[perm[:half]], points[perm[half:half + probe]]
    index = NearestIndex(indexed)
    n_eval = index.search(np.ascontiguousarray(queries, dtype=np.float64), np.full(len(queries), np.inf),
                          np.zeros(len(queries), dtype=np.int32))
    return n_eval > threshold * len(queries) * half, int(n_eval) + index.n_build


class NearestIndex:
    """Exact-nearest search over a set of points, as sent to the workers.

    A ball tree (:mod:`daskclust.kernels.balltree`) where the triangle
    inequality prunes (low intrinsic dimension), otherwise blocks of matrix
    products (:mod:`daskclust.kernels.dense`). Points are numbered from ``offset``.
    ``n_build`` is the number of distances building it took (on the driver).
    """

    def __init__(self, points: np.ndarray, offset: int = 0, *, dense: bool = False):
        self.offset = offset
        self.dense = dense
        points = np.ascontiguousarray(points, dtype=np.float64)
        if dense:
            self.points = points
            self.n_build = 0
        else:
            order, *self.tree, n_build = build_ball_tree(points)
            self.points = np.ascontiguousarray(points[order])
            self.ids = offset + order
            self.n_build = int(n_build)

    @classmethod
    def probed(cls, points: np.ndarray) -> NearestIndex:
        """An index over ``points`` of the kind :func:`pruning_test` finds faster (ball or dense)."""
        return cls(points, dense=pruning_test(points)[0])

    def nearest(self, X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(index (n,) int32, squared distance (n,)) of the nearest indexed point of each row of X."""
        label = np.zeros(X.shape[0], dtype=np.int32)
        mind2 = np.full(X.shape[0], np.inf)
        self.search(X, mind2, label)
        return label, mind2

    def search(self, X: np.ndarray, mind2: np.ndarray, label: np.ndarray) -> int:
        """Lower ``mind2`` / ``label`` (IN/OUT) of each row of X; returns distances evaluated."""
        if self.dense:
            return dense_nearest(X, self.points, self.offset, mind2, label)
        return tree_nearest(X, *self.tree, self.points, self.ids, mind2, label)


def search_in_blocks(index: NearestIndex, X: np.ndarray, mind2: np.ndarray, label: np.ndarray,
                     pool: ThreadPoolExecutor | None = None) -> int:
    """:meth:`NearestIndex.search` of the rows of X by :func:`over_blocks`. IN/OUT: mind2, label. Returns
    the distances evaluated."""
    return over_blocks(lambda a, b: index.search(X[a:b], mind2[a:b], label[a:b]), len(X), pool)


SKIP_MARGIN = 1e-9
"""Relative margin of the searches that skip rows by the triangle inequality (the k-means|| rounds'
and the reduction's Lloyd): far above the round-off of a squared distance, so a skipped row could
not have moved."""


def search_rows(index: NearestIndex, X: np.ndarray, rows: np.ndarray, mind2: np.ndarray, label: np.ndarray,
                pool: ThreadPoolExecutor | None = None) -> int:
    """:func:`search_in_blocks` of the rows ``rows`` of X only (IN/OUT: their mind2, label). Returns the
    distances evaluated."""
    near, found = mind2[rows], label[rows]
    n_dist = search_in_blocks(index, np.ascontiguousarray(X[rows]), near, found, pool)
    mind2[rows], label[rows] = near, found
    return n_dist


def chunk_weights(chunk: Chunk) -> np.ndarray:
    """The chunk's weights, ones when unweighted."""
    return chunk.w if chunk.w.shape[0] else np.ones(chunk.n_rows)


def uniform_sample(chunk: Chunk, rate: float, seed: int) -> dict[str, np.ndarray]:
    """The chunk's rows kept independently with probability ``rate`` (every row at ``rate=1``), as sampled
    rows in the data's dtype, each weighted w / rate (an unbiased estimate of any sum over the chunk)."""
    if rate >= 1.0:
        local = np.arange(chunk.n_rows)
    else:
        keys = exponential_keys(stream_key(seed, STREAM_SAMPLE, chunk.index), np.ones(chunk.n_rows))
        local = np.flatnonzero(keys < -np.log1p(-rate))  # P(-log u < t) = 1 - e^-t = rate
    return {
        "row": chunk.source_rows(local),
        "X": np.ascontiguousarray(chunk.X[local]),
        "w": chunk_weights(chunk)[local].astype(np.float64) / min(rate, 1.0),
    }


def empty_rows(n_features: int, dtype=np.float64) -> dict[str, np.ndarray]:
    """An empty set of sampled rows: global row ids, values, weights, sort keys."""
    return {
        "row": np.empty(0, dtype=np.int64),
        "X": np.empty((0, n_features), dtype=dtype),
        "w": np.empty(0),
        "key": np.empty(0),
    }


def rows_of(chunk: Chunk, local: np.ndarray, keys: np.ndarray | None = None) -> dict[str, np.ndarray]:
    return {
        "row": chunk.source_rows(local),
        "X": chunk.X[local].astype(np.float64),
        "w": chunk_weights(chunk)[local].astype(np.float64),
        "key": np.zeros(len(local)) if keys is None else keys,
    }


def merge_rows(*parts: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Concatenate sets of sampled rows and sort by global row id: independent of the merge tree."""
    merged = {name: np.concatenate([part[name] for part in parts]) for name in parts[0]}
    order = np.argsort(merged["row"], kind="stable")
    return {name: value[order] for name, value in merged.items()}


@dataclass
class DrawOp:
    """Draw ``k`` rows without replacement with probability proportional to a mass.

    mass = w (``by_distance=False``) or w * mind2 (``by_distance=True``).
    Uses exponential keys, so the k smallest keys over all chunks are the
    sample; each chunk sends at most k rows.
    """

    seed: int
    step: int
    k: int
    n_features: int
    by_distance: bool = False

    def new_acc(self):
        return empty_rows(self.n_features)

    def run(self, chunk: Chunk, acc) -> None:
        mass = chunk_weights(chunk)
        if self.by_distance:
            mass = mass * chunk.state[STATE_MIND2]
        keys = exponential_keys(stream_key(self.seed, STREAM_DRAW, self.step, chunk.index), mass)
        local = np.flatnonzero(keys <= self.threshold(acc))  # the others cannot be among the k smallest
        if len(local) > self.k:
            local = local[np.argpartition(keys[local], self.k - 1)[: self.k]]
        mine = rows_of(chunk, local, keys[local])
        acc.update(self.merge(dict(acc), mine))

    def threshold(self, acc) -> float:
        """The largest key a row can have and still be drawn: once ``acc`` holds k rows, its largest
        key (a row above it can never be among the k smallest); before, the largest finite float (a row
        of zero mass, key +inf, is never drawn)."""
        kept = acc["key"]
        if len(kept) < self.k:
            return np.finfo(np.float64).max
        return float(kept.max()) if len(kept) else -np.inf

    def merge(self, a, b):
        merged = merge_rows(a, b)
        if len(merged["key"]) > self.k:
            keep = np.sort(np.argsort(merged["key"], kind="stable")[: self.k])
            merged = {name: value[keep] for name, value in merged.items()}
        return merged


@dataclass
class FirstPassOp:
    """The first pass of every seeding, which also validates every chunk: the total weight
    (row count when unweighted) of each chunk, the largest |x| of the data (checked against
    underflow on the driver), the data's weighted mean and variance per feature (``moments``:
    weight, mean, sum of squared deviations, merged by Chan et al.'s pairwise formula) and a
    probe of rows drawn with ``draw``. With ``sample_rate`` > 0 each chunk also sends the uniform
    sample of its rows (:func:`uniform_sample`) on which the driver runs the k-means|| rounds
    (``sample``: a list of parts, merged once on the driver by :func:`merge_rows`)."""

    n_chunks: int
    draw: DrawOp
    sample_rate: float = 0.0

    def new_acc(self):
        D = self.draw.n_features
        return {"W": np.zeros(self.n_chunks), "max_abs": np.zeros(1), "probe": self.draw.new_acc(),
                "moments": (0.0, np.zeros(D), np.zeros(D)), "sample": []}

    def run(self, chunk: Chunk, acc) -> None:
        acc["W"][chunk.index] += weighted_sum(chunk.w, np.ones(chunk.n_rows))
        acc["max_abs"][0] = max(acc["max_abs"][0], max_abs(chunk.X))
        acc["moments"] = merge_moments(acc["moments"], chunk_moments(chunk))
        self.draw.run(chunk, acc["probe"])
        if self.sample_rate > 0:
            acc["sample"].append(uniform_sample(chunk, self.sample_rate, self.draw.seed))

    def merge(self, a, b):
        a["W"] += b["W"]
        a["max_abs"] = np.maximum(a["max_abs"], b["max_abs"])
        a["moments"] = merge_moments(a["moments"], b["moments"])
        a["probe"] = self.draw.merge(a["probe"], b["probe"])
        a["sample"] = a["sample"] + b["sample"]
        return a


@dataclass
class MomentsOp:
    """The data's weighted mean and variance per feature (``moments`` as :class:`FirstPassOp`'s), in
    one pass when no seeding made the first (a resumed fit)."""

    n_features: int

    def new_acc(self):
        return {"moments": (0.0, np.zeros(self.n_features), np.zeros(self.n_features))}

    def run(self, chunk: Chunk, acc) -> None:
        acc["moments"] = merge_moments(acc["moments"], chunk_moments(chunk))

    def merge(self, a, b):
        a["moments"] = merge_moments(a["moments"], b["moments"])
        return a


def data_variance(engine) -> float:
    """sum_j Var(x_j) / D, the data's variance per feature averaged over the features (weighted)."""
    W, _, ss = engine.map_reduce(MomentsOp(engine.data.n_features))["moments"]
    return float(ss.mean() / W)


def chunk_moments(chunk: Chunk) -> tuple[float, np.ndarray, np.ndarray]:
    """(W, mean, sum_n w_n (x_n - mean)^2) of a chunk's rows, per feature, in float64."""
    w = chunk_weights(chunk)
    W = float(w.sum())
    if W <= 0:
        return 0.0, np.zeros(chunk.X.shape[1]), np.zeros(chunk.X.shape[1])
    X = np.asarray(chunk.X, dtype=np.float64)
    mean = (w @ X) / W
    return W, mean, w @ (X - mean) ** 2


def merge_moments(a: tuple, b: tuple) -> tuple[float, np.ndarray, np.ndarray]:
    """Moments of the union of two row sets (Chan, Golub & LeVeque's pairwise update)."""
    wa, ma, sa = a
    wb, mb, sb = b
    if wb <= 0:
        return a
    if wa <= 0:
        return b
    W = wa + wb
    delta = mb - ma
    return W, ma + delta * (wb / W), sa + sb + delta**2 * (wa * wb / W)


@dataclass
class NearestUpdateOp:
    """Lower the state ``mind2`` (squared distance to the nearest candidate so far; +inf on ``reset``)
    with the candidates of ``index`` (a :class:`NearestIndex`), for draws in proportion to w d^2
    (``DrawOp(by_distance=True)``). Returns the distances evaluated."""

    index: NearestIndex
    reset: bool = False

    def new_acc(self):
        return {"n_dist": np.zeros(1)}

    def run(self, chunk: Chunk, acc) -> None:
        if self.reset or STATE_MIND2 not in chunk.state:
            chunk.state[STATE_MIND2] = np.full(chunk.n_rows, np.inf)
        mind2 = chunk.state[STATE_MIND2]
        acc["n_dist"][0] += self.index.search(chunk.X, mind2, np.zeros(chunk.n_rows, dtype=np.int32))

    merge = staticmethod(add_arrays)


def nearest_rows(index: NearestIndex, chunk: Chunk) -> tuple[np.ndarray, np.ndarray, int]:
    """Each row's exact nearest centre of ``index``: (labels int32, squared distances, distances evaluated)."""
    labels = np.zeros(chunk.n_rows, dtype=np.int32)
    d2 = np.full(chunk.n_rows, np.inf)
    n_dist = index.search(chunk.X, d2, labels)
    return labels, d2, n_dist


@dataclass
class AssignOp:
    """Exact nearest seed centre of every row -> state ``seed_label``; returns sum w d^2.

    ``index`` is a :class:`NearestIndex` over the centres.
    """

    index: NearestIndex

    def new_acc(self):
        return {"qe": np.zeros(1), "W": np.zeros(1), "n_dist": np.zeros(1)}

    def run(self, chunk: Chunk, acc) -> None:
        labels, d2, n_dist = nearest_rows(self.index, chunk)
        acc["n_dist"][0] += n_dist
        chunk.state[STATE_SEED_LABEL] = labels.astype(cluster_id_dtype(len(self.index.points)))
        _drop_seeding_state(chunk)
        acc["qe"][0] += weighted_sum(chunk.w, d2)
        acc["W"][0] += weighted_sum(chunk.w, np.ones(chunk.n_rows))

    merge = staticmethod(add_arrays)


@dataclass
class NearestCostOp:
    """sum_n w_n min_c ||y_n - mu_c||^2 exactly (``index``: a :class:`NearestIndex` over the centres),
    the chunks' state untouched, every row searched by the index (the costmodel suite's dense pass)."""

    index: NearestIndex

    def new_acc(self):
        return {"qe": np.zeros(1), "n_dist": np.zeros(1)}

    def run(self, chunk: Chunk, acc) -> None:
        _, d2, n_dist = nearest_rows(self.index, chunk)
        acc["n_dist"][0] += n_dist
        acc["qe"][0] += weighted_sum(chunk.w, d2)

    merge = staticmethod(add_arrays)


def _drop_seeding_state(chunk: Chunk) -> None:
    for name in (STATE_MIND2, STATE_AFKMC2_D2):
        chunk.state.pop(name, None)


@dataclass
class ProposalMassOp:
    """AFK-MC2 proposal, first pass: d(y, c_1)^2 kept as state ``afk_d2``; per-chunk
    sums of w d^2 (``A``) and of w (``B``)."""

    first: np.ndarray
    n_chunks: int

    def new_acc(self):
        return {"A": np.zeros(self.n_chunks), "B": np.zeros(self.n_chunks)}

    def run(self, chunk: Chunk, acc) -> None:
        diff = chunk.X - self.first
        d2 = np.einsum("nd,nd->n", diff, diff)
        chunk.state[STATE_AFKMC2_D2] = d2
        acc["A"][chunk.index] += weighted_sum(chunk.w, d2)
        acc["B"][chunk.index] += weighted_sum(chunk.w, np.ones(chunk.n_rows))

    merge = staticmethod(add_arrays)


@dataclass
class ProposalDrawOp:
    """AFK-MC2 proposal, second pass: chunk k draws ``counts[k]`` rows i.i.d. from
    q(y) = w d(y, c_1)^2 / (2 A) + w / (2 B); each row is returned with its q in ``key``."""

    seed: int
    counts: np.ndarray
    A: float
    B: float
    n_features: int

    def new_acc(self):
        return empty_rows(self.n_features)

    def run(self, chunk: Chunk, acc) -> None:
        count = int(self.counts[chunk.index])
        if count == 0:
            return
        w = chunk_weights(chunk)
        q = 0.5 * w * chunk.state[STATE_AFKMC2_D2] / self.A + 0.5 * w / self.B
        cdf = np.cumsum(q)
        rng = np.random.default_rng([self.seed, STREAM_PROPOSAL, chunk.index])
        local = np.minimum(np.searchsorted(cdf, rng.random(count) * cdf[-1], side="right"), chunk.n_rows - 1)
        acc.update(merge_rows(dict(acc), rows_of(chunk, local, q[local])))

    merge = staticmethod(merge_rows)

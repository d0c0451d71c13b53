"""Chunk operations shared by the seedings.

Per-chunk state written here: ``mind2`` (squared distance to the nearest
candidate / centre so far), ``label`` (its index, int32) and, at the end of
every seeding, ``seed_label`` (the nearest seed centre, int32), from which the
truncated E-steps start.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..engine.ops import Chunk, add_arrays
from ..kernels.balltree import build_ball_tree, tree_nearest
from ..kernels.dense import dense_nearest
from ..kernels.rng import stream_key
from ..kernels.seeding import MORTON_BITS, bernoulli_sample, exponential_keys, morton_keys, uniforms_at, weighted_sum
from ..kernels.validation import max_abs
from ..names import (
    STATE_AFKMC2_D2,
    STATE_LABEL,
    STATE_MIND2,
    STATE_SAMPLE_ROWS,
    STATE_SAMPLE_SCALE,
    STATE_SAMPLE_W,
    STATE_SAMPLE_X,
    STATE_SEED_LABEL,
    STATE_SPATIAL_KEY,
    STREAM_BERNOULLI,
    STREAM_DRAW,
    STREAM_PROPOSAL,
    STREAM_PRUNING_PROBE,
    STREAM_SAMPLE,
)


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


def chunk_weights(chunk: Chunk) -> np.ndarray:
    """The chunk's weights, ones when unweighted."""
    return chunk.w if chunk.w.shape[0] else np.ones(chunk.n_rows)


SAMPLE_STATE = ("kpp_rows", "kpp_X", "kpp_w", "kpp_scale")


def start_sample(chunk: Chunk, rate: float, seed: int) -> None:
    """Restrict the k-means|| rounds of this chunk to the rows drawn with probability ``rate``,
    kept as state with their values, so later rounds need not read the chunk
    (``rate=1`` keeps every row and keeps nothing)."""
    for name in SAMPLE_STATE:
        chunk.state.pop(name, None)
    if rate >= 1.0:
        return
    keys = exponential_keys(stream_key(seed, STREAM_SAMPLE, chunk.index), np.ones(chunk.n_rows))
    rows = np.flatnonzero(keys < -np.log1p(-rate))  # P(-log u < t) = 1 - e^-t = rate
    chunk.state[STATE_SAMPLE_ROWS] = rows
    chunk.state[STATE_SAMPLE_X] = np.ascontiguousarray(chunk.X[rows])
    chunk.state[STATE_SAMPLE_W] = chunk_weights(chunk)[rows]
    chunk.state[STATE_SAMPLE_SCALE] = np.array([1.0 / rate])


def sample_view(chunk: Chunk) -> tuple[np.ndarray, np.ndarray]:
    """The rows the k-means|| rounds see and their weights (scaled by 1 / rate when sampled)."""
    if "kpp_rows" in chunk.state:
        return chunk.state[STATE_SAMPLE_X], chunk.state[STATE_SAMPLE_W] * chunk.state[STATE_SAMPLE_SCALE][0]
    return chunk.X, chunk.w


def view_ids(chunk: Chunk) -> np.ndarray:
    """Each row of the k-means|| view's place in its chunk as the source orders it (the sample's own
    order for a sample), by which its draws are keyed."""
    if STATE_SAMPLE_ROWS in chunk.state or chunk.perm is None:
        return np.arange(len(sample_view(chunk)[0]), dtype=np.int64)
    return chunk.perm.astype(np.int64)


def view_rows(chunk: Chunk, local: np.ndarray) -> dict[str, np.ndarray]:
    """Rows ``local`` of the k-means|| view (sampled rows or the whole chunk), as sampled rows."""
    if "kpp_rows" not in chunk.state:
        return rows_of(chunk, local)
    rows = chunk.state[STATE_SAMPLE_ROWS][local]
    return {
        "row": chunk.source_rows(rows),
        "X": chunk.state[STATE_SAMPLE_X][local].astype(np.float64),
        "w": chunk.state[STATE_SAMPLE_W][local].astype(np.float64),
        "key": np.zeros(len(local)),
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
    probe of rows drawn with ``draw``. With ``sample_rate`` < 1 each chunk also keeps the uniform
    sample of rows the k-means|| rounds will see (:func:`start_sample`), so that they read no rows."""

    n_chunks: int
    draw: DrawOp
    sample_rate: float = 1.0

    def new_acc(self):
        D = self.draw.n_features
        return {"W": np.zeros(self.n_chunks), "max_abs": np.zeros(1), "probe": self.draw.new_acc(),
                "moments": (0.0, np.zeros(D), np.zeros(D))}

    def run(self, chunk: Chunk, acc) -> None:
        acc["W"][chunk.index] += weighted_sum(chunk.w, np.ones(chunk.n_rows))
        acc["max_abs"][0] = max(acc["max_abs"][0], max_abs(chunk.X))
        acc["moments"] = merge_moments(acc["moments"], chunk_moments(chunk))
        self.draw.run(chunk, acc["probe"])
        start_sample(chunk, self.sample_rate, self.draw.seed)

    def merge(self, a, b):
        a["W"] += b["W"]
        a["max_abs"] = np.maximum(a["max_abs"], b["max_abs"])
        a["moments"] = merge_moments(a["moments"], b["moments"])
        a["probe"] = self.draw.merge(a["probe"], b["probe"])
        return a


def spatial_grid(points: np.ndarray, max_dims: int = 3) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(dims, lo, inv_step) of :func:`~daskclust.kernels.seeding.morton_keys`: the (at most ``max_dims``)
    coordinates of widest spread among ``points`` and cells dividing their range, widened by a tenth
    each side, into 2^MORTON_BITS."""
    spread = points.max(0) - points.min(0)
    dims = np.sort(np.argsort(-spread, kind="stable")[:max_dims]).astype(np.int64)
    margin = 0.1 * np.maximum(spread[dims], 1e-300)
    lo = points.min(0)[dims] - margin
    return dims, lo, float(1 << MORTON_BITS) / (spread[dims] + 2 * margin)


@dataclass
class SpatialKeyOp:
    """Each row's Morton key (``morton_keys`` on the grid of :func:`spatial_grid`) as the state
    ``spatial_key``, by which the engine then sorts the rows (``Engine.reorder``): the k-means||
    rounds' searches of consecutive rows then descend the same branches of the candidates' ball
    tree (on the BIRCH grid at C = 16384 a round's search took 0.205 s of CPU instead of 0.32 s)."""

    dims: np.ndarray
    lo: np.ndarray
    inv_step: np.ndarray

    def new_acc(self):
        return {"rows": np.zeros(1)}

    def run(self, chunk: Chunk, acc) -> None:
        keys = np.empty(chunk.n_rows, dtype=np.uint64)
        morton_keys(chunk.X, self.dims, self.lo, self.inv_step, keys)
        chunk.state[STATE_SPATIAL_KEY] = keys
        acc["rows"][0] += chunk.n_rows

    merge = staticmethod(add_arrays)


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


DRAW_MARGIN = 1.0 + 1e-9
"""Rows kept while merging k-means|| draws pass the test with a scale this much larger
than the final one can be: partial sums of phi may round either way of a subset's."""


def oversampled_rows(chunk: Chunk, seed: int, step: int, scale: float) -> dict[str, np.ndarray]:
    """Rows of the k-means|| view that ``BernoulliOp(seed, step, scale)`` would keep, with
    what decides them again for a smaller scale: the draw ``u``, the weight ``wt``
    and ``mind2`` of the test u < scale * wt * mind2."""
    key = stream_key(seed, STREAM_BERNOULLI, step, chunk.index)
    _, w = sample_view(chunk)
    mind2 = chunk.state[STATE_MIND2]
    ids = view_ids(chunk)
    local = bernoulli_sample(key, w, mind2, scale, ids)
    rows = view_rows(chunk, local)
    rows["u"] = uniforms_at(key, ids[local])
    rows["wt"] = w[local] if w.shape[0] else np.ones(len(local))
    rows["mind2"] = mind2[local]
    return rows


def empty_draws(n_features: int) -> dict[str, np.ndarray]:
    """No rows of ``oversampled_rows`` yet."""
    return {**empty_rows(n_features), "u": np.empty(0), "wt": np.empty(0), "mind2": np.empty(0)}


def keep_drawn(rows: dict[str, np.ndarray], scale: float) -> dict[str, np.ndarray]:
    """The rows of ``oversampled_rows`` that pass u < scale * wt * mind2."""
    keep = rows["u"] < scale * rows["wt"] * rows["mind2"]
    return {name: value[keep] for name, value in rows.items()}


def drawn_rows(parts: list[dict[str, np.ndarray]], scale: float) -> dict[str, np.ndarray]:
    """The rows of the parts of a ``NearestUpdateOp`` draw that pass with the final ``scale``, sorted
    by global row id (independent of the chunks' and workers' order)."""
    return merge_rows(*(keep_drawn(part, scale) for part in parts))


@dataclass
class NearestUpdateOp:
    """Lower ``mind2`` / ``label`` with the candidates of ``index`` (a :class:`NearestIndex`).

    ``reset=True`` starts from +inf (first candidates). With ``rate`` < 1 this and
    the following k-means|| passes see only the uniform sample of the rows that
    the first pass kept (``FirstPassOp(sample_rate=rate)``, weights scaled by
    1 / rate) and read no rows; with ``rate=1`` every row (a sample left by an
    earlier seeding is dropped on reset). Returns
    phi = sum w mind2, the weight of the rows nearest to each of the
    ``n_total`` candidates so far (``mass``, for the k-means|| reduction;
    ``n_total=0`` skips it) and the number of distances evaluated.

    With ``oversample`` = l > 0 the pass also draws the next k-means|| round,
    ``step``, in ``draw``: the rows ``BernoulliOp(seed, step, l / phi)`` would
    keep, phi being the sum this very pass computes. Each accumulator keeps
    the rows that pass the test with l over its own partial phi (at least the
    final rows, about l in number), as a list of its chunks' parts filtered
    again as phi grows and sorted only once, by :func:`drawn_rows` with the final
    phi on the driver. One pass per round instead of two, with the same draws.
    """

    index: NearestIndex
    n_total: int
    reset: bool = False
    rate: float = 1.0
    seed: int = 0
    oversample: float = 0.0
    step: int = 0
    n_features: int = 0

    @property
    def reads_rows(self) -> bool:
        return self.rate >= 1.0

    def new_acc(self):
        acc = {"phi": np.zeros(1), "mass": np.zeros(self.n_total), "n_dist": np.zeros(1)}
        if self.oversample:
            acc["draw"] = [empty_draws(self.n_features)]
        return acc

    def run(self, chunk: Chunk, acc) -> None:
        if self.reset or STATE_MIND2 not in chunk.state:
            if self.rate >= 1.0:
                start_sample(chunk, 1.0, self.seed)
            elif STATE_SAMPLE_ROWS not in chunk.state:
                raise RuntimeError("a sampled k-means|| pass needs the sample the first pass keeps")
            n = len(sample_view(chunk)[0])
            chunk.state[STATE_MIND2] = np.full(n, np.inf)
            chunk.state[STATE_LABEL] = np.zeros(n, dtype=np.int32)
        X, w = sample_view(chunk)
        mind2, label = chunk.state[STATE_MIND2], chunk.state[STATE_LABEL]
        acc["n_dist"][0] += self.index.search(X, mind2, label)
        acc["phi"][0] += weighted_sum(w, mind2)
        if self.n_total:
            acc["mass"] += np.bincount(label, weights=w if w.shape[0] else None, minlength=self.n_total)
        if self.oversample and acc["phi"][0] > 0:
            scale = self._partial_scale(acc["phi"][0])
            acc["draw"] = [keep_drawn(part, scale) for part in acc["draw"]]
            acc["draw"].append(oversampled_rows(chunk, self.seed, self.step, scale))

    def merge(self, a, b):
        draws = a.pop("draw") + b.pop("draw") if self.oversample else None
        a = add_arrays(a, b)
        if draws is not None:
            a["draw"] = [keep_drawn(part, self._partial_scale(a["phi"][0])) for part in draws] \
                if a["phi"][0] > 0 else draws
        return a

    def _partial_scale(self, phi: float) -> float:
        """l / phi for a partial sum phi, with the margin that keeps every finally drawn row."""
        return DRAW_MARGIN * self.oversample / phi



@dataclass
class BernoulliOp:
    """k-means|| oversampling: keep each row with probability min(1, scale * w * mind2)."""

    seed: int
    step: int
    scale: float
    n_features: int
    rate: float = 1.0

    @property
    def reads_rows(self) -> bool:
        return self.rate >= 1.0

    def new_acc(self):
        return empty_draws(self.n_features)

    def run(self, chunk: Chunk, acc) -> None:
        acc.update(merge_rows(dict(acc), oversampled_rows(chunk, self.seed, self.step, self.scale)))

    merge = staticmethod(merge_rows)


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
        chunk.state[STATE_SEED_LABEL] = labels
        _drop_seeding_state(chunk)
        acc["qe"][0] += weighted_sum(chunk.w, d2)
        acc["W"][0] += weighted_sum(chunk.w, np.ones(chunk.n_rows))

    merge = staticmethod(add_arrays)


@dataclass
class NearestCostOp:
    """sum_n w_n min_c ||y_n - mu_c||^2 exactly (``index``: a :class:`NearestIndex` over the centres),
    the chunks' state untouched: the inertia of final centres."""

    index: NearestIndex

    def new_acc(self):
        return {"qe": np.zeros(1), "n_dist": np.zeros(1)}

    def run(self, chunk: Chunk, acc) -> None:
        _, d2, n_dist = nearest_rows(self.index, chunk)
        acc["n_dist"][0] += n_dist
        acc["qe"][0] += weighted_sum(chunk.w, d2)

    merge = staticmethod(add_arrays)


def exact_inertia(engine, centres: np.ndarray) -> tuple[float, int]:
    """The data's exact k-means cost at ``centres`` and the distances it took (one pass; the ball tree
    prunes distances)."""
    acc = engine.map_reduce(NearestCostOp(NearestIndex.probed(centres)))
    return float(acc["qe"][0]), int(acc["n_dist"][0])


@dataclass
class MapLabelsOp:
    """seed_label = centre_of[label]: each row's nearest candidate's nearest centre (k-means||).

    Returns sum w ||y - mu_seed_label||^2 (one distance per row).
    """

    centre_of: np.ndarray
    centres: np.ndarray

    def new_acc(self):
        return {"qe": np.zeros(1), "W": np.zeros(1), "n_dist": np.zeros(1)}

    def run(self, chunk: Chunk, acc) -> None:
        labels = self.centre_of[chunk.state[STATE_LABEL]].astype(np.int32)
        diff = chunk.X - self.centres[labels]
        d2 = np.einsum("nd,nd->n", diff, diff)
        chunk.state[STATE_SEED_LABEL] = labels
        _drop_seeding_state(chunk)
        acc["qe"][0] += weighted_sum(chunk.w, d2)
        acc["W"][0] += weighted_sum(chunk.w, np.ones(chunk.n_rows))
        acc["n_dist"][0] += chunk.n_rows

    merge = staticmethod(add_arrays)


def _drop_seeding_state(chunk: Chunk) -> None:
    for name in (STATE_MIND2, STATE_LABEL, STATE_AFKMC2_D2, STATE_SPATIAL_KEY, *SAMPLE_STATE):
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

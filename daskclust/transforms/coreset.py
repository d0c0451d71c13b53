"""Lightweight coresets (Exarchakis et al. 2022, after Bachem, Lucic and Krause): three passes, m rows with weights.

With input weights w (1 when unweighted), W = sum_x w(x), the weighted mean mu (pass 1) and
d(x) = ||x - mu||, every row gets the sampling probability

    q(x) = w(x) / (2 W) + w(x) d(x)^2 / (2 sum_x' w(x') d(x')^2)

(pass 2 sums q per chunk), the driver splits the m draws over the chunks with one multinomial
of the chunks' masses, and each chunk draws its share of rows with replacement in proportion to
q, each drawn row weighing w(x) / (m q(x)). Sums over the coreset are then unbiased estimates of
the weighted sums over the data (E sum_coreset v = sum_x w(x) v(x)). Every draw comes from a
stream keyed by the seed and the chunk, made in the rows' source order: the coreset does not
depend on the number of workers. Weighted input works, so a coreset of a coreset does too.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from ..data import ChunkedData, as_chunked_data
from ..data.ranges import check_not_too_small
from ..engine.cluster import connect
from ..engine.engine import Engine
from ..engine.ops import Chunk, merge_row_lists
from ..errors import InvalidDataError, InvalidParameterError
from ..kernels.rng import stream_key
from ..kernels.validation import max_abs
from ..models import Family
from ..names import STREAM_CORESET_ROWS, STREAM_CORESET_SPLIT
from ..seeding.passes import chunk_weights


class RowGeometry:
    """How the coreset measures dense rows: the weighted mean and squared Euclidean distances to it.
    (:class:`~daskclust.transforms.sketch.SketchGeometry` does the same for sketched rows.)"""

    def __init__(self, n_features: int):
        self.n_features = n_features
        self.width = n_features
        self.row_width = n_features

    def family(self, family: Family) -> Family:
        """The family that reads these rows: ``family`` itself (they are feature vectors)."""
        return family

    def sums(self, X: np.ndarray, w: np.ndarray) -> np.ndarray:
        """What pass 1 adds up per chunk besides the weight: sum_x w(x) x."""
        return w @ np.asarray(X, dtype=np.float64)

    def mean(self, sums: np.ndarray, total_weight: float) -> np.ndarray:
        return sums / total_weight

    def largest(self, X: np.ndarray) -> float:
        """max |x| over the rows (the range rule of :func:`check_not_too_small`)."""
        return max_abs(X)

    def squared_distances(self, X: np.ndarray, mean: np.ndarray) -> np.ndarray:
        diff = np.asarray(X, dtype=np.float64) - mean
        return np.einsum("nd,nd->n", diff, diff)


@dataclass
class MomentsOp:
    """Pass 1: per chunk, (W_k, max |x| over the chunk, the geometry's sums), in a (n_chunks, 2 + width)
    array. Kept per chunk and summed on the driver in chunk order, so the mean is the same bits whatever
    the merge tree; max |x| gives the range rule of every fit (:func:`check_not_too_small`)."""

    geometry: RowGeometry
    n_chunks: int

    def new_acc(self) -> np.ndarray:
        return np.zeros((self.n_chunks, self.geometry.width + 2))

    def run(self, chunk: Chunk, acc: np.ndarray) -> None:
        w = chunk_weights(chunk)
        acc[chunk.index, 0] += w.sum()
        acc[chunk.index, 1] = self.geometry.largest(chunk.X)  # each chunk runs once: the merge's sum keeps it
        acc[chunk.index, 2:] += self.geometry.sums(chunk.X, w)

    @staticmethod
    def merge(a, b):
        a += b
        return a


@dataclass
class MassOp:
    """Pass 2: per chunk, (W_k, S_k = sum_{x in k} w(x) d(x)^2, distances evaluated), in a (n_chunks, 3)
    array (summed on the driver in chunk order, like :class:`MomentsOp`)."""

    mean: np.ndarray
    n_chunks: int
    geometry: RowGeometry

    def new_acc(self) -> np.ndarray:
        return np.zeros((self.n_chunks, 3))

    def run(self, chunk: Chunk, acc: np.ndarray) -> None:
        w = chunk_weights(chunk)
        d2 = self.geometry.squared_distances(chunk.X, self.mean)
        acc[chunk.index, 0] += w.sum()
        acc[chunk.index, 1] += w @ d2
        acc[chunk.index, 2] += len(d2)

    @staticmethod
    def merge(a, b):
        a += b
        return a


@dataclass
class DrawOp:
    """Pass 3 (on the chunks' rows, no statistics pass): each chunk draws ``counts[k]`` rows with
    replacement in proportion to q, in source order, and returns them with their weights."""

    mean: np.ndarray
    total_weight: float
    total_sq: float
    counts: np.ndarray
    size: int
    seed: int
    geometry: RowGeometry

    def new_acc(self) -> dict:
        D = self.geometry.row_width
        return {"row": np.zeros(0, dtype=np.int64), "draw": np.zeros(0, dtype=np.int64),
                "X": np.zeros((0, D)), "w": np.zeros(0)}

    def q(self, chunk: Chunk) -> np.ndarray:
        w = chunk_weights(chunk)
        d2 = self.geometry.squared_distances(chunk.X, self.mean)
        spread = w * d2 / (2.0 * self.total_sq) if self.total_sq > 0 else w / (2.0 * self.total_weight)
        return w / (2.0 * self.total_weight) + spread

    def run(self, chunk: Chunk, acc: dict) -> None:
        n_draws = int(self.counts[chunk.index])
        if n_draws == 0:
            return
        order = np.argsort(chunk.source_rows(np.arange(chunk.n_rows)), kind="stable")  # source order
        q = self.q(chunk)[order]
        cdf = np.cumsum(q)
        rng = np.random.default_rng(stream_key(self.seed, STREAM_CORESET_ROWS, chunk.index))
        picks = np.minimum(np.searchsorted(cdf, rng.random(n_draws) * cdf[-1], side="right"), len(q) - 1)
        local = order[picks]
        weights = chunk_weights(chunk)[local] / (self.size * q[picks])
        part = {"row": chunk.source_rows(local), "draw": np.arange(n_draws, dtype=np.int64),
                "X": np.asarray(chunk.X[local], dtype=np.float64), "w": weights}
        merged = merge_row_lists(acc, part)
        acc.update(merged)

    merge = staticmethod(merge_row_lists)


@dataclass(frozen=True, eq=False)
class CoresetRows:
    """A lightweight coreset (:class:`~daskclust.transforms.interface.Transformed`): m rows of the data in
    their source order, float64 (as the data's rows are, dense or packed sketches, ``geometry`` says) and
    their weights w(x) / (m q(x)); sums over them estimate the data's weighted sums without bias."""

    rows: np.ndarray
    weights: np.ndarray
    geometry: RowGeometry

    @property
    def n_samples(self) -> int:
        """m, the rows drawn."""
        return len(self.rows)

    @property
    def n_features(self) -> int:
        """The dimension of a model fitted on them (P for sketched rows)."""
        return self.geometry.n_features

    @property
    def sources(self) -> tuple[None, None]:
        """A coreset is held in memory."""
        return None, None

    def chunked(self, chunk_rows: int | None = None, min_samples: int = 1) -> ChunkedData:
        """The rows and their weights as the engine's data."""
        return as_chunked_data(self.rows, self.weights, chunk_rows=chunk_rows, min_samples=min_samples)

    def family(self, family: Family) -> Family:
        """The family that reads the rows (the sketched family for a coreset of sketches)."""
        return self.geometry.family(family)

    def __array__(self, dtype=None, copy=None):
        """The rows (numpy's array protocol): ``predict``, ``score`` and ``transform`` take a coreset as
        they take rows."""
        return self.rows if dtype is None else self.rows.astype(dtype)


class LightweightCoreset:
    """A lightweight coreset of ``size`` weighted rows (Exarchakis et al. 2022; see the module docstring).

    Parameters
    ----------
    size : int
        m, rows drawn (with replacement: a row may appear more than once; m may exceed
        the number of rows).
    random_state : int, default=0
        Seed of the draws (keyed by chunk: the result does not depend on the workers).
    verbose : int or bool, default=0
        Show a progress bar per pass of ``fit_transform`` (stderr); nothing otherwise.

    Attributes
    ----------
    n_distances_ : int
        Row-to-mean distances evaluated: one per row in pass 2, plus one per row of every
        chunk that draws at least one row in pass 3 (its q is computed again there).
    seconds_ : float
        Wall-clock seconds of the three passes.
    """

    def __init__(self, size: int, *, random_state: int = 0, geometry: RowGeometry | None = None, verbose: int = 0):
        self.size = size
        self.random_state = random_state
        self.geometry = geometry
        self.verbose = verbose

    def check_size(self) -> None:
        """Refuse a size that is not a positive integer, or a seed that is not a non-negative one
        (before any work)."""
        if isinstance(self.size, bool) or not isinstance(self.size, (int, np.integer)) or self.size < 1:
            raise InvalidParameterError(f"size must be a positive integer, got {self.size!r}")
        seed = self.random_state
        if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
            raise InvalidParameterError(f"random_state must be a non-negative integer, got {seed!r}")

    def fit_transform(self, X, sample_weight=None, *, client=None, chunk_rows=None) -> CoresetRows:
        """The coreset of ``X`` (any input the estimators take), which every estimator fits as it fits
        data (``fit(coreset)``): :class:`CoresetRows`, m rows of shape (m, D) float64 in their source
        order and their weights of shape (m,)."""
        self.check_size()
        data = as_chunked_data(X, sample_weight, chunk_rows=chunk_rows, min_samples=1)
        with connect(client, None) as cl, Engine(data, cl, progress=bool(self.verbose)) as engine:
            return self.transform_engine(engine)

    def transform_engine(self, engine: Engine) -> CoresetRows:
        """The three passes on an open :class:`~daskclust.engine.engine.Engine` over the data
        (what ``fit_transform`` runs, for callers that already hold one; its passes are the
        engine's ``"coreset"`` phase)."""
        self.check_size()
        t0 = time.perf_counter()
        data = engine.data
        geometry = self.geometry or RowGeometry(data.n_features)
        with engine.phase("coreset"):
            per_chunk = engine.map_reduce(MomentsOp(geometry, data.n_chunks))
            moments = per_chunk.sum(axis=0)
            W = float(moments[0])
            if W <= 0:
                raise InvalidDataError("sample_weight sums to zero: no row has positive weight")
            check_not_too_small(per_chunk[:, 1].max(), data.dtype, geometry.n_features)
            mean = geometry.mean(moments[2:], W)
            masses = engine.map_reduce(MassOp(mean, data.n_chunks, geometry))
            S = float(masses[:, 1].sum())
            chunk_mass = masses[:, 0] / (2 * W) + (masses[:, 1] / (2 * S) if S > 0 else masses[:, 0] / (2 * W))
            rng = np.random.default_rng(stream_key(self.random_state, STREAM_CORESET_SPLIT))
            counts = rng.multinomial(self.size, chunk_mass / chunk_mass.sum())
            drawn = engine.map_reduce(DrawOp(mean, W, S, counts, self.size, self.random_state, geometry))
        # pass 3 evaluates q, hence d(x), on every row of the chunks that draw (DrawOp.run)
        self.n_distances_ = int(masses[:, 2].sum()) + int(np.diff(data.bounds)[counts > 0].sum())
        self.seconds_ = time.perf_counter() - t0
        order = np.lexsort((drawn["draw"], drawn["row"]))
        return CoresetRows(drawn["X"][order], drawn["w"][order], geometry)

"""SGMM sketches (Kightley & Becker 2019, Sec. II-A and Alg. 1): one pass, Q of P preconditioned features per row.

Each row x is preconditioned by a random orthonormal system, x~ = H D x (Kightley & Becker 2019 Eq. 1): D flips
the signs of the features (one vector of P random signs, stored), H is the orthonormal DCT-II
(``scipy.fft.dct(norm="ortho")``, O(P log P) a row). Then Q of the P entries of x~ are kept,
y = R^T x~: Q_S of them, drawn once, are shared by all rows; the other Q - Q_S are drawn per row
without repetition (a partial Fisher-Yates shuffle, O(Q) a row). The sketch is the values y
(N x Q) and the kept indices (N x Q, the smallest unsigned integer type that holds P - 1), sorted
ascending within a row, written chunk by chunk as the rows are read: the raw data are not needed
again. The index draws of source row r come from a counter-based stream keyed by the seed and r,
so the sketch depends neither on the number of workers nor on the chunking.

Because R is redrawn for every row, the statistics of a mixture in the full P-dimensional
preconditioned space are estimated from the sketches (one pass; see
:mod:`daskclust.models.sketched`); ``SketchTransform.invert`` maps means back (x = D H^T x~).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field, replace
from functools import partial

import dask.array as da
import numpy as np
import scipy.fft
from numba import njit

from ..data import ChunkedData, as_chunked_data
from ..data.chunking import row_bounds
from ..data.ranges import check_not_too_small
from ..data.sources import BlockSource, PackedArrays
from ..engine.cluster import connect
from ..engine.engine import Engine
from ..engine.ops import Chunk, ThreadScratch, merge_row_lists
from ..errors import InvalidDataError, InvalidParameterError
from ..io import Location, check_target, describe_source, input_stores, store_root, writing
from ..kernels.index_bits import floats_as_indices, indices_as_floats
from ..kernels.rng import randint, stream_key
from ..kernels.validation import max_abs
from ..models import Family
from ..models.sketched import SKETCHED_COVARIANCE_TYPES, SketchedFamily
from ..names import STREAM_SKETCH_ROWS, STREAM_SKETCH_SHARED, STREAM_SKETCH_SIGNS
from ..persistence.sketch import create_sketch_store, open_sketch_store, write_sketch_rows

PRECONDITIONS = ("dct", "none")
SKETCH_BLOCK = 65_536
"""Rows sketched at a time inside a chunk: the DCT's float64 temporaries stay a few MB wide."""
DIRECT_MAX_FEATURES = 1024
"""Up to this P the kept entries may be computed as Q products with rows of the P x P matrix H D
(8 MB at P = 1024, built once per pass) instead of the whole transform (see :meth:`SketchTransform.direct`)."""
DIRECT_WORK_PER_LOG = 4
"""Kept entries are computed directly while Q <= this x log2(P): Q P multiply-adds a row (0.3 ns each,
vectorised) against the DCT's whole row (about 1.3 P log2 P ns with scipy's pocketfft, and the copy
to float64 it transforms), measured on this project's benchmark machine at P = 32 .. 784."""


@njit(nogil=True, cache=True)
def draw_indices(key, rows, free, shared, n_draw, out):
    """out[i] = the ``shared`` features and ``n_draw`` of the ``free`` ones drawn without repetition
    for source row ``rows[i]`` (partial Fisher-Yates shuffle; draw j of row r is the stream's
    counter r * n_draw + j), sorted ascending. OUT: out (n, Q), any integer type holding P - 1."""
    m = free.shape[0]
    n_shared = shared.shape[0]
    Q = n_shared + n_draw
    scratch = free.copy()
    swaps = np.empty(n_draw, dtype=np.int64)
    row = np.empty(Q, dtype=np.int64)
    row[:n_shared] = shared
    for i in range(rows.shape[0]):
        base = rows[i] * n_draw
        for j in range(n_draw):
            r = j + randint(key, base + j, m - j)
            swaps[j] = r
            t = scratch[j]
            scratch[j] = scratch[r]
            scratch[r] = t
            row[n_shared + j] = scratch[j]
        for j in range(n_draw - 1, -1, -1):  # undo the swaps: every row starts from the same order
            r = swaps[j]
            t = scratch[j]
            scratch[j] = scratch[r]
            scratch[r] = t
        if Q > 32:
            row.sort()  # in place: the shared features are put back below
            out[i] = row
            row[:n_shared] = shared
            continue
        for a in range(Q):  # the features are distinct: each one's place is the count of smaller ones
            v = row[a]
            place = 0
            for b in range(Q):
                place += row[b] < v
            out[i, place] = v


@njit(nogil=True, cache=True, fastmath={"reassoc", "contract"})
def kept_entries(X, basis, indices, values):
    """values[i, j] = sum_p basis[indices[i, j], p] X[i, p]: the kept entries of H D x (``basis`` = H D, P x P
    float64), accumulated in float64 whatever X's dtype. OUT: values (n, Q). Compiled with
    ``fastmath={"reassoc", "contract"}`` (no assumption about NaN or inf) so that the products vectorise."""
    n, P = X.shape
    for i in range(n):
        for j in range(indices.shape[1]):
            q = indices[i, j]
            s = 0.0
            for p in range(P):
                s += basis[q, p] * X[i, p]
            values[i, j] = s


def feature_index_dtype(n_features: int) -> np.dtype:
    """The smallest unsigned integer type holding every feature index 0 ... P - 1."""
    return np.min_scalar_type(n_features - 1)


@njit(nogil=True, cache=True)
def count_from(first, out):
    """out[i] = first + i (IN/OUT: out, int64), without the temporary array of ``np.arange``."""
    for i in range(out.shape[0]):
        out[i] = first + i


def pack_sketch(values: np.ndarray, indices: np.ndarray, n_features: int) -> np.ndarray:
    """Sketch rows as the E-step kernels read them: (n, 2Q) float64, values then indices, each index carried
    as the bits of its int64 (:mod:`daskclust.kernels.index_bits`), so a sketch row is one row of the
    engine's chunks (the ``pack`` of its :class:`~daskclust.data.sources.PackedArrays`).

    The kernels index P-long arrays with the indices: every index is checked to lie in [0, P) first
    (InvalidDataError otherwise), as are the shapes of the two blocks.
    """
    values, indices = np.asarray(values), np.asarray(indices)
    if values.ndim != 2 or indices.shape != values.shape:
        raise InvalidDataError(f"a sketch's values {values.shape} and indices {indices.shape} must be two arrays of "
                               "the same (rows, Q) shape")
    check_sketch_indices(indices, n_features)
    return np.ascontiguousarray(np.hstack([values.astype(np.float64, copy=False),
                                           indices_as_floats(indices)]))


def check_sketch_indices(indices: np.ndarray, n_features: int) -> None:
    """Refuse sketch indices that are not integers in [0, P) (InvalidDataError): the kernels index
    P-long arrays with them."""
    if indices.dtype.kind not in "iu":
        raise InvalidDataError(f"a sketch's indices must be integers, not {indices.dtype}")
    if indices.size and (int(indices.min()) < 0 or int(indices.max()) >= n_features):
        raise InvalidDataError(f"a sketch's indices must lie in [0, {n_features}) (the sketched rows' features); "
                               f"found {int(indices.min())} .. {int(indices.max())}: the sketch is damaged or does "
                               "not belong to its transform")


@dataclass(frozen=True, eq=False)
class SketchTransform:
    """The sketching operator: P, Q, the sign flips D (P signs), the shared features, H, the seed."""

    n_features: int
    n_kept: int
    signs: np.ndarray
    shared: np.ndarray
    precondition: str
    seed: int

    def __post_init__(self):
        """Refuse a transform whose fields disagree (read from a store, or built by hand): the kernels index
        P-long arrays with what it says."""
        P, Q = self.n_features, self.n_kept
        problems = []
        if not (isinstance(P, (int, np.integer)) and isinstance(Q, (int, np.integer)) and 1 <= Q <= P):
            problems.append(f"n_kept {Q!r} must be an integer in [1, n_features {P!r}]")
        signs, shared = np.asarray(self.signs), np.asarray(self.shared)
        if signs.shape != (P,) or not np.all(np.abs(signs) == 1):
            problems.append(f"the sign flips must be {P!r} values of +-1 (found shape {signs.shape})")
        if shared.ndim != 1 or shared.dtype.kind not in "iu" or len(shared) >= Q \
                or np.any((shared < 0) | (shared >= P)) or np.any(np.diff(shared) <= 0):
            problems.append(f"the shared features must be fewer than n_kept, distinct, sorted indices in [0, {P!r})")
        if self.precondition not in PRECONDITIONS:
            problems.append(f"precondition {self.precondition!r} is not one of {PRECONDITIONS}")
        if not isinstance(self.seed, (int, np.integer)) or self.seed < 0:
            problems.append(f"seed {self.seed!r} must be a non-negative integer")
        if problems:
            raise InvalidDataError(f"inconsistent sketch transform: {'; '.join(problems)}")

    def __getstate__(self) -> dict:
        """The fields only: :attr:`basis` is rebuilt where it is used."""
        return {name: value for name, value in self.__dict__.items() if name != "basis"}

    def differences(self, other: SketchTransform) -> list[str]:
        """The fields in which ``other`` differs from this transform (empty: the same operator)."""
        found = [f"{name} {getattr(self, name)!r} against {getattr(other, name)!r}"
                 for name in ("n_features", "n_kept", "precondition", "seed") if getattr(self, name) != getattr(other, name)]
        if not found and not np.array_equal(self.signs, other.signs):
            found.append("the sign flips")
        if not found and not np.array_equal(self.shared, other.shared):
            found.append("the shared features")
        return found

    @classmethod
    def draw(cls, n_features: int, n_kept: int, n_shared: int, precondition: str, seed: int) -> SketchTransform:
        """Signs and shared features drawn from the seed's own streams."""
        if precondition == "dct":
            rng = np.random.default_rng(stream_key(seed, STREAM_SKETCH_SIGNS))
            signs = np.where(rng.random(n_features) < 0.5, -1, 1).astype(np.int8)
        else:
            signs = np.ones(n_features, dtype=np.int8)
        rng = np.random.default_rng(stream_key(seed, STREAM_SKETCH_SHARED))
        shared = np.sort(rng.choice(n_features, n_shared, replace=False)).astype(np.int64)
        return cls(int(n_features), int(n_kept), signs, shared, precondition, int(seed))

    @property
    def n_shared(self) -> int:
        """Q_S, the entries every row keeps."""
        return len(self.shared)

    @property
    def index_dtype(self) -> np.dtype:
        """The type of the kept entries' indices (:func:`feature_index_dtype`)."""
        return feature_index_dtype(self.n_features)

    def precondition_rows(self, X: np.ndarray) -> np.ndarray:
        """x~ = H D x for every row (float64); the identity without preconditioning."""
        if self.precondition == "none":
            return np.asarray(X, dtype=np.float64)
        Y = np.array(X, dtype=np.float64)  # a copy, flipped and transformed in place
        Y *= self.signs
        return scipy.fft.dct(Y, type=2, norm="ortho", axis=-1, overwrite_x=True, workers=1)

    def invert(self, Y: np.ndarray) -> np.ndarray:
        """x = D H^T x~ (H orthonormal: H^-1 = H^T, the DCT-III)."""
        Y = np.asarray(Y, dtype=np.float64)
        if self.precondition == "none":
            return Y.copy()
        return scipy.fft.idct(Y, type=2, norm="ortho", axis=-1, workers=1) * self.signs

    @property
    def direct(self) -> bool:
        """Whether the kept entries are computed as Q products with rows of H D (:func:`kept_entries`)
        rather than by transforming the whole row (see :data:`DIRECT_WORK_PER_LOG`); a function of P
        and Q only, so every worker takes the same route."""
        P = self.n_features
        return self.precondition == "dct" and P <= DIRECT_MAX_FEATURES \
            and self.n_kept <= DIRECT_WORK_PER_LOG * max(1.0, math.log2(P))

    @functools.cached_property
    def basis(self) -> np.ndarray:
        """H D as a P x P float64 matrix (row q: the q-th output of :meth:`precondition_rows`)."""
        return np.ascontiguousarray(self.precondition_rows(np.eye(self.n_features)).T)

    def sketch_rows(self, X: np.ndarray, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(values (n, Q) float64, indices (n, Q)) of rows ``X`` whose source indices are ``rows``."""
        values, indices = np.empty((len(X), self.n_kept)), np.empty((len(X), self.n_kept), self.index_dtype)
        self.sketch_into(X, rows, values, indices)
        return values, indices

    def sketch_into(self, X: np.ndarray, rows: np.ndarray, values: np.ndarray, indices: np.ndarray) -> None:
        """:meth:`sketch_rows` written into ``values`` (n, Q) of any float dtype and ``indices`` (n, Q) of
        :attr:`index_dtype` (a chunk's output, no temporaries on the direct route)."""
        free = np.setdiff1d(np.arange(self.n_features), self.shared)
        key = stream_key(self.seed, STREAM_SKETCH_ROWS)
        draw_indices(key, np.asarray(rows, dtype=np.int64), free, self.shared, self.n_kept - self.n_shared, indices)
        if self.direct:
            kept_entries(np.ascontiguousarray(X), self.basis, indices, values)
        else:
            values[...] = np.take_along_axis(self.precondition_rows(X), indices, axis=1)

    def attrs(self) -> dict:
        """The transform as JSON-serialisable attributes of a sketch or model store."""
        return {"n_features": self.n_features, "n_kept": self.n_kept, "precondition": self.precondition,
                "seed": self.seed, "signs": self.signs.tolist(), "shared": self.shared.tolist()}

    @classmethod
    def from_attrs(cls, attrs: dict) -> SketchTransform:
        """The transform stored by :meth:`attrs` (InvalidDataError if a field is missing, of the wrong type or
        inconsistent with the others)."""
        try:
            fields = {name: attrs[name] for name in ("n_features", "n_kept", "precondition", "seed", "signs", "shared")}
            if not all(isinstance(fields[name], int) and not isinstance(fields[name], bool)
                       for name in ("n_features", "n_kept", "seed")) or not isinstance(fields["precondition"], str):
                raise TypeError("n_features, n_kept and seed must be integers, precondition a string")
            signs = np.asarray(fields["signs"])
            shared = np.asarray(fields["shared"], dtype=np.int64) if len(fields["shared"]) else np.empty(0, np.int64)
            if signs.dtype.kind not in "iu":
                raise TypeError("the sign flips must be integers")
        except (KeyError, TypeError, ValueError) as exc:
            raise InvalidDataError(f"the stored sketch transform is damaged ({type(exc).__name__}: {exc})") from exc
        return cls(fields["n_features"], fields["n_kept"], signs.astype(np.int8), shared, fields["precondition"],
                   fields["seed"])


def sketched_family(family: Family, n_kept: int) -> Family:
    """The sketched family fitting ``family``'s model on packed sketch rows of ``n_kept`` entries
    (Kightley & Becker 2019's diagonal and spherical cases; InvalidParameterError for the others)."""
    if family.name not in SKETCHED_COVARIANCE_TYPES:
        raise InvalidParameterError(f"sketches are fitted with covariance_type in {SKETCHED_COVARIANCE_TYPES}, "
                                    f"not {family.name!r}")
    return SketchedFamily(family.name, n_kept).with_weights(family.learn_weights)


class SketchGeometry:
    """How a lightweight coreset measures packed sketch rows (:class:`~daskclust.transforms.coreset.RowGeometry`'s
    interface): the mean in the P-dimensional preconditioned space, feature by feature over the rows
    that kept it, mean_p = sum_x w(x) y_p [p kept] / sum_x w(x) [p kept], and the squared distance to it
    estimated from the kept entries, (P / Q) sum_q (y_q - mean_{i_q})^2. Any positive estimate keeps
    the coreset's weighted sums unbiased (they are importance weights); this one is unbiased for
    the distance itself when the kept features are uniform (Q_S = 0)."""

    def __init__(self, n_features: int, n_kept: int):
        self.n_features, self.n_kept = n_features, n_kept
        self.width = 2 * n_features
        self.row_width = 2 * n_kept

    def family(self, family: Family) -> Family:
        """The family that reads these rows: the sketched family (:func:`sketched_family`)."""
        return sketched_family(family, self.n_kept)

    def _split(self, X):
        Q = self.n_kept
        X = np.asarray(X, dtype=np.float64)
        return X[:, :Q], floats_as_indices(X[:, Q:])

    def sums(self, X: np.ndarray, w: np.ndarray) -> np.ndarray:
        """Per feature, the weighted sum of the observed entries, then their weight (length 2P)."""
        values, idx = self._split(X)
        P = self.n_features
        weighted = np.bincount(idx.ravel(), weights=(w[:, None] * values).ravel(), minlength=P)
        counts = np.bincount(idx.ravel(), weights=np.repeat(w, self.n_kept), minlength=P)
        return np.concatenate([weighted, counts])

    def mean(self, sums: np.ndarray, total_weight: float) -> np.ndarray:
        """The mean of each feature over the rows that observed it (from :meth:`sums`)."""
        P = self.n_features
        counts = sums[P:]
        return np.divide(sums[:P], counts, out=np.zeros(P), where=counts > 0)

    def largest(self, X: np.ndarray) -> float:
        """max |value| over the kept entries (the range rule of :func:`check_not_too_small`)."""
        return max_abs(np.ascontiguousarray(X[:, :self.n_kept]))

    def squared_distances(self, X: np.ndarray, mean: np.ndarray) -> np.ndarray:
        """Kightley & Becker 2019 Eq. 30: each sketched row's squared distance to ``mean``, scaled by P / Q."""
        values, idx = self._split(X)
        return (values - mean[idx]) ** 2 @ np.full(self.n_kept, self.n_features / self.n_kept)


@dataclass(frozen=True, eq=False)
class SketchedData:
    """A sketch: values and indices (numpy arrays, or zarr arrays of a sketch store), the optional
    sample weights carried over from the input, and the transform. Every sketch estimator accepts it."""

    values: object
    indices: object
    weights: object | None
    transform: SketchTransform
    taken_from: tuple[dict | None, dict | None] = (None, None)
    """Where the raw rows and weights of an in-memory sketch are stored (:func:`~daskclust.io.describe_source`)."""

    def __post_init__(self):
        """Refuse arrays that disagree with each other or with the transform (before any kernel reads them);
        the indices of a store are range-checked chunk by chunk as they are read (:func:`pack_sketch`)."""
        values, indices, Q = self.values, self.indices, self.transform.n_kept
        shape = tuple(getattr(values, "shape", ()))
        if len(shape) != 2 or shape[1] != Q or tuple(getattr(indices, "shape", ())) != shape:
            raise InvalidDataError(f"the sketch's values {shape} and indices {tuple(getattr(indices, 'shape', ()))} must "
                                   f"both be (rows, n_kept = {Q}) as its transform says")
        if np.dtype(values.dtype).kind != "f" or np.dtype(indices.dtype).kind not in "iu":
            raise InvalidDataError(f"a sketch holds float values and integer indices, not {values.dtype} and "
                                   f"{indices.dtype}")
        if self.weights is not None and tuple(getattr(self.weights, "shape", ())) != shape[:1]:
            raise InvalidDataError(f"the sketch's weights {tuple(getattr(self.weights, 'shape', ()))} must be one per "
                                   f"row ({shape[0]})")
        if isinstance(indices, np.ndarray):
            check_sketch_indices(indices, self.n_features)

    @property
    def n_samples(self) -> int:
        """N, the sketched rows."""
        return int(self.values.shape[0])

    @property
    def n_kept(self) -> int:
        """Q, the entries kept per row."""
        return self.transform.n_kept

    @property
    def n_features(self) -> int:
        """P, the dimension of the rows the sketch was taken of."""
        return self.transform.n_features

    @property
    def sources(self) -> tuple[dict | None, dict | None]:
        """Where the sketch is stored (its store holds the weights), else where its raw rows were."""
        if self.in_memory:
            return self.taken_from
        return {"url": store_root(self.values).url, "array": None}, None

    def family(self, family: Family) -> Family:
        """The sketched family of ``family``'s model, reading the sketches' packed rows (:func:`sketched_family`)."""
        return sketched_family(family, self.n_kept)

    @property
    def in_memory(self) -> bool:
        """True for numpy values and indices, False for a (lazy) sketch store."""
        return isinstance(self.values, np.ndarray)

    @classmethod
    def open(cls, path, storage_options: dict | None = None) -> SketchedData:
        """The sketch store at ``path`` (written by :meth:`Sketch.fit_transform` with ``output``)."""
        values, indices, weights, transform = open_sketch_store(Location.parse(path, storage_options))
        return cls(values, indices, weights, SketchTransform.from_attrs(transform))

    def chunked(self, chunk_rows: int | None = None, min_samples: int = 1) -> ChunkedData:
        """The sketch as the engine's data: rows packed by :func:`pack_sketch`, read by the workers from the
        store (or pushed from memory), weights alongside."""
        Q = self.n_kept
        if self.n_samples < max(1, min_samples):
            raise InvalidDataError(f"the sketch has {self.n_samples} rows, fewer than the {min_samples} required "
                                   "(n_samples must be at least the number of clusters)")
        if self.in_memory:
            return as_chunked_data(pack_sketch(self.values, self.indices, self.n_features), self.weights, chunk_rows=chunk_rows,
                                   min_samples=min_samples)
        rows = int(chunk_rows or self.values.chunks[0])
        lazy = da.concatenate([da.from_zarr(self.values, chunks=(rows, Q)).astype(np.float64),
                               da.from_zarr(self.indices, chunks=(rows, Q)).map_blocks(indices_as_floats,
                                                                                       dtype=np.float64)], axis=1)
        packed = PackedArrays((self.values, self.indices), partial(pack_sketch, n_features=self.n_features))
        source = BlockSource("packed", packed, np.dtype(np.float64))
        weights = weight_source = None
        if self.weights is not None:
            weights = da.from_zarr(self.weights, chunks=(rows,))
            weight_source = BlockSource("zarr", self.weights, np.dtype(np.float64))
        return ChunkedData(lazy, source, weights, weight_source, row_bounds(self.n_samples, lazy.chunks[0]), "zarr")


@dataclass
class SketchOp:
    """The one pass: each chunk's rows sketched in source order, written to the store's region of the
    chunk (``target``) or returned to the driver.

    Its arrays are reused from chunk to chunk by each worker thread for the pass (:meth:`arrays`; the op
    is pickled before any chunk, so ``scratch`` is empty when sent): a fresh array costs the kernel a
    zeroed page every 4 KiB, about 200,000 page faults in two workers sketching 50 million rows of 32
    features into a store, against 5,500 with the arrays reused (measured for issue 26).
    """

    transform: SketchTransform
    target: Location | None
    scratch: ThreadScratch = field(default_factory=ThreadScratch, repr=False, compare=False)

    def arrays(self, n_rows: int, dtype) -> list[np.ndarray]:
        """(values (n_rows, Q) of ``dtype``, indices (n_rows, Q), source row numbers (n_rows,) int64) to
        compute a chunk into: this thread's arrays of the pass, but new ones when the sketch goes to the
        driver (they travel in the accumulator; a store's write copies them)."""
        scratch = self.scratch if self.target is not None else ThreadScratch()
        Q = self.transform.n_kept
        return scratch.rows(n_rows, ((Q,), dtype), ((Q,), self.transform.index_dtype), ((), np.int64))

    def new_acc(self) -> dict:
        Q = self.transform.n_kept
        return {"row": np.zeros(0, dtype=np.int64), "values": np.zeros((0, Q)),
                "indices": np.zeros((0, Q), dtype=self.transform.index_dtype), "w": np.zeros(0),
                "max_abs": np.zeros(1)}

    def run(self, chunk: Chunk, acc: dict) -> None:
        X, w = chunk.X, chunk.w
        rows = None  # the source's order: rows chunk.start onwards, numbered below
        if chunk.perm is not None:  # rows kept in another order: sketched and written in the source's
            rows = chunk.source_rows(np.arange(chunk.n_rows))
            order = np.argsort(rows, kind="stable")
            X, rows, w = X[order], rows[order], (w[order] if w.shape[0] else w)
        values, indices, numbers = self.arrays(chunk.n_rows, chunk.X.dtype)
        if rows is None:
            rows = numbers
            count_from(chunk.start, rows)
        for start in range(0, chunk.n_rows, SKETCH_BLOCK):  # the DCT's temporaries of one block only
            block = slice(start, start + SKETCH_BLOCK)
            self.transform.sketch_into(X[block], rows[block], values[block], indices[block])
        largest = chunk.largest if chunk.largest is not None else max_abs(X)  # measured when validated
        acc["max_abs"][0] = max(acc["max_abs"][0], largest)  # the range rule of every fit (seeding's)
        if self.target is not None:
            write_sketch_rows(self.target, chunk.start, values, indices, w if w.shape[0] else None)
            return
        part = {"row": rows, "values": values, "indices": indices, "w": w if w.shape[0] else np.ones(len(rows))}
        acc.update(self.merge(acc, {**part, "max_abs": acc["max_abs"]}))

    @staticmethod
    def merge(a: dict, b: dict) -> dict:
        rows = merge_row_lists({k: v for k, v in a.items() if k != "max_abs"},
                               {k: v for k, v in b.items() if k != "max_abs"})
        return {**rows, "max_abs": np.maximum(a["max_abs"], b["max_abs"])}


class Sketch:
    """SGMM's preconditioned random sparsification (Kightley & Becker 2019 Alg. 1), as a streaming chunk transform.

    Parameters
    ----------
    n_kept : int
        Q, entries kept per row (1 <= Q <= P).
    n_shared : int, default=0
        Q_S, how many of them are the same for every row (0 <= Q_S <= Q): Kightley & Becker 2019 Sec. IV-C; a
        k-means++ seeding on sketches needs overlapping entries to compare rows.
    precondition : {"dct", "none"}, default="dct"
        "dct": random sign flips then the orthonormal DCT-II, so that no entry carries much of a
        row's energy and any Q entries represent it; "none": the raw features are subsampled.
    random_state : int, default=0
        Seed of the signs, the shared features and every row's draws.
    verbose : int or bool, default=0
        Show a progress bar of the pass (chunks sketched, stderr); nothing otherwise.

    Notes
    -----
    :meth:`fit_transform` reads every row once. Cost O(N P log P) time, O(N Q) storage.
    """

    def __init__(self, n_kept: int, *, n_shared: int = 0, precondition: str = "dct", random_state: int = 0,
                 verbose: int = 0):
        self.n_kept = n_kept
        self.n_shared = n_shared
        self.precondition = precondition
        self.random_state = random_state
        self.verbose = verbose

    def check(self, n_features: int) -> None:
        """Refuse parameters that do not fit ``n_features`` (P) before any work."""
        if n_features < 2:
            raise InvalidDataError(f"cannot sketch data with {n_features} feature: a sketch keeps Q < P "
                                   "entries of each row, and one feature leaves nothing to drop")
        for name in ("n_kept", "n_shared", "random_state"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
                raise InvalidParameterError(f"{name} must be an integer, got {value!r}")
        if not 1 <= self.n_kept <= n_features:
            raise InvalidParameterError(f"n_kept (Q) must be between 1 and the {n_features} features, "
                                        f"got {self.n_kept}")
        if not 0 <= self.n_shared <= self.n_kept:
            raise InvalidParameterError(f"n_shared (Q_S) must be between 0 and n_kept = {self.n_kept}, "
                                        f"got {self.n_shared}")
        if self.precondition not in PRECONDITIONS:
            raise InvalidParameterError(f"precondition must be one of {PRECONDITIONS}, got {self.precondition!r}")

    def fit_transform(self, X, sample_weight=None, *, client=None, output=None, chunk_rows: int | None = None,
                      overwrite: bool = False, storage_options: dict | None = None) -> SketchedData:
        """Sketch every row of ``X`` (any input the estimators take) in one pass.

        Returns a :class:`SketchedData`: in memory, or written chunk by chunk by the workers to a zarr
        sketch store at ``output`` (replaced only if it is a sketch store and ``overwrite``; reopened
        with :meth:`SketchedData.open`). ``sample_weight`` travels with the sketch.
        """
        data = as_chunked_data(X, sample_weight, chunk_rows=chunk_rows, storage_options=storage_options)
        self.check(data.n_features)
        if output is None:
            with connect(client, None) as cl, self._engine(data, cl) as engine:
                sketched = self.transform_engine(engine)
            return replace(sketched, taken_from=(describe_source(X), describe_source(sample_weight)))
        transform = self._draw(data.n_features)
        data = regular_chunks(data, X, sample_weight, storage_options)
        location = Location.parse(output, storage_options)
        inputs = input_stores(X)  # empty for data in memory
        check_target(location, "sketch", overwrite=overwrite, inputs=inputs)
        with connect(client, None) as cl, writing(location, "sketch", checked=True) as target:
            create_store(target, transform, data)
            with self._engine(data, cl) as engine, engine.phase("sketch"):
                acc = engine.map_reduce(SketchOp(transform, target))
            check_not_too_small(acc["max_abs"][0], data.dtype, data.n_features)  # before the store is committed
        return SketchedData.open(location.url, storage_options)

    def transform_engine(self, engine: Engine) -> SketchedData:
        """The one pass on an open :class:`~daskclust.engine.engine.Engine` over the data (the engine's
        ``"sketch"`` phase), the sketch kept in memory."""
        data = engine.data
        self.check(data.n_features)
        transform = self._draw(data.n_features)
        with engine.phase("sketch"):
            acc = engine.map_reduce(SketchOp(transform, None))
        check_not_too_small(acc["max_abs"][0], data.dtype, data.n_features)
        weights = acc["w"] if data.weights is not None else None
        return SketchedData(acc["values"].astype(data.dtype), acc["indices"], weights, transform)

    def _draw(self, n_features: int) -> SketchTransform:
        """This sketch's operator for rows of ``n_features`` features (from its seed's streams)."""
        return SketchTransform.draw(n_features, int(self.n_kept), int(self.n_shared), self.precondition,
                                    int(self.random_state))

    def _engine(self, data: ChunkedData, client) -> Engine:
        """The engine of the pass: numpy rows pushed to the workers, others read once where they are;
        the sketch records no content fingerprint of its rows, so none is computed."""
        return Engine(data, client, persist=data.source.kind == "numpy", progress=bool(self.verbose),
                      fingerprint=False)


def regular_chunks(data: ChunkedData, X, sample_weight, storage_options) -> ChunkedData:
    """``data`` with equal row chunks (but the last), so that each engine chunk writes whole store chunks."""
    sizes = np.diff(data.bounds)
    if len(sizes) < 2 or np.all(sizes[:-1] == sizes[0]):
        return data
    return as_chunked_data(X, sample_weight, chunk_rows=int(sizes[0]), storage_options=storage_options)


def create_store(target: Location, transform: SketchTransform, data: ChunkedData) -> None:
    """The empty arrays of a sketch store, chunked like ``data``, and the transform in its attributes."""
    create_sketch_store(target, transform.attrs(), (data.n_samples, transform.n_kept),
                        int(data.bounds[1] - data.bounds[0]), data.dtype, transform.index_dtype, data.weights is not None)

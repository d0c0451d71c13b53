"""Open the supported inputs as (dask array, block source) pairs.

Supported inputs: numpy arrays, scipy.sparse matrices (in memory, read as dense rows chunk by
chunk: :class:`SparseRows`), dask arrays, ``zarr.Array``, a zarr store path
or fsspec URL (optionally with an array path inside a group) and xarray
``DataArray`` (samples x features). The dask array is what lazy outputs
(``predict`` on lazy input) are built from; the :class:`BlockSource` is how the
engine's workers get the rows of one chunk without a Dask task per chunk.
"""

from __future__ import annotations

import functools
import itertools
import os
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import dask.array as da
import numpy as np
import scipy.sparse
import zarr

from ..errors import InvalidDataError
from ..io import Location, missing_chunks
from .chunk_files import ChunkFiles

SourceKind = Literal["numpy", "zarr", "dask", "packed"]


@dataclass(frozen=True)
class PackedArrays:
    """Rows kept in several stored arrays of the same rows, read as one row each: ``pack(blocks)`` makes
    the rows of the blocks read from ``arrays`` (it checks them first: a transform's rows, e.g. SGMM
    sketches' values and indices, :mod:`daskclust.transforms.sketch`)."""

    arrays: tuple
    pack: Callable[..., np.ndarray]


@dataclass(frozen=True)
class BlockSource:
    """How a worker obtains rows ``[start, stop)`` of one array.

    kind
        ``"numpy"``: an array in the driver's memory, pushed to the workers once.
        ``"zarr"``: a ``zarr.Array`` that every worker opens and reads directly.
        ``"dask"``: any other dask array: persisted on the cluster when it fits the
        memory budget, otherwise each chunk's graph is computed where it is needed.
        ``"packed"``: :class:`PackedArrays`, zarr arrays read like ``"zarr"`` and packed into one row.
    array
        The numpy array, ``zarr.Array``, dask array or :class:`PackedArrays`.
    dtype
        The dtype rows are converted to after reading (float32 or float64 for
        data, float64 for weights).
    """

    kind: SourceKind
    array: Any
    dtype: np.dtype

    @property
    def row_bytes(self) -> int:
        """Bytes one row takes in the source array(s), as stored (before conversion to ``dtype``)."""
        arrays = self.array.arrays if self.kind == "packed" else (self.array,)
        return sum(a.dtype.itemsize * int(np.prod(a.shape[1:])) for a in arrays)

    def zarr_arrays(self) -> list:
        """The zarr arrays this source reads (none for numpy and dask sources)."""
        if self.kind == "zarr":
            return [self.array]
        return list(self.array.arrays) if self.kind == "packed" else []

    @functools.cached_property
    def chunk_files(self) -> ChunkFiles | None:
        """The stored chunks read straight into the caller's array (:mod:`~daskclust.data.chunk_files`),
        for the zarr arrays that allow it; found where the source is read (a worker), once."""
        return ChunkFiles.of(self.array, self.dtype) if self.kind == "zarr" else None

    def read(self, start: int, stop: int, out: np.ndarray | None = None) -> np.ndarray:
        """Rows ``[start, stop)`` as a C-contiguous array of ``self.dtype``: ``out`` filled and
        returned when the rows are whole chunks of a zarr array :class:`ChunkFiles` reads and ``out``
        has their shape and dtype (a streaming reader's reused buffer), else a new array."""
        files = self.chunk_files
        if files is not None and files.covers(start, stop):
            shape = (stop - start, *self.array.shape[1:])
            if out is None or out.shape != shape or out.dtype != self.dtype or not out.flags.c_contiguous:
                out = np.empty(shape, dtype=self.dtype)
            files.read_into(start, stop, out)
            return out
        if self.kind == "dask":
            block = self.array[start:stop].compute(scheduler="sync")
        elif self.kind == "packed":
            block = self.array.pack(*(array[start:stop] for array in self.array.arrays))
        else:
            block = self.array[start:stop]
        return np.ascontiguousarray(block, dtype=self.dtype)


class SparseRows:
    """A scipy.sparse matrix in memory read as dense rows: ``rows[a:b]`` is the ndarray of rows a..b-1.

    The kernels are dense; a chunk is densified where it is read (by the engine before it goes to its
    worker, by ``predict`` block by block), so the workers hold the data dense, N D itemsize bytes
    in all, and the driver never more than one dense chunk at a time besides the sparse matrix.
    """

    def __init__(self, matrix):
        self.matrix = scipy.sparse.csr_matrix(matrix)
        self.shape = self.matrix.shape
        self.dtype = self.matrix.dtype
        self.ndim = 2

    def __getitem__(self, index) -> np.ndarray:
        rows, columns = (index, slice(None)) if not isinstance(index, tuple) else (index + (slice(None),))[:2]
        return self.matrix[rows].toarray()[:, columns]

    def __len__(self) -> int:
        return self.shape[0]


def is_path_like(obj: Any) -> bool:
    return isinstance(obj, (str, os.PathLike))


def open_zarr_array(
    url: str | os.PathLike,
    array: str | None = None,
    storage_options: dict | None = None,
    ndim: int = 2,
) -> zarr.Array:
    """Open a zarr array from a store path or fsspec URL, read-only.

    If the URL points at a group, ``array`` names the array inside it; without
    ``array`` the group's ``"X"`` array is used, or its only ``ndim``-D array.
    """
    location = Location.parse(url, storage_options)  # absolute: workers may run in another directory
    url = location.url
    where = f"{url!r}" + (f" (array {array!r})" if array else "")
    try:
        node = zarr.open(store=url, mode="r", path=array, **location.zarr_kwargs)
    except FileNotFoundError as exc:
        raise InvalidDataError(f"no zarr array or group found at {where}") from exc
    except Exception as exc:  # noqa: BLE001 - damaged metadata: say so instead of a parser traceback
        raise InvalidDataError(f"cannot read the zarr store at {where} ({type(exc).__name__}: {exc})") from exc
    if isinstance(node, zarr.Array):
        return node
    names = [name for name, member in node.arrays() if member.ndim == ndim]
    if "X" in names:
        return node["X"]
    if len(names) == 1:
        return node[names[0]]
    listed = ", ".join(sorted(names)) or "none"
    raise InvalidDataError(
        f"{url!r} is a zarr group: name the array to use (array=, --array; its {ndim}-D arrays: {listed})"
    )


def open_beside(spec: str, data_url: str | None, ndim: int) -> zarr.Array:
    """``spec`` as an array of the zarr group at ``data_url`` when that group holds it (the command
    line's ``--sample-weight w`` beside DATA), else as a zarr store path or URL (its ``ndim``-D array
    when a group)."""
    if data_url is not None:
        location = Location.parse(data_url)
        node = zarr.open(store=location.url, mode="r", **location.zarr_kwargs)
        if isinstance(node, zarr.Group) and spec in node:
            return open_zarr_array(data_url, spec, ndim=ndim)
    return open_zarr_array(spec, ndim=ndim)


def as_dask(obj: Any, array: str | None = None, storage_options: dict | None = None):
    """Return ``(dask_array, source_array, kind, input_kind)`` for any supported input.

    ``source_array`` is the object the engine reads blocks from: the numpy
    array, the ``zarr.Array`` or the dask array itself.
    """
    if is_path_like(obj):
        obj = open_zarr_array(obj, array, storage_options)
        input_kind = "zarr"
    else:
        input_kind = None
    if isinstance(obj, zarr.Array):
        obj = with_absolute_root(obj)
        check_chunks_present(obj)
        return da.from_zarr(obj), obj, "zarr", input_kind or "zarr"
    if _is_xarray(obj):
        return (*as_dask(obj.data)[:3], "xarray")
    if isinstance(obj, da.Array):
        return obj, obj, "dask", "dask"
    if scipy.sparse.issparse(obj):
        if obj.ndim != 2:
            raise InvalidDataError(f"sparse input must be 2-D; got shape {obj.shape}")
        rows = SparseRows(obj)
        return da.from_array(rows, chunks=rows.shape, asarray=True), rows, "numpy", "numpy"
    try:
        arr = np.asarray(obj)
    except Exception as exc:  # noqa: BLE001 - any conversion failure means "unsupported"
        raise InvalidDataError(f"cannot interpret input of type {type(obj).__name__} as an array ({exc})") from exc
    if arr.dtype == object:  # numbers held as objects, as scikit-learn accepts; anything else: numpy's error
        arr = arr.astype(np.float64)
    return numpy_as_dask(arr), arr, "numpy", "numpy"


def numpy_as_dask(arr: np.ndarray) -> da.Array:
    """``arr`` as a dask array of one chunk that refers to it. ``da.from_array`` copies a numpy array
    and hashes its bytes for the name: 0.37-0.9 s for 60,000 x 784 float64 here, and twice the
    memory, for nothing, since the engine and the outputs read numpy rows from ``arr`` itself
    (:class:`BlockSource`); the dask array only carries shape, dtype and
    chunks. Empty and 0-d arrays (refused later with their own message) go through ``from_array``."""
    if arr.ndim == 0 or arr.size == 0:
        return da.from_array(arr, chunks=arr.shape or (1,))
    name = f"numpy-{uuid.uuid4().hex}"
    return da.Array({(name,) + (0,) * arr.ndim: arr}, name, tuple((n,) for n in arr.shape), dtype=arr.dtype)


def with_absolute_root(array: zarr.Array) -> zarr.Array:
    """``array``, reopened by its absolute path if its local store was opened by a relative one
    (a worker would resolve the relative path in its own working directory)."""
    root = getattr(array.store, "root", None)
    if root is None or os.path.isabs(os.fspath(root)):
        return array
    store = type(array.store)(os.path.abspath(os.fspath(root)), read_only=True)
    return zarr.open_array(store=store, path=array.path, mode="r")


def check_chunks_present(array: zarr.Array) -> None:
    """Refuse an array some of whose chunks are missing from the store: zarr would read them as
    its fill value, and a fit would run on made-up rows. One listing of the store."""
    missing = missing_chunks(array)
    if missing:
        rows = int(array.chunks[0])
        first = next(i for i in range(array.cdata_shape[0]) if not _chunk_row_present(array, i))
        raise InvalidDataError(
            f"the zarr array {array.store_path} is damaged: {missing} of its {array.nchunks} chunks are missing "
            f"(the first at rows {first * rows}-{min((first + 1) * rows, array.shape[0]) - 1}); zarr would read "
            "them as zeros. If they were left out on purpose (write_empty_chunks=False), rewrite the array with "
            "write_empty_chunks=True"
        )


def _chunk_row_present(array: zarr.Array, row_chunk: int) -> bool:
    """Whether every stored chunk of row-chunk ``row_chunk`` exists."""
    from zarr.core.sync import sync

    grid = [range(n) for n in array.cdata_shape[1:]]
    prefix = f"{array.path}/" if array.path else ""
    return all(sync(array.store.exists(prefix + array.metadata.encode_chunk_key((row_chunk, *rest))))
               for rest in itertools.product(*grid))


def _is_xarray(obj: Any) -> bool:
    return type(obj).__name__ == "DataArray" and hasattr(obj, "dims") and hasattr(obj, "data")

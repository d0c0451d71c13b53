"""Open the supported inputs as (dask array, block source) pairs.

Supported inputs: numpy arrays, dask arrays, ``zarr.Array``, a zarr store path
or fsspec URL (optionally with an array path inside a group) and xarray
``DataArray`` (samples x features). The dask array is what lazy outputs
(``predict`` on lazy input) are built from; the :class:`BlockSource` is how the
engine's workers get the rows of one chunk without a Dask task per chunk.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Literal

import dask.array as da
import numpy as np
import zarr

from ..errors import InvalidDataError

SourceKind = Literal["numpy", "zarr", "dask"]


@dataclass(frozen=True)
class BlockSource:
    """How a worker obtains rows ``[start, stop)`` of one array.

    kind
        ``"numpy"``: an array in the driver's memory, pushed to the workers once.
        ``"zarr"``: a ``zarr.Array`` that every worker opens and reads directly.
        ``"dask"``: any other dask array: persisted on the cluster when it fits the
        memory budget, otherwise each chunk's graph is computed where it is needed.
    array
        The numpy array, ``zarr.Array`` or dask array.
    dtype
        The dtype rows are converted to after reading (float32 or float64 for
        data, float64 for weights).
    """

    kind: SourceKind
    array: Any
    dtype: np.dtype

    def read(self, start: int, stop: int) -> np.ndarray:
        """Rows ``[start, stop)`` as a C-contiguous array of ``self.dtype``."""
        if self.kind == "dask":
            block = self.array[start:stop].compute(scheduler="sync")
        else:
            block = self.array[start:stop]
        return np.ascontiguousarray(block, dtype=self.dtype)


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
    url = os.fspath(url)
    try:
        node = zarr.open(store=url, mode="r", path=array, storage_options=storage_options)
    except FileNotFoundError as exc:
        where = f"{url!r}" + (f" (array {array!r})" if array else "")
        raise InvalidDataError(f"no zarr array or group found at {where}") from exc
    if isinstance(node, zarr.Array):
        return node
    names = [name for name, member in node.arrays() if member.ndim == ndim]
    if "X" in names:
        return node["X"]
    if len(names) == 1:
        return node[names[0]]
    listed = ", ".join(sorted(names)) or "none"
    raise InvalidDataError(
        f"{url!r} is a zarr group; pass the array to use (its {ndim}-D arrays: {listed})"
    )


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
        return da.from_zarr(obj), obj, "zarr", input_kind or "zarr"
    if _is_xarray(obj):
        return (*as_dask(obj.data)[:3], "xarray")
    if isinstance(obj, da.Array):
        return obj, obj, "dask", "dask"
    try:
        arr = np.asarray(obj)
    except Exception as exc:  # noqa: BLE001 - any conversion failure means "unsupported"
        raise InvalidDataError(f"cannot interpret input of type {type(obj).__name__} as an array") from exc
    return da.from_array(arr, chunks=arr.shape or (1,)), arr, "numpy", "numpy"


def _is_xarray(obj: Any) -> bool:
    return type(obj).__name__ == "DataArray" and hasattr(obj, "dims") and hasattr(obj, "data")

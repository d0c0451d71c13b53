"""Data sets daskclust generates (:mod:`daskclust.datasets`, ``daskclust make-data``).

Layout: a zarr v3 group marked as a daskclust ``"dataset"`` store, holding ``X`` (samples x
features, float32 or float64, zstd-compressed unless asked otherwise, chunked in rows), ``labels``
(int32, the true cluster of each row), ``centers`` (float64, the true centres) and the generator's
parameters as group attributes; every chunk stored (:data:`daskclust.io.ARRAY_CONFIG`). Written
chunk by chunk, so a set larger than memory can be made; only a data set daskclust made is
replaced, with ``overwrite``, and a local one is written beside its target and swapped in whole.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import dask.array as da
import numpy as np
import zarr
from zarr.errors import ContainsArrayError

from ..errors import InvalidDataError
from ..io import ARRAY_CONFIG, Location, writing

ChunkMaker = Callable[[int, int, int], tuple[np.ndarray, np.ndarray]]
"""``make_chunk(k, start, stop)``: rows ``[start, stop)`` of ``X`` and of ``labels``, for chunk ``k``."""


def write_dataset(
    path: str | os.PathLike,
    centres: np.ndarray,
    n_samples: int,
    chunk_rows: int,
    dtype: np.dtype,
    make_chunk: ChunkMaker,
    attrs: dict[str, Any],
    overwrite: bool,
    storage_options: dict[str, Any] | None,
    compression: str | None = "zstd",
):
    """Create the group at ``path``, fill it chunk by chunk and return it opened for reading (a ``zarr.Group``).

    ``make_chunk(k, start, stop)`` returns the rows ``[start, stop)`` of ``X``
    and ``labels`` for chunk ``k``. Written as a daskclust ``"dataset"`` store
    (:func:`daskclust.io.writing`: only a data set daskclust made is replaced,
    with ``overwrite``; a local store is written beside the target and swapped
    in when complete, and nothing is left behind if anything fails).
    """
    location = Location.parse(path, storage_options)
    with writing(location, "dataset", overwrite=overwrite) as target:
        group = zarr.open_group(target.url, mode="w", **target.zarr_kwargs)
        x_array, label_array = _create_arrays(group, centres, n_samples, chunk_rows, dtype, compression)
        for k, start in enumerate(range(0, n_samples, chunk_rows)):
            stop = min(start + chunk_rows, n_samples)
            x_array[start:stop], label_array[start:stop] = make_chunk(k, start, stop)
        group.update_attributes(attrs)
    return zarr.open_group(location.url, mode="r", **location.zarr_kwargs)


def _create_arrays(
    group: zarr.Group, centres: np.ndarray, n_samples: int, chunk_rows: int, dtype: np.dtype, compression: str | None
) -> tuple[zarr.Array, zarr.Array]:
    """Create ``X``, ``labels`` and ``centers`` in ``group``; write ``centers``."""
    n_clusters, n_features = centres.shape
    compressors = zarr.codecs.ZstdCodec(level=3)
    x_array = group.create_array(
        "X",
        shape=(n_samples, n_features),
        chunks=(chunk_rows, n_features),
        dtype=dtype,
        compressors=compressors if compression == "zstd" else None,
        dimension_names=("sample", "feature"),
        config=ARRAY_CONFIG,
    )
    label_array = group.create_array(
        "labels",
        shape=(n_samples,),
        chunks=(chunk_rows,),
        dtype=np.int32,
        compressors=compressors,
        dimension_names=("sample",),
        config=ARRAY_CONFIG,
    )
    centre_array = group.create_array(
        "centers",
        shape=(n_clusters, n_features),
        chunks=(n_clusters, n_features),
        dtype=np.float64,
        compressors=compressors,
        dimension_names=("cluster", "feature"),
        config=ARRAY_CONFIG,
    )
    centre_array[...] = centres
    return x_array, label_array


def _fsspec_kwargs(storage_options: dict[str, Any] | None) -> dict[str, Any]:
    """``storage_options`` for zarr, which rejects them (even empty) for local paths."""
    return {} if storage_options is None else {"storage_options": storage_options}


def read_dataset(path: str | os.PathLike, storage_options: dict[str, Any] | None = None
                 ) -> tuple[da.Array, da.Array | None, np.ndarray | None]:
    """``X`` and ``labels`` (lazy, chunked as stored) and ``centers`` of the group at ``path``; any
    zarr group with a 2-D array ``X`` (InvalidDataError otherwise), ``labels`` and ``centers`` optional."""
    try:
        group = zarr.open_group(os.fspath(path), mode="r", **_fsspec_kwargs(storage_options))
    except (FileNotFoundError, ContainsArrayError) as exc:
        raise InvalidDataError(f"no zarr group found at {os.fspath(path)!r}") from exc
    if "X" not in group:
        raise InvalidDataError(f"the zarr group at {os.fspath(path)!r} has no array 'X'")
    labels = da.from_zarr(group["labels"]) if "labels" in group else None
    centers = group["centers"][...] if "centers" in group else None
    return da.from_zarr(group["X"]), labels, centers

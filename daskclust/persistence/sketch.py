"""Sketch stores (``Sketch(...).fit_transform(X, output=...)``, Kightley & Becker 2019's SGMM sketches).

Layout: a zarr group marked as a daskclust ``"sketch"`` store holding ``values`` (N x Q, the data's
float type), ``indices`` (N x Q, the smallest unsigned type holding P - 1) and, when the data were
weighted, ``weights`` (N,), all chunked in the data's row chunks and stored uncompressed (the
preconditioned values are noise to a compressor); the attributes ``transform`` (the sketching
operator: P, Q, the sign flips, the shared features, the preconditioning, the seed) and
``daskclust_write`` (an id of the write). The workers write the rows of their chunks into their
own store chunks; the store is marked complete when the pass has ended. Reading checks the marks,
the arrays and every chunk's presence; the indices are range-checked as they are read
(:func:`daskclust.transforms.sketch.pack_sketch`) and the transform by its own class.
"""

from __future__ import annotations

import uuid

import numpy as np
import zarr

from ..errors import InvalidDataError
from ..io import ARRAY_CONFIG, COMPLETE_ATTR, KIND_ATTR, Location, missing_chunks, read_root_attrs

ARRAYS = ("values", "indices", "weights")


def create_sketch_store(target: Location, transform: dict, shape: tuple[int, int], span_rows: int, value_dtype,
                        index_dtype, weighted: bool) -> None:
    """The empty arrays of a sketch store at ``target`` (the location :func:`daskclust.io.writing` gives):
    ``shape`` = (N, Q), chunks of ``span_rows`` rows, ``transform`` (its attributes) recorded."""
    group = zarr.open_group(target.url, mode="w", **target.zarr_kwargs)
    group.attrs.update({"transform": transform, "daskclust_write": uuid.uuid4().hex})
    N, Q = shape
    group.create_array("values", shape=(N, Q), chunks=(span_rows, Q), dtype=value_dtype, config=ARRAY_CONFIG,
                       compressors=None)
    group.create_array("indices", shape=(N, Q), chunks=(span_rows, Q), dtype=index_dtype, config=ARRAY_CONFIG,
                       compressors=None)
    if weighted:
        group.create_array("weights", shape=(N,), chunks=(span_rows,), dtype=np.float64, config=ARRAY_CONFIG)


def write_sketch_rows(target: Location, start: int, values: np.ndarray, indices: np.ndarray,
                      weights: np.ndarray | None) -> None:
    """Write the sketches of rows ``start`` onwards (a whole store chunk, run on the worker holding it),
    every chunk stored (:data:`~daskclust.io.ARRAY_CONFIG`, a runtime setting of the opened arrays: a
    chunk of zeros left out would read as damage)."""
    group = zarr.open_group(target.url, mode="r+", **target.zarr_kwargs)
    span = slice(start, start + len(values))
    group["values"].with_config(ARRAY_CONFIG)[span] = values
    group["indices"].with_config(ARRAY_CONFIG)[span] = indices
    if weights is not None:
        group["weights"].with_config(ARRAY_CONFIG)[span] = weights


def open_sketch_store(location: Location) -> tuple[object, object, object | None, dict]:
    """(values, indices, weights or None as ``zarr.Array``, the transform's attributes) of the complete
    sketch store at ``location``; a missing, incomplete or damaged one is an InvalidDataError."""
    attrs = read_root_attrs(location)
    if not attrs or attrs.get(KIND_ATTR) != "sketch" or not attrs.get(COMPLETE_ATTR):
        raise InvalidDataError(f"{location} is not a complete daskclust sketch store")
    group = zarr.open_group(location.url, mode="r", **location.zarr_kwargs)
    try:
        arrays = {name: group[name] for name in ARRAYS if name in group or name != "weights"}
    except KeyError as exc:
        raise InvalidDataError(f"{location} is a damaged sketch store: its array {exc} is missing") from exc
    if not all(isinstance(array, zarr.Array) for array in arrays.values()):
        raise InvalidDataError(f"{location} is a damaged sketch store: its values, indices and weights must be arrays")
    damaged = sorted(name for name, array in arrays.items() if missing_chunks(array))
    if damaged:
        raise InvalidDataError(f"{location} is a damaged sketch store: chunks of {', '.join(damaged)} are missing")
    transform = attrs.get("transform") if isinstance(attrs.get("transform"), dict) else {}
    return arrays["values"], arrays["indices"], arrays.get("weights"), transform

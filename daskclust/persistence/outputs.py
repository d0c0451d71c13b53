"""Per-row outputs written to zarr (``predict`` / ``transform`` / ``score_samples`` with ``output=``):
labels, distances, scores.

Layout: one zarr array (a store of kind ``"labels"``, ``"distances"`` or ``"scores"``) of one row
per input row, (N,) or (N, width), chunked in spans of rows that one task each writes, every
chunk stored (:data:`daskclust.io.ARRAY_CONFIG`), with the attribute ``daskclust_write`` (an id of
the write); written beside the target and swapped in by :func:`daskclust.io.writing`.
"""

from __future__ import annotations

import uuid

import zarr

from ..io import ARRAY_CONFIG, Location


def create_output(target: Location, shape: tuple[int, ...], span_rows: int, dtype):
    """A new output array at ``target`` (the location :func:`daskclust.io.writing` gives), chunked in
    spans of ``span_rows`` rows; returns the writable ``zarr.Array``."""
    return zarr.create_array(target.url, shape=shape, chunks=(span_rows,) + tuple(shape[1:]), dtype=dtype,
                             overwrite=True, config=ARRAY_CONFIG, attributes={"daskclust_write": uuid.uuid4().hex},
                             **target.zarr_kwargs)


def open_output(location: Location):
    """The output array stored at ``location``, read-only (a ``zarr.Array``)."""
    return zarr.open_array(location.url, mode="r", **location.zarr_kwargs)

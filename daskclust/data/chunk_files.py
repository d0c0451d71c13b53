"""Whole stored chunks of a local zarr array read straight into the caller's array.

zarr-python reads a chunk file into a new bytes object, decodes it into another new array and
copies that into the array it returns: two or three passes over freshly mapped memory per chunk,
five times the CPU of the read itself for an uncompressed 64 MiB chunk in the page cache (measured
in the out-of-core benchmark's data, ``daskclust bench --suite outofcore``). For the arrays the
engine streams most -- zarr v3 on a local file system, one chunk across the columns, stored with
the bytes codec alone or followed by zstd, in the dtype the engine computes in -- rows made of
whole stored chunks are read here instead: an uncompressed chunk file with one ``readinto`` into
the caller's rows, a zstd chunk decompressed from the file's pages (mapped, not copied) into them.
Any other array, store or request is left to zarr (:meth:`ChunkFiles.covers` says which).

What zarr checks is checked here too: a chunk file must hold exactly one chunk's bytes (its
uncompressed length, or its zstd frame's declared content size), else the read fails with
:class:`~daskclust.errors.InvalidDataError`; so does a missing file, which zarr would read as the
fill value (the data layer refuses arrays with missing chunks when it opens them,
:func:`~daskclust.data.sources.check_chunks_present`; a file deleted later is caught here).
"""

from __future__ import annotations

import mmap
import os
import sys
from dataclasses import dataclass

import numpy as np
import zarr

from ..errors import InvalidDataError

ZSTD_MAGIC = 0xFD2FB528


@dataclass(frozen=True)
class ChunkFiles:
    """The chunk files of ``array`` (see the module docstring for the arrays this applies to)."""

    array: zarr.Array
    directory: str
    compressed: bool

    @classmethod
    def of(cls, array, dtype: np.dtype) -> ChunkFiles | None:
        """The chunk files of a zarr ``array`` read as ``dtype``, or None when zarr must read it."""
        if not isinstance(array, zarr.Array) or array.metadata.zarr_format != 3 or array.ndim not in (1, 2):
            return None
        if not isinstance(array.store, zarr.storage.LocalStore) or np.dtype(array.dtype) != np.dtype(dtype):
            return None
        if tuple(array.chunks[1:]) != tuple(array.shape[1:]):  # one chunk across the columns
            return None
        codecs = tuple(array.metadata.codecs)
        if not codecs or not isinstance(codecs[0], zarr.codecs.BytesCodec):
            return None
        endian = codecs[0].endian
        if np.dtype(dtype).itemsize > 1 and (endian is None or endian.value != sys.byteorder):
            return None
        if len(codecs) == 2 and not isinstance(codecs[1], zarr.codecs.ZstdCodec) or len(codecs) > 2:
            return None
        return cls(array, os.path.join(os.fspath(array.store.root), array.path), len(codecs) == 2)

    @property
    def chunk_rows(self) -> int:
        return int(self.array.chunks[0])

    def covers(self, start: int, stop: int) -> bool:
        """Whether rows ``[start, stop)`` are whole stored chunks (the array's last one may be partial;
        a compressed one is then left to zarr)."""
        rows, n = self.chunk_rows, int(self.array.shape[0])
        if start % rows or not 0 <= start < stop <= n:
            return False
        return (stop - start) % rows == 0 or (stop == n and not self.compressed)

    def read_into(self, start: int, stop: int, out: np.ndarray) -> None:
        """Fill ``out`` (C-contiguous, shape ``(stop - start, *columns)``, the array's dtype) with rows
        ``[start, stop)``, which :meth:`covers` accepts."""
        rows = self.chunk_rows
        flat = memoryview(out.reshape(-1)).cast("B")
        row_bytes = out.itemsize * (out.size // max(out.shape[0], 1))
        for first in range(start, stop, rows):
            index = (first // rows,) + (0,) * (self.array.ndim - 1)
            path = os.path.join(self.directory, self.array.metadata.encode_chunk_key(index))
            part = flat[(first - start) * row_bytes: (min(first + rows, stop) - start) * row_bytes]
            try:
                if self.compressed:
                    _decompress_file(path, part, rows * row_bytes)
                else:
                    _read_file(path, part, rows * row_bytes)
            except FileNotFoundError as exc:
                raise InvalidDataError(f"the zarr chunk file {path} is missing: the array lost a chunk "
                                       "after it was opened") from exc


def _read_file(path: str, into: memoryview, stored: int) -> None:
    """Read the first ``len(into)`` bytes of the chunk file ``path`` (``stored`` bytes long) into ``into``."""
    with open(path, "rb", buffering=0) as fh:
        size = os.fstat(fh.fileno()).st_size
        got = fh.readinto(into) if size == stored else -1
    if got != len(into):
        raise InvalidDataError(f"the zarr chunk file {path} is damaged: {size} bytes where a chunk takes {stored}")


def _decompress_file(path: str, into: memoryview, stored: int) -> None:
    """Decompress the zstd chunk file ``path`` (one frame of ``stored`` bytes) into ``into``."""
    from numcodecs.zstd import decompress

    with open(path, "rb", buffering=0) as fh:
        size = os.fstat(fh.fileno()).st_size
        if size == 0:  # nothing to map
            raise InvalidDataError(f"the zarr chunk file {path} is damaged: it is empty")
        with mmap.mmap(fh.fileno(), size, prot=mmap.PROT_READ) as pages:
            declared = frame_content_size(pages)
            if declared != stored:
                raise InvalidDataError(f"the zarr chunk file {path} is damaged: its zstd frame declares "
                                       f"{declared} bytes where a chunk takes {stored}")
            try:
                decompress(pages, into)
            except (RuntimeError, ValueError) as exc:  # numcodecs' words for a frame it cannot decode
                raise InvalidDataError(f"the zarr chunk file {path} is damaged: {exc}") from exc


def frame_content_size(frame) -> int | None:
    """The content size a zstd frame's header declares (RFC 8878 Sec. 3.1.1), or None when it is not
    a zstd frame or declares none."""
    head = bytes(frame[:18])
    if len(head) < 6 or int.from_bytes(head[:4], "little") != ZSTD_MAGIC:
        return None
    descriptor = head[4]
    fcs_flag, single_segment, dict_flag = descriptor >> 6, (descriptor >> 5) & 1, descriptor & 3
    at = 5 + (0 if single_segment else 1) + (0, 1, 2, 4)[dict_flag]
    width = (1 if single_segment else 0, 2, 4, 8)[fcs_flag]
    if width == 0 or len(head) < at + width:
        return None
    value = int.from_bytes(head[at:at + width], "little")
    return value + 256 if width == 2 else value

"""Whole zarr chunks read straight into the caller's array (:mod:`daskclust.data.chunk_files`): the
rows zarr reads, for every layout it applies to; zarr's own read for the others; damaged files refused."""

from __future__ import annotations

import numpy as np
import pytest
import zarr

from daskclust.data.chunk_files import ChunkFiles, frame_content_size
from daskclust.data.sources import BlockSource
from daskclust.errors import InvalidDataError

ZSTD = zarr.codecs.ZstdCodec(level=3, checksum=False)


def stored(tmp_path, shape, chunks, dtype="float32", compressors=None, name="x.zarr", **kwargs):
    values = np.random.default_rng(0).normal(size=shape).astype(dtype)
    array = zarr.create_array(str(tmp_path / name), shape=shape, chunks=chunks, dtype=dtype,
                              compressors=compressors, **kwargs)
    array[...] = values
    return zarr.open_array(str(tmp_path / name), mode="r"), values


@pytest.mark.parametrize("compressors", [None, ZSTD], ids=["raw", "zstd"])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_whole_chunks_read_as_zarr_reads_them(tmp_path, compressors, dtype):
    array, values = stored(tmp_path, (1000, 7), (300, 7), dtype, compressors)
    source = BlockSource("zarr", array, np.dtype(dtype))
    files = source.chunk_files
    assert files is not None and files.compressed == (compressors is not None)
    for start, stop in ((0, 300), (300, 900), (0, 900), (900, 1000), (600, 1000), (0, 1000)):
        whole = files.covers(start, stop)
        assert whole == (stop != 1000 or compressors is None)  # a partial last chunk is left to zarr when compressed
        into = np.full((stop - start, 7), np.nan, dtype=dtype)
        got = source.read(start, stop, into)
        assert (got is into) == whole
        np.testing.assert_array_equal(got, values[start:stop])
    for start, stop in ((5, 300), (0, 299), (300, 301)):  # not whole chunks: zarr reads them
        assert not files.covers(start, stop)
        np.testing.assert_array_equal(source.read(start, stop, np.empty((stop - start, 7), dtype)), values[start:stop])


@pytest.mark.parametrize("compressors", [None, ZSTD], ids=["raw", "zstd"])
def test_weights_one_dimensional(tmp_path, compressors):
    array, values = stored(tmp_path, (1000,), (250,), "float64", compressors)
    source = BlockSource("zarr", array, np.dtype(np.float64))
    assert source.chunk_files is not None
    np.testing.assert_array_equal(source.read(250, 1000), values[250:])


def test_a_wrong_buffer_is_not_used(tmp_path):
    array, values = stored(tmp_path, (600, 4), (300, 4))
    source = BlockSource("zarr", array, np.dtype(np.float32))
    for wrong in (np.empty((300, 4), np.float64), np.empty((299, 4), np.float32), np.empty((4, 300), np.float32).T):
        got = source.read(0, 300, wrong)
        assert got is not wrong and got.flags.c_contiguous
        np.testing.assert_array_equal(got, values[:300])


def test_other_layouts_are_left_to_zarr(tmp_path):
    cases = {
        "columns in two chunks": stored(tmp_path, (600, 8), (300, 4), name="a.zarr")[0],
        "other codec": stored(tmp_path, (600, 8), (300, 8), compressors=zarr.codecs.GzipCodec(), name="b.zarr")[0],
        "big endian": stored(tmp_path, (600, 8), (300, 8), serializer=zarr.codecs.BytesCodec(endian="big"),
                             name="c.zarr")[0],
        "sharded": stored(tmp_path, (600, 8), (100, 8), shards=(300, 8), name="d.zarr")[0],
        "zarr v2": stored(tmp_path, (600, 8), (300, 8), zarr_format=2, name="e.zarr")[0],
        "in memory": zarr.create_array(zarr.storage.MemoryStore(), shape=(600, 8), chunks=(300, 8), dtype="float32"),
    }
    for what, array in cases.items():
        assert ChunkFiles.of(array, np.dtype(np.float32)) is None, what
        np.testing.assert_array_equal(BlockSource("zarr", array, np.dtype(np.float32)).read(0, 300), array[:300])
    converted, values = stored(tmp_path, (600, 8), (300, 8), "float16", name="f.zarr")
    source = BlockSource("zarr", converted, np.dtype(np.float32))  # float16 rows are computed in float32
    assert source.chunk_files is None
    np.testing.assert_array_equal(source.read(0, 300), values[:300].astype(np.float32))


@pytest.mark.parametrize("compressors", [None, ZSTD], ids=["raw", "zstd"])
@pytest.mark.parametrize("damage", ["truncate", "extend", "empty", "delete"])
def test_damaged_chunk_files_are_refused(tmp_path, compressors, damage):
    array, _ = stored(tmp_path, (600, 8), (300, 8), compressors=compressors)
    chunk = tmp_path / "x.zarr" / "c" / "1" / "0"
    content = chunk.read_bytes()
    if damage == "delete":
        chunk.unlink()
    else:
        chunk.write_bytes({"truncate": content[:-9], "extend": content + b"\0" * 9, "empty": b""}[damage])
    source = BlockSource("zarr", array, np.dtype(np.float32))
    np.testing.assert_array_equal(source.read(0, 300), array[:300])  # the intact chunk
    with pytest.raises(InvalidDataError, match="chunk file .*c/1/0 is (damaged|missing)"):
        source.read(300, 600)


def test_a_frame_declaring_another_size_is_refused(tmp_path):
    array, values = stored(tmp_path, (600, 8), (300, 8), compressors=ZSTD)
    other, _ = stored(tmp_path, (600, 4), (300, 4), compressors=ZSTD, name="y.zarr")  # chunks half as long
    assert frame_content_size((tmp_path / "x.zarr" / "c" / "0" / "0").read_bytes()) == 300 * 8 * 4
    (tmp_path / "x.zarr" / "c" / "1" / "0").write_bytes((tmp_path / "y.zarr" / "c" / "1" / "0").read_bytes())
    with pytest.raises(InvalidDataError, match="declares 4800 bytes where a chunk takes 9600"):
        BlockSource("zarr", array, np.dtype(np.float32)).read(300, 600)
    assert frame_content_size(b"not a zstd frame") is None

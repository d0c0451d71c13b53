"""An operation riding along the next pass over the rows (``Engine.ride_along``): one read of a streamed store for two."""

from __future__ import annotations

import numpy as np
import zarr

from daskclust.data import as_chunked_data
from daskclust.em.stored_state import CheckStateOp
from daskclust.engine.engine import Engine
from daskclust.transforms.coreset import MomentsOp, RowGeometry


def test_an_operation_rides_along_the_next_pass_that_reads_the_rows(client, tmp_path):
    X = np.random.default_rng(0).normal(size=(3000, 4))
    zarr.create_array(tmp_path / "x.zarr", data=X, chunks=(500, 4))
    data = as_chunked_data(str(tmp_path / "x.zarr"), chunk_rows=500)
    moments = MomentsOp(RowGeometry(4), data.n_chunks)
    with Engine(data, client, persist=False) as engine:  # streamed: every pass over the rows reads the store
        alone = engine.map_reduce(moments)
        assert engine.bytes_read() == X.nbytes
        engine.ride_along(MomentsOp(RowGeometry(4), data.n_chunks))
        assert engine.map_reduce(CheckStateOp(3)) == [] and engine.ridden() is None  # a pass without rows: it waits
        assert engine.bytes_read() == X.nbytes
        host = engine.map_reduce(moments)
        assert engine.bytes_read() == 2 * X.nbytes  # both operations, one read
        np.testing.assert_array_equal(host, alone)
        np.testing.assert_array_equal(engine.ridden(), alone)
        engine.map_reduce(moments)  # it rode once
        assert engine.bytes_read() == 3 * X.nbytes
        np.testing.assert_array_equal(engine.ridden(), alone)
        engine.ride_along(MomentsOp(RowGeometry(4), data.n_chunks))
        engine.ride_along(None)  # dropped
        engine.map_reduce(moments)
        assert engine.ridden() is None
        engine.ride_along(MomentsOp(RowGeometry(4), data.n_chunks))
        engine.forget()  # a new run's engine: nothing waits
        engine.map_reduce(moments)
        assert engine.ridden() is None

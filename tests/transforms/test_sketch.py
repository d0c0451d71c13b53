"""SGMM sketches (Kightley & Becker 2019): the transform, the family on the engine, its seeding."""

from __future__ import annotations

import os

import numpy as np
import pytest

from daskclust.em.loop import EMSettings, LoopState, run_em
from daskclust.engine.engine import Engine
from daskclust.errors import InvalidDataError, InvalidParameterError
from daskclust.models import FAMILIES, Params
from daskclust.models.sketched import SketchedFamily
from daskclust.search import SearchConfig, make_search
from daskclust.seeding import seed
from daskclust.seeding.sketch import seed_sketches
from daskclust.transforms import Sketch, SketchedData
from daskclust.transforms.sketch import SketchTransform, pack_sketch

from conftest import blobs

SEARCHES = ("full", "exhaustive", "estimated", "sampled")


def test_preconditioning_round_trips():
    X = np.random.default_rng(0).normal(size=(300, 50)) * 10
    for precondition in ("dct", "none"):
        t = SketchTransform.draw(50, 50, 0, precondition, 4)
        Y = t.precondition_rows(X)
        assert np.allclose(t.invert(Y), X, rtol=0, atol=1e-12)
        # H D is orthonormal: norms and distances are kept
        assert np.allclose(np.linalg.norm(Y, axis=1), np.linalg.norm(X, axis=1), rtol=1e-13)
    assert set(np.unique(SketchTransform.draw(50, 5, 0, "dct", 4).signs)) == {-1, 1}


def test_index_draws_are_distinct_sorted_and_hold_the_shared_features():
    P, Q, QS = 300, 20, 6
    t = SketchTransform.draw(P, Q, QS, "dct", 9)
    rows = np.arange(2000, 4000)
    _, idx = t.sketch_rows(np.ones((len(rows), P)), rows)
    assert idx.dtype == np.uint16 and idx.shape == (len(rows), Q)
    assert np.all(np.diff(idx.astype(int), axis=1) > 0)  # sorted, so no repetition
    assert all(np.isin(t.shared, r).all() for r in idx)
    # the free draws cover the features uniformly: each non-shared feature ~ (Q - QS) / (P - QS) of rows
    counts = np.bincount(idx.ravel().astype(int), minlength=P)
    free = np.setdiff1d(np.arange(P), t.shared)
    expected = len(rows) * (Q - QS) / (P - QS)
    assert np.all(np.abs(counts[free] - expected) < 6 * np.sqrt(expected))
    assert np.all(counts[t.shared] == len(rows))
    assert SketchTransform.draw(200, 5, 0, "dct", 0).index_dtype == np.uint8


def test_sketch_is_deterministic_across_workers_and_chunking(client, client_one_worker, tmp_path):
    X, _ = blobs(3000, 40, 4, seed=1)
    a = Sketch(7, n_shared=2, random_state=5).fit_transform(X, client=client, chunk_rows=400)
    b = Sketch(7, n_shared=2, random_state=5).fit_transform(X, client=client_one_worker, chunk_rows=1000)
    assert np.array_equal(a.values, b.values) and np.array_equal(a.indices, b.indices)
    stored = Sketch(7, n_shared=2, random_state=5).fit_transform(X, client=client, chunk_rows=700,
                                                                 output=tmp_path / "s.zarr")
    assert np.array_equal(stored.values[:], a.values) and np.array_equal(stored.indices[:], a.indices)
    again = SketchedData.open(tmp_path / "s.zarr")
    assert np.array_equal(again.transform.signs, a.transform.signs)
    assert np.array_equal(again.transform.shared, a.transform.shared)
    c = Sketch(7, n_shared=2, random_state=6).fit_transform(X, client=client, chunk_rows=400)
    assert not np.array_equal(c.indices, a.indices)
    # the values are the preconditioned rows at the kept indices
    full = a.transform.precondition_rows(X)
    assert np.allclose(np.take_along_axis(full, a.indices.astype(int), axis=1), a.values, rtol=0, atol=1e-12)


def test_a_pass_to_a_store_reuses_its_arrays_per_thread(tmp_path):
    """Written to a store, every chunk of a thread is sketched into the same arrays (no fresh pages per
    chunk), a shorter last chunk into their head, and the store holds every row's sketch; sent to the
    driver, every chunk gets arrays of its own."""
    from concurrent.futures import ThreadPoolExecutor

    import zarr

    from daskclust.data import as_chunked_data
    from daskclust.engine.ops import Chunk
    from daskclust.io import Location
    from daskclust.transforms.sketch import SketchOp, create_store

    X, _ = blobs(1000, 12, 3, seed=2)
    transform = SketchTransform.draw(12, 3, 1, "dct", 0)
    target = Location.parse(tmp_path / "s.zarr")
    create_store(target, transform, as_chunked_data(X, chunk_rows=300))
    op = SketchOp(transform, target)
    seen = []
    for start in (0, 300, 600, 900):
        rows = X[start:start + 300]
        seen.append(op.arrays(len(rows), rows.dtype))
        op.run(Chunk(start // 300, start, rows, np.zeros(0)), op.new_acc())
    assert all(np.shares_memory(a[0], seen[0][0]) and np.shares_memory(a[1], seen[0][1]) for a in seen)
    assert len(op.scratch.held) == 1 and seen[-1][0].shape == (100, 3)
    with ThreadPoolExecutor(1) as other:
        other.submit(op.arrays, 300, X.dtype).result()
    assert len(op.scratch.held) == 2
    values, indices = transform.sketch_rows(X, np.arange(1000))
    group = zarr.open_group(target.url, mode="r")
    assert np.array_equal(group["values"][:], values.astype(X.dtype)) and np.array_equal(group["indices"][:], indices)
    to_driver = SketchOp(transform, None)
    assert not np.shares_memory(to_driver.arrays(300, X.dtype)[0], to_driver.arrays(300, X.dtype)[0])


def test_weights_travel_with_the_sketch(client, tmp_path):
    X, _ = blobs(500, 10, 3, seed=2)
    w = np.random.default_rng(0).uniform(0.5, 2, len(X))
    mem = Sketch(4).fit_transform(X, w, client=client, chunk_rows=128)
    assert np.array_equal(mem.weights, w)
    stored = Sketch(4).fit_transform(X, w, client=client, chunk_rows=128, output=tmp_path / "w.zarr")
    assert np.array_equal(stored.weights[:], w)


def test_a_chunk_of_zeros_is_stored(client, tmp_path):
    """A chunk of all-zero rows sketches to values equal to the store's fill value: it is written all
    the same (the reader takes a missing chunk for damage)."""
    X, _ = blobs(800, 10, 3, seed=4)
    X[200:400] = 0.0
    stored = Sketch(3).fit_transform(X, client=client, chunk_rows=200, output=tmp_path / "z.zarr")
    assert np.all(stored.values[200:400] == 0)
    again = SketchedData.open(tmp_path / "z.zarr")
    assert np.array_equal(again.values[:], Sketch(3).fit_transform(X, client=client, chunk_rows=200).values)


@pytest.mark.parametrize("P, Q, n_shared", [(32, 4, 0), (32, 4, 2), (64, 24, 0), (300, 40, 5), (784, 31, 0), (784, 78, 0)])
def test_kept_entries_are_those_of_the_whole_transform_either_route(P, Q, n_shared):
    """Few kept entries are computed as products with rows of H D, many from the whole DCT: the same values
    (to round-off), the same sorted draws."""
    t = SketchTransform.draw(P, Q, n_shared, "dct", 2)
    X = np.random.default_rng(1).normal(size=(400, P)) * 50
    rows = np.arange(5000, 5400)
    values, idx = t.sketch_rows(X, rows)
    assert t.direct == (Q <= 4 * np.log2(P))
    assert np.all(np.diff(idx.astype(int), axis=1) > 0) and all(np.isin(t.shared, r).all() for r in idx)
    full = t.precondition_rows(X)
    np.testing.assert_allclose(values, np.take_along_axis(full, idx.astype(int), axis=1), rtol=0, atol=1e-12)
    into = np.empty((400, Q), np.float32), np.empty((400, Q), t.index_dtype)
    t.sketch_into(X.astype(np.float32), rows, *into)
    assert np.array_equal(into[1], idx)
    np.testing.assert_allclose(into[0], values, rtol=1e-6, atol=1e-4)


@pytest.mark.parametrize("kwargs, error, match", [
    (dict(n_kept=11), InvalidParameterError, "n_kept"),
    (dict(n_kept=0), InvalidParameterError, "n_kept"),
    (dict(n_kept=4, n_shared=5), InvalidParameterError, "n_shared"),
    (dict(n_kept=4, n_shared=-1), InvalidParameterError, "n_shared"),
    (dict(n_kept=2.5), InvalidParameterError, "integer"),
    (dict(n_kept=4, precondition="fft"), InvalidParameterError, "precondition"),
])
def test_bad_parameters_are_refused_and_nothing_is_written(client, tmp_path, kwargs, error, match):
    X, _ = blobs(200, 10, 2)
    with pytest.raises(error, match=match):
        Sketch(**kwargs).fit_transform(X, client=client, output=tmp_path / "out.zarr")
    assert not os.path.exists(tmp_path / "out.zarr")


def test_one_feature_and_nan_rows_are_refused(client, tmp_path):
    with pytest.raises(InvalidDataError, match="1 feature"):
        Sketch(1).fit_transform(np.ones((50, 1)), client=client, output=tmp_path / "one.zarr")
    assert not os.path.exists(tmp_path / "one.zarr")
    X, _ = blobs(200, 10, 2)
    X[150, 3] = np.nan
    with pytest.raises(InvalidDataError, match="row 150"):
        Sketch(3).fit_transform(X, client=client, chunk_rows=64, output=tmp_path / "nan.zarr")
    assert not os.path.exists(tmp_path / "nan.zarr")


def fit_on(client, data, family, params, search, n_truncated, iters, labels_from=None):
    """EM from ``params`` on the engine (seed labels from the nearest initial mean), its history and result."""
    C = len(params.means)
    with Engine(data, client) as engine:
        if isinstance(family, SketchedFamily):
            seed_sketches(engine, family, C, len(params.means[0]), seed=0, reg=0.0, centres=params.means)
        else:
            seed(engine, params.means, C, seed=0)
        settings = EMSettings(C, n_truncated, family, iters, 0.0, 1e-6, 0, 11)
        config = SearchConfig(C, n_truncated, min(4, C), 1, 3, metric=family.metric)
        return run_em(engine, LoopState(0, params), settings, make_search(search, config))


@pytest.mark.parametrize("search, n_truncated", [("full", 6), ("estimated", 2)])
def test_full_sketch_without_preconditioning_is_the_diagonal_mixture(client, search, n_truncated):
    """Q = P, no preconditioning: every row keeps every feature (in its own drawn order), so SGMM
    is the diagonal GMM, iteration by iteration."""
    X, centres = blobs(1500, 6, 6, seed=4, spread=3.0)
    sketched = Sketch(6, precondition="none", random_state=1).fit_transform(X, client=client, chunk_rows=256)
    rng = np.random.default_rng(0)
    start = Params(centres + rng.normal(scale=0.5, size=centres.shape), np.full(6, 1 / 6),
                   rng.uniform(0.5, 2.0, centres.shape))
    a = fit_on(client, sketched.chunked(256), SketchedFamily("diag", 6), start, search, n_truncated, 8)
    from daskclust.data import as_chunked_data
    b = fit_on(client, as_chunked_data(X, chunk_rows=256), FAMILIES["diag"], start, search, n_truncated, 8)
    fa = [r["free_energy"] for r in a.history]
    fb = [r["free_energy"] for r in b.history]
    assert len(fa) == len(fb) == 9
    assert np.allclose(fa, fb, rtol=0, atol=1e-8)
    assert np.allclose(a.params.means, b.params.means, rtol=0, atol=1e-8)
    assert np.allclose(a.params.covariances, b.params.covariances, rtol=0, atol=1e-8)
    assert np.allclose(a.params.weights, b.params.weights, rtol=0, atol=1e-10)


@pytest.mark.parametrize("covariance_type", ["diag", "spherical"])
@pytest.mark.parametrize("search", SEARCHES)
def test_free_energy_never_decreases_on_sketches(client, covariance_type, search):
    X, _ = blobs(3000, 32, 12, seed=7, spread=4.0)
    sketched = Sketch(6, n_shared=2, random_state=2).fit_transform(X, client=client, chunk_rows=500)
    family = SketchedFamily(covariance_type, 6)
    n_truncated = 12 if search == "full" else 3
    with Engine(sketched.chunked(500), client) as engine:
        seeding, start = seed_sketches(engine, family, 12, 32, seed=3, reg=1e-6)
        settings = EMSettings(12, n_truncated, family, 25, 0.0, 1e-6, 0, 3)
        search_ = make_search(search, SearchConfig(12, n_truncated, 4, 1, 3, metric=False))
        result = run_em(engine, LoopState(0, start), settings, search_)
    F = np.array([r["free_energy"] for r in result.history])
    assert len(F) == 26
    assert np.all(np.diff(F) >= -1e-9 * np.abs(F[1:]))
    assert F[-1] > F[0] + 0.1  # it learned something
    assert seeding.n_distances == 12 * 2000 + 12 * 3000  # k-means++ over the sample, then the bootstrap pass


def test_bytes_read_counts_what_the_workers_read(client, tmp_path):
    """The engine's read counter against the stores' sizes: a streamed zarr array is read once per
    pass, a persisted one once; a pass over a sketch store reads the sketch, never the raw rows."""
    import zarr

    from daskclust.data import as_chunked_data
    from daskclust.transforms.coreset import MomentsOp, RowGeometry

    X = np.random.default_rng(0).normal(size=(3000, 8)).astype(np.float32)
    zarr.create_array(tmp_path / "x.zarr", data=X, chunks=(500, 8))
    data = as_chunked_data(str(tmp_path / "x.zarr"), chunk_rows=500)
    for persist, reads in ((False, 3), (True, 1)):
        with Engine(data, client, persist=persist) as engine:
            for _ in range(3):
                engine.map_reduce(MomentsOp(RowGeometry(8), data.n_chunks))
            assert engine.bytes_read() == reads * X.nbytes
    sketched = Sketch(3, random_state=1).fit_transform(str(tmp_path / "x.zarr"), client=client,
                                                        output=tmp_path / "s.zarr")
    assert sketched.values.dtype == np.float32 and sketched.indices.dtype == np.uint8
    packed = sketched.chunked()
    np.testing.assert_array_equal(  # the lazy view of the store: the rows the workers read, bit for bit
        packed.X.compute().view(np.int64),
        pack_sketch(sketched.values[:], sketched.indices[:], sketched.n_features).view(np.int64))
    with Engine(packed, client, persist=False) as engine:
        engine.map_reduce(MomentsOp(RowGeometry(packed.n_features), packed.n_chunks))
        engine.map_reduce(MomentsOp(RowGeometry(packed.n_features), packed.n_chunks))
        assert engine.bytes_read() == 2 * 3000 * 3 * (4 + 1)

"""The cluster ids a chunk keeps per row between passes (K(n), the seed labels): 2 bytes up to C = 32,767."""

import numpy as np
import pytest

from daskclust.em.estep_op import EStepOp
from daskclust.em.stored_state import CheckStateOp
from daskclust.engine.ops import Chunk
from daskclust.kernels.estep import SHORT_IDS, cluster_id_dtype
from daskclust.models import FAMILIES
from daskclust.names import STATE_K, STATE_SEED_LABEL
from daskclust.search import SearchConfig, make_search
from daskclust.seeding.passes import AssignOp, NearestIndex

C, ROWS, KEPT = 40, 3000, 3


def test_ids_take_two_bytes_while_every_id_fits():
    assert cluster_id_dtype(1) == np.int16
    assert cluster_id_dtype(SHORT_IDS) == np.int16
    assert cluster_id_dtype(SHORT_IDS + 1) == np.int32
    assert np.iinfo(cluster_id_dtype(SHORT_IDS)).max >= SHORT_IDS - 1  # the largest id, and -1 for unknown


def test_searches_start_their_sets_in_the_ids_of_their_clusters():
    for n_clusters in (C, SHORT_IDS + 1):
        centres = np.arange(2 * n_clusters, dtype=np.float64).reshape(n_clusters, 2)
        search = make_search("full", SearchConfig(n_clusters, 1))
        search.start(centres, 1.0)
        assert search.payload().init_sets.dtype == cluster_id_dtype(n_clusters)


def _problem(family_name: str):
    rng = np.random.default_rng(0)
    centres = rng.normal(size=(C, 2)) * 10
    X = centres[rng.integers(C, size=ROWS)] + rng.normal(size=(ROWS, 2))
    family = FAMILIES[family_name]
    search = make_search("estimated", SearchConfig(C, KEPT, 5, 1, metric=family.metric))
    search.start(centres, 1.0)
    kernel = family.kernel_params(family.initial_params(centres, 1.0, 0.0))
    return X, centres, family, search, kernel


def _assigned(X, centres) -> Chunk:
    """A chunk of the rows ``X`` after the seeding's assignment pass to ``centres``."""
    chunk, op = Chunk(0, 0, X, np.empty(0)), AssignOp(NearestIndex(centres))
    op.run(chunk, op.new_acc())
    return chunk


def _esteps(family_name: str, restored_dtype=None):
    """Two E-steps of one chunk from its seed labels (the second from the K(n) the first left, cast to
    ``restored_dtype`` as a store written with other ids would give it back, then checked as a restore
    checks it); the chunk's state and the second E-step's statistics."""
    X, centres, family, search, kernel = _problem(family_name)
    chunk = _assigned(X, centres)
    for iteration in (0, 1):
        if iteration == 1 and restored_dtype is not None:
            chunk.state[STATE_K] = chunk.state[STATE_K].astype(restored_dtype)
            problems = []
            CheckStateOp(C).run(chunk, problems)
            assert problems == []
        op = EStepOp(family, kernel, KEPT, True, search.payload(), 0, iteration)
        acc = op.new_acc()
        op.run(chunk, acc)
    return chunk.state, acc.stats


@pytest.mark.parametrize("family_name", ["kmeans", "spherical"])
def test_the_state_keeps_two_byte_ids(family_name):
    X, centres, *_ = _problem(family_name)
    chunk = _assigned(X, centres)
    assert chunk.state[STATE_SEED_LABEL].dtype == np.int16
    state, _ = _esteps(family_name)
    assert state[STATE_K].dtype == np.int16
    assert state[STATE_K].shape == (ROWS, KEPT)
    assert state[STATE_K].nbytes == 2 * ROWS * KEPT


@pytest.mark.parametrize("family_name", ["kmeans", "spherical"])
def test_sets_restored_in_four_byte_ids_continue_alike(family_name):
    short_state, short_stats = _esteps(family_name)
    long_state, long_stats = _esteps(family_name, restored_dtype=np.int32)
    assert long_state[STATE_K].dtype == np.int16
    np.testing.assert_array_equal(long_state[STATE_K], short_state[STATE_K])
    for a, b in zip(long_stats.arrays(), short_stats.arrays()):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(long_stats.scal, short_stats.scal)


def test_a_search_restored_with_four_byte_sets_sends_two_byte_ones():
    *_, search, _ = _problem("kmeans")
    state = search.state()
    state["init_sets"] = state["init_sets"].astype(np.int32)
    restored = make_search("estimated", search.config)
    restored.restore(state)
    assert restored.payload().init_sets.dtype == np.int16
    np.testing.assert_array_equal(restored.init_sets, search.init_sets)

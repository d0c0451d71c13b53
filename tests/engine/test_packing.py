"""Operations and accumulators travel packed: arrays out of band whatever protocol Dask negotiated."""

from __future__ import annotations

import pickle

import numpy as np

from daskclust.em.estep_op import EStepAcc
from daskclust.engine.packing import pack, unpack
from daskclust.models import SuffStats
from daskclust.search.pairs import PairStack, PairStats
from daskclust.search.payloads import NeighbourhoodAcc


def accumulator(C=4096, D=2, G=10):
    rng = np.random.default_rng(0)
    keys = np.unique(rng.integers(0, C * C, 500))
    pairs = PairStack(C, 2 * G, False).add(PairStats(keys, rng.random(len(keys)), np.ones(len(keys)),
                                                      rng.random(len(keys)), C, 2 * G, False))
    stats = SuffStats(rng.random(C), rng.random((C, D)), rng.random(C), rng.random(8))
    return EStepAcc(stats, NeighbourhoodAcc(rng.random((C, G)), rng.random((C, G)), pairs))


def test_packed_arrays_leave_the_pickle_and_come_back_writeable():
    acc = accumulator()
    head, buffers = pack(acc)
    assert type(buffers) is list and all(type(b) is np.ndarray for b in buffers)  # Dask sends these raw
    assert len(head) < 4096 < sum(b.nbytes for b in buffers)  # no array inside the pickle
    assert len(pickle.dumps(acc, protocol=4)) > sum(b.nbytes for b in buffers)  # protocol 4 copies them in
    got = unpack((head, [b.copy() for b in buffers]))  # as received: fresh buffers
    np.testing.assert_array_equal(got.stats.S1, acc.stats.S1)
    np.testing.assert_array_equal(got.search.tsum, acc.search.tsum)
    np.testing.assert_array_equal(got.search.pairs.pruned().keys, acc.search.pairs.pruned().keys)
    got.stats.S1 += 1.0  # the merges add in place
    got.search.tcnt += 1.0
    np.testing.assert_array_equal(got.stats.S1, acc.stats.S1 + 1.0)


def test_a_packed_operation_may_carry_a_function():
    """As Dask's own pickling: ops defined in a script, or holding a lambda, travel too."""
    scale = 3.0
    op = {"f": lambda x: scale * x, "centres": np.arange(6.0).reshape(3, 2)}
    got = unpack(pack(op))
    assert got["f"](2.0) == 6.0
    np.testing.assert_array_equal(got["centres"], op["centres"])

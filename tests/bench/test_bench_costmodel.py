"""The cost model's arithmetic and the costmodel suite's pieces at a tiny size (no timings asserted)."""

from __future__ import annotations

import math
import pickle

import numpy as np
import pytest

from daskclust import KMeans
from daskclust.bench import costmodel
from daskclust.bench.prediction import (
    FamilyConstants,
    Line,
    Scenario,
    driver_limit,
    overhead_limit,
    predict,
    prose,
    tree_depth,
    tree_limit,
    tree_seconds,
)
from daskclust.data import as_chunked_data
from daskclust.engine.engine import Engine

FAMILY = FamilyConstants("toy", row_seconds=2e-7, bytes_up=Line(1000.0, 250.0), bytes_root=Line(2000.0, 300.0),
                         bytes_down=Line(500.0, 160.0), merge_seconds=Line(1e-5, 2e-8),
                         driver_seconds=Line(2e-4, 1e-7))
OVERHEAD = Line(3e-3, 2e-3)
SCENARIO = Scenario(rows=1e9, features=8, clusters=5000, workers=12, threads=4, value_bytes=4, store_bandwidth=2e8,
                    network_bandwidth=1e9, hop_latency=5e-4)
RHO = 1.5e-9


def test_tree_depth_follows_the_engines_halving():
    assert [tree_depth(w) for w in (1, 2, 3, 4, 7, 8, 100)] == [0, 1, 1, 2, 2, 3, 6]
    assert all(tree_depth(w) == math.floor(math.log2(w)) for w in range(1, 300))


def test_line_fit_recovers_a_line():
    line = Line.fit([1, 2, 4], [5.0, 7.0, 11.0])
    assert line.intercept == pytest.approx(3.0) and line.slope == pytest.approx(2.0) and line(10) == pytest.approx(23.0)


def test_prediction_is_the_sum_of_its_parts_from_the_constants():
    s, f = SCENARIO, FAMILY
    parts = predict(f, OVERHEAD, RHO, s)
    C, W, T = s.clusters, s.workers, s.threads
    depth = 3  # 12 workers: 11 others -> larger half 6 -> 3 -> 1
    share = 1e9 * 8 * 4 / W  # bytes of rows per worker
    expected = {
        "compute": 1e9 * 2e-7 / (W * T),
        "read": share * RHO / T + share / 2e8,
        "tree": (depth * (2 * (1000 + 250 * C) / 1e9 + 5e-4 + 2 * (1e-5 + 2e-8 * C)) + (2000 + 300 * C) / 1e9 + 5e-4
                 + (500 + 160 * C) / 1e9 + 5e-4 + depth * (2 * (500 + 160 * C) / 1e9 + 5e-4)),
        "driver": 2e-4 + 1e-7 * C,
        "overhead": 3e-3 + 2e-3 * W,
    }
    for name, value in expected.items():
        assert parts[name] == pytest.approx(value, rel=1e-12), name
    assert parts["total"] == pytest.approx(sum(expected.values()), rel=1e-12)


def test_limits_are_where_the_driver_tree_and_overhead_reach_the_compute():
    s, f = SCENARIO, FAMILY
    compute = predict(f, OVERHEAD, RHO, s)["compute"]
    assert f.driver_seconds(driver_limit(f, s)) == pytest.approx(compute)
    assert tree_seconds(f, s, tree_limit(f, s)) == pytest.approx(compute)
    w = overhead_limit(f, OVERHEAD, s)
    assert OVERHEAD(w) == pytest.approx(s.rows * f.row_seconds / (w * s.threads))
    flat = FamilyConstants("flat", 2e-7, FAMILY.bytes_up, FAMILY.bytes_root, FAMILY.bytes_down, FAMILY.merge_seconds,
                           Line(1e-4, 0.0))
    assert driver_limit(flat, s) == float("inf")  # a driver that does not grow with C never limits


def test_prose_states_the_predicted_total_of_each_family():
    text = "\n".join(prose([FAMILY], OVERHEAD, RHO, SCENARIO))
    total = predict(FAMILY, OVERHEAD, RHO, SCENARIO)["total"]
    assert f"predicted iteration {total:.3g} s" in text and "The nearest limit: toy" in text


def test_family_constants_take_r_at_the_models_d_and_lines_over_c():
    D = costmodel.TREE_DIM
    compute = [{"family": "toy", "D": d, "row_seconds": 1e-7 * d} for d in (2, D, 64)]
    tree = [{"family": "toy", "C": C, "bytes_up": 10 + 2 * C, "bytes_root": 20 + 3 * C, "bytes_down": 5 + C,
             "merge": 1e-6 * C, "m_step": 1e-3 + 1e-7 * C, "update": 2e-7 * C} for C in (100, 400, 1600)]
    f = costmodel.family_constants("toy", compute, tree)
    assert f.row_seconds == pytest.approx(1e-7 * D)
    assert f.bytes_up(1000) == pytest.approx(2010) and f.bytes_root(1000) == pytest.approx(3020)
    assert f.driver_seconds(1000) == pytest.approx(1e-3 + 3e-4)


def array_bytes(value) -> int:
    """Bytes of every numpy array reachable through ``value``'s attributes, lists, tuples and dicts."""
    if isinstance(value, np.ndarray):
        return value.nbytes
    if isinstance(value, dict):
        return sum(array_bytes(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return sum(array_bytes(v) for v in value)
    if hasattr(value, "__dict__"):
        return array_bytes(vars(value))
    return 0


def test_the_local_tree_replays_the_engines_pass_and_its_bytes(client):
    """The bytes up the tree the suite reports are the pickled size of the accumulator the
    engine's driver receives: the same pass on 2 one-thread workers and in a LocalTree of 2."""
    rng = np.random.default_rng(1)
    X = (rng.uniform(-10, 10, (16, 3))[rng.integers(0, 16, 3000)] + rng.standard_normal((3000, 3))).astype(np.float32)
    centres = costmodel.random_rows(X, 16)
    estimator = KMeans(16)
    engine_accs, local_accs = [], []
    with Engine(as_chunked_data(X), client) as engine:
        seeding, params = costmodel.seeded(estimator, engine, centres)
        engine_records = costmodel.iterate(lambda op: engine_accs.append(engine.map_reduce(op)) or engine_accs[-1],
                                           estimator, params, iterations=2)
        placed = [np.flatnonzero(engine.placement == worker).tolist() for worker in range(len(engine.shards))]
    tree = costmodel.LocalTree(X, 2)
    assert [[chunk.index for chunk in leaf] for leaf in tree.leaves] == placed
    assert tree.assign(centres) == pytest.approx(seeding.sigma2, rel=1e-9)
    local_records = costmodel.iterate(lambda op: local_accs.append(tree.map_reduce(op)) or local_accs[-1],
                                      estimator, params, iterations=2)
    for engine_acc, local_acc, record in zip(engine_accs, local_accs, engine_records):
        assert record["bytes_root"] == len(pickle.dumps(engine_acc, protocol=5))
        assert np.allclose(engine_acc.stats.S0, local_acc.stats.S0)
        assert np.array_equal(engine_acc.search.pairs.merged().keys, local_acc.search.pairs.merged().keys)
    assert tree.messages[0] == [local_records[-1]["bytes_root"]]
    # The arrays the engine's root sends are the replay's, byte for byte; the pickles may differ by a
    # few dozen bytes: arrays made by freshly compiled numba kernels (no cache yet) carry equal but
    # distinct dtype objects, which pickle spells out each, while arrays received from a worker share one.
    assert array_bytes(engine_accs[-1]) == array_bytes(local_accs[-1]) > 1000
    assert local_records[-1]["bytes_root"] == pytest.approx(engine_records[-1]["bytes_root"], rel=0.02)
    assert len(tree.messages[1]) == 1 and len(tree.merge_seconds) == 1  # one child, one merge


def test_the_dense_constant_is_per_row_centre_and_feature(client, monkeypatch):
    """kappa: one pass's seconds less the empty pass's, divided by rows x centres x features, per D
    (timings not asserted: the figure is the pass's, rescaled)."""
    monkeypatch.setattr(costmodel, "COMPUTE_ROWS", 3000)
    monkeypatch.setattr(costmodel, "COMPUTE_CLUSTERS", 16)
    monkeypatch.setattr(costmodel, "DENSE_DIMS", (4, 8))
    passes = []
    real = costmodel.time_passes

    def recorded(engine, make_op, repeats):
        seconds = real(engine, make_op, repeats)
        passes.append((type(make_op()).__name__, engine.data.n_samples, engine.data.n_features, seconds))
        return seconds

    monkeypatch.setattr(costmodel, "time_passes", recorded)
    dense = costmodel.measure_dense(client)
    assert list(dense) == [4, 8]
    for D, (empty, full) in zip((4, 8), zip(passes[::2], passes[1::2])):
        assert empty[:3] == ("NoOp", 3000, D) and full[:3] == ("NearestCostOp", 3000, D)
        assert dense[D] == pytest.approx((full[3] - empty[3]) / (3000 * 16 * D))
    note = costmodel.dense_note(dense)
    assert all(f"{1e12 * dense[D]:.3g} ps at D = {D}" in note for D in (4, 8))
